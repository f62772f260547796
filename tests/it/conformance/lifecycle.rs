//! A session's whole life on both engines: paged listing, delete with its tombstone,
//! gc, fork, search and export/import, through the library and the binary, with the
//! same outcomes. Where an engine promises something the other does not (SQLite's
//! erasure from its files; the two search syntaxes), the body says so and checks each
//! engine's own promise.

use sessionstore::store::Verify;
use std::collections::HashSet;

use sessionstore::lifecycle::import::ImportId;
use sessionstore::lifecycle::{DeleteOptions, DeletionStatus, Export, ListQuery, SessionCursor};
use sessionstore::model::{Delivery, TitleSource, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::{Error, SessionId};

use super::common::{
    entry_ids, export, ids_named, moved, parse_update, restored_paths, seeded, session,
};
use crate::support::Whole;
use crate::support::{
    Expect, TestStore, all_sessions, assert_one_line_error, conformance, json, stderr, stdout,
};

conformance!(
    a_cursor_walk_sees_each_session_once_in_order,
    delete_leaves_a_tombstone_and_never_gives_the_id_again,
    gc_removes_only_what_no_one_needs_under_the_configured_root,
    a_fork_restores_from_its_own_folder_and_outlives_its_origin,
    search_finds_titles_messages_and_agent_text,
    hits_of_equal_rank_come_oldest_first_on_both_engines,
    a_long_streamed_answer_is_sealed_found_whole_and_erased_with_its_session,
    export_then_import_restores_the_same_history,
    a_long_history_is_exported_imported_and_forked_a_page_at_a_time,
    messages_kept_apart_by_a_tool_call_update_stay_apart_in_a_fork_and_an_import,
    archive_and_unarchive_from_the_command_line_all_or_nothing,
);

crate::support::over_tls!(
    delete_leaves_a_tombstone_and_never_gives_the_id_again,
    search_finds_titles_messages_and_agent_text,
    export_then_import_restores_the_same_history,
);

fn ids(page: &sessionstore::lifecycle::SessionPage) -> Vec<SessionId> {
    page.sessions.iter().map(|s| s.id).collect()
}

async fn a_cursor_walk_sees_each_session_once_in_order(b: TestStore) {
    let store = b.open().await;
    let mut before = Vec::new();
    for _ in 0..23 {
        before.push(session(&store, ToolsHost::Local).await);
    }
    // Pages of 5, with two sessions added after each page.
    let mut added = Vec::new();
    let mut seen = Vec::new();
    let mut cursor: Option<SessionCursor> = None;
    let mut pages = 0;
    loop {
        let page = store
            .list_sessions(ListQuery {
                limit: 5,
                cursor,
                ..ListQuery::default()
            })
            .await
            .unwrap();
        assert!(page.sessions.len() <= 5);
        pages += 1;
        seen.extend(ids(&page));
        for _ in 0..2 {
            added.push(session(&store, ToolsHost::Local).await);
        }
        match page.next_cursor {
            // Through its printed form, as a caller carries it.
            Some(c) => cursor = Some(c.to_string().parse().unwrap()),
            None => break,
        }
    }
    assert_eq!(
        pages, 5,
        "23 sessions make 5 pages of 5, the last not empty"
    );
    let newest_first: Vec<_> = before.iter().rev().copied().collect();
    assert_eq!(seen, newest_first, "each session once, newest first");

    // News moves a session to the front, and a later page does not show it again.
    let first = store
        .list_sessions(ListQuery {
            limit: 3,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    let shown = ids(&first);
    store.send(shown[1], Outgoing::user("again")).await.unwrap();
    let unseen = before[3];
    store.send(unseen, Outgoing::user("news")).await.unwrap();
    let mut rest = Vec::new();
    let mut cursor = first.next_cursor;
    while let Some(c) = cursor {
        let page = store
            .list_sessions(ListQuery {
                limit: 7,
                cursor: Some(c),
                ..ListQuery::default()
            })
            .await
            .unwrap();
        rest.extend(ids(&page));
        cursor = page.next_cursor;
    }
    assert!(!rest.contains(&shown[1]) && !rest.contains(&unseen));
    assert_eq!(rest.len(), 23 + 10 - 3 - 1);
    // The rest is everyone not on the first page, newest first, but for the one that
    // moved to the front: the ones added during the walk came first.
    let everyone: Vec<SessionId> = added
        .iter()
        .rev()
        .chain(before.iter().rev())
        .copied()
        .collect();
    assert_eq!(shown, everyone[..3]);
    let want: Vec<SessionId> = everyone[3..]
        .iter()
        .copied()
        .filter(|s| *s != unseen)
        .collect();
    assert_eq!(
        rest, want,
        "neither updated session shows again on a later page"
    );
    assert_eq!(
        ids(&store
            .list_sessions(ListQuery {
                limit: 2,
                ..ListQuery::default()
            })
            .await
            .unwrap()),
        [unseen, shown[1]]
    );

    // The binary's pages, with the printed cursor, and the contract's shape.
    let file = b.dir.path().join("ten.txt");
    std::fs::write(&file, b"0123456789").unwrap();
    let sid = unseen.to_string();
    let attached = json(&b.run(&[
        "attach",
        "--session",
        &sid,
        file.to_str().unwrap(),
        "--json",
    ]));
    let uri = attached[0]["uri"].as_str().unwrap();
    for text in ["one", "two"] {
        json(&b.run(&[
            "send",
            "--session",
            &sid,
            "--text",
            text,
            "--attach",
            uri,
            "--json",
        ]));
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = vec!["session", "list", "--limit", "4", "--json"];
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let page = json(&b.run(&args));
        listed.extend(page["sessions"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert_eq!(page["nextCursor"], serde_json::Value::Null, "the last page");
                break;
            }
        }
    }
    assert_eq!(listed.len(), 33);
    let unique: HashSet<&str> = listed.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(unique.len(), 33);
    let top = &listed[0];
    let keys: HashSet<&str> = top
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        HashSet::from([
            "id",
            "title",
            "toolsHost",
            "createdAt",
            "updatedAt",
            "messages",
            "attachmentBytes",
            "archived"
        ])
    );
    assert_eq!(top["id"], sid.as_str());
    assert_eq!(top["messages"], 3);
    assert_eq!(
        top["attachmentBytes"], 10,
        "the same file twice counts once"
    );
    assert_eq!(top["toolsHost"], "local");
    assert_eq!(top["title"], "news");
    assert!(top["updatedAt"].as_str().unwrap() > top["createdAt"].as_str().unwrap());
    let updated: Vec<&str> = listed
        .iter()
        .map(|s| s["updatedAt"].as_str().unwrap())
        .collect();
    assert!(updated.windows(2).all(|w| w[0] >= w[1]), "{updated:?}");
    // A session the binary makes with a title and a tools host lists them.
    let made = json(&b.run(&[
        "session",
        "new",
        "--title",
        "Plans",
        "--tools-host",
        "ssh",
        "--json",
    ]));
    let first = json(&b.run(&["session", "list", "--limit", "1", "--json"]));
    assert_eq!(first["sessions"].as_array().unwrap().len(), 1);
    let newest = &first["sessions"][0];
    assert_eq!(newest["id"], made["id"]);
    assert_eq!(newest["title"], "Plans");
    assert_eq!(newest["toolsHost"], "ssh");
    assert_eq!(newest["messages"], 0);
    assert!(first["nextCursor"].is_string(), "{first}");
    let err = crate::support::assert_usage_error(&b.run(&["session", "list", "--cursor", "nope"]));
    assert!(err.contains("malformed cursor"), "{err}");
}

async fn delete_leaves_a_tombstone_and_never_gives_the_id_again(b: TestStore) {
    let store = b.open().await;
    let (gone, _, _) = seeded(&store, b.legacy()).await;
    let live = session(&store, ToolsHost::Local).await;
    store
        .send(live, Outgoing::user("stays here"))
        .await
        .unwrap();
    let archive = b.dir.path().join("gone.tar");
    store
        .export(gone, archive.clone(), Export::default())
        .await
        .unwrap();
    let sid = gone.to_string();
    let folder = b.configured().join(&sid);
    assert!(folder.join("café chart.png").is_file());

    let planned = json(&b.run(&["session", "delete", &sid, "--dry-run", "--json"]));
    assert_eq!(planned["sessions"][0]["status"], "would_delete");
    assert_eq!(planned["sessions"][0]["files"], 2);
    assert!(folder.is_dir(), "a dry run deletes nothing");
    assert_eq!(store.all_messages(gone).await.unwrap().len(), 3);
    // An unknown id fails the whole call before anything goes.
    let unknown = SessionId::new().to_string();
    let err = assert_one_line_error(&b.run(&["session", "delete", &sid, &unknown]));
    assert!(err.contains(&unknown), "{err}");
    assert!(folder.is_dir());

    let report = store
        .delete_sessions(vec![gone], DeleteOptions::default())
        .await
        .unwrap();
    let deleted = &report.sessions[0];
    assert_eq!(deleted.status, DeletionStatus::Deleted);
    assert_eq!(
        (deleted.messages, deleted.items, deleted.references),
        (3, 1, 3)
    );
    assert_eq!(deleted.files, 2);
    assert_eq!(
        deleted.legacy_files,
        [b.legacy().join(&sid).join("old.txt")]
    );
    assert!(report.erased, "{report:?}");
    assert!(!folder.exists(), "the configured-root folder went");
    assert!(
        b.legacy().join(&sid).join("old.txt").is_file(),
        "legacy roots are read-only to the store"
    );
    assert!(matches!(
        store.session(gone).await.unwrap_err(),
        Error::SessionNotFound(_)
    ));
    for (table, whose) in [
        ("sessions", format!("id = '{sid}'")),
        ("messages", format!("session_id = '{sid}'")),
        ("message_refs", format!("uri LIKE 'attachment:///{sid}/%'")),
        ("items", format!("session_id = '{sid}'")),
        ("events", format!("session_id = '{sid}'")),
        ("search_entries", format!("session_id = '{sid}'")),
        ("tombstones", format!("session_id = '{sid}'")),
    ] {
        let left = b
            .raw_query(&format!("SELECT count(*) FROM {table} WHERE {whose}"))
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        let want = if table == "tombstones" { "1" } else { "0" };
        assert_eq!(left, [[Some(want.to_owned())]], "{table}");
    }
    let verified = store.verify(Verify::Check).await.unwrap().after;
    assert!(verified.ok(), "{:?}", verified.problems);
    assert_eq!((verified.sessions, verified.tombstones), (1, 1));
    if !b.is_postgres() {
        // SQLite's own promise: secure_delete and a merged index leave no text of the
        // session in the database files. PostgreSQL promises only that the rows are
        // gone and their tables vacuumed (`PgDb::erase`).
        let db = std::fs::read(b.db()).unwrap();
        for word in ["durian", "lychee", "papaya"] {
            assert!(
                !db.windows(word.len()).any(|w| w == word.as_bytes()),
                "{word} is still in the file"
            );
        }
    }

    // Twice is not an error; the id is never taken again.
    let again = json(&b.run(&["session", "delete", &sid, "--json"]));
    assert_eq!(again["sessions"][0]["status"], "already_deleted");
    let err = b
        .raw_execute(&format!(
            "INSERT INTO sessions (id, tools_host, created_at, updated_at) \
             VALUES ('{sid}', 'local', 'x', 'x')"
        ))
        .unwrap_err();
    assert!(err.contains("was deleted"), "{err}");
    let imported = store.import_archive(archive, ImportId::Keep).await.unwrap();
    assert_ne!(
        imported.session.id, gone,
        "--keep-id does not take a deleted id"
    );
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
    let listed = json(&b.run(&["session", "list", "--json"]));
    let listed: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(!listed.contains(&sid.as_str()), "{listed:?}");
    let out = b.run(&["verify", "--json"]);
    let verified = json(&out);
    assert_eq!(verified["tombstones"], 1);
    assert_eq!(verified["problems"], serde_json::json!([]));

    // The log stays append-only for every session but one being erased, and verify
    // reports a tombstone written beside a live session's rows.
    let live = live.to_string();
    for statement in [
        "DELETE FROM events".to_owned(),
        format!("DELETE FROM events WHERE session_id = '{live}'"),
        format!("UPDATE events SET kind = 'x' WHERE session_id = '{live}'"),
    ] {
        let err = b.raw_execute(&statement).unwrap_err();
        assert!(err.contains("append-only"), "{statement}: {err}");
    }
    b.raw_execute(&format!(
        "INSERT INTO tombstones VALUES ('{live}', '2026-01-01T00:00:00.000000000Z', 0, 0, 0, 0)"
    ))
    .unwrap();
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(
        report.problems.iter().any(|p| p.kind()
            == sessionstore::model::ProblemKind::DeletedButPresent
            && p.session().map(|id| id.to_string()) == Some(live.clone())
            && p.to_string().contains("was deleted but still has")),
        "{:?}",
        report.problems
    );
}

/// Sets a file's modification time an `age` ago (the change time cannot be set, so
/// the test gives gc a grace period between the two).
fn age(path: &std::path::Path, age: std::time::Duration) {
    let when = std::time::SystemTime::now() - age;
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

async fn gc_removes_only_what_no_one_needs_under_the_configured_root(b: TestStore) {
    let store = b.open().await;
    let root = b.configured();
    let live = session(&store, ToolsHost::Local).await;
    let kept = store
        .attach_one(live, "kept.txt".into(), b"referenced".to_vec())
        .await
        .unwrap();
    store
        .attach_one(live, "orphan.txt".into(), b"nobody refers".to_vec())
        .await
        .unwrap();
    let mut out = Outgoing::user("see");
    out.attach = vec![kept.uri.clone()];
    store.send(live, out).await.unwrap();
    let legacy = b.legacy().join(live.to_string());
    std::fs::create_dir_all(&legacy).unwrap();
    std::fs::write(legacy.join("legacy-orphan.txt"), b"old").unwrap();
    let deleted = session(&store, ToolsHost::Local).await;
    store
        .delete_sessions(vec![deleted], DeleteOptions::default())
        .await
        .unwrap();
    // An attach that raced the delete left a folder behind.
    std::fs::create_dir_all(root.join(deleted.to_string())).unwrap();
    std::fs::write(root.join(deleted.to_string()).join("late.txt"), b"late!").unwrap();
    let stranger = SessionId::new().to_string();
    std::fs::create_dir_all(root.join(&stranger)).unwrap();
    std::fs::write(root.join(&stranger).join("x.txt"), b"x").unwrap();
    std::fs::write(root.join("README"), b"someone's notes").unwrap();
    // A crashed upload's temporary file, and a link out of the session folder.
    let folder = root.join(live.to_string());
    let temp = folder.join(format!(".upload-{}.partial.", "0123456789abcdef".repeat(2)));
    std::fs::write(&temp, b"half").unwrap();
    let outside = b.dir.path().join("outside.txt");
    std::fs::write(&outside, b"not the store's").unwrap();
    std::os::unix::fs::symlink(&outside, folder.join("link.txt")).unwrap();
    drop(store);

    let planned = json(&b.run(&["gc", "--grace", "0", "--dry-run", "--json"]));
    assert_eq!(planned["dryRun"], true, "{planned}");
    assert_eq!(
        planned["unreferenced"],
        serde_json::json!({"files": 1, "bytes": 13})
    );
    assert!(root.join(live.to_string()).join("orphan.txt").exists());

    // With the default grace, fresh uploads are safe: only the deleted folder goes.
    let first = json(&b.run(&["gc", "--json"]));
    assert_eq!(first["deletedSessionFolders"], 1, "{first}");
    assert_eq!(
        first["deletedSessions"],
        serde_json::json!({"files": 1, "bytes": 5})
    );
    assert_eq!(first["unreferenced"]["files"], 0, "{first}");
    assert!(!root.join(deleted.to_string()).exists());
    assert!(folder.join("orphan.txt").exists());

    for path in [folder.join("orphan.txt"), temp.clone()] {
        age(&path, std::time::Duration::from_secs(3 * 3600));
    }
    let planned = json(&b.run(&["gc", "--grace", "1h", "--dry-run", "--json"]));
    assert_eq!(
        planned["leftovers"],
        serde_json::json!({"files": 1, "bytes": 4})
    );
    assert!(temp.exists(), "a dry run removes nothing");
    // A temporary file goes by its modification time (a live upload keeps moving
    // it); an upload by the later of that and its status-change time, which stays
    // recent here, so a grace only the modification time has passed keeps it.
    let swept = json(&b.run(&["gc", "--grace", "1h", "--json"]));
    assert_eq!(
        swept["leftovers"],
        serde_json::json!({"files": 1, "bytes": 4})
    );
    assert_eq!(swept["unreferenced"]["files"], 0, "{swept}");
    assert!(!temp.exists() && folder.join("orphan.txt").exists());

    let done = json(&b.run(&["gc", "--grace", "0s", "--json"]));
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
    assert!(legacy.join("legacy-orphan.txt").exists());
    assert!(root.join(&stranger).join("x.txt").exists());
    assert!(root.join("README").exists());
    assert!(done["skipped"].as_u64().unwrap() >= 3, "{done}");
    let human = b.run(&["gc", "--grace", "0"]);
    assert!(
        stdout(&human).starts_with("removed 0 unreferenced uploads"),
        "{human:?}"
    );
    let restored = json(&b.run(&["restore", "--session", &live.to_string()]));
    assert!(restored.to_string().contains("referenced"), "{restored}");
}

async fn a_fork_restores_from_its_own_folder_and_outlives_its_origin(b: TestStore) {
    let store = b.open().await;
    let (origin, files, ids) = seeded(&store, b.legacy()).await;
    let forked = store.fork_session(origin, None, None).await.unwrap();
    let fork = forked.session.id;
    assert_ne!(fork, origin);
    assert_eq!(
        forked.session.title.as_deref(),
        Some("compare the mango chart")
    );
    assert_eq!((forked.linked, forked.copied), (2, 1), "{forked:?}");
    assert!(forked.missing.is_empty(), "{forked:?}");
    let messages = store.all_messages(fork).await.unwrap();
    let texts: Vec<&str> = messages.iter().map(|m| m.display_text.as_str()).collect();
    assert_eq!(
        texts,
        ["compare the mango chart", "and the old durian notes?"]
    );
    assert!(messages.iter().all(|m| m.state == Delivery::Delivered));
    for r in messages.iter().flat_map(|m| &m.refs) {
        assert_eq!(r.uri.session(), fork, "{}", r.uri);
    }
    let items = store.all_items(fork).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].seq, 2, "the reply keeps its place");
    let events = store.all_events(fork).await.unwrap();
    assert_eq!(
        events[0].payload["forkedFrom"]["session"],
        origin.to_string()
    );
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());

    let want: Vec<Expect> = files.iter().map(|f| moved(f, fork)).collect();
    let fork_folder = b.configured().join(fork.to_string());
    let paths = restored_paths(&store, fork, &want).await;
    assert_eq!(paths.len(), 3);
    assert!(
        paths.iter().all(|p| p.starts_with(&fork_folder)),
        "{paths:?}"
    );

    // A fork at the first message, through the binary.
    let at = b.run(&[
        "session",
        "fork",
        &origin.to_string(),
        "--at",
        &ids[0].to_string(),
        "--title",
        "a branch",
        "--json",
    ]);
    let branch: SessionId = json(&at)["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        store.session(branch).await.unwrap().title.as_deref(),
        Some("a branch")
    );
    let messages = store.all_messages(branch).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].display_text, "compare the mango chart");
    assert!(
        store.all_items(branch).await.unwrap().is_empty(),
        "the reply came after"
    );
    // Only the first message's files are placed.
    let mut names: Vec<String> = std::fs::read_dir(b.configured().join(branch.to_string()))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [files[0].name.clone(), files[1].name.clone()]);
    let events = store.all_events(branch).await.unwrap();
    assert_eq!(
        events[0].payload["forkedFrom"]["message"],
        ids[0].to_string()
    );
    let queued = store.queued_messages(origin).await.unwrap()[0].id;
    let err = store
        .fork_session(origin, Some(queued), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ForkPoint { .. }), "{err}");
    let other = session(&store, ToolsHost::Local).await;
    let err = store
        .fork_session(other, Some(ids[0]), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::MessageOfAnotherSession { .. }),
        "{err}"
    );
    assert_eq!(
        all_sessions(&store).await.unwrap().len(),
        4,
        "the refused forks made no session"
    );

    // The origin goes; the fork restores as before, from its own folder, and keeps
    // its rows and its words.
    let report = store
        .delete_sessions(vec![origin], DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(report.sessions[0].status, DeletionStatus::Deleted);
    assert!(!b.configured().join(origin.to_string()).exists());
    std::fs::remove_dir_all(b.legacy().join(origin.to_string())).unwrap();
    let again = restored_paths(&store, fork, &want).await;
    assert_eq!(again, paths);
    assert_eq!(store.all_messages(fork).await.unwrap().len(), 2);
    assert_eq!(store.all_items(fork).await.unwrap().len(), 1);
    let hits = store.search("papaya".into(), None, 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].session_id, fork);
    // Erasing the origin's index entries took none of the fork's (nor the branch's),
    // the title included.
    for word in ["mango", "durian"] {
        let hits = store.search(word.into(), None, 10).await.unwrap();
        assert!(
            hits.iter().any(|hit| hit.session_id == fork),
            "{word}: {hits:?}"
        );
        assert!(
            hits.iter()
                .all(|hit| hit.session_id == fork || hit.session_id == branch),
            "{word}: {hits:?}"
        );
    }
    let listed: HashSet<SessionId> = store
        .list_sessions(ListQuery {
            limit: 10,
            ..ListQuery::default()
        })
        .await
        .unwrap()
        .sessions
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, HashSet::from([fork, branch, other]));
    let verified = store.verify(Verify::Check).await.unwrap().after;
    assert!(verified.ok(), "{:?}", verified.problems);
}

