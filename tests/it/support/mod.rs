//! The one test harness: `TestStore` (`store.rs`), a store on either engine with its
//! roots, and `Bin` (`bin.rs`), the one way to run the binary; and the helpers the
//! tests share to read what they return (content blocks and their contexts, JSON
//! output, one-line errors), the fixtures' documents and paths, seeded randomness and
//! counts. Nothing here checks a contract of its own but what its name says.

mod bin;
mod store;
mod whole;

use std::path::{Path, PathBuf};
use std::process::Output;

use sessionstore::Store;
use sessionstore::oracle::ContextLine;

pub use bin::{Bin, db_arg};
pub use store::{HOST, TestStore, config_in, postgres_tls_url, postgres_url, skipped_tls_notice};
pub(crate) use store::{conformance, over_tls};
pub(crate) use whole::Whole;

/// A user message as typed, with no references.
pub fn user_text(t: &str) -> sessionstore::store::Outgoing {
    sessionstore::store::Outgoing::user(t)
}

/// [`user_text`] queued mid-turn, for the next drain.
pub fn queued_text(t: &str) -> sessionstore::store::Outgoing {
    sessionstore::store::Outgoing {
        mid_turn: true,
        ..sessionstore::store::Outgoing::user(t)
    }
}

/// A turn as `record` reads it, one update a line: a thought in two chunks, a plan,
/// a tool call updated three times (ending `completed` with content) and one that
/// failed, and agent text in two chunks.
pub const RECORDED_TURN: &str = r#"{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Look at the chart "},"messageId":"think"}
{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"and the notes."},"messageId":"think"}
{"sessionUpdate":"plan","entries":[{"content":"Read the notes","priority":"high","status":"in_progress"}]}
{"sessionUpdate":"tool_call","toolCallId":"read","title":"Read notes","kind":"read","status":"pending","rawInput":{"file":"notes.txt"}}
{"sessionUpdate":"tool_call","toolCallId":"grep","title":"Search","kind":"search","status":"failed"}
{"sessionUpdate":"tool_call_update","toolCallId":"read","status":"in_progress"}
{"sessionUpdate":"tool_call_update","toolCallId":"read","title":"Read notes (2 lines)"}
{"sessionUpdate":"tool_call_update","toolCallId":"read","status":"completed","content":[{"type":"content","content":{"type":"text","text":"budget: 42"}}]}
{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"The budget "},"messageId":"answer"}
{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"is 42."},"messageId":"answer"}
"#;

/// The `role` of each entry of a JSON array of messages (a restore's history or an
/// OpenAI request's messages).
pub fn roles(messages: &serde_json::Value) -> Vec<&str> {
    messages
        .as_array()
        .expect("a list of messages")
        .iter()
        .map(|m| m["role"].as_str().expect("each message has a role"))
        .collect()
}

/// Every content block of a restored ACP history; recorded plans, tool calls and
/// session updates carry none.
pub fn history_blocks(restored: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    restored["messages"]
        .as_array()
        .expect("a restored history")
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
}

/// What the v1 fixture's snapshots hold, by name, before redaction: the restored
/// ACP history and both OpenAI requests made from its messages.
pub fn v1_restore_snapshots(
    restored: &crate::restored::Restored,
) -> [(&'static str, serde_json::Value); 3] {
    use sessionstore::openai::{chat_request, responses_request};
    let conversation: Vec<(sessionstore::model::Role, _)> = restored
        .messages
        .iter()
        .map(|d| (d.message.role, d.blocks.clone()))
        .collect();
    let value = |v: Result<serde_json::Value, serde_json::Error>| v.expect("JSON prints");
    [
        ("v1-restore-acp.json", value(serde_json::to_value(restored))),
        (
            "v1-restore-openai.json",
            value(serde_json::to_value(chat_request("gpt-4o", &conversation))),
        ),
        (
            "v1-restore-openai-responses.json",
            value(serde_json::to_value(responses_request(
                "gpt-4o",
                &conversation,
            ))),
        ),
    ]
}

/// The snapshots of the v2 fixture's restore, one a format.
pub const V2_RESTORE_SNAPSHOTS: [(sessionstore::format::Format, &str); 4] = [
    (
        sessionstore::format::Format::AcpRestore,
        "v2-restore-acp.json",
    ),
    (
        sessionstore::format::Format::AcpUpdates,
        "v2-restore-acp-updates.jsonl",
    ),
    (
        sessionstore::format::Format::OpenaiChat,
        "v2-restore-openai.json",
    ),
    (
        sessionstore::format::Format::OpenaiResponses,
        "v2-restore-openai-responses.json",
    ),
];

/// What `restore --format <format>` prints for `session`, written by the binary's own
/// stream writers; whole-document formats pretty-printed, for snapshots.
pub async fn restore_text(
    store: &Store,
    session: sessionstore::SessionId,
    format: sessionstore::format::Format,
) -> String {
    use sessionstore::format::StreamWriter;
    let mut stream = store
        .restore(
            session,
            sessionstore::dispatch::DEFAULT_MEMO_BUDGET,
            sessionstore::restore::Replay::Whole,
        )
        .await
        .expect("the restore starts");
    let mut out = StreamWriter::begin(Vec::new(), format, session, "gpt-4o").expect("a writer");
    while let Some(item) = stream.next().await {
        out.item(&item.expect("an item restores"))
            .expect("the item is written");
    }
    let text = String::from_utf8(out.finish().expect("the writer ends")).expect("UTF-8 output");
    if format.is_lines() {
        text
    } else {
        let value: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
        serde_json::to_string_pretty(&value).expect("JSON prints") + "\n"
    }
}

/// The frozen fixture of schema `version` (`v1`, `v2`) in the repository.
pub fn fixture(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version)
}

