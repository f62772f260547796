//! The `sessionstore` command line: argument parsing, configuration from flags and
//! environment, and printing. All behaviour lives in the library; errors become one
//! line on stderr and a non-zero exit, and arguments are checked before any database
//! is opened, so a refused command writes nothing.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use sessionstore::attachments::AttachmentUri;
use sessionstore::dispatch::{self, DEFAULT_MEMO_BUDGET, Memo, Mode};
use sessionstore::format::{Format, StreamWriter};
use sessionstore::lifecycle::{DeletionStatus, GcOptions, Progress, SessionCursor};
use sessionstore::model::{Role, ToolsHost};
use sessionstore::store::{Outgoing, Upload};
use sessionstore::{Backup, Config, Error, MessageId, SessionId, Store, focus};

#[derive(Parser)]
#[command(
    name = "sessionstore",
    version,
    about = "The backing store of an agent daemon's restorable sessions"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes. Their environment variables are read by `Global::config`
/// rather than by clap, so that an empty variable counts as unset.
#[derive(Args)]
struct Global {
    /// The SQLite database file [env: SESSIONSTORE_DB] [default: <data dir>/sessions.db]
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Where new uploads are written [env: SESSIONSTORE_ATTACHMENTS_ROOT]
    /// [default: <data dir>/attachments]
    #[arg(long, global = true, value_name = "DIR")]
    attachments_root: Option<PathBuf>,
    /// An older, read-only attachment root, tried after the configured one (repeatable)
    /// [env: SESSIONSTORE_LEGACY_ROOTS, colon-separated]
    #[arg(long = "legacy-root", global = true, value_name = "DIR")]
    legacy_roots: Vec<PathBuf>,
    /// Print machine-readable JSON
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending schema migrations
    Migrate(MigrateArgs),
    /// Create, list and show sessions
    #[command(subcommand)]
    Session(SessionCommand),
    /// Store files as attachments of a session
    Attach(AttachArgs),
    /// Persist a message with its attachment references
    Send(SendArgs),
    /// Record the agent's side of a turn: ACP session updates from stdin, one JSON a line
    Record(RecordArgs),
    /// Print what the model gets for one user message (default: the latest delivered)
    Dispatch(DispatchArgs),
    /// Deliver the queued mid-turn messages, in order, and mark them delivered
    Drain(DrainArgs),
    /// Open a session in a fresh store and print its model-bound history
    Restore(RestoreArgs),
    /// Print a session's event log, one JSON object a line
    Events(EventsArgs),
    /// Check the database's integrity and its tables against the event log
    Verify,
    /// Remove, under the configured root, uploads no message refers to, deleted
    /// sessions' folders and killed uploads' temporary files
    Gc(GcArgs),
    /// Run the isolated Store → Session → OpenAI request probe
    #[cfg(feature = "probe")]
    Probe,
}

#[derive(Args)]
struct MigrateArgs {
    /// Report what would be applied without writing anything
    #[arg(long)]
    dry_run: bool,
    /// Upgrade without first copying the database to `<db>.v<N>.bak`
    #[arg(long)]
    no_backup: bool,
}

#[derive(Args)]
struct AttachArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
    /// The upload's own name, for a single file
    #[arg(long)]
    name: Option<String>,
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

#[derive(Args)]
struct SendArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
    /// What the user typed (display text)
    #[arg(long)]
    text: String,
    /// An attachment URI, as `attach` printed it (repeatable)
    #[arg(long = "attach", value_name = "URI")]
    attach: Vec<String>,
    /// Queue the message mid-turn; `drain` delivers it
    #[arg(long)]
    mid_turn: bool,
    /// The custom-command expansion the model gets instead of the text
    #[arg(long, value_name = "TEXT")]
    expanded: Option<String>,
    /// An audio transcription that came with the message
    #[arg(long, value_name = "TEXT")]
    transcript: Option<String>,
    /// System prompts are the daemon's, not a user's to store, so `system` is not taken
    #[arg(long, default_value = "user", value_parser = parse_send_role())]
    role: Role,
}

