//! The probe: one isolated run of Store → Session → OpenAI request in a temporary
//! directory of its own, checking DESIGN.md's invariants end to end and reading every
//! path a model is given back from disk. It never touches the user's data directory,
//! never contacts a model or a network, and loads no personal data: every file it
//! stores is made here.
//!
//! The probe audits the other modules from outside, so it does two things the rest of
//! the library leaves to `db` and `attachments`: it reads the database file through a
//! read-only connection (SELECTs only) to look for paths, and it reads, moves and plants
//! files under its own temporary roots. A legacy root is written by hand because an
//! older version wrote it; a missing file is made by moving one aside.
//!
//! Checks, in the order they run, with the DESIGN.md invariant each pins:
//! `stored-names`; `duplicates-share-one-read` (6); `image-only-message`;
//! `queued-reached-only-by-drain`; `turn-memo-shared-by-drain` (6);
//! `send-refuses-unsafe-uris` (8); `symlinks-refused` (8);
//! `context-wording-by-tools-host` (4); `restore-replays-through-resolver` (9);
//! `one-block-per-reference` (3); `context-under-meta-key` (3);
//! `image-blocks-keep-bytes` (3); `text-blocks-keep-contents` (3);
//! `binary-blocks-keep-bytes` (3); `context-json-line` (4);
//! `context-escapes-hidden-characters` (4); `context-holds-no-file-contents` (4);
//! `raw-text-has-no-meta` (10); `paths-read-back-byte-for-byte` (2);
//! `legacy-path-from-its-read` (2); `openai-chat-parts`; `openai-responses-parts`;
//! `openai-requests-round-trip`; `focus-hint-holds-question-only`;
//! `vision-request-has-no-path`; `strict-dispatch-names-missing-reference` (7);
//! `degraded-dispatch-keeps-survivors` (7); `no-replacement-search` (7);
//! `failed-read-is-evicted` (6); `no-path-in-display-title-references` (5);
//! `event-log-matches-tables`; `restore-after-moving-roots` (1, 9);
//! `schema-has-no-path-column` (1); `db-text-has-no-path` (1); `db-file-has-no-path` (1).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource, Meta};
use base64::Engine;
use serde::Serialize;
use serde_json::{Value, json};

use crate::attachments::{AttachmentUri, ReadObserver, Roots};
use crate::config::{self, Config};
use crate::dispatch::{DAEMON_ATTACHMENT_CONTEXT_META_KEY, Memo, Mode};
use crate::error::Error;
use crate::focus;
use crate::ids::SessionId;
use crate::model::{Message, Role, ToolsHost};
use crate::openai::{self, ChatMessage, ChatPart, ChatRequest, ResponsesRequest};
use crate::store::{Dispatched, Outgoing, Store};

/// One named check: whether it passed, and what it saw or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// One line.
    pub detail: String,
}

impl Check {
    fn new(name: &str, outcome: Outcome) -> Check {
        let (ok, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        Check {
            name: name.to_owned(),
            ok,
            detail: one_line(&detail),
        }
    }
}

/// Every check the probe ran, in order; serializes as `{"checks","passed","failed"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    checks: Vec<Check>,
    passed: usize,
    failed: usize,
}

impl ProbeReport {
    fn new(checks: Vec<Check>) -> ProbeReport {
        let passed = checks.iter().filter(|c| c.ok).count();
        ProbeReport {
            failed: checks.len() - passed,
            passed,
            checks,
        }
    }

    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    pub fn passed(&self) -> usize {
        self.passed
    }

    pub fn failed(&self) -> usize {
        self.failed
    }

    /// True when every check passed (and there was at least one).
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.passed > 0
    }
}

/// One line per check (`ok   <name>` or `FAIL <name>: <detail>`), then the counts.
impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            if check.ok {
                writeln!(f, "ok   {}", check.name)?;
            } else {
                writeln!(f, "FAIL {}: {}", check.name, check.detail)?;
            }
        }
        write!(f, "probe: {} passed, {} failed", self.passed, self.failed)
    }
}

/// The probe itself could not run: its temporary directory or a file it plants there
/// failed. A check that fails is not this; it is a `FAIL` line in the report.
#[derive(Debug, thiserror::Error)]
#[error("probe cannot {action}: {error}")]
pub struct ProbeError {
    action: String,
    error: std::io::Error,
}

/// Runs the probe in a fresh temporary directory, removed before this returns.
pub async fn run_probe() -> Result<ProbeReport, ProbeError> {
    let tmp = tempfile::Builder::new()
        .prefix("sessionstore-probe-")
        .tempdir()
        .map_err(|error| ProbeError {
            action: "create its temporary directory".to_owned(),
            error,
        })?;
    let mut checks = Vec::new();
    match scenario(tmp.path(), &mut checks).await {
        Ok(()) => {}
        Err(Failure::Setup(e)) => return Err(e),
        Err(Failure::Step(detail)) => checks.push(Check::new("scenario", Err(detail))),
    }
    tmp.close().map_err(|error| ProbeError {
        action: "remove its temporary directory".to_owned(),
        error,
    })?;
    Ok(ProbeReport::new(checks))
}

type Outcome = Result<String, String>;

/// Returns `Err(detail)` from a check when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Why the scenario stopped: the probe's own IO failed, or a library step it needs
/// for later checks returned an error (reported as a failed `scenario` check).
enum Failure {
    Setup(ProbeError),
    Step(String),
}

trait StepResult<T> {
    fn step(self, what: &str) -> Result<T, Failure>;
}

impl<T> StepResult<T> for crate::Result<T> {
    fn step(self, what: &str) -> Result<T, Failure> {
        self.map_err(|e| Failure::Step(format!("cannot {what}: {e}")))
    }
}

fn setup<T>(result: std::io::Result<T>, action: &str) -> Result<T, Failure> {
    result.map_err(|error| {
        Failure::Setup(ProbeError {
            action: action.to_owned(),
            error,
        })
    })
}

/// A complete 1×1 RGBA PNG (one orange pixel): signature, IHDR, IDAT, IEND, valid CRCs.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xdf, 0xc0, 0xf0,
    0x1f, 0x00, 0x06, 0x80, 0x02, 0x7f, 0xcf, 0x12, 0x09, 0xf1, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Bytes that are not UTF-8 and match no image signature: a binary resource.
const BLOB_BYTES: &[u8] = &[
    0x00, 0xff, 0xfe, 0x80, b'P', b'K', 0x03, 0x04, 0x00, 0x0a, 0xc3, 0x28, 0x7f, 0x00,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Image,
    Text,
    Blob,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Text => "text",
            Kind::Blob => "binary",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Configured,
    /// Only in the legacy root, put there by hand as an older version would have.
    Legacy,
}

/// A file the probe stores: the upload's own name, the stored name it must get.
struct Upload {
    upload: &'static str,
    name: &'static str,
    bytes: &'static [u8],
    kind: Kind,
    place: Place,
}

const IMAGE: usize = 0;
const NOTES: usize = 1;
const NOTES_AGAIN: usize = 2;
const BLOB: usize = 3;
const LEGACY: usize = 4;
const BIDI: usize = 5;

static UPLOADS: [Upload; 6] = [
    Upload {
        upload: "caf\u{e9} menu.png",
        name: "caf\u{e9} menu.png",
        bytes: PNG,
        kind: Kind::Image,
        place: Place::Configured,
    },
    Upload {
        upload: "notes 日本.txt",
        name: "notes 日本.txt",
        bytes: "Lunch notes\nsoba 蕎麦 and tempura\nthis line must never reach a path context\n"
            .as_bytes(),
        kind: Kind::Text,
        place: Place::Configured,
    },
    Upload {
        upload: "notes 日本.txt",
        name: "notes 日本 (1).txt",
        bytes: "Second version of the notes, different bytes\nudon 饂飩\n".as_bytes(),
        kind: Kind::Text,
        place: Place::Configured,
    },
    Upload {
        upload: "data blob.bin",
        name: "data blob.bin",
        bytes: BLOB_BYTES,
        kind: Kind::Blob,
        place: Place::Configured,
    },
    Upload {
        upload: "\u{e4}ltere Notiz.md",
        name: "\u{e4}ltere Notiz.md",
        bytes: "# Aus der alten Version\nnur im Legacy-Verzeichnis\n".as_bytes(),
        kind: Kind::Text,
        place: Place::Legacy,
    },
    Upload {
        // A right-to-left override makes this look like "invoicetxt.pdf".
        upload: "invoice\u{202e}fdp.txt",
        name: "invoice\u{202e}fdp.txt",
        bytes: b"a name with a bidi override\n",
        kind: Kind::Text,
        place: Place::Configured,
    },
];

const MODEL: &str = "gpt-4o";
const QUESTION: &str = "What is on this menu, and do my notes agree with it?";
const REPLY: &str = "The menu lists soba and tempura; your notes agree.";
const MID_TURN: &str = "Also compare the second version of my notes.";
const TRANSCRIPT: &str = "and tell me which one is cheaper";

/// A stored file and the URI the store gave it.
struct Stored {
    spec: &'static Upload,
    /// The URI as text, as checks compare it with what blocks and contexts print.
    uri: String,
    parsed: AttachmentUri,
}

/// Every attachment read of a store (successful or not), counted per URI.
#[derive(Default)]
struct CountingResolver {
    reads: Mutex<HashMap<String, usize>>,
}

type Counts = HashMap<String, usize>;

impl CountingResolver {
    fn new() -> Arc<CountingResolver> {
        Arc::default()
    }

    /// What the store calls on each read.
    fn observer(self: &Arc<Self>) -> ReadObserver {
        let counts = self.clone();
        ReadObserver::new(move |_, uri| {
            *counts
                .reads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(uri.to_string())
                .or_default() += 1;
        })
    }

