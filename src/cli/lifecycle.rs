//! `session delete` and `gc`: argument types, printing, and the progress bar their
//! `Progress` steps drive. Never removes anything itself: `Store` does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use indicatif::ProgressBar;

use sessionstore::attachments::human_size;
use sessionstore::lifecycle::{DeletionStatus, GcOptions, Progress};
use sessionstore::{Config, SessionId, Store};

use super::logging;
use super::output::{count, emit, print_json, terminal_line};

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

pub async fn delete(config: Config, json: bool, ids: Vec<SessionId>, dry_run: bool) -> Result<()> {
    // A dry run only reads, so it never migrates or writes the database.
    let store = if dry_run {
        Store::open_read_only(config).await?
    } else {
        Store::open_existing(config).await?
    };
    let report = store.delete_sessions_with(ids, dry_run, progress()).await?;
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
            "note: a reader kept the write-ahead log busy; its copy of the deleted rows \
             goes at the next checkpoint"
                .to_owned(),
        );
    }
    emit(&lines.join("\n"))
}

pub async fn gc(config: Config, json: bool, args: GcArgs) -> Result<()> {
    let store = if args.dry_run {
        Store::open_read_only(config).await?
    } else {
        Store::open_existing(config).await?
    };
    let report = store
        .gc(GcOptions {
            dry_run: args.dry_run,
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
