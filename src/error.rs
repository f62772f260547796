//! The public error type: one variant per condition a caller may act on, with the ids,
//! URIs and paths involved. Each message is one lowercase line; a wrapped cause is
//! `source()`, never repeated in the message, so a printed chain holds each cause once.
//! A driver's error is a [`DatabaseCause`], which names no driver type.

use std::fmt;
use std::path::PathBuf;

use crate::attachments::{AttachmentError, AttachmentUri, UriError};
use crate::dispatch::DispatchError;
use crate::ids::{EntryId, IdError, MessageId, SessionId, TurnId};
use crate::model::{Problem, Role, UnknownValue};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // What the caller named is not there, or not what the call needs.
    #[error("no session {0}")]
    SessionNotFound(SessionId),
    #[error("no message {0}")]
    MessageNotFound(MessageId),
    #[error("session {session} has no delivered user message")]
    NoDeliveredUserMessage { session: SessionId },
    #[error("message {message} belongs to session {owner}, not {session}")]
    MessageOfAnotherSession {
        message: MessageId,
        owner: SessionId,
        session: SessionId,
    },
    #[error("message {message} is {} {role} message; dispatch is for user messages", article(*role))]
    NotUserMessage { message: MessageId, role: Role },
    /// A mid-turn message waits for a drain; a dispatch does not take it.
    #[error("message {message} is queued mid-turn; drain delivers it")]
    MessageQueued { message: MessageId },
    /// Marking delivered found the message delivered already: another drain won.
    #[error(
        "message {message} is no longer queued in session {session}: another drain delivered it"
    )]
    NoLongerQueued {
        message: MessageId,
        session: SessionId,
    },
    /// Another process holds the session's claim ([`crate::Store::claim_session`]).
    #[error("session {session} is open elsewhere: another process holds it")]
    SessionOpenElsewhere { session: SessionId },
    /// A turn delivers at least one message.
    #[error("a turn of session {session} needs a message to deliver")]
    EmptyTurn { session: SessionId },
    /// Ending a turn that has ended already, or that is not this session's.
    #[error("turn {turn} of session {session} is not running")]
    TurnNotRunning { turn: TurnId, session: SessionId },

    // What `send` refuses before it stores anything.
    #[error("only user messages carry attachments or wait in the mid-turn queue, not {role}")]
    RoleCannotAttach { role: Role },
    #[error("a message needs text, a transcript or at least one attachment")]
    EmptyMessage,
    #[error("a title needs a character other than white space")]
    EmptyTitle,
    #[error("malformed attachment reference")]
    MalformedReference(#[from] UriError),
    /// The URI names a file of `uri.session()`, not of `session`.
    #[error("attachment {uri} belongs to session {}, not {session}", uri.session())]
    ForeignReference {
        uri: AttachmentUri,
        session: SessionId,
    },
    /// An attachment could not be stored or read (`send` reads each reference once).
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
    /// A strict dispatch met references it could not read; all of them are named.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),

    /// `record` refused a batch at the 1-based `line` of its first bad update.
    #[error("line {line}: {refusal}")]
    UpdateRefused {
        line: usize,
        refusal: crate::turns::Refusal,
    },

    /// A search query FTS5 cannot take; `reason` is FTS5's own words for it.
    #[error("cannot search for {query:?}: {reason}")]
    SearchQuery { query: String, reason: String },
    /// An archive `import` will not take; nothing was written.
    #[error("archive refused: {reason}")]
    ArchiveRefused { reason: String },
    /// A session to fork or export has nothing the operation could carry.
    #[error("session {session} cannot be forked at message {message}: {reason}")]
    ForkPoint {
        session: SessionId,
        message: MessageId,
        reason: &'static str,
    },
    /// A replay point that names no entry of the session's delivered history.
    #[error(
        "session {session} has no message or recorded item {entry} in its delivered history \
         to replay from"
    )]
    ReplayPoint { session: SessionId, entry: EntryId },
    /// An ACP `messageId` to replay from that no entry of the delivered history has.
    #[error(
        "session {session} has no delivered message with messageId {message_id:?} to replay from"
    )]
    ReplayMessage {
        session: SessionId,
        message_id: String,
    },

    // Input files and values.
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("cannot write {path}")]
    WriteFile {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("cannot attach {path}: not a regular file")]
    NotRegularFile { path: PathBuf },
    #[error("cannot attach {path}: it is {}", crate::attachments::over_limit(*size, *limit))]
    FileTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error(transparent)]
    Id(#[from] IdError),
    /// A role, tools host or delivery state that is none of the known ones.
    #[error(transparent)]
    UnknownValue(#[from] UnknownValue),
    /// A file or folder `session delete` or `gc` could not look at or remove.
    #[error("cannot clean up {path}")]
    Cleanup {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("{what} is out of range for the database")]
    OutOfRange { what: &'static str },

    // Configuration.
    #[error("cannot find the user's data directory: set --db and --attachments-root")]
    NoDataDir,
    /// A root that is not UTF-8: a model's text path would name some other file.
    #[error("attachment root {root:?} is not valid UTF-8, so its paths cannot be given to a model")]
    RootNotUtf8 { root: PathBuf },

    // The database.
    #[error("session {session} differs from its event log: {}; run `sessionstore verify` for the full report, `sessionstore verify --repair` to rebuild it from the log", within_session(*session, problems))]
    LogMismatch {
        session: SessionId,
        problems: Vec<Problem>,
    },
    /// `verify --repair` on a database it does not rebuild.
    #[error(
        "verify --repair rebuilds SQLite databases only, and this one is on {engine}; `sessionstore verify` still reports what differs"
    )]
    RepairUnsupported { engine: &'static str },
    #[error("cannot use database {path}")]
    DatabaseIo {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("no database at {0}: run `sessionstore migrate` (or `session new`) to create it")]
    NoDatabase(PathBuf),
    #[error("{path} is not a usable sqlite database: {detail}")]
    NotDatabase { path: PathBuf, detail: String },
    /// A PostgreSQL connection string that does not parse (shown without its password).
    #[error("{url} is not a valid PostgreSQL connection string: {detail}")]
    ConnectionString { url: String, detail: String },
    /// No connection to the PostgreSQL server; a failure, not a refusal (a retry may work).
    #[error("cannot connect to {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error(
        "database {path} is at schema version {found}, newer than this binary knows ({known}); \
         unknown migrations: {}; upgrade sessionstore",
        unknown.join(", ")
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
        unknown: Vec<String>,
    },
    /// A writing command found the schema not its migrations', and touched nothing.
    #[error(
        "database {path} does not have the schema its migrations make: {}; nothing was \
         written to it (`sessionstore verify` reports every difference)",
        problems.iter().map(Problem::within_schema).collect::<Vec<_>>().join("; ")
    )]
    SchemaDamaged {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error(
        "database {path} is at schema version {found} and this sessionstore needs {latest}: \
         run `sessionstore migrate` to upgrade it (reading commands never do)"
    )]
    NeedsMigration {
        path: PathBuf,
        found: i64,
        latest: i64,
    },
    #[error("database {0} was opened for reading only, so it cannot be changed")]
    ReadOnly(PathBuf),

    // Encryption at rest (cargo feature `encryption`).
    #[error("cannot read key file {path}")]
    KeyFile {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// A key file that holds no key; nothing was opened with it.
    #[error("key file {path} does not hold a key: {reason}")]
    BadKeyFile { path: PathBuf, reason: &'static str },
    /// A database that does not open with the key given (or no database: SQLCipher
    /// cannot tell); nothing was touched.
    #[error("cannot open {path}: wrong key, or not a sessionstore database")]
    WrongKey { path: PathBuf },
    /// A file that is not plain SQLite, given no key: it may be an encrypted database.
    #[error(
        "{path} is not a usable sqlite database: it does not begin with a sqlite database \
         header, and may be encrypted: {}",
        needs_key_advice()
    )]
    NeedsKey { path: PathBuf },
    /// A key was given for a database that is not encrypted.
    #[error(
        "{path} is not encrypted, but a key was given: leave out --key-file, or encrypt it \
         with `sessionstore migrate --encrypt`"
    )]
    NotEncrypted { path: PathBuf },
    /// `migrate --encrypt` on a database that is encrypted already.
    #[error("{path} is already encrypted: `sessionstore migrate --rekey` changes its key")]
    AlreadyEncrypted { path: PathBuf },
    /// A key given where none can be used.
    #[error("cannot use a database key: {reason}")]
    EncryptionUnavailable { reason: &'static str },
    /// `migrate --encrypt` or `--rekey` found its result wrong and kept the database.
    #[error("cannot change the encryption of {path}: {reason}; it was left as it was")]
    EncryptionChange { path: PathBuf, reason: String },
    #[error("migration failed, schema left as it was: {0}")]
    Migration(String),
    /// Another writer held the database past the busy timeout.
    #[error("database busy while trying to {action}")]
    Busy {
        action: &'static str,
        #[source]
        cause: DatabaseCause,
    },
    /// A statement the database (SQLite or PostgreSQL) refused or could not run.
    #[error("database error while trying to {action}")]
    Database {
        action: &'static str,
        #[source]
        cause: DatabaseCause,
    },
    /// A row whose column does not hold what this store writes there.
    #[error("database row does not read while trying to {action}: {detail}")]
    DamagedRow {
        action: &'static str,
        detail: String,
    },
    #[error("cannot get a database connection")]
    Pool(#[source] DatabaseCause),
    #[error("background task failed: {0}")]
    Task(String),
    /// One failure shared by every write of a group it undid; kind, refusal and words
    /// are the held error's.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

/// What to do about a database that may be encrypted.
fn needs_key_advice() -> &'static str {
    if cfg!(feature = "encryption") {
        "name its key with --key-file (or SESSIONSTORE_KEY_FILE)"
    } else {
        "this sessionstore was built without the `encryption` feature, which opens an \
         encrypted database with its key (--key-file)"
    }
}

/// "a user", "an assistant".
fn article(role: Role) -> &'static str {
    match role {
        Role::Assistant => "an",
        _ => "a",
    }
}

