//! The `sessionstore` command line: argument parsing, configuration from flags and
//! environment, and printing. All behaviour lives in the library; errors become one
//! line on stderr and a non-zero exit, and arguments are checked before any database
//! is opened, so a refused command writes nothing.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_client_protocol_schema::v1::ContentBlock;
use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use sessionstore::attachments::MAX_ATTACHMENT_BYTES;
use sessionstore::dispatch::{self, DEFAULT_MEMO_BUDGET, Memo, Mode};
use sessionstore::model::{Role, ToolsHost};
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{Config, Error, MessageId, SessionId, Store, db, focus, openai, probe};

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
    Migrate {
        /// Report what would be applied without writing anything
        #[arg(long)]
        dry_run: bool,
    },
    /// Create, list and show sessions
    #[command(subcommand)]
    Session(SessionCommand),
    /// Store files as attachments of a session
    Attach {
        #[arg(long, value_parser = parse_session)]
        session: SessionId,
        /// The upload's own name, for a single file
        #[arg(long)]
        name: Option<String>,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Persist a message with its attachment references
    Send {
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
        #[arg(long, value_enum, default_value_t = SendRole::User)]
        role: SendRole,
    },
    /// Print what the model gets for one user message (default: the latest delivered)
    Dispatch {
        #[arg(long, value_parser = parse_session)]
        session: SessionId,
        /// A message id as printed by `send` (the id, or the whole `{"id": ...}`)
        #[arg(long, value_parser = parse_message)]
        message: Option<MessageId>,
        /// Fail on an unreadable attachment instead of leaving it out
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Deliver the queued mid-turn messages, in order, and mark them delivered
    Drain {
        #[arg(long, value_parser = parse_session)]
        session: SessionId,
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Open a session in a fresh store and print its model-bound history
    Restore {
        #[arg(long, value_parser = parse_session)]
        session: SessionId,
        /// How much encoded content the replay keeps for reuse (like 64MiB, 512KiB,
        /// 1GiB or plain bytes); files it evicts are read again when needed
        #[arg(long, value_name = "SIZE", value_parser = dispatch::parse_byte_size,
              default_value_t = DEFAULT_MEMO_BUDGET)]
        memo_budget: u64,
        #[command(flatten)]
        output: Output,
    },
    /// Print a session's event log, one JSON object a line
    Events {
        #[arg(long, value_parser = parse_session)]
        session: SessionId,
    },
    /// Check the database's integrity and its tables against the event log
    Verify,
    /// Run the isolated Store → Session → OpenAI request probe
    Probe,
}

/// What a model-bound command prints.
#[derive(Args)]
struct Output {
    #[arg(long, value_enum, default_value_t = Format::Acp)]
    format: Format,
    /// The model named in OpenAI requests
    #[arg(long, default_value = "gpt-4o")]
    model: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// ACP content blocks
    Acp,
    /// an OpenAI Chat Completions request
    Openai,
    /// an OpenAI Responses API request
    OpenaiResponses,
    /// the Vision Bridge focus hint (dispatch only)
    FocusHint,
}

