//! `Store::import_archive`: an exported archive back as a new session. The archive is
//! untrusted: all of it is checked (entries, names, sizes, the manifest against the
//! files and its own log) before anything is written; a refusal writes nothing. Then
//! files, then rows in one write (a failure removes the files). The manifest is never
//! held whole: its rows are spooled to temporary files as they parse (`manifest`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::Store;
use crate::attachments::{AttachmentUri, MAX_ATTACHMENT_BYTES, sanitize_name};
use crate::db::copies::{self, Entry, NewSession};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Event, Message, Session};
use crate::projection::{self, Entry as HistoryEntry, Meet, Replayer};
use crate::store::blocking;

use super::manifest::{self, Rows, Spool, Spooled};
use super::manifest::{ARCHIVE_FORMAT, ARCHIVE_VERSION, ArchivedItem, FILES_DIR, MANIFEST_NAME};

/// The largest manifest read: it bounds what a hostile archive makes the import spool
/// to disk (memory holds a row at a time).
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// What an import made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    pub session: Session,
    /// The session id the archive was exported from.
    pub original: SessionId,
    pub files: usize,
    pub missing: Vec<String>,
}

fn refused(reason: impl Into<String>) -> Error {
    Error::ArchiveRefused {
        reason: reason.into(),
    }
}

/// Which id an imported session gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImportId {
    /// A new id, always.
    #[default]
    New,
    /// The archive's id if no session has or had it (a deleted id is never reused).
    Keep,
}

/// Lifecycle: importing an exported archive.
impl Store {
    /// Imports the archive at `path` as a new session under the id `id` says, its
    /// references renamed to the new session's URIs; nothing is written unless all of
    /// it checks out. Its text is redacted as read when the store redacts; files are
    /// stored byte for byte.
    pub async fn import_archive(&self, path: PathBuf, id: ImportId) -> Result<Imported> {
        let redaction = self.config().redaction;
        let checked = {
            let path = path.clone();
            blocking(move || check_archive(&path, redaction)).await?
        };
        let original = checked.manifest.session.id;
        let id = if id == ImportId::Keep
            && !self
                .with_read(move |tx| crate::db::sessions::id_taken(tx, &original))
                .await?
        {
            original
        } else {
            SessionId::new()
        };
        let attachments = self.attachments.clone();
        let db = self.db.clone();
        blocking(move || {
            let mut checked = checked;
            let mut placed: Vec<AttachmentUri> = Vec::new();
            let undo = |placed: &[AttachmentUri]| {
                for uri in placed {
                    attachments.discard(&id, uri);
                }
                attachments.remove_folder_if_empty(&id);
            };
            let m = &mut checked.manifest;
            let result = (|| {
                // The archive is read again to write the files one at a time; each
                // entry must still be what the check saw.
                let mut archive = open_archive(&path)?;
                let mut entries = archive.entries().map_err(unreadable)?;
                entries
                    .next()
                    .ok_or_else(|| refused("the archive changed"))?
                    .map_err(unreadable)?;
                for want in &m.files {
                    let mut entry = entries
                        .next()
                        .ok_or_else(|| refused("the archive changed while it was imported"))?
                        .map_err(unreadable)?;
                    let name = entry_name(&entry)?;
                    if name.strip_prefix(FILES_DIR) != Some(want.name.as_str())
                        || entry.header().entry_type() != tar::EntryType::Regular
                        || entry.size() != want.size
                    {
                        return Err(refused("the archive changed while it was imported"));
                    }
                    let bytes = read_capped(&mut entry, want.size)?;
                    attachments.store_exact(&id, &want.name, &bytes)?;
                    placed.push(AttachmentUri::new(id, &want.name));
                }
                // The agent binding names an agent session on the machine that
                // exported it: the imported session starts a new one when used.
                let new = NewSession {
                    id,
                    session: crate::model::NewSession {
                        title: m.session.title.clone(),
                        tools_host: m.session.tools_host,
                        cwd: m.session.cwd.clone(),
                        agent: None,
                    },
                    forked_from: None,
                    settings: m.settings.clone(),
                };
                // The history from the spooled rows, an entry at a time, in one write.
                db.write(|tx| {
                    copies::create(tx, &new)?;
                    let rows = History::new(m.session.id, &mut m.messages, &mut m.items)?;
                    let mut appender = copies::Appender::new(id);
                    for entry in rows {
                        let entry = match entry? {
                            HistoryEntry::Message(msg) => {
                                let state = msg.state;
                                Entry::Message(super::fork::rewritten(&msg, id), state)
                            }
                            HistoryEntry::Item(item) => Entry::Item(Box::new(item.body)),
                        };
                        appender.append(tx, &entry)?;
                    }
                    appender.finish(tx)?;
                    crate::db::queries::get_session(tx, &id)
                })
            })();
            match result {
                Ok(session) => Ok(Imported {
                    session,
                    original,
                    files: checked.manifest.files.len(),
                    missing: checked.manifest.missing.clone(),
                }),
                Err(e) => {
                    undo(&placed);
                    Err(e)
                }
            }
        })
        .await
    }
}

