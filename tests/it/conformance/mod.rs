//! One suite, two engines: each test here runs on SQLite and on PostgreSQL (see
//! `conformance!` in `support/store.rs`), through the library and the real binary,
//! and asserts the same outcome on both. What differs by engine is said where it is
//! checked.

mod claims;
mod common;
mod fixtures;
mod gc_race;
mod group;
mod lifecycle;
mod refusals;
mod store;
mod tls;
mod usage;

use sessionstore::model::{NewSession, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::store::Verify;

mod multihost;
mod pages;

use self::common::session;
use crate::restored::CollectRestore;
use crate::support::{
    Expect, TestStore, Whole, block_json, check_attachment, conformance, json, over_tls, stderr,
    stdout,
};

conformance!(
    a_session_restores_in_a_fresh_store_with_paths_that_read_back,
    the_event_log_refuses_to_be_rewritten,
    the_binary_migrates_then_writes_and_reads,
    the_readme_tour_and_lifecycle_examples_run_as_written,
    a_long_text_of_distinct_words_is_stored_and_found,
    a_nul_character_is_kept_by_sqlite_and_refused_whole_by_postgres,
    a_defanged_append_only_guard_is_reported_and_refuses_writes,
    a_dropped_unique_constraint_is_reported_and_refuses_writes,
);

over_tls!(
    a_session_restores_in_a_fresh_store_with_paths_that_read_back,
    the_event_log_refuses_to_be_rewritten,
    the_binary_migrates_then_writes_and_reads,
    the_readme_tour_and_lifecycle_examples_run_as_written,
);

/// The append-only guard replaced by one that lets updates through (a rewritten
/// trigger on SQLite, a rewritten trigger function on PostgreSQL, each leaving the
/// names in place): `verify` names it, and every writing command refuses the
/// database before writing, with `schema_damaged` and exit 3.
async fn a_defanged_append_only_guard_is_reported_and_refuses_writes(b: TestStore) {
    let store = b.open().await;
    store.create_session(NewSession::default()).await.unwrap();
    drop(store);
    let defang = if b.is_postgres() {
        "CREATE OR REPLACE FUNCTION events_no_update() RETURNS trigger \
         LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$;"
    } else {
        "DROP TRIGGER events_no_update; \
         CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT 1; END;"
    };
    b.raw_execute(defang).unwrap();
    let verified = b.run(&["verify"]);
    assert!(!verified.status.success());
    assert!(
        stdout(&verified).contains("events_no_update"),
        "{}",
        stdout(&verified)
    );
    let refused = b.run(&["session", "new", "--json"]);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("schema_damaged"),
        "{}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains("events_no_update"),
        "{}",
        stderr(&refused)
    );
}

