//! Opening a database: refused files are left byte for byte with no side file beside
//! them, reading commands never write or migrate (and work on a read-only copy), and
//! only `migrate` and `session new` turn an empty file into a database.

use sessionstore::store::{Access, Verify};
use std::path::Path;
use std::process::Output;

use sessionstore::model::NewSession;
use sessionstore::{Error, Store};

use crate::support::{
    Bin, PNG, TestStore, all_sessions, assert_one_line_error, json, snapshot, stderr, stdout,
};

/// A session id no damaged file knows; commands that need one get it.
const SID: &str = "01a22b1d-b6fa-778b-a534-d674f3630de8";

/// Commands that only read, with the words after the command name.
fn reading_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["session", "list"],
        vec!["session", "show", SID],
        vec!["events", "--session", SID],
        vec!["verify"],
        vec!["dispatch", "--session", SID],
        vec!["restore", "--session", SID],
    ]
}

/// Commands that write to a database that must already exist.
fn writing_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["send", "--session", SID, "--text", "hello"],
        vec!["drain", "--session", SID],
    ]
}

/// Commands that may create a database.
fn creating_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["migrate"],
        vec!["migrate", "--dry-run"],
        vec!["session", "new"],
    ]
}

/// A healthy database made through the binary (a session, an attachment, a message),
/// with every process gone so its `-wal` is checkpointed away. Returns its session.
fn healthy(t: &TestStore) -> String {
    let dir = t.dir.path();
    let sid = json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = dir.join("chart.png");
    std::fs::write(&file, PNG).unwrap();
    let stored = json(&t.run(&[
        "attach",
        "--session",
        &sid,
        file.to_str().unwrap(),
        "--json",
    ]));
    std::fs::remove_file(&file).unwrap();
    let uri = stored[0]["uri"].as_str().unwrap().to_owned();
    json(&t.run(&[
        "send",
        "--session",
        &sid,
        "--text",
        "what is this?",
        "--attach",
        &uri,
        "--json",
    ]));
    assert!(
        !dir.join("sessions.db-wal").exists(),
        "the last writer checkpointed and removed its -wal"
    );
    sid
}

fn healthy_bytes() -> Vec<u8> {
    let t = TestStore::empty();
    healthy(&t);
    std::fs::read(t.db_path()).unwrap()
}

/// Bytes that look like nothing, the same on every run.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A SQLite database of some other program.
fn foreign_database() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE bookmarks (url TEXT); INSERT INTO bookmarks VALUES ('https://example.org');",
    )
    .unwrap();
    drop(conn);
    std::fs::read(&path).unwrap()
}

/// Runs `args` on the fixture's database and checks the refusal contract: one line on
/// stderr, non-zero exit, and every file of the fixture exactly as it was, with no
/// `-wal`, `-shm` or `-journal` beside the database.
fn assert_refused_and_untouched(t: &TestStore, args: &[&str]) -> String {
    let dir = t.dir.path();
    let before = snapshot(dir);
    let out = t.run(args);
    let err = assert_one_line_error(&out);
    assert_eq!(
        snapshot(dir).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "{args:?} left a file behind: {err}"
    );
    assert!(snapshot(dir) == before, "{args:?} changed a file: {err}");
    err
}

/// Issue 12, holes 1 and 2: a truncated database was refused but got `-wal` and `-shm`
/// beside it, and a 1-byte file was taken for an empty database and overwritten.
#[test]
fn hole_1_and_2_damaged_files_are_refused_and_left_byte_for_byte() {
    let good = healthy_bytes();
    let damaged: Vec<(&str, Vec<u8>)> = vec![
        ("the first page of a good database", good[..4096].to_vec()),
        ("half a good database", good[..good.len() / 2].to_vec()),
        (
            "a good database less one byte",
            good[..good.len() - 1].to_vec(),
        ),
        ("a 1-byte file", b"h".to_vec()),
        ("a 15-byte file", b"SQLite format 3".to_vec()),
        ("random bytes", noise(8192)),
        ("another program's database", foreign_database()),
    ];
    let uploads = tempfile::tempdir().unwrap();
    let upload = uploads.path().join("x.txt");
    std::fs::write(&upload, "an upload").unwrap();
    let commands: Vec<Vec<&str>> = creating_commands()
        .into_iter()
        .chain(reading_commands())
        .chain(writing_commands())
        .chain([vec!["attach", "--session", SID, upload.to_str().unwrap()]])
        .collect();
    for (what, bytes) in &damaged {
        let t = TestStore::empty();
        std::fs::write(t.db_path(), bytes).unwrap();
        for args in &commands {
            let err = assert_refused_and_untouched(&t, args);
            assert!(
                err.contains("not a usable sqlite database"),
                "{what}, {args:?}: {err}"
            );
        }
    }
}