/// An archive that passed every check, its manifest's rows spooled.
struct Checked {
    manifest: Spooled,
}

fn open_archive(path: &Path) -> Result<tar::Archive<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|cause| Error::Io {
        path: path.to_owned(),
        cause,
    })?;
    Ok(tar::Archive::new(std::io::BufReader::new(file)))
}

fn unreadable(e: std::io::Error) -> Error {
    refused(format!("not a readable tar archive ({e})"))
}

/// The entry's name as stored, refused unless it is UTF-8, relative, and free of
/// `..`, `.`, empty components and NUL.
fn entry_name<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String> {
    let raw = entry.path_bytes();
    let name = std::str::from_utf8(&raw)
        .map_err(|_| {
            refused(format!(
                "entry name {:?} is not UTF-8",
                String::from_utf8_lossy(&raw)
            ))
        })?
        .to_owned();
    if name.starts_with('/') {
        return Err(refused(format!("entry {name:?} has an absolute name")));
    }
    if name.split('/').any(|c| c == "..") {
        return Err(refused(format!("entry {name:?} climbs out with '..'")));
    }
    if name.contains('\0') || name.split('/').any(|c| c.is_empty() || c == ".") {
        return Err(refused(format!("entry {name:?} is not a plain name")));
    }
    Ok(name)
}