#[derive(Args)]
struct RecordArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
}

#[derive(Args)]
struct DispatchArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
    /// A message id as printed by `send` (the id, or the whole `{"id": ...}`)
    #[arg(long, value_parser = parse_message)]
    message: Option<MessageId>,
    /// Fail on an unreadable attachment instead of leaving it out
    #[arg(long)]
    strict: bool,
    #[arg(long, value_enum, default_value_t = DispatchFormat::Acp)]
    format: DispatchFormat,
    #[command(flatten)]
    model: ModelArg,
}

#[derive(Args)]
struct DrainArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
    #[arg(long)]
    strict: bool,
    #[arg(long, value_enum, default_value_t = DrainFormat::Acp)]
    format: DrainFormat,
    #[command(flatten)]
    model: ModelArg,
}

#[derive(Args)]
struct RestoreArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
    #[arg(long, value_enum, default_value_t = RestoreFormat::Acp)]
    format: RestoreFormat,
    #[command(flatten)]
    model: ModelArg,
    /// How much encoded content the replay keeps for reuse (like 64MiB, 512KiB,
    /// 1GiB or plain bytes); files it evicts are read again when needed
    #[arg(long, value_name = "SIZE", value_parser = dispatch::parse_byte_size,
          default_value_t = DEFAULT_MEMO_BUDGET)]
    memo_budget: u64,
}

#[derive(Args)]
struct GcArgs {
    /// Report what would be removed without removing anything
    #[arg(long)]
    dry_run: bool,
    /// Keep files that changed more recently than this (like 24h, 90m, 7d, 0)
    #[arg(long, value_name = "DURATION", default_value = "24h",
          value_parser = sessionstore::lifecycle::parse_duration)]
    grace: std::time::Duration,
}

#[derive(Args)]
struct EventsArgs {
    #[arg(long, value_parser = parse_session)]
    session: SessionId,
}

#[derive(Args)]
struct ModelArg {
    /// The model named in OpenAI requests
    #[arg(long, default_value = "gpt-4o")]
    model: String,
}

/// What `dispatch` prints: the only command with a focus hint, since the hint is made
/// for one user message.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DispatchFormat {
    /// ACP content blocks
    Acp,
    /// an OpenAI Chat Completions request
    Openai,
    /// an OpenAI Responses API request
    OpenaiResponses,
    /// the Vision Bridge focus hint
    FocusHint,
}

/// What `drain` prints.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DrainFormat {
    /// ACP content blocks
    Acp,
    /// an OpenAI Chat Completions request
    Openai,
    /// an OpenAI Responses API request
    OpenaiResponses,
}

/// What `restore` prints.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RestoreFormat {
    /// the session's messages with their ACP content blocks
    Acp,
    /// one ACP `session/update` notification a line, as an agent answers `session/load`
    AcpUpdates,
    /// an OpenAI Chat Completions request
    Openai,
    /// an OpenAI Responses API request
    OpenaiResponses,
}

impl From<DrainFormat> for Format {
    fn from(f: DrainFormat) -> Format {
        match f {
            DrainFormat::Acp => Format::AcpBlocks,
            DrainFormat::Openai => Format::OpenaiChat,
            DrainFormat::OpenaiResponses => Format::OpenaiResponses,
        }
    }
}