    fn snapshot(&self) -> Counts {
        self.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Reads of `uri` between two snapshots.
fn delta(before: &Counts, after: &Counts, uri: &str) -> usize {
    after.get(uri).copied().unwrap_or(0) - before.get(uri).copied().unwrap_or(0)
}

fn total_delta(before: &Counts, after: &Counts) -> usize {
    after.values().sum::<usize>() - before.values().sum::<usize>()
}

/// The messages the scenario sends.
struct Sent {
    normal: Message,
    reply: Message,
    image_only: Message,
    mid_turn: Message,
}

struct Probe {
    tmp: PathBuf,
    config: Config,
    session: SessionId,
    files: Vec<Stored>,
    reads: Arc<CountingResolver>,
    store: Store,
    checks: Vec<Check>,
    /// Every path a context string named, for the "no path here" checks.
    paths_seen: BTreeSet<String>,
}

async fn scenario(tmp: &Path, checks: &mut Vec<Check>) -> Result<(), Failure> {
    let mut p = Probe::start(tmp).await?;
    let result = p.run().await;
    checks.append(&mut p.checks);
    result
}

impl Probe {
    fn record(&mut self, name: &str, outcome: Outcome) {
        self.checks.push(Check::new(name, outcome));
    }

    fn file(&self, index: usize) -> &Stored {
        &self.files[index]
    }

    fn by_uri(&self, uri: &str) -> Option<&Stored> {
        self.files.iter().find(|f| f.uri == uri)
    }

    fn session_folder(&self, root: &Path) -> PathBuf {
        root.join(self.session.to_string())
    }

    fn configured(&self) -> &Path {
        &self.config.roots.configured
    }

    fn legacy(&self) -> &Path {
        &self.config.roots.legacy[0]
    }

    /// Strings no persisted value may contain: the probe's directory (every root and
    /// the database are under it) and every path a model was given.
    fn path_needles(&self) -> Vec<String> {
        let mut needles = vec![self.tmp.to_string_lossy().into_owned()];
        if let Ok(real) = std::fs::canonicalize(&self.tmp) {
            needles.push(real.to_string_lossy().into_owned());
        }
        needles.extend(self.paths_seen.iter().cloned());
        needles.sort();
        needles.dedup();
        needles
    }

    async fn start(tmp: &Path) -> Result<Probe, Failure> {
        let config = Config {
            db_path: tmp.join("db").join("sessions.db"),
            roots: Roots {
                configured: tmp.join("attachments"),
                legacy: vec![tmp.join("legacy")],
            },
            host: config::host_name(),
        };
        let reads = CountingResolver::new();
        let store = Store::open_with_read_observer(config.clone(), reads.observer())
            .await
            .step("open the probe's store")?;
        let session = store
            .create_session(None, ToolsHost::Local)
            .await
            .step("create a session")?
            .id;
        let mut probe = Probe {
            tmp: tmp.to_owned(),
            config,
            session,
            files: Vec::new(),
            reads,
            store,
            checks: Vec::new(),
            paths_seen: BTreeSet::new(),
        };
        let mut stored_names = Vec::new();
        for spec in &UPLOADS {
            let uri = match spec.place {
                Place::Configured => {
                    let stored = probe
                        .store
                        .attach(session, spec.upload.to_owned(), spec.bytes.to_vec())
                        .await
                        .step("store an attachment")?;
                    stored_names.push((spec, stored.name));
                    stored.uri
                }
                Place::Legacy => {
                    let folder = probe.session_folder(probe.legacy());
                    setup(
                        std::fs::create_dir_all(&folder),
                        "create the legacy session folder",
                    )?;
                    setup(
                        std::fs::write(folder.join(spec.name), spec.bytes),
                        "plant the legacy-only file",
                    )?;
                    AttachmentUri::new(session, spec.name)
                }
            };
            probe.files.push(Stored {
                spec,
                uri: uri.to_string(),
                parsed: uri,
            });
        }
        let outcome = probe.stored_names(&stored_names);
        probe.record("stored-names", outcome);
        Ok(probe)
    }

    async fn run(&mut self) -> Result<(), Failure> {
        let sent = self.send_all().await?;
        let first = self.first_delivery(&sent).await?;
        self.refusals().await?;
        self.tools_host_wording(&first).await?;
        let restored = self.restore(&sent, &first).await?;
        self.model_bound(&restored);
        self.degradation(&sent).await?;
        self.persisted(&sent).await?;
        self.moved_roots().await?;
        self.database();
        Ok(())
    }

    fn stored_names(&self, stored: &[(&Upload, String)]) -> Outcome {
        for (spec, name) in stored {
            ensure!(
                name == spec.name,
                "upload {:?} was stored as {name:?}, expected {:?}",
                spec.upload,
                spec.name
            );
        }
        for file in &self.files {
            let expected = expected_uri(self.session, file.spec.name);
            ensure!(
                file.uri == expected,
                "{:?} has URI {}, expected {expected}",
                file.spec.name,
                file.uri
            );
            let parsed = AttachmentUri::parse(&file.uri)
                .map_err(|e| format!("the store's own URI does not parse: {e}"))?;
            ensure!(
                parsed.name() == file.spec.name && parsed.session() == self.session,
                "{} parses to another name or session",
                file.uri
            );
        }
        Ok(format!(
            "{} names kept with spaces and Unicode, the duplicate numbered {:?}",
            self.files.len(),
            UPLOADS[NOTES_AGAIN].name
        ))
    }

    async fn send_all(&self) -> Result<Sent, Failure> {
        let uri = |i: usize| self.file(i).parsed.clone();
        let normal = Outgoing {
            attach: vec![
                uri(IMAGE),
                uri(NOTES),
                uri(NOTES_AGAIN),
                uri(BLOB),
                uri(LEGACY),
                uri(BIDI),
                uri(NOTES),
            ],
            ..Outgoing::user(QUESTION)
        };
        let reply = Outgoing {
            role: Role::Assistant,
            ..Outgoing::user(REPLY)
        };
        let image_only = Outgoing {
            attach: vec![uri(IMAGE)],
            ..Outgoing::user("")
        };
        let mid_turn = Outgoing {
            attach: vec![uri(NOTES_AGAIN)],
            transcript: Some(TRANSCRIPT.to_owned()),
            mid_turn: true,
            ..Outgoing::user(MID_TURN)
        };
        let s = self.session;
        Ok(Sent {
            normal: self
                .store
                .send(s, normal)
                .await
                .step("send the normal message")?,
            reply: self
                .store
                .send(s, reply)
                .await
                .step("send the assistant reply")?,
            image_only: self
                .store
                .send(s, image_only)
                .await
                .step("send the image-only message")?,
            mid_turn: self
                .store
                .send(s, mid_turn)
                .await
                .step("queue the mid-turn message")?,
        })
    }

    /// One turn: the normal message, the latest message by default, then the drain,
    /// all through one memo as the daemon does.
    async fn first_delivery(&mut self, sent: &Sent) -> Result<FirstDelivery, Failure> {
        let memo = Memo::new();
        let s = self.session;
        let before = self.reads.snapshot();
        let normal = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Strict, memo.clone())
            .await
            .step("dispatch the normal message")?;
        let after = self.reads.snapshot();
        let outcome = self.duplicates_share_one_read(&normal, &before, &after, &memo);
        self.record("duplicates-share-one-read", outcome);

        let latest = self
            .store
            .dispatch(s, None, Mode::Strict, memo.clone())
            .await
            .step("dispatch the latest message")?;
        let outcome = self.image_only(sent, &latest);
        self.record("image-only-message", outcome);

        let queued_direct = self
            .store
            .dispatch(s, Some(sent.mid_turn.id), Mode::Strict, memo.clone())
            .await;
        let drained = self
            .store
            .drain(s, Mode::Strict, memo.clone())
            .await
            .step("drain the mid-turn queue")?;
        let after_drain = self.reads.snapshot();
        let drained_again = self
            .store
            .drain(s, Mode::Strict, memo.clone())
            .await
            .step("drain an empty queue")?;
        let still_queued = self
            .store
            .queued_messages(s)
            .await
            .step("list queued messages")?;
        let outcome = self.queued_by_drain(
            sent,
            &latest,
            queued_direct.err(),
            &drained,
            drained_again.len(),
            still_queued.len(),
        );
        self.record("queued-reached-only-by-drain", outcome);

        let outcome = (|| {
            let new_reads = total_delta(&after, &after_drain);
            ensure!(
                new_reads == 0,
                "the image-only dispatch and the drain read {new_reads} files again; their \
                 references were in the turn's memo"
            );
            Ok("the image-only dispatch and the drain were served from the turn's memo".into())
        })();
        self.record("turn-memo-shared-by-drain", outcome);
        Ok(FirstDelivery {
            normal,
            image_only: latest,
            drained,
        })
    }

    fn duplicates_share_one_read(
        &self,
        normal: &Dispatched,
        before: &Counts,
        after: &Counts,
        memo: &Memo,
    ) -> Outcome {
        let refs = &normal.message.refs;
        let distinct: BTreeSet<String> = refs.iter().map(|r| r.uri.to_string()).collect();
        ensure!(
            distinct.len() < refs.len(),
            "the normal message has no duplicate reference ({} references)",
            refs.len()
        );
        for uri in &distinct {
            let n = delta(before, after, uri);
            ensure!(n == 1, "{uri} was read {n} times in one dispatch");
        }
        let total = total_delta(before, after);
        ensure!(
            total == distinct.len(),
            "{total} reads for {} distinct references",
            distinct.len()
        );
        ensure!(
            memo.len() == distinct.len(),
            "the memo holds {} entries for {} distinct references",
            memo.len(),
            distinct.len()
        );
        let notes = &self.file(NOTES).uri;
        let dup_blocks: Vec<&ContentBlock> = normal
            .blocks
            .iter()
            .filter(|b| attached(b).is_some_and(|a| a.uri == notes))
            .collect();
        ensure!(
            dup_blocks.len() == 2 && dup_blocks[0] == dup_blocks[1],
            "the two references to {notes} did not give the same block ({} blocks)",
            dup_blocks.len()
        );
        Ok(format!(
            "{} references, {} reads, {} memo entries",
            refs.len(),
            total,
            memo.len()
        ))
    }

    fn image_only(&self, sent: &Sent, latest: &Dispatched) -> Outcome {
        ensure!(
            latest.message.id == sent.image_only.id,
            "the default dispatch took message {} instead of the image-only {}",
            latest.message.id,
            sent.image_only.id
        );
        ensure!(
            latest.message.display_text.is_empty(),
            "the image-only message has display text {:?}",
            latest.message.display_text
        );
        ensure!(
            latest.blocks.len() == 1,
            "an image-only message gave {} blocks",
            latest.blocks.len()
        );
        let image = attached(&latest.blocks[0])
            .filter(|a| a.kind == Kind::Image)
            .ok_or("the image-only message's block is not an image")?;
        ensure!(
            image.uri == self.file(IMAGE).uri,
            "the image block names {}",
            image.uri
        );
        ensure!(
            image.bytes()? == PNG,
            "the image block's bytes are not the PNG"
        );
        ensure!(
            image.context().is_some(),
            "the image block has no path context"
        );
        Ok("an empty text and one image give exactly one image block".into())
    }

    fn queued_by_drain(
        &self,
        sent: &Sent,
        latest: &Dispatched,
        queued_direct: Option<Error>,
        drained: &[Dispatched],
        drained_again: usize,
        still_queued: usize,
    ) -> Outcome {
        ensure!(
            latest.message.id != sent.mid_turn.id,
            "the default dispatch took the queued mid-turn message"
        );
        ensure!(
            queued_direct.is_some(),
            "dispatch --message delivered the queued mid-turn message"
        );
        ensure!(
            drained.len() == 1 && drained[0].message.id == sent.mid_turn.id,
            "the drain delivered {} messages, expected the mid-turn one",
            drained.len()
        );
        let blocks = &drained[0].blocks;
        ensure!(
            blocks.len() == 3
                && text_of(&blocks[0]) == Some(MID_TURN)
                && text_of(&blocks[1]).is_some_and(|t| t.contains(TRANSCRIPT))
                && attached(&blocks[2]).is_some_and(|a| a.uri == self.file(NOTES_AGAIN).uri),
            "the drained message gave {} blocks, expected its text, its transcript and one attachment",
            blocks.len()
        );
        ensure!(
            drained_again == 0 && still_queued == 0,
            "after the drain, {still_queued} messages are still queued and a second drain \
             delivered {drained_again}"
        );
        Ok("dispatch skips and refuses the queued message; one drain delivers it".into())
    }

    async fn refusals(&mut self) -> Result<(), Failure> {
        let s = self.session;
        let counts = |store: Store| async move {
            let messages = store.messages(s).await.step("list messages")?.len();
            let events = store.events(s).await.step("list events")?.len();
            Ok::<_, Failure>((messages, events))
        };
        let before = counts(self.store.clone()).await?;
        let image_path = self
            .session_folder(self.configured())
            .join(UPLOADS[IMAGE].name);
        let unsafe_uris = vec![
            format!("attachment:///{s}/..%2F..%2Fetc%2Fpasswd"),
            format!("attachment:///{s}/../../etc/passwd"),
            format!("attachment:///{s}/.."),
            format!("attachment:///{s}/%2E%2E"),
            format!("attachment:///{s}/notes%00.txt"),
            "attachment:////etc/passwd".to_owned(),
            format!("file://{}", image_path.display()),
            image_path.display().to_string(),
            expected_uri(SessionId::new(), UPLOADS[IMAGE].name),
            expected_uri(s, "missing file.txt"),
        ];
        let outcome = self.refused_all(&unsafe_uris).await;
        let after = counts(self.store.clone()).await?;
        let outcome = outcome.and_then(|detail| {
            ensure!(
                before == after,
                "refused sends changed the session: (messages, events) {before:?} -> {after:?}"
            );
            Ok(detail)
        });
        self.record("send-refuses-unsafe-uris", outcome);

        // Symlinks inside the session folder are refused wherever they point.
        let folder = self.session_folder(self.configured());
        let outside = self.tmp.join("outside.txt");
        setup(
            std::fs::write(&outside, b"outside the session folder"),
            "write a file outside the roots",
        )?;
        let escape = folder.join("escape.txt");
        let alias = folder.join("alias.png");
        setup(
            std::os::unix::fs::symlink(&outside, &escape),
            "make a symlink out of the session folder",
        )?;
        setup(
            std::os::unix::fs::symlink(UPLOADS[IMAGE].name, &alias),
            "make a symlink inside the session folder",
        )?;
        let links = vec![expected_uri(s, "escape.txt"), expected_uri(s, "alias.png")];
        let outcome = self.refused_all(&links).await;
        let after_links = counts(self.store.clone()).await?;
        let outcome = outcome.and_then(|detail| {
            ensure!(
                after == after_links,
                "refused sends changed the session: {after:?} -> {after_links:?}"
            );
            Ok(detail)
        });
        self.record("symlinks-refused", outcome);
        setup(std::fs::remove_file(&escape), "remove a symlink")?;
        setup(std::fs::remove_file(&alias), "remove a symlink")?;
        Ok(())
    }

    async fn refused_all(&self, uris: &[String]) -> Outcome {
        for uri in uris {
            // A URI that does not parse is refused where its text comes in, before
            // any store sees it.
            let parsed = match AttachmentUri::parse(uri) {
                Ok(parsed) => parsed,
                Err(e) => {
                    ensure!(
                        !e.to_string().contains('\n'),
                        "the refusal of {uri:?} is not one line"
                    );
                    continue;
                }
            };
            let send = Outgoing {
                attach: vec![parsed],
                ..Outgoing::user("look at this")
            };
            match self.store.send(self.session, send).await {
                Ok(_) => return Err(format!("send accepted {uri:?}")),
                Err(e) => ensure!(
                    !e.to_string().contains('\n'),
                    "the refusal of {uri:?} is not one line"
                ),
            }
        }
        Ok(format!("{} URIs refused, nothing stored", uris.len()))
    }

    /// A session whose tools run over ssh gets the "may not reach it" wording.
    async fn tools_host_wording(&mut self, first: &FirstDelivery) -> Result<(), Failure> {
        let ssh = self
            .store
            .create_session(Some("probe over ssh".to_owned()), ToolsHost::Ssh)
            .await
            .step("create an ssh session")?
            .id;
        let note = self
            .store
            .attach(ssh, "ssh note.txt".to_owned(), b"remote tools\n".to_vec())
            .await
            .step("store an attachment in the ssh session")?;
        let send = Outgoing {
            attach: vec![note.uri],
            ..Outgoing::user("read the note")
        };
        self.store
            .send(ssh, send)
            .await
            .step("send in the ssh session")?;
        let remote = self
            .store
            .dispatch(ssh, None, Mode::Strict, Memo::new())
            .await
            .step("dispatch in the ssh session")?;
        let outcome = (|| {
            let local = first
                .normal
                .blocks
                .iter()
                .find_map(|b| attached(b)?.context())
                .ok_or("the local session's blocks have no context")?;
            let remote = remote
                .blocks
                .iter()
                .find_map(|b| attached(b)?.context())
                .ok_or("the ssh session's block has no context")?;
            let local_words = instructions(local);
            let remote_words = instructions(remote);
            ensure!(
                local_words.contains("daemon host") && !says_unreachable(&local_words),
                "the local context does not tell the model to use the path on the daemon host: \
                 {local_words:?}"
            );
            ensure!(
                remote_words.contains("daemon host") && says_unreachable(&remote_words),
                "the ssh context does not say the path is on the daemon host and may be \
                 unreachable: {remote_words:?}"
            );
            let line = parse_context(remote)?;
            ensure!(
                line.host == self.config.host,
                "the ssh context names host {:?}",
                line.host
            );
            Ok(
                "local: use the path on the daemon host; ssh: the path is on the daemon host, \
                tools may not reach it"
                    .into(),
            )
        })();
        self.record("context-wording-by-tools-host", outcome);
        Ok(())
    }

    /// Restores the session through a new store and checks the replay.
    async fn restore(
        &mut self,
        sent: &Sent,
        first: &FirstDelivery,
    ) -> Result<Vec<Dispatched>, Failure> {
        let reads = CountingResolver::new();
        let fresh = Store::open_with_read_observer(self.config.clone(), reads.observer())
            .await
            .step("open a second store on the same database")?;
        let restored = fresh
            .restore(self.session)
            .await
            .step("restore the session in a new store")?;
        let counts = reads.snapshot();
        let outcome = (|| {
            let ids: Vec<_> = restored.messages.iter().map(|d| d.message.id).collect();
            let expected = [
                sent.normal.id,
                sent.reply.id,
                sent.image_only.id,
                sent.mid_turn.id,
            ];
            ensure!(
                ids == expected,
                "the restored history is {ids:?}, expected {expected:?}"
            );
            let distinct: BTreeSet<String> = restored
                .messages
                .iter()
                .flat_map(|d| d.message.refs.iter().map(|r| r.uri.to_string()))
                .collect();
            for uri in &distinct {
                let n = counts.get(uri).copied().unwrap_or(0);
                ensure!(
                    n == 1,
                    "the replay read {uri} {n} times through the new store's resolver"
                );
            }
            let total: usize = counts.values().sum();
            ensure!(
                total == distinct.len(),
                "the replay made {total} reads for {} distinct references",
                distinct.len()
            );
            let reply = &restored.messages[1].blocks;
            ensure!(
                reply.len() == 1 && text_of(&reply[0]) == Some(REPLY),
                "the assistant reply did not restore as its text only"
            );
            let pairs = [
                (&restored.messages[0], &first.normal),
                (&restored.messages[2], &first.image_only),
                (&restored.messages[3], &first.drained[0]),
            ];
            for (replayed, delivered) in pairs {
                ensure!(
                    replayed.blocks == delivered.blocks,
                    "message {} restored with other blocks than its first delivery",
                    delivered.message.id
                );
            }
            Ok(format!(
                "{} messages replayed with {total} live reads, blocks equal to first delivery",
                restored.messages.len()
            ))
        })();
        self.record("restore-replays-through-resolver", outcome);
        Ok(restored.messages)
    }

    /// Everything a model gets from the restored history: ACP blocks, both OpenAI
    /// requests, the focus hint and the vision request.
    fn model_bound(&mut self, restored: &[Dispatched]) {
        for d in restored {
            for block in &d.blocks {
                if let Some(context) = attached(block).and_then(|a| a.context())
                    && let Ok(line) = parse_context(context)
                {
                    self.paths_seen.insert(line.path);
                }
            }
        }
        let outcome = one_block_per_reference(restored);
        self.record("one-block-per-reference", outcome);
        let outcome = context_under_meta_key(restored);
        self.record("context-under-meta-key", outcome);
        for (name, kind) in [
            ("image-blocks-keep-bytes", Kind::Image),
            ("text-blocks-keep-contents", Kind::Text),
            ("binary-blocks-keep-bytes", Kind::Blob),
        ] {
            let outcome = self.blocks_keep_content(restored, kind);
            self.record(name, outcome);
        }
        let outcome = self.context_json_line(restored);
        self.record("context-json-line", outcome);
        let outcome = self.context_escapes(restored);
        self.record("context-escapes-hidden-characters", outcome);
        let outcome = self.context_holds_no_contents(restored);
        self.record("context-holds-no-file-contents", outcome);
        let outcome = raw_text_has_no_meta(restored);
        self.record("raw-text-has-no-meta", outcome);

        let conversation: Vec<(Role, Vec<ContentBlock>)> = restored
            .iter()
            .map(|d| (d.message.role, d.blocks.clone()))
            .collect();
        let chat = openai::chat_request(MODEL, &conversation);
        let responses = openai::responses_request(MODEL, &conversation);
        let outcome = self.paths_read_back(&chat);
        self.record("paths-read-back-byte-for-byte", outcome);
        let outcome = self.legacy_path(&chat);
        self.record("legacy-path-from-its-read", outcome);
        let outcome = expected_chat(&conversation).and_then(|expected| {
            compare_request(&chat, &expected, "messages")?;
            let contexts = count_contexts(&conversation);
            Ok(format!(
                "{contexts} path-context text parts, each right before its attachment part"
            ))
        });
        self.record("openai-chat-parts", outcome);
        let outcome = expected_chat(&conversation)
            .map(|chat| expected_responses(&chat))
            .and_then(|expected| {
                compare_request(&responses, &expected, "input")?;
                Ok("input_text context before each input_image / input_file / contents".into())
            });
        self.record("openai-responses-parts", outcome);
        let outcome = round_trips(&chat, &responses, &conversation);
        self.record("openai-requests-round-trip", outcome);
        let outcome = self.focus_hints(restored);
        self.record("focus-hint-holds-question-only", outcome);
        let outcome = self.vision_request(restored);
        self.record("vision-request-has-no-path", outcome);
    }

    fn blocks_keep_content(&self, restored: &[Dispatched], kind: Kind) -> Outcome {
        let mut seen = 0;
        for d in user_messages(restored) {
            let expected = d
                .message
                .refs
                .iter()
                .filter(|r| {
                    self.by_uri(&r.uri.to_string())
                        .is_some_and(|f| f.spec.kind == kind)
                })
                .count();
            let mut found = 0;
            for a in d.blocks.iter().filter_map(attached) {
                let file = self
                    .by_uri(a.uri)
                    .ok_or_else(|| format!("a block names an unknown URI {}", a.uri))?;
                if file.spec.kind != kind {
                    ensure!(
                        a.kind != kind,
                        "{:?} became a {} block",
                        file.spec.name,
                        kind.label()
                    );
                    continue;
                }
                ensure!(
                    a.kind == kind,
                    "{:?} became a {} block, not a {} block",
                    file.spec.name,
                    a.kind.label(),
                    kind.label()
                );
                ensure!(
                    a.bytes()? == file.spec.bytes,
                    "the {} block for {:?} does not hold the file's bytes",
                    kind.label(),
                    file.spec.name
                );
                let reference = d.message.refs.iter().find(|r| r.uri.to_string() == a.uri);
                ensure!(
                    reference.is_some_and(|r| Some(r.mime_type.as_str()) == a.mime),
                    "the {} block for {:?} has MIME type {:?}",
                    kind.label(),
                    file.spec.name,
                    a.mime
                );
                if kind == Kind::Image {
                    ensure!(a.mime == Some("image/png"), "the PNG has type {:?}", a.mime);
                }
                found += 1;
            }
            ensure!(
                found == expected,
                "message {} has {expected} {} references but {found} {} blocks",
                d.message.id,
                kind.label(),
                kind.label()
            );
            seen += found;
        }
        ensure!(seen > 0, "no {} block was dispatched", kind.label());
        Ok(format!(
            "{seen} {} blocks equal to the stored bytes",
            kind.label()
        ))
    }

    fn context_json_line(&self, restored: &[Dispatched]) -> Outcome {
        let mut n = 0;
        for d in user_messages(restored) {
            let blocks: Vec<Attached<'_>> = d.blocks.iter().filter_map(attached).collect();
            for (a, r) in blocks.iter().zip(&d.message.refs) {
                let context = a
                    .context()
                    .ok_or_else(|| format!("the block for {} has no context", a.uri))?;
                let line = parse_context(context)?;
                ensure!(
                    line.name == r.stored_name
                        && line.uri == r.uri.to_string()
                        && line.mime == r.mime_type,
                    "the context of {} names {:?} {:?} {:?}, its reference {:?} {:?} {:?}",
                    a.uri,
                    line.name,
                    line.uri,
                    line.mime,
                    r.stored_name,
                    r.uri,
                    r.mime_type
                );
                ensure!(
                    line.host == self.config.host,
                    "the context names host {:?}, the daemon is {:?}",
                    line.host,
                    self.config.host
                );
                ensure!(
                    !line.path.is_empty(),
                    "the context of {} has no path",
                    a.uri
                );
                n += 1;
            }
        }
        ensure!(n > 0, "no context was dispatched");
        Ok(format!(
            "{n} contexts, each with one JSON line of name, uri, mimeType, path, host"
        ))
    }

    fn context_escapes(&self, restored: &[Dispatched]) -> Outcome {
        let mut n = 0;
        for a in restored
            .iter()
            .flat_map(|d| d.blocks.iter().filter_map(attached))
        {
            let Some(context) = a.context() else { continue };
            if let Some(c) = context.chars().find(|&c| c != '\n' && is_hidden(c)) {
                return Err(format!(
                    "the context of {} holds U+{:04X} unescaped",
                    a.uri, c as u32
                ));
            }
            let line = parse_context(context)?;
            let file = self.by_uri(a.uri).ok_or("a block names an unknown URI")?;
            ensure!(
                line.name == file.spec.name,
                "the JSON line decodes to name {:?}, expected {:?}",
                line.name,
                file.spec.name
            );
            if file.spec.name.chars().any(is_hidden) {
                ensure!(
                    line.raw.to_lowercase().contains("\\u202e"),
                    "the bidi override in {:?} is not written as \\u202e",
                    file.spec.name
                );
            } else {
                ensure!(
                    line.raw.contains(file.spec.name),
                    "the printable name {:?} is not readable in {:?}",
                    file.spec.name,
                    line.raw
                );
            }
            n += 1;
        }
        ensure!(n > 0, "no context was dispatched");
        Ok(format!(
            "{n} contexts: hidden characters escaped, printable Unicode readable"
        ))
    }

    fn context_holds_no_contents(&self, restored: &[Dispatched]) -> Outcome {
        let mut n = 0;
        for a in restored
            .iter()
            .flat_map(|d| d.blocks.iter().filter_map(attached))
        {
            let context = a
                .context()
                .ok_or_else(|| format!("the block for {} has no context", a.uri))?;
            let file = self.by_uri(a.uri).ok_or("a block names an unknown URI")?;
            ensure!(
                !context.contains(a.payload),
                "the context of {:?} holds the file's content",
                file.spec.name
            );
            if let Ok(text) = std::str::from_utf8(file.spec.bytes) {
                for line in text.lines().filter(|l| l.chars().count() >= 8) {
                    ensure!(
                        !context.contains(line),
                        "the context of {:?} quotes {line:?}",
                        file.spec.name
                    );
                }
            }
            let lines = context.lines().count();
            ensure!(
                (2..=8).contains(&lines),
                "the context of {:?} has {lines} lines",
                file.spec.name
            );
            n += 1;
        }
        ensure!(n > 0, "no context was dispatched");
        Ok(format!("{n} contexts hold no file contents"))
    }

    fn paths_read_back(&self, chat: &ChatRequest) -> Outcome {
        let mut n = 0;
        let mut refs = 0;
        for message in &chat.messages {
            let ChatMessage::User { content } = message else {
                continue;
            };
            for (i, part) in content.iter().enumerate() {
                let ChatPart::Text { text } = part else {
                    continue;
                };
                let Ok(line) = parse_context(text) else {
                    continue;
                };
                let file = self
                    .by_uri(&line.uri)
                    .ok_or_else(|| format!("a context names an unknown URI {}", line.uri))?;
                let path = Path::new(&line.path);
                ensure!(path.is_absolute(), "{path:?} is not absolute");
                let on_disk = std::fs::read(path)
                    .map_err(|e| format!("the path {path:?} given to the model: {e}"))?;
                ensure!(
                    on_disk == file.spec.bytes,
                    "reading {path:?} does not give the bytes stored as {:?}",
                    file.spec.name
                );
                let sent = content
                    .get(i + 1)
                    .ok_or("a context part ends the message")
                    .and_then(|p| {
                        part_bytes(p).map_err(|_| "a context part is not before content")
                    })?;
                ensure!(
                    sent == on_disk,
                    "the part after the context of {:?} is not the bytes at {path:?}",
                    file.spec.name
                );
                n += 1;
            }
        }
        for d in &chat.messages {
            if let ChatMessage::User { content } = d {
                refs += content
                    .iter()
                    .filter(|p| !matches!(p, ChatPart::Text { .. }))
                    .count();
            }
        }
        ensure!(n > 0, "no path reached the request");
        ensure!(
            n >= refs,
            "{n} paths for {refs} image and file parts in the request"
        );
        Ok(format!(
            "{n} paths in the request, all absolute, each reading back the model's bytes"
        ))
    }

    fn legacy_path(&self, chat: &ChatRequest) -> Outcome {
        let legacy = self.file(LEGACY);
        let expected = self.session_folder(self.legacy()).join(legacy.spec.name);
        let configured_copy = self
            .session_folder(self.configured())
            .join(legacy.spec.name);
        ensure!(
            std::fs::symlink_metadata(&configured_copy).is_err(),
            "the legacy-only file also exists at {configured_copy:?}"
        );
        let mut seen = 0;
        for part in chat.messages.iter().flat_map(|m| match m {
            ChatMessage::User { content } => content.as_slice(),
            _ => &[],
        }) {
            let ChatPart::Text { text } = part else {
                continue;
            };
            let Ok(line) = parse_context(text) else {
                continue;
            };
            let path = PathBuf::from(&line.path);
            if line.uri == legacy.uri {
                ensure!(
                    path == expected,
                    "the legacy-only file was given as {path:?}, read from {expected:?}"
                );
                seen += 1;
            } else {
                let file = self
                    .by_uri(&line.uri)
                    .ok_or("a context names an unknown URI")?;
                let expected = self.session_folder(self.configured()).join(file.spec.name);
                ensure!(
                    path == expected,
                    "{:?} was given as {path:?}, expected {expected:?}",
                    file.spec.name
                );
            }
        }
        ensure!(seen > 0, "the legacy-only file never reached the request");
        Ok(format!(
            "the legacy-only file's path is in the legacy root ({seen} parts)"
        ))
    }

    fn focus_hints(&self, restored: &[Dispatched]) -> Outcome {
        let mut needles: Vec<String> = self.path_needles();
        for file in &self.files {
            needles.push(file.spec.name.to_owned());
            needles.push(file.uri.clone());
        }
        needles.push("attachment:".to_owned());
        needles.push(DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned());
        let mut n = 0;
        for d in user_messages(restored) {
            let m = &d.message;
            let hint = focus::focus_hint(
                &m.display_text,
                m.model_text.as_deref(),
                m.transcript.as_deref(),
            );
            ensure!(
                hint.starts_with(&m.display_text),
                "the hint for {} does not start with the question: {hint:?}",
                m.id
            );
            if let Some(t) = &m.transcript {
                ensure!(hint.contains(t.as_str()), "the hint lost the transcript");
            }
            ensure!(
                hint.chars().count() <= focus::FOCUS_HINT_LIMIT,
                "the hint has {} characters",
                hint.chars().count()
            );
            if let Some(needle) = needles.iter().find(|s| hint.contains(s.as_str())) {
                return Err(format!("the hint for {} contains {needle:?}", m.id));
            }
            n += 1;
        }
        ensure!(n > 0, "no user message to build a hint for");
        Ok(format!(
            "{n} hints hold the user's text and no path, name or URI"
        ))
    }

    fn vision_request(&self, restored: &[Dispatched]) -> Outcome {
        let normal = restored.first().ok_or("nothing was restored")?;
        let m = &normal.message;
        let hint = focus::focus_hint(
            &m.display_text,
            m.model_text.as_deref(),
            m.transcript.as_deref(),
        );
        let request = openai::vision_request(MODEL, &hint, &normal.blocks);
        let text = serde_json::to_string(&request).map_err(|e| e.to_string())?;
        let mut needles = self.path_needles();
        for file in &self.files {
            needles.push(file.spec.name.to_owned());
            needles.push(file.uri.clone());
        }
        if let Some(needle) = needles.iter().find(|s| text.contains(s.as_str())) {
            return Err(format!("the vision request contains {needle:?}"));
        }
        let images = normal
            .blocks
            .iter()
            .filter(|b| matches!(b, ContentBlock::Image(_)))
            .count();
        let expected_image = ChatPart::ImageUrl {
            image_url: openai::ImageUrl {
                url: format!(
                    "data:image/png;base64,{}",
                    base64::engine::general_purpose::STANDARD.encode(PNG)
                ),
            },
        };
        let [ChatMessage::User { content }] = request.messages.as_slice() else {
            return Err("the vision request is not one user message".into());
        };
        ensure!(
            content.first() == Some(&ChatPart::Text { text: hint.clone() }),
            "the vision request does not start with the hint"
        );
        ensure!(
            content.len() == 1 + images && content[1..].iter().all(|p| *p == expected_image),
            "the vision request has {} parts for {images} images",
            content.len()
        );
        Ok(format!("the hint and {images} image, no path, name or URI"))
    }

    /// Moves the blob aside, plants look-alikes, and dispatches strict, degrading, and
    /// again once the file is back, all through one memo.
    async fn degradation(&mut self, sent: &Sent) -> Result<(), Failure> {
        let s = self.session;
        let blob = self.file(BLOB).uri.clone();
        let blob_uri = self.file(BLOB).parsed.clone();
        let name = UPLOADS[BLOB].name;
        let real = self.session_folder(self.configured()).join(name);
        let aside = self.tmp.join("aside.bin");
        setup(std::fs::rename(&real, &aside), "move a file aside")?;
        let other_folder = self.configured().join(SessionId::new().to_string());
        let decoys = [
            other_folder.join(name),
            self.session_folder(self.configured())
                .join("data blob (1).bin"),
            self.session_folder(self.configured()).join("data blob.BIN"),
        ];
        setup(
            std::fs::create_dir_all(&other_folder),
            "make a decoy folder",
        )?;
        for decoy in &decoys {
            setup(std::fs::write(decoy, BLOB_BYTES), "plant a decoy file")?;
        }

        let memo = Memo::new();
        let before = self.reads.snapshot();
        let strict = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Strict, memo.clone())
            .await;
        let outcome = (|| {
            let e = match strict {
                Ok(_) => return Err("strict dispatch succeeded with a file missing".to_owned()),
                Err(Error::Dispatch(e)) => e,
                Err(other) => return Err(format!("strict dispatch failed otherwise: {other}")),
            };
            ensure!(
                e.unreadable.len() == 1 && e.unreadable[0].uri == blob_uri,
                "the error names {:?}, expected only {blob}",
                e.unreadable.iter().map(|u| &u.uri).collect::<Vec<_>>()
            );
            let message = e.to_string();
            ensure!(
                message.contains(name) && !message.contains('\n'),
                "the error does not name {name:?} on one line: {message}"
            );
            Ok(format!("strict dispatch fails naming {name:?}"))
        })();
        self.record("strict-dispatch-names-missing-reference", outcome);

        let degraded = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Degrade, memo.clone())
            .await
            .step("dispatch with a missing file, degrading")?;
        let after_degraded = self.reads.snapshot();
        let refused_send = self
            .store
            .send(
                s,
                Outgoing {
                    attach: vec![blob_uri.clone()],
                    ..Outgoing::user("again")
                },
            )
            .await;
        let evicted_while_missing = !memo.contains(&blob);
        let outcome = self.degraded(sent, &degraded);
        self.record("degraded-dispatch-keeps-survivors", outcome);
        let outcome = self.no_replacement(&degraded, &decoys, refused_send.is_err());
        self.record("no-replacement-search", outcome);

