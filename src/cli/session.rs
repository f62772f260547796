//! `session ...`: argument types and printing. Human output shows stored text escaped
//! and cut (`output::cell`); `--json` prints it whole.

use anyhow::Result;
use clap::Subcommand;
use sessionstore::store::Access;

use sessionstore::attachments::human_size;
use sessionstore::lifecycle::{
    CursorError, DEFAULT_PAGE, ListQuery, MAX_PAGE, SessionCursor, SessionPage,
};
use sessionstore::model::{ArchiveFilter, NewSession, TitleSource, ToolsHost};
use sessionstore::{Config, Error, SessionId, Store};

use super::output::{TEXT_CHARS, TITLE_CHARS, cell, emit, print_id, print_json, title_cell};
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
    /// List sessions, most recently updated first, a page at a time, one a line: id,
    /// updated time, tools host, messages, attachment size, title
    List {
        /// How many sessions a page holds
        #[arg(long, value_name = "N", default_value_t = DEFAULT_PAGE as u64,
              value_parser = clap::value_parser!(u64).range(1..=MAX_PAGE as u64))]
        limit: u64,
        /// Where the page starts: a nextCursor value exactly as a previous page printed it
        /// (it carries the archive filter of its listing)
        #[arg(long, value_name = "C", value_parser = parse_cursor)]
        cursor: Option<SessionCursor>,
        /// Which sessions by archive state: those not archived (the default), both, or
        /// only the archived ones
        #[arg(long, value_name = "WHICH", value_parser = parse_archive_filter())]
        archived: Option<ArchiveFilter>,
    },
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
    /// Archive sessions: kept whole (load, restore, search and usage still reach them),
    /// left out of the default listing; all or nothing, and a session open in a
    /// proxy is refused
    Archive {
        /// The sessions' ids
        #[arg(required = true, value_name = "ID", value_parser = parse_session)]
        ids: Vec<SessionId>,
    },
    /// Bring archived sessions back into the default listing; all or nothing
    Unarchive {
        /// The sessions' ids
        #[arg(required = true, value_name = "ID", value_parser = parse_session)]
        ids: Vec<SessionId>,
    },
    /// Delete sessions: their rows and events (leaving a tombstone) and their folder
    /// under the configured root; files in legacy roots are reported and left
    Delete {
        /// The sessions' ids
        #[arg(required = true, value_name = "ID", value_parser = parse_session)]
        ids: Vec<SessionId>,
        /// Report what would go without changing anything
        #[arg(long)]
        dry_run: bool,
    },
}

fn parse_cursor(text: &str) -> Result<SessionCursor, String> {
    text.parse().map_err(|e: CursorError| e.to_string())
}

/// `exclude`, `include` or `only`, listed in help and parsed by the library's names.
fn parse_archive_filter() -> impl clap::builder::TypedValueParser<Value = ArchiveFilter> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["exclude", "include", "only"])
        .try_map(|s| s.parse::<ArchiveFilter>())
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
        SessionCommand::List {
            limit,
            cursor,
            archived,
        } => list(config, json, limit as usize, cursor, archived).await,
        SessionCommand::Archive { ids } => archive(config, json, ids, true).await,
        SessionCommand::Unarchive { ids } => archive(config, json, ids, false).await,
        SessionCommand::Show { id } => show(config, json, id).await,
        SessionCommand::Rename { id, title } => rename(config, json, id, title).await,
        SessionCommand::Fork { id, at, title } => {
            super::lifecycle::fork(config, json, id, at, title).await
        }
        SessionCommand::Delete { ids, dry_run } => {
            super::lifecycle::delete(config, json, ids, super::lifecycle::dry_run(dry_run)).await
        }
    }
}

async fn new(
    config: Config,
    json: bool,
    title: Option<String>,
    tools_host: ToolsHost,
) -> Result<()> {
    let store = Store::open(config).await?;
    tracing::info!("using database {}", store.config().database);
    let session = store
        .create_session(NewSession {
            title,
            tools_host,
            ..NewSession::default()
        })
        .await?;
    print_id(json, session.id)
}

