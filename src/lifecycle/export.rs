//! `Store::export`: one session to a self-contained tar archive (manifest, then
//! `files/<stored name>`) or a markdown transcript; neither holds a path of this
//! machine. Written beside its name and renamed into place: no partial file.

use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Store;
use crate::attachments::AttachmentUri;
use crate::config::Redaction;
use crate::db::{proxied, queries};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Item, ItemBody, Message, Session};
use crate::projection::Entry as HistoryEntry;
use crate::store::blocking;

pub use super::manifest::Manifest;
use super::manifest::{self, ArchivedFile, FILES_DIR, MANIFEST_NAME};

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exported {
    pub session_id: SessionId,
    pub messages: usize,
    pub items: usize,
    pub files: usize,
    pub missing: Vec<String>,
}

/// What [`Store::export`] writes (`Default`: an archive, redacted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Export {
    pub format: ExportFormat,
    /// [`Redaction::On`] replaces every secret in the text, whatever the store's
    /// setting; attachment files are copied byte for byte either way.
    pub redaction: Redaction,
}

/// The file an export writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExportFormat {
    /// One self-contained tar archive, which `import_archive` reads back.
    #[default]
    Archive,
    /// A markdown transcript for people.
    Markdown,
}

/// Lifecycle: exporting sessions with their files to an archive or a transcript.
impl Store {
    /// Writes `session` to `out` as `how` says. An archive holds `manifest.json` then
    /// each attachment, read as dispatch reads it: one no root has is listed as missing,
    /// any other failed read fails the export. A transcript reads no file and names
    /// attachments by stored name. `out` is replaced only once the new file is complete.
    pub async fn export(&self, session: SessionId, out: PathBuf, how: Export) -> Result<Exported> {
        match how.format {
            ExportFormat::Archive => self.export_archive(session, out, how.redaction).await,
            ExportFormat::Markdown => self.export_markdown(session, out, how.redaction).await,
        }
    }

    async fn export_archive(
        &self,
        session: SessionId,
        out: PathBuf,
        redaction: Redaction,
    ) -> Result<Exported> {
        let attachments = self.attachments.clone();
        let sharing = self.config().sharing;
        let db = self.db.clone();
        blocking(move || {
            // The manifest goes first and a tar entry's size comes before its bytes:
            // it is spooled to an anonymous file, a page at a time, then copied in.
            let mut spool = tempfile::tempfile().map_err(io_at(&out))?;
            let written = {
                let mut w = std::io::BufWriter::new(&mut spool);
                let written = db.read_once(|tx| {
                    let row = queries::get_session(tx, &session)?;
                    crate::db::verify::check_session(tx, &row)?;
                    let settings = proxied::settings(tx, &session)?;
                    let io = io_at(&out);
                    manifest::write(tx, &row, &settings, &mut w, &io, redaction, |names| {
                        // Read twice (sizes, then bytes) rather than held together:
                        // memory stays at one file.
                        let (mut files, mut missing) = (Vec::new(), Vec::new());
                        for name in names {
                            let uri = AttachmentUri::new(session, name);
                            match attachments.download(&session, &uri) {
                                Ok(d) => files.push(ArchivedFile {
                                    name: name.clone(),
                                    size: d.bytes.len() as u64,
                                }),
                                Err(e) if e.is_not_found() => missing.push(name.clone()),
                                Err(e) => return Err(e.into()),
                            }
                        }
                        Ok((files, missing))
                    })
                })?;
                w.flush().map_err(io_at(&out))?;
                written
            };
            let size = spool.stream_position().map_err(io_at(&out))?;
            spool.rewind().map_err(io_at(&out))?;
            write_replacing(&out, sharing, |file| {
                let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
                append(&mut tar, MANIFEST_NAME, size, &mut spool)?;
                for f in &written.files {
                    let uri = AttachmentUri::new(session, &f.name);
                    let d = attachments.download(&session, &uri).map_err(Error::from)?;
                    if d.bytes.len() as u64 != f.size {
                        return Err(Error::WriteFile {
                            path: out.clone(),
                            cause: std::io::Error::other(format!(
                                "attachment {uri} changed size while it was exported"
                            )),
                        });
                    }
                    let name = format!("{FILES_DIR}{}", f.name);
                    append(&mut tar, &name, f.size, &mut d.bytes.as_slice())?;
                }
                let mut buffered = tar.into_inner().map_err(io_at(&out))?;
                buffered.flush().map_err(io_at(&out))?;
                Ok(())
            })?;
            Ok(Exported {
                session_id: session,
                messages: written.messages,
                items: written.items,
                files: written.files.len(),
                missing: written.missing,
            })
        })
        .await
    }

    async fn export_markdown(
        &self,
        session: SessionId,
        out: PathBuf,
        redaction: Redaction,
    ) -> Result<Exported> {
        let sharing = self.config().sharing;
        let db = self.db.clone();
        blocking(move || {
            let mut counts = (0, 0);
            write_replacing(&out, sharing, |file| {
                let mut w = std::io::BufWriter::new(file);
                db.read_once(|tx| {
                    let row = queries::get_session(tx, &session)?;
                    crate::db::verify::check_session(tx, &row)?;
                    let put = |w: &mut std::io::BufWriter<_>, text: String| {
                        let text = redaction.apply(text);
                        w.write_all(text.as_bytes()).map_err(io_at(&out))
                    };
                    put(&mut w, heading(&row))?;
                    let last = crate::db::entries::last_seq(tx, &session)?;
                    let mut made = crate::db::items::Made::default();
                    for lo in (1..=last).step_by(256) {
                        let page = crate::db::entries::page_of(
                            tx,
                            &session,
                            lo..lo + 256,
                            None,
                            &mut made,
                        )?;
                        for entry in page {
                            match &entry {
                                HistoryEntry::Message(_) => counts.0 += 1,
                                HistoryEntry::Item(_) => counts.1 += 1,
                            }
                            put(&mut w, entry_markdown(&entry))?;
                        }
                    }
                    Ok(())
                })?;
                w.flush().map_err(io_at(&out))
            })?;
            Ok(Exported {
                session_id: session,
                messages: counts.0,
                items: counts.1,
                files: 0,
                missing: vec![],
            })
        })
        .await
    }
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |cause| Error::WriteFile {
        path: path.to_owned(),
        cause,
    }
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    size: u64,
    bytes: &mut impl std::io::Read,
) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    // What the archive holds is a session's: extracted by hand, it is owner-only too.
    header.set_mode(0o600);
    header.set_mtime(0);
    tar.append_data(&mut header, name, std::io::Read::take(bytes, size))
        .map_err(io_at(Path::new(name)))
}