        for decoy in &decoys {
            setup(std::fs::remove_file(decoy), "remove a decoy file")?;
        }
        setup(std::fs::rename(&aside, &real), "put a file back")?;
        let before_again = self.reads.snapshot();
        let again = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Degrade, memo.clone())
            .await
            .step("dispatch once the file is back")?;
        let after_again = self.reads.snapshot();
        let outcome = (|| {
            ensure!(
                evicted_while_missing,
                "the memo kept an entry for the unreadable {blob}"
            );
            let missing_reads = delta(&before, &after_degraded, &blob);
            ensure!(
                missing_reads == 2,
                "the missing file was read {missing_reads} times by two dispatches, expected 2"
            );
            ensure!(
                delta(&before_again, &after_again, &blob) == 1,
                "the file was not read again once it was back"
            );
            let others: BTreeSet<String> = sent
                .normal
                .refs
                .iter()
                .map(|r| r.uri.to_string())
                .filter(|u| *u != blob)
                .collect();
            for uri in &others {
                let n = delta(&before, &after_again, uri);
                ensure!(
                    n == 1,
                    "{uri} was read {n} times by three dispatches on one memo"
                );
            }
            ensure!(
                memo.contains(&blob),
                "the successful re-read was not memoized"
            );
            let block = again
                .blocks
                .iter()
                .filter_map(attached)
                .find(|a| a.uri == blob)
                .ok_or("the file is back but its block is not")?;
            ensure!(
                block.bytes()? == BLOB_BYTES,
                "the re-read block holds other bytes"
            );
            ensure!(
                again.blocks.iter().filter_map(attached).count() == sent.normal.refs.len(),
                "the dispatch after the file came back still drops blocks"
            );
            Ok(
                "a failed read is not memoized; the next dispatch on the same memo reads again"
                    .into(),
            )
        })();
        self.record("failed-read-is-evicted", outcome);
        Ok(())
    }

    fn degraded(&self, sent: &Sent, degraded: &Dispatched) -> Outcome {
        let blob = &self.file(BLOB).uri;
        let blocks: Vec<Attached<'_>> = degraded.blocks.iter().filter_map(attached).collect();
        ensure!(
            blocks.iter().all(|a| a.uri != *blob),
            "the unreadable reference still has a block"
        );
        ensure!(
            blocks.len() == sent.normal.refs.len() - 1,
            "{} attachment blocks survived of {} readable references",
            blocks.len(),
            sent.normal.refs.len() - 1
        );
        for a in &blocks {
            let file = self.by_uri(a.uri).ok_or("a block names an unknown URI")?;
            ensure!(
                a.bytes()? == file.spec.bytes,
                "the surviving block for {:?} lost its content",
                file.spec.name
            );
            let context = a.context().ok_or_else(|| {
                format!(
                    "the surviving block for {:?} lost its context",
                    file.spec.name
                )
            })?;
            parse_context(context)?;
        }
        let texts: Vec<&str> = degraded.blocks.iter().filter_map(text_of).collect();
        let notices: Vec<&&str> = texts.iter().filter(|t| **t != QUESTION).collect();
        ensure!(
            notices.len() == 1,
            "{} notices in the degraded dispatch, expected 1",
            notices.len()
        );
        let notice = notices[0];
        ensure!(
            notice.contains(UPLOADS[BLOB].name),
            "the notice does not name {:?}: {notice:?}",
            UPLOADS[BLOB].name
        );
        if let Some(needle) = self
            .path_needles()
            .iter()
            .find(|n| notice.contains(n.as_str()))
        {
            return Err(format!("the notice holds the path {needle:?}"));
        }
        ensure!(
            notice.chars().count() <= 300,
            "the notice is {} characters long",
            notice.chars().count()
        );
        Ok(format!(
            "{} blocks kept with content and context, one short notice",
            blocks.len()
        ))
    }

    fn no_replacement(
        &self,
        degraded: &Dispatched,
        decoys: &[PathBuf],
        send_refused: bool,
    ) -> Outcome {
        ensure!(
            send_refused,
            "send accepted the missing file while look-alikes existed"
        );
        for a in degraded.blocks.iter().filter_map(attached) {
            ensure!(
                a.bytes()? != BLOB_BYTES,
                "a block carries the missing file's bytes, read from a look-alike"
            );
            if let Some(context) = a.context() {
                let line = parse_context(context)?;
                for decoy in decoys {
                    ensure!(
                        Path::new(&line.path) != decoy,
                        "a context points at the look-alike {decoy:?}"
                    );
                }
            }
        }
        Ok(format!(
            "{} look-alikes in another session and under other names were not used",
            decoys.len()
        ))
    }

    /// What is stored and shown: titles, display text, references and the event log.
    async fn persisted(&mut self, sent: &Sent) -> Result<(), Failure> {
        let sessions = self.store.list_sessions().await.step("list sessions")?;
        let mut texts = Vec::new();
        for session in &sessions {
            let messages = self
                .store
                .messages(session.id)
                .await
                .step("list messages")?;
            let events = self.store.events(session.id).await.step("list events")?;
            texts.push(serde_json::to_string(&messages).unwrap_or_default());
            texts.push(serde_json::to_string(&events).unwrap_or_default());
        }
        texts.push(serde_json::to_string(&sessions).unwrap_or_default());
        let outcome = (|| {
            let ours = sessions
                .iter()
                .find(|s| s.id == self.session)
                .ok_or("the probe's session is not listed")?;
            let title = ours.title.as_deref().ok_or("the session got no title")?;
            ensure!(
                QUESTION.starts_with(title.trim_end_matches('…')),
                "the title {title:?} is not from the question"
            );
            ensure!(
                sent.normal.display_text == QUESTION && sent.mid_turn.display_text == MID_TURN,
                "the display text was changed when stored"
            );
            ensure!(
                texts.iter().all(|t| !t.is_empty()),
                "a record did not serialize"
            );
            let needles = self.path_needles();
            for text in &texts {
                if let Some(needle) = needles.iter().find(|n| text.contains(n.as_str())) {
                    return Err(format!("a stored record contains the path {needle:?}"));
                }
            }
            Ok(format!(
                "{} sessions with their titles, messages, references and events hold no path",
                sessions.len()
            ))
        })();
        self.record("no-path-in-display-title-references", outcome);
        let report = self.store.verify().await.step("verify the database")?;
        let outcome = if report.ok() {
            Ok(format!(
                "{} sessions, {} messages, {} events agree",
                report.sessions, report.messages, report.events
            ))
        } else {
            Err(report.problems.join("; "))
        };
        self.record("event-log-matches-tables", outcome);
        Ok(())
    }

    /// Moves both roots and restores through a store that knows only the new ones.
    async fn moved_roots(&mut self) -> Result<(), Failure> {
        let moved = self.tmp.join("moved");
        setup(
            std::fs::create_dir_all(&moved),
            "make a folder for the moved roots",
        )?;
        let roots = Roots {
            configured: moved.join("attachments"),
            legacy: vec![moved.join("legacy")],
        };
        setup(
            std::fs::rename(self.configured(), &roots.configured),
            "move the configured root",
        )?;
        setup(
            std::fs::rename(self.legacy(), &roots.legacy[0]),
            "move the legacy root",
        )?;
        let config = Config {
            roots: roots.clone(),
            ..self.config.clone()
        };
        let store = Store::open(config)
            .await
            .step("open a store on moved roots")?;
        let restored = store
            .restore(self.session)
            .await
            .step("restore after moving the roots")?;
        let outcome = (|| {
            let mut n = 0;
            for d in user_messages(&restored.messages) {
                let blocks: Vec<Attached<'_>> = d.blocks.iter().filter_map(attached).collect();
                ensure!(
                    blocks.len() == d.message.refs.len(),
                    "message {} restored {} of {} attachments after the move",
                    d.message.id,
                    blocks.len(),
                    d.message.refs.len()
                );
                for a in blocks {
                    let file = self.by_uri(a.uri).ok_or("a block names an unknown URI")?;
                    let line = parse_context(a.context().ok_or("a block lost its context")?)?;
                    let root = match file.spec.place {
                        Place::Configured => &roots.configured,
                        Place::Legacy => &roots.legacy[0],
                    };
                    let expected = root.join(self.session.to_string()).join(file.spec.name);
                    ensure!(
                        Path::new(&line.path) == expected,
                        "after the move {:?} was given as {:?}, expected {expected:?}",
                        file.spec.name,
                        line.path
                    );
                    let on_disk = std::fs::read(&expected).map_err(|e| e.to_string())?;
                    ensure!(
                        on_disk == file.spec.bytes && a.bytes()? == file.spec.bytes,
                        "after the move {:?} does not read back its bytes",
                        file.spec.name
                    );
                    n += 1;
                }
            }
            ensure!(n > 0, "nothing was restored after the move");
            Ok(format!(
                "{n} attachments restored from the moved roots, paths in the new roots"
            ))
        })();
        self.record("restore-after-moving-roots", outcome);
        self.paths_seen.extend(
            restored
                .messages
                .iter()
                .flat_map(|d| d.blocks.iter().filter_map(attached))
                .filter_map(|a| parse_context(a.context()?).ok())
                .map(|line| line.path),
        );
        Ok(())
    }

    /// Reads the database behind the store's back, read-only, looking for paths.
    fn database(&mut self) {
        let needles = self.path_needles();
        let db = self.config.db_path.clone();
        let conn = rusqlite::Connection::open_with_flags(
            &db,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("cannot open {db:?} read-only: {e}"));
        let tables = conn.as_ref().map_err(Clone::clone).and_then(|c| {
            let mut stmt = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .map_err(|e| e.to_string())?;
            let names = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| e.to_string())?;
            Ok(names)
        });
        let outcome = match (&conn, &tables) {
            (Ok(c), Ok(tables)) => schema_has_no_path_column(c, tables),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        self.record("schema-has-no-path-column", outcome);
        let outcome = match (&conn, &tables) {
            (Ok(c), Ok(tables)) => db_text_has_no_path(c, tables, &needles),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        self.record("db-text-has-no-path", outcome);
        drop(conn);
        let outcome = db_file_has_no_path(&db, &needles);
        self.record("db-file-has-no-path", outcome);
    }
}

