//! A session's life after its messages: paged listing while sessions come and go,
//! delete with erasure (and the append-only log it must not open to anyone else), and
//! gc under the configured root, including against a concurrent attach and send.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::lifecycle::{DeletionStatus, SessionCursor};
use sessionstore::model::ToolsHost;
use sessionstore::store::Outgoing;
use sessionstore::{Error, SessionId, Store};

use crate::support::{
    TestStore, assert_one_line_error, config_in, json, parse_uri, run_in, stderr,
};

/// Every page from the start, creating `add_between` sessions after each page.
async fn walk(t: &TestStore, limit: usize, add_between: usize) -> (Vec<SessionId>, usize) {
    let mut seen = Vec::new();
    let mut cursor: Option<SessionCursor> = None;
    let mut pages = 0;
    loop {
        let page = t.store.list_sessions_page(limit, cursor).await.unwrap();
        assert!(page.sessions.len() <= limit);
        pages += 1;
        seen.extend(page.sessions.iter().map(|s| s.id));
        for _ in 0..add_between {
            t.session().await;
        }
        match page.next_cursor {
            // The cursor goes through its printed form, as a caller would carry it.
            Some(c) => cursor = Some(c.to_string().parse().unwrap()),
            None => break,
        }
    }
    (seen, pages)
}

#[tokio::test]
async fn pages_are_complete_and_disjoint_while_sessions_are_added_between_them() {
    let t = TestStore::new().await;
    let mut before = Vec::new();
    for _ in 0..23 {
        before.push(t.session().await);
    }
    let (seen, pages) = walk(&t, 5, 2).await;
    assert_eq!(
        pages, 5,
        "23 sessions make 5 pages of 5, the last not empty"
    );
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a session was listed twice");
    // Every session there at the start is listed, newest first; the ones added
    // meanwhile come before the first cursor, so no later page shows them.
    let newest_first: Vec<_> = before.iter().rev().copied().collect();
    assert_eq!(seen, newest_first);
    // A fresh walk sees everyone, still once each.
    let (all, _) = walk(&t, 7, 0).await;
    assert_eq!(all.len(), 23 + 5 * 2);
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
}

#[tokio::test]
async fn a_session_updated_between_pages_moves_to_the_front_and_shows_once() {
    let t = TestStore::new().await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(t.session().await);
    }
    let first = t.store.list_sessions_page(3, None).await.unwrap();
    assert_eq!(
        first.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [ids[5], ids[4], ids[3]]
    );
    // One already shown and one not yet shown get news.
    t.send(ids[4], Outgoing::user("again")).await;
    t.send(ids[1], Outgoing::user("news")).await;
    let rest = t
        .store
        .list_sessions_page(3, first.next_cursor)
        .await
        .unwrap();
    assert_eq!(
        rest.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [ids[2], ids[0]],
        "neither updated session shows again on a later page"
    );
    assert_eq!(rest.next_cursor, None);
    let fresh = t.store.list_sessions_page(2, None).await.unwrap();
    assert_eq!(
        fresh.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [ids[1], ids[4]]
    );
}

#[tokio::test]
async fn a_recorded_turn_moves_its_session_to_the_front() {
    let t = TestStore::new().await;
    let older = t.session().await;
    let newer = t.session().await;
    let chunk: SessionUpdate = serde_json::from_value(serde_json::json!({
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "working on it"}
    }))
    .unwrap();
    t.store.record(older, vec![chunk]).await.unwrap();
    let page = t.store.list_sessions_page(10, None).await.unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [older, newer]
    );
}

