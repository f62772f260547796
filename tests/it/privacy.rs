//! Sessions are private (issue 24): everything the store makes is owner-only whatever
//! the umask (or owner-and-group with `--shared-group`), a database left wider is
//! warned about and never changed, and, with the `encryption` feature, an encrypted
//! database and its backups hold no plaintext, a wrong or missing key is one line that
//! touches nothing, and encrypting, re-keying and upgrading keep every session. TLS to
//! PostgreSQL is in `conformance/tls.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Bin, TestStore, json, stderr, stdout};

/// The permission bits of `path` (set-group-ID included), not following a link.
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{path:?}: {e}"))
        .permissions()
        .mode()
        & 0o7777
}

/// The binary run with the process umask set to `umask` first.
fn under_umask(home: &Path, umask: u32) -> Bin {
    let script = format!("umask {umask:03o}; exec \"$0\" \"$@\"");
    Bin::through("sh", &["-c", &script], home)
}

/// A store whose database and configured root sit in folders that do not exist yet,
/// so that the folders the store makes are looked at too.
fn nested() -> TestStore {
    let mut t = TestStore::empty();
    let dir = t.dir.path().to_owned();
    t.config.database = dir.join("data/db/sessions.db").into();
    t.config.roots.configured = dir.join("files/attachments");
    t
}

/// Runs `args` on `t` under `umask`, with `extra` flags, and expects success.
fn run_ok(t: &TestStore, umask: u32, extra: &[&str], args: &[&str]) -> Output {
    let out = under_umask(t.dir.path(), umask)
        .args(args)
        .args(extra)
        .on(&t.config)
        .output();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    out
}

