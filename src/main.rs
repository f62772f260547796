//! The `sessionstore` command line: argument types, and one function per command; the
//! behaviour lives in the library. Arguments are checked before any database is
//! opened, so a refused command writes nothing.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Write;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use cli::attachment::{AttachArgs, AttachmentCommand};
use cli::errors::{EXIT_CODES, Usage};
use cli::output::{document, emit, print_json, terminal_line};
use cli::paths::Global;
use cli::send::SendArgs;
use cli::session::SessionCommand;
use cli::{parse_message, parse_session};
use sessionstore::dispatch::{self, DEFAULT_MEMO_BUDGET, Memo, Mode};
use sessionstore::format::{Format, StreamWriter};
use sessionstore::maintenance::{self, Migration};
use sessionstore::restore::Replay;
use sessionstore::store::{Access, PageQuery};
use sessionstore::{Backup, Config, EntryId, MessageId, SessionId, Store, focus};

#[derive(Parser)]
#[command(
    name = "sessionstore",
    version,
    about = "The backing store of an agent daemon's restorable sessions",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending schema migrations, and say which database
    Migrate(MigrateArgs),
    /// Create, list, show and rename sessions
    #[command(subcommand)]
    Session(SessionCommand),
    /// Store files as attachments of a session
    Attach(AttachArgs),
    /// List a session's attachments, or write one out
    #[command(subcommand)]
    Attachment(AttachmentCommand),
    /// Persist a message with its attachment references
    Send(SendArgs),
    /// Record the agent's side of a turn: ACP session updates from stdin, one JSON a line
    Record(cli::record::RecordArgs),
    /// Print what the model gets for one user message (default: the latest delivered);
    /// always JSON, so --json changes nothing
    Dispatch(DispatchArgs),
    /// Deliver the queued mid-turn messages, in order, and mark them delivered; always
    /// JSON, so --json changes nothing
    Drain(DrainArgs),
    /// Open a session in a fresh store and print its model-bound history; always JSON,
    /// so --json changes nothing
    Restore(RestoreArgs),
    /// Print a session's event log, one JSON object a line (--json changes nothing)
    Events(EventsArgs),
    /// Check the database's integrity and its tables against the event log
    Verify(cli::verify::VerifyArgs),
    /// Remove, under the configured root, uploads no message refers to, deleted
    /// sessions' folders and killed uploads' temporary files
    Gc(cli::lifecycle::GcArgs),
    /// Find the secrets already stored (before redaction, or with --redact off) and
    /// replace them in place by [REDACTED:<kind>]: events, rows and search entries;
    /// attachment files are never rewritten
    Redact(cli::lifecycle::RedactArgs),
    /// Print where the database and attachment roots are, and where each setting came
    /// from (flag, environment or default)
    Paths,
    /// Print a shell completion script: source it, or install it where your shell
    /// looks for completions
    Completions {
        /// The shell to complete for
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Run the isolated Store → Session → OpenAI request probe, in a temporary
    /// directory of its own: --attachments-root, --legacy-root, a --db file and their
    /// variables do not apply, and the flags are refused; --db postgres://… runs it in
    /// a schema of its own on that server, dropped at the end
    // Without its feature a command stays in the grammar, hidden, so that running it
    // says which feature it needs rather than that there is no such command.
    #[cfg_attr(not(feature = "probe"), command(hide = true))]
    Probe,
    /// Full-text search over titles, messages and recorded agent text, best first
    Search(cli::lifecycle::SearchArgs),
    /// What sessions cost: turns, tokens by kind, the latest cost and context
    Usage(cli::usage::UsageArgs),
    /// Write one session to a file: a self-contained archive, or a markdown transcript
    Export(cli::lifecycle::ExportArgs),
    /// Restore an exported archive as a new session
    Import(cli::lifecycle::ImportArgs),
    /// Serve the store as an ACP agent over standard input and output: the proxy with
    /// no agent behind it, each prompt recorded and its turn ended
    #[cfg_attr(not(feature = "acp"), command(hide = true))]
    Acp(AcpArgs),
    /// Run AGENT behind the store as an ACP proxy on standard input and output: an
    /// editor starts this as its agent, and every session it opens is recorded,
    /// restorable, and given attachment paths the model can use. With no AGENT, a
    /// proxy in a conductor's chain, in front of the components after it
    #[cfg_attr(not(feature = "acp"), command(hide = true))]
    Proxy(ProxyArgs),
}