/// Issue 12, hole 1 (the rest): a database whose `events` table was dropped, kept with
/// a rollback journal, was switched to WAL by a writing command's open (a rewrite of
/// its header) before the write failed on "no such table". Every command that opens
/// for writing now first compares the schema with what the database's own migrations
/// make, and refuses a difference with nothing touched and no side file.
#[test]
fn hole_1_a_damaged_schema_is_refused_before_a_writing_open_switches_the_journal_mode() {
    let good = healthy_bytes();
    let uploads = tempfile::tempdir().unwrap();
    let upload = uploads.path().join("x.txt");
    std::fs::write(&upload, "an upload").unwrap();
    let commands: Vec<Vec<&str>> = [vec!["migrate"], vec!["session", "new"]]
        .into_iter()
        .chain(writing_commands())
        .chain([vec!["attach", "--session", SID, upload.to_str().unwrap()]])
        .collect();
    for (what, sql, named) in [
        (
            "events dropped",
            "DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete; DROP TABLE events;",
            "table events",
        ),
        (
            "a trigger dropped",
            "DROP TRIGGER events_no_delete;",
            "trigger events_no_delete",
        ),
    ] {
        let t = TestStore::empty();
        let db = t.db_path();
        std::fs::write(&db, &good).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(sql).unwrap();
        conn.execute_batch("PRAGMA journal_mode = DELETE;").unwrap();
        drop(conn);
        for args in &commands {
            let before = snapshot(t.dir.path());
            let out = t.run(args);
            let err = assert_one_line_error(&out);
            assert_eq!(out.status.code(), Some(3), "{what}, {args:?}: {err}");
            assert!(
                err.contains("does not have the schema its migrations make") && err.contains(named),
                "{what}, {args:?}: {err}"
            );
            assert!(
                snapshot(t.dir.path()) == before,
                "{what}, {args:?} touched the files: {err}"
            );
        }
    }
}

/// Issue 12, hole 2 and issue 10, part 5: reading commands turned an empty file into a
/// migrated database; only `migrate` and `session new` may.
#[test]
fn an_empty_file_becomes_a_database_only_through_migrate_or_session_new() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    std::fs::write(&db, b"").unwrap();
    for args in reading_commands() {
        let err = assert_refused_and_untouched(&t, &args);
        assert!(
            err.contains("run `sessionstore migrate`"),
            "{args:?}: {err}"
        );
    }
    for args in writing_commands() {
        let err = assert_refused_and_untouched(&t, &args);
        assert!(err.contains("no database at"), "{args:?}: {err}");
    }
    json(&t.run(&["migrate", "--json"]));
    json(&t.run(&["session", "list", "--json"]));

    let t = TestStore::empty();
    std::fs::write(t.dir.path().join("sessions.db"), b"").unwrap();
    json(&t.run(&["session", "new", "--json"]));
    let listed = json(&t.run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
}

/// A schema behind this binary's latest migration (here: a sessionstore history with
/// nothing applied yet) is refused by every reading command, which never upgrade it.
#[test]
fn reading_commands_refuse_a_database_that_needs_a_migration() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE refinery_schema_history (version int4 PRIMARY KEY, name VARCHAR(255),
                                               applied_on VARCHAR(255), checksum VARCHAR(255));",
    )
    .unwrap();
    drop(conn);
    for args in reading_commands() {
        let err = assert_refused_and_untouched(&t, &args);
        assert!(err.contains("schema version 0"), "{args:?}: {err}");
        assert!(
            err.contains("run `sessionstore migrate`"),
            "{args:?}: {err}"
        );
    }
    let report = json(&t.run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names())
    );
    assert!(
        report.get("backup").is_none(),
        "nothing was applied before, so there is nothing to keep: {report}"
    );
}

