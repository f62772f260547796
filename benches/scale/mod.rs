//! The `scale` group (not criterion, and only when named: it builds a million items):
//! whether listing and search cost what they return rather than what the store holds
//! (issue 23, item 6). Each figure is a ratio in the same run, both sides timed
//! alternately call by call after a few warm-up calls, the median of each side's
//! calls compared:
//!
//! - the first page of 50 (`Store::list_sessions`, a limit of 50) of 100,000 sessions
//!   against the same call on 100 sessions, the sessions written by hand in one
//!   transaction as the `list` group writes them (each with its `session_created`
//!   event, every tenth with a message);
//! - the first page of 50 of 100,000 sessions with every other one archived, listed
//!   with `exclude` (the default) and with `only`
//!   (`Store::list_sessions` with an `archived` filter), against the first page
//!   of 50 of 100 sessions none of which is archived (issue 47: an index serves the
//!   filter and the order); also alone as `cargo bench --bench store -- archived`;
//! - `Store::search` for a word found in exactly 100 recorded items, in a session of
//!   `SESSIONSTORE_SCALE_ITEMS` items (default 1,000,000 separate agent messages of
//!   about 80 bytes, a user message every 1,000: `longhist`'s shape, recorded through
//!   the library) against the same query in a 1,000-item session of the same shape;
//!   once with a limit above the 100 hits, once with the command line's 20.

use std::path::Path;
use std::time::{Duration, Instant};

use sessionstore::Store;
use sessionstore::lifecycle::ListQuery;
use sessionstore::model::Role;
use tokio::runtime::Runtime;

use crate::Report;
use crate::workload::{Fixture, config_in, raw_connection, write_sessions};

/// A user message comes before every this many recorded items.
const TURN: usize = 1000;

/// The word that starts exactly 100 items' text in each search store, and nothing
/// else's.
const MARKER: &str = "zanzibar";

/// Items marked with [`MARKER`] in each search store.
const MARKED: usize = 100;

/// Calls timed on each side, alternated, after [`WARM_UP`] calls of each.
const CALLS: usize = 200;
const WARM_UP: usize = 20;

/// The `i`-th agent message's line, as `longhist` records it (about 80 bytes of text
/// under a `messageId` of its own), led by [`MARKER`] when `marked`.
fn line(i: usize, marked: bool) -> String {
    let lead = if marked {
        format!("{MARKER} ")
    } else {
        String::new()
    };
    let text: String = format!("{lead}{}", format!("word{i:07} ").repeat(8))
        .chars()
        .take(80)
        .collect();
    serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "messageId": format!("m-{i:09}"),
        "content": {"type": "text", "text": text}})
    .to_string()
}

/// `items` agent messages with a user message before every [`TURN`], recorded
/// through the library into `f`'s session, every `items / MARKED`-th led by
/// [`MARKER`] (`longhist`'s `build`, with the marker).
fn build(rt: &Runtime, f: &Fixture, items: usize) {
    assert!(
        items >= MARKED && items.is_multiple_of(MARKED),
        "SESSIONSTORE_SCALE_ITEMS must be a multiple of {MARKED}"
    );
    let every = items / MARKED;
    for start in (0..items).step_by(TURN) {
        f.send(rt, Role::User, &format!("turn {}", start / TURN), &[]);
        let batch: Vec<sessionstore::turns::Update> = (start..items.min(start + TURN))
            .map(|i| {
                let l = line(i, i % every == 0);
                sessionstore::turns::Update::Known(serde_json::from_str(&l).expect("an update"))
            })
            .collect();
        rt.block_on(
            f.store
                .record(f.session, sessionstore::record::Batches(batch)),
        )
        .expect("record");
    }
}

/// A store of exactly `n` sessions, written by hand in one transaction as the `list`
/// group writes them: each with its creation event, every tenth with a message.
fn sessions_store(rt: &Runtime, dir: &Path, n: u32) -> Store {
    let store = rt
        .block_on(Store::open(config_in(dir)))
        .expect("store opens");
    write_sessions(&dir.join("sessions.db"), n);
    store
}

