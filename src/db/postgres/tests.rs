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
        let _: Result<()> = db.write_locked(Some(key), |_| panic!("a bug inside a write"));
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