#[test]
fn list_json_has_the_contract_shape_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let sid = json(&run_in(
        dir.path(),
        &[
            "session",
            "new",
            "--title",
            "Plans",
            "--tools-host",
            "ssh",
            "--json",
        ],
    ))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, b"0123456789").unwrap();
    let attached = json(&run_in(
        dir.path(),
        &[
            "attach",
            "--session",
            &sid,
            file.to_str().unwrap(),
            "--json",
        ],
    ));
    let uri = attached[0]["uri"].as_str().unwrap();
    // The same file referred to twice counts once.
    for text in ["one", "two"] {
        json(&run_in(
            dir.path(),
            &[
                "send",
                "--session",
                &sid,
                "--text",
                text,
                "--attach",
                uri,
                "--json",
            ],
        ));
    }
    let listed = json(&run_in(dir.path(), &["session", "list", "--json"]));
    let s = &listed["sessions"][0];
    let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys.iter().copied().collect::<HashSet<_>>(),
        HashSet::from([
            "id",
            "title",
            "toolsHost",
            "createdAt",
            "updatedAt",
            "messages",
            "attachmentBytes"
        ])
    );
    assert_eq!(s["id"], sid.as_str());
    assert_eq!(s["title"], "Plans");
    assert_eq!(s["toolsHost"], "ssh");
    assert_eq!(s["messages"], 2);
    assert_eq!(s["attachmentBytes"], 10);
    assert!(s["updatedAt"].as_str().unwrap() > s["createdAt"].as_str().unwrap());
    assert_eq!(listed["nextCursor"], serde_json::Value::Null);

    // `--limit` pages, and the printed cursor leads to the rest.
    json(&run_in(dir.path(), &["session", "new", "--json"]));
    let first = json(&run_in(
        dir.path(),
        &["session", "list", "--limit", "1", "--json"],
    ));
    assert_eq!(first["sessions"].as_array().unwrap().len(), 1);
    let cursor = first["nextCursor"].as_str().unwrap();
    let second = json(&run_in(
        dir.path(),
        &[
            "session", "list", "--limit", "1", "--cursor", cursor, "--json",
        ],
    ));
    assert_eq!(second["sessions"][0]["id"], sid.as_str());
    assert_eq!(second["nextCursor"], serde_json::Value::Null);
}

#[test]
fn a_malformed_cursor_or_limit_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    json(&run_in(dir.path(), &["session", "new", "--json"]));
    for (args, says) in [
        (
            &["session", "list", "--cursor", "not a cursor"][..],
            "malformed cursor",
        ),
        (
            &["session", "list", "--cursor", "bm8gaWQgaGVyZQ"],
            "malformed cursor",
        ),
        (&["session", "list", "--limit", "0"], "--limit"),
    ] {
        let err = crate::support::assert_usage_error(&run_in(dir.path(), args));
        assert!(
            err.lines().next().unwrap().contains(says),
            "{args:?}: {err}"
        );
    }
}

/// Every file in `dir` (recursively) whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            found.push(path);
        }
    }
    found
}