/// The log's problems name their session, which the message has already named once.
fn within_session(session: SessionId, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.within_session(session))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// A stable snake_case name for the condition (`--json`, logs, branching).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::SessionNotFound(_) => "session_not_found",
            Error::MessageNotFound(_) => "message_not_found",
            Error::NoDeliveredUserMessage { .. } => "no_delivered_user_message",
            Error::MessageOfAnotherSession { .. } => "message_of_another_session",
            Error::NotUserMessage { .. } => "not_user_message",
            Error::MessageQueued { .. } => "message_queued",
            Error::NoLongerQueued { .. } => "no_longer_queued",
            Error::SessionOpenElsewhere { .. } => "session_open_elsewhere",
            Error::EmptyTurn { .. } => "empty_turn",
            Error::TurnNotRunning { .. } => "turn_not_running",
            Error::RoleCannotAttach { .. } => "role_cannot_attach",
            Error::EmptyMessage => "empty_message",
            Error::EmptyTitle => "empty_title",
            Error::MalformedReference(_) => "malformed_reference",
            Error::ForeignReference { .. } => "foreign_reference",
            Error::Attachment(e) => e.kind(),
            Error::Dispatch(_) => "unreadable_attachment",
            Error::UpdateRefused { .. } => "update_refused",
            Error::SearchQuery { .. } => "search_query",
            Error::ArchiveRefused { .. } => "archive_refused",
            Error::ForkPoint { .. } => "fork_point",
            Error::ReplayPoint { .. } | Error::ReplayMessage { .. } => "replay_point",
            Error::Io { .. } | Error::WriteFile { .. } => "io",
            Error::NotRegularFile { .. } => "not_regular_file",
            Error::FileTooLarge { .. } => "file_too_large",
            Error::Id(_) => "invalid_id",
            Error::UnknownValue(_) => "unknown_value",
            Error::Cleanup { .. } => "cleanup",
            Error::OutOfRange { .. } => "out_of_range",
            Error::NoDataDir => "no_data_dir",
            Error::RootNotUtf8 { .. } => "root_not_utf8",
            Error::LogMismatch { .. } => "log_mismatch",
            Error::RepairUnsupported { .. } => "repair_unsupported",
            Error::DatabaseIo { .. } => "database_io",
            Error::NoDatabase(_) => "no_database",
            Error::NotDatabase { .. } => "not_database",
            Error::ConnectionString { .. } => "connection_string",
            Error::Unreachable { .. } => "unreachable",
            Error::NewerSchema { .. } => "newer_schema",
            Error::SchemaDamaged { .. } => "schema_damaged",
            Error::NeedsMigration { .. } => "needs_migration",
            Error::ReadOnly(_) => "read_only",
            Error::KeyFile { .. } => "key_file",
            Error::BadKeyFile { .. } => "bad_key_file",
            Error::WrongKey { .. } => "wrong_key",
            Error::NeedsKey { .. } => "needs_key",
            Error::NotEncrypted { .. } => "not_encrypted",
            Error::AlreadyEncrypted { .. } => "already_encrypted",
            Error::EncryptionUnavailable { .. } => "encryption_unavailable",
            Error::EncryptionChange { .. } => "encryption_change",
            Error::Migration(_) => "migration_failed",
            Error::Busy { .. } => "busy",
            Error::Database { .. } | Error::DamagedRow { .. } | Error::Pool(_) => "database",
            Error::Task(_) => "internal",
            Error::Shared(e) => e.kind(),
        }
    }

    /// Whether the store refused its input as unsafe or not its own, rather than failing
    /// at something it tried: a retry cannot succeed; the command line exits 3.
    pub fn is_refused(&self) -> bool {
        match self {
            Error::Shared(e) => e.is_refused(),
            Error::NewerSchema { .. }
            | Error::SchemaDamaged { .. }
            | Error::NotDatabase { .. }
            | Error::BadKeyFile { .. }
            | Error::WrongKey { .. }
            | Error::NeedsKey { .. }
            | Error::NotEncrypted { .. }
            | Error::AlreadyEncrypted { .. }
            | Error::ConnectionString { .. }
            | Error::MalformedReference(_)
            | Error::ForeignReference { .. }
            | Error::UpdateRefused { .. }
            | Error::SearchQuery { .. }
            | Error::ArchiveRefused { .. }
            | Error::Dispatch(_) => true,
            Error::Attachment(e) => e.is_refused(),
            _ => false,
        }
    }
}

/// A database driver's error, unchanged, behind a type that names no driver (a new
/// driver version changes no public type); the `source()` of its `Error`.
pub struct DatabaseCause(Box<dyn std::error::Error + Send + Sync>);

impl DatabaseCause {
    pub(crate) fn new(cause: impl std::error::Error + Send + Sync + 'static) -> DatabaseCause {
        DatabaseCause(Box::new(cause))
    }

    /// The driver's own error, for `db` to read its code (a lost race to retry, say).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for DatabaseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for DatabaseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The driver's error stands in its place in the chain: what it wraps is this cause's
/// `source()`, so a printed chain reads as it would with the driver's error itself.
impl std::error::Error for DatabaseCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
