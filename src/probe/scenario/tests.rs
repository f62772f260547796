//! The probe's PostgreSQL schema: there while it runs, gone however it ends.

use super::*;
use crate::db::postgres::test_server;

/// Whether the schema a store URL names is on the server.
fn exists(server: &str, store_url: &std::path::Path) -> bool {
    let url = store_url.to_str().unwrap();
    let name = url.rsplit("search_path%3D").next().unwrap().to_owned();
    let server = server.to_owned();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&server, postgres::NoTls).unwrap();
        client
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&name],
            )
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .join()
    .unwrap()
}

/// The probe's schema goes when the probe cannot run, and when it panics.
#[tokio::test(flavor = "multi_thread")]
async fn the_schema_is_dropped_however_the_probe_ends() {
    let Some(server) = test_server() else { return };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let db = seen.clone();
    let during = server.clone();
    let failed = in_schema(&server, |url| async move {
        *db.lock().unwrap() = Some(url.clone());
        assert!(exists(&during, &url), "the schema is there while it runs");
        Err(ProbeError {
            action: "plant a file".to_owned(),
            error: std::io::Error::other("disk full"),
        })
    })
    .await;
    assert_eq!(
        failed.unwrap_err().to_string(),
        "probe cannot plant a file: disk full"
    );
    let url = seen.lock().unwrap().take().expect("the body ran");
    assert!(!exists(&server, &url), "dropped after a failed run");

    let db = seen.clone();
    let panicked = tokio::spawn({
        let server = server.clone();
        async move {
            in_schema(&server, |url| async move {
                *db.lock().unwrap() = Some(url);
                panic!("a bug in a check");
            })
            .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    let url = seen.lock().unwrap().take().expect("the body ran");
    assert!(!exists(&server, &url), "dropped after a panic");
}
