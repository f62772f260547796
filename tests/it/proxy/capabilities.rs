//! What an attachment becomes for an agent that can take less: one that reads the
//! path context in `_meta` gets no text block for it; one without image support gets
//! an image's context alone; one without embedded context gets a `resource_link` to
//! the file's live path, the context in its `_meta`.

use agent_client_protocol::v1::schema::{PromptRequest, StopReason};
use serde_json::Value;
use sessionstore::SessionId;

use super::{
    DATA, NOTES, Seen, Setup, assert_schema_accepts, attachments, call, client, data_block,
    image_block, kinds, notes_block, open_session, store_id, text_block,
};
use crate::support::{PNG, check_attachment, context_line, context_of};

/// One session through a proxy whose agent has `flags`, prompted with text, an image,
/// a text file and a binary file: the session, and the blocks the agent got.
async fn prompted(s: &Setup, flags: &[&str]) -> (SessionId, Vec<Value>) {
    let seen = Seen::default();
    let mut proxy = s.proxy(flags);
    let before = s.report.prompts().len();
    let (id, stop) = client(&mut proxy, &seen, {
        let cwd = s.cwd.clone();
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            let prompt = vec![
                text_block("Three files:"),
                image_block(),
                notes_block(),
                data_block(),
            ];
            let answer = call(&cx, PromptRequest::new(id.clone(), prompt)).await?;
            Ok((id, answer.stop_reason))
        }
    })
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert!(proxy.wait().success());
    assert_schema_accepts(&seen, &s.report);
    let mut prompts = s.report.prompts();
    assert_eq!(prompts.len(), before + 1);
    (store_id(&id), prompts.pop().expect("the prompt"))
}

#[tokio::test]
async fn an_agent_that_reads_the_context_key_gets_no_text_block_for_it() {
    let s = Setup::new();
    let (session, blocks) = prompted(&s, &["--announce-meta"]).await;
    assert_eq!(
        kinds(&blocks),
        ["text", "image", "resource", "resource"],
        "{blocks:#?}"
    );
    assert_eq!(blocks[0]["text"], "Three files:");
    let folder = s.root().join(session.to_string());
    for (block, expect) in blocks[1..].iter().zip(attachments(session)) {
        let (_, path) = check_attachment(block, &expect);
        assert!(path.starts_with(&folder), "{path:?}");
    }
}

#[tokio::test]
async fn an_agent_without_images_gets_an_images_context_alone() {
    let s = Setup::new();
    let (session, blocks) = prompted(&s, &["--no-image"]).await;
    assert_eq!(
        kinds(&blocks),
        ["text", "text", "text", "resource", "text", "resource"],
        "{blocks:#?}"
    );
    // The image: its context, as a text block of its own, and nothing else.
    let context = blocks[1]["text"].as_str().expect("text");
    let line = context_line(context);
    assert_eq!(line.name, "attachment.png");
    assert_eq!(line.uri, attachments(session)[0].uri);
    assert_eq!(std::fs::read(&line.path).expect("the path reads"), PNG);
    assert!(context_of(&blocks[1]).is_none());
    // The files as usual: context before each, and in its `_meta`.
    for (i, expect) in [3, 5]
        .into_iter()
        .zip(attachments(session).into_iter().skip(1))
    {
        check_attachment(&blocks[i], &expect);
        assert_eq!(blocks[i - 1]["text"].as_str(), context_of(&blocks[i]));
    }
}

#[tokio::test]
async fn an_agent_without_embedded_context_gets_a_link_to_the_live_file() {
    let s = Setup::new();
    let (session, blocks) = prompted(&s, &["--no-embedded"]).await;
    assert_eq!(
        kinds(&blocks),
        [
            "text",
            "text",
            "image",
            "text",
            "resource_link",
            "text",
            "resource_link"
        ],
        "{blocks:#?}"
    );
    let [png, notes, data] = attachments(session);
    check_attachment(&blocks[2], &png);
    let folder = s.root().join(session.to_string());
    for (i, expect, bytes) in [(4, notes, NOTES.as_bytes()), (6, data, DATA)] {
        let link = &blocks[i];
        let context = context_of(link).unwrap_or_else(|| panic!("no context in {link}"));
        assert_eq!(blocks[i - 1]["text"].as_str(), Some(context));
        let line = context_line(context);
        assert_eq!(line.name, expect.name);
        assert_eq!(line.uri, expect.uri);
        assert_eq!(link["name"], expect.name.as_str());
        assert_eq!(link["mimeType"], line.mime_type.as_str());
        assert_eq!(link["size"], bytes.len());
        // The link is the live file the context names, and it holds the bytes.
        let url = link["uri"].as_str().expect("a uri");
        let path = url.strip_prefix("file://").expect("a file:// link");
        let path = percent_encoding::percent_decode_str(path)
            .decode_utf8()
            .expect("a UTF-8 path");
        assert_eq!(path, line.path);
        assert!(std::path::Path::new(&*path).starts_with(&folder), "{path}");
        assert_eq!(std::fs::read(&*path).expect("the linked file reads"), bytes);
    }
}
