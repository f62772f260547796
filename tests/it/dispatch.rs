//! Dispatch and drain through the store, on real files: one block per reference that
//! keeps its content and carries, in `_meta`, the path of the read that produced it;
//! duplicates share a read, failed reads degrade or fail and are read again later,
//! mid-turn messages wait for a drain, and `send` refuses what it cannot resolve.

use sessionstore::store::Drain;
use sessionstore::store::Verify;
use std::path::Path;

use serde_json::Value;
use sessionstore::attachments::AttachmentUri;
use sessionstore::config::Database;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Delivery, NewSession, ProblemKind, Role, ToolsHost};
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{Error, SessionId, Store};

use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{
    Expect, PNG, TestStore, assert_one_line_error, block_json, blocks, check_attachment,
    context_line, context_of, json, new_session, parse_uri, stdout,
};

const TEXT: &[u8] = "first line\nsecond line, café\n".as_bytes();
const BIN: &[u8] = b"\x00\x01\x02\xff\xfe\x80binary\x00tail";

fn memo() -> Memo {
    Memo::new()
}

/// A raw text block: the text, and no `_meta` at all (invariant 10).
fn assert_plain_text(block: &Value, text: &str) {
    assert_eq!(block["type"], "text", "{block}");
    assert_eq!(block["text"], text, "{block}");
    assert!(
        block.get("_meta").is_none(),
        "raw text has no meta: {block}"
    );
}

/// The degradation notice, checked to be a raw text block naming `names` and holding
/// no path: no separator at all, and none of the test's folders.
fn assert_notice(block: &Value, names: &[&str], dir: &Path) -> String {
    assert_eq!(block["type"], "text", "{block}");
    assert!(block.get("_meta").is_none(), "{block}");
    let text = block["text"].as_str().expect("notice text").to_owned();
    for name in names {
        assert!(text.contains(name), "notice names {name:?}: {text}");
    }
    assert!(!text.contains('/'), "the notice holds no path: {text}");
    assert!(!text.contains(&dir.display().to_string()), "{text}");
    text
}

async fn dispatch(h: &TestStore, s: SessionId, mode: Mode) -> sessionstore::Result<Dispatched> {
    h.store()
        .dispatch(s, None, mode, memo())
        .await
        .map(Dispatched::from)
}

/// Puts a file straight into a root, as an older version of the daemon would have.
fn plant(folder: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(folder).unwrap();
    std::fs::write(folder.join(name), bytes).unwrap();
}

#[tokio::test]
async fn image_text_and_binary_blocks_keep_content_and_carry_the_read_path() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let img = h.attach(s, "photo.png", PNG).await;
    let txt = h.attach(s, "notes.txt", TEXT).await;
    let bin = h.attach(s, "data.bin", BIN).await;
    let m = h
        .send_files(s, "what is in these?", &[&img, &txt, &bin])
        .await;

    let d = dispatch(&h, s, Mode::Strict).await.unwrap();
    assert_eq!(d.message.id, m.id);
    let b = blocks(&d);
    assert_eq!(b.len(), 4, "one text block and one block per reference");
    assert_plain_text(&b[0], "what is in these?");
    let folder = h.folder_in(h.configured(), s);
    for (block, file, kind) in [
        (&b[1], &img, "image"),
        (&b[2], &txt, "text"),
        (&b[3], &bin, "blob"),
    ] {
        let (got, path) = check_attachment(block, file);
        assert_eq!(got, kind, "{block}");
        assert_eq!(path, folder.join(&file.name));
    }
    assert_eq!(b[1]["mimeType"], "image/png");
    // The context is about the file, never of it.
    let context = context_of(&b[2]).unwrap();
    assert!(!context.contains("second line"), "{context}");
    assert!(context.starts_with("Attachment context."), "{context}");
}

#[tokio::test]
async fn exactly_one_block_per_reference_in_order_even_for_duplicates() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let a = h.attach(s, "a.txt", b"alpha").await;
    let b = h.attach(s, "b.md", b"# beta").await;
    h.send_files(s, "compare", &[&a, &b, &a]).await;
    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    assert_eq!(out.len(), 4);
    assert_plain_text(&out[0], "compare");
    for (block, file) in out[1..].iter().zip([&a, &b, &a]) {
        check_attachment(block, file);
    }
    assert_eq!(out[1], out[3], "a duplicate gets its own, identical block");

    // An image-only message has no text block at all.
    let img = h.attach(s, "shot.png", PNG).await;
    let m = h.send_files(s, "", &[&img]).await;
    let d = dispatch(&h, s, Mode::Strict).await.unwrap();
    assert_eq!(d.message.id, m.id);
    let out = blocks(&d);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(check_attachment(&out[0], &img).0, "image");
}