async fn search_finds_titles_messages_and_agent_text(b: TestStore) {
    let store = b.open().await;
    let (s, _, ids) = seeded(&store, b.legacy()).await;
    let other = session(&store, ToolsHost::Local).await;
    store
        .send(other, Outgoing::user("mango mango mango everywhere"))
        .await
        .unwrap();

    let hits = store.search("mango".into(), None, 10).await.unwrap();
    // Both titles (each the first message's text) and both messages.
    assert_eq!(hits.len(), 4, "{hits:?}");
    assert!(hits.windows(2).all(|w| w[0].rank <= w[1].rank), "{hits:?}");
    assert_eq!(hits[0].session_id, other, "{hits:?}");
    assert!(
        hits.iter().all(|h| h.snippet.contains("[mango]")),
        "{hits:?}"
    );
    let sources: HashSet<&str> = hits.iter().map(|h| h.source.as_str()).collect();
    assert_eq!(sources, HashSet::from(["title", "message"]));
    assert!(
        hits.iter()
            .all(|h| (h.source == "title") == h.message_id.is_none())
    );
    let mine = store.search("mango".into(), Some(s), 10).await.unwrap();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(mine.iter().all(|hit| hit.session_id == s));
    assert!(
        mine.iter()
            .any(|hit| hit.message_id == Some(ids[0].to_string()))
    );
    let papaya = store.search("papaya".into(), None, 10).await.unwrap();
    assert_eq!(papaya.len(), 1);
    assert_eq!(papaya[0].source, "agent_message");
    assert!(papaya[0].snippet.contains("[papaya]"), "{papaya:?}");
    let item = store.all_items(s).await.unwrap()[0].id.to_string();
    assert_eq!(papaya[0].message_id.as_deref(), Some(item.as_str()));
    assert_eq!(
        store.search("lychee".into(), None, 10).await.unwrap().len(),
        1
    );
    assert_eq!(
        store.search("mango".into(), None, 1).await.unwrap().len(),
        1
    );
    // Words, phrases and OR are read alike by FTS5 and by websearch_to_tsquery.
    let either = store
        .search("durian OR papaya".into(), None, 10)
        .await
        .unwrap();
    assert_eq!(either.len(), 2, "{either:?}");
    let phrase = store
        .search("\"papaya line\"".into(), None, 10)
        .await
        .unwrap();
    assert_eq!(phrase.len(), 1, "{phrase:?}");
    assert!(
        store
            .search("\"line papaya\"".into(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A rename replaces the title's text; a continued agent message its text.
    store
        .set_title(s, "kiwi plans".into(), TitleSource::Explicit)
        .await
        .unwrap();
    let titles = |hits: Vec<sessionstore::SearchHit>| {
        hits.into_iter().filter(|h| h.source == "title").count()
    };
    assert_eq!(
        titles(store.search("kiwi".into(), Some(s), 10).await.unwrap()),
        1
    );
    assert_eq!(
        titles(store.search("mango".into(), Some(s), 10).await.unwrap()),
        0
    );
    store
        .record(
            s,
            vec![parse_update(
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" and guava"}}"#,
                s,
            )],
        )
        .await
        .unwrap();
    assert_eq!(
        store.search("guava".into(), None, 10).await.unwrap().len(),
        1
    );
    // Names, URIs and paths are not indexed.
    for word in ["png", "attachments", "legacy"] {
        assert!(
            store
                .search(word.into(), None, 10)
                .await
                .unwrap()
                .is_empty(),
            "{word}"
        );
    }
    assert!(
        store
            .search("chart".into(), None, 10)
            .await
            .unwrap()
            .iter()
            .all(|hit| hit.source != "file")
    );
    let needles = vec![
        b.configured().display().to_string(),
        b.legacy().display().to_string(),
    ];
    let audit = sessionstore::oracle::audit_database(&b.config, &needles).unwrap();
    assert!(audit.value_hits.is_empty(), "{:?}", audit.value_hits);
    let err = store.search("   ".into(), None, 10).await.unwrap_err();
    assert!(matches!(err, Error::SearchQuery { .. }), "{err}");

    // Each engine's own syntax: FTS5 refuses what it cannot parse, in one line;
    // websearch_to_tsquery reads any text as words, quotes and operators, so the
    // same text is a query there.
    for query in ["\"mango", "mango \"chart"] {
        match (b.is_postgres(), store.search(query.into(), None, 10).await) {
            (false, Err(err)) => {
                assert!(matches!(err, Error::SearchQuery { .. }), "{query}: {err}");
                assert!(!err.to_string().contains('\n'), "{err}");
            }
            (true, Ok(hits)) => assert!(!hits.is_empty(), "{query}"),
            (_, other) => panic!("{query}: {other:?}"),
        }
    }
    if !b.is_postgres() {
        for bad in ["\"unterminated", "mango AND", "nosuchcolumn:mango"] {
            let err = store.search(bad.into(), None, 10).await.unwrap_err();
            assert!(matches!(err, Error::SearchQuery { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        let err = store.search("*".into(), None, 10).await.unwrap_err();
        assert!(
            !err.to_string().ends_with(' ') && !err.to_string().ends_with(':'),
            "no dangling colon: {err:?}"
        );
    }
    let out = b.run(&["search", "NOT durian"]);
    if b.is_postgres() {
        // `-word` is websearch's negation; "not" is a plain word there.
        assert!(out.status.success(), "{}", stderr(&out));
        let hits = json(&b.run(&["search", "mango -everywhere", "--json"]));
        assert!(
            hits.as_array()
                .unwrap()
                .iter()
                .all(|h| h["sessionId"] == s.to_string()),
            "{hits}"
        );
    } else {
        assert_one_line_error(&out);
    }

    // Accents: FTS5 here folds them (`remove_diacritics 2`); PostgreSQL's 'simple'
    // configuration keeps words as written, so only the accented spelling finds it.
    store
        .send(other, Outgoing::user("meet at the café"))
        .await
        .unwrap();
    assert_eq!(
        store.search("café".into(), None, 10).await.unwrap().len(),
        1
    );
    let folded = store.search("cafe".into(), None, 10).await.unwrap().len();
    assert_eq!(folded, if b.is_postgres() { 0 } else { 1 });

    // Through the binary: the contract's keys, a session filter and a limit.
    let hits = json(&b.run(&[
        "search",
        "mango",
        "--session",
        &other.to_string(),
        "--limit",
        "5",
        "--json",
    ]));
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 2, "{hits:?}");
    for hit in hits {
        assert_eq!(hit["sessionId"], other.to_string());
        for key in ["sessionId", "messageId", "source", "snippet", "rank"] {
            assert!(hit.get(key).is_some(), "{key} in {hit}");
        }
    }
}

/// A restore's output with what names where it was made replaced: the store's
/// folder, and the ids of its messages and recorded items (an import gives both new
/// ids; only the session's is kept).
fn normalised(text: &str, b: &TestStore, ids: &[String]) -> String {
    ids_named(&text.replace(b.dir.path().to_str().unwrap(), "<DIR>"), ids)
}

/// What the binary restores of `session` in `format`, with its directory and `ids`
/// named alike for comparing two sessions' output.
fn restored_as(on: &TestStore, session: SessionId, ids: &[String], format: &str) -> String {
    let out = on.run(&[
        "restore",
        "--session",
        &session.to_string(),
        "--format",
        format,
    ]);
    assert!(out.status.success(), "{format}: {}", stderr(&out));
    normalised(&stdout(&out), on, ids)
}

/// Texts that rank alike (one word each) come back oldest first, whatever they are:
/// SQLite's index names items and entries by row ids of two kinds (V11) and
/// PostgreSQL's by one, so each engine orders a tie by the id the hit names, made in
/// time order, and a limit keeps the same hits on both.
async fn hits_of_equal_rank_come_oldest_first_on_both_engines(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    store
        .set_title(s, "zebra".into(), TitleSource::Explicit)
        .await
        .unwrap();
    store.send(s, Outgoing::user("zebra")).await.unwrap();
    store
        .record(
            s,
            vec![parse_update(
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"zebra"}}"#,
                s,
            )],
        )
        .await
        .unwrap();
    store.send(s, Outgoing::user("zebra")).await.unwrap();
    let hits = store.search("zebra".into(), None, 10).await.unwrap();
    let sources: Vec<&str> = hits.iter().map(|h| h.source.as_str()).collect();
    assert_eq!(
        sources,
        ["title", "message", "agent_message", "message"],
        "{hits:?}"
    );
    assert!(hits.windows(2).all(|w| w[0].rank == w[1].rank), "{hits:?}");
    let first_two = store.search("zebra".into(), None, 2).await.unwrap();
    assert_eq!(first_two, hits[..2], "a limit keeps the oldest");
}

async fn export_then_import_restores_the_same_history(b: TestStore) {
    let store = b.open().await;
    let (s, files, _) = seeded(&store, b.legacy()).await;
    let archive = b.dir.path().join("out.tar");
    let said = export(|args| b.run(args), &s.to_string(), &archive);
    assert!(
        said.contains("exported 3 messages, 1 item, 3 files"),
        "{said}"
    );

    // Into another store of the same engine: without --keep-id a new id even where the
    // old one is free; with it, the same id and the same output once the folder and
    // the message ids are named alike.
    let other = b.another();
    let renamed = json(&other.run(&["import", archive.to_str().unwrap(), "--json"]));
    assert_ne!(renamed["id"], s.to_string(), "{renamed}");
    let imported = json(&other.run(&["import", archive.to_str().unwrap(), "--keep-id", "--json"]));
    assert_eq!(imported["id"], s.to_string());
    let there = other.open().await;
    assert!(there.verify(Verify::Check).await.unwrap().after.ok());
    assert_eq!(
        there.queued_messages(s).await.unwrap().len(),
        1,
        "queued stays queued"
    );
    assert_eq!(there.all_items(s).await.unwrap().len(), 1);
    let (here, away) = (entry_ids(&store, s).await, entry_ids(&there, s).await);
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let restore = |on: &TestStore, ids: &[String]| {
            let out = on.run(&["restore", "--session", &s.to_string(), "--format", format]);
            assert!(out.status.success(), "{format}: {}", stderr(&out));
            normalised(&crate::support::stdout(&out), on, ids)
        };
        // The file the origin read from its legacy root was exported with the rest
        // and imported into the configured root: that is the one path that differs.
        let before = restore(&b, &here).replace("<DIR>/legacy/", "<DIR>/attachments/");
        let after = restore(&other, &away);
        assert_eq!(before, after, "{format}");
        assert!(after.contains("<DIR>/attachments/"), "{format}: {after}");
    }
    let want: Vec<Expect> = files.iter().map(|f| moved(f, s)).collect();
    let paths = restored_paths(&there, s, &want).await;
    let folder = other.configured().join(s.to_string());
    assert_eq!(paths.len(), 3);
    assert!(paths.iter().all(|p| p.starts_with(&folder)), "{paths:?}");

    // Into the same store: the id is taken, so the copy gets a new one, also with
    // --keep-id; its history restores with the same content under its own folder.
    let copy = store
        .import_archive(archive.clone(), ImportId::New)
        .await
        .unwrap();
    let kept = store.import_archive(archive, ImportId::Keep).await.unwrap();
    for new in [copy.session.id, kept.session.id] {
        assert_ne!(new, s);
        let want: Vec<Expect> = files.iter().map(|f| moved(f, new)).collect();
        let paths = restored_paths(&store, new, &want).await;
        assert_eq!(paths.len(), 3);
        let folder = b.configured().join(new.to_string());
        assert!(paths.iter().all(|p| p.starts_with(&folder)), "{paths:?}");
    }
    let verified = store.verify(Verify::Check).await.unwrap().after;
    assert!(verified.ok(), "{:?}", verified.problems);
    assert_eq!(verified.sessions, 3);
}

/// A long answer streamed a few chunks a batch is sealed in segments when the next
/// message comes (V6), on both engines: it reads as the one message a single batch
/// makes, a word from its last segment is found as one hit naming the item, and
/// deleting the session takes every segment's search entry with it.
async fn a_long_streamed_answer_is_sealed_found_whole_and_erased_with_its_session(b: TestStore) {
    let store = b.open().await;
    let streamed = session(&store, ToolsHost::Local).await;
    let whole = session(&store, ToolsHost::Local).await;
    let chunk = |i: usize| {
        let line = format!(
            r#"{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"piece{i:04} of a long answer "}}}}"#
        );
        parse_update(&line, streamed)
    };
    let chunks: Vec<_> = (0..6000).map(chunk).collect();
    for batch in chunks.chunks(25) {
        store.record(streamed, batch.to_vec()).await.unwrap();
    }
    store.record(whole, chunks.clone()).await.unwrap();
    // A third session is deleted while its answer still streams (V9: its parts are
    // found from its items, as the table has no index of sessions).
    let abandoned = session(&store, ToolsHost::Local).await;
    for batch in chunks[..200].chunks(25) {
        store.record(abandoned, batch.to_vec()).await.unwrap();
    }
    let streaming_of = |s: SessionId| {
        let rows = b
            .raw_query(&format!(
                "SELECT count(*) FROM streaming_parts WHERE session_id = '{s}'"
            ))
            .unwrap();
        rows[0][0].as_deref().unwrap().parse::<i64>().unwrap()
    };
    assert!(streaming_of(abandoned) > 0);
    for s in [streamed, whole] {
        store.send(s, Outgoing::user("next")).await.unwrap();
    }
    assert_eq!(streaming_of(streamed), 0, "the send sealed them");
    assert!(
        streaming_of(abandoned) > 0,
        "and left another session's alone"
    );
    store
        .delete_sessions(vec![abandoned], DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(streaming_of(abandoned), 0, "deleted with its session");
    let body = |items: Vec<sessionstore::model::Item>| items[0].body.to_json();
    assert_eq!(
        body(store.all_items(streamed).await.unwrap()),
        body(store.all_items(whole).await.unwrap())
    );
    let segments = b
        .raw_query(&format!(
            "SELECT count(*) FROM item_parts WHERE session_id = '{streamed}' AND sealed = 1"
        ))
        .unwrap();
    let segments: i64 = segments[0][0].as_deref().unwrap().parse().unwrap();
    assert!(segments >= 3, "{segments} segments");
    let item = store.all_items(streamed).await.unwrap()[0].id.to_string();
    let hits = store
        .search("piece5999".into(), Some(streamed), 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].message_id.as_deref(), Some(item.as_str()));
    let hits = store
        .search("answer".into(), Some(streamed), 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "one hit an item: {hits:?}");
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());

    store
        .delete_sessions(vec![streamed], DeleteOptions::default())
        .await
        .unwrap();
    let left = b
        .raw_query(&format!(
            "SELECT count(*) FROM search_entries WHERE entry_id LIKE '{item}%'"
        ))
        .unwrap();
    assert_eq!(left[0][0].as_deref(), Some("0"));
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
}

