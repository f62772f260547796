//! The attachment store over its roots (`AttachmentStore`): writes uploads under the
//! configured root and resolves URIs against the configured root, then the legacy
//! roots; it never searches another session folder or another name, and never
//! reports a path it did not read from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::disk::{self, Beneath, ReadFailure};
use super::mime::{SNIFF_BYTES, mime_for, mime_from_head};
use super::name::{is_stored_name, sanitize_name};
use super::uri::AttachmentUri;
use super::{AttachmentError, MAX_ATTACHMENT_BYTES};
use crate::config::Sharing;
use crate::ids::SessionId;

/// Where attachments live: new uploads go to `configured`; `legacy` roots are only
/// read, in order, after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub configured: PathBuf,
    pub legacy: Vec<PathBuf>,
}

/// Which root a read succeeded in; `Legacy(i)` indexes [`Roots::legacy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootKind {
    Configured,
    Legacy(usize),
}

/// What a store reports for one upload; serializes as `{name, uri, mimeType, size}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredAttachment {
    pub name: String,
    pub uri: AttachmentUri,
    #[serde(rename = "mimeType")]
    pub mime: String,
    pub size: u64,
}

/// One successful read: the bytes, and the absolute path that read came from. The
/// bytes are the buffer the file was read into, owned, so dispatch can encode them
/// or keep them as text without copying a large file once more.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub bytes: Vec<u8>,
    /// `<absolute root>/<session-id>/<name>` of the root the bytes were read from.
    pub path: PathBuf,
    pub root: RootKind,
    pub name: String,
    pub mime: String,
}

/// What `send` learns about a reference without reading the file: where it is, its
/// size from the open descriptor, and its type from the name and the first
/// [`SNIFF_BYTES`] bytes, the same type a full read gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub name: String,
    pub mime: String,
    pub size: u64,
    pub path: PathBuf,
    pub root: RootKind,
}

/// A read for a user download: like [`Resolved`], without the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub bytes: Vec<u8>,
    pub mime: String,
    pub name: String,
}

/// One file of a session as [`AttachmentStore::list_page`] finds it: no path, only which
/// root it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub uri: AttachmentUri,
    pub mime: String,
    pub size: u64,
    pub root: RootKind,
}

/// How old a temporary upload file must be before a sweep takes it for a crash
/// leftover. An upload in progress rewrites its file far more often than this.
pub const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// What a sweep of crash leftovers removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Swept {
    pub files: usize,
    pub bytes: u64,
}

/// Reads and writes attachment files under a set of roots, none larger than
/// [`MAX_ATTACHMENT_BYTES`].
#[derive(Debug, Clone)]
pub struct AttachmentStore {
    roots: Roots,
    /// [`MAX_ATTACHMENT_BYTES`]; only unit tests lower it, to test the bound cheaply.
    limit: u64,
    on_read: Option<ReadObserver>,
    /// Who may read the folders and files this store makes: the owner only unless
    /// told otherwise ([`AttachmentStore::with_sharing`]).
    sharing: Sharing,
}

/// Told of every [`AttachmentStore::read`] before it happens, whatever its outcome:
/// how the tests and the probe count reads (invariant 6) through the one store that
/// also writes, rather than through a second handle that could name other roots.
#[derive(Clone)]
pub struct ReadObserver(Arc<ObserveRead>);

type ObserveRead = dyn Fn(&SessionId, &AttachmentUri) + Send + Sync;

impl ReadObserver {
    #[cfg(any(feature = "probe", feature = "testkit"))]
    pub fn new(f: impl Fn(&SessionId, &AttachmentUri) + Send + Sync + 'static) -> Self {
        ReadObserver(Arc::new(f))
    }
}

impl std::fmt::Debug for ReadObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadObserver")
    }
}

impl AttachmentStore {
    /// Relative roots are made absolute against the current directory now, so every
    /// path this store reports is absolute and does not change if the directory does.
    pub fn new(roots: Roots) -> Self {
        Self {
            roots: Roots {
                configured: absolute(&roots.configured),
                legacy: roots.legacy.iter().map(|root| absolute(root)).collect(),
            },
            limit: MAX_ATTACHMENT_BYTES,
            on_read: None,
            sharing: Sharing::Owner,
        }
    }

    /// This store, making its folders and files with the modes of `sharing`.
    pub fn with_sharing(self, sharing: Sharing) -> Self {
        Self { sharing, ..self }
    }

    /// This store, telling `observer` of every read.
    pub(crate) fn observing_reads(self, observer: ReadObserver) -> Self {
        Self {
            on_read: Some(observer),
            ..self
        }
    }

