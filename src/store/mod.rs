//! The async face of the store: sessions, messages, events and attachments. Database
//! work runs on tokio's blocking threads and no pooled connection is held across an
//! `.await`; SQL stays in `db`, file IO stays in `attachments`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol_schema::v1::ContentBlock;

use crate::attachments::{
    AttachmentStore, AttachmentUri, Download, Listed, MAX_ATTACHMENT_BYTES, ReadObserver,
    StoredAttachment,
};
use crate::config::Config;
use crate::db::items::Recorded;
use crate::db::{self, Db, queries, verify::VerifyReport};
use crate::dispatch::{self, Memo, Mode, ModelMessage, Placement};
use crate::error::{Error, Result};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, Message, NewSession, Role, Session, TitleSource};
use crate::turns::Update;

mod check;
mod claim;
mod files;
pub(crate) mod pages;
mod prompt;
mod proxied;
mod usage;

pub use crate::db::Access;
pub use claim::SessionClaim;
pub use pages::{Cursor, Page, PageQuery, whole};
pub(crate) use prompt::redact_message;
pub use prompt::{Prompt, PromptBlock, ToSend};
pub use usage::Since;

/// The one handle on a session store: the database pool and the one attachment store
/// that both writes uploads and reads them back, over the roots in `config`. Its
/// methods sit in the file of their job; none returns a collection that grows with a
/// history (`pages`).
#[derive(Clone)]
pub struct Store {
    /// Every write of the store's sessions goes through this one writer (group
    /// commit; `db::group`); `None` on a read-only store. First, so that it stops
    /// (and lets go of its handle on the database) before `db` is dropped.
    writer: Option<Arc<db::group::GroupWriter>>,
    pub(crate) db: Db,
    pub(crate) attachments: AttachmentStore,
    config: Arc<Config>,
    /// The buffers of encodings no block holds any more, for the next dispatch or
    /// restore: at most [`RECYCLED_BYTES`].
    recycler: Arc<dispatch::Recycler>,
}

/// What `Store::verify` does: only check (the default), or also repair what it can.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// Check the store and write nothing.
    #[default]
    Check,
    /// Check, and when rows or the search index disagree with the event log, back the
    /// database up and make them again from the log (SQLite only), then check again.
    Repair,
}

/// How many bytes of unused encoding buffers a store keeps for reuse: enough for the
/// files of a typical turn, small beside the memo's default budget.
pub const RECYCLED_BYTES: usize = 16 * 1024 * 1024;

/// A message as `send` receives it: what the user typed and the URIs it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub role: Role,
    /// What the user typed: shown in the UI, used for the title, never given a path.
    pub text: String,
    /// The custom-command expansion the model gets instead of `text`.
    pub expanded: Option<String>,
    pub transcript: Option<String>,
    /// Attachment references, parsed where their text came in (see `AttachmentUri`).
    pub attach: Vec<AttachmentUri>,
    /// Queue the message for the next drain instead of delivering it now.
    pub mid_turn: bool,
}

impl Outgoing {
    pub fn user(text: impl Into<String>) -> Outgoing {
        Outgoing {
            role: Role::User,
            text: text.into(),
            expanded: None,
            transcript: None,
            attach: vec![],
            mid_turn: false,
        }
    }
}

/// One message and the blocks the model gets for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    pub message: Message,
    pub blocks: Vec<ContentBlock>,
}

impl From<ModelMessage> for Dispatched {
    /// The parts as blocks, each encoding moved into its block when nothing else
    /// keeps its read (`ModelMessage::into_blocks`).
    fn from(m: ModelMessage) -> Dispatched {
        let ModelMessage { message, parts } = m;
        Dispatched {
            message,
            blocks: parts.into_iter().map(dispatch::Part::into_block).collect(),
        }
    }
}

impl crate::openai::Turn for Dispatched {
    fn role(&self) -> Role {
        self.message.role
    }

