//! The `sessionstore` command line: argument parsing, configuration from flags and
//! environment, and printing. All behaviour lives in the library; errors become one
//! line on stderr and a non-zero exit.

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use agent_client_protocol_schema::v1::ContentBlock;
use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Role, ToolsHost};
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{Config, MessageId, SessionId, Store, db, focus, openai, probe};

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

#[derive(Args)]
struct Global {
    /// The SQLite database file [default: <data dir>/sessions.db]
    #[arg(long, global = true, env = "SESSIONSTORE_DB", value_name = "PATH")]
    db: Option<PathBuf>,
    /// Where new uploads are written [default: <data dir>/attachments]
    #[arg(
        long,
        global = true,
        env = "SESSIONSTORE_ATTACHMENTS_ROOT",
        value_name = "DIR"
    )]
    attachments_root: Option<PathBuf>,
    /// An older, read-only attachment root, tried after the configured one (repeatable;
    /// SESSIONSTORE_LEGACY_ROOTS takes a colon-separated list)
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
        #[arg(long)]
        session: String,
        /// The upload's own name, for a single file
        #[arg(long)]
        name: Option<String>,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Persist a message with its attachment references
    Send {
        #[arg(long)]
        session: String,
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
        #[arg(long, default_value = "user", value_name = "user|assistant")]
        role: String,
    },
    /// Print what the model gets for one user message (default: the latest delivered)
    Dispatch {
        #[arg(long)]
        session: String,
        /// A message id as printed by `send`
        #[arg(long)]
        message: Option<String>,
        /// Fail on an unreadable attachment instead of leaving it out
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Deliver the queued mid-turn messages, in order, and mark them delivered
    Drain {
        #[arg(long)]
        session: String,
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Open a session in a fresh store and print its model-bound history
    Restore {
        #[arg(long)]
        session: String,
        #[command(flatten)]
        output: Output,
    },
    /// Print a session's event log, one JSON object a line
    Events {
        #[arg(long)]
        session: String,
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

#[derive(Subcommand)]
enum SessionCommand {
    /// Create a session
    New {
        #[arg(long)]
        title: Option<String>,
        #[arg(long, default_value = "local", value_name = "local|ssh|managed")]
        tools_host: String,
    },
    /// List sessions
    List,
    /// Show a session and its messages
    Show { id: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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

/// The error and its causes on one line. Library errors already name their cause in
/// their own message, so a cause whose text is already there is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace(['\n', '\r'], " ")
}

impl Global {
    fn config(&self) -> Result<Config> {
        // The data directory is looked up only when something still needs it, so
        // explicit paths work where no home directory exists.
        let mut config = match (&self.db, &self.attachments_root) {
            (Some(_), Some(_)) => Config::in_dir(std::path::Path::new("")),
            _ => Config::default_paths()?,
        };
        if let Some(db) = &self.db {
            config.db_path = db.clone();
        }
        if let Some(root) = &self.attachments_root {
            config.roots.configured = root.clone();
        }
        config.roots.legacy = if self.legacy_roots.is_empty() {
            std::env::var_os("SESSIONSTORE_LEGACY_ROOTS")
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

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

fn session_id(text: &str) -> Result<SessionId> {
    Ok(text.parse()?)
}

fn mode(strict: bool) -> Mode {
    if strict { Mode::Strict } else { Mode::Degrade }
}

/// Prints a conversation in the chosen model-request format.
fn print_conversation(
    format: Format,
    model: &str,
    conversation: &[(Role, Vec<ContentBlock>)],
) -> Result<()> {
    match format {
        Format::Acp => {
            let blocks: Vec<&ContentBlock> = conversation.iter().flat_map(|(_, b)| b).collect();
            print_json(&blocks)
        }
        Format::Openai => print_json(&openai::chat_request(model, conversation)),
        Format::OpenaiResponses => print_json(&openai::responses_request(model, conversation)),
        Format::FocusHint => bail!("--format focus-hint is for dispatch only"),
    }
}

fn conversation(dispatched: Vec<Dispatched>) -> Vec<(Role, Vec<ContentBlock>)> {
    dispatched
        .into_iter()
        .map(|d| (d.message.role, d.blocks))
        .collect()
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
            } else if dry_run {
                if report.pending.is_empty() {
                    println!("nothing to apply; schema at version {}", report.current);
                } else {
                    println!(
                        "would apply {}; schema at version {}",
                        report.pending.join(", "),
                        report.current
                    );
                }
            } else if report.applied.is_empty() {
                println!("nothing to apply; schema at version {}", report.current);
            } else {
                println!(
                    "applied {}; schema at version {}",
                    report.applied.join(", "),
                    report.current
                );
            }
        }
        Command::Session(cmd) => {
            let store = Store::open(config).await?;
            match cmd {
                SessionCommand::New { title, tools_host } => {
                    let host: ToolsHost = tools_host.parse()?;
                    let session = store.create_session(title, host).await?;
                    if json {
                        print_json(&serde_json::json!({ "id": session.id }))?;
                    } else {
                        println!("{}", session.id);
                    }
                }
                SessionCommand::List => {
                    let sessions = store.list_sessions().await?;
                    if json {
                        print_json(&sessions)?;
                    } else {
                        for s in sessions {
                            println!(
                                "{}  {}  {}",
                                s.id,
                                s.tools_host,
                                s.title.as_deref().unwrap_or("(untitled)")
                            );
                        }
                    }
                }
                SessionCommand::Show { id } => {
                    let id = session_id(&id)?;
                    let session = store.session(id).await?;
                    let messages = store.messages(id).await?;
                    if json {
                        print_json(
                            &serde_json::json!({ "session": session, "messages": messages }),
                        )?;
                    } else {
                        println!(
                            "{}  {}  {}",
                            session.id,
                            session.tools_host,
                            session.title.as_deref().unwrap_or("(untitled)")
                        );
                        for m in messages {
                            println!("  {} {} [{}] {}", m.seq, m.role, m.state, m.display_text);
                            for r in m.refs {
                                println!("      {} ({}, {} bytes)", r.uri, r.mime_type, r.size);
                            }
                        }
                    }
                }
            }
        }
        Command::Attach {
            session,
            name,
            files,
        } => {
            let session = session_id(&session)?;
            if name.is_some() && files.len() != 1 {
                bail!("--name names one upload: give exactly one FILE with it");
            }
            let store = Store::open(config).await?;
            let mut stored = Vec::new();
            for file in files {
                let bytes = std::fs::read(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                let upload = match &name {
                    Some(n) => n.clone(),
                    None => file
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                };
                stored.push(store.attach(session, upload, bytes).await?);
            }
            if json {
                print_json(&stored)?;
            } else {
                for s in stored {
                    println!("{}", s.uri);
                }
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
            let store = Store::open(config).await?;
            let message = store
                .send(
                    session_id(&session)?,
                    Outgoing {
                        role: role.parse()?,
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
                println!("{}", message.id);
            }
        }
        Command::Dispatch {
            session,
            message,
            strict,
            output: Output { format, model },
        } => {
            let message = message.map(|m| m.parse::<MessageId>()).transpose()?;
            let store = Store::open(config).await?;
            let dispatched = store
                .dispatch(
                    session_id(&session)?,
                    message,
                    mode(strict),
                    Arc::new(Memo::new()),
                )
                .await?;
            if format == Format::FocusHint {
                let hint = focus::focus_hint_for(&dispatched.message);
                print_json(&serde_json::json!({ "hint": hint }))?;
            } else {
                print_conversation(format, &model, &conversation(vec![dispatched]))?;
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
            let store = Store::open(config).await?;
            let drained = store
                .drain(session_id(&session)?, mode(strict), Arc::new(Memo::new()))
                .await?;
            print_conversation(format, &model, &conversation(drained))?;
        }
        Command::Restore {
            session,
            output: Output { format, model },
        } => {
            if format == Format::FocusHint {
                bail!("--format focus-hint is for dispatch only");
            }
            // This process has opened no store yet: the restore is in a fresh one.
            let store = Store::open(config).await?;
            let restored = store.restore(session_id(&session)?).await?;
            if format == Format::Acp {
                print_json(&restored)?;
            } else {
                print_conversation(format, &model, &conversation(restored.messages))?;
            }
        }
        Command::Events { session } => {
            let store = Store::open(config).await?;
            for event in store.events(session_id(&session)?).await? {
                print_json(&event)?;
            }
        }
        Command::Verify => {
            let store = Store::open(config).await?;
            let report = store.verify().await?;
            if json {
                print_json(&report)?;
            } else {
                for p in &report.problems {
                    println!("problem: {p}");
                }
                println!(
                    "{} sessions, {} messages, {} events: {}",
                    report.sessions,
                    report.messages,
                    report.events,
                    if report.ok() {
                        "ok".to_owned()
                    } else {
                        format!("{} problems", report.problems.len())
                    }
                );
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
        println!("{report}");
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