/// A new session in the fixture's store, made by the binary; its id.
pub fn new_session(t: &TestStore) -> String {
    json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A dispatched message's blocks, as JSON.
pub fn blocks(d: &sessionstore::store::Dispatched) -> Vec<serde_json::Value> {
    d.blocks.iter().map(block_json).collect()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Asserts a run failed the way the contract says a refusal fails: non-zero exit,
/// exactly one line on stderr, nothing on stdout.
pub fn assert_one_line_error(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure, got {out:?}");
    let err = stderr(out);
    assert_eq!(err.trim_end().lines().count(), 1, "one error line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
    err
}

/// Asserts a run was refused as a usage mistake: exit 2, clap's own message on stderr
/// (which names the argument, the values it takes or a similar flag, over a few
/// lines), nothing on stdout, no control character and no panic.
pub fn assert_usage_error(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected a usage error, got {out:?}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
    let err = stderr(out);
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
    assert!(
        !err.chars().any(|c| c.is_control() && c != '\n'),
        "escaped for the terminal: {err:?}"
    );
    err
}

pub fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "command failed: {}", stderr(out));
    serde_json::from_str(stdout(out).trim()).expect("stdout is one JSON value")
}

/// A complete 1×1 RGBA PNG, the same bytes the probe stores.
pub use sessionstore::oracle::PNG;

/// A block as JSON, after checking that it round-trips as an ACP `ContentBlock`.
pub fn block_json(block: &agent_client_protocol_schema::v1::ContentBlock) -> serde_json::Value {
    let value = serde_json::to_value(block).expect("a content block serializes");
    let back: agent_client_protocol_schema::v1::ContentBlock =
        serde_json::from_value(value.clone()).expect("a content block deserializes");
    assert_eq!(&back, block, "the block round-trips through JSON");
    value
}

/// The path context in a block's `_meta`, if it has one.
pub fn context_of(block: &serde_json::Value) -> Option<&str> {
    block
        .get("_meta")?
        .get(sessionstore::oracle::CONTEXT_META_KEY)?
        .as_str()
}

/// The one JSON line of a context string, checked to have exactly the contract's keys
/// (by the oracle the probe uses).
pub fn context_line(context: &str) -> ContextLine {
    sessionstore::oracle::parse_context(context).unwrap_or_else(|e| panic!("{e} in {context:?}"))
}

/// What an attachment block should hold: the stored name, URI and original bytes, and
/// the daemon host its context names.
pub struct Expect {
    pub name: String,
    pub uri: String,
    pub bytes: Vec<u8>,
    pub host: String,
}

/// Checks one attachment block end to end: its content is the original bytes (image
/// data and blobs decode to them, a text resource holds them as text), and its context
/// names it, with an absolute path whose file holds the same bytes. Returns the block's
/// kind (`image`, `text` or `blob`) and that path.
pub fn check_attachment(block: &serde_json::Value, expect: &Expect) -> (&'static str, PathBuf) {
    use sessionstore::oracle::{Kind, attached};
    let typed: agent_client_protocol_schema::v1::ContentBlock =
        serde_json::from_value(block.clone()).expect("an ACP content block");
    let a = attached(&typed).unwrap_or_else(|| panic!("not an attachment block: {block}"));
    assert_eq!(a.uri, expect.uri, "{block}");
    assert_eq!(
        a.bytes().expect("valid base64"),
        expect.bytes,
        "the block keeps the file's bytes (image data, text contents or blob)"
    );
    let kind = match a.kind {
        Kind::Image => "image",
        Kind::Text => "text",
        Kind::Blob => "blob",
    };
    let mime = a.mime.expect("a MIME type");
    let context = a
        .context()
        .unwrap_or_else(|| panic!("no path context in {block}"));
    let line = context_line(context);
    // Names and paths appear only in the JSON line, never in the instruction lines.
    for other in context.lines().filter(|l| !l.starts_with('{')) {
        assert!(!other.contains(expect.name.as_str()), "{context}");
        assert!(!other.contains('/'), "{context}");
    }
    assert_eq!(line.name, expect.name, "{context}");
    assert_eq!(line.uri, expect.uri, "{context}");
    assert_eq!(line.mime_type, mime, "{context}");
    assert_eq!(line.host, expect.host, "{context}");
    let path = PathBuf::from(&line.path);
    assert!(path.is_absolute(), "{path:?}");
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(expect.name.as_str()),
        "{path:?}"
    );
    assert_eq!(
        std::fs::read(&path).expect("the path given to the model reads"),
        expect.bytes,
        "reading {path:?} gives the original bytes"
    );
    (kind, path)
}