    fn blocks(&self) -> &[ContentBlock] {
        &self.blocks
    }
}

/// One attachment of a session: the file as the roots have it now (`None` when a
/// message refers to it but no root has it), and the messages that refer to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionAttachment {
    pub uri: AttachmentUri,
    pub file: Option<Listed>,
    pub messages: Vec<MessageId>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .finish()
    }
}

/// Opening a store, and what it was opened with (migrating and changing a key need
/// no open store: [`crate::maintenance`]).
impl Store {
    /// `open_as(config, Access::Create)`: migrates first, refuses a newer or foreign file.
    pub async fn open(config: Config) -> Result<Store> {
        Store::open_as(config, Access::Create).await
    }

    /// Opens the store `config` names as `access` says (see [`Access`]): creating it as
    /// needed, an existing database only (a mistyped path must not look like an empty
    /// store), or for reading only (nothing written, a database that needs a migration
    /// refused, writes on the store failing).
    pub async fn open_as(config: Config, access: Access) -> Result<Store> {
        Store::open_observed(config, None, access).await
    }

    /// `open_as`, telling `observer` of every attachment read of the one store that
    /// also writes (how tests and the probe count reads).
    #[cfg(any(feature = "probe", feature = "testkit"))]
    pub(crate) async fn open_observing_reads(
        config: Config,
        observer: ReadObserver,
    ) -> Result<Store> {
        Store::open_observed(config, Some(observer), Access::Create).await
    }

