//! Tests of the PostgreSQL side that need no store of the suite's: the URL's search
//! path, the migrations' names, the lock a panicking write lets go of. Those that
//! need a server run on the one `SESSIONSTORE_TEST_POSTGRES` names.

use postgres::{Client, NoTls};

use super::schema::{Named, created_names};
use super::scratch::with_search_path;
use super::*;

#[test]
fn the_search_path_joins_the_options_a_url_has() {
    assert_eq!(
        with_search_path("postgres://h/db", "s1"),
        "postgres://h/db?options=-c%20search_path%3Ds1"
    );
    assert_eq!(
        with_search_path("postgres://h/db?sslmode=disable", "s1"),
        "postgres://h/db?sslmode=disable&options=-c%20search_path%3Ds1"
    );
    assert_eq!(
        with_search_path("postgres://h/db?options=-c%20work_mem%3D8MB&x=1", "s1"),
        "postgres://h/db?options=-c%20work_mem%3D8MB%20-c%20search_path%3Ds1&x=1"
    );
    for url in [
        with_search_path("postgres://h/db", "s1"),
        with_search_path("postgres://h/db?options=-c%20work_mem%3D8MB", "s1"),
    ] {
        let config: postgres::Config = url.parse().unwrap();
        assert!(
            config.get_options().unwrap().ends_with("-c search_path=s1"),
            "{url}"
        );
    }
}

#[test]
fn the_migrations_name_what_they_make_and_drop() {
    let names: Vec<String> = created_names(
        "CREATE TABLE a (x BIGINT);\n-- CREATE TABLE ignored\nCREATE TRIGGER t BEFORE \
         UPDATE ON a;\nDROP TRIGGER IF EXISTS t ON a;\nCREATE OR REPLACE FUNCTION f()",
    )
    .into_iter()
    .map(|(named, name)| match named {
        Named::Table(m) => format!("table {m} {name}"),
        Named::Trigger(m) => format!("trigger {m} {name}"),
    })
    .collect();
    assert_eq!(names, ["table true a", "trigger true t", "trigger false t"]);
}

/// A panic inside a locked write must not send the connection back to the pool
/// still holding the session's lock: every later writer of that session, on any
/// host, would wait on it.
#[test]
fn a_panic_inside_a_locked_write_lets_go_of_the_lock() {
    let Some(server) = test_server() else {
        return;
    };
    let schema = ScratchSchema::create(&server, "lock").unwrap();
    let db = PgDb::open(&PostgresUrl::new(schema.url()).unwrap(), Access::Create).unwrap();
    let key = 0x5e55_1075_0000_0042_i64;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<()> = db.write_locked(&[key], |_| panic!("a bug inside a write"));
    }));
    assert!(panicked.is_err());
    let free: bool = Client::connect(&server, NoTls)
        .unwrap()
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .unwrap()
        .get(0);
    drop(db);
    schema.remove().unwrap();
    assert!(free, "the session's lock is still held after the panic");
}

/// A schema migrated afresh on this server, on a store that only reads (a writing
/// open would judge it by the very file a test checks).
fn migrated(server: &str, prefix: &str) -> (ScratchSchema, PostgresUrl, PgDb) {
    let schema = ScratchSchema::create(server, prefix).unwrap();
    let url = PostgresUrl::new(schema.url()).unwrap();
    migrate(&url).unwrap();
    let db = PgDb::open(&url, Access::ReadOnly).unwrap();
    (schema, url, db)
}

/// `catalog.txt` is what the migrations make: a schema migrated afresh reads back,
/// constraint by constraint and index by index, as the file says, so the schema
/// check cannot pass a database the migrations would not have made, nor refuse one
/// they would. `SESSIONSTORE_BLESS=1` writes the file from the server instead; the
/// diff is reviewed like a snapshot's.
#[test]
fn the_catalog_file_is_what_the_migrations_make() {
    let Some(server) = test_server() else {
        return;
    };
    let (schema, _, db) = migrated(&server, "catalog");
    let text = db
        .read(|tx| super::schema::catalog_text(tx, latest_version()))
        .unwrap();
    drop(db);
    schema.remove().unwrap();
    if std::env::var_os("SESSIONSTORE_BLESS").is_some() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/src/db/postgres/catalog.txt");
        std::fs::write(file, &text).unwrap();
        return;
    }
    assert_eq!(
        text,
        super::schema::CATALOG,
        "the migrations make other constraints or indexes than catalog.txt lists: \
         run with SESSIONSTORE_BLESS=1 and review the diff"
    );
}

/// The fresh schema has none of the problems the check looks for, and a unique
/// constraint, an index and a check constraint taken away, changed or added behind
/// the store's back are each named.
#[test]
fn the_schema_check_names_each_constraint_and_index_changed() {
    let Some(server) = test_server() else {
        return;
    };
    let (schema, url, db) = migrated(&server, "check");
    assert_eq!(db.read(schema_problems).unwrap(), []);
    let mut client = Client::connect(url.as_str(), NoTls).unwrap();
    client
        .batch_execute(
            "ALTER TABLE events DROP CONSTRAINT events_session_id_session_seq_key;
             DROP INDEX messages_queued;
             CREATE INDEX messages_queued ON messages (session_id);
             ALTER TABLE sessions DROP CONSTRAINT sessions_tools_host_check;
             ALTER TABLE sessions ADD CONSTRAINT sessions_tools_host_check CHECK (true);
             CREATE INDEX sessions_by_title ON sessions (title);",
        )
        .unwrap();
    drop(client);
    let problems: Vec<String> = db
        .read(schema_problems)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    let latest = latest_version();
    assert_eq!(
        problems,
        [
            format!(
                "schema: constraint events_session_id_session_seq_key (on events) is missing; \
                 the version-{latest} schema has it"
            ),
            format!(
                "schema: constraint sessions_tools_host_check differs from the version-{latest} schema"
            ),
            format!(
                "schema: index events_session_id_session_seq_key (on events) is missing; \
                 the version-{latest} schema has it"
            ),
            format!("schema: index messages_queued differs from the version-{latest} schema"),
            format!(
                "schema: index sessions_by_title (on sessions) is not in the version-{latest} schema"
            ),
        ]
    );
    drop(db);
    schema.remove().unwrap();
}

/// `migrations-postgres/check.sql`, the triggers' and search's checks in a
/// transaction that is rolled back, passes on a schema migrated afresh: each of its
/// checks raises an exception when it fails, which fails this test with its words.
#[test]
fn the_hand_written_checks_of_the_triggers_and_search_pass() {
    let Some(server) = test_server() else {
        return;
    };
    let (schema, url, db) = migrated(&server, "checksql");
    drop(db);
    let mut client = Client::connect(url.as_str(), NoTls).unwrap();
    let checks = include_str!("../../../migrations-postgres/check.sql");
    if let Err(e) = client.batch_execute(checks) {
        panic!("check.sql failed: {e:?}");
    }
    drop(client);
    schema.remove().unwrap();
}

mod shapes;