/// The blocks of the scenario's first delivery, to compare with the replay.
struct FirstDelivery {
    normal: Dispatched,
    image_only: Dispatched,
    drained: Vec<Dispatched>,
}

fn user_messages(messages: &[Dispatched]) -> impl Iterator<Item = &Dispatched> {
    messages.iter().filter(|d| d.message.role == Role::User)
}

/// What the probe reads from one attachment block, straight from the ACP types.
struct Attached<'a> {
    uri: &'a str,
    kind: Kind,
    mime: Option<&'a str>,
    /// Base64 for images and blobs, the text itself for text resources.
    payload: &'a str,
    meta: Option<&'a Meta>,
}

impl<'a> Attached<'a> {
    fn bytes(&self) -> Result<Vec<u8>, String> {
        match self.kind {
            Kind::Text => Ok(self.payload.as_bytes().to_vec()),
            Kind::Image | Kind::Blob => base64::engine::general_purpose::STANDARD
                .decode(self.payload)
                .map_err(|e| format!("the block for {} is not base64: {e}", self.uri)),
        }
    }

    fn context(&self) -> Option<&'a str> {
        self.meta?.get(DAEMON_ATTACHMENT_CONTEXT_META_KEY)?.as_str()
    }
}

fn attached(block: &ContentBlock) -> Option<Attached<'_>> {
    match block {
        ContentBlock::Image(image) => Some(Attached {
            uri: image.uri.as_deref().unwrap_or_default(),
            kind: Kind::Image,
            mime: Some(&image.mime_type),
            payload: &image.data,
            meta: image.meta.as_ref(),
        }),
        ContentBlock::Resource(resource) => match &resource.resource {
            EmbeddedResourceResource::TextResourceContents(t) => Some(Attached {
                uri: &t.uri,
                kind: Kind::Text,
                mime: t.mime_type.as_deref(),
                payload: &t.text,
                meta: resource.meta.as_ref(),
            }),
            EmbeddedResourceResource::BlobResourceContents(b) => Some(Attached {
                uri: &b.uri,
                kind: Kind::Blob,
                mime: b.mime_type.as_deref(),
                payload: &b.blob,
                meta: resource.meta.as_ref(),
            }),
            _ => None,
        },
        _ => None,
    }
}