#[tokio::test]
async fn a_custom_command_shows_what_was_typed_and_sends_the_expansion() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let txt = h.attach(s, "notes.txt", TEXT).await;
    let expansion = "Summarize the attached notes in three bullet points.";
    let m = h
        .store()
        .send(
            s,
            Outgoing {
                expanded: Some(expansion.to_owned()),
                attach: vec![parse_uri(&txt.uri)],
                ..Outgoing::user("/summarize")
            },
        )
        .await
        .unwrap();
    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    assert_eq!(out.len(), 2);
    assert_plain_text(&out[0], expansion);
    check_attachment(&out[1], &txt);

    let stored = h.store().message(m.id).await.unwrap();
    assert_eq!(stored.display_text, "/summarize");
    assert_eq!(stored.model_text.as_deref(), Some(expansion));
    let session = h.store().session(s).await.unwrap();
    assert_eq!(session.title.as_deref(), Some("/summarize"));

    // A message with no reference is one raw text block with no metadata.
    h.send_files(s, "just words", &[]).await;
    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    assert_eq!(out.len(), 1);
    assert_plain_text(&out[0], "just words");
}

#[tokio::test]
async fn reads_come_from_the_configured_root_then_the_legacy_roots() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let here = h.attach(s, "here.txt", b"configured only").await;
    // Only in the legacy root, as an older daemon left it.
    plant(&h.folder_in(h.legacy(), s), "old.txt", b"legacy only");
    let old = Expect {
        name: "old.txt".into(),
        uri: AttachmentUri::new(s, "old.txt").to_string(),
        bytes: b"legacy only".to_vec(),
        host: h.config.host.clone(),
    };
    // In both: the configured copy wins.
    plant(&h.folder_in(h.legacy(), s), "both.txt", b"legacy copy");
    let both = h.attach(s, "both.txt", b"configured copy").await;
    assert_eq!(both.name, "both.txt");
    h.send_files(s, "three places", &[&here, &old, &both]).await;

    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    assert_eq!(out.len(), 4);
    let configured = h.folder_in(h.configured(), s);
    let legacy = h.folder_in(h.legacy(), s);
    assert_eq!(
        check_attachment(&out[1], &here).1,
        configured.join("here.txt")
    );
    assert_eq!(check_attachment(&out[2], &old).1, legacy.join("old.txt"));
    assert_eq!(
        check_attachment(&out[3], &both).1,
        configured.join("both.txt")
    );

    // Once the configured copy is gone the same reference falls back, and the path
    // moves with the bytes: both come from the legacy read.
    std::fs::remove_file(configured.join("both.txt")).unwrap();
    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    let from_legacy = Expect {
        bytes: b"legacy copy".to_vec(),
        ..both
    };
    assert_eq!(
        check_attachment(&out[3], &from_legacy).1,
        legacy.join("both.txt")
    );
}

#[tokio::test]
async fn duplicate_references_cost_one_read() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let x = h.attach(s, "x.png", PNG).await;
    let y = h.attach(s, "y.txt", b"why").await;
    h.send_files(s, "dupes", &[&x, &x, &x, &y]).await;

    let shared = memo();
    let before = h.reads().total();
    let d = h
        .store()
        .dispatch(s, None, Mode::Strict, shared.clone())
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(h.reads().total() - before, 2, "one read per distinct file");
    let out = blocks(&d);
    assert_eq!(out.len(), 5);
    for block in &out[1..4] {
        check_attachment(block, &x);
    }
    check_attachment(&out[4], &y);
    assert_eq!(shared.len(), 2);

    // The same memo serves the next dispatch of the turn without reading again.
    let before = h.reads().total();
    let again = h
        .store()
        .dispatch(s, None, Mode::Strict, shared)
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(h.reads().total(), before);
    assert_eq!(again.blocks, d.blocks);
}