/// The entries a restore hands on (delivered messages and items), in history order,
/// after the session's own id: what names them alike in two sessions' output.
async fn delivered_ids(store: &sessionstore::Store, s: SessionId) -> Vec<String> {
    let messages = store.all_messages(s).await.unwrap();
    let items = store.all_items(s).await.unwrap();
    let mut entries: Vec<(i64, String)> = messages
        .iter()
        .filter(|m| m.state == Delivery::Delivered)
        .map(|m| (m.seq, m.id.to_string()))
        .chain(items.iter().map(|i| (i.seq, i.id.to_string())))
        .collect();
    entries.sort();
    std::iter::once(s.to_string())
        .chain(entries.into_iter().map(|(_, id)| id))
        .collect()
}

/// A history longer than every page that export, import and fork read (700 agent
/// messages recorded 100 a turn between user messages, a tool call made first and
/// finished last, queued messages in the middle and at the end, a file): each copies
/// it a page at a time, and the copies restore as the origin does. A tool call row
/// edited behind the log is refused by both, and nothing is made.
async fn a_long_history_is_exported_imported_and_forked_a_page_at_a_time(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let notes = store
        .attach_one(s, "guava notes.txt".into(), b"guava facts".to_vec())
        .await
        .unwrap();
    let mut first = Outgoing::user("start the guava log");
    first.attach = vec![notes.uri.clone()];
    store.send(s, first).await.unwrap();
    let update = |line: String| parse_update(&line, s);
    store
        .record(
            s,
            vec![update(
                r#"{"sessionUpdate":"tool_call","toolCallId":"call-1","title":"read the log","status":"in_progress"}"#.into(),
            )],
        )
        .await
        .unwrap();
    let mut middle = None;
    for turn in 0..7 {
        let lines = (0..100)
            .map(|i| {
                update(format!(
                    r#"{{"sessionUpdate":"agent_message_chunk","messageId":"m-{turn}-{i}","content":{{"type":"text","text":"guava line {turn}-{i}"}}}}"#
                ))
            })
            .collect::<Vec<_>>();
        store.record(s, lines).await.unwrap();
        let sent = store
            .send(s, Outgoing::user(format!("turn {turn}")))
            .await
            .unwrap();
        if turn == 3 {
            middle = Some(sent.id);
            let mut queued = Outgoing::user("queued in the middle");
            queued.mid_turn = true;
            store.send(s, queued).await.unwrap();
        }
    }
    store
        .record(
            s,
            vec![update(
                r#"{"sessionUpdate":"tool_call_update","toolCallId":"call-1","status":"completed"}"#.into(),
            )],
        )
        .await
        .unwrap();
    let mut queued = Outgoing::user("queued at the end");
    queued.mid_turn = true;
    store.send(s, queued).await.unwrap();
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());

    let archive = b.dir.path().join("long.tar");
    let said = export(|args| b.run(args), &s.to_string(), &archive);
    assert!(
        said.contains("exported 10 messages, 701 items, 1 file"),
        "{said}"
    );
    let other = b.another();
    let imported = json(&other.run(&["import", archive.to_str().unwrap(), "--keep-id", "--json"]));
    assert_eq!(imported["id"], s.to_string(), "{imported}");
    let there = other.open().await;
    assert!(there.verify(Verify::Check).await.unwrap().after.ok());
    assert_eq!(there.queued_messages(s).await.unwrap().len(), 2);
    let (here, away) = (
        delivered_ids(&store, s).await,
        delivered_ids(&there, s).await,
    );
    assert_eq!(here.len(), 1 + 8 + 701);
    for format in ["acp", "acp-updates"] {
        let before = restored_as(&b, s, &here, format);
        assert!(before.contains("guava line 6-99"), "{format}");
        assert_eq!(before, restored_as(&other, s, &away, format), "{format}");
    }

    // A fork of the whole: the same delivered history under its own ids and folder.
    let fork = store.fork_session(s, None, None).await.unwrap();
    assert_eq!((fork.linked + fork.copied, fork.missing.len()), (1, 0));
    let forked = delivered_ids(&store, fork.session.id).await;
    assert_eq!(forked.len(), here.len());
    assert!(
        store
            .queued_messages(fork.session.id)
            .await
            .unwrap()
            .is_empty()
    );
    for format in ["acp", "acp-updates"] {
        assert_eq!(
            restored_as(&b, s, &here, format),
            restored_as(&b, fork.session.id, &forked, format),
            "{format}"
        );
    }
    // Each copy writes the items between two messages as batches of updates, an
    // event a batch (as `record` of a long input does), not an event an item.
    let events = |on: &TestStore, session: SessionId| -> usize {
        let n = on
            .raw_query(&format!(
                "SELECT count(*) FROM events WHERE session_id = '{session}'"
            ))
            .unwrap();
        n[0][0].as_deref().unwrap().parse().unwrap()
    };
    for (on, session) in [(&b, fork.session.id), (&other, s)] {
        let made = events(on, session);
        assert!(made < 60, "{made} events for 701 items and 10 messages");
    }
    // A fork at the fourth turn's message: what came before it, and it.
    let middle = middle.unwrap();
    let at = store.fork_session(s, Some(middle), None).await.unwrap();
    let seq = store.message(middle).await.unwrap().seq;
    let before = here
        .iter()
        .skip(1)
        .take_while(|id| *id != &middle.to_string())
        .count()
        + 1;
    assert_eq!(delivered_ids(&store, at.session.id).await.len(), 1 + before);
    let last = store.all_items(at.session.id).await.unwrap().pop().unwrap();
    assert!(last.seq < seq);
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());

    // A tool call edited behind the log: neither copy is made, and nothing is left.
    b.raw_execute(
        "UPDATE items SET body = replace(body, '\"completed\"', '\"failed\"') \
         WHERE kind = 'tool_call'",
    )
    .unwrap();
    let sessions = all_sessions(&store).await.unwrap().len();
    let folders = std::fs::read_dir(b.configured()).unwrap().count();
    let err = store.fork_session(s, None, None).await.unwrap_err();
    assert!(matches!(err, Error::LogMismatch { .. }), "{err}");
    let refused = b.dir.path().join("refused.tar");
    let out = b.run(&[
        "export",
        "--session",
        &s.to_string(),
        "--out",
        refused.to_str().unwrap(),
    ]);
    let line = assert_one_line_error(&out);
    assert!(line.contains("differs from its event log"), "{line}");
    assert!(!refused.exists());
    assert_eq!(all_sessions(&store).await.unwrap().len(), sessions);
    assert_eq!(std::fs::read_dir(b.configured()).unwrap().count(), folders);
    let leftovers: Vec<_> = std::fs::read_dir(b.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Two agent messages without a `messageId`, and two thoughts, recorded with an update
/// of an earlier tool call between their chunks, are separate entries; a fork and an
/// import keep them separate (written as their chunks alone, the second of each pair
/// would continue the first), and restore as the origin does.
async fn messages_kept_apart_by_a_tool_call_update_stay_apart_in_a_fork_and_an_import(
    b: TestStore,
) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    store.send(s, Outgoing::user("go")).await.unwrap();
    let lines = [
        r#"{"sessionUpdate":"tool_call","toolCallId":"x","title":"read","status":"in_progress"}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"First."}}"#,
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"x","status":"completed"}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Second."}}"#,
        r#"{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Hm."}}"#,
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"x","title":"read again"}"#,
        r#"{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Hm again."}}"#,
    ];
    store
        .record(
            s,
            lines.iter().map(|l| parse_update(l, s)).collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    let here = delivered_ids(&store, s).await;
    assert_eq!(here.len(), 1 + 1 + 5, "{here:?}");

    let fork = store.fork_session(s, None, None).await.unwrap();
    let forked = delivered_ids(&store, fork.session.id).await;
    assert_eq!(forked.len(), here.len(), "{forked:?}");
    let archive = b.dir.path().join("apart.tar");
    export(|args| b.run(args), &s.to_string(), &archive);
    let other = b.another();
    json(&other.run(&["import", archive.to_str().unwrap(), "--keep-id", "--json"]));
    let there = other.open().await;
    let away = delivered_ids(&there, s).await;
    for format in ["acp", "acp-updates"] {
        let origin = restored_as(&b, s, &here, format);
        assert!(origin.contains("Hm again."), "{format}");
        assert_eq!(
            origin,
            restored_as(&b, fork.session.id, &forked, format),
            "{format}"
        );
        assert_eq!(origin, restored_as(&other, s, &away, format), "{format}");
    }
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
    assert!(there.verify(Verify::Check).await.unwrap().after.ok());
}