/// Makes a session with an attachment and a message in `t`, forks it, exports it both
/// ways, writes an attachment out, and returns what it made, with the mode each must
/// have: `file` for files, `dir` for folders.
fn make_everything(t: &TestStore, umask: u32, extra: &[&str]) -> Vec<(PathBuf, bool)> {
    let dir = t.dir.path();
    run_ok(t, umask, extra, &["migrate"]);
    let id = json(&run_ok(t, umask, extra, &["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let upload = dir.join("note.txt");
    std::fs::write(&upload, "a pasted api key: sk-not-really\n").unwrap();
    let stored = json(&run_ok(
        t,
        umask,
        extra,
        &[
            "attach",
            "--session",
            &id,
            upload.to_str().unwrap(),
            "--json",
        ],
    ));
    let uri = stored[0]["uri"].as_str().unwrap().to_owned();
    run_ok(
        t,
        umask,
        extra,
        &["send", "--session", &id, "--text", "look", "--attach", &uri],
    );
    let fork = json(&run_ok(
        t,
        umask,
        extra,
        &["session", "fork", &id, "--json"],
    ))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    let archive = out.join("session.tar");
    let transcript = out.join("session.md");
    let copy = out.join("note-copy.txt");
    run_ok(
        t,
        umask,
        extra,
        &[
            "export",
            "--session",
            &id,
            "--out",
            archive.to_str().unwrap(),
        ],
    );
    run_ok(
        t,
        umask,
        extra,
        &[
            "export",
            "--session",
            &id,
            "--out",
            transcript.to_str().unwrap(),
            "--format",
            "markdown",
        ],
    );
    run_ok(
        t,
        umask,
        extra,
        &["attachment", "get", &uri, "--out", copy.to_str().unwrap()],
    );
    let imported = json(&run_ok(
        t,
        umask,
        extra,
        &["import", archive.to_str().unwrap(), "--json"],
    ))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let root = t.configured().to_owned();
    let mut made = vec![
        (dir.join("data"), true),
        (dir.join("data/db"), true),
        (t.db_path(), false),
        (dir.join("files"), true),
        (root.clone(), true),
        (archive, false),
        (transcript, false),
        (copy, false),
    ];
    for session in [&id, &fork, &imported] {
        made.push((root.join(session), true));
        made.push((root.join(session).join("note.txt"), false));
    }
    made
}

/// A daemon holding `t`'s database open (`acp` keeps its store, and so its
/// connections and the database's `-wal` and `-shm`, while its standard input is
/// open), started under `umask` with `extra` flags.
#[cfg(feature = "acp")]
struct Holder {
    child: std::process::Child,
    wal: PathBuf,
    shm: PathBuf,
}

#[cfg(feature = "acp")]
impl Holder {
    fn start(t: &TestStore, umask: u32, extra: &[&str]) -> Holder {
        let child = under_umask(t.dir.path(), umask)
            .arg("acp")
            .args(extra)
            .on(&t.config)
            .spawn();
        let wal = PathBuf::from(format!("{}-wal", t.db_path().display()));
        let shm = PathBuf::from(format!("{}-shm", t.db_path().display()));
        let start = std::time::Instant::now();
        while !(wal.exists() && shm.exists()) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "the daemon never opened the database"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Holder { child, wal, shm }
    }

    /// The modes of `-wal` and `-shm`, once SQLite has set them: it creates each under
    /// the umask and then sets the mode it wants on the descriptor (`robust_open`), so
    /// a file seen the instant it appears may not have it yet. Each is read again until
    /// it is `want` or a few seconds have passed; the last one read is returned.
    fn side_modes(&self, want: u32) -> Vec<(PathBuf, u32)> {
        let start = std::time::Instant::now();
        [&self.wal, &self.shm]
            .into_iter()
            .map(|p| {
                loop {
                    let got = mode(p);
                    if got == want || start.elapsed() > std::time::Duration::from_secs(5) {
                        break (p.clone(), got);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            })
            .collect()
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the daemon ended badly");
    }
}

/// The modes of the database's side files while a daemon holds them.
#[cfg(feature = "acp")]
fn side_files_while_open(
    t: &TestStore,
    umask: u32,
    extra: &[&str],
    want: u32,
) -> Vec<(PathBuf, u32)> {
    let holder = Holder::start(t, umask, extra);
    let modes = holder.side_modes(want);
    holder.stop();
    modes
}

#[test]
fn everything_the_store_makes_is_owner_only_under_a_permissive_umask() {
    let t = nested();
    for (path, is_dir) in make_everything(&t, 0o000, &[]) {
        let want = if is_dir { 0o700 } else { 0o600 };
        assert_eq!(mode(&path), want, "{path:?}");
    }
    // The side files while a daemon holds them: `acp` is the daemon here, so a build
    // without that feature has none to start.
    #[cfg(feature = "acp")]
    for (path, got) in side_files_while_open(&t, 0o000, &[], 0o600) {
        assert_eq!(got, 0o600, "{path:?}");
    }
}

/// An upgrade's backup is the store's own file: owner-only even when the database it
/// copies was left world-readable (a copy that took the source's mode would not be).
#[test]
fn an_upgrade_backup_is_owner_only_whatever_the_database_it_copies() {
    let t = TestStore::empty();
    crate::support::copy_tree(&crate::support::fixture("v1"), t.dir.path());
    std::fs::set_permissions(t.db_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = json(&run_ok(&t, 0o000, &[], &["migrate", "--json"]));
    let backup = PathBuf::from(report["backup"].as_str().unwrap());
    assert_eq!(mode(&backup), 0o600, "{backup:?}");
    assert_eq!(
        mode(&t.db_path()),
        0o644,
        "the database itself is not changed"
    );
}

#[test]
fn shared_group_makes_files_0660_and_folders_2770_whatever_the_umask() {
    let t = nested();
    for (path, is_dir) in make_everything(&t, 0o077, &["--shared-group"]) {
        let want = if is_dir { 0o2770 } else { 0o660 };
        assert_eq!(mode(&path), want, "{path:?}");
    }
    // The side files while a daemon holds them: `acp` is the daemon here, so a build
    // without that feature has none to start.
    #[cfg(feature = "acp")]
    for (path, got) in side_files_while_open(&t, 0o077, &["--shared-group"], 0o660) {
        assert_eq!(got, 0o660, "{path:?}");
    }
    // The variable does the same; a value that is neither on nor off is a usage error.
    let other = nested();
    let out = under_umask(other.dir.path(), 0o077)
        .arg("migrate")
        .env("SESSIONSTORE_SHARED_GROUP", "1")
        .on(&other.config)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&other.db_path()), 0o660);
    let out = Bin::new(other.dir.path())
        .arg("paths")
        .env("SESSIONSTORE_SHARED_GROUP", "maybe")
        .output();
    crate::support::assert_usage_error(&out);
}

/// A database its user left readable by others is reported by `verify` and `paths`
/// with the command that closes it, as a warning: the exit status is what it would
/// be, and the mode is left as it was.
#[test]
fn a_wider_database_is_warned_about_and_never_changed() {
    let t = TestStore::empty();
    assert!(t.run(&["migrate"]).status.success());
    let db = t.db_path();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bak = PathBuf::from(format!("{}.v1.bak", db.display()));
    std::fs::write(&bak, "").unwrap();
    std::fs::set_permissions(&bak, std::fs::Permissions::from_mode(0o640)).unwrap();
    for args in [&["verify"][..], &["paths"]] {
        let out = t.run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
        let text = stdout(&out);
        assert!(
            text.contains(&format!(
                "warning: {} (the database's files) is open to its group and others (mode \
                 0644): chmod 600 {} closes it",
                db.display(),
                db.display()
            )),
            "{args:?}: {text}"
        );
        assert!(
            text.contains(&format!(
                "{} (the database's files) is open to its group (mode 0640)",
                bak.display()
            )),
            "{args:?}: {text}"
        );
        let report = json(&t.run(&[args[0], "--json"]));
        let kinds: Vec<&str> = report["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{args:?}: {report}"))
            .iter()
            .map(|w| w["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["wide_mode", "wide_mode"], "{args:?}: {report}");
    }
    assert_eq!(mode(&db), 0o644);
    assert_eq!(mode(&bak), 0o640);
    // Under --shared-group a group's access is what was asked for.
    let out = t.run(&["verify", "--json", "--shared-group"]);
    let report = json(&out);
    assert_eq!(
        report["warnings"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    // An owner-only database gives no warning, and no `warnings` key at all.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(&bak).unwrap();
    let report = json(&t.run(&["verify", "--json"]));
    assert!(report.get("warnings").is_none(), "{report}");
}

/// `paths` says how files are made and, for an SQLite database, whether it is
/// encrypted and where its key would come from; it reads no key file.
#[test]
fn paths_shows_the_file_modes_and_the_encryption() {
    let t = TestStore::empty();
    let out = t.run(&["paths"]);
    let text = stdout(&out);
    assert!(
        text.contains("encryption        no database yet  (no key given)"),
        "{text}"
    );
    assert!(
        text.contains("new files         owner only (files 0600, folders 0700)  (default)"),
        "{text}"
    );
    assert!(t.run(&["migrate"]).status.success());
    let p = json(&t.run(&["paths", "--json", "--shared-group"]));
    assert_eq!(p["encryption"]["state"], "plain", "{p}");
    assert_eq!(p["sharing"]["mode"], "group", "{p}");
    assert_eq!(p["sharing"]["fileMode"], "0660", "{p}");
    assert_eq!(p["sharing"]["source"], "flag", "{p}");
    // A key file that is not there is not read by `paths`, only named.
    let missing = t.dir.path().join("no-such-key");
    let out = t
        .bin()
        .args(["paths", "--key-file", missing.to_str().unwrap()])
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("key from --key-file"),
        "{}",
        stdout(&out)
    );
}

/// A file that is not plain SQLite but is shaped like an encrypted database (a whole
/// number of pages) is refused as one that may be encrypted, naming what opens it, and
/// left as it was; a file of another length is no database, as before.
#[test]
fn a_file_that_may_be_encrypted_is_said_to_be_and_left_alone() {
    let t = TestStore::empty();
    let noise: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (bytes, may_be) in [(&noise[..], true), (&noise[..1000], false)] {
        std::fs::write(t.db_path(), bytes).unwrap();
        for args in [&["session", "list"][..], &["migrate"], &["verify"]] {
            let out = t.run(args);
            assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(err.contains("not a usable sqlite database"), "{err}");
            assert_eq!(err.contains("may be encrypted"), may_be, "{err}");
            assert_eq!(err.contains("--key-file"), may_be, "{err}");
            assert_eq!(std::fs::read(t.db_path()).unwrap(), bytes);
            assert!(!PathBuf::from(format!("{}-wal", t.db_path().display())).exists());
        }
    }
}

/// Without the feature a key is a usage error that names it, before anything is
/// opened.
#[cfg(not(feature = "encryption"))]
#[test]
fn a_key_file_needs_the_encryption_feature() {
    let t = TestStore::empty();
    let key = t.dir.path().join("key");
    std::fs::write(&key, "00".repeat(32)).unwrap();
    for args in [
        &["session", "list", "--key-file", key.to_str().unwrap()][..],
        &["migrate", "--encrypt", "--key-file", key.to_str().unwrap()],
    ] {
        let out = t.run(args);
        let err = crate::support::assert_usage_error(&out);
        assert!(err.contains("`encryption` feature"), "{err}");
    }
    assert!(!t.db_path().exists(), "nothing was created");
}

#[cfg(feature = "encryption")]
mod encrypted {
    //! The `encryption` feature's tests: `cargo test --features encryption`.

    use std::path::{Path, PathBuf};

    use sessionstore::config::DatabaseKey;
    use sessionstore::privacy::{Encryption, encryption_of};

    use super::{Holder, mode};
    use crate::support::{
        TestStore, assert_one_line_error, copy_tree, fixture, json, snapshot, stderr, stdout,
    };

    /// Words that must never be found in an encrypted database's bytes.
    const CANARY: &str = "sk-canary-4f1c2e9a pasted secret";

    /// A new key in a file of `dir`'s, owner-only; its path.
    fn key_file(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        let key = DatabaseKey::generate().unwrap();
        std::fs::write(&path, format!("{}\n", key.to_hex().expose())).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        path
    }

    /// `args` with `--key-file key` on `t`.
    fn with_key(t: &TestStore, key: &Path, args: &[&str]) -> std::process::Output {
        t.bin()
            .args(args)
            .args(["--key-file", key.to_str().unwrap()])
            .output()
    }

    fn ok(out: std::process::Output) -> std::process::Output {
        assert!(out.status.success(), "{}", stderr(&out));
        out
    }

    /// Every file of `t`'s database (main file, side files, backups) and its bytes.
    fn database_bytes(t: &TestStore) -> Vec<(PathBuf, Vec<u8>)> {
        let name = t.db_path().file_name().unwrap().to_owned();
        let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(t.dir.path())
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                e.file_name()
                    .as_encoded_bytes()
                    .starts_with(name.as_encoded_bytes())
                    .then(|| (e.path(), std::fs::read(e.path()).unwrap()))
            })
            .collect();
        files.sort();
        files
    }

    fn holds(bytes: &[u8], text: &str) -> bool {
        bytes.windows(text.len()).any(|w| w == text.as_bytes())
    }

    /// Reads refinery's history of an encrypted copy with `key`: the schema versions.
    fn versions_with_key(path: &Path, key: &Path) -> rusqlite::Result<Vec<i64>> {
        let conn = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?;
        let hex = std::fs::read_to_string(key).unwrap();
        conn.pragma_update(None, "key", format!("x'{}'", hex.trim()))?;
        let mut stmt =
            conn.prepare("SELECT version FROM refinery_schema_history ORDER BY version")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect()
    }

    #[test]
    fn an_encrypted_database_and_its_backup_hold_no_plaintext() {
        let t = TestStore::empty();
        let key = key_file(t.dir.path(), "key");
        ok(with_key(&t, &key, &["migrate"]));
        let id = json(&ok(with_key(
            &t,
            &key,
            &["session", "new", "--title", CANARY, "--json"],
        )))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(encryption_of(&t.db_path()), Encryption::Encrypted);
        // Sent while a daemon holds the database, so the message is still only in the
        // WAL when the bytes are read: encrypted there too.
        let daemon = Holder::start(&t, 0o022, &["--key-file", key.to_str().unwrap()]);
        ok(with_key(
            &t,
            &key,
            &["send", "--session", &id, "--text", CANARY],
        ));
        let live = database_bytes(&t);
        assert!(
            live.iter()
                .any(|(p, b)| p.ends_with("sessions.db-wal") && !b.is_empty()),
            "the WAL holds the message: {:?}",
            live.iter().map(|(p, b)| (p, b.len())).collect::<Vec<_>>()
        );
        for (path, got) in daemon.side_modes(0o600) {
            assert_eq!(got, 0o600, "{path:?}");
        }
        daemon.stop();
        for (path, bytes) in live.into_iter().chain(database_bytes(&t)) {
            assert!(!holds(&bytes, CANARY), "{path:?} holds the plaintext");
            assert!(
                !holds(&bytes, "SQLite format 3"),
                "{path:?} has a plain header"
            );
        }
        // The key reads it all back: search, show and the path audit's decrypting read.
        let found = json(&ok(with_key(&t, &key, &["search", "canary", "--json"])));
        assert_eq!(found.as_array().map(Vec::len), Some(2), "{found}");
        let shown = stdout(&ok(with_key(&t, &key, &["session", "show", &id])));
        assert!(shown.contains("sk-canary"), "{shown}");
        let mut config = t.config.clone();
        config.key = Some(DatabaseKey::read_file(&key).unwrap());
        let audit = sessionstore::oracle::audit_database(&config, &[CANARY.to_owned()]).unwrap();
        assert!(
            !audit.value_hits.is_empty(),
            "the audit read the tables: {audit:?}"
        );
        assert!(audit.file_hits.is_empty(), "{audit:?}");
        assert!(audit.file_bytes > 0);
        let paths = stdout(&ok(with_key(&t, &key, &["paths"])));
        assert!(
            paths.contains("encryption        encrypted  (key from --key-file: "),
            "{paths}"
        );
        // A key file others can read is warned about, as the database's files are.
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        for args in [&["verify"][..], &["paths"]] {
            let text = stdout(&ok(with_key(&t, &key, args)));
            assert!(
                text.contains(&format!(
                    "warning: {} (the key file) is open to its group and others (mode 0644)",
                    key.display()
                )),
                "{args:?}: {text}"
            );
        }

        // An older encrypted database's upgrade keeps its backup encrypted, under the
        // same key: it opens as the version it was with the key, and not without.
        let old = TestStore::empty();
        copy_tree(&fixture("v2"), old.dir.path());
        let text = "What does the chart show?";
        assert!(holds(&std::fs::read(old.db_path()).unwrap(), text));
        let key = key_file(old.dir.path(), "key");
        let report = json(&ok(with_key(
            &old,
            &key,
            &["migrate", "--encrypt", "--json"],
        )));
        assert_eq!(report["encryption"], "encrypted", "{report}");
        let backup = PathBuf::from(report["backup"].as_str().unwrap());
        assert_eq!(
            backup,
            PathBuf::from(format!("{}.v2.bak", old.db_path().display()))
        );
        assert_eq!(mode(&backup), 0o600);
        for (path, bytes) in database_bytes(&old) {
            assert!(!holds(&bytes, text), "{path:?} holds the plaintext");
        }
        assert_eq!(versions_with_key(&backup, &key).unwrap(), [1, 2]);
        let other = key_file(old.dir.path(), "other");
        assert!(versions_with_key(&backup, &other).is_err());
        assert!(
            rusqlite::Connection::open_with_flags(
                &backup,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
            )
            .and_then(
                |c| c.query_row("SELECT count(*) FROM sqlite_master", [], |r| r
                    .get::<_, i64>(0))
            )
            .is_err(),
            "the backup does not open without its key"
        );
    }

    #[test]
    fn a_wrong_key_no_key_or_a_bad_key_file_is_one_line_that_touches_nothing() {
        let t = TestStore::empty();
        let key = key_file(t.dir.path(), "key");
        ok(with_key(&t, &key, &["session", "new"]));
        let wrong = key_file(t.dir.path(), "wrong");
        let not_hex = t.dir.path().join("not-hex");
        std::fs::write(&not_hex, "correct horse battery staple\n").unwrap();
        let missing = t.dir.path().join("missing");
        let before = snapshot(t.dir.path());
        let commands: [&[&str]; 5] = [
            &["session", "list"],
            &["verify"],
            &["migrate"],
            &["session", "new"],
            &[
                "restore",
                "--session",
                "01a23405-57a5-7401-bd9e-843335d11858",
            ],
        ];
        for args in commands {
            let out = with_key(&t, &wrong, args);
            let err = assert_one_line_error(&out);
            assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
            assert!(
                err.ends_with(": wrong key, or not a sessionstore database\n"),
                "{args:?}: {err}"
            );
            let out = t.run(args);
            let err = assert_one_line_error(&out);
            assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
            assert!(err.contains("may be encrypted"), "{args:?}: {err}");
            assert!(err.contains("--key-file"), "{args:?}: {err}");
            let out = with_key(&t, &missing, args);
            let err = assert_one_line_error(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("cannot read key file"), "{args:?}: {err}");
            let out = with_key(&t, &not_hex, args);
            let err = assert_one_line_error(&out);
            assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
            assert!(!err.contains("horse"), "{args:?}: {err}");
            assert!(snapshot(t.dir.path()) == before, "{args:?} changed a file");
        }
        let out = t
            .bin()
            .args([
                "session",
                "list",
                "--json",
                "--key-file",
                wrong.to_str().unwrap(),
            ])
            .output();
        let err: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
        assert_eq!(err["error"]["kind"], "wrong_key", "{err}");
        // A plain database given a key is refused as not encrypted, untouched.
        let plain = TestStore::empty();
        assert!(plain.run(&["session", "new"]).status.success());
        let before = snapshot(plain.dir.path());
        let out = with_key(&plain, &key, &["session", "list"]);
        let err = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("is not encrypted"), "{err}");
        assert!(snapshot(plain.dir.path()) == before);
    }

    /// The restore of every fixture session, and its event log, as text: what must not
    /// change when the database is encrypted, re-keyed or upgraded.
    fn history(t: &TestStore, key: Option<&Path>) -> String {
        let sid = std::fs::read_to_string(t.dir.path().join("session-id")).unwrap();
        let run = |args: &[&str]| {
            let out = match key {
                Some(key) => with_key(t, key, args),
                None => t.run(args),
            };
            stdout(&ok(out))
        };
        let mut text = String::new();
        for format in ["acp", "acp-updates", "openai"] {
            text += &run(&["restore", "--session", sid.trim(), "--format", format]);
        }
        text += &run(&["events", "--session", sid.trim()]);
        text += &run(&["session", "list", "--json"]);
        // The roots are the copy's own; two copies differ only there.
        text.replace(&t.dir.path().display().to_string(), "<DIR>")
    }

    #[test]
    fn encrypt_rekey_and_upgrade_keep_every_session_byte_for_byte() {
        let t = TestStore::empty();
        copy_tree(&fixture("v2"), t.dir.path());
        let t = t.with_legacy();
        ok(t.run(&["migrate"]));
        let plain = history(&t, None);
        let first = key_file(t.dir.path(), "first");
        ok(with_key(&t, &first, &["migrate", "--encrypt"]));
        assert_eq!(encryption_of(&t.db_path()), Encryption::Encrypted);
        assert_eq!(history(&t, Some(&first)), plain, "after --encrypt");
        ok(with_key(&t, &first, &["verify"]));
        let second = key_file(t.dir.path(), "second");
        let out = ok(t
            .bin()
            .args([
                "migrate",
                "--rekey",
                "--json",
                "--key-file",
                first.to_str().unwrap(),
            ])
            .args(["--new-key-file", second.to_str().unwrap()])
            .output());
        let report = json(&out);
        assert_eq!(report["encryption"], "rekeyed", "{report}");
        let backup = PathBuf::from(report["backup"].as_str().unwrap());
        assert!(
            versions_with_key(&backup, &second).is_ok(),
            "the backup takes the new key"
        );
        assert!(
            versions_with_key(&backup, &first).is_err(),
            "and not the old one"
        );
        assert_eq!(history(&t, Some(&second)), plain, "after --rekey");
        let out = with_key(&t, &first, &["session", "list"]);
        assert_eq!(out.status.code(), Some(3), "the old key no longer opens it");
        ok(with_key(&t, &second, &["verify"]));
        // No copy the old key or no key opens is left, but the plain backup the plain
        // upgrade made, which `verify` and `paths` report with how to remove it.
        let old_backup = PathBuf::from(format!("{}.v2.bak", t.db_path().display()));
        assert_eq!(encryption_of(&old_backup), Encryption::Plain);
        for args in [&["verify"][..], &["paths"]] {
            let text = stdout(&ok(with_key(&t, &second, args)));
            assert!(
                text.contains(&format!(
                    "warning: {} is an unencrypted copy of the database, from before it was \
                     encrypted: remove it (rm {})",
                    old_backup.display(),
                    old_backup.display()
                )),
                "{args:?}: {text}"
            );
        }
        std::fs::remove_file(&old_backup).unwrap();
        let report = json(&ok(with_key(&t, &second, &["verify", "--json"])));
        assert!(report.get("warnings").is_none(), "{report}");

        // An older plain database encrypted and upgraded in one run gives the same.
        let fresh = TestStore::empty();
        copy_tree(&fixture("v2"), fresh.dir.path());
        let fresh = fresh.with_legacy();
        let key = key_file(fresh.dir.path(), "key");
        ok(with_key(&fresh, &key, &["migrate", "--encrypt"]));
        assert_eq!(
            history(&fresh, Some(&key)),
            plain,
            "encrypted, then upgraded"
        );
        for (path, bytes) in database_bytes(&fresh) {
            assert!(!holds(&bytes, "What does the chart show?"), "{path:?}");
        }
    }

    /// A change of encryption needs the database to itself: with a daemon holding it,
    /// it is refused in one line and the file stays as it was.
    #[test]
    fn encrypting_a_database_in_use_is_refused_and_changes_nothing() {
        let t = TestStore::empty();
        assert!(t.run(&["session", "new"]).status.success());
        let key = key_file(t.dir.path(), "key");
        let mut daemon = t.bin().arg("acp").spawn();
        let wal = PathBuf::from(format!("{}-wal", t.db_path().display()));
        while !wal.exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = with_key(&t, &key, &["migrate", "--encrypt"]);
        let err = assert_one_line_error(&out);
        assert!(err.contains("to itself"), "{err}");
        drop(daemon.stdin.take());
        assert!(daemon.wait().unwrap().success());
        assert_eq!(encryption_of(&t.db_path()), Encryption::Plain);
        assert!(t.run(&["verify"]).status.success());
        let leftovers: Vec<String> = std::fs::read_dir(t.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("partial") || n.contains(".bak"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// An encrypted database in a folder its reader cannot write to is read through
    /// `immutable` connections keyed before they read, as a plain one is (issue 10).
    #[test]
    fn an_encrypted_database_in_a_read_only_folder_can_be_read() {
        use crate::opening::{Writable, chmod_tree, without_write_permission};
        let t = TestStore::empty();
        let key = key_file(t.dir.path(), "key");
        let id = json(&ok(with_key(
            &t,
            &key,
            &["session", "new", "--json", "--title", "kept"],
        )))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let Some(_) = without_write_permission(t.dir.path()) else {
            eprintln!("skipped: running as root and `setpriv` cannot drop to nobody here");
            return;
        };
        chmod_tree(t.dir.path(), 0o555, 0o444);
        let _restore = Writable(t.dir.path());
        let before = snapshot(t.dir.path());
        for args in [
            &["session", "show", &id][..],
            &["verify"],
            &["search", "kept"],
        ] {
            let out = without_write_permission(t.dir.path())
                .unwrap()
                .args(args)
                .args(["--key-file", key.to_str().unwrap()])
                .on(&t.config)
                .output();
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        }
        assert!(snapshot(t.dir.path()) == before, "nothing was written");
    }

    /// Commands that only read an encrypted database leave no side file, as on a plain
    /// one: their connections are keyed before they read.
    #[test]
    fn readers_of_an_encrypted_database_leave_no_side_files() {
        let t = TestStore::empty();
        let key = key_file(t.dir.path(), "key");
        let id = json(&ok(with_key(&t, &key, &["session", "new", "--json"])))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        ok(with_key(
            &t,
            &key,
            &["send", "--session", &id, "--text", "hello there"],
        ));
        let before = snapshot(t.dir.path());
        for args in [
            &["session", "list"][..],
            &["session", "show", &id],
            &["events", "--session", &id],
            &["restore", "--session", &id],
            &["dispatch", "--session", &id],
            &["search", "hello"],
            &["verify"],
            &["paths"],
        ] {
            ok(with_key(&t, &key, args));
            assert!(snapshot(t.dir.path()) == before, "{args:?} left a trace");
        }
    }
}
