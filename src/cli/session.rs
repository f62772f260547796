//! `session new|list|show|rename|fork`: argument types and printing. Human output shows
//! stored text escaped, one line a row, long text cut with a marker; `--json` prints
//! it whole. Never changes a session except through `Store`.

use anyhow::Result;
use clap::Subcommand;

use sessionstore::attachments::human_size;
use sessionstore::model::{Session, ToolsHost};
use sessionstore::{Config, Error, SessionId, Store};

use super::output::{TEXT_CHARS, TITLE_CHARS, cell, emit, print_json};
use super::parse_session;

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Create a session and print its id
    New {
        /// The session's title; without one, the first message names it
        #[arg(long, value_name = "TITLE")]
        title: Option<String>,
        /// Where the session's tools run
        #[arg(long, default_value = "local", value_parser = parse_tools_host())]
        tools_host: ToolsHost,
    },
    /// List sessions, one a line: id, tools host, title
    List,
    /// Show a session and its messages, one a line
    Show {
        /// The session's id
        #[arg(value_name = "ID", value_parser = parse_session)]
        id: SessionId,
    },
    /// Make a new session from a session's delivered history, up to one message, with
    /// its own copies of the attachments
    Fork {
        /// The session to fork
        #[arg(value_name = "ID", value_parser = parse_session)]
        id: SessionId,
        /// The last message to take (default: all delivered history)
        #[arg(long, value_name = "MESSAGE", value_parser = super::parse_message)]
        at: Option<sessionstore::MessageId>,
        /// The fork's title (default: the origin's)
        #[arg(long, value_name = "TITLE")]
        title: Option<String>,
    },
    /// Give a session a new title
    Rename {
        /// The session's id
        #[arg(value_name = "ID", value_parser = parse_session)]
        id: SessionId,
        /// The new title
        #[arg(value_name = "TITLE")]
        title: String,
    },
}

/// `local`, `ssh` or `managed`, listed in help and parsed by the library's own names.
fn parse_tools_host() -> impl clap::builder::TypedValueParser<Value = ToolsHost> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["local", "ssh", "managed"])
        .try_map(|s| s.parse::<ToolsHost>())
}

pub async fn run(config: Config, json: bool, command: SessionCommand) -> Result<()> {
    match command {
        SessionCommand::New { title, tools_host } => new(config, json, title, tools_host).await,
        SessionCommand::List => list(config, json).await,
        SessionCommand::Show { id } => show(config, json, id).await,
        SessionCommand::Rename { id, title } => rename(config, json, id, title).await,
        SessionCommand::Fork { id, at, title } => {
            super::lifecycle::fork(config, json, id, at, title).await
        }
    }
}

fn title(s: &Session) -> String {
    match &s.title {
        Some(t) => cell(t, TITLE_CHARS),
        None => "(untitled)".to_owned(),
    }
}

async fn new(
    config: Config,
    json: bool,
    title: Option<String>,
    tools_host: ToolsHost,
) -> Result<()> {
    let store = Store::open(config).await?;
    tracing::info!("using database {:?}", store.config().db_path);
    let session = store.create_session(title, tools_host).await?;
    if json {
        print_json(&serde_json::json!({ "id": session.id }))
    } else {
        emit(&session.id.to_string())
    }
}

async fn list(config: Config, json: bool) -> Result<()> {
    // Listing never creates a database: with none yet, there is nothing to list.
    let sessions = match Store::open_read_only(config).await {
        Ok(store) => store.list_sessions().await?,
        Err(Error::NoDatabase(_)) => vec![],
        Err(e) => return Err(e.into()),
    };
    if json {
        return print_json(&sessions);
    }
    let rows: Vec<String> = sessions
        .iter()
        .map(|s| format!("{}  {}  {}", s.id, s.tools_host, title(s)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    emit(&rows.join("\n"))
}

async fn show(config: Config, json: bool, id: SessionId) -> Result<()> {
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
            m.seq,
            m.role,
            m.state,
            cell(&m.display_text, TEXT_CHARS)
        ));
        for r in m.refs {
            text.push_str(&format!(
                "\n      {} ({}, {})",
                r.uri,
                cell(&r.mime_type, TITLE_CHARS),
                human_size(r.size)
            ));
        }
    }
    emit(&text)
}

async fn rename(config: Config, json: bool, id: SessionId, title: String) -> Result<()> {
    let store = Store::open_existing(config).await?;
    store.rename_session(id, title).await?;
    let session = store.session(id).await?;
    if json {
        print_json(&serde_json::json!({ "id": session.id, "title": session.title }))
    } else {
        emit(&format!("{}  {}", session.id, self::title(&session)))
    }
}
