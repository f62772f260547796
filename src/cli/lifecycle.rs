//! `session fork`, `search`, `export` and `import`: argument types and printing, with
//! a spinner while they run. Never forks, searches, packs or unpacks anything itself:
//! the store does, and the archive is checked there.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use sessionstore::{Config, MessageId, SessionId, Store};

use super::logging::spinner;
use super::output::{cell, emit, print_json, terminal_line};
use super::parse_session;

/// How many characters of a snippet a hit's line shows.
const SNIPPET_CHARS: usize = 200;

#[derive(Args)]
pub struct SearchArgs {
    /// FTS5 query: words, "a phrase", AND / OR / NOT, prefix*
    #[arg(value_name = "QUERY")]
    query: String,
    /// Only this session
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: Option<SessionId>,
    /// At most this many hits
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The session to write
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// The file to write (replaced only once the new one is complete)
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    #[arg(long, value_enum, default_value_t = ExportFormat::Tar)]
    format: ExportFormat,
}

/// What `export` writes.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ExportFormat {
    /// a tar archive `import` takes back: manifest.json, then files/<stored name>
    Tar,
    /// a readable transcript, attachments listed by name
    Markdown,
}

#[derive(Args)]
pub struct ImportArgs {
    /// An archive written by `export`
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Keep the archive's session id when no session has it yet
    #[arg(long)]
    keep_id: bool,
}

pub async fn fork(
    config: Config,
    json: bool,
    id: SessionId,
    at: Option<MessageId>,
    title: Option<String>,
) -> Result<()> {
    let store = Store::open_existing(config).await?;
    let progress = spinner("forking");
    let forked = store.fork_session(id, at, title).await;
    progress.finish_and_clear();
    let forked = forked?;
    if json {
        print_json(&serde_json::json!({ "id": forked.session.id }))
    } else {
        emit(&forked.session.id.to_string())
    }
}

/// Human output is one line a hit: session, message (or `title`), snippet escaped.
pub async fn search(config: Config, json: bool, args: SearchArgs) -> Result<()> {
    let store = Store::open_read_only(config).await?;
    let progress = spinner("searching");
    let hits = store.search(args.query, args.session, args.limit).await;
    progress.finish_and_clear();
    let hits = hits?;
    if json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = hits
        .iter()
        .map(|h| {
            format!(
                "{}  {}  {}",
                h.session_id,
                h.message_id.as_deref().unwrap_or("title"),
                cell(&h.snippet, SNIPPET_CHARS)
            )
        })
        .collect();
    emit(&lines.join("\n"))
}

pub async fn export(config: Config, json: bool, args: ExportArgs) -> Result<()> {
    let store = Store::open_read_only(config).await?;
    let progress = spinner("exporting");
    let exported = match args.format {
        ExportFormat::Tar => store.export_archive(args.session, args.out).await,
        ExportFormat::Markdown => store.export_markdown(args.session, args.out).await,
    };
    progress.finish_and_clear();
    let exported = exported?;
    if json {
        return print_json(&exported);
    }
    let mut line = format!(
        "exported {} messages, {} items, {} files",
        exported.messages, exported.items, exported.files
    );
    if !exported.missing.is_empty() {
        line.push_str(&format!(
            "; missing on disk: {}",
            terminal_line(&exported.missing.join(", "))
        ));
    }
    emit(&line)
}

pub async fn import(config: Config, json: bool, args: ImportArgs) -> Result<()> {
    let store = Store::open(config).await?;
    let progress = spinner("importing");
    let imported = store.import_archive(args.file, args.keep_id).await;
    progress.finish_and_clear();
    let imported = imported?;
    if json {
        print_json(&serde_json::json!({ "id": imported.session.id }))
    } else {
        emit(&imported.session.id.to_string())
    }
}