/// The uniqueness of a place in a session's event log taken away behind the store's
/// back: `verify` names it, and every writing command refuses the database before
/// writing, with `schema_damaged` and exit 3. On PostgreSQL it is `UNIQUE (session_id,
/// session_seq)` on `events`, dropped as a constraint; on SQLite (V13) it is the
/// primary key of the log's index `event_keys`, which SQLite cannot drop, so there the
/// table is made again without it, as a hand-made migration might.
async fn a_dropped_unique_constraint_is_reported_and_refuses_writes(b: TestStore) {
    let store = b.open().await;
    store.create_session(NewSession::default()).await.unwrap();
    drop(store);
    use sessionstore::model::ProblemKind;
    let differs = format!(
        "table event_keys differs from the version-{} schema",
        crate::support::latest_version()
    );
    let (loosen, named, kind) = if b.is_postgres() {
        (
            "ALTER TABLE events DROP CONSTRAINT events_session_id_session_seq_key",
            "constraint events_session_id_session_seq_key (on events) is missing",
            ProblemKind::SchemaMissing,
        )
    } else {
        (
            // (Legacy renaming: the view `session_events` reads `event_keys`, and a
            // rename would check it while no `event_keys` is there.)
            "PRAGMA legacy_alter_table = ON;
             CREATE TABLE loose (
                 session_id TEXT NOT NULL,
                 session_seq INTEGER NOT NULL CHECK (session_seq >= 1),
                 seq INTEGER NOT NULL
             ) STRICT;
             INSERT INTO loose SELECT * FROM event_keys;
             DROP TABLE event_keys;
             ALTER TABLE loose RENAME TO event_keys;",
            differs.as_str(),
            ProblemKind::SchemaChanged,
        )
    };
    b.raw_execute(loosen).unwrap();
    let verified = b.run(&["verify"]);
    assert_eq!(verified.status.code(), Some(1), "{}", stdout(&verified));
    assert!(stdout(&verified).contains(named), "{}", stdout(&verified));
    for args in [
        &["session", "new", "--json"][..],
        &[
            "send",
            "--session",
            &sessionstore::SessionId::new().to_string(),
            "--text",
            "x",
            "--json",
        ],
    ] {
        let refused = b.run(args);
        assert_eq!(
            refused.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&refused)
        );
        let said: serde_json::Value = serde_json::from_str(&stderr(&refused)).unwrap();
        let error = &said["error"];
        assert_eq!(error["kind"], "schema_damaged", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{error}"
        );
    }
    let err = sessionstore::Store::open(b.config.clone())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, sessionstore::Error::SchemaDamaged { problems, .. }
            if problems.iter().any(|p| p.kind() == kind && p.detail().contains(named))),
        "{err:?}"
    );
}

/// A text far past PostgreSQL's 1 MB tsvector limit (a pasted log of distinct
/// words) is stored whole on both engines, and a word near its start is found.
async fn a_long_text_of_distinct_words_is_stored_and_found(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let text: String = (0..150_000).map(|i| format!("w{i:x}q ")).collect();
    assert!(text.len() > 1_000_000);
    let sent = store.send(s, Outgoing::user(text.clone())).await.unwrap();
    assert_eq!(store.message(sent.id).await.unwrap().display_text, text);
    let hits = store.search("w2aq".into(), Some(s), 10).await.unwrap();
    assert!(hits.iter().any(|h| h.source == "message"), "{hits:?}");
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
}

/// PostgreSQL's text cannot hold U+0000, which SQLite keeps. On PostgreSQL such a
/// message is refused with one line and nothing of it is written.
async fn a_nul_character_is_kept_by_sqlite_and_refused_whole_by_postgres(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let sent = store.send(s, Outgoing::user("before \0 after")).await;
    if b.is_postgres() {
        let err = sent.unwrap_err();
        assert_eq!(err.kind(), "database", "{err}");
        assert!(!err.to_string().contains('\n'), "{err}");
        assert!(store.all_messages(s).await.unwrap().is_empty());
        assert_eq!(
            store.all_events(s).await.unwrap().len(),
            1,
            "only the session's creation"
        );
    } else {
        let sent = sent.unwrap();
        assert_eq!(sent.display_text, "before \0 after");
    }
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
}

/// README's tour and its fork, search and export/import examples, as written, with
/// `SESSIONSTORE_DB` naming this engine's database (README's PostgreSQL section says
/// the tour works unchanged there): each runs, the search for the session's title
/// finds it, and counts read in the singular where there is one.
async fn the_readme_tour_and_lifecycle_examples_run_as_written(b: TestStore) {
    use crate::usability::{readme_script, run_script_with};
    let tour = readme_script("## A short tour", "`record` reads");
    let lifecycle = readme_script("### Forking a session", "## Listing sessions");
    assert!(
        lifecycle.contains("--at \"$message\"")
            && lifecycle.contains(" search ")
            && lifecycle.contains(" import ")
    );
    let migrated = b.run(&["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    let out = run_script_with(
        b.dir.path(),
        &format!("{tour}\necho \"session $id\"\n{lifecycle}"),
        &[("SESSIONSTORE_DB", b.db())],
    );
    let printed = stdout(&out);
    assert!(
        out.status.success(),
        "the README failed: {printed}\n{}",
        stderr(&out)
    );
    let id = printed
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .expect("the tour's session");
    // README searches for the phrase "quarterly review": FTS5 marks a matched phrase
    // once, PostgreSQL's ts_headline marks each of its words.
    let marked = if b.is_postgres() {
        "title  [quarterly] [review]"
    } else {
        "title  [quarterly review]"
    };
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with(id) && l.contains(marked)),
        "the title search finds the session: {printed}"
    );
    assert!(
        printed.contains("exported 3 messages, 1 item, 2 files"),
        "{printed}"
    );
    assert!(b.dir.path().join("session.md").is_file());
    let verified = b.run(&["verify"]);
    assert!(verified.status.success(), "{}", stdout(&verified));
}