impl From<RestoreFormat> for Format {
    fn from(f: RestoreFormat) -> Format {
        match f {
            RestoreFormat::Acp => Format::AcpRestore,
            RestoreFormat::AcpUpdates => Format::AcpUpdates,
            RestoreFormat::Openai => Format::OpenaiChat,
            RestoreFormat::OpenaiResponses => Format::OpenaiResponses,
        }
    }
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Create a session
    New {
        #[arg(long)]
        title: Option<String>,
        /// Where the session's tools run
        #[arg(long, default_value = "local", value_parser = parse_tools_host())]
        tools_host: ToolsHost,
    },
    /// List sessions, most recently updated first, a page at a time
    List {
        /// How many sessions a page holds
        #[arg(long, value_name = "N", default_value_t = sessionstore::lifecycle::DEFAULT_PAGE as u64,
              value_parser = clap::value_parser!(u64).range(1..=sessionstore::lifecycle::MAX_PAGE as u64))]
        limit: u64,
        /// Where the page starts: a nextCursor value as a previous page printed it
        #[arg(long, value_name = "C", value_parser = parse_cursor)]
        cursor: Option<SessionCursor>,
    },
    /// Delete sessions: their rows and events (leaving a tombstone) and their folder
    /// under the configured root; files in legacy roots are reported and left
    Delete {
        #[arg(required = true, value_name = "ID", value_parser = parse_session)]
        ids: Vec<SessionId>,
        /// Report what would go without changing anything
        #[arg(long)]
        dry_run: bool,
    },
    /// Show a session and its messages
    Show {
        #[arg(value_parser = parse_session)]
        id: SessionId,
    },
}

/// `local`, `ssh` or `managed`, listed in help and parsed by the library's own names.
fn parse_tools_host() -> impl clap::builder::TypedValueParser<Value = ToolsHost> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["local", "ssh", "managed"])
        .try_map(|s| s.parse::<ToolsHost>())
}

/// The roles `send` takes: a user's message or an assistant's reply.
fn parse_send_role() -> impl clap::builder::TypedValueParser<Value = Role> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["user", "assistant"]).try_map(|s| s.parse::<Role>())
}

fn parse_cursor(text: &str) -> Result<SessionCursor, String> {
    text.parse()
        .map_err(|e: sessionstore::lifecycle::CursorError| e.to_string())
}

fn parse_session(text: &str) -> Result<SessionId, String> {
    text.parse()
        .map_err(|e: sessionstore::IdError| e.to_string())
}

/// A message id, bare or as `send --json` printed it.
fn parse_message(text: &str) -> Result<MessageId, String> {
    let bare = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(o)) => match o.get("id") {
            Some(serde_json::Value::String(id)) => id.clone(),
            _ => return Err(format!("{text:?} has no \"id\" string")),
        },
        _ => text.to_owned(),
    };
    bare.parse()
        .map_err(|e: sessionstore::IdError| e.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            exit_code(&e)
        }
    }
}

/// Help and version print as clap writes them; an argument error is cut to its first
/// line, so every failure is one line on stderr.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {} (see --help)", terminal_safe(first));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line (each library error reports its cause as
/// `source()` and does not repeat it). Messages echo paths, names and a database's own
/// text, any of which may hold escape sequences, so every hidden character is printed
/// as `\uXXXX` and never reaches the terminal raw.
fn one_line(e: &anyhow::Error) -> String {
    terminal_safe(&format!("{e:#}"))
}

/// Line breaks become spaces (one error, one line); every other control or invisible
/// character is escaped.
fn terminal_safe(text: &str) -> String {
    sessionstore::dispatch::hidden_escaped(&text.replace(['\n', '\r'], " "))
}

/// 3 when the store refused its input (a newer or foreign database, an unsafe name or
/// URI, an unreadable reference in strict mode), 1 for any other failure.
fn exit_code(e: &anyhow::Error) -> ExitCode {
    match e.downcast_ref::<Error>() {
        Some(e) if e.is_refused() => ExitCode::from(3),
        _ => ExitCode::FAILURE,
    }
}

