//! Snapshots of what the model sees for the frozen fixtures (ACP blocks, and both
//! OpenAI requests; for v2's recorded turn also the `acp-updates` lines), with the
//! temporary root redacted to `<ROOT>`, so any change in model-bound content shows up
//! as a reviewed diff. `SESSIONSTORE_BLESS=1 cargo test` rewrites them.

use std::path::{Path, PathBuf};

use sessionstore::attachments::Roots;
use sessionstore::{Config, SessionId, Store};

use crate::restored::CollectRestore;
use crate::support::{V2_RESTORE_SNAPSHOTS, copy_tree, restore_text, v1_restore_snapshots};

/// Compares `actual` with the stored snapshot `name`, or writes it when blessing.
fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/snapshots")
        .join(name);
    if std::env::var_os("SESSIONSTORE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("no snapshot {name}: run with SESSIONSTORE_BLESS=1"));
    assert!(
        expected == actual,
        "snapshot {name} differs; if the change is intended, re-bless with \
         SESSIONSTORE_BLESS=1 and review the diff\n--- expected\n{expected}\n--- actual\n{actual}"
    );
}

/// A store on a copy of fixture `version` under `root`, and its session.
async fn fixture_store(version: &str, root: &Path) -> (Store, SessionId) {
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(version),
        root,
    );
    let sid: SessionId = std::fs::read_to_string(root.join("session-id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let store = Store::open(Config {
        database: root.join("sessions.db").into(),
        roots: Roots {
            configured: root.join("attachments"),
            legacy: vec![root.join("legacy")],
        },
        host: "snapshot-host".into(),
        sharing: Default::default(),
        key: None,
        redaction: Default::default(),
    })
    .await
    .unwrap();
    (store, sid)
}

#[tokio::test]
async fn what_the_model_sees_for_the_v1_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (store, sid) = fixture_store("v1", &root).await;
    let restored = store.collect_restore(sid).await.unwrap();
    let [acp, chat, responses] = v1_restore_snapshots(&restored).map(|(name, value)| {
        let text = serde_json::to_string_pretty(&value).unwrap();
        (name, text.replace(root.to_str().unwrap(), "<ROOT>") + "\n")
    });
    assert!(
        acp.1.contains("<ROOT>/attachments/"),
        "paths were redacted, not lost"
    );
    assert!(
        acp.1.contains("<ROOT>/legacy/"),
        "the legacy read is reported as such"
    );
    for (name, text) in [acp, chat, responses] {
        check(name, &text);
    }
}

/// The v2 fixture's recorded turn as `restore` streams it in each format: the same
/// writers the binary uses, over the same stream.
#[tokio::test]
async fn what_a_restore_prints_for_the_v2_fixture_and_its_recorded_turn() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (store, sid) = fixture_store("v2", &root).await;
    let redact = |text: &str| text.replace(root.to_str().unwrap(), "<ROOT>");
    for (format, name) in V2_RESTORE_SNAPSHOTS {
        let text = redact(&restore_text(&store, sid, format).await);
        assert!(
            text.contains("<ROOT>/legacy/"),
            "{name}: paths were redacted, not lost"
        );
        check(name, &text);
    }
}