/// Issue 10, part 5: reading commands open the file read-only and leave no `-wal`,
/// `-shm` or journal beside it when there was none.
#[test]
fn reading_commands_leave_no_side_files() {
    let t = TestStore::empty();
    let sid = healthy(&t);
    let before = snapshot(t.dir.path());
    for args in reading_commands() {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == SID { sid.as_str() } else { a })
            .collect();
        let out = t.run(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(
            snapshot(t.dir.path()) == before,
            "{args:?} wrote something: {:?}",
            snapshot(t.dir.path()).keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_path_that_is_not_a_regular_file_is_refused_without_writing_beside_it() {
    for args in [&["session", "list"][..], &["migrate"], &["verify"]] {
        let dir = tempfile::tempdir().unwrap();
        let out = Bin::new(dir.path())
            .args(args)
            .args(["--db", "/dev/null"])
            .output();
        let err = assert_one_line_error(&out);
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
    assert!(!Path::new("/dev/null-wal").exists());
    assert!(!Path::new("/dev/null-journal").exists());
}

/// How to run the binary as a user who cannot write to a folder: as root, a write bit
/// does not stop us, so the command runs as `nobody` through `setpriv`; as anyone else,
/// removing the write bits is enough. `None` when neither is possible here.
pub(crate) fn without_write_permission(home: &Path) -> Option<Bin> {
    use std::os::unix::fs::MetadataExt;
    // `home` was just made by this process, so it is owned by the user we run as.
    if std::fs::metadata(home).unwrap().uid() == 0 {
        let works = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !works {
            return None;
        }
        Some(Bin::through(
            "setpriv",
            &["--reuid=65534", "--regid=65534", "--clear-groups"],
            home,
        ))
    } else {
        Some(Bin::new(home))
    }
}

/// Sets the mode of `path` and everything under it: `dirs` for folders, `files` else.
pub(crate) fn chmod_tree(path: &Path, dirs: u32, files: u32) {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chmod_tree(&entry.unwrap().path(), dirs, files);
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(dirs)).unwrap();
    } else {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(files)).unwrap();
    }
}

/// Gives write permission back, so the temporary folder can be removed.
pub(crate) struct Writable<'a>(pub(crate) &'a Path);

impl Drop for Writable<'_> {
    fn drop(&mut self) {
        chmod_tree(self.0, 0o755, 0o644);
    }
}

/// Issue 10, part 5: a valid database in a folder the user cannot write to could not
/// be read at all ("attempt to write a readonly database").
#[test]
fn a_read_only_copy_can_be_listed_shown_verified_and_restored() {
    let t = TestStore::empty();
    let dir = &t.dir;
    let sid = healthy(&t);
    let Some(_) = without_write_permission(dir.path()) else {
        eprintln!("skipped: running as root and `setpriv` cannot drop to nobody here");
        return;
    };
    chmod_tree(dir.path(), 0o555, 0o444);
    let _restore = Writable(dir.path());
    let before = snapshot(dir.path());
    let run = |args: &[&str]| -> Output {
        without_write_permission(dir.path())
            .unwrap()
            .args(args)
            .on(&t.config)
            .output()
    };
    let listed = json(&run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"][0]["id"], sid.as_str());
    let shown = json(&run(&["session", "show", &sid, "--json"]));
    assert_eq!(shown["messages"][0]["displayText"], "what is this?");
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));
    assert!(stdout(&verified).contains(": ok"), "{}", stdout(&verified));
    let restored = json(&run(&["restore", "--session", &sid, "--json"]));
    let blocks = restored["messages"][0]["content"].as_array().unwrap();
    assert_eq!(
        blocks[1]["type"], "image",
        "the attachment was read: {restored}"
    );
    let events = run(&["events", "--session", &sid]);
    assert!(events.status.success(), "{}", stderr(&events));
    let first = stdout(&events).lines().next().unwrap().to_owned();
    assert!(
        serde_json::from_str::<serde_json::Value>(&first)
            .unwrap()
            .is_object()
    );
    let out = run(&["dispatch", "--session", &sid]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(snapshot(dir.path()) == before, "nothing was written");

    // Writing is refused by the file system, in one line, leaving the copy alone.
    let out = run(&["send", "--session", &sid, "--text", "more"]);
    assert_one_line_error(&out);
    assert!(snapshot(dir.path()) == before, "nothing was written");
}

/// A reader opened while no writer is present reads the file as unchanging; a writer
/// that starts afterwards must still be seen, and must not tear what is read.
#[tokio::test]
async fn a_read_only_store_sees_what_a_writer_commits_after_it_opened() {
    let t = TestStore::empty();
    let store = t.open().await;
    store.create_session(NewSession::default()).await.unwrap();
    drop(store);
    let wal = t.dir.path().join("sessions.db-wal");
    assert!(!wal.exists(), "the store closed and removed its -wal");

    let reader = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .unwrap();
    assert_eq!(all_sessions(&reader).await.unwrap().len(), 1);
    assert!(!wal.exists(), "reading made no side file");

    let writer = t.open().await;
    writer
        .create_session(NewSession {
            title: Some("later".into()),
            ..NewSession::default()
        })
        .await
        .unwrap();
    assert!(wal.exists(), "a live writer keeps its -wal");
    assert_eq!(all_sessions(&reader).await.unwrap().len(), 2);
    drop(writer);
    assert!(!wal.exists());
    assert_eq!(all_sessions(&reader).await.unwrap().len(), 2);

    let err = reader
        .create_session(NewSession::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ReadOnly(_)), "{err}");
}

