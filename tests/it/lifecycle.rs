//! What of a session's life only SQLite or only the binary shows: a recorded turn
//! moving its session up the list, malformed cursors, erasure from the database
//! files, delete from the command line and its progress, a fork of a reference whose
//! file is gone, the V4 migration's index of older rows, hostile archives refused
//! with nothing written, and the lifecycle commands through the binary. The cursor
//! walk, delete and its tombstone, gc, fork, search and export/import are in
//! `conformance::lifecycle` (and the gc race in `conformance::gc_race`), which run on
//! SQLite too.

use sessionstore::store::Verify;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::lifecycle::import::ImportId;
use sessionstore::lifecycle::{DeleteOptions, DeletionStatus, Export, ListQuery};
use sessionstore::model::{NewSession, TitleSource, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::{Error, SessionId};

use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{TestStore, all_sessions, assert_one_line_error, block_json, json, stderr};

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
    t.store().record(older, vec![chunk]).await.unwrap();
    let page = t
        .store()
        .list_sessions(ListQuery {
            limit: 10,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [older, newer]
    );
}

#[test]
fn a_malformed_cursor_or_limit_is_a_usage_error() {
    let t = TestStore::empty();
    json(&t.run(&["session", "new", "--json"]));
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
        let err = crate::support::assert_usage_error(&t.run(args));
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

/// One word each for the texts the search index holds, each starting with a letter no
/// other word of the test starts with: FTS5 keeps its terms lower-cased and each leaf
/// page's first term whole, so such a word is in the file as written here for as long
/// as the index holds it.
const INDEXED: [&str; 5] = ["quokka", "zebu", "ocelot", "narwhal", "kinkajou"];

/// A word only in a title the session had before a rename: the index no longer
/// answers it, but its old entries stay in FTS5's segments until they are merged.
const RENAMED_AWAY: &str = "yapok";

#[tokio::test]
async fn a_deleted_sessions_text_is_gone_from_the_database_files() {
    let t = TestStore::new().await;
    let gone = t.session().await;
    let kept = t.session().await;
    let upload = t.upload(gone, "wombat-ledger.txt", b"file body").await;
    let mut out = Outgoing::user("QUOKKA-7719 secret plans");
    out.expanded = Some("QUOKKA-7719 expanded ocelot".into());
    out.transcript = Some("QUOKKA-7719 narwhal said aloud".into());
    out.attach = vec![upload.uri.clone()];
    t.send(gone, out).await;
    for title in ["QUOKKA-7719 yapok draft", "QUOKKA-7719 zebu title"] {
        t.store()
            .set_title(gone, title.into(), TitleSource::Explicit)
            .await
            .unwrap();
    }
    let chunk = |text: &str| -> SessionUpdate {
        serde_json::from_value(serde_json::json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}
        }))
        .unwrap()
    };
    t.store()
        .record(gone, vec![chunk("QUOKKA-7719 agent kinkajou")])
        .await
        .unwrap();
    // A continued chunk rewrites the item, and with it the item's indexed text.
    t.store().record(gone, vec![chunk(" reply")]).await.unwrap();
    t.send(kept, Outgoing::user("PLATYPUS-3301 stays")).await;
    // Before the delete, the index holds every one of those texts and the file shows
    // each word: what follows would prove nothing otherwise.
    for word in INDEXED {
        let hits = t.store().search(word.into(), None, 10).await.unwrap();
        assert!(!hits.is_empty(), "{word} is not indexed");
        assert!(
            hits.iter().all(|h| h.session_id == gone),
            "{word}: {hits:?}"
        );
    }
    let settled = || {
        t.raw()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap()
    };
    assert_eq!(settled(), 0);
    for word in INDEXED.into_iter().chain([RENAMED_AWAY]) {
        assert!(
            !files_holding(t.dir.path(), word.as_bytes()).is_empty(),
            "{word} is not in the file as the test expects"
        );
    }

    let report = t
        .store()
        .delete_sessions(vec![gone], DeleteOptions::default())
        .await
        .unwrap();
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
    let needles = ["QUOKKA-7719", "wombat-ledger", RENAMED_AWAY];
    for needle in needles.into_iter().chain(INDEXED) {
        assert_eq!(
            files_holding(t.dir.path(), needle.as_bytes()),
            Vec::<PathBuf>::new(),
            "{needle} survived the delete"
        );
    }
    for word in INDEXED {
        let hits = t.store().search(word.into(), None, 10).await.unwrap();
        assert!(hits.is_empty(), "{word}: {hits:?}");
    }
    let entries: i64 = t
        .raw()
        .query_row(
            "SELECT count(*) FROM search_entries WHERE session_id = ?1",
            [gone.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(entries, 0, "the index names nothing of the deleted session");
    // The same scan does see the text of a session that was not deleted.
    assert!(!files_holding(t.dir.path(), b"PLATYPUS-3301").is_empty());

    assert!(matches!(
        t.store().session(gone).await,
        Err(Error::SessionNotFound(_))
    ));
    let verified = t.store().verify(Verify::Check).await.unwrap().after;
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

/// V10: the index keeps no copy of the text; each entry's text is read from its row
/// (`search_text`), and after every way the store writes, rewrites and removes
/// indexed text (a renamed title, a continued agent message, a long one sealed in
/// segments, a thought, a fork, deletes of a session) FTS5's own check finds the index as the
/// rows say it should be. Had a trigger or a rewrite taken an entry out with the text
/// the row holds after the change rather than before, the check would fail. Since
/// V11 the items among them (a fork's too) are indexed under their own row ids.
#[tokio::test]
async fn the_search_index_reads_its_text_from_the_rows_and_agrees_with_them() {
    let t = TestStore::new().await;
    let a = t.session().await;
    let b = t.session().await;
    let update = |kind: &str, text: &str| -> SessionUpdate {
        serde_json::from_value(serde_json::json!({
            "sessionUpdate": kind,
            "content": {"type": "text", "text": text}
        }))
        .unwrap()
    };
    for s in [a, b] {
        for title in ["first marmoset title", "second tapir title"] {
            t.store()
                .set_title(s, title.into(), TitleSource::Explicit)
                .await
                .unwrap();
        }
        t.send(s, Outgoing::user("a user wrote about gibbons"))
            .await;
        t.store()
            .record(s, vec![update("agent_thought_chunk", "thinking of lemurs")])
            .await
            .unwrap();
        t.store()
            .record(s, vec![update("agent_message_chunk", "the answer ")])
            .await
            .unwrap();
        // A message long enough to be sealed in segments, streamed a chunk at a time.
        for i in 0..300 {
            let chunk = format!("segment word{i} {} ", "pangolin ".repeat(30));
            t.store()
                .record(s, vec![update("agent_message_chunk", &chunk)])
                .await
                .unwrap();
        }
        t.send(s, Outgoing::user("next turn")).await;
    }
    let check = |when: &str| {
        let conn = t.raw();
        conn.execute(
            "INSERT INTO search (search, rank) VALUES ('integrity-check', 1)",
            [],
        )
        .unwrap_or_else(|e| panic!("{when}: {e}"));
        let copies: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'search_content'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(copies, 0, "{when}: the index keeps a copy of the text");
        // V11: an item is indexed under its own row id, with no entry; the entries
        // that remain (titles, messages, segments) have ids below zero.
        let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(
            count(
                "SELECT count(*) FROM search_entries WHERE id >= 0 OR instr(entry_id, '/') = 0 AND source NOT IN ('title', 'message')"
            ),
            0,
            "{when}: an entry of an item, or one above zero"
        );
        assert_eq!(
            count("SELECT count(*) FROM search_docsize"),
            count(
                "SELECT (SELECT count(*) FROM search_entries) + (SELECT count(*) FROM items
                 WHERE kind IN ('agent_message', 'agent_thought'))"
            ),
            "{when}"
        );
    };
    check("with the sealed segments waiting to be indexed");
    // They wait for the writer to be idle (V14); a search through a store that can
    // write indexes them first.
    t.store()
        .search("pangolin".to_owned(), None, 1)
        .await
        .unwrap();
    check("after the writes");
    let segments: i64 = t
        .raw()
        .query_row(
            "SELECT count(*) FROM search_entries WHERE entry_id LIKE '%/%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        segments >= 2,
        "no message was sealed in segments: {segments}"
    );
    for (word, source) in [
        ("tapir", "title"),
        ("gibbons", "message"),
        ("lemurs", "agent_thought"),
        ("word299", "agent_message"),
    ] {
        let hits = t.store().search(word.into(), None, 10).await.unwrap();
        assert_eq!(hits.len(), 2, "{word}: {hits:?}");
        assert!(
            hits.iter()
                .all(|h| h.source == source && h.snippet.contains(&format!("[{word}]"))),
            "{word}: {hits:?}"
        );
    }
    let renamed = t.store().search("marmoset".into(), None, 10).await.unwrap();
    assert!(renamed.is_empty(), "{renamed:?}");

    let fork = t
        .store()
        .fork_session(b, None, None)
        .await
        .unwrap()
        .session
        .id;
    check("after a fork");
    let forked = t
        .store()
        .search("lemurs".into(), Some(fork), 10)
        .await
        .unwrap();
    assert_eq!(forked.len(), 1, "{forked:?}");
    t.store()
        .delete_sessions(vec![a], DeleteOptions::default())
        .await
        .unwrap();
    check("after a delete");
    // A title cleared behind the store's back (the store only renames) takes its entry
    // with it and makes none: a trigger whose insert is an aggregate would make one
    // from no row at all.
    t.raw()
        .execute(
            "UPDATE sessions SET title = NULL WHERE id = ?1",
            [fork.to_string()],
        )
        .unwrap();
    check("after a title cleared");
    for word in ["tapir", "gibbons", "lemurs", "word299", "pangolin"] {
        let hits = t.store().search(word.into(), None, 10).await.unwrap();
        assert!(hits.iter().all(|h| h.session_id != a), "{word}: {hits:?}");
        assert!(!hits.is_empty(), "{word}: the kept session is not found");
    }
}

#[test]
fn delete_from_the_command_line_dry_run_unknown_twice_and_legacy_files() {
    let t = TestStore::empty().with_legacy();
    let dir = &t.dir;
    let legacy = t.legacy();
    let run = |args: &[&str]| t.run(args);
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
    t.store()
        .delete_sessions(
            ids,
            sessionstore::lifecycle::DeleteOptions {
                run: sessionstore::lifecycle::Run::Apply,
                progress,
            },
        )
        .await
        .unwrap();
    let steps = steps.lock().unwrap();
    assert!(steps.len() >= 2, "{steps:?}");
    let last = steps.last().unwrap();
    assert_eq!(last.done, last.total, "{steps:?}");
}

#[tokio::test]
async fn a_fork_keeps_a_reference_whose_file_is_gone_and_it_degrades_as_in_the_origin() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let gone = h.attach(s, "gone.txt", b"soon gone").await;
    h.send_files(s, "look", &[&gone]).await;
    std::fs::remove_file(h.folder_in(h.configured(), s).join("gone.txt")).unwrap();
    let forked = h.store().fork_session(s, None, None).await.unwrap();
    assert_eq!(forked.missing, ["gone.txt"]);
    let m = &h.store().all_messages(forked.session.id).await.unwrap()[0];
    assert_eq!(m.refs.len(), 1);
    let restored = h.store().collect_restore(forked.session.id).await.unwrap();
    assert!(
        restored.messages[0]
            .blocks
            .iter()
            .all(|b| crate::support::context_of(&block_json(b)).is_none()),
        "the missing file degrades to a notice"
    );
}