#[tokio::test]
async fn a_deleted_sessions_text_is_gone_from_the_database_files() {
    let t = TestStore::new().await;
    let gone = t.session().await;
    let kept = t.session().await;
    let upload = t.upload(gone, "wombat-ledger.txt", b"file body").await;
    let mut out = Outgoing::user("QUOKKA-7719 secret plans");
    out.expanded = Some("QUOKKA-7719 expanded".into());
    out.attach = vec![upload.uri.clone()];
    t.send(gone, out).await;
    t.store
        .rename_session(gone, "QUOKKA-7719 title".into())
        .await
        .unwrap();
    let chunk: SessionUpdate = serde_json::from_value(serde_json::json!({
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "QUOKKA-7719 agent reply"}
    }))
    .unwrap();
    t.store.record(gone, vec![chunk]).await.unwrap();
    t.send(kept, Outgoing::user("PLATYPUS-3301 stays")).await;

    let report = t.store.delete_sessions(vec![gone]).await.unwrap();
    assert!(report.erased);
    let deleted = &report.sessions[0];
    assert_eq!(deleted.status, DeletionStatus::Deleted);
    assert_eq!(
        (deleted.messages, deleted.items, deleted.references),
        (1, 1, 1)
    );
    assert_eq!((deleted.files, deleted.bytes), (1, 9));
    assert!(!t.folder(gone).exists());

    // The store still runs (its pool keeps the file open) while the files are read.
    for needle in ["QUOKKA-7719", "wombat-ledger"] {
        assert_eq!(
            files_holding(t.dir.path(), needle.as_bytes()),
            Vec::<PathBuf>::new(),
            "{needle} survived the delete"
        );
    }
    // The same scan does see the text of a session that was not deleted.
    assert!(!files_holding(t.dir.path(), b"PLATYPUS-3301").is_empty());

    assert!(matches!(
        t.store.session(gone).await,
        Err(Error::SessionNotFound(_))
    ));
    let verified = t.store.verify().await.unwrap();
    assert!(verified.ok(), "{:?}", verified.problems);
    assert_eq!(verified.tombstones, 1);
    let (at, events): (String, i64) = t
        .raw()
        .query_row(
            "SELECT deleted_at, events FROM tombstones WHERE session_id = ?1",
            [gone.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(Some(at), deleted.deleted_at);
    assert_eq!(events as u64, deleted.events);
}

#[tokio::test]
async fn the_event_log_stays_append_only_to_everyone_but_the_stores_delete() {
    let t = TestStore::new().await;
    let live = t.session().await;
    let gone = t.session().await;
    t.send(live, Outgoing::user("hello")).await;
    t.store.delete_sessions(vec![gone]).await.unwrap();
    let raw = t.raw();
    for statement in [
        "DELETE FROM events",
        "DELETE FROM events WHERE session_id = ?1",
        "UPDATE events SET kind = 'x' WHERE session_id = ?1",
    ] {
        let e = if statement.contains("?1") {
            raw.execute(statement, [live.to_string()])
        } else {
            raw.execute(statement, [])
        }
        .unwrap_err();
        assert!(e.to_string().contains("append-only"), "{statement}: {e}");
    }
    // A deleted session's id is never taken again.
    let e = raw
        .execute(
            "INSERT INTO sessions (id, tools_host, created_at, updated_at)
             VALUES (?1, 'local', 'x', 'x')",
            [gone.to_string()],
        )
        .unwrap_err();
    assert!(e.to_string().contains("was deleted"), "{e}");
    assert!(t.store.verify().await.unwrap().ok());
}

#[tokio::test]
async fn verify_reports_rows_beside_a_tombstone() {
    let t = TestStore::new().await;
    let s = t.session().await;
    t.send(s, Outgoing::user("still here")).await;
    t.raw()
        .execute(
            "INSERT INTO tombstones VALUES (?1, '2026-01-01T00:00:00.000000000Z', 0, 0, 0, 0)",
            [s.to_string()],
        )
        .unwrap();
    let report = t.store.verify().await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&s.to_string()) && p.contains("was deleted but still has")),
        "{:?}",
        report.problems
    );
}

#[test]
fn delete_from_the_command_line_dry_run_unknown_twice_and_legacy_files() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("legacy");
    let run = |args: &[&str]| {
        crate::support::bin(dir.path())
            .args(args)
            .arg("--db")
            .arg(dir.path().join("sessions.db"))
            .arg("--attachments-root")
            .arg(dir.path().join("attachments"))
            .arg("--legacy-root")
            .arg(&legacy)
            .output()
            .unwrap()
    };
    let sid = json(&run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = dir.path().join("a.txt");
    std::fs::write(&file, b"abc").unwrap();
    json(&run(&[
        "attach",
        "--session",
        &sid,
        file.to_str().unwrap(),
        "--json",
    ]));
    let old = legacy.join(&sid).join("old.txt");
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::write(&old, b"from before").unwrap();

    let planned = json(&run(&["session", "delete", &sid, "--dry-run", "--json"]));
    assert_eq!(planned["dryRun"], true);
    assert_eq!(planned["sessions"][0]["status"], "would_delete");
    assert_eq!(planned["sessions"][0]["files"], 1);
    assert_eq!(planned["sessions"][0]["bytes"], 3);
    let listed = json(&run(&["session", "list", "--json"]));
    assert_eq!(
        listed["sessions"][0]["id"],
        sid.as_str(),
        "a dry run deletes nothing"
    );
    assert!(
        dir.path()
            .join("attachments")
            .join(&sid)
            .join("a.txt")
            .exists()
    );

    // An unknown id fails the whole call, before anything goes.
    let unknown = SessionId::new().to_string();
    let err = assert_one_line_error(&run(&["session", "delete", &sid, &unknown]));
    assert!(err.contains(&unknown), "{err}");
    assert_eq!(
        json(&run(&["session", "list", "--json"]))["sessions"][0]["id"],
        sid.as_str()
    );

    let deleted = json(&run(&["session", "delete", &sid, "--json"]));
    let s = &deleted["sessions"][0];
    assert_eq!(s["status"], "deleted");
    assert_eq!(s["legacyFiles"], serde_json::json!([old.to_str().unwrap()]));
    assert!(old.exists(), "legacy roots are read-only to the store");
    assert!(!dir.path().join("attachments").join(&sid).exists());
    let human = run(&["session", "delete", &sid]);
    assert!(human.status.success(), "{}", stderr(&human));
    assert!(
        crate::support::stdout(&human).contains("already deleted"),
        "{human:?}"
    );
    assert_eq!(
        json(&run(&["session", "list", "--json"]))["sessions"],
        serde_json::json!([])
    );
    let verified = json(&run(&["verify", "--json"]));
    assert_eq!(verified["tombstones"], 1);
    assert_eq!(verified["problems"], serde_json::json!([]));
}

