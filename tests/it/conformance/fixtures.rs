//! The frozen V1 and V2 fixtures on both engines: a copy of the SQLite fixture is
//! migrated, its session exported, and the archive imported with `--keep-id` into the
//! engine under test; restored there with the fixture's own attachment roots, it
//! gives what the SQLite copy gives in every format, and what the committed
//! snapshots hold. It never writes inside `tests/fixtures`.

use sessionstore::store::Access;
use std::path::{Path, PathBuf};
use std::process::Output;

use sessionstore::attachments::Roots;
use sessionstore::{Config, SessionId, Store};

use super::common::{entry_ids, export, ids_named};
use crate::restored::CollectRestore;
use crate::support::{
    Bin, TestStore, V2_RESTORE_SNAPSHOTS, conformance, copy_tree, fixture, history_blocks, json,
    restore_text, snapshot, stderr, stdout, v1_restore_snapshots,
};

conformance!(
    the_v1_fixture_imported_restores_as_its_sqlite_copy_does,
    the_v2_fixture_imported_restores_as_its_sqlite_copy_does,
);

/// A copy of a fixture in a temporary folder: its database, roots and session.
struct Copy {
    dir: tempfile::TempDir,
    session: SessionId,
}

impl Copy {
    fn of(version: &str) -> Copy {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&fixture(version), dir.path());
        let session = std::fs::read_to_string(dir.path().join("session-id"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Copy { dir, session }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn db(&self) -> PathBuf {
        self.root().join("sessions.db")
    }

    fn roots(&self) -> Roots {
        Roots {
            configured: self.root().join("attachments"),
            legacy: vec![self.root().join("legacy")],
        }
    }

    /// The binary on the database `db` with this copy's attachment roots.
    fn run_on(&self, db: &str, args: &[&str]) -> Output {
        let config = Config {
            database: db.into(),
            roots: self.roots(),
            host: "snapshot-host".into(),
            sharing: Default::default(),
            key: None,
            redaction: Default::default(),
        };
        Bin::new(self.root()).args(args).on(&config).output()
    }

    /// A store on the database `db` with this copy's roots, naming the host as the
    /// snapshots do.
    async fn store_on(&self, db: &str) -> Store {
        Store::open_as(
            Config {
                database: db.into(),
                roots: self.roots(),
                host: "snapshot-host".into(),
                sharing: Default::default(),
                key: None,
                redaction: Default::default(),
            },
            Access::ReadOnly,
        )
        .await
        .expect("the store opens for reading")
    }
}

/// The committed snapshot `name`, its entry ids named as `ids_named` names them.
fn snapshot_file(name: &str, ids: &[String]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/snapshots")
        .join(name);
    ids_named(&std::fs::read_to_string(path).unwrap(), ids)
}

/// Loads fixture `version` into `b` (export from a migrated SQLite copy, import with
/// `--keep-id`), then compares the restores. Returns the copy and `b`'s store on the
/// copy's roots, for the version's own snapshot checks.
async fn load(b: &TestStore, version: &str) -> (Copy, Store, Vec<String>, Vec<String>) {
    let before = snapshot(&fixture(version));
    let copy = Copy::of(version);
    let sid = copy.session.to_string();
    let sqlite = copy.db().display().to_string();
    // Reading commands never upgrade: the copy is migrated first, as a user would.
    json(&copy.run_on(&sqlite, &["migrate", "--json"]));
    let archive = copy.root().join("fixture.tar");
    export(|args| copy.run_on(&sqlite, args), &sid, &archive);
    let imported = json(&b.run(&["import", archive.to_str().unwrap(), "--keep-id", "--json"]));
    assert_eq!(imported["id"], sid.as_str(), "the fixture's id is kept");

    // The same rows and items, and both verify.
    let on_copy = json(&copy.run_on(&sqlite, &["verify", "--json"]));
    let on_b = json(&b.run(&["verify", "--json"]));
    for key in ["sessions", "messages", "items", "problems"] {
        assert_eq!(on_b[key], on_copy[key], "{version}: {key}");
    }

    // In every format, with the fixture's roots, what the SQLite copy prints, once
    // the ids the import gave are named like the copy's.
    let copy_store = copy.store_on(&sqlite).await;
    let b_store = copy.store_on(b.db()).await;
    let (copy_ids, b_ids) = (
        entry_ids(&copy_store, copy.session).await,
        entry_ids(&b_store, copy.session).await,
    );
    assert_eq!(copy_ids.len(), b_ids.len());
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let args = ["restore", "--session", &sid, "--format", format];
        let (from_copy, from_b) = (copy.run_on(&sqlite, &args), copy.run_on(b.db(), &args));
        assert!(from_b.status.success(), "{format}: {}", stderr(&from_b));
        assert_eq!(
            ids_named(&stdout(&from_b), &b_ids),
            ids_named(&stdout(&from_copy), &copy_ids),
            "{version} {format}"
        );
    }

    // With its own roots, the imported session reads every file from where import
    // put it: the fixture's legacy file included.
    let restored = json(&b.run(&["restore", "--session", &sid, "--format", "acp"]));
    let mut files = 0;
    for block in history_blocks(&restored) {
        let Some(context) = crate::support::context_of(block) else {
            continue;
        };
        let path = PathBuf::from(crate::support::context_line(context).path);
        assert!(path.starts_with(b.configured().join(&sid)), "{path:?}");
        let name = path.file_name().unwrap().to_str().unwrap();
        let original = ["attachments", "legacy"]
            .iter()
            .map(|root| fixture(version).join(root).join(&sid).join(name))
            .find(|p| p.is_file())
            .expect("the fixture has the file");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(original).unwrap()
        );
        files += 1;
    }
    assert!(files > 0);
    assert_eq!(
        snapshot(&fixture(version)),
        before,
        "{version} was only copied"
    );
    (copy, b_store, copy_ids, b_ids)
}

async fn the_v1_fixture_imported_restores_as_its_sqlite_copy_does(b: TestStore) {
    let (copy, store, copy_ids, b_ids) = load(&b, "v1").await;
    // What the snapshots hold, made as `snapshots.rs` makes them.
    let restored = store.collect_restore(copy.session).await.unwrap();
    let redact = |v: serde_json::Value| {
        let text = serde_json::to_string_pretty(&v).unwrap();
        ids_named(&text, &b_ids).replace(copy.root().to_str().unwrap(), "<ROOT>") + "\n"
    };
    for (name, actual) in v1_restore_snapshots(&restored) {
        let actual = redact(actual);
        assert!(actual.contains("<ROOT>/legacy/"), "{name}: the legacy read");
        assert_eq!(actual, snapshot_file(name, &copy_ids), "{name}");
    }
}

async fn the_v2_fixture_imported_restores_as_its_sqlite_copy_does(b: TestStore) {
    let (copy, store, copy_ids, b_ids) = load(&b, "v2").await;
    let sid = copy.session;
    for (format, name) in V2_RESTORE_SNAPSHOTS {
        let text = restore_text(&store, sid, format).await;
        let actual = ids_named(&text, &b_ids).replace(copy.root().to_str().unwrap(), "<ROOT>");
        assert!(actual.contains("<ROOT>/legacy/"), "{name}: the legacy read");
        assert_eq!(actual, snapshot_file(name, &copy_ids), "{name}");
    }
}
