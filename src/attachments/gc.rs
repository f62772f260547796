//! What garbage collection and deletion need on disk: the session folders under the
//! configured root, the files in one of them, and removal of a file or a whole folder
//! beneath its parent's descriptor. Only the configured root is ever changed; legacy
//! roots are only listed, for a report. It never decides what to remove (the caller
//! brings what the database says) and never follows a symlink.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::AttachmentError;
use super::disk::{self, Beneath, EntryKind};
use super::roots::{AttachmentStore, RootKind, SessionDirs, Swept};
use super::uri::AttachmentUri;
use crate::ids::SessionId;

/// What a file in a session folder may be to a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A regular file whose name a URI could name: an upload, referenced or not.
    Upload,
    /// A temporary file of an upload that is running or was killed.
    Temp,
    /// Anything else (a symlink, a folder, a name no upload could have): left alone.
    Other,
}

#[derive(Debug, Clone)]
pub(crate) struct FolderFile {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
    /// The later of its modification and status-change times.
    pub changed: SystemTime,
    /// Its modification time: what the sweep of temporary files goes by.
    pub modified: SystemTime,
}

/// A session folder under the configured root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionFolder {
    pub session: SessionId,
    /// The folder's entry is a symlink: never entered, only ever unlinked.
    pub is_link: bool,
}

/// The folder at `path` as `open` opens it, `None` when it is missing; a refusal is an
/// error naming the path.
fn opened(path: &Path, open: fn(&Path) -> Result<OwnedFd, Beneath>) -> io::Result<Option<OwnedFd>> {
    match open(path) {
        Ok(dir) => Ok(Some(dir)),
        Err(Beneath::Missing) => Ok(None),
        Err(Beneath::Io(e)) => Err(e),
        Err(Beneath::Refused(reason)) => Err(io::Error::other(format!("{path:?} {reason}"))),
    }
}

impl AttachmentStore {
    /// The entries of the configured root named exactly like a session id (folders, or
    /// links in their place), and how many other entries there are (left alone). A
    /// missing root has none.
    pub(crate) fn session_folders(&self) -> io::Result<(Vec<SessionFolder>, usize)> {
        let Some(dir) = opened(&self.roots().configured, disk::open_root)? else {
            return Ok((vec![], 0));
        };
        let mut folders = Vec::new();
        let mut others = 0;
        for entry in disk::list_entries(&dir)? {
            let session = entry
                .name
                .to_str()
                .and_then(|n| n.parse::<SessionId>().ok());
            match (session, entry.kind) {
                (Some(session), EntryKind::Dir | EntryKind::Symlink) => {
                    folders.push(SessionFolder {
                        session,
                        is_link: entry.kind == EntryKind::Symlink,
                    })
                }
                _ => others += 1,
            }
        }
        folders.sort_by_key(|f| f.session);
        Ok((folders, others))
    }

    /// The files in `session`'s folder under the configured root; none when it has no
    /// folder. A folder that is a symlink is refused, never entered.
    pub(crate) fn folder_files(&self, session: &SessionId) -> io::Result<Vec<FolderFile>> {
        let folder = self.roots().configured.join(session.to_string());
        let Some(dir) = opened(&folder, disk::open_session_dir)? else {
            return Ok(vec![]);
        };
        Ok(disk::list_entries(&dir)?
            .into_iter()
            .map(|e| {
                let name = e.name.to_string_lossy().into_owned();
                let kind = match e.kind {
                    EntryKind::UploadTemp => FileKind::Temp,
                    // Only a name that round-trips through a URI can be referenced.
                    EntryKind::File
                        if e.name.to_str().is_some()
                            && AttachmentUri::parse(
                                &AttachmentUri::new(*session, &name).to_string(),
                            )
                            .is_ok() =>
                    {
                        FileKind::Upload
                    }
                    _ => FileKind::Other,
                };
                FolderFile {
                    name,
                    kind,
                    size: e.size,
                    changed: e.changed,
                    modified: e.modified,
                }
            })
            .collect())
    }

    /// Removes the upload `name` from `session`'s folder under the configured root if
    /// it is still a regular file last changed before `cutoff`; returns its size when
    /// it went.
    pub(crate) fn remove_upload_if_older(
        &self,
        session: &SessionId,
        name: &str,
        cutoff: SystemTime,
    ) -> io::Result<Option<u64>> {
        let folder = self.roots().configured.join(session.to_string());
        let Some(dir) = opened(&folder, disk::open_session_dir)? else {
            return Ok(None);
        };
        disk::remove_file_if_older(&dir, OsStr::new(name), cutoff)
    }

    /// Removes `session`'s folder under the configured root with everything in it (a
    /// link in its place is removed as a link). Legacy roots are never touched.
    pub(crate) fn remove_session_folder(&self, session: &SessionId) -> io::Result<Swept> {
        let Some(dir) = opened(&self.roots().configured, disk::open_root)? else {
            return Ok(Swept::default());
        };
        let (files, bytes) = disk::remove_tree(&dir, OsStr::new(&session.to_string()))?;
        Ok(Swept { files, bytes })
    }

    /// What `session`'s folders in the legacy roots hold: reported by a delete, which
    /// leaves them, since legacy roots are read-only to the store.
    pub(crate) fn legacy_files(&self, session: &SessionId) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for root in &self.roots().legacy {
            let folder = root.join(session.to_string());
            match disk::open_session_dir(&folder) {
                Ok(dir) => {
                    let mut names: Vec<_> = disk::list_entries(&dir)
                        .map(|entries| entries.into_iter().map(|e| folder.join(e.name)).collect())
                        .unwrap_or_else(|_| vec![folder.clone()]);
                    names.sort();
                    found.extend(names);
                }
                Err(Beneath::Missing) => {}
                // A folder that cannot be listed (or is a link) is reported whole.
                Err(_) => found.push(folder),
            }
        }
        found
    }

    /// Whether the file `uri` names is still a regular file in the root where `check`
    /// found it: one `statat` beneath the session folder `dirs` holds open from that
    /// check, nothing read or followed. `send` repeats this inside its write, under the
    /// lock gc removes files under, so a reference is never stored to a file gc has
    /// just taken.
    pub(crate) fn still_there(
        &self,
        dirs: &SessionDirs,
        session: &SessionId,
        uri: &AttachmentUri,
        root: &RootKind,
    ) -> Result<(), AttachmentError> {
        let opened;
        let (folder, dir) = match dirs.held(session, root) {
            Some((folder, dir)) => (Cow::Borrowed(folder), dir),
            None => {
                let base = match root {
                    RootKind::Configured => &self.roots().configured,
                    RootKind::Legacy(i) => &self.roots().legacy[*i],
                };
                let folder = base.join(session.to_string());
                opened = disk::open_session_dir(&folder)
                    .map_err(|e| still_there_failed(uri, &folder.join(uri.name()), e))?;
                (Cow::Owned(folder), &opened)
            }
        };
        disk::regular_file_at(dir, uri.name())
            .map_err(|e| still_there_failed(uri, &folder.join(uri.name()), e))
    }
}

fn still_there_failed(uri: &AttachmentUri, path: &std::path::Path, e: Beneath) -> AttachmentError {
    match e {
        Beneath::Missing => AttachmentError::NotFound {
            uri: uri.clone(),
            tried: vec![path.to_path_buf()],
        },
        Beneath::Refused(reason) => AttachmentError::Refused {
            uri: uri.clone(),
            reason: format!("{path:?} {reason}"),
        },
        Beneath::Io(cause) => AttachmentError::Io {
            uri: uri.clone(),
            path: path.to_path_buf(),
            cause,
        },
    }
}