/// A variable's value, or `None` when it is unset or empty.
fn env_var(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

impl Global {
    fn config(&self) -> Result<Config> {
        let db = self
            .db
            .clone()
            .or_else(|| env_var("SESSIONSTORE_DB").map(PathBuf::from));
        let root = self
            .attachments_root
            .clone()
            .or_else(|| env_var("SESSIONSTORE_ATTACHMENTS_ROOT").map(PathBuf::from));
        // The data directory is looked up only when something still needs it, so
        // explicit paths work where no home directory exists.
        let mut config = match (&db, &root) {
            (Some(_), Some(_)) => Config::in_dir(std::path::Path::new("")),
            _ => Config::default_paths()?,
        };
        if let Some(db) = db {
            config.db_path = db;
        }
        if let Some(root) = root {
            config.roots.configured = root;
        }
        config.roots.legacy = if self.legacy_roots.is_empty() {
            env_var("SESSIONSTORE_LEGACY_ROOTS")
                .map(|v| {
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            self.legacy_roots.clone()
        };
        Ok(config)
    }
}

/// Writes to stdout and flushes, so a closed pipe or a full disk is an error the
/// command reports (and, for `drain`, delivers nothing) rather than a panic.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .context("cannot write the output")
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    emit(&serde_json::to_string(value)?)
}

fn mode(strict: bool) -> Mode {
    if strict { Mode::Strict } else { Mode::Degrade }
}

/// Starts writing `format` to stdout, buffered. Encodings go from the memo's buffers
/// to stdout as each message comes, so no whole rendering is ever held.
fn output(format: Format, session: SessionId, model: &str) -> Result<Output> {
    let out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    StreamWriter::begin(out, format, session, model).context("cannot write the output")
}

type Output = StreamWriter<std::io::BufWriter<std::io::StdoutLock<'static>>>;

/// Closes the document (with the newline a single JSON document ends with) and
/// flushes, so a closed pipe or a full disk is reported rather than lost.
fn finish(writer: Output, format: Format) -> Result<()> {
    let mut out = writer.finish().context("cannot write the output")?;
    if !format.is_lines() {
        out.write_all(b"\n").context("cannot write the output")?;
    }
    out.flush().context("cannot write the output")
}

fn title(s: &sessionstore::model::Session) -> &str {
    s.title.as_deref().unwrap_or("(untitled)")
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.global.json;
    #[cfg(feature = "probe")]
    if matches!(cli.command, Command::Probe) {
        // The probe builds its own store in a temporary directory: no flag, variable
        // or data directory applies, so none is looked up.
        return probe(json).await;
    }
    let config = cli.global.config()?;
    match cli.command {
        Command::Migrate(args) => migrate(config, json, args).await?,
        Command::Session(SessionCommand::New { title, tools_host }) => {
            session_new(config, json, title, tools_host).await?
        }
        Command::Session(SessionCommand::List { limit, cursor }) => {
            session_list(config, json, limit as usize, cursor).await?
        }
        Command::Session(SessionCommand::Delete { ids, dry_run }) => {
            session_delete(config, json, ids, dry_run).await?
        }
        Command::Gc(args) => gc(config, json, args).await?,
        Command::Session(SessionCommand::Show { id }) => session_show(config, json, id).await?,
        Command::Attach(args) => attach(config, json, args).await?,
        Command::Send(args) => send(config, json, args).await?,
        Command::Record(args) => record(config, json, args).await?,
        Command::Dispatch(args) => dispatch(config, args).await?,
        Command::Drain(args) => drain(config, args).await?,
        Command::Restore(args) => restore(config, args).await?,
        Command::Events(args) => events(config, args).await?,
        Command::Verify => return verify(config, json).await,
        #[cfg(feature = "probe")]
        Command::Probe => {
            unreachable!("run returns the probe's report before reading any configuration")
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn migrate(config: Config, json: bool, args: MigrateArgs) -> Result<()> {
    let report = if args.dry_run {
        Store::migration_plan(&config.db_path).await?
    } else {
        let backup = if args.no_backup {
            Backup::Skip
        } else {
            Backup::Make
        };
        Store::migrate(&config.db_path, backup).await?
    };
    if json {
        print_json(&report)
    } else if args.dry_run && !report.pending.is_empty() {
        emit(&format!(
            "would apply {}; schema at version {}",
            report.pending.join(", "),
            report.current
        ))
    } else if report.applied.is_empty() {
        emit(&format!(
            "nothing to apply; schema at version {}",
            report.current
        ))
    } else {
        let kept = match &report.backup {
            Some(copy) => format!("; the database as it was is kept in {}", copy.display()),
            None => String::new(),
        };
        emit(&format!(
            "applied {}; schema at version {}{kept}",
            report.applied.join(", "),
            report.current
        ))
    }
}

async fn session_new(
    config: Config,
    json: bool,
    title: Option<String>,
    tools_host: ToolsHost,
) -> Result<()> {
    let store = Store::open(config).await?;
    let session = store.create_session(title, tools_host).await?;
    if json {
        print_json(&serde_json::json!({ "id": session.id }))
    } else {
        emit(&session.id.to_string())
    }
}

async fn session_list(
    config: Config,
    json: bool,
    limit: usize,
    cursor: Option<SessionCursor>,
) -> Result<()> {
    // Listing never creates a database: with none yet, there is nothing to list.
    let page = match Store::open_read_only(config).await {
        Ok(store) => store.list_sessions_page(limit, cursor).await?,
        Err(Error::NoDatabase(_)) => sessionstore::lifecycle::SessionPage {
            sessions: vec![],
            next_cursor: None,
        },
        Err(e) => return Err(e.into()),
    };
    if json {
        return print_json(&page);
    }
    let mut lines: Vec<String> = page
        .sessions
        .iter()
        .map(|s| {
            format!(
                "{}  {}  {}  {} messages  {} bytes  {}",
                s.id,
                s.updated_at,
                s.tools_host,
                s.messages,
                s.attachment_bytes,
                terminal_safe(s.title.as_deref().unwrap_or("(untitled)"))
            )
        })
        .collect();
    if let Some(next) = &page.next_cursor {
        lines.push(format!("next page: --cursor {next}"));
    }
    if lines.is_empty() {
        return Ok(());
    }
    emit(&lines.join("\n"))
}

async fn session_delete(
    config: Config,
    json: bool,
    ids: Vec<SessionId>,
    dry_run: bool,
) -> Result<()> {
    let store = if dry_run {
        Store::open_read_only(config).await?
    } else {
        Store::open_existing(config).await?
    };
    let report = store
        .delete_sessions_with(ids, dry_run, terminal_progress())
        .await?;
    if json {
        return print_json(&report);
    }
    let mut lines = Vec::new();
    for s in &report.sessions {
        let what = format!(
            "{} messages, {} items, {} events, {} files ({} bytes)",
            s.messages, s.items, s.events, s.files, s.bytes
        );
        lines.push(match s.status {
            DeletionStatus::Deleted => format!("deleted {}: {what}", s.id),
            DeletionStatus::WouldDelete => format!("would delete {}: {what}", s.id),
            DeletionStatus::AlreadyDeleted => format!(
                "{} was already deleted{}",
                s.id,
                s.deleted_at
                    .as_deref()
                    .map(|at| format!(" at {at}"))
                    .unwrap_or_default()
            ),
        });
        for path in &s.legacy_files {
            lines.push(format!(
                "  left in a legacy root (read-only to the store): {}",
                terminal_safe(&path.display().to_string())
            ));
        }
    }
    if !report.erased {
        lines.push(
            "note: a reader kept the write-ahead log busy; its copy of the deleted rows \
             goes at the next checkpoint"
                .to_owned(),
        );
    }
    emit(&lines.join("\n"))
}

async fn gc(config: Config, json: bool, args: GcArgs) -> Result<()> {
    let store = if args.dry_run {
        Store::open_read_only(config).await?
    } else {
        Store::open_existing(config).await?
    };
    let report = store
        .gc(GcOptions {
            dry_run: args.dry_run,
            grace: args.grace,
            progress: terminal_progress(),
        })
        .await?;
    if json {
        return print_json(&report);
    }
    emit(&format!(
        "{} {} unreferenced uploads ({} bytes), {} folders of deleted sessions ({} files, \
         {} bytes), {} upload leftovers ({} bytes): {} files, {} bytes in all; left {} \
         entries alone",
        if report.dry_run {
            "would remove"
        } else {
            "removed"
        },
        report.unreferenced.files,
        report.unreferenced.bytes,
        report.deleted_session_folders,
        report.deleted_sessions.files,
        report.deleted_sessions.bytes,
        report.leftovers.files,
        report.leftovers.bytes,
        report.total.files,
        report.total.bytes,
        report.skipped
    ))
}

/// Progress on stderr for a command that runs longer than a second, drawn only on a
/// terminal (nothing when stderr is a file or a pipe) and cleared when it ends.
fn terminal_progress() -> Progress {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !std::io::stderr().is_terminal() {
        return Progress::none();
    }
    let start = std::time::Instant::now();
    let drawn = AtomicBool::new(false);
    Progress::new(move |step| {
        let mut err = std::io::stderr().lock();
        if step.done >= step.total {
            if drawn.load(Ordering::Relaxed) {
                let _ = write!(err, "\r\x1b[2K");
            }
        } else if start.elapsed() >= std::time::Duration::from_secs(1) {
            drawn.store(true, Ordering::Relaxed);
            let _ = write!(err, "\r\x1b[2K{} {}/{}", step.what, step.done, step.total);
        }
        let _ = err.flush();
    })
}

async fn session_show(config: Config, json: bool, id: SessionId) -> Result<()> {
    let store = Store::open_read_only(config).await?;
    let session = store.session(id).await?;
    let messages = store.messages(id).await?;
    if json {
        return print_json(&serde_json::json!({ "session": session, "messages": messages }));
    }
    let mut text = format!(
        "{}  {}  {}",
        session.id,
        session.tools_host,
        title(&session)
    );
    for m in messages {
        text.push_str(&format!(
            "\n  {} {} [{}] {}",
            m.seq, m.role, m.state, m.display_text
        ));
        for r in m.refs {
            text.push_str(&format!(
                "\n      {} ({}, {} bytes)",
                r.uri, r.mime_type, r.size
            ));
        }
    }
    emit(&text)
}

async fn attach(config: Config, json: bool, args: AttachArgs) -> Result<()> {
    if args.name.is_some() && args.files.len() != 1 {
        bail!("--name names one upload: give exactly one FILE with it");
    }
    // Every file is read before anything is stored, so an unreadable one leaves no
    // upload behind.
    let mut uploads = Vec::with_capacity(args.files.len());
    for file in args.files {
        uploads.push(Upload::read_file(file, args.name.clone()).await?);
    }
    let store = Store::open_existing(config).await?;
    let stored = store.attach_all(args.session, uploads).await?;
    if json {
        print_json(&stored)
    } else {
        let uris: Vec<String> = stored.iter().map(|s| s.uri.to_string()).collect();
        emit(&uris.join("\n"))
    }
}

async fn send(config: Config, json: bool, args: SendArgs) -> Result<()> {
    let attach = args
        .attach
        .iter()
        .map(|text| AttachmentUri::parse(text).map_err(Error::from))
        .collect::<Result<Vec<_>, _>>()?;
    let store = Store::open_existing(config).await?;
    let outgoing = Outgoing {
        role: args.role,
        text: args.text,
        expanded: args.expanded,
        transcript: args.transcript,
        attach,
        mid_turn: args.mid_turn,
    };
    let message = store.send(args.session, outgoing).await?;
    if json {
        print_json(&serde_json::json!({ "id": message.id }))
    } else {
        emit(&message.id.to_string())
    }
}

/// Every line is read and checked before the store is opened, and the store checks
/// the whole batch before it writes: a bad line stores nothing and is named by its
/// number. Blank lines are skipped but still counted.
async fn record(config: Config, json: bool, args: RecordArgs) -> Result<()> {
    use std::io::BufRead;
    let mut updates = Vec::new();
    let mut lines = Vec::new();
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("cannot read standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        let update = sessionstore::turns::parse_line(&line, args.session).map_err(|refusal| {
            Error::UpdateRefused {
                line: n + 1,
                refusal,
            }
        })?;
        updates.push(update);
        lines.push(n + 1);
    }
    let store = Store::open_existing(config).await?;
    let recorded = match store.record(args.session, updates).await {
        Err(Error::UpdateRefused { line, refusal }) => Err(Error::UpdateRefused {
            line: lines[line - 1],
            refusal,
        }),
        other => other,
    }?;
    if json {
        print_json(&recorded)
    } else {
        emit(&format!(
            "recorded {} updates into {} items",
            recorded.recorded,
            recorded.items.len()
        ))
    }
}

async fn dispatch(config: Config, args: DispatchArgs) -> Result<()> {
    let store = Store::open_read_only(config).await?;
    let format = match args.format {
        DispatchFormat::FocusHint => {
            // The hint never sees attachments, so none is read for it.
            let message = store.select(args.session, args.message).await?;
            return print_json(&serde_json::json!({ "hint": focus::focus_hint_for(&message) }));
        }
        DispatchFormat::Acp => Format::AcpBlocks,
        DispatchFormat::Openai => Format::OpenaiChat,
        DispatchFormat::OpenaiResponses => Format::OpenaiResponses,
    };
    let dispatched = store
        .dispatch_parts(args.session, args.message, mode(args.strict), Memo::new())
        .await?;
    let mut out = output(format, args.session, &args.model.model)?;
    out.message(&dispatched)
        .context("cannot write the output")?;
    finish(out, format)
}

async fn drain(config: Config, args: DrainArgs) -> Result<()> {
    let store = Store::open_existing(config).await?;
    let drained = store
        .prepare_drain_parts(args.session, mode(args.strict), Memo::new())
        .await?;
    // Delivered means handed on: the messages are marked only after the whole output
    // was written and flushed.
    let format = args.format.into();
    let mut out = output(format, args.session, &args.model.model)?;
    for m in &drained {
        out.message(m).context("cannot write the output")?;
    }
    finish(out, format)?;
    if !drained.is_empty() {
        let ids = drained.iter().map(|d| d.message.id).collect();
        store.mark_delivered(args.session, ids).await?;
    }
    Ok(())
}

async fn restore(config: Config, args: RestoreArgs) -> Result<()> {
    // This process has opened no store yet: the restore is in a fresh one.
    let store = Store::open_read_only(config).await?;
    // A session that cannot be restored (unknown, or tables that disagree with the
    // log) is refused here, before anything is written.
    let mut stream = store.restore_stream(args.session, args.memo_budget).await?;
    let format = args.format.into();
    let mut out = output(format, args.session, &args.model.model)?;
    while let Some(item) = stream.next().await {
        out.item(&item?).context("cannot write the output")?;
    }
    finish(out, format)
}

async fn events(config: Config, args: EventsArgs) -> Result<()> {
    let store = Store::open_read_only(config).await?;
    let lines = store
        .events(args.session)
        .await?
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()?;
    emit(&lines.join("\n"))
}

/// Prints the report; non-zero when it found a problem.
async fn verify(config: Config, json: bool) -> Result<ExitCode> {
    let store = Store::open_read_only(config).await?;
    let report = store.verify().await?;
    if json {
        print_json(&report)?;
    } else {
        let mut lines: Vec<String> = report
            .problems
            .iter()
            .map(|p| format!("problem: {p}"))
            .collect();
        lines.push(format!(
            "{} sessions, {} messages, {} events: {}",
            report.sessions,
            report.messages,
            report.events,
            if report.ok() {
                "ok".to_owned()
            } else {
                format!("{} problems", report.problems.len())
            }
        ));
        emit(&lines.join("\n"))?;
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints the probe's report (one line per check, or JSON); non-zero when a check failed.
#[cfg(feature = "probe")]
async fn probe(json: bool) -> Result<ExitCode> {
    let report = sessionstore::run_probe().await?;
    if json {
        print_json(&report)?;
    } else {
        emit(&report.to_string())?;
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
