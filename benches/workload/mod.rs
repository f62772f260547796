//! The workloads the bench times and `examples/callgrind.rs` counts: each group's data
//! (built once in a folder), the store's side and the hand-written baseline. It
//! measures nothing itself and prints nothing.

#![allow(dead_code)] // each includer uses its own subset

use std::path::{Path, PathBuf};

use base64::Engine;
use rusqlite::{Connection, params};
use sessionstore::attachments::{AttachmentUri, Roots};
use sessionstore::dispatch::{DEFAULT_MEMO_BUDGET, Memo, Mode, ModelMessage, Part};
use sessionstore::format::{Format, StreamWriter};
use sessionstore::lifecycle::ListQuery;
use sessionstore::model::{NewSession, Role};
use sessionstore::store::{Dispatched, Outgoing, Upload};
use sessionstore::{Config, SessionId, Store};
use tokio::runtime::Runtime;

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * KIB;

pub fn config_in(dir: &Path) -> Config {
    Config {
        database: dir.join("sessions.db").into(),
        roots: Roots {
            configured: dir.join("attachments"),
            legacy: vec![],
        },
        host: "bench".into(),
        sharing: Default::default(),
        key: None,
        redaction: Default::default(),
    }
}

/// Bytes that differ per `seed` and do not compress to nothing.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A file that starts like a PNG (so it is sent as an image), `len` bytes long.
pub fn fake_png(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = noise(len, seed);
    bytes[..8].copy_from_slice(b"\x89PNG\r\n\x1a\n");
    bytes
}

/// A store in a folder with one session.
pub struct Fixture {
    pub dir: PathBuf,
    pub store: Store,
    pub session: SessionId,
}

impl Fixture {
    /// A new store and session in `dir`.
    pub fn create(rt: &Runtime, dir: &Path) -> Fixture {
        let store = rt
            .block_on(Store::open(config_in(dir)))
            .expect("store opens");
        let session = rt
            .block_on(store.create_session(NewSession::default()))
            .expect("a session")
            .id;
        Fixture {
            dir: dir.to_owned(),
            store,
            session,
        }
    }

    /// The store `create` made in `dir` earlier, and its one session.
    pub fn open(rt: &Runtime, dir: &Path) -> Fixture {
        let store = rt
            .block_on(Store::open(config_in(dir)))
            .expect("store opens");
        let session = rt
            .block_on(store.list_sessions(ListQuery::default()))
            .expect("sessions")
            .sessions
            .first()
            .expect("one session")
            .id;
        Fixture {
            dir: dir.to_owned(),
            store,
            session,
        }
    }

    pub fn attach(&self, rt: &Runtime, name: &str, bytes: Vec<u8>) -> AttachmentUri {
        rt.block_on(
            self.store
                .attach(self.session, vec![Upload::new(name, bytes)]),
        )
        .expect("attach")
        .remove(0)
        .uri
    }

    pub fn send(&self, rt: &Runtime, role: Role, text: &str, attach: &[AttachmentUri]) {
        let out = Outgoing {
            role,
            attach: attach.to_vec(),
            ..Outgoing::user(text)
        };
        rt.block_on(self.store.send(self.session, out))
            .expect("send");
    }

    pub fn folder(&self) -> PathBuf {
        self.dir.join("attachments").join(self.session.to_string())
    }
}

/// A connection set up as the store sets up its own.
pub fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("raw connection");
    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .expect("wal");
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
        .expect("pragmas");
    conn
}

/// What `send` writes for a text-only user message, by hand: the session check, the
/// message row (its search entry the trigger's, V18), its event, and the session's new
/// `updated_at`, in one transaction.
pub fn raw_append(conn: &mut Connection, session: &str, text: &str) {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a timestamp");
    let id = uuid::Uuid::now_v7().to_string();
    tx.prepare_cached("SELECT id, title FROM sessions WHERE id = ?1")
        .and_then(|mut s| {
            s.query_row([session], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
        })
        .expect("the session");
    let seq: i64 = tx
        .prepare_cached("SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE session_id = ?1")
        .and_then(|mut s| s.query_row([session], |r| r.get(0)))
        .expect("seq");
    tx.prepare_cached(
        "INSERT INTO messages (id, session_id, seq, role, display_text, state, created_at)
         VALUES (?1, ?2, ?3, 'user', ?4, 'delivered', ?5)",
    )
    .and_then(|mut s| s.execute(params![id, session, seq, text, at]))
    .expect("insert a message");
    let payload = serde_json::json!({
        "kind": "message_appended",
        "message": {"id": id, "seq": seq, "role": "user", "displayText": text,
                    "modelText": null, "transcript": null, "state": "delivered", "refs": []}
    })
    .to_string();
    // Its place in the log as the store finds it on this schema (V13: the session's
    // newest unkeyed event, else its highest key). A run appends fewer events than the
    // store's keys may lag by, so the store would key none of them either.
    tx.prepare_cached(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1, coalesce(
                     (SELECT session_seq FROM events
                      WHERE seq > (SELECT upto FROM event_keys_upto) AND session_id = ?1
                      ORDER BY seq DESC LIMIT 1),
                     (SELECT max(session_seq) FROM event_keys WHERE session_id = ?1),
                     0) + 1, 'message_appended', ?2, ?3)",
    )
    .and_then(|mut s| s.execute(params![session, payload, at]))
    .expect("insert an event");
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![session, at]))
        .expect("touch the session");
    tx.commit().expect("commit");
}