#[derive(Args)]
struct ProxyArgs {
    /// How many bytes of attachment contents a fresh agent session is given with the
    /// conversation it is told of (paths are always given)
    #[arg(long, value_name = "SIZE", value_parser = dispatch::parse_byte_size, default_value = "256KiB")]
    restored_content: u64,
    /// End a turn whose agent sent nothing for this long (like 90s, 10m) with an
    /// error to the client, marked failed; session/cancel works before it
    /// [default: no limit]
    #[arg(long, value_name = "DURATION", value_parser = sessionstore::lifecycle::parse_duration)]
    agent_timeout: Option<std::time::Duration>,
    /// Relay the agent's updates without recording them: the baseline of the
    /// streaming benchmarks (BENCHMARKS.md), not for use
    #[arg(long, hide = true)]
    relay_only: bool,
    /// The agent and its arguments, after `--`; with none, the proxy is a component
    /// of a conductor's chain, and its successor there is the agent
    #[arg(last = true, value_name = "AGENT")]
    agent: Vec<std::ffi::OsString>,
}

#[derive(Args)]
struct AcpArgs {
    /// The working directory of a session whose client gives none (the store keeps
    /// none for it) [default: the current directory]
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
}

#[derive(Args)]
struct MigrateArgs {
    /// Report what would be applied without writing anything
    #[arg(long, conflicts_with_all = ["encrypt", "rekey"])]
    dry_run: bool,
    /// Upgrade without first copying the database to `<db>.v<N>.bak`
    #[arg(long)]
    no_backup: bool,
    /// Encrypt a plain SQLite database with the key of --key-file, first (feature
    /// `encryption`); nothing else may have it open
    #[cfg_attr(not(feature = "encryption"), arg(hide = true))]
    #[arg(long, conflicts_with = "rekey")]
    encrypt: bool,
    /// Give an encrypted SQLite database the key of --new-key-file instead of the key of
    /// --key-file, first (feature `encryption`); nothing else may have it open
    #[cfg_attr(not(feature = "encryption"), arg(hide = true))]
    #[arg(long)]
    rekey: bool,
    /// The file holding the new key, for --rekey [env: SESSIONSTORE_NEW_KEY_FILE]
    #[cfg_attr(not(feature = "encryption"), arg(hide = true))]
    #[arg(long, value_name = "PATH", requires = "rekey")]
    new_key_file: Option<PathBuf>,
}

#[derive(Args)]
struct DispatchArgs {
    /// The session whose message to dispatch
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// A message id as printed by `send` (the id, or the whole `{"id": ...}`)
    #[arg(long, value_parser = parse_message)]
    message: Option<MessageId>,
    /// Fail on an unreadable attachment instead of leaving it out
    #[arg(long)]
    strict: bool,
    /// What to print
    #[arg(long, value_enum, default_value_t = DispatchFormat::Acp)]
    format: DispatchFormat,
    #[command(flatten)]
    model: ModelArg,
}

#[derive(Args)]
struct DrainArgs {
    /// The session whose queued messages to deliver
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// Fail, delivering nothing, on an unreadable attachment instead of leaving it out
    #[arg(long)]
    strict: bool,
    /// What to print
    #[arg(long, value_enum, default_value_t = DrainFormat::Acp)]
    format: DrainFormat,
    #[command(flatten)]
    model: ModelArg,
}

#[derive(Args)]
struct RestoreArgs {
    /// The session to restore
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// What to print
    #[arg(long, value_enum, default_value_t = RestoreFormat::Acp)]
    format: RestoreFormat,
    #[command(flatten)]
    model: ModelArg,
    /// How much encoded content the replay keeps for reuse (like 64MiB, 512KiB,
    /// 1GiB or plain bytes); files it evicts are read again when needed
    #[arg(long, value_name = "SIZE", value_parser = dispatch::parse_byte_size,
          default_value_t = DEFAULT_MEMO_BUDGET)]
    memo_budget: u64,
    /// Replay only the last N history entries (delivered messages and recorded items,
    /// as --format acp shows them); the output says where it starts
    #[arg(long, value_name = "N", conflicts_with = "from")]
    tail: Option<u64>,
    /// Replay from this message or recorded item id (inclusive); the output says
    /// where it starts
    #[arg(long, value_name = "ID", value_parser = cli::parse_entry)]
    from: Option<EntryId>,
}