#[tokio::test]
async fn a_failed_read_is_evicted_so_the_next_dispatch_reads_again() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let ok = h.attach(s, "ok.txt", b"fine").await;
    let late = h.attach(s, "late.txt", b"arrives later").await;
    h.send_files(s, "see both", &[&ok, &late]).await;
    let path = h.folder_in(h.configured(), s).join("late.txt");
    std::fs::remove_file(&path).unwrap();

    let shared = memo();
    let before = h.reads().total();
    let first = blocks(
        &h.store()
            .dispatch(s, None, Mode::Degrade, shared.clone())
            .await
            .map(Dispatched::from)
            .unwrap(),
    );
    // The configured root and the legacy root are both looked at, but that is one
    // read through the resolver for each reference.
    assert_eq!(h.reads().total() - before, 2);
    assert_eq!(first.len(), 3, "{first:?}");
    check_attachment(&first[1], &ok);
    assert_notice(&first[2], &["late.txt"], h.dir.path());
    assert!(shared.contains(&crate::support::parse_uri(&ok.uri)));
    assert!(
        !shared.contains(&crate::support::parse_uri(&late.uri)),
        "a failure is not memoized"
    );

    std::fs::write(&path, b"arrives later").unwrap();
    let before = h.reads().total();
    let second = blocks(
        &h.store()
            .dispatch(s, None, Mode::Degrade, shared.clone())
            .await
            .map(Dispatched::from)
            .unwrap(),
    );
    assert_eq!(
        h.reads().total() - before,
        1,
        "only the failed file is read again"
    );
    assert_eq!(second.len(), 3, "{second:?}");
    assert_eq!(second[1], first[1]);
    assert_eq!(check_attachment(&second[2], &late).1, path);
    assert!(shared.contains(&crate::support::parse_uri(&late.uri)));
}

#[tokio::test]
async fn strict_dispatch_names_the_missing_reference_and_degrading_drops_only_it() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let img = h.attach(s, "photo.png", PNG).await;
    let gone = h.attach(s, "gone report.pdf", b"%PDF-1.4 gone").await;
    let txt = h.attach(s, "notes.txt", TEXT).await;
    let bin = h.attach(s, "data.bin", BIN).await;
    h.send_files(s, "all of them", &[&img, &gone, &txt, &bin])
        .await;
    std::fs::remove_file(h.folder_in(h.configured(), s).join(&gone.name)).unwrap();

    let err = dispatch(&h, s, Mode::Strict).await.unwrap_err().to_string();
    assert!(err.contains(&gone.name), "names the stored name: {err}");
    assert!(err.contains(&gone.uri), "names the uri: {err}");
    assert!(!err.contains('\n'), "{err}");
    for fine in [&img, &txt, &bin] {
        assert!(!err.contains(&fine.uri), "only the failing one: {err}");
    }

    let out = blocks(&dispatch(&h, s, Mode::Degrade).await.unwrap());
    assert_eq!(out.len(), 5, "{out:?}");
    assert_plain_text(&out[0], "all of them");
    assert_eq!(check_attachment(&out[1], &img).0, "image");
    assert_eq!(check_attachment(&out[2], &txt).0, "text");
    assert_eq!(check_attachment(&out[3], &bin).0, "blob");
    assert_notice(&out[4], &["gone report.pdf"], h.dir.path());
    let notices = out
        .iter()
        .filter(|b| b["type"] == "text" && b.get("_meta").is_none())
        .count();
    assert_eq!(notices, 2, "the message text and one notice");
}

