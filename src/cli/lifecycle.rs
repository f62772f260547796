//! `session fork`, `session delete`, `search`, `export`, `import`, `gc` and `redact`:
//! argument types and printing, with a spinner or a progress bar while they run.

use sessionstore::store::Access;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;

use sessionstore::attachments::human_size;
use sessionstore::lifecycle::import::ImportId;
use sessionstore::lifecycle::{
    DeleteOptions, DeletionStatus, Export, GcOptions, Progress, RedactOptions, Run,
};
use sessionstore::{Config, MessageId, SessionId, Store};

use super::logging::{self, spinning};
use super::output::{cell, count, emit, print_id, print_json, terminal_line};
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
    /// Write the text as stored, secrets included: by default every secret found is
    /// replaced by [REDACTED:<kind>], even from a store kept with --redact off
    /// (attachment files are copied byte for byte either way)
    #[arg(long)]
    no_redact: bool,
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
    let store = Store::open_as(config, Access::Existing).await?;
    let forked = spinning("forking", store.fork_session(id, at, title)).await?;
    print_id(json, forked.session.id)
}

/// Human output is one line a hit: session, message (or `title`), snippet escaped.
pub async fn search(config: Config, json: bool, args: SearchArgs) -> Result<()> {
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let hits = spinning(
        "searching",
        store.search(args.query, args.session, args.limit),
    )
    .await?;
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
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let redaction = match args.no_redact {
        true => sessionstore::config::Redaction::Off,
        false => sessionstore::config::Redaction::On,
    };
    let how = Export {
        format: match args.format {
            ExportFormat::Tar => sessionstore::lifecycle::ExportFormat::Archive,
            ExportFormat::Markdown => sessionstore::lifecycle::ExportFormat::Markdown,
        },
        redaction,
    };
    let exported = spinning("exporting", store.export(args.session, args.out, how)).await?;
    if json {
        return print_json(&exported);
    }
    let mut line = format!(
        "exported {}, {}, {}",
        count(exported.messages, "message", "messages"),
        count(exported.items, "item", "items"),
        count(exported.files, "file", "files")
    );
    if !exported.missing.is_empty() {
        line.push_str(&format!(
            "; missing on disk: {}",
            terminal_line(&exported.missing.join(", "))
        ));
    }
    emit(&line)
}

/// `--dry-run` as the library takes it.
pub fn dry_run(flag: bool) -> Run {
    if flag { Run::DryRun } else { Run::Apply }
}

/// The store a command that may be a dry run works on: a dry run only reads, so it
/// never migrates or writes the database; a real run needs one that exists.
async fn open_for(config: Config, run: Run) -> sessionstore::Result<Store> {
    let access = if run.is_dry() {
        Access::ReadOnly
    } else {
        Access::Existing
    };
    Store::open_as(config, access).await
}

pub async fn import(config: Config, json: bool, args: ImportArgs) -> Result<()> {
    let store = Store::open(config).await?;
    let id = if args.keep_id {
        ImportId::Keep
    } else {
        ImportId::New
    };
    let imported = spinning("importing", store.import_archive(args.file, id)).await?;
    print_id(json, imported.session.id)
}

#[derive(Args)]
pub struct GcArgs {
    /// Report what would be removed without removing anything
    #[arg(long)]
    dry_run: bool,
    /// Keep files that changed more recently than this (like 24h, 90m, 7d, 0)
    #[arg(long, value_name = "DURATION", default_value = "24h",
          value_parser = sessionstore::lifecycle::parse_duration)]
    grace: Duration,
}

/// A bar for a long operation's steps, drawn only once it has run for a second (and,
/// like every bar here, only when stdout and stderr are terminals), cleared at the end.
fn progress() -> Progress {
    let start = Instant::now();
    let bar: Mutex<Option<ProgressBar>> = Mutex::new(None);
    Progress::new(move |step| {
        let Ok(mut bar) = bar.lock() else { return };
        if step.done >= step.total {
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
            return;
        }
        if bar.is_none() && start.elapsed() >= Duration::from_secs(1) {
            *bar = Some(logging::bar(step.total, step.what));
        }
        if let Some(bar) = bar.as_ref() {
            bar.set_message(step.what);
            bar.set_position(step.done);
        }
    })
}

