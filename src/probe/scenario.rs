//! The probe's scenario: one isolated Store → Session → OpenAI request run in a
//! temporary directory (or a scratch PostgreSQL schema it drops), every file made here;
//! what came back goes to the checks with what it set up (`known`). It also does a
//! test's file work (a legacy root, a missing file, symlinks, moved roots); the database
//! is read behind the store's back only through `db`'s audit.
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
//! `schema-has-no-path-column` (1); `db-text-has-no-path` (1); `db-file-has-no-path` (1,
//! SQLite only); `db-file-is-encrypted` (with the `encryption` feature, SQLite only: the
//! probe's database is encrypted with a key of its own, and the texts it sent are read
//! back through the decrypting connection but are nowhere in the files' bytes);
//! `recorded-turn-replays-in-order` (9: a recorded agent turn replays among the user
//! messages, its text verbatim, their attachments from a live read).

use crate::store::Drain;
use crate::store::whole;
use std::collections::BTreeSet;
use std::path::Path;

use agent_client_protocol_schema::v1::{ContentBlock, SessionUpdate};

use super::checks::{self as check, Eviction};
use super::known::{
    AGENT_TEXT, BIDI, BLOB, BLOB_BYTES, IMAGE, Known, LEGACY, MID_TURN, MODEL, NOTES, NOTES_AGAIN,
    Place, QUESTION, REPLY, RecordedTurn, Sent, Stored, TRANSCRIPT, TURN_FOLLOW_UP, TURN_NOTE,
    TURN_QUESTION, UPLOADS,
};
use super::model_bound as bound;
use super::oracle::{self, Kind, ReadCounter, expected_uri};
use super::report::{Check, Outcome, ProbeError, ProbeReport};
use crate::attachments::{AttachmentUri, Roots};
use crate::config::{self, Config};
use crate::dispatch::{DEFAULT_MEMO_BUDGET, Memo, Mode};
use crate::format::{Format, StreamWriter};
use crate::ids::SessionId;
use crate::model::{Delivery, NewSession, Role, ToolsHost};
use crate::openai;
use crate::store::{Dispatched, Outgoing, Store, Upload};

/// The blocks of the scenario's first delivery, to compare with the replay.
struct FirstDelivery {
    normal: Dispatched,
    image_only: Dispatched,
    drained: Vec<Dispatched>,
}

/// Runs the probe in a fresh temporary directory, removed before this returns.
pub async fn run_probe() -> Result<ProbeReport, ProbeError> {
    run(None).await
}

/// Runs the probe with its database in a fresh schema (`sessionstore_probe_<uuid>`) on
/// `server`, dropped before this returns whatever the outcome; the server must let it
/// create a schema.
#[cfg(feature = "postgres")]
pub async fn run_probe_on_postgres(server: &str) -> Result<ProbeReport, ProbeError> {
    in_schema(server, |db| run(Some(db))).await
}

/// Runs `body` on the store URL of a new schema on `server`, then drops the schema:
/// after `body` returns, or, through `ScratchSchema`'s drop, when it panics.
#[cfg(feature = "postgres")]
async fn in_schema<F, Fut>(server: &str, body: F) -> Result<ProbeReport, ProbeError>
where
    F: FnOnce(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<ProbeReport, ProbeError>>,
{
    let schema = crate::db::postgres::ScratchSchema::create(server, "sessionstore_probe")
        .map_err(server_failure("create its schema on the server"))?;
    let name = schema.name().to_owned();
    let result = body(std::path::PathBuf::from(schema.url())).await;
    let dropped = schema.remove().map_err(server_failure(&format!(
        "remove its schema {name} from the server"
    )));
    let report = result?;
    dropped?;
    Ok(report)
}

/// A server's error and each cause it does not already spell out, on one line.
#[cfg(feature = "postgres")]
fn server_failure(action: &str) -> impl FnOnce(crate::error::Error) -> ProbeError + '_ {
    move |e| {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            let said = c.to_string();
            if !text.contains(&said) {
                text = format!("{text}: {said}");
            }
            cause = c.source();
        }
        ProbeError {
            action: action.to_owned(),
            error: std::io::Error::other(text),
        }
    }
}

