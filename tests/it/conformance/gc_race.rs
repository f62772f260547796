//! gc in another process, in a loop with no grace, while this one attaches and sends,
//! on each engine: every send either stores a reference to a file that is still there
//! afterwards, or is refused because the file went first. On PostgreSQL this is what
//! the per-session lock of `Db::write_for` buys: a gc transaction that lost a race is
//! rolled back, but a file it removed would stay removed.

use sessionstore::Error;
use sessionstore::model::NewSession;
use sessionstore::store::Outgoing;

use crate::support::Whole;
use crate::support::{Bin, TestStore, conformance, json, stderr};

conformance!(gc_with_a_concurrent_attach_and_send_loses_no_referenced_file);

async fn gc_with_a_concurrent_attach_and_send_loses_no_referenced_file(b: TestStore) {
    let store = b.open().await;
    let session = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc_loop = {
        let stop = stop.clone();
        let (home, config) = (b.dir.path().to_owned(), b.config.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || runs == 0 {
                let out = Bin::new(&home)
                    .args(["gc", "--grace", "0", "--json"])
                    .on(&config)
                    .output();
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
            .attach_one(
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
        out.attach = vec![stored.uri.clone()];
        match store.send(session, out).await {
            Ok(_) => sent += 1,
            Err(Error::Attachment(e)) if e.is_not_found() => refused += 1,
            Err(e) => panic!("send failed otherwise: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc_loop.join().unwrap();
    // One more gc after everything settled must keep every reference too.
    json(&b.run(&["gc", "--grace", "0", "--json"]));
    let messages = store.all_messages(session).await.unwrap();
    assert_eq!(messages.len(), sent, "{refused} refused, {runs} gc runs");
    for m in &messages {
        for r in &m.refs {
            let path = b
                .configured()
                .join(session.to_string())
                .join(&r.stored_name);
            assert!(path.is_file(), "{} lost its file {}", m.id, path.display());
        }
    }
}