pub async fn delete(config: Config, json: bool, ids: Vec<SessionId>, run: Run) -> Result<()> {
    let store = open_for(config, run).await?;
    let options = DeleteOptions {
        run,
        progress: progress(),
    };
    let report = store.delete_sessions(ids, options).await?;
    if json {
        return print_json(&report);
    }
    let mut lines = Vec::new();
    for s in &report.sessions {
        let what = format!(
            "{}, {}, {}, {} ({})",
            count(s.messages as usize, "message", "messages"),
            count(s.items as usize, "item", "items"),
            count(s.events as usize, "event", "events"),
            count(s.files, "file", "files"),
            human_size(s.bytes)
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
                terminal_line(&path.display().to_string())
            ));
        }
    }
    if !report.erased {
        lines.push(
            "note: the deleted rows' space is not reclaimed yet: on SQLite a reader kept \
             the write-ahead log busy and its copy goes at the next checkpoint; on \
             PostgreSQL the vacuum failed and autovacuum will do it"
                .to_owned(),
        );
    }
    emit(&lines.join("\n"))
}

pub async fn gc(config: Config, json: bool, args: GcArgs) -> Result<()> {
    let run = dry_run(args.dry_run);
    let store = open_for(config, run).await?;
    let report = store
        .gc(GcOptions {
            run,
            grace: args.grace,
            progress: progress(),
        })
        .await?;
    if json {
        return print_json(&report);
    }
    emit(&format!(
        "{} {} ({}), {} of deleted sessions ({}, {}), {} ({}): {}, {} in all; \
         left {} alone",
        if report.dry_run {
            "would remove"
        } else {
            "removed"
        },
        count(
            report.unreferenced.files,
            "unreferenced upload",
            "unreferenced uploads"
        ),
        human_size(report.unreferenced.bytes),
        count(report.deleted_session_folders, "folder", "folders"),
        count(report.deleted_sessions.files, "file", "files"),
        human_size(report.deleted_sessions.bytes),
        count(
            report.leftovers.files,
            "upload leftover",
            "upload leftovers"
        ),
        human_size(report.leftovers.bytes),
        count(report.total.files, "file", "files"),
        human_size(report.total.bytes),
        count(report.skipped, "entry", "entries")
    ))
}

#[derive(Args)]
pub struct RedactArgs {
    /// Only this session (repeatable) [default: every session]
    #[arg(long = "session", value_name = "ID", value_parser = parse_session)]
    sessions: Vec<SessionId>,
    /// Report what would be redacted without changing anything
    #[arg(long)]
    dry_run: bool,
}

/// `redact`: the secrets already stored, replaced in place by the store; a dry run
/// opens the database read-only, as `session delete --dry-run` does.
pub async fn redact(config: Config, json: bool, args: RedactArgs) -> Result<()> {
    let run = dry_run(args.dry_run);
    let store = open_for(config, run).await?;
    let report = store
        .redact_stored(RedactOptions {
            sessions: args.sessions,
            run,
            progress: progress(),
        })
        .await?;
    if json {
        return print_json(&report);
    }
    let mut lines = Vec::new();
    for s in &report.sessions {
        let kinds: Vec<String> = s.redacted.iter().map(|(k, n)| format!("{k} {n}")).collect();
        lines.push(format!(
            "{} {}: {}",
            if report.dry_run {
                "would redact"
            } else {
                "redacted"
            },
            s.id,
            kinds.join(", ")
        ));
    }
    if report.sessions.is_empty() {
        lines.push("no secret found".to_owned());
    }
    for s in &report.skipped {
        lines.push(format!("skipped {}: {}", s.id, s.reason));
    }
    for path in &report.backups {
        lines.push(format!(
            "note: this backup still holds what was stored before: {}",
            terminal_line(&path.display().to_string())
        ));
    }
    if !report.erased {
        lines.push(
            "note: a copy of the old pages may stay until the next checkpoint: a reader \
             kept the write-ahead log busy (SQLite), or the vacuum failed (PostgreSQL)"
                .to_owned(),
        );
    }
    emit(&lines.join("\n"))
}
