//! The `sessionstore` command line: argument parsing, configuration from flags and
//! environment, and printing. All behaviour lives in the library; errors become one
//! line on stderr and a non-zero exit.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use sessionstore::model::ToolsHost;
use sessionstore::{Config, SessionId, Store, db};

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
    /// Print a session's event log, one JSON object a line
    Events {
        #[arg(long)]
        session: String,
    },
    /// Check the database's integrity and its tables against the event log
    Verify,
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
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
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

async fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.global.json;
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
    }
    Ok(ExitCode::SUCCESS)
}