#[tokio::test]
async fn mid_turn_messages_wait_for_drain_and_degrade_there() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let keep = h.attach(s, "keep.png", PNG).await;
    let lose = h.attach(s, "lose.txt", b"going away").await;
    let first = h.send_files(s, "first", &[&keep]).await;
    let queued = h
        .store()
        .send(
            s,
            Outgoing {
                attach: vec![parse_uri(&keep.uri), parse_uri(&lose.uri)],
                mid_turn: true,
                ..Outgoing::user("also this")
            },
        )
        .await
        .unwrap();
    assert_eq!(queued.state, Delivery::Queued);
    // `send` validated both; the file goes missing before the drain.
    std::fs::remove_file(h.folder_in(h.configured(), s).join("lose.txt")).unwrap();

    let d = dispatch(&h, s, Mode::Degrade).await.unwrap();
    assert_eq!(
        d.message.id, first.id,
        "dispatch never picks a queued message"
    );
    let err = h
        .store()
        .dispatch(s, Some(queued.id), Mode::Degrade, memo())
        .await
        .map(Dispatched::from)
        .unwrap_err();
    assert!(
        matches!(err, Error::MessageQueued { message } if message == queued.id),
        "{err:?}"
    );

    let drained = h
        .store()
        .drain(s, Mode::Degrade, memo(), Drain::Commit)
        .await
        .unwrap();
    assert_eq!(drained.len(), 1);
    assert_eq!(drained[0].message.id, queued.id);
    let out = blocks(&drained[0].clone().into());
    assert_eq!(out.len(), 3, "{out:?}");
    assert_plain_text(&out[0], "also this");
    check_attachment(&out[1], &keep);
    assert_notice(&out[2], &["lose.txt"], h.dir.path());

    assert_eq!(
        h.store().message(queued.id).await.unwrap().state,
        Delivery::Delivered
    );
    let events = h.store().all_events(s).await.unwrap();
    let delivered: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == "message_delivered")
        .map(|e| &e.payload["id"])
        .collect();
    assert_eq!(delivered, [&Value::String(queued.id.to_string())]);
    assert!(
        h.store()
            .drain(s, Mode::Degrade, memo(), Drain::Commit)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(h.store().queued_messages(s).await.unwrap().is_empty());

    // Delivered now, it is the latest user message.
    let d = dispatch(&h, s, Mode::Degrade).await.unwrap();
    assert_eq!(d.message.id, queued.id);
    assert!(h.store().verify(Verify::Check).await.unwrap().after.ok());
}

#[tokio::test]
async fn a_strict_drain_that_cannot_read_leaves_the_message_queued() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let lose = h.attach(s, "lose.txt", b"going away").await;
    let queued = h
        .store()
        .send(
            s,
            Outgoing {
                attach: vec![parse_uri(&lose.uri)],
                mid_turn: true,
                ..Outgoing::user("queued")
            },
        )
        .await
        .unwrap();
    std::fs::remove_file(h.folder_in(h.configured(), s).join("lose.txt")).unwrap();
    let events_before = h.store().all_events(s).await.unwrap().len();

    let err = h
        .store()
        .drain(s, Mode::Strict, memo(), Drain::Commit)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("lose.txt") && err.contains(&lose.uri), "{err}");
    let still: Vec<_> = h
        .store()
        .queued_messages(s)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(still, [queued.id]);
    assert_eq!(h.store().all_events(s).await.unwrap().len(), events_before);

    // A degrading drain still delivers it, text and notice.
    let drained = h
        .store()
        .drain(s, Mode::Degrade, memo(), Drain::Commit)
        .await
        .unwrap();
    let out = blocks(&drained[0].clone().into());
    assert_eq!(out.len(), 2);
    assert_plain_text(&out[0], "queued");
    assert_notice(&out[1], &["lose.txt"], h.dir.path());
}

#[tokio::test]
async fn display_text_title_and_references_never_hold_a_path() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let img = h.attach(s, "photo.png", PNG).await;
    let txt = h.attach(s, "notes.txt", TEXT).await;
    h.send_files(s, "Look at photo.png please\nand the notes", &[&img, &txt])
        .await;
    h.store()
        .send(
            s,
            Outgoing {
                attach: vec![parse_uri(&txt.uri)],
                mid_turn: true,
                ..Outgoing::user("one more")
            },
        )
        .await
        .unwrap();
    dispatch(&h, s, Mode::Strict).await.unwrap();
    h.store()
        .drain(s, Mode::Strict, memo(), Drain::Commit)
        .await
        .unwrap();
    dispatch(&h, s, Mode::Strict).await.unwrap();

    let session = h.store().session(s).await.unwrap();
    assert_eq!(session.title.as_deref(), Some("Look at photo.png please"));
    let messages = h.store().all_messages(s).await.unwrap();
    let shown: Vec<&str> = messages.iter().map(|m| m.display_text.as_str()).collect();
    assert_eq!(
        shown,
        ["Look at photo.png please\nand the notes", "one more"]
    );
    let dir = h.dir.path().display().to_string();
    for value in [
        serde_json::to_value(&session).unwrap(),
        serde_json::to_value(&messages).unwrap(),
        serde_json::to_value(h.store().all_events(s).await.unwrap()).unwrap(),
    ] {
        let text = value.to_string();
        assert!(!text.contains(&dir), "{text}");
        assert!(!text.contains("\"path\""), "{text}");
    }
    let refs: Vec<Value> = messages[0]
        .refs
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    for r in &refs {
        let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["mimeType", "ordinal", "size", "storedName", "uri"]);
    }
}