#[test]
fn the_v4_migration_indexes_what_an_older_database_holds() {
    let t = TestStore::empty();
    crate::support::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2"),
        t.dir.path(),
    );
    let db = t.dir.path().join("sessions.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (messages, items): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM messages),
                    (SELECT count(*) FROM items WHERE kind IN ('agent_message', 'agent_thought'))",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let word: String = conn
        .query_row(
            "SELECT display_text FROM messages ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(conn);
    crate::support::json(&t.run(&["migrate", "--json"]));
    let conn = rusqlite::Connection::open(&db).unwrap();
    // Every text FTS5 holds, less the titles (V11: an item's under its row id, the
    // rest under their entries').
    let indexed: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM search_docsize)
                  - (SELECT count(*) FROM sessions WHERE title IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexed, messages + items);
    let first_word = word
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches(|c: char| !c.is_alphanumeric());
    let out = t.run(&["search", first_word, "--json"]);
    let hits = crate::support::json(&out);
    assert!(!hits.as_array().unwrap().is_empty(), "{first_word}: {hits}");
}

/// What an exported archive holds: the manifest and each file's bytes, in order.
fn unpack(archive: &Path) -> (serde_json::Value, Vec<(String, Vec<u8>)>) {
    use std::io::Read;
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let mut manifest = None;
    let mut files = vec![];
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
        let mut bytes = vec![];
        entry.read_to_end(&mut bytes).unwrap();
        if name == "manifest.json" {
            manifest = Some(serde_json::from_slice(&bytes).unwrap());
        } else {
            files.push((name, bytes));
        }
    }
    (manifest.unwrap(), files)
}