    #[cfg(test)]
    fn with_limit(self, limit: u64) -> Self {
        Self { limit, ..self }
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// Stores an upload as `<configured root>/<session-id>/<stored name>`. The name is
    /// [`sanitize_name`]d and, if taken, numbered (`name (1).ext`, ...); an existing
    /// file is never replaced and a partial write is never visible under a stored name.
    /// An upload over [`MAX_ATTACHMENT_BYTES`] is refused before anything is written.
    pub fn store(
        &self,
        session: &SessionId,
        upload_name: &str,
        bytes: &[u8],
    ) -> Result<StoredAttachment, AttachmentError> {
        let size = self.upload_size(upload_name, bytes)?;
        let name = sanitize_name(upload_name);
        let folder = self.roots.configured.join(session.to_string());
        let store_err = |path: PathBuf, source| AttachmentError::Store {
            name: upload_name.to_owned(),
            path,
            cause: source,
        };
        let dir =
            disk::create_session_dir(&self.roots.configured, &session.to_string(), self.sharing)
                .map_err(|e| store_err(folder.clone(), beneath_io(e)))?;
        // Best effort: a failed sweep must not fail the upload, and the next one retries.
        let _ = disk::sweep_upload_temps(&dir, UPLOAD_GRACE, std::time::SystemTime::now());
        let stored = disk::write_new(&dir, &name, bytes, disk::MAX_CLAIM_ATTEMPTS, self.sharing)
            .map_err(|e| store_err(folder.join(&name), e))?;
        Ok(StoredAttachment {
            uri: AttachmentUri::new(*session, &stored),
            mime: mime_for(&stored, bytes),
            size,
            name: stored,
        })
    }

    /// Reads the file `uri` names from the first root whose session folder has it, and
    /// returns the bytes with the path of that same read. Only a missing folder or
    /// file moves on to the next root; a refusal, a file over [`MAX_ATTACHMENT_BYTES`]
    /// or an I/O error ends the search.
    pub fn read(
        &self,
        session: &SessionId,
        uri: &AttachmentUri,
    ) -> Result<Resolved, AttachmentError> {
        if let Some(observer) = &self.on_read {
            (observer.0)(session, uri);
        }
        let (bytes, path, root) = self.read_bytes(session, uri)?;
        let name = uri.name().to_owned();
        Ok(Resolved {
            mime: mime_for(&name, &bytes),
            bytes,
            path,
            root,
            name,
        })
    }

    /// Opens the file `uri` names the way [`AttachmentStore::read`] does, in the same
    /// roots in the same order with the same refusals, but reads only its first
    /// [`SNIFF_BYTES`] bytes: what `send` needs to record a reference.
    pub fn check(
        &self,
        session: &SessionId,
        uri: &AttachmentUri,
    ) -> Result<Checked, AttachmentError> {
        self.check_in(&mut SessionDirs::default(), session, uri)
    }

    /// [`AttachmentStore::check`], reusing the session folders `dirs` already holds
    /// open: a send checks all its references with one open of each folder.
    pub fn check_in(
        &self,
        dirs: &mut SessionDirs,
        session: &SessionId,
        uri: &AttachmentUri,
    ) -> Result<Checked, AttachmentError> {
        let ((size, head), path, root) = self.locate_in(dirs, session, uri, |dir, name| {
            disk::peek_beneath(dir, name, self.limit, SNIFF_BYTES)
        })?;
        let name = uri.name().to_owned();
        Ok(Checked {
            mime: mime_from_head(&name, &head, size),
            size,
            path,
            root,
            name,
        })
    }

    /// Removes a file this store just wrote under the configured root, when a
    /// multi-file upload fails partway: best effort, that one name in that one folder
    /// (removing a symlink never touches what it points at).
    pub(crate) fn discard(&self, session: &SessionId, uri: &AttachmentUri) {
        if uri.session() != *session {
            return;
        }
        let folder = self.roots.configured.join(session.to_string());
        if let Ok(dir) = disk::open_session_dir(&folder) {
            let _ = disk::remove_beneath(&dir, uri.name());
        }
    }

    /// Removes the temporary files that killed uploads left in `session`'s folder under
    /// the configured root, when last changed more than `grace` ago: the sweep uploads
    /// make (with [`UPLOAD_GRACE`]), for a caller that cleans up without uploading. A
    /// folder that is a symlink is refused, never entered.
    pub fn sweep_leftovers(
        &self,
        session: &SessionId,
        grace: std::time::Duration,
    ) -> std::io::Result<Swept> {
        let folder = self.roots.configured.join(session.to_string());
        let dir = match disk::open_session_dir(&folder) {
            Ok(dir) => dir,
            Err(Beneath::Missing) => return Ok(Swept::default()),
            Err(Beneath::Refused(reason)) => {
                return Err(std::io::Error::other(format!(
                    "the session folder {folder:?} {reason}"
                )));
            }
            Err(Beneath::Io(e)) => return Err(e),
        };
        let (files, bytes) = disk::sweep_upload_temps(&dir, grace, std::time::SystemTime::now())?;
        Ok(Swept { files, bytes })
    }

    /// Gives session `to` its own copy of the file `uri` names (a file of session
    /// `from`), under the same stored name under the configured root: a hard link when
    /// the file is in the configured root and the file system allows one, else a copy
    /// of the bytes a read finds. Opened and checked as a read is; an existing file in
    /// `to` is never replaced. Returns whether it was linked.
    pub(crate) fn copy_into(
        &self,
        from: &SessionId,
        uri: &AttachmentUri,
        to: &SessionId,
    ) -> Result<bool, AttachmentError> {
        let ((from_dir, mut file, size), path, root) = self.locate(from, uri, |dir, name| {
            let (file, size) = disk::open_regular(dir, name, self.limit)?;
            let dir = dir
                .try_clone()
                .map_err(|e| ReadFailure::Beneath(Beneath::Io(e)))?;
            Ok((dir, file, size))
        })?;
        let name = uri.name();
        let target = self.roots.configured.join(to.to_string());
        let store_err = |cause| AttachmentError::Store {
            name: name.to_owned(),
            path: target.join(name),
            cause,
        };
        let to_dir =
            disk::create_session_dir(&self.roots.configured, &to.to_string(), self.sharing)
                .map_err(|e| store_err(beneath_io(e)))?;
        if root == RootKind::Configured
            && disk::link_beneath(&from_dir, name, &to_dir, &file).map_err(store_err)?
        {
            return Ok(true);
        }
        let bytes = disk::read_opened(&mut file, size, self.limit).map_err(|cause| {
            AttachmentError::Io {
                uri: uri.clone(),
                path,
                cause,
            }
        })?;
        self.write_exact(&to_dir, name, &bytes).map_err(store_err)?;
        Ok(false)
    }

    /// Stores `bytes` under exactly `name`, which must already be a stored name, for
    /// files whose references already name them (`import`); an existing file of that
    /// name is never replaced, and the call fails instead.
    pub(crate) fn store_exact(
        &self,
        session: &SessionId,
        name: &str,
        bytes: &[u8],
    ) -> Result<StoredAttachment, AttachmentError> {
        let folder = self.roots.configured.join(session.to_string());
        let store_err = |cause| AttachmentError::Store {
            name: name.to_owned(),
            path: folder.join(name),
            cause,
        };
        if sanitize_name(name) != name {
            return Err(store_err(std::io::Error::other("not a safe stored name")));
        }
        let size = self.upload_size(name, bytes)?;
        let dir =
            disk::create_session_dir(&self.roots.configured, &session.to_string(), self.sharing)
                .map_err(|e| store_err(beneath_io(e)))?;
        self.write_exact(&dir, name, bytes).map_err(store_err)?;
        Ok(StoredAttachment {
            uri: AttachmentUri::new(*session, name),
            mime: mime_for(name, bytes),
            size,
            name: name.to_owned(),
        })
    }

    /// The size of an upload, refused over the limit before anything is written.
    fn upload_size(&self, name: &str, bytes: &[u8]) -> Result<u64, AttachmentError> {
        let size = bytes.len() as u64;
        if size > self.limit {
            return Err(AttachmentError::UploadTooLarge {
                name: name.to_owned(),
                size,
                limit: self.limit,
            });
        }
        Ok(size)
    }

    fn write_exact(
        &self,
        dir: &std::os::fd::OwnedFd,
        name: &str,
        bytes: &[u8],
    ) -> std::io::Result<()> {
        // One attempt: the name is taken as given or the write fails, never numbered.
        let got = disk::write_new(dir, name, bytes, 1, self.sharing)?;
        debug_assert_eq!(got, name, "a single claim attempt keeps the name");
        Ok(())
    }

    /// Removes `session`'s folder under the configured root if nothing is left in it:
    /// the tidy-up after a fork or import that failed and discarded its files.
    pub(crate) fn remove_folder_if_empty(&self, session: &SessionId) {
        disk::remove_empty_dir(&self.roots.configured, &session.to_string());
    }

    /// The first `limit` stored names after `after` (byte order) of a session's files
    /// in these roots, each once, with the file as a read would find it: from the
    /// first root whose copy checks (a legacy copy hidden by a configured one is not
    /// listed), with its size and type, or `None` when it went between the listing and
    /// the check. Names the store could not have written, symlinks and upload
    /// temporaries are left out, as a read would refuse them.
    pub fn list_page(
        &self,
        session: &SessionId,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Option<Listed>)>, AttachmentError> {
        let mut folders = Vec::new();
        for (root, kind) in self.roots_in_order() {
            let folder = root.join(session.to_string());
            let io = |cause| AttachmentError::List {
                session: *session,
                path: folder.clone(),
                cause,
            };
            let dir = match disk::open_session_dir(&folder) {
                Ok(dir) => dir,
                Err(Beneath::Missing) => continue,
                Err(Beneath::Refused(reason)) => {
                    return Err(io(std::io::Error::other(format!("the folder {reason}"))));
                }
                Err(Beneath::Io(e)) => return Err(io(e)),
            };
            let names = disk::regular_after(&dir, after, limit, is_stored_name);
            folders.push((dir, kind, names.map_err(io)?));
        }
        let mut names: Vec<&String> = folders.iter().flat_map(|(_, _, n)| n).collect();
        names.sort();
        names.dedup();
        names.truncate(limit);
        let check = |name: &String| {
            let in_folder = folders.iter().filter(|(_, _, n)| n.contains(name));
            in_folder.into_iter().find_map(|(dir, kind, _)| {
                let (size, head) = disk::peek_beneath(dir, name, u64::MAX, SNIFF_BYTES).ok()?;
                Some(Listed {
                    uri: AttachmentUri::new(*session, name),
                    mime: mime_from_head(name, &head, size),
                    size,
                    root: kind.clone(),
                    name: name.clone(),
                })
            })
        };
        Ok(names.into_iter().map(|n| (n.clone(), check(n))).collect())
    }

    /// Like [`AttachmentStore::read`], for a user download: no path in the result.
    pub fn download(
        &self,
        session: &SessionId,
        uri: &AttachmentUri,
    ) -> Result<Download, AttachmentError> {
        let (bytes, _, _) = self.read_bytes(session, uri)?;
        let name = uri.name().to_owned();
        Ok(Download {
            mime: mime_for(&name, &bytes),
            bytes,
            name,
        })
    }

    fn read_bytes(
        &self,
        session: &SessionId,
        uri: &AttachmentUri,
    ) -> Result<(Vec<u8>, PathBuf, RootKind), AttachmentError> {
        self.locate(session, uri, |dir, name| {
            disk::read_beneath(dir, name, self.limit)
        })
    }

    /// Runs `open` on the file `uri` names in the first root whose session folder has
    /// it, returning its result with the path and root of that open.
    fn locate<T>(
        &self,
        session: &SessionId,
        uri: &AttachmentUri,
        open: impl Fn(&std::os::fd::OwnedFd, &str) -> Result<T, ReadFailure>,
    ) -> Result<(T, PathBuf, RootKind), AttachmentError> {
        self.locate_in(&mut SessionDirs::default(), session, uri, open)
    }

    fn locate_in<T>(
        &self,
        dirs: &mut SessionDirs,
        session: &SessionId,
        uri: &AttachmentUri,
        open: impl Fn(&std::os::fd::OwnedFd, &str) -> Result<T, ReadFailure>,
    ) -> Result<(T, PathBuf, RootKind), AttachmentError> {
        let refused = |reason: String| AttachmentError::Refused {
            uri: uri.clone(),
            reason,
        };
        if uri.session() != *session {
            return Err(refused(format!(
                "it names session {}, not session {session}",
                uri.session()
            )));
        }
        let name = uri.name();
        // A URI built with `AttachmentUri::new` from an arbitrary string is not checked
        // the way a parsed one is; only a name the store could have written is opened.
        if !is_stored_name(name) {
            return Err(refused(format!("{name:?} is not a safe stored name")));
        }
        dirs.start(session);
        // A path is built only where it is reported: the folder's once per root and
        // send, the file's for the root that has it, and for each root that did not.
        let mut tried = Vec::new();
        for (at, (root, kind)) in self.roots_in_order().enumerate() {
            let (folder, dir) = match dirs.open(at, root, session) {
                Ok((folder, Some(dir))) => (folder, dir),
                Ok((folder, None)) => {
                    tried.push(folder.join(name));
                    continue;
                }
                Err((folder, Beneath::Missing)) => {
                    tried.push(folder.join(name));
                    continue;
                }
                Err((folder, Beneath::Refused(reason))) => {
                    return Err(refused(format!("session folder {folder:?} {reason}")));
                }
                Err((folder, Beneath::Io(source))) => {
                    return Err(AttachmentError::Io {
                        uri: uri.clone(),
                        path: folder,
                        cause: source,
                    });
                }
            };
            let path = || folder.join(name);
            return match open(dir, name) {
                Ok(found) => {
                    let path = path();
                    if let RootKind::Legacy(i) = kind {
                        // Names and paths only: a log never carries a file's contents.
                        tracing::info!(
                            "attachment {uri} found in legacy root {} at {path:?}",
                            i + 1
                        );
                    }
                    Ok((found, path, kind))
                }
                Err(ReadFailure::Beneath(Beneath::Missing)) => {
                    tried.push(path());
                    continue;
                }
                Err(ReadFailure::Beneath(Beneath::Refused(reason))) => {
                    Err(refused(format!("{:?} {reason}", path())))
                }
                Err(ReadFailure::TooLarge(size)) => Err(AttachmentError::TooLarge {
                    uri: uri.clone(),
                    size,
                    limit: self.limit,
                }),
                Err(ReadFailure::Beneath(Beneath::Io(source))) => Err(AttachmentError::Io {
                    uri: uri.clone(),
                    path: path(),
                    cause: source,
                }),
            };
        }
        Err(AttachmentError::NotFound {
            uri: uri.clone(),
            tried,
        })
    }

    fn roots_in_order(&self) -> impl Iterator<Item = (&Path, RootKind)> {
        std::iter::once((self.roots.configured.as_path(), RootKind::Configured)).chain(
            self.roots
                .legacy
                .iter()
                .enumerate()
                .map(|(i, root)| (root.as_path(), RootKind::Legacy(i))),
        )
    }
}

/// The session folders one caller has opened, root by root, so that several files of
/// one session are looked up with one open of each folder. Only an opened folder and
/// a missing one are kept: a refusal or an error is met again, and reported the same
/// way, on the next lookup. Held for one operation, never across them.
#[derive(Default)]
pub struct SessionDirs {
    session: Option<SessionId>,
    /// By root, in lookup order: the session folder's path, with its descriptor when
    /// it opened and `None` when it is missing.
    opened: Vec<Option<(PathBuf, Option<std::os::fd::OwnedFd>)>>,
}

impl SessionDirs {
    /// Forgets the folders of any other session.
    fn start(&mut self, session: &SessionId) {
        if self.session != Some(*session) {
            self.session = Some(*session);
            self.opened.clear();
        }
    }