#[tokio::test]
async fn sessions_whose_tools_run_elsewhere_are_told_the_path_is_on_the_daemon_host() {
    let h = TestStore::counting().await;
    for tools in [ToolsHost::Local, ToolsHost::Ssh, ToolsHost::Managed] {
        let s = h.session_with(tools).await;
        let f = h.attach(s, "f.txt", b"where am I").await;
        h.send_files(s, "where", &[&f]).await;
        let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
        check_attachment(&out[1], &f);
        let context = context_of(&out[1]).unwrap();
        assert!(context.contains("daemon host"), "{tools}: {context}");
        let elsewhere = context.contains("may not") && context.contains("not where");
        assert_eq!(elsewhere, tools != ToolsHost::Local, "{tools}: {context}");
        if tools == ToolsHost::Local {
            assert!(
                context.contains("Tools running on the daemon host"),
                "{context}"
            );
        }
    }

    // The host is the configured one, not something computed at dispatch.
    let mut config = h.config.clone();
    config.host = "daemon-7.internal".to_owned();
    let other = Store::open(config).await.unwrap();
    let s = h.session_with(ToolsHost::Ssh).await;
    let f = h.attach(s, "g.txt", b"host").await;
    h.send_files(s, "which host", &[&f]).await;
    let d = other
        .dispatch(s, None, Mode::Strict, memo())
        .await
        .map(Dispatched::from)
        .unwrap();
    let line = context_line(context_of(&block_json(&d.blocks[1])).unwrap());
    assert_eq!(line.host, "daemon-7.internal");
}

#[tokio::test]
async fn hidden_characters_in_names_are_escaped_and_printable_unicode_stays() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let upload = "re\u{202E}txt.exe\u{200B} tag\u{E0041} café 日本.txt";
    let f = h.attach(s, upload, b"bidi").await;
    assert!(
        f.name.contains('\u{202E}') && f.name.contains('\u{200B}') && f.name.contains('\u{E0041}'),
        "this test needs a stored name that keeps format characters: {:?}",
        f.name
    );
    h.send_files(s, "odd name", &[&f]).await;
    let out = blocks(&dispatch(&h, s, Mode::Strict).await.unwrap());
    let (_, path) = check_attachment(&out[1], &f);
    assert_eq!(path.file_name().unwrap().to_str(), Some(f.name.as_str()));
    let context = context_of(&out[1]).unwrap();
    for hidden in ['\u{202E}', '\u{200B}', '\u{E0041}'] {
        assert!(!context.contains(hidden), "raw {hidden:?} in {context:?}");
    }
    let lower = context.to_lowercase();
    for escape in ["\\u202e", "\\u200b", "\\udb40\\udc41"] {
        assert!(lower.contains(escape), "{escape} in {context:?}");
    }
    assert!(context.contains("café 日本.txt"), "{context}");
    assert_eq!(context_line(context).name, f.name);

    // The notice and the strict error name it the same careful way.
    std::fs::remove_file(&path).unwrap();
    let out = blocks(&dispatch(&h, s, Mode::Degrade).await.unwrap());
    let notice = assert_notice(&out[1], &["café 日本.txt"], h.dir.path());
    let err = dispatch(&h, s, Mode::Strict).await.unwrap_err().to_string();
    for text in [&notice, &err] {
        for hidden in ['\u{202E}', '\u{200B}', '\u{E0041}'] {
            assert!(!text.contains(hidden), "raw {hidden:?} in {text:?}");
        }
    }
}