/// Many writers coming and going while a reader reads: every read sees a whole
/// committed state (the session count only grows, and `verify` finds nothing wrong).
#[tokio::test]
async fn reads_stay_whole_while_writers_come_and_go() {
    let t = TestStore::empty();
    let store = t.open().await;
    store.create_session(NewSession::default()).await.unwrap();
    drop(store);
    let reader = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .unwrap();
    let config = t.config.clone();
    let writers = tokio::spawn(async move {
        for _ in 0..20 {
            let writer = Store::open(config.clone()).await.unwrap();
            writer.create_session(NewSession::default()).await.unwrap();
        }
    });
    let mut last = 0;
    while !writers.is_finished() {
        let n = all_sessions(&reader).await.unwrap().len();
        assert!(n >= last, "a read went back in time: {n} after {last}");
        last = n;
        let report = reader.verify(Verify::Check).await.unwrap().after;
        assert!(report.ok(), "{:?}", report.problems);
    }
    writers.await.unwrap();
    assert_eq!(all_sessions(&reader).await.unwrap().len(), 21);
}

#[test]
fn migrate_no_backup_is_accepted_and_says_nothing_was_copied() {
    let t = TestStore::empty();
    let report = json(&t.run(&["migrate", "--no-backup", "--json"]));
    assert_eq!(report["current"], crate::support::latest_version());
    assert!(report.get("backup").is_none(), "{report}");
    let names: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".bak")), "{names:?}");
}

/// The `-wal` beside `db`.
fn wal_of(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// A database with data still in a `-wal` and no `-shm` beside it: what a writer that
/// crashed leaves once something removed its `-shm`, or a copy of the two files. Its
/// WAL holds what `write` committed (given the store and its session) while another
/// connection kept the WAL from being checkpointed. Returns the main file's and the
/// WAL's bytes.
fn with_wal_and_no_shm(write: impl FnOnce(&TestStore, &str)) -> (Vec<u8>, Vec<u8>) {
    let t = TestStore::empty();
    let sid = healthy(&t);
    let db = t.db_path();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0; SELECT count(*) FROM sessions;")
        .unwrap();
    write(&t, &sid);
    let main = std::fs::read(&db).unwrap();
    let wal = std::fs::read(wal_of(&db)).unwrap();
    drop(conn);
    assert!(!wal.is_empty(), "the WAL holds what was written");
    (main, wal)
}

/// Issue 22, part 6: `migrate` on a refused database that had a `-wal` but no `-shm`
/// created a `-shm` beside it (the inspection's read-only connection built one to read
/// the WAL). A refusal leaves no side file; the WAL's committed data is still what the
/// refusal is about (here a newer schema that only the WAL records).
#[test]
fn hole_6_a_refusal_of_a_database_with_a_wal_and_no_shm_leaves_no_shm() {
    let (main, wal) = with_wal_and_no_shm(|t, _| {
        let conn = rusqlite::Connection::open(t.db_path()).unwrap();
        conn.execute_batch(
            "PRAGMA wal_autocheckpoint = 0;
             INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             VALUES (99, 'future', '', '0');",
        )
        .unwrap();
    });
    let commands: Vec<Vec<&str>> = creating_commands()
        .into_iter()
        .chain(reading_commands())
        .chain(writing_commands())
        .collect();
    for args in &commands {
        let t = TestStore::empty();
        std::fs::write(t.db_path(), &main).unwrap();
        std::fs::write(wal_of(&t.db_path()), &wal).unwrap();
        let err = assert_refused_and_untouched(&t, args);
        assert!(
            err.contains("99"),
            "{args:?} read the WAL's newer schema: {err}"
        );
    }
}

/// The other half of hole 6: a reading command on a database whose `-wal` has no
/// `-shm` reads what the WAL committed and still leaves no side file.
#[test]
fn reading_a_database_with_a_wal_and_no_shm_sees_the_wal_and_leaves_no_side_file() {
    let (main, wal) = with_wal_and_no_shm(|t, sid| {
        let out = t.run(&["session", "rename", sid, "only in the wal"]);
        assert!(out.status.success(), "{}", stderr(&out));
    });
    let t = TestStore::empty();
    std::fs::write(t.db_path(), &main).unwrap();
    std::fs::write(wal_of(&t.db_path()), &wal).unwrap();
    let before = snapshot(t.dir.path());
    let listed = json(&t.run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"][0]["title"], "only in the wal");
    let out = t.run(&["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        snapshot(t.dir.path()) == before,
        "a read left {:?}",
        snapshot(t.dir.path()).keys().collect::<Vec<_>>()
    );
}

/// What a side file is made into by `side_file_that_is_not_regular`.
#[derive(Debug, Clone, Copy)]
enum Odd {
    Fifo,
    Directory,
    DanglingLink,
}

impl Odd {
    fn make(self, at: &Path) {
        match self {
            Odd::Fifo => {
                let made = std::process::Command::new("mkfifo")
                    .arg(at)
                    .status()
                    .expect("mkfifo runs");
                assert!(made.success(), "mkfifo {}", at.display());
            }
            Odd::Directory => std::fs::create_dir(at).unwrap(),
            Odd::DanglingLink => {
                std::os::unix::fs::symlink(at.with_extension("nowhere"), at).unwrap()
            }
        }
    }

    fn remove(self, at: &Path) {
        match self {
            Odd::Directory => std::fs::remove_dir(at).unwrap(),
            Odd::Fifo | Odd::DanglingLink => std::fs::remove_file(at).unwrap(),
        }
    }
}

/// Every entry under `dir` by relative path, with a regular file's bytes (`None` for
/// anything else, which is never opened: reading a FIFO would wait for a writer).
fn entries(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Option<Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
            }
            let bytes = meta.is_file().then(|| std::fs::read(&path).unwrap());
            out.insert(path.strip_prefix(dir).unwrap().to_owned(), bytes);
        }
    }
    out
}