/// Reads exactly `size` bytes of an entry (at most [`MAX_ATTACHMENT_BYTES`]).
fn read_capped<R: Read>(entry: &mut R, size: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    entry
        .take(size.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 != size {
        return Err(refused("an entry is shorter than its header says"));
    }
    Ok(bytes)
}

/// Reads the whole archive once and checks it: the manifest comes first and is ours,
/// every other entry is a regular file `files/<stored name>` listed in the manifest
/// once, with the size it lists and within [`MAX_ATTACHMENT_BYTES`], every listed
/// file is there, every reference names the archived session and a file it holds (or
/// lists as missing), and the event log replays to the rows. Writes nothing.
fn check_archive(path: &Path, redaction: crate::config::Redaction) -> Result<Checked> {
    let mut archive = open_archive(path)?;
    let mut entries = archive.entries().map_err(unreadable)?;
    let mut first = match entries.next() {
        Some(entry) => entry.map_err(unreadable)?,
        None => return Err(refused("the archive is empty")),
    };
    check_type(&first)?;
    let name = entry_name(&first)?;
    if name != MANIFEST_NAME {
        return Err(refused(format!(
            "the first entry is {name:?}, not {MANIFEST_NAME}"
        )));
    }
    if first.size() > MAX_MANIFEST_BYTES {
        return Err(refused(format!(
            "the manifest is {} bytes, over the {MAX_MANIFEST_BYTES}-byte limit",
            first.size()
        )));
    }
    let mut manifest = manifest::read(&mut first, redaction)
        .map_err(|e| refused(format!("the manifest does not parse: {e}")))?;
    if manifest.format != ARCHIVE_FORMAT || manifest.version != ARCHIVE_VERSION {
        return Err(refused(format!(
            "the manifest is {} version {}, not {ARCHIVE_FORMAT} version {ARCHIVE_VERSION}",
            manifest.format, manifest.version
        )));
    }
    let mut listed: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &manifest.files {
        check_stored_name(&f.name)?;
        if f.size > MAX_ATTACHMENT_BYTES {
            return Err(refused(format!(
                "file {:?} is {} bytes, over the {MAX_ATTACHMENT_BYTES}-byte attachment limit",
                f.name, f.size
            )));
        }
        if listed.insert(&f.name, f.size).is_some() {
            return Err(refused(format!("the manifest lists {:?} twice", f.name)));
        }
    }
    let mut order = manifest.files.iter();
    let mut seen = BTreeSet::new();
    for entry in entries {
        let mut entry = entry.map_err(unreadable)?;
        check_type(&entry)?;
        let name = entry_name(&entry)?;
        let Some(stored) = name.strip_prefix(FILES_DIR) else {
            return Err(refused(format!("entry {name:?} is not under {FILES_DIR}")));
        };
        if stored.contains('/') {
            return Err(refused(format!("entry {name:?} is nested")));
        }
        check_stored_name(stored)?;
        let Some(&size) = listed.get(stored) else {
            return Err(refused(format!("entry {name:?} is not in the manifest")));
        };
        if !seen.insert(stored.to_owned()) {
            return Err(refused(format!("entry {name:?} appears twice")));
        }
        if order.next().map(|f| f.name.as_str()) != Some(stored) {
            return Err(refused(format!(
                "entry {name:?} is not where the manifest lists it"
            )));
        }
        if entry.size() > MAX_ATTACHMENT_BYTES {
            return Err(refused(format!(
                "entry {name:?} is {} bytes, over the {MAX_ATTACHMENT_BYTES}-byte attachment limit",
                entry.size()
            )));
        }
        if entry.size() != size {
            return Err(refused(format!(
                "entry {name:?} is {} bytes, and the manifest says {size}",
                entry.size()
            )));
        }
        let n = std::io::copy(&mut entry, &mut std::io::sink()).map_err(unreadable)?;
        if n != size {
            return Err(refused(format!("entry {name:?} is cut short")));
        }
    }
    if let Some(absent) = manifest.files.iter().find(|f| !seen.contains(&f.name)) {
        return Err(refused(format!(
            "the manifest lists {:?}, which the archive does not hold",
            absent.name
        )));
    }
    let listed: BTreeMap<String, u64> =
        listed.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    check_rows(&mut manifest, &listed)?;
    Ok(Checked { manifest })
}

/// Only regular files: no links, devices, folders, FIFOs or archive-wide headers.
fn check_type<R: Read>(entry: &tar::Entry<'_, R>) -> Result<()> {
    let kind = entry.header().entry_type();
    if kind == tar::EntryType::Regular {
        return Ok(());
    }
    let what = match kind {
        tar::EntryType::Symlink | tar::EntryType::Link => "a link",
        tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => "a device",
        tar::EntryType::Directory => "a folder",
        _ => "not a regular file",
    };
    let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
    Err(refused(format!("entry {name:?} is {what}")))
}

/// A stored name is what the store's own sanitizer leaves as it is; anything else
/// is a name this store could not have written.
fn check_stored_name(name: &str) -> Result<()> {
    if name.is_empty() || sanitize_name(name) != name {
        return Err(refused(format!("{name:?} is not a safe stored name")));
    }
    Ok(())
}

/// The manifest's rows, read from their spools in history order beside its event
/// log, replayed as it goes: every message of the archived session, every reference
/// to that session's file held or listed missing, items that parse, rows in history
/// order, and an event log that replays to exactly these rows and settings. What is
/// held is the entries the log keeps open ([`Meet`]), never the history.
fn check_rows(manifest: &mut Spooled, listed: &BTreeMap<String, u64>) -> Result<()> {
    let session = manifest.session.id;
    let missing: BTreeSet<&str> = manifest.missing.iter().map(String::as_str).collect();
    let mut replayer = Replayer::windowed(session);
    let mut meet = Meet::new(session);
    let mut found = Vec::new();
    let mut events = manifest.events.rows::<Event>()?;
    let mut log_done = false;
    let mut advance = |replayer: &mut Replayer, found: &mut Vec<_>, meet: &mut Meet| {
        match events.next() {
            Some(event) => {
                let event = event?;
                if event.session_id != session {
                    return Err(refused("the event log names another session"));
                }
                replayer.apply(&event);
            }
            None => {
                replayer.close();
                log_done = true;
            }
        }
        found.extend(replayer.take_retired().filter_map(|e| meet.logged(e)));
        Ok(log_done)
    };
    let mut done = false;
    for row in History::new(session, &mut manifest.messages, &mut manifest.items)? {
        let row = row?;
        if let HistoryEntry::Message(m) = &row {
            check_message(session, m, listed, &missing)?;
        }
        while !done && replayer.last_seq() <= row.seq() {
            done = advance(&mut replayer, &mut found, &mut meet)?;
        }
        found.extend(meet.row(&row));
    }
    while !done {
        done = advance(&mut replayer, &mut found, &mut meet)?;
    }
    let (expected, mut problems) = replayer.finish();
    if let Some(expected) = &expected {
        problems.extend(projection::session_problem(
            &manifest.session,
            &expected.session,
        ));
        problems.append(&mut found);
        problems.extend(meet.finish());
        if manifest.settings != expected.settings {
            problems.push(crate::model::Problem::new(
                crate::model::ProblemKind::ChangedRow,
                "the manifest's settings differ from its event log's",
            ));
        }
    }
    if let Some(first) = problems.first() {
        return Err(refused(format!(
            "the manifest's rows disagree with its event log: {first}"
        )));
    }
    Ok(())
}

/// One message of the archive: the archived session's, its references naming that
/// session's files, each held (with the size it says) or listed missing.
fn check_message(
    session: SessionId,
    m: &Message,
    listed: &BTreeMap<String, u64>,
    missing: &BTreeSet<&str>,
) -> Result<()> {
    if m.session_id != session {
        return Err(refused(format!(
            "message {} belongs to session {}, not {session}",
            m.id, m.session_id
        )));
    }
    for r in &m.refs {
        if r.uri.session() != session || r.uri.name() != r.stored_name {
            return Err(refused(format!(
                "message {} refers to {}, which is not a file of session {session}",
                m.id, r.uri
            )));
        }
        if let Some(&size) = listed.get(r.stored_name.as_str())
            && size != r.size
        {
            return Err(refused(format!(
                "message {} says {:?} is {} bytes, and the archive holds {size}",
                m.id, r.stored_name, r.size
            )));
        }
        if !listed.contains_key(r.stored_name.as_str()) && !missing.contains(r.stored_name.as_str())
        {
            return Err(refused(format!(
                "message {} refers to {:?}, which the archive neither holds nor lists as missing",
                m.id, r.stored_name
            )));
        }
    }
    Ok(())
}

/// The spooled messages and items merged into one history, by seq; each list must
/// already be in history order (an export writes them so), and an item must parse.
struct History {
    session: SessionId,
    messages: std::iter::Peekable<Rows<Message>>,
    items: std::iter::Peekable<Rows<ArchivedItem>>,
    last: i64,
}

impl History {
    fn new(session: SessionId, messages: &mut Spool, items: &mut Spool) -> Result<History> {
        Ok(History {
            session,
            messages: messages.rows()?.peekable(),
            items: items.rows()?.peekable(),
            last: i64::MIN,
        })
    }

    fn take(&mut self) -> Result<Option<HistoryEntry>> {
        let m = match self.messages.peek() {
            Some(Ok(m)) => Some(m.seq),
            _ => None,
        };
        let i = match self.items.peek() {
            Some(Ok(i)) => Some(i.seq),
            _ => None,
        };
        let entry = match (m, i) {
            (Some(m), Some(i)) if i < m => self.item()?,
            (Some(_), _) => self.messages.next().transpose()?.map(HistoryEntry::Message),
            (None, Some(_)) => match self.messages.next() {
                Some(Err(e)) => return Err(e),
                _ => self.item()?,
            },
            (None, None) => match (self.messages.next(), self.items.next()) {
                (Some(Err(e)), _) | (_, Some(Err(e))) => return Err(e),
                _ => None,
            },
        };
        if let Some(entry) = &entry {
            if entry.seq() <= self.last {
                return Err(refused(format!(
                    "the manifest's rows are not in history order (seq {} after {})",
                    entry.seq(),
                    self.last
                )));
            }
            self.last = entry.seq();
        }
        Ok(entry)
    }

    fn item(&mut self) -> Result<Option<HistoryEntry>> {
        let Some(row) = self.items.next().transpose()? else {
            return Ok(None);
        };
        let item = row
            .to_item(self.session)
            .map_err(|e| refused(format!("an item does not parse: {e}")))?;
        Ok(Some(HistoryEntry::Item(Box::new(item))))
    }
}

impl Iterator for History {
    type Item = Result<HistoryEntry>;

    fn next(&mut self) -> Option<Result<HistoryEntry>> {
        self.take().transpose()
    }
}