#[tokio::test]
async fn send_refuses_bad_references_and_stores_nothing() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let other = h.session_with(ToolsHost::Local).await;
    let mine = h.attach(s, "mine.txt", b"mine").await;
    let theirs = h.attach(other, "theirs.txt", b"theirs").await;
    // A URI that is not one the store could have written never becomes an
    // `AttachmentUri`, so it cannot reach `send` at all.
    for bad in [
        format!("attachment:///{s}/../x"),
        format!("attachment:///{s}/..%2Fx"),
        "file:///etc/passwd".to_owned(),
    ] {
        let refused = AttachmentUri::parse(&bad).unwrap_err();
        assert_eq!(refused.input, bad);
        let err = Error::from(refused);
        assert!(matches!(err, Error::MalformedReference(_)), "{err:?}");
        assert!(err.is_refused());
    }
    let theirs = parse_uri(&theirs.uri);
    let missing = AttachmentUri::new(s, "missing.txt");
    let events_before = h.store().all_events(s).await.unwrap().len();
    for bad in [theirs.clone(), missing.clone()] {
        let err = h
            .store()
            .send(
                s,
                Outgoing {
                    attach: vec![parse_uri(&mine.uri), bad.clone()],
                    ..Outgoing::user("refuse me")
                },
            )
            .await
            .unwrap_err();
        if bad == theirs {
            assert!(
                matches!(&err, Error::ForeignReference { uri, session } if *uri == theirs && *session == s),
                "{err:?}"
            );
        } else {
            assert!(
                matches!(&err, Error::Attachment(a) if a.is_not_found() && a.uri() == Some(&missing)),
                "{err:?}"
            );
        }
        assert!(!err.to_string().contains('\n'), "{err}");
        assert!(h.store().all_messages(s).await.unwrap().is_empty(), "{bad}");
        assert_eq!(
            h.store().all_events(s).await.unwrap().len(),
            events_before,
            "{bad}"
        );
    }
    // An assistant message carries no attachments.
    let err = h
        .store()
        .send(
            s,
            Outgoing {
                role: Role::Assistant,
                attach: vec![parse_uri(&mine.uri)],
                ..Outgoing::user("reply")
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::RoleCannotAttach {
                role: Role::Assistant
            }
        ),
        "{err:?}"
    );
    assert!(h.store().all_messages(s).await.unwrap().is_empty());
    assert!(h.store().all_messages(other).await.unwrap().is_empty());
    assert_eq!(h.store().all_events(s).await.unwrap().len(), events_before);
    assert_eq!(h.store().session(s).await.unwrap().title, None);
}

#[tokio::test]
async fn a_symlink_planted_after_send_is_refused_never_followed() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let a = h.attach(s, "a.txt", b"inside").await;
    h.send_files(s, "read it", &[&a]).await;
    let secret = h.dir.path().join("secret.txt");
    std::fs::write(&secret, b"TOP SECRET").unwrap();
    let planted = h.folder_in(h.configured(), s).join("a.txt");
    std::fs::remove_file(&planted).unwrap();
    std::os::unix::fs::symlink(&secret, &planted).unwrap();
    // A regular copy in a legacy root must not stand in for the refused one.
    plant(&h.folder_in(h.legacy(), s), "a.txt", b"legacy copy");

    let before = h.reads().total();
    let out = blocks(&dispatch(&h, s, Mode::Degrade).await.unwrap());
    assert_eq!(h.reads().total() - before, 1);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_plain_text(&out[0], "read it");
    assert_notice(&out[1], &["a.txt"], h.dir.path());
    let all = serde_json::to_string(&out).unwrap();
    use base64::Engine;
    for leaked in [&b"TOP SECRET"[..], b"legacy copy"] {
        let b64 = base64::engine::general_purpose::STANDARD.encode(leaked);
        assert!(!all.contains(&b64), "{all}");
        assert!(!all.contains(std::str::from_utf8(leaked).unwrap()), "{all}");
    }
    let err = dispatch(&h, s, Mode::Strict).await.unwrap_err().to_string();
    assert!(err.contains("symlink"), "{err}");
}

#[tokio::test]
async fn every_kind_of_block_round_trips_as_an_acp_content_block() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Managed).await;
    let img = h.attach(s, "p.png", PNG).await;
    let txt = h.attach(s, "t.json", b"{\"k\": 1}").await;
    let bin = h.attach(s, "b.bin", BIN).await;
    let gone = h.attach(s, "gone.txt", b"x").await;
    h.send_files(s, "kinds", &[&img, &txt, &bin, &gone]).await;
    std::fs::remove_file(h.folder_in(h.configured(), s).join("gone.txt")).unwrap();
    let d = dispatch(&h, s, Mode::Degrade).await.unwrap();
    let kinds: Vec<String> = d
        .blocks
        .iter()
        .map(|b| {
            // `block_json` asserts the serde round trip; this checks it once more by hand.
            let value = block_json(b);
            let back: agent_client_protocol_schema::v1::ContentBlock =
                serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&back).unwrap(), value);
            value["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(kinds, ["text", "image", "resource", "resource", "text"]);
}