    /// The session folder under the `at`th root in lookup order, opened on first use:
    /// its path, and its descriptor unless it is missing. A refusal or an error comes
    /// with the path it concerns.
    fn open(
        &mut self,
        at: usize,
        root: &Path,
        session: &SessionId,
    ) -> Result<(&Path, Option<&std::os::fd::OwnedFd>), (PathBuf, Beneath)> {
        if self.opened.len() <= at {
            self.opened.resize_with(at + 1, || None);
        }
        let slot = &mut self.opened[at];
        if slot.is_none() {
            let folder = root.join(session.to_string());
            let dir = match disk::open_session_dir(&folder) {
                Ok(dir) => Some(dir),
                Err(Beneath::Missing) => None,
                Err(e) => return Err((folder, e)),
            };
            *slot = Some((folder, dir));
        }
        let (folder, dir) = slot.as_ref().expect("filled above");
        Ok((folder, dir.as_ref()))
    }

    /// The folder of `session` in `root` and its descriptor, if this holds it open.
    pub(super) fn held(
        &self,
        session: &SessionId,
        root: &RootKind,
    ) -> Option<(&Path, &std::os::fd::OwnedFd)> {
        if self.session != Some(*session) {
            return None;
        }
        let at = match root {
            RootKind::Configured => 0,
            RootKind::Legacy(i) => i + 1,
        };
        match self.opened.get(at) {
            Some(Some((folder, Some(dir)))) => Some((folder, dir)),
            _ => None,
        }
    }
}

fn beneath_io(e: Beneath) -> std::io::Error {
    match e {
        Beneath::Io(e) => e,
        Beneath::Missing => std::io::ErrorKind::NotFound.into(),
        Beneath::Refused(reason) => std::io::Error::other(format!("the session folder {reason}")),
    }
}

/// `std::path::absolute` fails only for an empty path or an unreadable current
/// directory; such a root then stays as given, and every read under it fails visibly.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests;
