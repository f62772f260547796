//! `cargo bench`: what the memo saves, as ratios against a baseline measured in the
//! same run (this machine is noisy, so absolute times mean little).
//!
//! The baseline: reading and base64-encoding each of a message's 40 references by
//! hand (40 reads, 40 encodings; 4 distinct 256 KiB files).
//! - resolve: the same references through `dispatch::resolve` and a fresh memo (4
//!   reads, 4 encodings): what the memo saves.
//! - dispatch: the whole `Store::dispatch`, which also builds the 40 ACP blocks; each
//!   block owns a copy of its shared encoding, as the ACP types require.
//! - restore: 100 such messages replayed through one memo.

use std::time::{Duration, Instant};

use base64::Engine;
use sessionstore::attachments::Roots;
use sessionstore::dispatch::{self, Memo, Mode};
use sessionstore::model::ToolsHost;
use sessionstore::store::Outgoing;
use sessionstore::{Config, Store};

/// Median wall time of `f` over `runs` runs, after one warm-up.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = Config {
        db_path: dir.path().join("bench.db"),
        roots: Roots {
            configured: dir.path().join("attachments"),
            legacy: vec![],
        },
        host: "bench".into(),
    };
    let store = rt.block_on(Store::open(config)).expect("store opens");
    let session = rt
        .block_on(store.create_session(None, ToolsHost::Local))
        .expect("session");
    let mut uris = Vec::new();
    for i in 0..4u8 {
        let bytes = vec![i; 256 * 1024];
        let stored = rt
            .block_on(store.attach(session.id, format!("file{i}.bin"), bytes))
            .expect("attach");
        uris.push(stored.uri.to_string());
    }
    let refs: Vec<String> = (0..40).map(|i| uris[i % 4].clone()).collect();
    for _ in 0..100 {
        rt.block_on(store.send(
            session.id,
            Outgoing {
                attach: refs.clone(),
                ..Outgoing::user("bench")
            },
        ))
        .expect("send");
    }
    let folder = dir.path().join("attachments").join(session.id.to_string());
    let names: Vec<String> = (0..40).map(|i| format!("file{}.bin", i % 4)).collect();
    let by_hand = || {
        for name in &names {
            let bytes = std::fs::read(folder.join(name)).expect("read");
            std::hint::black_box(base64::engine::general_purpose::STANDARD.encode(&bytes));
        }
    };

    let baseline = median(15, by_hand);
    let message = rt
        .block_on(store.select(session.id, None))
        .expect("the latest message");
    let resolve = median(15, || {
        std::hint::black_box(dispatch::resolve(
            store.attachments(),
            &Memo::new(),
            &message,
        ));
    });
    println!(
        "resolve (40 refs, 4 files): {:.2}x the hand baseline (baseline {baseline:?}, resolve {resolve:?})",
        resolve.as_secs_f64() / baseline.as_secs_f64()
    );
    let dispatch = median(15, || {
        let d = rt
            .block_on(store.dispatch(session.id, None, Mode::Strict, Memo::new()))
            .expect("dispatch");
        std::hint::black_box(d);
    });
    println!(
        "dispatch (40 refs, 4 files): {:.2}x the hand baseline (baseline {baseline:?}, dispatch {dispatch:?})",
        dispatch.as_secs_f64() / baseline.as_secs_f64()
    );

    let restore = median(5, || {
        std::hint::black_box(rt.block_on(store.restore(session.id)).expect("restore"));
    });
    println!(
        "restore (100 messages x 40 refs): {:.2}x one hand-read message (baseline {baseline:?}, restore {restore:?})",
        restore.as_secs_f64() / baseline.as_secs_f64()
    );
}
