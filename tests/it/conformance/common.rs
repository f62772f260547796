//! Helpers the conformance files share: a new session and a seeded one, what an
//! attachment block must hold (also once moved to another session) and the paths a
//! restore gives for them, a history's entry ids, and an export through the binary.
//! They only call the public store or the binary; none of them checks anything an
//! engine promises.

use std::path::{Path, PathBuf};
use std::process::Output;

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::model::{NewSession, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::{MessageId, SessionId, Store};

use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{Expect, HOST, stderr};

/// A new session's id.
pub async fn session(store: &Store, tools: ToolsHost) -> SessionId {
    store
        .create_session(NewSession {
            tools_host: tools,
            ..NewSession::default()
        })
        .await
        .expect("a session is created")
        .id
}

/// What an attachment block for `name` of `session` must hold, as a store opened
/// through a `TestStore` (host [`HOST`]) gives it.
pub fn expect(session: SessionId, name: &str, bytes: &[u8]) -> Expect {
    Expect {
        name: name.to_owned(),
        uri: sessionstore::oracle::expected_uri(session, name),
        bytes: bytes.to_vec(),
        host: HOST.to_owned(),
    }
}

/// The ids of a session's messages and recorded items, in history order: an import
/// keeps the session's id (with `--keep-id`) and gives these new ones.
pub async fn entry_ids(store: &Store, s: SessionId) -> Vec<String> {
    let messages = store.all_messages(s).await.expect("the messages read");
    let items = store.all_items(s).await.expect("the items read");
    let mut entries: Vec<(i64, String)> = messages
        .iter()
        .map(|m| (m.seq, m.id.to_string()))
        .chain(items.iter().map(|i| (i.seq, i.id.to_string())))
        .collect();
    entries.sort();
    entries.into_iter().map(|(_, id)| id).collect()
}

/// `text` with each of `ids` named by its place in the history (`<ENTRY n>`).
pub fn ids_named(text: &str, ids: &[String]) -> String {
    ids.iter()
        .enumerate()
        .fold(text.to_owned(), |text, (i, id)| {
            text.replace(id.as_str(), &format!("<ENTRY {i}>"))
        })
}

/// Exports `session` to `archive` through `run` (the binary on some store), which
/// must succeed; what it printed.
pub fn export(run: impl Fn(&[&str]) -> Output, session: &str, archive: &Path) -> String {
    let archive = archive.to_str().expect("a UTF-8 archive path");
    let out = run(&["export", "--session", session, "--out", archive]);
    assert!(out.status.success(), "export: {}", stderr(&out));
    crate::support::stdout(&out)
}

/// `e` as it must appear in session `to`'s blocks (a fork's or an import's).
pub fn moved(e: &Expect, to: SessionId) -> Expect {
    Expect {
        name: e.name.clone(),
        uri: sessionstore::oracle::expected_uri(to, &e.name),
        bytes: e.bytes.clone(),
        host: e.host.clone(),
    }
}

/// Restores `session` and checks every attachment block against `files` (matched by
/// name), returning the paths given to the model.
pub async fn restored_paths(store: &Store, session: SessionId, files: &[Expect]) -> Vec<PathBuf> {
    let restored = store
        .collect_restore(session)
        .await
        .expect("the session restores");
    let mut paths = vec![];
    for block in restored.messages.iter().flat_map(|m| &m.blocks) {
        let json = crate::support::block_json(block);
        let Some(context) = crate::support::context_of(&json) else {
            continue;
        };
        let name = crate::support::context_line(context).name;
        let expect = files.iter().find(|f| f.name == name).expect("a known file");
        paths.push(crate::support::check_attachment(&json, expect).1);
    }
    paths
}

/// One line of what `record` reads, as the update it parses to for `session`.
pub fn parse_update(line: &str, session: SessionId) -> SessionUpdate {
    match sessionstore::turns::parse_line(line, session).expect("a valid update") {
        sessionstore::turns::Update::Known(update) => update,
        opaque => panic!("a known update, not {opaque:?}"),
    }
}

/// A session with an image and a text file in the configured root, a file only in
/// `legacy_root` (as after a move of the store), two user messages with a recorded
/// agent reply between them, and a queued mid-turn message. Each text has a word no
/// other text has. Returns the session, what its files' blocks must hold, and its
/// two delivered messages.
pub async fn seeded(store: &Store, legacy_root: &Path) -> (SessionId, Vec<Expect>, Vec<MessageId>) {
    let s = session(store, ToolsHost::Local).await;
    let files = vec![
        expect(s, "café chart.png", crate::support::PNG),
        expect(s, "notes 日本.txt", b"kiwi notes"),
        expect(s, "old.txt", b"legacy bytes"),
    ];
    let mut uris = Vec::new();
    for f in &files[..2] {
        let stored = store
            .attach_one(s, f.name.clone(), f.bytes.clone())
            .await
            .expect("the file is stored");
        uris.push(stored.uri);
    }
    let folder = legacy_root.join(s.to_string());
    std::fs::create_dir_all(&folder).expect("the legacy folder is made");
    std::fs::write(folder.join(&files[2].name), &files[2].bytes).expect("the legacy file");
    let mut first = Outgoing::user("compare the mango chart");
    first.attach = uris;
    let first = store.send(s, first).await.expect("the first message");
    store
        .record(
            s,
            vec![parse_update(
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"the papaya line rises"}}"#,
                s,
            )],
        )
        .await
        .expect("the reply is recorded");
    let mut second = Outgoing::user("and the old durian notes?");
    second.attach = vec![sessionstore::attachments::AttachmentUri::new(
        s,
        &files[2].name,
    )];
    let second = store.send(s, second).await.expect("the second message");
    let mut queued = Outgoing::user("queued lychee");
    queued.mid_turn = true;
    store.send(s, queued).await.expect("the queued message");
    (s, files, vec![first.id, second.id])
}