/// The median time of one call of each side, `small` and `large`: [`WARM_UP`] calls
/// of each first, then [`CALLS`] of each, alternated call by call (the order swapped
/// every round), so a change in the machine's load falls on both sides alike.
fn alternated(mut small: impl FnMut(), mut large: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..WARM_UP {
        small();
        large();
    }
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    let mut smalls = Vec::with_capacity(CALLS);
    let mut larges = Vec::with_capacity(CALLS);
    for round in 0..CALLS {
        if round % 2 == 0 {
            smalls.push(time(&mut small));
            larges.push(time(&mut large));
        } else {
            larges.push(time(&mut large));
            smalls.push(time(&mut small));
        }
    }
    (median(smalls), median(larges))
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn judged(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

/// `n` with a comma between each three digits, as the other groups print counts.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One comparison's line: the large side's time against the small side's, and the
/// ratio judged against `<= 2x`.
fn compared(
    report: &mut Report,
    what: &str,
    large: &str,
    small: &str,
    times: (Duration, Duration),
) {
    let (s, l) = times;
    let ratio = l.as_secs_f64() / s.as_secs_f64();
    let line = format!(
        "scale: {what}: {:.3} ms {large} vs {:.3} ms {small}: {ratio:.2}x \
         (target <= 2x: {}; median of {CALLS} calls a side, alternated)",
        ms(l),
        ms(s),
        judged(ratio <= 2.0)
    );
    eprintln!("{line}");
    report.0.push(line);
}

/// How many segments the full-text index of the database in `dir` has (FTS5's
/// `search_idx` holds a row per segment and leaf page range).
fn segments(dir: &Path) -> i64 {
    raw_connection(&dir.join("sessions.db"))
        .query_row("SELECT count(DISTINCT segid) FROM search_idx", [], |r| {
            r.get(0)
        })
        .expect("count the segments")
}

pub fn scale(report: &mut Report, rt: &Runtime) {
    list(report, rt);
    list_archived(report, rt);
    search(report, rt);
}

/// The first page of each archive filter of 100,000 sessions, half of them archived
/// (set by hand, as `write_sessions` writes the rest, without their events), against
/// the first page of 100 sessions.
pub fn list_archived(report: &mut Report, rt: &Runtime) {
    use sessionstore::model::ArchiveFilter;
    let (large_dir, small_dir) = (
        tempfile::tempdir().expect("a temp dir"),
        tempfile::tempdir().expect("a temp dir"),
    );
    let large = sessions_store(rt, large_dir.path(), 100_000);
    raw_connection(&large_dir.path().join("sessions.db"))
        .execute("UPDATE sessions SET archived = 1 WHERE rowid % 2 = 0", [])
        .expect("archive every other session");
    let small = sessions_store(rt, small_dir.path(), 100);
    let page = |store: &Store, filter: ArchiveFilter| {
        let store = store.clone();
        move || {
            let page = rt
                .block_on(store.list_sessions(ListQuery {
                    limit: 50,
                    archived: Some(filter),
                    ..ListQuery::default()
                }))
                .expect("a page");
            assert_eq!(page.sessions.len(), 50);
            assert!(
                page.sessions
                    .iter()
                    .all(|s| s.archived == (filter == ArchiveFilter::Only))
            );
            std::hint::black_box(page);
        }
    };
    for (filter, what) in [
        (ArchiveFilter::Exclude, "archived exclude"),
        (ArchiveFilter::Only, "archived only"),
    ] {
        let times = alternated(page(&small, ArchiveFilter::Exclude), page(&large, filter));
        compared(
            report,
            &format!("list_sessions(50, {what})"),
            "of 100,000 sessions, 50,000 archived",
            "of 100",
            times,
        );
    }
}

fn list(report: &mut Report, rt: &Runtime) {
    let (large_dir, small_dir) = (
        tempfile::tempdir().expect("a temp dir"),
        tempfile::tempdir().expect("a temp dir"),
    );
    let large = sessions_store(rt, large_dir.path(), 100_000);
    let small = sessions_store(rt, small_dir.path(), 100);
    let page = |store: &Store| {
        let store = store.clone();
        move || {
            let page = rt
                .block_on(store.list_sessions(ListQuery {
                    limit: 50,
                    ..ListQuery::default()
                }))
                .expect("a page");
            assert_eq!(page.sessions.len(), 50);
            assert!(page.next_cursor.is_some());
            std::hint::black_box(page);
        }
    };
    let times = alternated(page(&small), page(&large));
    compared(
        report,
        "list_sessions(50)",
        "of 100,000 sessions",
        "of 100",
        times,
    );
}

fn search(report: &mut Report, rt: &Runtime) {
    let items: usize = std::env::var("SESSIONSTORE_SCALE_ITEMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let fixture = || {
        let dir = tempfile::tempdir().expect("a temp dir");
        let f = Fixture::create(rt, dir.path());
        (dir, f)
    };
    let (_large_dir, large) = fixture();
    let start = Instant::now();
    build(rt, &large, items);
    let line = format!(
        "scale: built {} items with a user message every {TURN} in {:.0} s",
        thousands(items),
        start.elapsed().as_secs_f64()
    );
    eprintln!("{line}");
    report.0.push(line);
    let (_small_dir, small) = fixture();
    build(rt, &small, 1000);

    for limit in [1000, 20] {
        let query = |f: &Fixture| {
            let store = f.store.clone();
            move || {
                let hits = rt
                    .block_on(store.search(MARKER.to_owned(), None, limit))
                    .expect("a search");
                assert_eq!(hits.len(), MARKED.min(limit as usize));
                std::hint::black_box(hits);
            }
        };
        let times = alternated(query(&small), query(&large));
        compared(
            report,
            &format!("search for a word in {MARKED} items, limit {limit}"),
            &format!("in {} items", thousands(items)),
            "in 1,000",
            times,
        );
    }
    let line = format!(
        "scale: the search index has {} segments with {} items, {} with 1,000",
        segments(&large.dir),
        thousands(items),
        segments(&small.dir)
    );
    eprintln!("{line}");
    report.0.push(line);
}
