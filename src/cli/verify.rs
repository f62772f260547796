//! `verify` and `verify --repair`: the report, the warnings about exposed files, and
//! the exit status.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use sessionstore::store::{Access, Verify};
use sessionstore::{Config, Store, VerifyReport};

use super::errors::status;
use super::logging::spinning;
use super::output::{count, emit, print_json, terminal_line};

#[derive(Args)]
pub struct VerifyArgs {
    /// Rebuild the tables and the search index from the event log where they disagree
    /// with it, after a backup (`<db>.v<N>.bak`); exits 0 when the store is consistent
    /// afterwards, 1 naming what could not be rebuilt
    #[arg(long)]
    pub repair: bool,
}

/// Prints the report, with warnings about the database's files and the key file
/// (`key_file`) when they are open to more than the sharing allows; non-zero when it
/// found a problem (a warning is none).
pub async fn verify(config: Config, json: bool, key_file: Option<PathBuf>) -> Result<ExitCode> {
    let sharing = config.sharing;
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let mut report = spinning("verifying", store.verify(Verify::Check))
        .await?
        .after;
    if let Some(key) = key_file {
        report
            .warnings
            .extend(sessionstore::privacy::key_file_exposure(&key, sharing));
    }
    if json {
        print_json(&report)?;
    } else {
        // Warnings are no problem: the exit status stays as it is.
        let mut lines: Vec<String> = report
            .warnings
            .iter()
            .map(|w| format!("warning: {}", terminal_line(&w.to_string())))
            .chain(report.problems.iter().map(|p| format!("problem: {p}")))
            .collect();
        lines.push(summary(&report, ""));
        emit(&lines.join("\n"))?;
    }
    Ok(status(report.ok()))
}

/// `verify --repair`: rebuilds the tables and the search index from the event log
/// where they disagree with it, after a backup, and prints what it found, what it
/// rebuilt and what could not be rebuilt; non-zero when something could not.
pub async fn repair(config: Config, json: bool) -> Result<ExitCode> {
    let store = Store::open_as(config, Access::Existing).await?;
    let report = spinning("repairing", store.verify(Verify::Repair)).await?;
    if json {
        print_json(&report)?;
    } else {
        let mut lines: Vec<String> = report
            .found
            .iter()
            .map(|p| format!("problem: {p}"))
            .collect();
        if let Some(backup) = &report.backup {
            lines.push(format!(
                "backup: {}",
                terminal_line(&backup.display().to_string())
            ));
        }
        lines.extend(
            report
                .rebuilt
                .iter()
                .map(|s| format!("rebuilt: session {s}, from its event log")),
        );
        if report.search_rebuilt {
            lines.push("rebuilt: the search index, from the rows".to_owned());
        }
        lines.extend(
            report
                .after
                .problems
                .iter()
                .map(|p| format!("not rebuilt: {p}")),
        );
        lines.push(summary(&report.after, " left"));
        emit(&lines.join("\n"))?;
    }
    Ok(status(report.ok()))
}

/// The last line: what was checked, and `ok` or how many problems there are (`left`).
fn summary(report: &VerifyReport, left: &str) -> String {
    format!(
        "{}, {}, {}: {}",
        count(report.sessions, "session", "sessions"),
        count(report.messages, "message", "messages"),
        count(report.events, "event", "events"),
        if report.ok() {
            "ok".to_owned()
        } else {
            let n = report.problems.len();
            count(n, &format!("problem{left}"), &format!("problems{left}"))
        }
    )
}