    /// The one attachment store is always built from `config.roots`, so reads and
    /// writes share one set of roots.
    async fn open_observed(
        config: Config,
        observer: Option<ReadObserver>,
        access: Access,
    ) -> Result<Store> {
        let mut attachments =
            AttachmentStore::new(config.roots.clone()).with_sharing(config.sharing);
        if let Some(observer) = observer {
            attachments = attachments.observing_reads(observer);
        }
        // A model is given paths as text; a root that is not UTF-8 could only be given
        // as a lossy copy that names some other file.
        for root in std::iter::once(&config.roots.configured).chain(&config.roots.legacy) {
            if root.to_str().is_none() {
                return Err(Error::RootNotUtf8 { root: root.clone() });
            }
        }
        let opening = config.clone();
        let db = blocking(move || Db::open(&opening, access)).await?;
        let writer = match &db {
            Db::ReadOnly(_) => None,
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) if pg.is_read_only() => None,
            _ => Some(Arc::new(
                db::group::GroupWriter::start(db.clone())
                    .map_err(|e| Error::Task(format!("cannot start the store's writer: {e}")))?,
            )),
        };
        Ok(Store {
            writer,
            db,
            attachments,
            config: Arc::new(config),
            recycler: dispatch::Recycler::new(RECYCLED_BYTES),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn attachments(&self) -> &AttachmentStore {
        &self.attachments
    }

    /// For `lifecycle`, which runs its own writes (deletion, gc) through `db`.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// A write through the store's one writer, committed with whatever other writes
    /// gathered meanwhile (group commit); resolves once it is durable.
    pub(crate) async fn with_write<T: Send + 'static>(
        &self,
        f: impl FnMut(&db::Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_as(None, f).await
    }

    /// `with_write` for a write that also touches `session`'s attachment files (see
    /// `db::Db::write_for`), or none.
    pub(crate) async fn write_as<T: Send + 'static>(
        &self,
        session: Option<SessionId>,
        f: impl FnMut(&db::Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        match &self.writer {
            Some(writer) => writer.write(session, f).await,
            None => {
                // A read-only store refuses the write in its own words.
                let db = self.db.clone();
                blocking(move || db.write(f)).await
            }
        }
    }

    /// How the store's writer has shared its commits so far (`testkit::write_stats`).
    #[cfg(feature = "testkit")]
    pub(crate) fn write_stats(&self) -> db::group::WriteStats {
        self.writer.as_ref().map(|w| w.stats()).unwrap_or_default()
    }

    /// `text` as the store keeps it: its secrets replaced, unless redaction is off.
    pub(crate) fn redacted(&self, text: String) -> String {
        self.config.redaction.apply(text)
    }

    pub(crate) async fn with_read<T: Send + 'static>(
        &self,
        f: impl Fn(&db::Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db.clone();
        blocking(move || db.read(f)).await
    }
}

/// Sessions and their messages, one at a time.
impl Store {
    /// Creates a session as `new` describes it: a title (a blank one is none, so the
    /// first message can still name the session), where its tools run, and, for a
    /// session an ACP client opened, its working directory and the agent session it
    /// is bound to.
    pub async fn create_session(&self, new: NewSession) -> Result<Session> {
        let new = NewSession {
            title: new
                .title
                .filter(|t| !t.trim().is_empty())
                .map(|t| self.redacted(t)),
            ..new
        };
        self.with_write(move |tx| queries::insert_session_as(tx, SessionId::new(), &new, None))
            .await
    }

    /// Records a title from `source`, trimmed: [`TitleSource::Explicit`] for a title
    /// the user gave (`session rename`, a client's `session/set_title`), which stays
    /// until the next explicit one; another source (an agent's `session_info_update`,
    /// say) makes it the title in force unless an explicit one is there
    /// ([`TitleSource::replaces`]). The title in force is returned. A title of white
    /// space alone is refused ([`Error::EmptyTitle`]).
    pub async fn set_title(
        &self,
        id: SessionId,
        title: String,
        source: TitleSource,
    ) -> Result<String> {
        let title = self.redacted(title.trim().to_owned());
        if title.is_empty() {
            return Err(Error::EmptyTitle);
        }
        // The row must read before it is written (`rename_session` reads it first): a
        // damaged one is refused with nothing changed.
        self.with_write(move |tx| queries::rename_session(tx, &id, &title, source))
            .await
    }

    /// Archives the sessions (`archived`) or brings them back, all or nothing: an
    /// unknown one refuses the whole call. A session already in that state is left
    /// as it is. Returns which of them changed.
    pub async fn set_archived(&self, ids: Vec<SessionId>, archived: bool) -> Result<Vec<bool>> {
        self.with_write(move |tx| {
            ids.iter()
                .map(|id| queries::set_archived(tx, id, archived))
                .collect()
        })
        .await
    }

    pub async fn session(&self, id: SessionId) -> Result<Session> {
        self.with_read(move |tx| queries::get_session(tx, &id))
            .await
    }

    pub async fn mark_delivered(&self, session: SessionId, ids: Vec<MessageId>) -> Result<()> {
        self.with_write(move |tx| queries::mark_delivered(tx, &session, &ids))
            .await
    }

    pub async fn message(&self, id: MessageId) -> Result<Message> {
        self.with_read(move |tx| queries::get_message(tx, &id))
            .await
    }
}

/// Recording the agent's side of a turn (its messages, thoughts, tool calls, plans),
/// all or nothing per batch.
impl Store {
    /// A write that records, through the writer with its memo of where each session's
    /// history ends (`db::items::Tails`); a read-only store refuses it like any write.
    pub(crate) async fn write_record(
        &self,
        mut work: impl FnMut(&db::Tx<'_>, &mut db::items::Tails) -> Result<Recorded> + Send + 'static,
    ) -> Result<Recorded> {
        match &self.writer {
            Some(writer) => writer.write_remembering(None, work).await,
            None => {
                self.with_write(move |tx| work(tx, &mut db::items::Tails::default()))
                    .await
            }
        }
    }

    /// [`Store::record`] of values the caller keeps and redacts (the proxy's recorder
    /// carries a streamed message's tail from batch to batch). Each is read into its
    /// ACP type here, on the caller's task, before the write is queued.
    pub(crate) async fn record_json(
        &self,
        session: SessionId,
        updates: &[serde_json::Value],
    ) -> Result<Recorded> {
        let updates = updates
            .iter()
            .enumerate()
            .map(|(i, v)| {
                Update::from_value(v).map_err(|refusal| Error::UpdateRefused {
                    line: i + 1,
                    refusal,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.write_record(move |tx, tails| {
            db::items::record_remembered(tx, tails, &session, &updates)
        })
        .await
    }
}

/// Giving messages to a model: select, dispatch, drain the mid-turn queue.
impl Store {
    /// The attachment store as dispatch reads through it, encoding into this store's
    /// recycled buffers.
    pub(crate) fn resolver(&self) -> dispatch::Recycling<AttachmentStore> {
        dispatch::Recycling {
            resolver: self.attachments.clone(),
            recycler: self.recycler.clone(),
        }
    }

    /// The user message a dispatch is for, without reading any file: `message` (a
    /// delivered user message of this session) or the latest. Queued ones wait for a drain.
    pub async fn select(&self, session: SessionId, message: Option<MessageId>) -> Result<Message> {
        self.with_read(move |tx| selected(tx, session, message).map(|(_, m)| m))
            .await
    }

    /// Reads the session and the message to dispatch (`select`) in one snapshot, then
    /// dispatches it on the same blocking thread: one hop to the pool.
    async fn dispatching(
        &self,
        select: impl Fn(&db::Tx<'_>) -> Result<(Session, Message)> + Send + 'static,
        mode: Mode,
        memo: Memo,
    ) -> Result<ModelMessage> {
        let db = self.db.clone();
        let host = self.config.host.clone();
        let resolver = self.resolver();
        blocking(move || {
            let (current, message) = db.read(select)?;
            let placement = placement(&host, &current);
            Ok(dispatch::dispatch_parts(
                &resolver, &memo, message, &placement, mode,
            )?)
        })
        .await
    }

    /// [`Store::dispatch`] of a message as it was given rather than as it is
    /// stored (`Store::send_prompt_as_given`): the proxy delivers a prompt to its agent
    /// as the user sent it, secrets and all, while the store keeps it redacted.
    #[cfg(feature = "acp")]
    pub(crate) async fn dispatch_given_parts(
        &self,
        session: SessionId,
        message: Message,
        mode: Mode,
        memo: Memo,
    ) -> Result<ModelMessage> {
        let select =
            move |tx: &db::Tx<'_>| Ok((queries::get_session(tx, &session)?, message.clone()));
        self.dispatching(select, mode, memo).await
    }

    /// What the model gets for one delivered user message (default: the latest), as
    /// parts that share their encodings with `memo`. Changes nothing.
    /// [`Dispatched::from`] turns it into ACP blocks, moving each encoding into its
    /// block when nothing else (`memo` is let go here) keeps its read.
    pub async fn dispatch(
        &self,
        session: SessionId,
        message: Option<MessageId>,
        mode: Mode,
        memo: Memo,
    ) -> Result<ModelMessage> {
        self.dispatching(move |tx| selected(tx, session, message), mode, memo)
            .await
    }

    /// The queued mid-turn messages in order, as [`Store::dispatch`] gives each. With
    /// [`Drain::Prepare`] it changes nothing, so a caller can hand the blocks on first
    /// and `mark_delivered` once they got through; with [`Drain::Commit`] it marks them
    /// delivered in one write. A strict drain that cannot read a reference fails whole.
    pub async fn drain(
        &self,
        session: SessionId,
        mode: Mode,
        memo: Memo,
        drain: Drain,
    ) -> Result<Vec<ModelMessage>> {
        let (current, queued) = self
            .with_read(move |tx| {
                let current = queries::get_session(tx, &session)?;
                let queued = queries::messages(tx, &session, Some(Delivery::Queued))?;
                Ok((current, queued))
            })
            .await?;
        if queued.is_empty() {
            return Ok(vec![]);
        }
        let placement = placement(&self.config.host, &current);
        let resolver = self.resolver();
        let drained = blocking(move || {
            queued
                .into_iter()
                .map(|message| {
                    Ok(dispatch::dispatch_parts(
                        &resolver, &memo, message, &placement, mode,
                    )?)
                })
                .collect::<Result<Vec<_>>>()
        })
        .await?;
        if drain == Drain::Commit {
            let ids = drained.iter().map(|d| d.message.id).collect();
            self.mark_delivered(session, ids).await?;
        }
        Ok(drained)
    }
}

/// What [`Store::drain`] does besides reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Drain {
    /// Changes nothing: the caller marks the messages delivered once they got through.
    #[default]
    Prepare,
    /// Marks the drained messages delivered, for a caller whose delivery cannot
    /// fail after this returns.
    Commit,
}

/// A file handed to the store to keep: its own name (made safe when stored), bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl Upload {
    pub fn new(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Upload {
        Upload {
            name: name.into(),
            bytes: bytes.into(),
        }
    }

    /// Reads a file the user named for upload, as `name` or else under its own name.
    /// Only a regular file of at most [`MAX_ATTACHMENT_BYTES`] is taken, checked on the
    /// opened file (opened non-blocking, so a FIFO cannot hang the call); the read stops
    /// past the limit, so a file that grows while it is read is refused.
    pub async fn read_file(path: PathBuf, name: Option<String>) -> Result<Upload> {
        blocking(move || Upload::read_file_blocking(&path, name)).await
    }

    fn read_file_blocking(path: &Path, name: Option<String>) -> Result<Upload> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let io = |cause| Error::Io {
            path: path.to_owned(),
            cause,
        };
        let nonblocking = rustix::fs::OFlags::NONBLOCK.bits() as i32;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nonblocking)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(Error::NotRegularFile {
                path: path.to_owned(),
            });
        }
        let too_large = |size| Error::FileTooLarge {
            path: path.to_owned(),
            size,
            limit: MAX_ATTACHMENT_BYTES,
        };
        if meta.len() > MAX_ATTACHMENT_BYTES {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_ATTACHMENT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        let name = name.unwrap_or_else(|| {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        Ok(Upload { name, bytes })
    }
}

/// Where a session's attachment paths are: on this daemon's `host`, reached by tools
/// that run where the session says.
pub(crate) fn placement(host: &str, session: &Session) -> Placement {
    Placement {
        host: host.to_owned(),
        tools_host: session.tools_host,
    }
}

/// The session and the user message a dispatch is for: `message` when given (it must
/// be a delivered user message of this session), else the latest delivered user
/// message. An unknown session is named as such before any message is looked at.
fn selected(
    tx: &db::Tx<'_>,
    session: SessionId,
    message: Option<MessageId>,
) -> Result<(Session, Message)> {
    let current = queries::get_session(tx, &session)?;
    let Some(id) = message else {
        let latest = queries::latest_delivered_user_message(tx, &session)?
            .ok_or(Error::NoDeliveredUserMessage { session })?;
        return Ok((current, latest));
    };
    let m = queries::get_message(tx, &id)?;
    if m.session_id != session {
        return Err(Error::MessageOfAnotherSession {
            message: id,
            owner: m.session_id,
            session,
        });
    }
    if m.role != Role::User {
        return Err(Error::NotUserMessage {
            message: id,
            role: m.role,
        });
    }
    if m.state == Delivery::Queued {
        return Err(Error::MessageQueued { message: id });
    }
    Ok((current, m))
}

/// Runs blocking work (SQLite, file reads) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

/// A batch recorded on its own, redacted: a message streamed in its chunks is redacted
/// as one text and ends with the batch (one update in, one out).
pub(crate) fn redacted_whole<T: crate::redact::Chunk>(updates: Vec<T>) -> Vec<T> {
    let mut streams = crate::redact::Streams::default();
    let (mut out, _) = streams.pass(updates);
    streams.end(&mut out);
    out
}