#[tokio::test]
async fn delete_reports_progress_to_its_hook() {
    let t = TestStore::new().await;
    let ids = vec![t.session().await, t.session().await];
    let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = steps.clone();
    let progress = sessionstore::lifecycle::Progress::new(move |s| seen.lock().unwrap().push(s));
    t.store
        .delete_sessions_with(ids, false, progress)
        .await
        .unwrap();
    let steps = steps.lock().unwrap();
    assert!(steps.len() >= 2, "{steps:?}");
    let last = steps.last().unwrap();
    assert_eq!(last.done, last.total, "{steps:?}");
}

/// Sets a file's modification time an `age` ago (the change time cannot be set, so
/// the test gives gc a grace period between the two).
fn age(path: &Path, age: std::time::Duration) {
    let when = std::time::SystemTime::now() - age;
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

#[test]
fn gc_removes_only_what_no_one_needs_under_the_configured_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("attachments");
    let legacy = dir.path().join("legacy");
    let run = |args: &[&str]| {
        crate::support::bin(dir.path())
            .args(args)
            .arg("--db")
            .arg(dir.path().join("sessions.db"))
            .arg("--attachments-root")
            .arg(&root)
            .arg("--legacy-root")
            .arg(&legacy)
            .output()
            .unwrap()
    };
    let new_session = || {
        json(&run(&["session", "new", "--json"]))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let attach = |sid: &str, name: &str, bytes: &[u8]| {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        json(&run(&[
            "attach",
            "--session",
            sid,
            file.to_str().unwrap(),
            "--json",
        ]))[0]["uri"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let live = new_session();
    let referenced = attach(&live, "kept.txt", b"referenced");
    attach(&live, "orphan.txt", b"nobody refers");
    json(&run(&[
        "send",
        "--session",
        &live,
        "--text",
        "see",
        "--attach",
        &referenced,
        "--json",
    ]));
    let folder = root.join(&live);
    let temp = folder.join(format!(".upload-{}.partial.", "0123456789abcdef".repeat(2)));
    std::fs::write(&temp, b"half").unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"not the store's").unwrap();
    std::os::unix::fs::symlink(&outside, folder.join("link.txt")).unwrap();
    std::fs::create_dir_all(legacy.join(&live)).unwrap();
    std::fs::write(legacy.join(&live).join("legacy-orphan.txt"), b"old").unwrap();

    let deleted = new_session();
    json(&run(&["session", "delete", &deleted, "--json"]));
    // An attach that raced the delete left a folder behind.
    std::fs::create_dir_all(root.join(&deleted)).unwrap();
    std::fs::write(root.join(&deleted).join("late.txt"), b"late!").unwrap();
    let stranger = SessionId::new().to_string();
    std::fs::create_dir_all(root.join(&stranger)).unwrap();
    std::fs::write(root.join(&stranger).join("x.txt"), b"x").unwrap();
    std::fs::write(root.join("README"), b"someone's notes").unwrap();

    // With the default grace, fresh uploads are safe: only the deleted folder goes.
    let first = json(&run(&["gc", "--json"]));
    assert_eq!(first["deletedSessionFolders"], 1, "{first}");
    assert_eq!(
        first["deletedSessions"],
        serde_json::json!({"files": 1, "bytes": 5})
    );
    assert_eq!(first["unreferenced"]["files"], 0, "{first}");
    assert!(!root.join(&deleted).exists());
    assert!(folder.join("orphan.txt").exists());

    for path in [folder.join("orphan.txt"), temp.clone()] {
        age(&path, std::time::Duration::from_secs(3 * 3600));
    }
    let planned = json(&run(&["gc", "--grace", "1h", "--dry-run", "--json"]));
    assert_eq!(
        planned["leftovers"],
        serde_json::json!({"files": 1, "bytes": 4})
    );
    assert!(temp.exists(), "a dry run removes nothing");
    // A temporary file goes by its modification time (a live upload keeps moving
    // it); an upload by the later of that and its status-change time, which stays
    // recent here, so a grace only the modification time has passed keeps it.
    let swept = json(&run(&["gc", "--grace", "1h", "--json"]));
    assert_eq!(
        swept["leftovers"],
        serde_json::json!({"files": 1, "bytes": 4})
    );
    assert_eq!(swept["unreferenced"]["files"], 0, "{swept}");
    assert!(!temp.exists() && folder.join("orphan.txt").exists());

    let planned = json(&run(&["gc", "--grace", "0", "--dry-run", "--json"]));
    assert_eq!(
        planned["unreferenced"],
        serde_json::json!({"files": 1, "bytes": 13})
    );
    assert!(
        folder.join("orphan.txt").exists(),
        "a dry run removes nothing"
    );

    let done = json(&run(&["gc", "--grace", "0s", "--json"]));
    assert_eq!(
        done["unreferenced"],
        serde_json::json!({"files": 1, "bytes": 13}),
        "{done}"
    );
    assert_eq!(
        done["total"],
        serde_json::json!({"files": 1, "bytes": 13}),
        "{done}"
    );
    assert!(!folder.join("orphan.txt").exists());
    // What stays: the referenced upload, the link and what it points at, the legacy
    // root, the folder of a session this database does not know, a stray file.
    assert!(folder.join("kept.txt").exists());
    assert!(folder.join("link.txt").symlink_metadata().is_ok());
    assert!(outside.exists());
    assert!(legacy.join(&live).join("legacy-orphan.txt").exists());
    assert!(root.join(&stranger).join("x.txt").exists());
    assert!(root.join("README").exists());
    assert!(done["skipped"].as_u64().unwrap() >= 3, "{done}");
    let human = run(&["gc", "--grace", "0"]);
    assert!(
        crate::support::stdout(&human).starts_with("removed 0 unreferenced uploads"),
        "{human:?}"
    );
    let restored = json(&run(&["restore", "--session", &live, "--json"]));
    assert!(restored.to_string().contains("referenced"), "{restored}");
}

/// gc in another process, in a loop with no grace, while this one attaches and sends:
/// every send either stores a reference to a file that is still there afterwards, or
/// is refused because the file went first. No referenced file is ever lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_with_a_concurrent_attach_and_send_loses_no_referenced_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config_in(dir.path())).await.unwrap();
    let session = store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap()
        .id;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc_loop = {
        let stop = stop.clone();
        let path = dir.path().to_owned();
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || runs == 0 {
                let out = run_in(&path, &["gc", "--grace", "0", "--json"]);
                assert!(out.status.success(), "gc failed: {}", stderr(&out));
                runs += 1;
            }
            runs
        })
    };
    let rounds = crate::support::count("SESSIONSTORE_GC_RACE_ROUNDS", 40, 400);
    let (mut sent, mut refused) = (0, 0);
    for i in 0..rounds {
        let stored = match store
            .attach(
                session,
                format!("f{i}.txt"),
                format!("file {i}").into_bytes(),
            )
            .await
        {
            Ok(stored) => stored,
            // gc may take an upload's temporary file mid-write: that upload fails.
            Err(_) => continue,
        };
        let mut out = Outgoing::user(format!("message {i}"));
        out.attach = vec![parse_uri(&stored.uri.to_string())];
        match store.send(session, out).await {
            Ok(_) => sent += 1,
            Err(Error::Attachment(e)) if e.is_not_found() => refused += 1,
            Err(e) => panic!("send failed otherwise: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc_loop.join().unwrap();
    // One more gc after everything settled must keep every reference too.
    json(&run_in(dir.path(), &["gc", "--grace", "0", "--json"]));
    let messages = store.messages(session).await.unwrap();
    assert_eq!(messages.len(), sent, "{refused} refused, {runs} gc runs");
    for m in &messages {
        for r in &m.refs {
            let path = dir
                .path()
                .join("attachments")
                .join(session.to_string())
                .join(&r.stored_name);
            assert!(path.is_file(), "{} lost its file {}", m.id, path.display());
        }
    }
}