fn text_of(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::Text(t) => Some(&t.text),
        _ => None,
    }
}

/// The JSON line of a context string, its five keys, and the line as written.
struct ContextLine {
    name: String,
    uri: String,
    mime: String,
    path: String,
    host: String,
    raw: String,
}

fn parse_context(context: &str) -> Result<ContextLine, String> {
    let objects: Vec<(&str, serde_json::Map<String, Value>)> = context
        .lines()
        .filter_map(|l| match serde_json::from_str::<Value>(l.trim()) {
            Ok(Value::Object(o)) => Some((l, o)),
            _ => None,
        })
        .collect();
    let [(raw, object)] = objects.as_slice() else {
        return Err(format!(
            "a context has {} JSON lines, expected exactly one",
            objects.len()
        ));
    };
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    ensure!(
        keys == ["host", "mimeType", "name", "path", "uri"],
        "a context's JSON line has keys {keys:?}"
    );
    let get = |key: &str| {
        object[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("the context's {key} is not a string"))
    };
    Ok(ContextLine {
        name: get("name")?,
        uri: get("uri")?,
        mime: get("mimeType")?,
        path: get("path")?,
        host: get("host")?,
        raw: (*raw).to_owned(),
    })
}

/// The context's lines other than its JSON line, lowercased.
fn instructions(context: &str) -> String {
    context
        .lines()
        .filter(|l| {
            !matches!(
                serde_json::from_str::<Value>(l.trim()),
                Ok(Value::Object(_))
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn says_unreachable(words: &str) -> bool {
    ["may not", "might not", "cannot", "can't", "not reach"]
        .iter()
        .any(|w| words.contains(w))
}

/// Control and invisible format characters: what a context must write as `\uXXXX`.
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0x00AD
                | 0x061C
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0xE0000..=0xE007F
        )
}

/// A detail on one line, with hidden characters made visible.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The URI the contract says a stored name gets, computed here independently: RFC 3986
/// unreserved characters kept, every other byte of the UTF-8 name as `%XX`.
fn expected_uri(session: SessionId, name: &str) -> String {
    let mut out = format!("attachment:///{session}/");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn one_block_per_reference(restored: &[Dispatched]) -> Outcome {
    let mut refs = 0;
    for d in user_messages(restored) {
        let m = &d.message;
        // Whitespace alone is no text, as `send` judges it, so it gets no block.
        let text = usize::from(!m.model_text().trim().is_empty());
        // An audio transcript rides in a text block of its own, after the text.
        let transcript = usize::from(
            m.transcript
                .as_deref()
                .is_some_and(|t| !t.trim().is_empty()),
        );
        ensure!(
            d.blocks.len() == text + transcript + m.refs.len(),
            "message {} has {} references and {} blocks",
            m.id,
            m.refs.len(),
            d.blocks.len()
        );
        if text == 1 {
            ensure!(
                text_of(&d.blocks[0]) == Some(m.model_text()),
                "message {} does not start with its text",
                m.id
            );
        }
        let uris: Vec<&str> = d
            .blocks
            .iter()
            .filter_map(|b| Some(attached(b)?.uri))
            .collect();
        let expected: Vec<String> = m.refs.iter().map(|r| r.uri.to_string()).collect();
        ensure!(
            uris == expected,
            "message {} has blocks for {uris:?}, references {expected:?}",
            m.id
        );
        refs += m.refs.len();
    }
    ensure!(refs > 0, "no reference was dispatched");
    Ok(format!("{refs} references gave {refs} blocks, in order"))
}

fn context_under_meta_key(restored: &[Dispatched]) -> Outcome {
    ensure!(
        DAEMON_ATTACHMENT_CONTEXT_META_KEY == "daemon/attachmentContext",
        "the meta key is {DAEMON_ATTACHMENT_CONTEXT_META_KEY:?}"
    );
    let mut n = 0;
    for block in restored.iter().flat_map(|d| &d.blocks) {
        let Some(a) = attached(block) else { continue };
        let meta = a
            .meta
            .ok_or_else(|| format!("the block for {} has no _meta", a.uri))?;
        let keys: Vec<&String> = meta.keys().collect();
        ensure!(
            keys == [DAEMON_ATTACHMENT_CONTEXT_META_KEY],
            "the block for {} has _meta keys {keys:?}",
            a.uri
        );
        let json = serde_json::to_value(block).map_err(|e| e.to_string())?;
        ensure!(
            json["_meta"][DAEMON_ATTACHMENT_CONTEXT_META_KEY].is_string(),
            "the block for {} does not serialize its context under _meta",
            a.uri
        );
        n += 1;
    }
    ensure!(n > 0, "no attachment block was dispatched");
    Ok(format!(
        "{n} attachment blocks carry their context under _meta.\"{DAEMON_ATTACHMENT_CONTEXT_META_KEY}\""
    ))
}

fn raw_text_has_no_meta(restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for block in restored.iter().flat_map(|d| &d.blocks) {
        let ContentBlock::Text(text) = block else {
            continue;
        };
        ensure!(
            text.meta.is_none(),
            "the text block {:?} has _meta",
            text.text
        );
        let json = serde_json::to_value(block).map_err(|e| e.to_string())?;
        ensure!(
            json.get("_meta").is_none(),
            "the text block {:?} serializes a _meta",
            text.text
        );
        n += 1;
    }
    ensure!(n > 0, "no text block was dispatched");
    Ok(format!(
        "{n} text blocks without a reference carry no _meta"
    ))
}

/// The Chat Completions request the contract describes, built here from the blocks
/// without the library's conversion.
fn expected_chat(conversation: &[(Role, Vec<ContentBlock>)]) -> Result<Value, String> {
    let mut messages = Vec::new();
    for (role, blocks) in conversation {
        if *role != Role::User {
            let text: String = blocks.iter().filter_map(text_of).collect();
            messages.push(json!({ "role": role.as_str(), "content": text }));
            continue;
        }
        let mut parts = Vec::new();
        for block in blocks {
            if let Some(text) = text_of(block) {
                parts.push(json!({ "type": "text", "text": text }));
                continue;
            }
            let a = attached(block).ok_or("a block is neither text nor an attachment")?;
            let context = a
                .context()
                .ok_or_else(|| format!("the block for {} has no context", a.uri))?;
            parts.push(json!({ "type": "text", "text": context }));
            let mime = a.mime.unwrap_or("application/octet-stream");
            parts.push(match a.kind {
                Kind::Image => json!({
                    "type": "image_url",
                    "image_url": { "url": format!("data:{mime};base64,{}", a.payload) }
                }),
                Kind::Text => json!({ "type": "text", "text": a.payload }),
                Kind::Blob => json!({
                    "type": "file",
                    "file": {
                        "filename": parse_context(context)?.name,
                        "file_data": format!("data:{mime};base64,{}", a.payload)
                    }
                }),
            });
        }
        messages.push(json!({ "role": "user", "content": parts }));
    }
    Ok(json!({ "model": MODEL, "messages": messages }))
}

/// The Responses request with the same parts as an expected Chat Completions request.
fn expected_responses(chat: &Value) -> Value {
    let input: Vec<Value> = chat["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let content = match m["content"].as_array() {
                None => m["content"].clone(),
                Some(parts) => Value::Array(
                    parts
                        .iter()
                        .map(|p| match p["type"].as_str() {
                            Some("image_url") => json!({
                                "type": "input_image",
                                "image_url": p["image_url"]["url"],
                                "detail": "auto"
                            }),
                            Some("file") => json!({
                                "type": "input_file",
                                "filename": p["file"]["filename"],
                                "file_data": p["file"]["file_data"]
                            }),
                            _ => json!({ "type": "input_text", "text": p["text"] }),
                        })
                        .collect(),
                ),
            };
            json!({ "type": "message", "role": m["role"], "content": content })
        })
        .collect();
    json!({ "model": MODEL, "input": input })
}

/// Compares a request with its expected JSON, naming the first message that differs.
fn compare_request<T: Serialize>(actual: &T, expected: &Value, list: &str) -> Result<(), String> {
    let actual = serde_json::to_value(actual).map_err(|e| e.to_string())?;
    if actual == *expected {
        return Ok(());
    }
    let empty = Vec::new();
    let a = actual[list].as_array().unwrap_or(&empty);
    let e = expected[list].as_array().unwrap_or(&empty);
    if a.len() != e.len() {
        return Err(format!("{} {list}, expected {}", a.len(), e.len()));
    }
    let i = a.iter().zip(e).position(|(x, y)| x != y).unwrap_or(0);
    Err(format!(
        "{list}[{i}] differs: got {}, expected {}",
        shorten(&a.get(i).map(Value::to_string).unwrap_or_default()),
        shorten(&e.get(i).map(Value::to_string).unwrap_or_default())
    ))
}

fn shorten(s: &str) -> String {
    const MAX: usize = 400;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

fn count_contexts(conversation: &[(Role, Vec<ContentBlock>)]) -> usize {
    conversation
        .iter()
        .flat_map(|(_, blocks)| blocks)
        .filter(|b| attached(b).is_some_and(|a| a.context().is_some()))
        .count()
}

fn round_trips(
    chat: &ChatRequest,
    responses: &ResponsesRequest,
    conversation: &[(Role, Vec<ContentBlock>)],
) -> Outcome {
    let text = serde_json::to_string(chat).map_err(|e| e.to_string())?;
    let back: ChatRequest = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    ensure!(back == *chat, "the chat request changes through JSON");
    let text = serde_json::to_string(responses).map_err(|e| e.to_string())?;
    let back: ResponsesRequest = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    ensure!(
        back == *responses,
        "the responses request changes through JSON"
    );
    for (_, blocks) in conversation {
        let text = serde_json::to_string(blocks).map_err(|e| e.to_string())?;
        let back: Vec<ContentBlock> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        ensure!(back == *blocks, "ACP blocks change through JSON");
    }
    Ok("chat, responses and ACP blocks survive JSON unchanged".into())
}

/// The bytes an image, file or text part of a chat request carries.
fn part_bytes(part: &ChatPart) -> Result<Vec<u8>, String> {
    let from_data_url = |url: &str| {
        let (_, b64) = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .ok_or_else(|| format!("not a base64 data URL: {}", shorten(url)))?;
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| e.to_string())
    };
    match part {
        ChatPart::Text { text } => Ok(text.as_bytes().to_vec()),
        ChatPart::ImageUrl { image_url } => from_data_url(&image_url.url),
        ChatPart::File { file } => from_data_url(&file.file_data),
    }
}

fn schema_has_no_path_column(conn: &rusqlite::Connection, tables: &[String]) -> Outcome {
    let mut columns = 0;
    for table in tables {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT name FROM pragma_table_info({})",
                quote_literal(table)
            ))
            .map_err(|e| e.to_string())?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| e.to_string())?;
        for name in &names {
            let lower = name.to_lowercase();
            ensure!(
                !["path", "root", "dir", "folder"]
                    .iter()
                    .any(|w| lower.contains(w)),
                "table {table} has a column {name:?}"
            );
        }
        columns += names.len();
    }
    ensure!(columns > 0, "the database has no columns");
    Ok(format!(
        "{} tables, {columns} columns, none for a path, root or directory",
        tables.len()
    ))
}