/// One entry of a crafted archive: a raw name written straight into the header (so
/// names the builder refuses can be made), its type, and its bytes.
struct Raw {
    name: Vec<u8>,
    kind: tar::EntryType,
    bytes: Vec<u8>,
    link: Option<&'static str>,
}

fn file(name: &str, bytes: &[u8]) -> Raw {
    Raw {
        name: name.as_bytes().to_vec(),
        kind: tar::EntryType::Regular,
        bytes: bytes.to_vec(),
        link: None,
    }
}

fn craft(path: &Path, entries: Vec<Raw>) {
    let mut tar = tar::Builder::new(std::fs::File::create(path).unwrap());
    for e in entries {
        let mut header = tar::Header::new_old();
        let name = &mut header.as_old_mut().name;
        name[..e.name.len()].copy_from_slice(&e.name);
        header.set_entry_type(e.kind);
        header.set_size(e.bytes.len() as u64);
        header.set_mode(0o644);
        if let Some(target) = e.link {
            header.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
        }
        header.set_cksum();
        tar.append(&header, e.bytes.as_slice()).unwrap();
    }
    tar.finish().unwrap();
}

#[tokio::test]
async fn every_kind_of_hostile_archive_is_refused_with_one_line_and_nothing_written() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let a = h.attach(s, "a.txt", b"alpha").await;
    h.send_files(s, "one file", &[&a]).await;
    let good = h.dir.path().join("good.tar");
    h.store()
        .export(s, good.clone(), Export::default())
        .await
        .unwrap();
    let (manifest, files) = unpack(&good);
    assert_eq!(files, [("files/a.txt".to_owned(), b"alpha".to_vec())]);
    let m = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut m = manifest.clone();
        f(&mut m);
        serde_json::to_vec(&m).unwrap()
    };
    let plain = serde_json::to_vec(&manifest).unwrap();
    let twice = [&b"{\"missing\":[],"[..], &plain[1..]].concat();
    let device = |kind| Raw {
        name: b"files/a.txt".to_vec(),
        kind,
        bytes: vec![],
        link: None,
    };
    let big = sessionstore::attachments::MAX_ATTACHMENT_BYTES + 1;
    let cases: Vec<(&str, Vec<Raw>)> = vec![
        (
            "climbs out",
            vec![
                file("manifest.json", &plain),
                file("files/../a.txt", b"alpha"),
            ],
        ),
        (
            "absolute",
            vec![
                file("manifest.json", &plain),
                file("/files/a.txt", b"alpha"),
            ],
        ),
        (
            "absolute manifest",
            vec![
                file("/manifest.json", &plain),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "symlink",
            vec![
                file("manifest.json", &plain),
                Raw {
                    link: Some("/etc/passwd"),
                    ..device(tar::EntryType::Symlink)
                },
            ],
        ),
        (
            "hard link",
            vec![
                file("manifest.json", &plain),
                Raw {
                    link: Some("manifest.json"),
                    ..device(tar::EntryType::Link)
                },
            ],
        ),
        (
            "char device",
            vec![file("manifest.json", &plain), device(tar::EntryType::Char)],
        ),
        (
            "block device",
            vec![file("manifest.json", &plain), device(tar::EntryType::Block)],
        ),
        (
            "fifo",
            vec![file("manifest.json", &plain), device(tar::EntryType::Fifo)],
        ),
        (
            "folder",
            vec![
                file("manifest.json", &plain),
                device(tar::EntryType::Directory),
            ],
        ),
        (
            "name unlike the manifest's",
            vec![file("manifest.json", &plain), file("files/b.txt", b"alpha")],
        ),
        (
            "unsafe stored name",
            vec![
                file(
                    "manifest.json",
                    &m(&|m| m["files"][0]["name"] = "a\u{1}.txt".into()),
                ),
                file("files/a\u{1}.txt", b"alpha"),
            ],
        ),
        (
            "nested",
            vec![
                file("manifest.json", &plain),
                file("files/x/a.txt", b"alpha"),
            ],
        ),
        (
            "over the attachment limit",
            vec![
                file("manifest.json", &m(&|m| m["files"][0]["size"] = big.into())),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "size unlike the manifest's",
            vec![
                file("manifest.json", &plain),
                file("files/a.txt", b"alphabet"),
            ],
        ),
        ("file missing", vec![file("manifest.json", &plain)]),
        (
            "file twice",
            vec![
                file("manifest.json", &plain),
                file("files/a.txt", b"alpha"),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "reference to a file not held",
            vec![file(
                "manifest.json",
                &m(&|m| m["files"] = serde_json::json!([])),
            )],
        ),
        (
            "rows unlike the log",
            vec![
                file(
                    "manifest.json",
                    &m(&|m| m["messages"][0]["displayText"] = "forged".into()),
                ),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "an unknown field",
            vec![
                file("manifest.json", &m(&|m| m["extra"] = 1.into())),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "a field twice",
            vec![file("manifest.json", &twice), file("files/a.txt", b"alpha")],
        ),
        (
            "an event of another session",
            vec![
                file(
                    "manifest.json",
                    &m(&|m| m["events"][0]["sessionId"] = SessionId::new().to_string().into()),
                ),
                file("files/a.txt", b"alpha"),
            ],
        ),
        (
            "manifest not first",
            vec![file("files/a.txt", b"alpha"), file("manifest.json", &plain)],
        ),
        (
            "manifest not json",
            vec![file("manifest.json", b"{"), file("files/a.txt", b"alpha")],
        ),
        ("empty", vec![]),
    ];
    let before = crate::support::snapshot(h.dir.path());
    assert_eq!(std::fs::read_dir(h.configured()).unwrap().count(), 1);
    let sessions = all_sessions(h.store()).await.unwrap().len();
    let bad = tempfile::tempdir().unwrap();
    for (what, entries) in cases {
        let path = bad.path().join(format!("{what}.tar"));
        craft(&path, entries);
        let err = h
            .store()
            .import_archive(path.clone(), ImportId::New)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ArchiveRefused { .. }), "{what}: {err}");
        assert!(!err.to_string().contains('\n'), "{what}: {err}");
        // The binary says it in one line, exit 3.
        let out = crate::support::Bin::new(bad.path())
            .arg("import")
            .arg(&path)
            .arg("--db")
            .arg(h.dir.path().join("sessions.db"))
            .arg("--attachments-root")
            .arg(h.configured())
            .output();
        let line = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(3), "{what}: {line}");
    }
    assert_eq!(all_sessions(h.store()).await.unwrap().len(), sessions);
    let after = crate::support::snapshot(h.dir.path());
    let changed: Vec<_> = after
        .keys()
        .filter(|p| {
            !p.to_string_lossy().starts_with("sessions.db") && before.get(*p) != after.get(*p)
        })
        .collect();
    assert!(changed.is_empty(), "refused imports wrote {changed:?}");
    let folders = std::fs::read_dir(h.configured()).unwrap().count();
    assert_eq!(
        folders, 1,
        "no session folder was made, not even an empty one"
    );
    // The crafting itself is sound: the same entries, unharmed, import.
    let control = bad.path().join("control.tar");
    craft(
        &control,
        vec![file("manifest.json", &plain), file("files/a.txt", b"alpha")],
    );
    h.store()
        .import_archive(control, ImportId::New)
        .await
        .unwrap();
    // The manifest as builds before the streamed export wrote it (the same document,
    // pretty-printed from the whole `Manifest`) still imports.
    let whole: sessionstore::lifecycle::export::Manifest =
        serde_json::from_value(manifest.clone()).unwrap();
    let earlier = bad.path().join("earlier.tar");
    craft(
        &earlier,
        vec![
            file("manifest.json", &serde_json::to_vec_pretty(&whole).unwrap()),
            file("files/a.txt", b"alpha"),
        ],
    );
    let imported = h
        .store()
        .import_archive(earlier, ImportId::New)
        .await
        .unwrap();
    let messages = h.store().all_messages(imported.session.id).await.unwrap();
    assert_eq!(messages[0].display_text, "one file");
    h.store().import_archive(good, ImportId::New).await.unwrap();
}

#[test]
fn the_commands_fork_search_export_and_import_through_the_binary() {
    use crate::support::{json, stdout};
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = json(&t.run(&["session", "new", "--title", "Tamarind talk", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let upload = d.join("upload.txt");
    std::fs::write(&upload, b"tamarind facts").unwrap();
    let attached = json(&t.run(&[
        "attach",
        "--session",
        &s,
        upload.to_str().unwrap(),
        "--json",
    ]));
    let uri = attached[0]["uri"].as_str().unwrap().to_owned();
    let m = json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "sour tamarind\nsecond line",
        "--attach",
        &uri,
        "--json",
    ]));
    let m = m["id"].as_str().unwrap().to_owned();

    let fork = json(&t.run(&[
        "session", "fork", &s, "--at", &m, "--title", "branch", "--json",
    ]));
    let fork = fork["id"].as_str().unwrap().to_owned();
    assert_ne!(fork, s);
    assert!(
        d.join("attachments")
            .join(&fork)
            .join("upload.txt")
            .is_file()
    );

    let hits = json(&t.run(&["search", "tamarind", "--json"]));
    let hits = hits.as_array().unwrap();
    // The origin's title and message, and the fork's message (its title is "branch").
    assert_eq!(hits.len(), 3, "{hits:?}");
    for hit in hits {
        let keys: Vec<&str> = hit
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in ["sessionId", "messageId", "snippet", "rank"] {
            assert!(keys.contains(&key), "{hit}");
        }
    }
    let limited = json(&t.run(&[
        "search",
        "tamarind",
        "--session",
        &fork,
        "--limit",
        "1",
        "--json",
    ]));
    assert_eq!(limited.as_array().unwrap().len(), 1);
    assert_eq!(limited[0]["sessionId"], fork.as_str());
    // Human output: one line a hit, the message's newline escaped away.
    let out = t.run(&["search", "sour"]);
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
    let out = t.run(&["search", "\"sour"]);
    let line = assert_one_line_error(&out);
    assert!(!line.contains("SQL"), "{line}");

    let archive = d.join("x.tar");
    let out = t.run(&[
        "export",
        "--session",
        &s,
        "--out",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let imported = json(&t.run(&["import", archive.to_str().unwrap(), "--json"]));
    let new = imported["id"].as_str().unwrap();
    assert!(d.join("attachments").join(new).join("upload.txt").is_file());
    assert!(t.run(&["verify"]).status.success());

    let md = d.join("x.md");
    let out = t.run(&[
        "export",
        "--session",
        &s,
        "--out",
        md.to_str().unwrap(),
        "--format",
        "markdown",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.starts_with("# Tamarind talk\n"), "{text}");
    assert!(
        text.contains("sour tamarind") && text.contains("- upload.txt"),
        "{text}"
    );
    assert!(
        !text.contains(d.to_str().unwrap()) && !text.contains("attachment:"),
        "{text}"
    );
    // An export that cannot be written leaves nothing behind.
    let out = t.run(&[
        "export",
        "--session",
        &s,
        "--out",
        d.join("no/such/dir/x.tar").to_str().unwrap(),
    ]);
    assert_one_line_error(&out);
}

/// Issue 47, item 2, through the binary: a title says where it came from in its
/// event (`session new --title` and `session rename`: explicit; the first user
/// message: message), a rename is trimmed and answered as stored, and a blank one is
/// refused with one line and nothing written.
#[test]
fn titles_record_their_source_and_a_blank_rename_writes_nothing() {
    let t = TestStore::empty();
    let titled = json(&t.run(&["session", "new", "--title", "Tide tables", "--json"]));
    let titled = titled["id"].as_str().unwrap().to_owned();
    let untitled = json(&t.run(&["session", "new", "--json"]));
    let untitled = untitled["id"].as_str().unwrap().to_owned();
    json(&t.run(&[
        "send",
        "--session",
        &untitled,
        "--text",
        "  when is the ebb?\nsoon",
        "--json",
    ]));
    let renamed = json(&t.run(&["session", "rename", &titled, "  Harbour notes ", "--json"]));
    assert_eq!(renamed["title"], "Harbour notes");
    let events = |id: &str| -> Vec<serde_json::Value> {
        let out = t.run(&["events", "--session", id]);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let titles = |id: &str| -> Vec<(String, serde_json::Value, serde_json::Value)> {
        events(id)
            .into_iter()
            .filter(|e| e["kind"] == "session_created" || e["kind"] == "session_renamed")
            .map(|e| {
                let p = &e["payload"];
                let source = match e["kind"].as_str() {
                    Some("session_created") => p["titleSource"].clone(),
                    _ => p["source"].clone(),
                };
                (
                    e["kind"].as_str().unwrap().to_owned(),
                    p["title"].clone(),
                    source,
                )
            })
            .collect()
    };
    use serde_json::{Value, json as j};
    assert_eq!(
        titles(&titled),
        [
            ("session_created".into(), j!("Tide tables"), j!("explicit")),
            (
                "session_renamed".into(),
                j!("Harbour notes"),
                j!("explicit")
            ),
        ]
    );
    assert_eq!(
        titles(&untitled),
        [
            ("session_created".into(), Value::Null, Value::Null),
            (
                "session_renamed".into(),
                j!("when is the ebb?"),
                j!("message")
            ),
        ]
    );
    let before = events(&titled).len();
    let out = t.run(&["session", "rename", &titled, " \t "]);
    assert!(!out.status.success());
    assert_one_line_error(&out);
    assert_eq!(events(&titled).len(), before);
    let shown = json(&t.run(&["session", "show", &titled, "--json"]));
    assert_eq!(shown["session"]["title"], "Harbour notes");
    assert_eq!(shown["session"]["titleSource"], "explicit");
    assert!(t.run(&["verify"]).status.success());
}

/// `ListQuery::default()` is the first page of `DEFAULT_PAGE` sessions, archived ones
/// left out; walking its cursors sees every other session once.
#[tokio::test]
async fn the_default_list_query_is_a_first_page_without_archived_sessions() {
    use sessionstore::lifecycle::DEFAULT_PAGE;
    let t = TestStore::new().await;
    let mut ids = Vec::new();
    for _ in 0..DEFAULT_PAGE + 2 {
        ids.push(t.session().await);
    }
    let archived = ids[3];
    t.store().set_archived(vec![archived], true).await.unwrap();
    let first = t.store().list_sessions(ListQuery::default()).await.unwrap();
    assert_eq!(first.sessions.len(), DEFAULT_PAGE);
    let mut seen: Vec<_> = first.sessions.iter().map(|s| s.id).collect();
    let mut cursor = first.next_cursor;
    while let Some(c) = cursor {
        let page = t
            .store()
            .list_sessions(ListQuery {
                cursor: Some(c),
                ..ListQuery::default()
            })
            .await
            .unwrap();
        seen.extend(page.sessions.iter().map(|s| s.id));
        cursor = page.next_cursor;
    }
    assert_eq!(seen.len(), ids.len() - 1);
    assert!(!seen.contains(&archived));
    assert_eq!(all_sessions(t.store()).await.unwrap().len(), ids.len());
}

/// `Export::default()` writes a redacted archive, even from a store kept with
/// redaction off; `ExportFormat::Markdown` with `Redaction::Off` writes the transcript
/// as stored.
#[tokio::test]
async fn the_default_export_is_a_redacted_archive_and_markdown_is_a_format() {
    use sessionstore::config::Redaction;
    use sessionstore::lifecycle::ExportFormat;
    use sessionstore::redact::Kind;
    use sessionstore::redact::fresh::{Rng, fresh};
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::config_in(dir.path());
    config.redaction = Redaction::Off;
    let store = sessionstore::Store::open(config).await.unwrap();
    let (secret, _) = fresh(Kind::AwsAccessKeyId, &mut Rng::new());
    let s = store
        .create_session(NewSession {
            title: Some("exported".into()),
            ..NewSession::default()
        })
        .await
        .unwrap()
        .id;
    let said = format!("the key is {secret} ok");
    store
        .send(s, crate::support::user_text(&said))
        .await
        .unwrap();

    let tar = dir.path().join("s.tar");
    let exported = store
        .export(s, tar.clone(), Export::default())
        .await
        .unwrap();
    assert_eq!(exported.messages, 1);
    let (manifest, _) = unpack(&tar);
    let text = manifest.to_string();
    assert!(
        !text.contains(&secret) && text.contains("[REDACTED:"),
        "{text}"
    );

    let md = dir.path().join("s.md");
    let how = Export {
        format: ExportFormat::Markdown,
        redaction: Redaction::Off,
    };
    store.export(s, md.clone(), how).await.unwrap();
    let transcript = std::fs::read_to_string(&md).unwrap();
    assert!(
        transcript.contains("exported") && transcript.contains(&said),
        "{transcript}"
    );
}