/// The probe in a fresh temporary directory, removed before this returns, with its
/// database there or at `db` (a PostgreSQL store URL).
async fn run(db: Option<std::path::PathBuf>) -> Result<ProbeReport, ProbeError> {
    let tmp = tempfile::Builder::new()
        .prefix("sessionstore-probe-")
        .tempdir()
        .map_err(|error| ProbeError {
            action: "create its temporary directory".to_owned(),
            error,
        })?;
    let db = db.unwrap_or_else(|| tmp.path().join("db").join("sessions.db"));
    let mut checks = Vec::new();
    match scenario(tmp.path(), db, &mut checks).await {
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

/// Why the scenario stopped: its own IO failed, or a step later checks need returned an
/// error (a failed `scenario` check).
enum Failure {
    Setup(ProbeError),
    Step(String),
}

trait StepResult<T> {
    fn step(self, what: &str) -> Result<T, Failure>;
}

impl<T> StepResult<T> for crate::error::Result<T> {
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

struct Probe {
    tmp: std::path::PathBuf,
    config: Config,
    known: Known,
    reads: ReadCounter,
    store: Store,
    checks: Vec<Check>,
}

async fn scenario(
    tmp: &Path,
    db: std::path::PathBuf,
    checks: &mut Vec<Check>,
) -> Result<(), Failure> {
    let mut p = Probe::start(tmp, db).await?;
    let result = p.run().await;
    checks.append(&mut p.checks);
    result
}

impl Probe {
    fn record(&mut self, name: &str, outcome: Outcome) {
        self.checks.push(Check::new(name, outcome));
    }

    /// The session's (messages, events), to see that a refusal stored nothing.
    async fn counts(&self) -> Result<(usize, usize), Failure> {
        let s = self.known.session;
        let messages = whole(|q| self.store.messages(s, None, q))
            .await
            .step("list messages")?
            .len();
        let events = whole(|q| self.store.events(s, q))
            .await
            .step("list events")?
            .len();
        Ok((messages, events))
    }

    async fn start(tmp: &Path, db: std::path::PathBuf) -> Result<Probe, Failure> {
        let database = config::Database::from(db);
        // With the feature, an SQLite probe runs on a database encrypted with a key of
        // its own, which lives only as long as the run.
        let key = match &database {
            config::Database::Sqlite(_) if cfg!(feature = "encryption") => Some(setup(
                config::DatabaseKey::generate(),
                "make a key for its database",
            )?),
            _ => None,
        };
        let config = Config {
            database,
            roots: Roots {
                configured: tmp.join("attachments"),
                legacy: vec![tmp.join("legacy")],
            },
            host: config::host_name(),
            sharing: config::Sharing::Owner,
            key,
            redaction: Default::default(),
        };
        let (store, reads) = ReadCounter::open(config.clone())
            .await
            .step("open the probe's store")?;
        let session = store
            .create_session(NewSession::default())
            .await
            .step("create a session")?
            .id;
        let mut needles = BTreeSet::from([tmp.to_string_lossy().into_owned()]);
        if let Ok(real) = std::fs::canonicalize(tmp) {
            needles.insert(real.to_string_lossy().into_owned());
        }
        let mut known = Known {
            session,
            host: config.host.clone(),
            configured: config.roots.configured.clone(),
            legacy: config.roots.legacy[0].clone(),
            files: Vec::new(),
            needles,
        };
        let mut stored_names = Vec::new();
        for spec in &UPLOADS {
            let uri = match spec.place {
                Place::Configured => {
                    let stored = store
                        .attach(session, vec![Upload::new(spec.upload, spec.bytes)])
                        .await
                        .step("store an attachment")?
                        .remove(0);
                    stored_names.push((spec, stored.name));
                    stored.uri
                }
                Place::Legacy => {
                    let folder = known.folder(&known.legacy);
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
            known.files.push(Stored {
                spec,
                uri: uri.to_string(),
                parsed: uri,
            });
        }
        let outcome = check::stored_names(&known, &stored_names);
        let mut probe = Probe {
            tmp: tmp.to_owned(),
            config,
            known,
            reads,
            store,
            checks: Vec::new(),
        };
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
        // Recorded before the audit, so the audit covers what `record` wrote; its
        // check is reported after the others.
        let turn = self.recorded_turn().await?;
        self.database();
        self.record("recorded-turn-replays-in-order", turn);
        Ok(())
    }

    async fn send_all(&self) -> Result<Sent, Failure> {
        let uri = |i: usize| self.known.file(i).parsed.clone();
        let send = |what: &'static str, out: Outgoing| async move {
            self.store.send(self.known.session, out).await.step(what)
        };
        Ok(Sent {
            normal: send(
                "send the normal message",
                Outgoing {
                    attach: [IMAGE, NOTES, NOTES_AGAIN, BLOB, LEGACY, BIDI, NOTES]
                        .map(uri)
                        .to_vec(),
                    ..Outgoing::user(QUESTION)
                },
            )
            .await?,
            reply: send(
                "send the assistant reply",
                Outgoing {
                    role: Role::Assistant,
                    ..Outgoing::user(REPLY)
                },
            )
            .await?,
            image_only: send(
                "send the image-only message",
                Outgoing {
                    attach: vec![uri(IMAGE)],
                    ..Outgoing::user("")
                },
            )
            .await?,
            mid_turn: send(
                "queue the mid-turn message",
                Outgoing {
                    attach: vec![uri(NOTES_AGAIN)],
                    transcript: Some(TRANSCRIPT.to_owned()),
                    mid_turn: true,
                    ..Outgoing::user(MID_TURN)
                },
            )
            .await?,
        })
    }

    /// One turn: the normal message, the latest message by default, then the drain,
    /// all through one memo as the daemon does.
    async fn first_delivery(&mut self, sent: &Sent) -> Result<FirstDelivery, Failure> {
        let memo = Memo::new();
        let s = self.known.session;
        let before = self.reads.snapshot();
        let normal = self
            .store
            .dispatch(s, Some(sent.normal.id), Mode::Strict, memo.clone())
            .await
            .map(Dispatched::from)
            .step("dispatch the normal message")?;
        let after = self.reads.snapshot();
        let outcome =
            check::duplicates_share_one_read(&self.known, &normal, &before, &after, memo.len());
        self.record("duplicates-share-one-read", outcome);

        let latest = self
            .store
            .dispatch(s, None, Mode::Strict, memo.clone())
            .await
            .map(Dispatched::from)
            .step("dispatch the latest message")?;
        let outcome = check::image_only(&self.known, sent, &latest);
        self.record("image-only-message", outcome);

        let queued_direct = self
            .store
            .dispatch(s, Some(sent.mid_turn.id), Mode::Strict, memo.clone())
            .await
            .map(Dispatched::from);
        let drained = self
            .store
            .drain(s, Mode::Strict, memo.clone(), Drain::Commit)
            .await
            .step("drain the mid-turn queue")?
            .into_iter()
            .map(Dispatched::from)
            .collect::<Vec<_>>();
        let after_drain = self.reads.snapshot();
        let drained_again = self
            .store
            .drain(s, Mode::Strict, memo.clone(), Drain::Commit)
            .await
            .step("drain an empty queue")?
            .into_iter()
            .map(Dispatched::from)
            .collect::<Vec<_>>();
        let still_queued = whole(|q| self.store.messages(s, Some(Delivery::Queued), q))
            .await
            .step("list queued messages")?;
        let outcome = check::queued_by_drain(
            &self.known,
            sent,
            &latest,
            queued_direct.is_err(),
            &drained,
            drained_again.len(),
            still_queued.len(),
        );
        self.record("queued-reached-only-by-drain", outcome);
        let outcome = check::turn_memo_shared(&after, &after_drain);
        self.record("turn-memo-shared-by-drain", outcome);
        Ok(FirstDelivery {
            normal,
            image_only: latest,
            drained,
        })
    }

    async fn refusals(&mut self) -> Result<(), Failure> {
        let s = self.known.session;
        let before = self.counts().await?;
        let image_path = self
            .known
            .folder(&self.known.configured)
            .join(UPLOADS[IMAGE].name);
        let unsafe_uris = [
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
        let outcomes = self.try_sends(&unsafe_uris).await;
        let after = self.counts().await?;
        let outcome = check::all_refused(&outcomes, (before, after));
        self.record("send-refuses-unsafe-uris", outcome);

        // Symlinks inside the session folder are refused wherever they point.
        let folder = self.known.folder(&self.known.configured);
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
        let links = [expected_uri(s, "escape.txt"), expected_uri(s, "alias.png")];
        let outcomes = self.try_sends(&links).await;
        let after_links = self.counts().await?;
        let outcome = check::all_refused(&outcomes, (after, after_links));
        self.record("symlinks-refused", outcome);
        setup(std::fs::remove_file(&escape), "remove a symlink")?;
        setup(std::fs::remove_file(&alias), "remove a symlink")?;
        Ok(())
    }

    /// Sends each URI alone: `None` when the store took it, else the refusal. A URI
    /// that does not parse is refused where its text comes in, before any store.
    async fn try_sends(&self, uris: &[String]) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        for uri in uris {
            let refusal = match AttachmentUri::parse(uri) {
                Err(e) => Some(e.to_string()),
                Ok(parsed) => {
                    let send = Outgoing {
                        attach: vec![parsed],
                        ..Outgoing::user("look at this")
                    };
                    let sent = self.store.send(self.known.session, send).await;
                    sent.err().map(|e| e.to_string())
                }
            };
            out.push((uri.clone(), refusal));
        }
        out
    }

    /// A session whose tools run over ssh gets the "may not reach it" wording.
    async fn tools_host_wording(&mut self, first: &FirstDelivery) -> Result<(), Failure> {
        let ssh = self
            .store
            .create_session(NewSession {
                title: Some("probe over ssh".to_owned()),
                tools_host: ToolsHost::Ssh,
                ..NewSession::default()
            })
            .await
            .step("create an ssh session")?
            .id;
        let note = self
            .store
            .attach(ssh, vec![Upload::new("ssh note.txt", b"remote tools\n")])
            .await
            .step("store an attachment in the ssh session")?
            .remove(0);
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
            .map(Dispatched::from)
            .step("dispatch in the ssh session")?;
        let outcome = check::tools_host_wording(&self.known, &first.normal, &remote);
        self.record("context-wording-by-tools-host", outcome);
        Ok(())
    }
}

mod read_back;

#[cfg(all(test, feature = "postgres"))]
mod tests;