/// The roles `send` takes: system prompts are the daemon's, not a user's to store.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SendRole {
    User,
    Assistant,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HostArg {
    Local,
    Ssh,
    Managed,
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Create a session
    New {
        #[arg(long)]
        title: Option<String>,
        /// Where the session's tools run
        #[arg(long, value_enum, default_value_t = HostArg::Local)]
        tools_host: HostArg,
    },
    /// List sessions
    List,
    /// Show a session and its messages
    Show {
        #[arg(value_parser = parse_session)]
        id: SessionId,
    },
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
            ExitCode::FAILURE
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
            eprintln!("error: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line. (Library errors end with their own cause
/// and report no further `source`, so the chain holds each cause once.)
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace(['\n', '\r'], " ")
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

/// A conversation in the chosen model-request format, as one JSON line.
fn render(
    format: Format,
    model: &str,
    conversation: &[(Role, Vec<ContentBlock>)],
) -> Result<String> {
    Ok(match format {
        Format::Acp => {
            let blocks: Vec<&ContentBlock> = conversation.iter().flat_map(|(_, b)| b).collect();
            serde_json::to_string(&blocks)?
        }
        Format::Openai => serde_json::to_string(&openai::chat_request(model, conversation))?,
        Format::OpenaiResponses => {
            serde_json::to_string(&openai::responses_request(model, conversation))?
        }
        Format::FocusHint => bail!("--format focus-hint is for dispatch only"),
    })
}

fn conversation(dispatched: &[Dispatched]) -> Vec<(Role, Vec<ContentBlock>)> {
    dispatched
        .iter()
        .map(|d| (d.message.role, d.blocks.clone()))
        .collect()
}

fn title(s: &sessionstore::model::Session) -> &str {
    s.title.as_deref().unwrap_or("(untitled)")
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.global.json;
    if matches!(cli.command, Command::Probe) {
        // The probe builds its own store in a temporary directory: no flag, variable
        // or data directory applies, so none is looked up.
        return print_probe(json).await;
    }
    let config = cli.global.config()?;
    match cli.command {
        Command::Migrate { dry_run } => {
            let report = if dry_run {
                db::schema::plan(&config.db_path)?
            } else {
                let path = config.db_path.clone();
                tokio::task::spawn_blocking(move || db::migrate(&path)).await??
            };
            if json {
                print_json(&report)?;
            } else if dry_run && !report.pending.is_empty() {
                emit(&format!(
                    "would apply {}; schema at version {}",
                    report.pending.join(", "),
                    report.current
                ))?;
            } else if report.applied.is_empty() {
                emit(&format!(
                    "nothing to apply; schema at version {}",
                    report.current
                ))?;
            } else {
                emit(&format!(
                    "applied {}; schema at version {}",
                    report.applied.join(", "),
                    report.current
                ))?;
            }
        }
        Command::Session(SessionCommand::New { title, tools_host }) => {
            let host = match tools_host {
                HostArg::Local => ToolsHost::Local,
                HostArg::Ssh => ToolsHost::Ssh,
                HostArg::Managed => ToolsHost::Managed,
            };
            let store = Store::open(config).await?;
            let session = store.create_session(title, host).await?;
            if json {
                print_json(&serde_json::json!({ "id": session.id }))?;
            } else {
                emit(&session.id.to_string())?;
            }
        }
        Command::Session(SessionCommand::List) => {
            // Listing never creates a database: with none yet, there is nothing to list.
            let sessions = match Store::open_existing(config).await {
                Ok(store) => store.list_sessions().await?,
                Err(Error::NoDatabase(_)) => vec![],
                Err(e) => return Err(e.into()),
            };
            if json {
                print_json(&sessions)?;
            } else {
                for s in &sessions {
                    emit(&format!("{}  {}  {}", s.id, s.tools_host, title(s)))?;
                }
            }
        }
        Command::Session(SessionCommand::Show { id }) => {
            let store = Store::open_existing(config).await?;
            let session = store.session(id).await?;
            let messages = store.messages(id).await?;
            if json {
                print_json(&serde_json::json!({ "session": session, "messages": messages }))?;
            } else {
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
                emit(&text)?;
            }
        }
        Command::Attach {
            session,
            name,
            files,
        } => {
            if name.is_some() && files.len() != 1 {
                bail!("--name names one upload: give exactly one FILE with it");
            }
            // Every file is read before anything is stored, so an unreadable one
            // leaves no upload behind.
            let mut uploads = Vec::with_capacity(files.len());
            for file in &files {
                let meta = std::fs::metadata(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                if !meta.is_file() {
                    bail!("cannot attach {}: not a regular file", file.display());
                }
                if meta.len() > MAX_ATTACHMENT_BYTES {
                    bail!(
                        "cannot attach {}: it is {} bytes, over the {MAX_ATTACHMENT_BYTES}-byte limit",
                        file.display(),
                        meta.len()
                    );
                }
                let bytes = std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                let upload = match &name {
                    Some(n) => n.clone(),
                    None => file
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                };
                uploads.push((upload, bytes));
            }
            let store = Store::open_existing(config).await?;
            let stored = store.attach_all(session, uploads).await?;
            if json {
                print_json(&stored)?;
            } else {
                let uris: Vec<String> = stored.iter().map(|s| s.uri.to_string()).collect();
                emit(&uris.join("\n"))?;
            }
        }
        Command::Send {
            session,
            text,
            attach,
            mid_turn,
            expanded,
            transcript,
            role,
        } => {
            let role = match role {
                SendRole::User => Role::User,
                SendRole::Assistant => Role::Assistant,
            };
            let store = Store::open_existing(config).await?;
            let message = store
                .send(
                    session,
                    Outgoing {
                        role,
                        text,
                        expanded,
                        transcript,
                        attach,
                        mid_turn,
                    },
                )
                .await?;
            if json {
                print_json(&serde_json::json!({ "id": message.id }))?;
            } else {
                emit(&message.id.to_string())?;
            }
        }
        Command::Dispatch {
            session,
            message,
            strict,
            output: Output { format, model },
        } => {
            let store = Store::open_existing(config).await?;
            if format == Format::FocusHint {
                // The hint never sees attachments, so none is read for it.
                let message = store.select(session, message).await?;
                print_json(&serde_json::json!({ "hint": focus::focus_hint_for(&message) }))?;
            } else {
                let dispatched = store
                    .dispatch(session, message, mode(strict), Memo::new())
                    .await?;
                emit(&render(format, &model, &conversation(&[dispatched]))?)?;
            }
        }
        Command::Drain {
            session,
            strict,
            output: Output { format, model },
        } => {
            if format == Format::FocusHint {
                bail!("--format focus-hint is for dispatch only");
            }
            let store = Store::open_existing(config).await?;
            let drained = store
                .prepare_drain(session, mode(strict), Memo::new())
                .await?;
            // Delivered means handed on: the messages are marked only after the whole
            // output was written and flushed.
            emit(&render(format, &model, &conversation(&drained))?)?;
            if !drained.is_empty() {
                let ids = drained.iter().map(|d| d.message.id).collect();
                store.mark_delivered(session, ids).await?;
            }
        }
        Command::Restore {
            session,
            memo_budget,
            output: Output { format, model },
        } => {
            if format == Format::FocusHint {
                bail!("--format focus-hint is for dispatch only");
            }
            // This process has opened no store yet: the restore is in a fresh one.
            let store = Store::open_existing(config).await?;
            let restored = store.restore_with_budget(session, memo_budget).await?;
            if format == Format::Acp {
                print_json(&restored)?;
            } else {
                emit(&render(format, &model, &conversation(&restored.messages))?)?;
            }
        }
        Command::Events { session } => {
            let store = Store::open_existing(config).await?;
            let lines = store
                .events(session)
                .await?
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<_>, _>>()?;
            emit(&lines.join("\n"))?;
        }
        Command::Verify => {
            let store = Store::open_existing(config).await?;
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
            if !report.ok() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Probe => {
            unreachable!("run returns the probe's report before reading any configuration")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the probe's report (one line per check, or JSON); non-zero when a check failed.
async fn print_probe(json: bool) -> Result<ExitCode> {
    let report = probe::run_probe().await?;
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