#[derive(Args)]
struct EventsArgs {
    /// The session whose events to print
    #[arg(long, value_name = "ID", value_parser = parse_session)]
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

fn mode(strict: bool) -> Mode {
    if strict { Mode::Strict } else { Mode::Degrade }
}

/// Starts writing `format` to stdout, buffered, as each message comes: no whole
/// rendering is ever held.
fn output(format: Format, session: SessionId, model: &str) -> Result<Output> {
    StreamWriter::begin(document()?, format, session, model).context("cannot write the output")
}

type Output = StreamWriter<std::io::BufWriter<std::fs::File>>;

/// Closes the document (with the newline a single JSON document ends with) and
/// flushes, so a closed pipe or a full disk is reported rather than lost.
fn finish(writer: Output, format: Format) -> Result<()> {
    let mut out = writer.finish().context("cannot write the output")?;
    if !format.is_lines() {
        out.write_all(b"\n").context("cannot write the output")?;
    }
    out.flush().context("cannot write the output")
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::errors::usage_error(e),
    };
    // The probe makes attachments unreadable on purpose; the warnings that follow are
    // its scenarios' and not the user's, so it logs errors only unless asked for more.
    let quiet =
        cli.global.quiet || (matches!(cli.command, Command::Probe) && cli.global.verbose == 0);
    cli::logging::init(cli.global.verbose, quiet);
    let json = cli.global.json;
    let quiet_pipe = !matches!(cli.command, Command::Drain(_));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = anyhow::Error::new(e).context("cannot start the async runtime");
            return cli::errors::report(&e, json, quiet_pipe);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => cli::errors::report(&e, json, quiet_pipe),
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.global.json;
    match cli.command {
        #[cfg(not(feature = "probe"))]
        Command::Probe => return Err(missing_feature("probe", "probe")),
        #[cfg(not(feature = "acp"))]
        Command::Acp(_) => return Err(missing_feature("acp", "acp")),
        #[cfg(not(feature = "acp"))]
        Command::Proxy(_) => return Err(missing_feature("proxy", "acp")),
        #[cfg(feature = "probe")]
        Command::Probe => {
            // The probe builds its own store in a temporary directory: no flag,
            // variable or data directory applies, so a flag that names one is a
            // mistake rather than something to ignore. The one exception is a
            // PostgreSQL server given with --db, where it makes a schema of its own.
            let server = match &cli.global.db {
                Some(sessionstore::config::Database::Postgres(url)) => Some(url.as_str()),
                _ => None,
            };
            if cli.global.key_file.is_some() {
                return Err(Usage(
                    "probe makes a key of its own for its database: --key-file does not apply to it"
                        .into(),
                )
                .into());
            }
            if cli.global.names_a_location() && (server.is_none() || cli.global.names_a_root()) {
                return Err(Usage(
                    "probe runs in a temporary directory of its own: \
                     --db, --attachments-root and --legacy-root do not apply to it \
                     (but --db postgres://… runs it in a schema of its own on that server)"
                        .into(),
                )
                .into());
            }
            return probe(json, server).await;
        }
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "sessionstore", &mut out);
            return Ok(ExitCode::SUCCESS);
        }
        Command::Paths => {
            cli::paths::paths(&cli.global)?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let config = cli.global.config()?;
    match cli.command {
        Command::Migrate(args) => migrate(config, json, args).await?,
        Command::Session(command) => cli::session::run(config, json, command).await?,
        Command::Attach(args) => cli::attachment::attach(config, json, args).await?,
        Command::Attachment(command) => cli::attachment::run(config, json, command).await?,
        Command::Send(args) => cli::send::send(config, json, args).await?,
        Command::Record(args) => cli::record::record(config, json, args).await?,
        Command::Dispatch(args) => dispatch(config, args).await?,
        Command::Drain(args) => drain(config, args).await?,
        Command::Restore(args) => restore(config, args).await?,
        Command::Events(args) => events(config, args).await?,
        Command::Verify(args) if args.repair => return cli::verify::repair(config, json).await,
        Command::Verify(_) => {
            return cli::verify::verify(config, json, cli.global.key_path()).await;
        }
        #[cfg(feature = "acp")]
        Command::Acp(args) => acp(config, args).await?,
        #[cfg(feature = "acp")]
        Command::Proxy(args) => proxy(config, args).await?,
        Command::Search(args) => cli::lifecycle::search(config, json, args).await?,
        Command::Usage(args) => cli::usage::usage(config, json, args).await?,
        Command::Export(args) => cli::lifecycle::export(config, json, args).await?,
        Command::Import(args) => cli::lifecycle::import(config, json, args).await?,
        Command::Gc(args) => cli::lifecycle::gc(config, json, args).await?,
        Command::Redact(args) => cli::lifecycle::redact(config, json, args).await?,
        #[cfg(not(feature = "acp"))]
        Command::Acp(_) | Command::Proxy(_) => {
            unreachable!("refused above, before any configuration is read")
        }
        Command::Probe | Command::Completions { .. } | Command::Paths => {
            unreachable!("handled above, before any configuration is read")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A command of a feature this binary was built without: a usage error (exit 2)
/// naming the feature.
#[cfg(any(not(feature = "probe"), not(feature = "acp")))]
fn missing_feature(command: &str, feature: &str) -> anyhow::Error {
    Usage(format!(
        "`sessionstore {command}` needs the `{feature}` feature, which this sessionstore \
         was built without (cargo build --features {feature})"
    ))
    .into()
}

/// Serves until the client closes standard input: the proxy with no agent behind.
/// Standard output carries the protocol alone.
#[cfg(feature = "acp")]
async fn acp(config: Config, args: AcpArgs) -> Result<()> {
    use sessionstore::acp::proxy::{Behind, ProxyOptions, run_stdio};
    let cwd = match args.cwd {
        // ACP paths are absolute, so a relative one is taken from here.
        Some(cwd) => std::path::absolute(&cwd)
            .with_context(|| format!("cannot make {} absolute", cwd.display()))?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let store = Store::open(config).await?;
    run_stdio(store, ProxyOptions::new(Behind::Nothing, cwd))
        .await
        .context("the ACP connection failed")
}

/// Runs the agent behind the store until the client closes standard input. Standard
/// output carries only the protocol.
#[cfg(feature = "acp")]
async fn proxy(config: Config, args: ProxyArgs) -> Result<()> {
    use sessionstore::acp::proxy::{AgentCommand, Behind, ProxyOptions, run_stdio};
    let mut agent = args.agent.into_iter();
    // No agent: a component of a conductor's chain, whose successor is the agent.
    let behind = match agent.next() {
        Some(program) => Behind::Child(AgentCommand {
            program,
            args: agent.collect(),
        }),
        None => Behind::Successor,
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let store = Store::open(config).await?;
    let mut options = ProxyOptions::new(behind, cwd);
    options.restored_content_budget = usize::try_from(args.restored_content).unwrap_or(usize::MAX);
    options.agent_timeout = args.agent_timeout;
    options.record_updates = !args.relay_only;
    run_stdio(store, options)
        .await
        .context("the ACP connection failed")
}

async fn migrate(config: Config, json: bool, args: MigrateArgs) -> Result<()> {
    let backup = if args.no_backup {
        Backup::Skip
    } else {
        Backup::Make
    };
    let report = if (args.encrypt || args.rekey) && !args.dry_run {
        change_key(&config, &args, backup).await?
    } else {
        maintenance::migrate(
            &config,
            Migration {
                backup,
                dry_run: args.dry_run,
            },
        )
        .await?
    };
    if json {
        return print_json(&report);
    }
    let db = terminal_line(&config.database.to_string());
    let db = match report.encryption {
        Some(sessionstore::privacy::KeyChange::Encrypted) => format!("{db}: encrypted;"),
        Some(sessionstore::privacy::KeyChange::Rekeyed) => format!("{db}: given its new key;"),
        None => format!("{db}:"),
    };
    let (what, copy) = if args.dry_run && !report.pending.is_empty() {
        (
            format!("would apply {}", report.pending.join(", ")),
            String::new(),
        )
    } else if report.applied.is_empty() {
        ("nothing to apply".to_owned(), kept(&report))
    } else {
        (
            format!("applied {}", report.applied.join(", ")),
            kept(&report),
        )
    };
    emit(&format!(
        "{db} {what}; schema at version {}{copy}",
        report.current
    ))
}

/// Where the copy taken first is, for `migrate`'s line.
fn kept(report: &sessionstore::MigrationReport) -> String {
    match &report.backup {
        Some(copy) => format!(
            "; the database as it was is kept{} in {}",
            if report.encryption.is_some() {
                ", encrypted,"
            } else {
                ""
            },
            terminal_line(&copy.display().to_string())
        ),
        None => String::new(),
    }
}

/// `migrate --encrypt` (with the key of --key-file) or `migrate --rekey` (from the key
/// of --key-file to that of --new-key-file).
#[cfg(feature = "encryption")]
async fn change_key(
    config: &Config,
    args: &MigrateArgs,
    backup: Backup,
) -> Result<sessionstore::MigrationReport> {
    if config.key.is_none() {
        return Err(Usage(format!(
            "migrate --{} needs --key-file (or SESSIONSTORE_KEY_FILE): the key {}",
            if args.encrypt { "encrypt" } else { "rekey" },
            if args.encrypt {
                "to encrypt the database with"
            } else {
                "the database is encrypted with now"
            }
        ))
        .into());
    }
    if args.encrypt {
        return Ok(maintenance::change_key(config, maintenance::NewKey::Encrypt, backup).await?);
    }
    let new = args
        .new_key_file
        .clone()
        .or_else(|| std::env::var_os("SESSIONSTORE_NEW_KEY_FILE").map(PathBuf::from))
        .ok_or_else(|| {
            Usage(
                "migrate --rekey needs --new-key-file (or SESSIONSTORE_NEW_KEY_FILE): the key \
                 to give the database"
                    .into(),
            )
        })?;
    let new = sessionstore::config::DatabaseKey::read_file(&new)?;
    Ok(maintenance::change_key(config, maintenance::NewKey::Rekey(new), backup).await?)
}

#[cfg(not(feature = "encryption"))]
async fn change_key(
    _: &Config,
    args: &MigrateArgs,
    _: Backup,
) -> Result<sessionstore::MigrationReport> {
    let flag = if args.encrypt { "--encrypt" } else { "--rekey" };
    Err(Usage(format!(
        "`sessionstore migrate {flag}` needs the `encryption` feature, which this \
         sessionstore was built without (cargo build --features encryption)"
    ))
    .into())
}
async fn dispatch(config: Config, args: DispatchArgs) -> Result<()> {
    let store = Store::open_as(config, Access::ReadOnly).await?;
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
        .dispatch(args.session, args.message, mode(args.strict), Memo::new())
        .await?;
    let mut out = output(format, args.session, &args.model.model)?;
    out.message(&dispatched)
        .context("cannot write the output")?;
    finish(out, format)
}

async fn drain(config: Config, args: DrainArgs) -> Result<()> {
    let store = Store::open_as(config, Access::Existing).await?;
    let drained = store
        .drain(
            args.session,
            mode(args.strict),
            Memo::new(),
            sessionstore::store::Drain::Prepare,
        )
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
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let replay = match (args.tail, args.from) {
        (Some(n), _) => Replay::Tail(n),
        (None, Some(entry)) => Replay::From(entry),
        (None, None) => Replay::Whole,
    };
    // The turns are read first: once the stream has started, its dispatch may log a
    // degraded attachment, and a failure after that would make two lines of one error.
    let turns = sessionstore::store::whole(|q| store.turns(args.session, q)).await?;
    let format: Format = args.format.into();
    // A session that cannot be restored (unknown, deleted, or rows that do not read
    // at its start) is refused here, before anything is written; a row that does not
    // read later stops the output there (`verify` names it).
    let mut stream = store
        .restore(args.session, args.memo_budget, replay)
        .await?;
    let mut out = StreamWriter::begin_replay(
        document()?,
        format,
        args.session,
        &args.model.model,
        stream.partial(),
    )
    .context("cannot write the output")?
    // A turn that did not end with `end_turn` is marked in the lines of its replay.
    .marking_turns(turns);
    while let Some(item) = stream.next().await {
        out.item(&item?).context("cannot write the output")?;
    }
    finish(out, format)
}

async fn events(config: Config, args: EventsArgs) -> Result<()> {
    let store = Store::open_as(config, Access::ReadOnly).await?;
    // A page at a time, each event on its line as it is read.
    let mut query = PageQuery::first(sessionstore::lifecycle::MAX_PAGE);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut any = false;
    loop {
        let page = store.events(args.session, query).await?;
        for event in &page.entries {
            any = true;
            writeln!(out, "{}", serde_json::to_string(event)?)
                .context("cannot write the output")?;
        }
        match page.next {
            Some(next) => query = PageQuery::after(Some(next), sessionstore::lifecycle::MAX_PAGE),
            None => break,
        }
    }
    if !any {
        writeln!(out).context("cannot write the output")?;
    }
    out.flush().context("cannot write the output")
}

/// Prints the probe's report (one line per check, or JSON); non-zero when a check failed.
#[cfg(feature = "probe")]
async fn probe(json: bool, server: Option<&str>) -> Result<ExitCode> {
    let report = cli::logging::spinning("probing", async {
        match server {
            None => Ok::<_, anyhow::Error>(sessionstore::run_probe().await?),
            #[cfg(feature = "postgres")]
            Some(server) => Ok(sessionstore::run_probe_on_postgres(server).await?),
            #[cfg(not(feature = "postgres"))]
            Some(_) => Err(anyhow::Error::from(Usage(
                "this sessionstore was built without the `postgres` feature".into(),
            ))),
        }
    })
    .await?;
    if json {
        print_json(&report)?;
    } else {
        emit(&report.to_string())?;
    }
    Ok(cli::errors::status(report.ok()))
}
