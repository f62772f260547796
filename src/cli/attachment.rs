//! `attach`, `attachment list` and `attachment get`, through the store's safe read:
//! never opens an attachment file itself, and never prints where a file lives.

use sessionstore::store::Access;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use sessionstore::attachments::{AttachmentUri, RootKind, human_size};
use sessionstore::store::{Upload, whole};
use sessionstore::{Config, SessionId, Store};

use super::errors::Usage;
use super::logging;
use super::output::{TITLE_CHARS, cell, emit, print_json};
use super::parse_session;

#[derive(Args)]
pub struct AttachArgs {
    /// The session the files belong to
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
    /// The upload's own name, for a single file
    #[arg(long)]
    name: Option<String>,
    /// The files to store (each at most 64 MiB)
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

#[derive(Subcommand)]
pub enum AttachmentCommand {
    /// List a session's stored files: size, type, and the messages that refer to them
    List {
        /// The session whose files to list
        #[arg(long, value_name = "ID", value_parser = parse_session)]
        session: SessionId,
    },
    /// Write one attachment's bytes to stdout or to a file, read the way dispatch reads
    Get {
        /// The attachment's URI, as `attach` printed it
        #[arg(value_name = "URI")]
        uri: String,
        /// Write to this file (replaced whole, never left half-written) instead of stdout
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

pub async fn attach(config: Config, json: bool, args: AttachArgs) -> Result<()> {
    if args.name.is_some() && args.files.len() != 1 {
        return Err(Usage("--name names one upload: give exactly one FILE with it".into()).into());
    }
    // Every file is read before anything is stored, so an unreadable one leaves no
    // upload behind.
    let progress = logging::bar(args.files.len() as u64, "reading");
    let mut uploads = Vec::with_capacity(args.files.len());
    for file in args.files {
        uploads.push(Upload::read_file(file, args.name.clone()).await?);
        progress.inc(1);
    }
    progress.set_message("storing");
    let store = Store::open_as(config, Access::Existing).await?;
    let stored = store.attach(args.session, uploads).await;
    progress.finish_and_clear();
    let stored = stored?;
    if json {
        print_json(&stored)
    } else {
        let uris: Vec<String> = stored.iter().map(|s| s.uri.to_string()).collect();
        emit(&uris.join("\n"))
    }
}

pub async fn run(config: Config, json: bool, command: AttachmentCommand) -> Result<()> {
    match command {
        AttachmentCommand::List { session } => list(config, json, session).await,
        AttachmentCommand::Get { uri, out } => get(config, json, uri, out).await,
    }
}

async fn list(config: Config, json: bool, session: SessionId) -> Result<()> {
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let entries = whole(|q| store.attachments_of(session, q)).await?;
    if json {
        let values: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.uri.name(),
                    "uri": e.uri,
                    "mimeType": e.file.as_ref().map(|f| &f.mime),
                    "size": e.file.as_ref().map(|f| f.size),
                    "root": e.file.as_ref().map(|f| match f.root {
                        RootKind::Configured => "configured",
                        RootKind::Legacy(_) => "legacy",
                    }),
                    "present": e.file.is_some(),
                    "messages": e.messages,
                })
            })
            .collect();
        return print_json(&values);
    }
    let rows: Vec<String> = entries
        .iter()
        .map(|e| {
            let file = match &e.file {
                Some(f) => format!(
                    "{}  {}{}",
                    human_size(f.size),
                    cell(&f.mime, TITLE_CHARS),
                    match f.root {
                        RootKind::Configured => "",
                        RootKind::Legacy(_) => "  (legacy root)",
                    }
                ),
                None => "missing".to_owned(),
            };
            let used = match e.messages.len() {
                0 => "no message refers to it".to_owned(),
                _ => format!(
                    "used by {}",
                    e.messages
                        .iter()
                        .map(|m| m.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            format!("{}  {file}  {used}", cell(e.uri.name(), TITLE_CHARS))
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    emit(&rows.join("\n"))
}

async fn get(config: Config, json: bool, uri: String, out: Option<PathBuf>) -> Result<()> {
    let uri = AttachmentUri::parse(&uri).map_err(sessionstore::Error::from)?;
    let sharing = config.sharing;
    let store = Store::open_as(config, Access::ReadOnly).await?;
    let download = store.download(uri.clone()).await?;
    let Some(out) = out else {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&download.bytes)
            .and_then(|()| stdout.flush())
            .context("cannot write the output");
    };
    // A temporary file beside the target (made new, never an existing one), renamed
    // over it once complete: a failed or interrupted write leaves the target as it was.
    // It holds a stored file, so it gets the store's file mode, whatever the umask.
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = out.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(sharing.file_mode())
            .open(&temp)?;
        let written = file
            .set_permissions(std::fs::Permissions::from_mode(sharing.file_mode()))
            .and_then(|()| file.write_all(&download.bytes))
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temp, &out));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
    };
    write().with_context(|| format!("cannot write {}", out.display()))?;
    if json {
        print_json(&serde_json::json!({
            "name": download.name,
            "uri": uri,
            "mimeType": download.mime,
            "size": download.bytes.len(),
        }))
    } else {
        Ok(())
    }
}