async fn the_binary_migrates_then_writes_and_reads(b: TestStore) {
    let migrated = b.run(&["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    let said = stdout(&migrated);
    let latest = crate::support::latest_version();
    assert!(
        said.contains(&format!("schema at version {latest}")),
        "{said}"
    );
    if b.is_postgres() {
        // The connection string is named, and no copy is taken on PostgreSQL.
        assert!(said.starts_with("postgres://"), "{said}");
        assert!(!said.contains(".bak"), "{said}");
    }
    let id = json(&b.run(&["session", "new", "--title", "from the binary", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sent = b.run(&["send", "--session", &id, "--text", "hello from the binary"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    let listed = b.run(&["session", "list"]);
    assert!(
        stdout(&listed).contains("from the binary"),
        "{}",
        stdout(&listed)
    );
    let verified = b.run(&["verify"]);
    assert!(verified.status.success(), "{}", stdout(&verified));
    assert!(
        stdout(&verified).contains("1 session, 1 message, 2 events: ok"),
        "{}",
        stdout(&verified)
    );
    let restored = b.run(&["restore", "--session", &id, "--format", "openai"]);
    assert!(stdout(&restored).contains("hello from the binary"));
    assert!(
        b.db()
            .starts_with(if b.is_postgres() { "postgres://" } else { "/" })
    );
}

async fn a_session_restores_in_a_fresh_store_with_paths_that_read_back(b: TestStore) {
    let store = b.open().await;
    let session = store
        .create_session(NewSession {
            title: Some("conformance".into()),
            ..NewSession::default()
        })
        .await
        .unwrap();
    let stored = store
        .attach_one(session.id, "notes.txt".into(), b"the notes".to_vec())
        .await
        .unwrap();
    let mut out = Outgoing::user("read these notes");
    out.attach = vec![stored.uri.clone()];
    store.send(session.id, out).await.unwrap();
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
    drop(store);

    let fresh = b.open().await;
    let restored = fresh.collect_restore(session.id).await.unwrap();
    assert_eq!(restored.messages.len(), 1);
    let blocks: Vec<_> = restored.messages[0].blocks.iter().map(block_json).collect();
    let expect = Expect {
        name: stored.name.clone(),
        uri: stored.uri.to_string(),
        bytes: b"the notes".to_vec(),
        host: crate::support::HOST.to_owned(),
    };
    assert_eq!(blocks.len(), 2, "the text, then the attachment: {blocks:?}");
    let (_, path) = check_attachment(&blocks[1], &expect);
    assert!(path.starts_with(b.configured()), "{path:?}");
}

async fn the_event_log_refuses_to_be_rewritten(b: TestStore) {
    let store = b.open().await;
    store.create_session(NewSession::default()).await.unwrap();
    drop(store);
    for (statement, refusal) in [
        (
            "UPDATE events SET kind = 'x'",
            "events are append-only: update refused",
        ),
        (
            "DELETE FROM events",
            "events are append-only: delete refused",
        ),
    ] {
        let err = b.raw_execute(statement).expect_err(statement);
        assert!(err.contains(refusal), "{statement}: {err}");
    }
    assert_eq!(
        b.raw_query("SELECT count(*) FROM events").unwrap(),
        [[Some("1".to_owned())]],
        "the log is as it was"
    );
}