async fn list(
    config: Config,
    json: bool,
    limit: usize,
    cursor: Option<SessionCursor>,
    archived: Option<ArchiveFilter>,
) -> Result<()> {
    // Listing never creates a database: with none yet, there is nothing to list.
    let page = match Store::open_as(config, Access::ReadOnly).await {
        Ok(store) => {
            let query = ListQuery {
                limit,
                cursor,
                cwd: None,
                archived,
            };
            store.list_sessions(query).await?
        }
        Err(Error::NoDatabase(_)) => SessionPage {
            sessions: vec![],
            next_cursor: None,
        },
        Err(e) => return Err(e.into()),
    };
    if json {
        return print_json(&page);
    }
    let mut rows: Vec<String> = page
        .sessions
        .iter()
        .map(|s| {
            let title = title_cell(s.title.as_deref());
            let archived = if s.archived { "  (archived)" } else { "" };
            format!(
                "{}  {}  {}  {}  {}  {title}{archived}",
                s.id,
                s.updated_at,
                s.tools_host,
                super::output::count(s.messages as usize, "message", "messages"),
                human_size(s.attachment_bytes)
            )
        })
        .collect();
    if let Some(next) = &page.next_cursor {
        rows.push(format!("next page: --cursor {next}"));
    }
    if rows.is_empty() {
        return Ok(());
    }
    emit(&rows.join("\n"))
}

async fn show(config: Config, json: bool, id: SessionId) -> Result<()> {
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let session = store.session(id).await?;
    let messages = sessionstore::store::whole(|q| store.messages(id, None, q)).await?;
    let turns = sessionstore::store::whole(|q| store.turns(id, q)).await?;
    if json {
        let mut shown = serde_json::json!({ "session": session, "messages": messages });
        // Only a session a proxy carried has turns; others print as they always have.
        if !turns.is_empty() {
            shown["turns"] = serde_json::to_value(&turns)?;
        }
        return print_json(&shown);
    }
    let mut text = format!(
        "{}  {}  {}",
        session.id,
        session.tools_host,
        title_cell(session.title.as_deref())
    );
    if session.archived {
        text.push_str("\n  archived");
    }
    if let Some(cwd) = &session.cwd {
        text.push_str(&format!("\n  working directory {}", cell(cwd, TEXT_CHARS)));
    }
    if let Some(agent) = &session.agent {
        text.push_str(&format!(
            "\n  agent {} (its session {})",
            cell(&agent.agent, TITLE_CHARS),
            cell(&agent.session, TITLE_CHARS)
        ));
    }
    // Turns that ended as asked are the usual; the others are worth a line.
    for turn in turns.iter().filter(|t| t.state() != "ended") {
        let why = match &turn.end {
            Some(sessionstore::model::TurnEnd::Failed { reason }) => {
                format!(": {}", cell(reason, TEXT_CHARS))
            }
            None => " (no end recorded: its proxy stopped mid-turn)".to_owned(),
            _ => String::new(),
        };
        text.push_str(&format!(
            "\n  turn at {} {}{why}",
            turn.seq,
            cell(turn.state(), TITLE_CHARS)
        ));
    }
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

/// `session archive` and `session unarchive`: all or nothing. Archiving claims each
/// session first, as a proxy opening it would, so a session open in a proxy is
/// refused before anything changes.
async fn archive(config: Config, json: bool, ids: Vec<SessionId>, archived: bool) -> Result<()> {
    let store = Store::open_as(config, Access::Existing).await?;
    let mut claims = Vec::new();
    if archived {
        for id in &ids {
            if !claims
                .iter()
                .any(|c: &sessionstore::SessionClaim| c.session() == *id)
            {
                claims.push(store.claim_session(*id).await?);
            }
        }
    }
    let changed = store.set_archived(ids.clone(), archived).await?;
    drop(claims);
    if json {
        let rows: Vec<_> = ids
            .iter()
            .zip(&changed)
            .map(|(id, changed)| {
                serde_json::json!({ "id": id, "archived": archived, "changed": changed })
            })
            .collect();
        return print_json(&serde_json::json!({ "sessions": rows }));
    }
    let lines: Vec<String> = ids
        .iter()
        .zip(&changed)
        .map(|(id, changed)| {
            let what = if archived { "archived" } else { "unarchived" };
            match changed {
                true => format!("{what} {id}"),
                false => format!("{id} was already {what}"),
            }
        })
        .collect();
    emit(&lines.join("\n"))
}

async fn rename(config: Config, json: bool, id: SessionId, title: String) -> Result<()> {
    let store = Store::open_as(config, Access::Existing).await?;
    store.set_title(id, title, TitleSource::Explicit).await?;
    let session = store.session(id).await?;
    if json {
        print_json(&serde_json::json!({ "id": session.id, "title": session.title }))
    } else {
        emit(&format!(
            "{}  {}",
            session.id,
            title_cell(session.title.as_deref())
        ))
    }
}