/// Issue 47, item 1, on both engines through the binary: `session archive` and
/// `unarchive` are idempotent and all or nothing (an unknown id, or a session a proxy
/// holds, changes none of them); `session list` leaves archived sessions out unless
/// `--archived include|only`, its rows say `archived`, and a cursor keeps its
/// listing's filter; `session show` says so; an archived session is still found by
/// `search` and restored; the store's probe sees a claim without taking it; the log
/// has one event per change and `verify` agrees.
async fn archive_and_unarchive_from_the_command_line_all_or_nothing(b: TestStore) {
    let store = b.open().await;
    let mut made = Vec::new();
    for n in 0..5 {
        let id = session(&store, ToolsHost::Local).await;
        store
            .send(id, Outgoing::user(format!("pelican number {n}")))
            .await
            .unwrap();
        made.push(id.to_string());
    }
    let claim = store.claim_session(made[4].parse().unwrap()).await.unwrap();
    assert!(
        store
            .session_claimed(made[4].parse().unwrap())
            .await
            .unwrap()
    );
    assert!(
        !store
            .session_claimed(made[3].parse().unwrap())
            .await
            .unwrap()
    );
    let listed = |args: &[&str]| -> Vec<(String, bool)> {
        let mut all = vec!["session", "list", "--json"];
        all.extend(args);
        let page = json(&b.run(&all));
        page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap().to_owned(), s["archived"] == true))
            .collect()
    };
    let unknown = SessionId::new().to_string();
    for refused in [
        vec!["session", "archive", &made[0], &unknown],
        vec!["session", "archive", &made[0], &made[4]],
    ] {
        let out = b.run(&refused);
        assert!(!out.status.success(), "{refused:?}");
        assert_one_line_error(&out);
    }
    assert_eq!(listed(&["--archived", "only"]), []);
    drop(claim);
    assert!(
        !store
            .session_claimed(made[4].parse().unwrap())
            .await
            .unwrap()
    );

    let out = json(&b.run(&["session", "archive", &made[0], &made[1], &made[2], "--json"]));
    assert_eq!(out["sessions"].as_array().unwrap().len(), 3, "{out}");
    let again = json(&b.run(&["session", "archive", &made[1], "--json"]));
    assert_eq!(again["sessions"][0]["changed"], false, "{again}");
    let newest_first = |ids: &[usize], archived: bool| -> Vec<(String, bool)> {
        ids.iter()
            .rev()
            .map(|&i| (made[i].clone(), archived))
            .collect()
    };
    assert_eq!(listed(&[]), newest_first(&[3, 4], false));
    assert_eq!(
        listed(&["--archived", "exclude"]),
        newest_first(&[3, 4], false)
    );
    // Archiving is news: the archived sessions moved up, in the order archived.
    assert_eq!(
        listed(&["--archived", "only"]),
        newest_first(&[0, 1, 2], true)
    );
    assert_eq!(listed(&["--archived", "include"]).len(), 5);
    // A cursor keeps the filter of the listing that printed it.
    let first = json(&b.run(&[
        "session",
        "list",
        "--archived",
        "only",
        "--limit",
        "2",
        "--json",
    ]));
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    assert_eq!(listed(&["--cursor", &cursor]), newest_first(&[0], true));

    let shown = json(&b.run(&["session", "show", &made[0], "--json"]));
    assert_eq!(shown["session"]["archived"], true, "{shown}");
    let human = stdout(&b.run(&["session", "show", &made[0]]));
    assert!(human.contains("archived"), "{human}");
    let hits = json(&b.run(&["search", "pelican", "--json"]));
    let found: HashSet<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(found.len(), 5, "archived sessions are found: {hits}");
    let restored = json(&b.run(&["restore", "--session", &made[0], "--format", "acp"]));
    assert_eq!(restored["messages"].as_array().unwrap().len(), 1);

    let out = b.run(&["session", "unarchive", &made[0], &unknown]);
    assert!(!out.status.success());
    assert_eq!(listed(&["--archived", "only"]).len(), 3, "all or nothing");
    let out = json(&b.run(&["session", "unarchive", &made[0], &made[1], "--json"]));
    assert_eq!(out["sessions"][1]["changed"], true, "{out}");
    assert_eq!(listed(&["--archived", "only"]), newest_first(&[2], true));

    let events = stdout(&b.run(&["events", "--session", &made[1]]));
    let kinds: Vec<String> = events
        .lines()
        .map(|l| json_line(l)["kind"].as_str().unwrap().to_owned())
        .filter(|k| k.contains("archived"))
        .collect();
    assert_eq!(kinds, ["session_archived", "session_unarchived"]);
    let verified = b.run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

fn json_line(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap()
}