// The command line: the same flow through the real binary.

#[test]
fn cli_attach_send_dispatch_prints_acp_blocks_with_paths() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let sid = new_session(&t);
    let uploads = d.join("uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::write(uploads.join("photo.png"), PNG).unwrap();
    std::fs::write(uploads.join("my notes.txt"), TEXT).unwrap();
    let png = uploads.join("photo.png");
    let txt = uploads.join("my notes.txt");
    let attached = json(&t.run(&[
        "attach",
        "--session",
        &sid,
        "--json",
        png.to_str().unwrap(),
        txt.to_str().unwrap(),
    ]));
    let attached = attached.as_array().unwrap();
    assert_eq!(attached.len(), 2);
    let host = sessionstore::config::host_name();
    let expect: Vec<Expect> = attached
        .iter()
        .zip([PNG, TEXT])
        .map(|(a, bytes)| {
            let mut keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["mimeType", "name", "size", "uri"]);
            assert_eq!(a["size"], bytes.len());
            Expect {
                name: a["name"].as_str().unwrap().to_owned(),
                uri: a["uri"].as_str().unwrap().to_owned(),
                bytes: bytes.to_vec(),
                host: host.clone(),
            }
        })
        .collect();
    assert_eq!(expect[1].name, "my notes.txt");

    let sent = json(&t.run(&[
        "send",
        "--session",
        &sid,
        "--text",
        "describe",
        "--attach",
        &expect[0].uri,
        "--attach",
        &expect[1].uri,
        "--json",
    ]));
    let mid = sent["id"].as_str().unwrap().to_owned();
    // A later message, so `--message` has to pick the right one.
    let later = t.run(&["send", "--session", &sid, "--text", "later"]);
    assert!(later.status.success());
    let later_id = stdout(&later).trim().to_owned();

    let out = json(&t.run(&[
        "dispatch",
        "--session",
        &sid,
        "--message",
        &mid,
        "--format",
        "acp",
    ]));
    let out: Vec<Value> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let block: agent_client_protocol_schema::v1::ContentBlock =
                serde_json::from_value(b.clone()).unwrap();
            block_json(&block)
        })
        .collect();
    assert_eq!(out.len(), 3);
    assert_plain_text(&out[0], "describe");
    let folder = d.join("attachments").join(&sid);
    for (block, e) in out[1..].iter().zip(&expect) {
        assert_eq!(check_attachment(block, e).1, folder.join(&e.name));
    }

    // The plain `send` output is accepted back just as well.
    let out = json(&t.run(&["dispatch", "--session", &sid, "--message", &later_id]));
    assert_eq!(out, serde_json::json!([{"type": "text", "text": "later"}]));
}

#[test]
fn cli_send_refusals_are_one_line_and_store_nothing() {
    let t = TestStore::empty();
    let sid = new_session(&t);
    let events = || {
        stdout(&t.run(&["events", "--session", &sid]))
            .lines()
            .count()
    };
    let before = events();
    for bad in [
        format!("attachment:///{sid}/../x"),
        format!("attachment:///{sid}/missing.txt"),
        format!("attachment:///{}/x.txt", SessionId::new()),
    ] {
        let err = assert_one_line_error(&t.run(&[
            "send",
            "--session",
            &sid,
            "--text",
            "x",
            "--attach",
            &bad,
        ]));
        assert!(err.contains(&bad), "{err}");
        let shown = json(&t.run(&["session", "show", &sid, "--json"]));
        assert_eq!(shown["messages"], serde_json::json!([]));
        assert_eq!(events(), before);
    }
}