/// Issue 45, item 6: a FIFO where the database's `-wal` should be, beside a valid
/// database, made `session list`, `session show`, `restore` and `verify` wait forever
/// (SQLite, or the copy of a `-wal` with no `-shm`, opened it and read). A `-wal`,
/// `-shm` or `-journal` that is not a regular file (a FIFO, a directory, a symbolic
/// link, even a dangling one, which a writer would have created a file through) is
/// refused by every command with one line naming it, and nothing is written. Each run
/// is bounded, so a hang fails the test instead of stopping it.
#[test]
fn a_side_file_that_is_not_a_regular_file_is_refused_and_nothing_waits_on_it() {
    let t = TestStore::empty();
    let sid = healthy(&t);
    let db = t.db_path();
    let commands: Vec<Vec<&str>> = vec![
        vec!["session", "list"],
        vec!["session", "show", &sid],
        vec!["restore", "--session", &sid],
        vec!["verify"],
        vec!["send", "--session", &sid, "--text", "hello"],
        vec!["migrate"],
        vec!["session", "new"],
    ];
    let cases = [
        ("-wal", Odd::Fifo),
        ("-shm", Odd::Fifo),
        ("-journal", Odd::Fifo),
        ("-wal", Odd::Directory),
        ("-wal", Odd::DanglingLink),
    ];
    for (suffix, odd) in cases {
        let side = std::path::PathBuf::from(format!("{}{suffix}", db.display()));
        odd.make(&side);
        let before = entries(t.dir.path());
        for args in &commands {
            let out = t
                .bin()
                .args(args)
                .timeout(std::time::Duration::from_secs(30))
                .bounded()
                .unwrap_or_else(|| panic!("{args:?} with {odd:?} as {suffix} hung"));
            let err = assert_one_line_error(&out);
            assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
            assert!(
                err.contains(&format!("sessions.db{suffix}")) && err.contains("not a regular file"),
                "{args:?} with {odd:?} as {suffix}: {err}"
            );
            assert_eq!(out.status.code(), Some(3), "a refusal: {err}");
            assert!(
                entries(t.dir.path()) == before,
                "{args:?} with {odd:?} as {suffix} wrote something"
            );
        }
        odd.remove(&side);
    }
    // With the side file gone, the same store reads and writes as before.
    let out = t.run(&["send", "--session", &sid, "--text", "after"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = t.run(&["session", "show", &sid]);
    assert!(stdout(&shown).contains("after"), "{}", stdout(&shown));
}
