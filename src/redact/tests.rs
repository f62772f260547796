//! Each kind with a credential made fresh for the run in its issuer's format (no fixed
//! example a rule could be fitted to), alone, inside prose, and split across streamed
//! chunks; and ordinary text that must survive byte for byte.

use super::*;

use super::fresh::{Rng, fresh};

#[test]
fn every_kind_is_found_alone_and_in_prose_and_only_the_secret_goes() {
    let mut rng = Rng::new();
    for kind in Kind::ALL {
        for _ in 0..20 {
            let (secret, around) = fresh(kind, &mut rng);
            let text = format!("here it is: {around}\nand the rest of the line.");
            let found = find(&text);
            assert_eq!(found.len(), 1, "{kind}: {text}");
            assert_eq!(found[0].kind, kind, "{text}");
            assert_eq!(&text[found[0].range.clone()], secret, "{kind}");
            let out = redact(&text);
            assert!(!out.contains(&secret), "{kind}: {out}");
            assert!(out.contains(&format!("[REDACTED:{}]", kind.id())), "{out}");
            assert!(
                out.starts_with("here it is: ") && out.ends_with("\nand the rest of the line.")
            );
            let kept = around.replace(&secret, &format!("[REDACTED:{}]", kind.id()));
            assert!(out.contains(&kept), "{kind}: only the secret goes: {out}");
        }
    }
}

#[test]
fn anthropics_keys_are_not_taken_for_openais() {
    let mut rng = Rng::new();
    let (key, _) = fresh(Kind::AnthropicApiKey, &mut rng);
    assert_eq!(redact(&key), "[REDACTED:anthropic-api-key]");
}

#[test]
fn ordinary_text_survives_byte_for_byte() {
    let texts = [
        "01a24c59-bf0b-77c9-940d-a3f39f842e3c",
        "commit 202eb88a1c9f4e0b2d7c6e5f4a3b2c1d0e9f8a7b",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "aGVsbG8gd29ybGQsIHRoaXMgaXMgYmFzZTY0IHRoYXQgaXMgbm90IGEga2V5Cg==",
        "Please enter your password, then press enter.",
        "see https://example.com/docs/page?x=1#part and ssh://git@example.com/repo.git",
        "http://localhost:8080/path and user@example.com",
        "the task-scheduler and sk-learn are not keys; nor is AKIA alone",
        "password: hunter2 is prose, not a URL",
        "café, naïve, 日本語, emoji 🎉",
        "",
    ];
    for text in texts {
        assert!(find(text).is_empty(), "{text}: {:?}", find(text));
        assert!(matches!(redact(text), Cow::Borrowed(t) if t == text));
    }
}

#[test]
fn a_secret_split_across_streamed_chunks_is_found_whole() {
    let mut rng = Rng::new();
    for kind in Kind::ALL {
        let (secret, around) = fresh(kind, &mut rng);
        let text = format!(
            "{}{around} and then more text{}",
            "x ".repeat(9000),
            " y".repeat(9000)
        );
        let whole = redact(&text).into_owned();
        // Every place the secret could be cut, in chunks of a few sizes.
        for size in [1, 7, 64, 1000, 5000] {
            let mut stream = Stream::default();
            let mut out = String::new();
            let mut at = 0;
            while at < text.len() {
                let mut end = (at + size).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                out.push_str(&stream.push(&text[at..end]));
                at = end;
            }
            out.push_str(&stream.finish());
            assert_eq!(out, whole, "{kind}, chunks of {size}");
            assert!(!out.contains(&secret));
        }
    }
}

#[test]
fn a_stream_holds_back_at_most_the_longest_secret() {
    let mut stream = Stream::default();
    let mut written = 0;
    for _ in 0..100 {
        written += stream.push(&"word ".repeat(1000)).len();
    }
    assert!(
        100 * 5000 - written < 2 * LONGEST,
        "held back {}",
        100 * 5000 - written
    );
    assert_eq!(written + stream.finish().len(), 100 * 5000);
}

#[test]
fn a_private_key_cut_short_is_still_redacted() {
    let mut rng = Rng::new();
    let (key, _) = fresh(Kind::PrivateKey, &mut rng);
    let cut = &key[..key.len() / 2];
    assert_eq!(redact(cut), "[REDACTED:private-key]");
}

