//! Helpers the conformance files share: a new session, what an attachment block
//! must hold, a history's entry ids, and an export through the binary. They only
//! call the public store or the binary; none of them checks anything an engine
//! promises.

use std::path::Path;
use std::process::Output;

use sessionstore::model::ToolsHost;
use sessionstore::{SessionId, Store};

use crate::support::{Expect, stderr};

/// A new session's id.
pub async fn session(store: &Store, tools: ToolsHost) -> SessionId {
    store
        .create_session(None, tools)
        .await
        .expect("a session is created")
        .id
}

/// What an attachment block for `name` of `session` must hold, as a store opened
/// through `Backend::config` (host `test-host`) gives it.
pub fn expect(session: SessionId, name: &str, bytes: &[u8]) -> Expect {
    Expect {
        name: name.to_owned(),
        uri: sessionstore::oracle::expected_uri(session, name),
        bytes: bytes.to_vec(),
        host: "test-host".to_owned(),
    }
}

/// The ids of a session's messages and recorded items, in history order: an import
/// keeps the session's id (with `--keep-id`) and gives these new ones.
pub async fn entry_ids(store: &Store, s: SessionId) -> Vec<String> {
    let messages = store.messages(s).await.expect("the messages read");
    let items = store.items(s).await.expect("the items read");
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