#[tokio::test]
async fn a_reference_edited_behind_the_stores_back_never_reaches_another_session() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let other = h.session_with(ToolsHost::Local).await;
    let mine = h.attach(s, "mine.txt", b"mine").await;
    let theirs = h.attach(other, "theirs.txt", b"THEIR SECRET").await;
    h.send_files(s, "first", &[&mine]).await;
    h.send_files(s, "second", &[&mine]).await;
    let Database::Sqlite(path) = &h.config.database else {
        panic!("the harness's database is a file");
    };
    let conn = rusqlite::Connection::open(path).unwrap();
    let first_id: String = conn
        .query_row("SELECT id FROM messages WHERE seq = 1", [], |r| r.get(0))
        .unwrap();
    let second_id: String = conn
        .query_row("SELECT id FROM messages WHERE seq = 2", [], |r| r.get(0))
        .unwrap();
    let traversal = format!("attachment:///{s}/..%2F{other}%2Ftheirs.txt");
    for (id, uri) in [(&first_id, &theirs.uri), (&second_id, &traversal)] {
        conn.execute(
            "UPDATE message_refs SET uri = ?1 WHERE message_id = ?2",
            [uri.as_str(), id.as_str()],
        )
        .unwrap();
    }

    // A row whose URI does not parse was not written by this store: reading it is
    // refused like any other such row, before any file is opened.
    let err = h
        .store()
        .dispatch(s, Some(second_id.parse().unwrap()), Mode::Degrade, memo())
        .await
        .map(Dispatched::from)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::DamagedRow {
                action: "read references",
                ..
            }
        ),
        "{err:?}"
    );
    for id in [&first_id] {
        let d = h
            .store()
            .dispatch(s, Some(id.parse().unwrap()), Mode::Degrade, memo())
            .await
            .map(Dispatched::from)
            .unwrap();
        let out = blocks(&d);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_notice(&out[1], &["mine.txt"], h.dir.path());
        let all = serde_json::to_string(&out).unwrap();
        assert!(!all.contains("THEIR SECRET"), "{all}");
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"THEIR SECRET");
        assert!(!all.contains(&b64), "{all}");
    }
    // The event log still says what was sent, so verify catches the edit (naming the
    // row that does not parse, and still checking the rest).
    let report = h.store().verify(Verify::Check).await.unwrap().after;
    assert!(!report.ok());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind() == ProblemKind::UnreadableRows
                && p.session() == Some(s)
                && p.to_string().contains("do not parse")),
        "{report:?}"
    );
    assert!(
        !report
            .problems
            .iter()
            .any(|p| p.kind() == ProblemKind::StrayRows),
        "{report:?}"
    );
    // A restore reads the rows, and the one that does not parse refuses it before
    // any file is read; `verify --repair` makes the rows again from the log, after
    // which both messages have their own file again.
    let err = h.store().collect_restore(s).await.unwrap_err();
    assert!(matches!(err, Error::DamagedRow { .. }), "{err:?}");
    drop(conn);
    let repaired = h.store().verify(Verify::Repair).await.unwrap();
    assert!(repaired.ok(), "{:?}", repaired.after.problems);
    assert_eq!(repaired.rebuilt, [s]);
    let restored = h.store().collect_restore(s).await.unwrap();
    assert_eq!(restored.messages.len(), 2);
    for m in &restored.messages {
        let all = serde_json::to_string(&m.blocks).unwrap();
        assert!(
            all.contains("mine.txt") && !all.contains("theirs.txt"),
            "{all}"
        );
        assert!(!all.contains("THEIR SECRET"), "{all}");
    }
}

#[tokio::test]
async fn an_svg_reaches_the_model_as_text_and_blank_text_gets_no_block() {
    let t = crate::support::TestStore::new().await;
    let s = t
        .store()
        .create_session(NewSession::default())
        .await
        .unwrap();
    let svg = "<svg xmlns='http://www.w3.org/2000/svg'><circle r='1'/></svg>";
    let stored = t
        .store()
        .attach_one(s.id, "drawing.svg".into(), svg.as_bytes().to_vec())
        .await
        .unwrap();
    t.store()
        .send(
            s.id,
            sessionstore::store::Outgoing {
                attach: vec![stored.uri.clone()],
                ..sessionstore::store::Outgoing::user("   ")
            },
        )
        .await
        .unwrap();
    let d = t
        .store()
        .dispatch(
            s.id,
            None,
            sessionstore::dispatch::Mode::Strict,
            sessionstore::dispatch::Memo::new(),
        )
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(d.blocks.len(), 1, "no block for whitespace-only text");
    let json = serde_json::to_value(&d.blocks[0]).unwrap();
    assert_eq!(json["resource"]["text"], svg);
    assert_eq!(json["resource"]["mimeType"], "image/svg+xml");
}