fn db_text_has_no_path(
    conn: &rusqlite::Connection,
    tables: &[String],
    needles: &[String],
) -> Outcome {
    let mut values = 0;
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {}", quote_identifier(table)))
            .map_err(|e| e.to_string())?;
        let width = stmt.column_count();
        let mut rows = stmt.query([]).map_err(|e| e.to_string())?;
        while let Some(row) = rows.next().map_err(|e| e.to_string())? {
            for i in 0..width {
                let bytes = match row.get_ref(i).map_err(|e| e.to_string())? {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
                    _ => continue,
                };
                if let Some(needle) = needles.iter().find(|n| contains(bytes, n.as_bytes())) {
                    return Err(format!("table {table} holds {needle:?}"));
                }
                values += 1;
            }
        }
    }
    ensure!(values > 0, "the database holds no text");
    Ok(format!(
        "{values} text values in {} tables hold no path",
        tables.len()
    ))
}

fn db_file_has_no_path(db: &Path, needles: &[String]) -> Outcome {
    let mut files = 0;
    let mut bytes_scanned = 0;
    for suffix in ["", "-wal", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => continue,
            Err(e) => return Err(format!("cannot read {path:?}: {e}")),
        };
        if let Some(needle) = needles.iter().find(|n| contains(&bytes, n.as_bytes())) {
            return Err(format!("{path:?} holds {needle:?}"));
        }
        files += 1;
        bytes_scanned += bytes.len();
    }
    Ok(format!(
        "{files} database files, {bytes_scanned} bytes, hold no path"
    ))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_literal(name: &str) -> String {
    format!("'{}'", name.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_uris_follow_the_contract() {
        let s: SessionId = "01890a5d-ac96-774b-bcce-b302099a8057".parse().unwrap();
        assert_eq!(
            expected_uri(s, "café menu (1).png"),
            format!("attachment:///{s}/caf%C3%A9%20menu%20%281%29.png")
        );
        assert_eq!(
            expected_uri(s, "a-b_c.~d"),
            format!("attachment:///{s}/a-b_c.~d")
        );
    }

    #[test]
    fn contexts_need_exactly_one_json_line_with_the_five_keys() {
        let good = "Attachment context.\nUse it.\n{\"name\":\"a\",\"uri\":\"u\",\"mimeType\":\"m\",\"path\":\"/p\",\"host\":\"h\"}";
        assert_eq!(parse_context(good).unwrap().path, "/p");
        let twice = format!("{good}\n{}", good.lines().last().unwrap());
        assert!(parse_context(&twice).is_err());
        let extra = "{\"name\":\"a\",\"uri\":\"u\",\"mimeType\":\"m\",\"path\":\"/p\",\"host\":\"h\",\"size\":1}";
        assert!(parse_context(extra).is_err());
        assert!(parse_context("no json here").is_err());
    }

    #[test]
    fn details_stay_on_one_line() {
        let check = Check::new("x", Err("a\nb\u{202e}c".into()));
        assert_eq!(check.detail, "a\\nb\\u{202e}c");
        assert!(!check.ok);
    }

    #[test]
    fn the_report_counts_and_prints_each_check() {
        let report = ProbeReport::new(vec![
            Check::new("good", Ok("fine".into())),
            Check::new("bad", Err("broken".into())),
        ]);
        assert_eq!(
            (report.passed(), report.failed(), report.ok()),
            (1, 1, false)
        );
        assert_eq!(
            report.to_string(),
            "ok   good\nFAIL bad: broken\nprobe: 1 passed, 1 failed"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["passed"], 1);
        assert_eq!(json["checks"][1]["ok"], false);
        assert!(!ProbeReport::new(vec![]).ok());
    }

    #[test]
    fn the_png_is_a_png() {
        assert_eq!(crate::attachments::mime_for("x.bin", PNG), "image/png");
        assert_eq!(
            crate::attachments::mime_for("x.bin", BLOB_BYTES),
            "application/octet-stream"
        );
    }

    fn user_message(refs: &[&AttachmentUri]) -> Message {
        Message {
            id: crate::ids::MessageId::new(),
            session_id: SessionId::new(),
            seq: 1,
            role: Role::User,
            display_text: "q".into(),
            model_text: None,
            transcript: None,
            state: crate::model::Delivery::Delivered,
            created_at: String::new(),
            refs: refs
                .iter()
                .enumerate()
                .map(|(i, uri)| crate::model::Reference {
                    ordinal: i as u32,
                    uri: (*uri).clone(),
                    stored_name: "a.txt".into(),
                    mime_type: "text/plain".into(),
                    size: 1,
                })
                .collect(),
        }
    }

    fn text_resource(uri: &str, meta: Option<Meta>) -> ContentBlock {
        let mut resource = agent_client_protocol_schema::v1::EmbeddedResource::new(
            EmbeddedResourceResource::TextResourceContents(
                agent_client_protocol_schema::v1::TextResourceContents::new("x", uri),
            ),
        );
        resource.meta = meta;
        ContentBlock::Resource(resource)
    }

    fn context_meta() -> Meta {
        let mut meta = Meta::new();
        meta.insert(
            DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
            Value::String("context".into()),
        );
        meta
    }

    #[test]
    fn block_checks_fail_on_broken_dispatches() {
        let question = ContentBlock::Text(agent_client_protocol_schema::v1::TextContent::new("q"));
        let u1 = AttachmentUri::new(SessionId::new(), "a.txt");
        let good = Dispatched {
            message: user_message(&[&u1, &u1]),
            blocks: vec![
                question.clone(),
                text_resource(&u1.to_string(), Some(context_meta())),
                text_resource(&u1.to_string(), Some(context_meta())),
            ],
        };
        assert!(one_block_per_reference(std::slice::from_ref(&good)).is_ok());
        assert!(context_under_meta_key(std::slice::from_ref(&good)).is_ok());
        assert!(raw_text_has_no_meta(std::slice::from_ref(&good)).is_ok());

        let mut merged = good.clone();
        merged.blocks.pop();
        assert!(one_block_per_reference(&[merged]).is_err());

        let mut bare = good.clone();
        bare.blocks[1] = text_resource(&u1.to_string(), None);
        assert!(context_under_meta_key(&[bare]).is_err());

        let mut tagged = good;
        tagged.blocks[0] = ContentBlock::Text(
            agent_client_protocol_schema::v1::TextContent::new("q").meta(context_meta()),
        );
        assert!(raw_text_has_no_meta(&[tagged]).is_err());
    }

    #[test]
    fn database_checks_find_a_stored_path() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE refs (uri TEXT, note TEXT);
             INSERT INTO refs VALUES ('attachment:///s/a.txt', 'fine');",
        )
        .unwrap();
        let tables = vec!["refs".to_owned()];
        let needles = vec!["/tmp/sessionstore-probe-x".to_owned()];
        assert!(schema_has_no_path_column(&conn, &tables).is_ok());
        assert!(db_text_has_no_path(&conn, &tables, &needles).is_ok());
        conn.execute_batch(
            "INSERT INTO refs VALUES ('u', 'read /tmp/sessionstore-probe-x/attachments/a.txt');
             CREATE TABLE cache (file_path TEXT);",
        )
        .unwrap();
        assert!(db_text_has_no_path(&conn, &tables, &needles).is_err());
        let tables = vec!["refs".to_owned(), "cache".to_owned()];
        assert!(schema_has_no_path_column(&conn, &tables).is_err());

        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        std::fs::write(&db, b"SQLite format 3\0 nothing here").unwrap();
        assert!(db_file_has_no_path(&db, &needles).is_ok());
        std::fs::write(
            dir.path().join("x.db-wal"),
            b"..../tmp/sessionstore-probe-x/a..",
        )
        .unwrap();
        assert!(db_file_has_no_path(&db, &needles).is_err());
    }
}