/// The recorder's view: a message streamed as JSON chunks over several batches, a
/// secret cut between two of them, comes out as the same chunks (one out for one in,
/// plus a chunk of its own for a tail that ends with a later batch), whose texts join
/// into the whole message redacted; everything else is redacted whole.
#[test]
fn streams_redact_a_message_across_batches_and_everything_else_whole() {
    use serde_json::{Value, json};
    let chunk = |text: &str| {
        json!({"sessionUpdate": "agent_message_chunk",
        "messageId": "m1", "content": {"type": "text", "text": text}})
    };
    let mut rng = Rng::new();
    for kind in Kind::ALL {
        let (secret, around) = fresh(kind, &mut rng);
        let text = format!(
            "{} before {around} after {}",
            "a ".repeat(3000),
            "b ".repeat(50)
        );
        let mid = text.find(&secret).expect("the secret is in it") + secret.len() / 2;
        let pieces: Vec<&str> = vec![&text[..mid - 10], &text[mid - 10..mid], &text[mid..]];
        let mut streams = Streams::<Value>::default();
        let mut stored = Vec::new();
        for piece in &pieces {
            let (out, added) = streams.pass(vec![chunk(piece)]);
            assert_eq!(out.len(), 1 + added);
            stored.extend(out);
        }
        // A tool call ends the message; its title is redacted whole.
        let call = json!({"sessionUpdate": "tool_call", "toolCallId": "c",
            "title": format!("run {around}"), "rawInput": {"uri": "x", "data": around}});
        let (out, added) = streams.pass(vec![call]);
        assert_eq!(added, 1, "the tail went into a chunk of its own");
        stored.extend(out);
        let joined: String = stored[..stored.len() - 1]
            .iter()
            .map(|c| c["content"]["text"].as_str().expect("a chunk's text"))
            .collect();
        assert_eq!(joined, redact(&text), "{kind}");
        assert!(
            stored
                .iter()
                .all(|c| c["messageId"] == "m1" || c["toolCallId"] == "c")
        );
        let call = stored.last().expect("the call");
        assert!(!call["title"].as_str().unwrap().contains(&secret), "{kind}");
        // A `data` beside no MIME type is not inline content: text, redacted.
        assert!(!call["rawInput"]["data"].as_str().unwrap().contains(&secret));
    }
}

#[test]
fn inline_base64_uris_and_resource_names_are_not_scanned() {
    use serde_json::json;
    let mut rng = Rng::new();
    let (_, key) = fresh(Kind::AwsAccessKeyId, &mut rng);
    let mut block = json!({"type": "resource_link", "uri": format!("file:///{key}"),
        "name": key, "mimeType": "text/plain", "data": key, "description": key});
    assert!(value(&mut block));
    assert_eq!(block["uri"], format!("file:///{key}"));
    assert_eq!(block["name"], key);
    assert_eq!(block["data"], key);
    assert_eq!(block["description"], "[REDACTED:aws-access-key-id]");
}

/// `Store::record`'s view of an `UpdateSource`: each batch held until the next is redacted, so a message the
/// next batch ends gets its tail in its own last chunk, and no chunk is ever added.
#[test]
fn a_held_batch_takes_the_tail_of_the_message_the_next_one_ends() {
    use serde_json::{Value, json};
    let chunk = |text: &str| {
        json!({"sessionUpdate": "agent_thought_chunk",
        "content": {"type": "text", "text": text}})
    };
    let mut rng = Rng::new();
    let (secret, around) = fresh(Kind::GithubToken, &mut rng);
    let text = format!("thinking about {around} now");
    let mid = text.len() / 2;
    let mut streams = Streams::<Value>::default();
    let mut held = Vec::new();
    let mut written = Vec::new();
    for batch in [
        vec![chunk(&text[..mid])],
        vec![chunk(&text[mid..])],
        vec![json!({"sessionUpdate": "plan", "entries": []})],
    ] {
        let (next, added) = streams.pass_after(&mut held, batch);
        assert_eq!(added, 0);
        written.extend(std::mem::replace(&mut held, next));
    }
    streams.end(&mut held);
    written.extend(held);
    assert_eq!(written.len(), 3, "one update out for one in");
    assert_eq!(written[0]["content"]["text"], "");
    assert_eq!(written[1]["content"]["text"], redact(&text).as_ref());
    assert!(!written[1].to_string().contains(&secret));
}

/// `redact` counts what it replaced from the marks it wrote: each kind's mark is read
/// back as that kind, a mark of no known kind and an unclosed one as nothing.
#[test]
fn the_marks_a_redaction_wrote_are_counted_by_kind() {
    let mut rng = Rng::new();
    let mut text = String::from("[REDACTED:nonsense] before ");
    for kind in Kind::ALL {
        let (_, around) = fresh(kind, &mut rng);
        text.push_str(&format!("{around} then "));
    }
    let redacted = redact(&text);
    let found: Vec<Kind> = marks(&redacted).collect();
    assert_eq!(found, Kind::ALL);
    assert_eq!(marks("[REDACTED:jwt").count(), 0);
}