/// Writes a new file beside `out` (mode of `sharing`), syncs it and renames it over
/// `out`; on any failure it is removed and `out` is left as it was.
fn write_replacing(
    out: &Path,
    sharing: crate::config::Sharing,
    write: impl FnOnce(std::fs::File) -> Result<()>,
) -> Result<()> {
    let file_name = out.file_name().ok_or_else(|| {
        io_at(out)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".{}.partial", uuid::Uuid::now_v7().simple()));
    let temp = out.with_file_name(temp_name);
    let file = crate::permissions::create_new(&temp, sharing).map_err(io_at(out))?;
    let result = file
        .try_clone()
        .map_err(io_at(out))
        .and_then(write)
        .and_then(|()| file.sync_all().map_err(io_at(out)))
        .and_then(|()| std::fs::rename(&temp, out).map_err(io_at(out)));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// The transcript: a heading per entry, the text as typed, attachments by name.
pub fn markdown(session: &Session, messages: &[Message], items: &[Item]) -> String {
    let mut entries: Vec<HistoryEntry> = messages
        .iter()
        .cloned()
        .map(HistoryEntry::Message)
        .chain(
            items
                .iter()
                .cloned()
                .map(|i| HistoryEntry::Item(Box::new(i))),
        )
        .collect();
    entries.sort_by_key(HistoryEntry::seq);
    let mut out = heading(session);
    for entry in &entries {
        out.push_str(&entry_markdown(entry));
    }
    out
}

/// The transcript's title and where the session came from.
fn heading(session: &Session) -> String {
    let title = session.title.as_deref().unwrap_or("(untitled)");
    format!(
        "# {}\n\nSession `{}`, created {}.\n",
        one_line(title),
        session.id,
        session.created_at
    )
}

/// One entry of the transcript, after the blank line that sets it apart.
fn entry_markdown(entry: &HistoryEntry) -> String {
    let mut out = String::from("\n");
    match entry {
        HistoryEntry::Message(m) => {
            let queued = if m.state == crate::model::Delivery::Queued {
                " (queued)"
            } else {
                ""
            };
            out.push_str(&format!("## {}{queued}\n\n", m.role));
            out.push_str(&m.display_text);
            out.push('\n');
            if let Some(expanded) = &m.model_text {
                out.push_str(&format!("\n*Expanded:*\n\n{expanded}\n"));
            }
            if let Some(transcript) = &m.transcript {
                out.push_str(&format!("\n*Transcript:*\n\n{transcript}\n"));
            }
            if !m.refs.is_empty() {
                out.push_str("\nAttachments:\n\n");
                for r in &m.refs {
                    out.push_str(&format!(
                        "- {} ({}, {} bytes)\n",
                        one_line(&r.stored_name),
                        r.mime_type,
                        r.size
                    ));
                }
            }
        }
        HistoryEntry::Item(item) => out.push_str(&item_markdown(&item.body)),
    }
    out
}

fn item_markdown(body: &ItemBody) -> String {
    use agent_client_protocol_schema::v1::ContentBlock;
    let text = |t: &crate::model::AgentText| {
        t.content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.clone(),
                _ => "*(non-text content)*".to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    match body {
        ItemBody::AgentMessage(t) => format!("## agent\n\n{}\n", text(t)),
        ItemBody::AgentThought(t) => {
            let quoted: Vec<String> = text(t).lines().map(|l| format!("> {l}")).collect();
            format!("## agent (thinking)\n\n{}\n", quoted.join("\n"))
        }
        // A recorded `usage_update` (kept as it came, under the opaque kind).
        ItemBody::Opaque(update) if crate::turns::is_usage(body) => {
            let mut line = format!(
                "*(usage: {} of {} tokens in context",
                update["used"], update["size"]
            );
            if let Some(cost) = update.get("cost").filter(|c| c.is_object()) {
                let currency = cost["currency"].as_str().unwrap_or("");
                line.push_str(&format!(
                    "; cost so far {} {}",
                    cost["amount"],
                    one_line(currency)
                ));
            }
            line + ")*\n"
        }
        ItemBody::Opaque(update) => format!(
            "## agent update\n\n{} (a kind this store does not know)\n",
            one_line(update["sessionUpdate"].as_str().unwrap_or("unknown"))
        ),
        ItemBody::ToolCall(call) => format!(
            "## tool call\n\n{} ({:?})\n",
            one_line(&call.title),
            call.status
        ),
        ItemBody::Plan(plan) => {
            let lines: Vec<String> = plan
                .entries
                .iter()
                .map(|e| format!("- {} ({:?})", one_line(&e.content), e.status))
                .collect();
            format!("## plan\n\n{}\n", lines.join("\n"))
        }
        ItemBody::Session(_) => format!("*({})*\n", body.kind().replace('_', " ")),
    }
}

/// Headings and list entries are one line each.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