/// Copies a fixture tree (files and folders only) to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("the target folder is made");
    for entry in std::fs::read_dir(from).expect("the fixture folder lists") {
        let entry = entry.expect("a fixture entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("a fixture file copies");
        }
    }
}

/// Every file under `dir`, by relative path, with its bytes: what "left alone" means.
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("the folder lists") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("under dir").to_owned();
                out.insert(rel, std::fs::read(&path).expect("the file reads"));
            }
        }
    }
    out
}

/// A URI the store printed, parsed back as a caller would parse it.
pub fn parse_uri(text: &str) -> sessionstore::attachments::AttachmentUri {
    text.parse()
        .expect("the store printed a valid attachment uri")
}

/// Whether this is the long reliability run (`SESSIONSTORE_LONG=1`).
pub fn long_run() -> bool {
    std::env::var("SESSIONSTORE_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A scenario's count: the variable `var` if set, else the long or the short default.
pub fn count(var: &str, short: usize, long: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if long_run() { long } else { short })
}

/// A small seeded generator (splitmix64), so a failing run can be replayed with
/// `SESSIONSTORE_SEED`; the seed is printed with the scenario's name.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(scenario: &str) -> Rng {
        let seed = std::env::var("SESSIONSTORE_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{scenario}: seed {seed}");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The value at `q` (0..=1) of sorted `values`.
pub fn percentile(sorted: &[std::time::Duration], q: f64) -> std::time::Duration {
    if sorted.is_empty() {
        return std::time::Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// The migrations in `migrations/`, in version order, named as `migrate` reports them
/// (`V1__initial_schema`, ...): what a fresh database applies. Read from the folder
/// so that a new migration does not mean editing every test that counts them.
pub fn migration_names() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut named: Vec<(i64, String)> = std::fs::read_dir(dir)
        .expect("the migrations folder")
        .map(|e| {
            let name = e.expect("a migration entry").file_name();
            let name = name.to_str().expect("a UTF-8 migration name");
            let stem = name.strip_suffix(".sql").expect("an .sql migration");
            let version = stem[1..stem.find("__").expect("V<N>__name")]
                .parse()
                .expect("a numbered migration");
            (version, stem.to_owned())
        })
        .collect();
    named.sort();
    named.into_iter().map(|(_, n)| n).collect()
}

/// The newest schema version in `migrations/`.
pub fn latest_version() -> i64 {
    let names = migration_names();
    let last = names.last().expect("at least one migration");
    last[1..last.find("__").expect("V<N>__name")]
        .parse()
        .expect("a numbered migration")
}

/// Every session of `store`, archived ones too, walked a page at a time (the store
/// hands out no unbounded list).
pub async fn all_sessions(
    store: &sessionstore::Store,
) -> sessionstore::Result<Vec<sessionstore::lifecycle::SessionSummary>> {
    use sessionstore::lifecycle::{ListQuery, MAX_PAGE};
    let (mut all, mut cursor) = (Vec::new(), None);
    loop {
        let query = ListQuery {
            limit: MAX_PAGE,
            cursor,
            archived: Some(sessionstore::model::ArchiveFilter::Include),
            ..ListQuery::default()
        };
        let page = store.list_sessions(query).await?;
        all.extend(page.sessions);
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(all);
        }
    }
}