/// The `append` group's references: two 256 KiB files in the fixture's session.
pub fn append_refs(rt: &Runtime, f: &Fixture) -> Vec<AttachmentUri> {
    (0..2)
        .map(|i| f.attach(rt, &format!("ref{i}.bin"), noise(256 * KIB, i)))
        .collect()
}

/// The `restore` group's history: 1,000 messages, 2 references each over 8 distinct
/// 256 KiB files.
pub fn build_restore(rt: &Runtime, f: &Fixture) {
    let uris: Vec<AttachmentUri> = (0..8u64)
        .map(|i| f.attach(rt, &format!("file{i}.bin"), noise(256 * KIB, 100 + i)))
        .collect();
    for i in 0..1000 {
        let pair = [uris[i % 8].clone(), uris[(i * 3 + 1) % 8].clone()];
        f.send(rt, Role::User, &format!("message {i}"), &pair);
    }
}

/// A message row joined with one of its references: id, role, text, URI, stored name.
type Row = (String, String, String, Option<String>, Option<String>);

/// The restore baseline: one SELECT of the rows and references, plus one read and one
/// base64 encoding per distinct file.
pub fn restore_baseline(conn: &Connection, session: &str, folder: &Path) {
    let mut stmt = conn
        .prepare_cached(
            "SELECT m.id, m.role, m.display_text, r.uri, r.stored_name
             FROM messages m LEFT JOIN message_refs r ON r.message_id = m.id
             WHERE m.session_id = ?1 AND m.state = 'delivered'
             ORDER BY m.seq, r.ordinal",
        )
        .expect("prepare");
    let rows: Vec<Row> = stmt
        .query_map([session], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let mut encoded = std::collections::HashMap::new();
    for (_, _, _, uri, name) in &rows {
        if let (Some(uri), Some(name)) = (uri, name) {
            encoded.entry(uri.clone()).or_insert_with(|| {
                let bytes = std::fs::read(folder.join(name)).expect("read");
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            });
        }
    }
    std::hint::black_box((rows, encoded));
}

/// The store's restore: `Store::restore` written by the ACP restore writer into a sink.
pub fn restore_store(rt: &Runtime, f: &Fixture) {
    rt.block_on(async {
        let mut stream = f
            .store
            .restore(
                f.session,
                DEFAULT_MEMO_BUDGET,
                sessionstore::restore::Replay::Whole,
            )
            .await
            .expect("restore");
        let mut out = StreamWriter::begin(std::io::sink(), Format::AcpRestore, f.session, "gpt-4o")
            .expect("write");
        while let Some(item) = stream.next().await {
            out.item(&item.expect("an item")).expect("write");
        }
        out.finish().expect("write");
    })
}

/// The `dispatch` group's message: four 16 MiB images. Returns the files' paths.
pub fn build_dispatch(rt: &Runtime, f: &Fixture) -> Vec<PathBuf> {
    let uris: Vec<AttachmentUri> = (0..4u64)
        .map(|i| f.attach(rt, &format!("big{i}.png"), fake_png(16 * MIB, 200 + i)))
        .collect();
    f.send(rt, Role::User, "four big images", &uris);
    dispatch_paths(f)
}

pub fn dispatch_paths(f: &Fixture) -> Vec<PathBuf> {
    (0..4)
        .map(|i| f.folder().join(format!("big{i}.png")))
        .collect()
}

/// The dispatch baseline: reading and base64-encoding the same files.
pub fn dispatch_baseline(paths: &[PathBuf]) {
    for path in paths {
        let bytes = std::fs::read(path).expect("read");
        std::hint::black_box(base64::engine::general_purpose::STANDARD.encode(&bytes));
    }
}

/// The store's dispatch: `Store::dispatch` (its parts) with a fresh memo, written by the ACP block
/// writer into a sink.
pub fn dispatch_store(rt: &Runtime, f: &Fixture) {
    let d = rt
        .block_on(f.store.dispatch(f.session, None, Mode::Strict, Memo::new()))
        .expect("dispatch");
    let mut out =
        StreamWriter::begin(std::io::sink(), Format::AcpBlocks, f.session, "").expect("write");
    out.message(&d).expect("write");
    out.finish().expect("write");
}

/// The typed dispatch: `Store::dispatch` with a fresh memo, the ACP blocks a library
/// caller gets (not serialized).
pub fn dispatch_typed(rt: &Runtime, f: &Fixture) -> Dispatched {
    Dispatched::from(
        rt.block_on(f.store.dispatch(f.session, None, Mode::Strict, Memo::new()))
            .expect("dispatch"),
    )
}

/// `Store::dispatch` with a memo the caller keeps (a daemon's memo for the turn): the
/// reads the memo holds are copied into their blocks rather than moved.
pub fn dispatch_typed_kept(rt: &Runtime, f: &Fixture) -> Dispatched {
    let memo = Memo::new();
    let d = rt
        .block_on(
            f.store
                .dispatch(f.session, None, Mode::Strict, memo.clone()),
        )
        .expect("dispatch");
    let d = Dispatched::from(d);
    std::hint::black_box(&memo);
    d
}

/// The writer path into a `Vec<u8>` that grows as it is written, as a caller that
/// wants the JSON in memory gets it.
pub fn dispatch_store_vec(rt: &Runtime, f: &Fixture) -> Vec<u8> {
    let d = rt
        .block_on(f.store.dispatch(f.session, None, Mode::Strict, Memo::new()))
        .expect("dispatch");
    let mut out = StreamWriter::begin(Vec::new(), Format::AcpBlocks, f.session, "").expect("write");
    out.message(&d).expect("write");
    out.finish().expect("write")
}

/// The parts of the dispatch message, for the frame writer.
pub fn dispatch_parts(rt: &Runtime, f: &Fixture) -> ModelMessage {
    rt.block_on(f.store.dispatch(f.session, None, Mode::Strict, Memo::new()))
        .expect("dispatch")
}

/// A request as the ACP SDK (agent-client-protocol 5.2) sends it: `UntypedMessage::new`
/// serializes the params to a `serde_json::Value`, the outgoing actor moves that value
/// into a `RawJsonRpcMessage` with the request's id, and the transport serializes the
/// message with `serde_json::to_string` (whose `Serialize` clones the request into the
/// versioned envelope first) and writes the line.
pub fn sdk_send(params: &impl serde::Serialize) -> String {
    let params = serde_json::to_value(params).expect("params serialize");
    let message = agent_client_protocol::RawJsonRpcMessage::request(
        "session/prompt".to_owned(),
        params,
        agent_client_protocol::RawJsonRpcId::Number(1),
    )
    .expect("params are an object");
    serde_json::to_string(&message).expect("a message serializes")
}

/// The SDK path's baseline: a prebuilt string of the same size, through a `Value` and
/// out as bytes the same way (a copy into the value, the clone, the serialization).
pub fn value_baseline(text: &str) -> String {
    let value = serde_json::to_value(text).expect("a string serializes");
    let wrapped = serde_json::json!({ "text": value.clone() });
    serde_json::to_string(&wrapped).expect("a value serializes")
}

/// The frame writer: the whole `session/prompt` request for `parts`, into a `Vec<u8>`.
pub fn frame(f: &Fixture, parts: &[Part]) -> Vec<u8> {
    let mut out = Vec::new();
    sessionstore::format::prompt_frame(
        &mut out,
        agent_client_protocol_schema::v1::RequestId::Number(1),
        f.session,
        parts,
    )
    .expect("write");
    out
}

/// Writes `n` sessions into the database at `db` by hand, in one transaction (as many
/// store writes would be as many fsyncs): each with its creation event, every tenth
/// with a message. The `list` and `scale` groups list them.
pub fn write_sessions(db: &Path, n: u32) {
    let mut conn = raw_connection(db);
    let tx = conn.transaction().expect("begin");
    for i in 0..n {
        let id = uuid::Uuid::now_v7().to_string();
        let at = format!("2026-01-01T00:00:{:02}.{:09}Z", i % 60, i);
        tx.execute(
            "INSERT INTO sessions (id, title, tools_host, created_at, updated_at)
             VALUES (?1, ?2, 'local', ?3, ?3)",
            rusqlite::params![id, format!("session {i}"), at],
        )
        .expect("a session");
        tx.execute(
            "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
             VALUES (?1, 1, 'session_created', '{}', ?2)",
            rusqlite::params![id, at],
        )
        .expect("its event");
        if i % 10 == 0 {
            let message = uuid::Uuid::now_v7().to_string();
            tx.execute(
                "INSERT INTO messages (id, session_id, seq, role, display_text, state, created_at)
                 VALUES (?1, ?2, 1, 'user', 'hello', 'delivered', ?3)",
                rusqlite::params![message, id, at],
            )
            .expect("a message");
        }
    }
    // The store keys its log a batch at a time (V13); so many events at once it
    // would have keyed.
    tx.execute_batch(
        "INSERT INTO event_keys (session_id, session_seq, seq)
             SELECT session_id, session_seq, seq FROM events
             WHERE seq > (SELECT upto FROM event_keys_upto) ORDER BY session_id, session_seq;
         UPDATE event_keys_upto SET upto = (SELECT coalesce(max(seq), 0) FROM events);",
    )
    .expect("key the events");
    tx.commit().expect("commit");
}
