//! Open-beneath file access inside one session folder: every open is relative to the
//! folder's descriptor and never follows a symlink, and every folder and file it makes
//! gets the mode `Sharing` names whatever the umask (set again on the open descriptor);
//! this never decides which root or name to try, never checks a path before opening
//! it, and never changes the mode of what it did not make.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::name::numbered_name;
use crate::config::Sharing;

/// Why something beneath a root could not be opened.
#[derive(Debug)]
pub(super) enum Beneath {
    /// Nothing is there: the caller may look in another root.
    Missing,
    /// Something is there that must not be used (a symlink, not a regular file or
    /// folder); the reason reads after the thing's path.
    Refused(&'static str),
    Io(io::Error),
}

impl From<Errno> for Beneath {
    fn from(e: Errno) -> Self {
        Self::Io(e.into())
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens a session folder without following a symlink in its last component. The
/// root above it may be a symlink (a root on another disk is normal); the session
/// folder may not.
pub(super) fn open_session_dir(folder: &Path) -> Result<OwnedFd, Beneath> {
    match rustix::fs::open(folder, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(Beneath::Missing),
        Err(Errno::LOOP) => Err(Beneath::Refused("is a symlink")),
        // Linux reports a symlink opened with O_DIRECTORY|O_NOFOLLOW as ENOTDIR. The
        // lstat below only picks the message (or notices a root that is not a folder);
        // it never leads to an open, so it cannot be raced into following anything.
        Err(Errno::NOTDIR) => Err(
            match rustix::fs::statat(CWD, folder, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    Beneath::Refused("is a symlink")
                }
                Ok(_) => Beneath::Refused("is not a directory"),
                Err(Errno::NOENT | Errno::NOTDIR) => Beneath::Missing,
                Err(e) => e.into(),
            },
        ),
        Err(e) => Err(e.into()),
    }
}

/// Why a file beneath a session folder could not be read.
#[derive(Debug)]
pub(super) enum ReadFailure {
    Beneath(Beneath),
    /// The file holds more than the limit; the size is as much of it as was seen.
    TooLarge(u64),
}

impl From<Beneath> for ReadFailure {
    fn from(e: Beneath) -> Self {
        Self::Beneath(e)
    }
}

impl From<Errno> for ReadFailure {
    fn from(e: Errno) -> Self {
        Self::Beneath(e.into())
    }
}

/// Opens the regular file `name` directly inside `dir`, never following a symlink and
/// never blocking on a FIFO, and returns it with its size from the open descriptor,
/// refusing one over `limit` before anything is read. `name` must be a single path
/// component.
pub(super) fn open_regular(
    dir: &OwnedFd,
    name: &str,
    limit: u64,
) -> Result<(File, u64), ReadFailure> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err(Beneath::Missing.into()),
        Err(Errno::LOOP) => return Err(Beneath::Refused("is a symlink").into()),
        // A UNIX socket cannot be opened at all.
        Err(Errno::NXIO) => return Err(Beneath::Refused("is not a regular file").into()),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Beneath::Refused("is not a regular file").into());
    }
    // The size is checked before anything is allocated for it, so a huge file costs
    // nothing; `st_size` is never negative for a regular file.
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > limit {
        return Err(ReadFailure::TooLarge(size));
    }
    Ok((File::from(fd), size))
}

/// Opens `name` inside `dir` exactly as [`read_beneath`] does, and reads no more than
/// its first `head` bytes: the file's size (from the open descriptor) and its start.
pub(super) fn peek_beneath(
    dir: &OwnedFd,
    name: &str,
    limit: u64,
    head: usize,
) -> Result<(u64, Vec<u8>), ReadFailure> {
    let (file, size) = open_regular(dir, name, limit)?;
    let want = usize::try_from(size).unwrap_or(usize::MAX).min(head);
    let mut bytes = Vec::with_capacity(want);
    file.take(head as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| ReadFailure::Beneath(Beneath::Io(e)))?;
    Ok((size, bytes))
}

/// Opens and reads the regular file `name` directly inside `dir`, never following a
/// symlink and never blocking on a FIFO, and never holding more than `limit` bytes of
/// it. `name` must be a single path component.
pub(super) fn read_beneath(dir: &OwnedFd, name: &str, limit: u64) -> Result<Vec<u8>, ReadFailure> {
    let (mut file, size) = open_regular(dir, name, limit)?;
    // The capacity is the file's size, so at most `limit`; it grows only if the file
    // grew, and the read below never takes more than `limit + 1` bytes.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // The file may grow after the fstat (or report no size at all, like files in
    // /proc): reading one byte past the limit tells "at the limit" from "over it".
    (&mut file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadFailure::Beneath(Beneath::Io(e)))?;
    let read = bytes.len() as u64;
    if read > limit {
        // The file's size now, if it can be had, says better than `limit + 1` how much
        // it grew.
        let now = rustix::fs::fstat(&file).map_or(0, |st| u64::try_from(st.st_size).unwrap_or(0));
        return Err(ReadFailure::TooLarge(read.max(now)));
    }
    Ok(bytes)
}

/// Removes the entry `name` from the open folder `dir`. A symlink is removed itself,
/// never what it points at.
pub(super) fn remove_beneath(dir: &OwnedFd, name: &str) -> std::io::Result<()> {
    rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).map_err(std::io::Error::from)
}

/// Opens `<root>/<session>` for writing new files, creating both as needed with the
/// folder mode of `sharing` (folders that exist keep theirs). The root is followed if
/// it is a symlink; the session folder is not.
pub(super) fn create_session_dir(
    root: &Path,
    session: &str,
    sharing: Sharing,
) -> Result<OwnedFd, Beneath> {
    crate::permissions::create_dir_all(root, sharing).map_err(Beneath::Io)?;
    let root_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root_fd = rustix::fs::open(root, root_flags, Mode::empty())?;
    let created = match rustix::fs::mkdirat(
        &root_fd,
        session,
        Mode::from_raw_mode(sharing.dir_mode() & 0o777),
    ) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let dir = match rustix::fs::openat(&root_fd, session, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(Beneath::Refused("is a symlink")),
        Err(Errno::NOTDIR) => return Err(Beneath::Refused("is a symlink or not a directory")),
        Err(e) => return Err(e.into()),
    };
    if created {
        // The umask may have taken bits the mode needs (the group's, set-group-ID).
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(sharing.dir_mode()))?;
        // The new folder's entry must be durable before files in it are reported stored.
        rustix::fs::fsync(&root_fd)?;
    }
    Ok(dir)
}

/// The prefix and suffix of a temporary upload's name; between them are the 32
/// lowercase hex digits of a UUID. [`is_upload_temp`] is the one place that recognizes
/// the pattern, so the sweep can never take a stored name for a leftover.
const TEMP_PREFIX: &str = ".upload-";
const TEMP_SUFFIX: &str = ".partial.";

/// Whether `name` is exactly the name [`TempFile::create`] gives a temporary upload.
pub(super) fn is_upload_temp(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(TEMP_PREFIX.as_bytes()) else {
        return false;
    };
    let Some(hex) = rest.strip_suffix(TEMP_SUFFIX.as_bytes()) else {
        return false;
    };
    hex.len() == 32 && hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Removes the temporary upload files a killed upload left in the open folder `dir`
/// whose last change is more than `grace` before `now`, and returns how many went and
/// how many bytes they held. One scan of this folder only: no recursion, nothing but
/// regular files whose names match the temporary pattern exactly, never a symlink
/// (`statat` does not follow one, and `unlinkat` removes an entry, not its target).
/// A live upload keeps touching its file, so the grace period keeps it safe.
pub(super) fn sweep_upload_temps(
    dir: &OwnedFd,
    grace: std::time::Duration,
    now: std::time::SystemTime,
) -> io::Result<(usize, u64)> {
    let cutoff = now.checked_sub(grace).unwrap_or(std::time::UNIX_EPOCH);
    let mut removed = (0, 0);
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if !is_upload_temp(name.to_bytes()) {
            continue;
        }
        // `None`: another sweep or the upload itself got there first.
        let Some(st) = look(dir, name)? else { continue };
        let (kind, size, _, modified) = kind_and_time(&st);
        if kind != EntryKind::File || modified >= cutoff {
            continue;
        }
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) => {
                removed.0 += 1;
                removed.1 += size;
            }
            Err(Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

/// Hard-links `name` in `from` as `name` in `to`, never replacing an entry, and checks
/// that the new entry is the very file `opened` (the one checked as a regular file):
/// `linkat` takes a name, which could have been swapped for something else since it
/// was opened, so a link to anything else is removed again. `Ok(false)` means no link
/// was made here (another file system, no hard links, or the name changed) and the
/// caller should copy `opened` instead; an existing `name` in `to` is an error.
pub(super) fn link_beneath(
    from: &OwnedFd,
    name: &str,
    to: &OwnedFd,
    opened: &File,
) -> io::Result<bool> {
    match rustix::fs::linkat(from, name, to, name, AtFlags::empty()) {
        Ok(()) => {}
        Err(Errno::XDEV | Errno::PERM | Errno::OPNOTSUPP | Errno::MLINK | Errno::ACCESS) => {
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    let want = rustix::fs::fstat(opened)?;
    let got = rustix::fs::statat(to, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if got.st_dev != want.st_dev || got.st_ino != want.st_ino {
        rustix::fs::unlinkat(to, name, AtFlags::empty())?;
        return Ok(false);
    }
    rustix::fs::fsync(to)?;
    Ok(true)
}

/// Reads what is left of an opened file, never more than `limit` bytes: a file that
/// grew past the limit since it was opened is an error, not a cut copy.
pub(super) fn read_opened(file: &mut File, size: u64, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it grew past the {limit}-byte limit while it was copied"),
        ));
    }
    Ok(bytes)
}

/// Removes the session folder `name` from `root` if it is empty; anything else (it
/// holds files, it is gone, it is a symlink) leaves it as it is.
pub(super) fn remove_empty_dir(root: &Path, name: &str) {
    if let Ok(root_fd) = open_root(root) {
        let _ = rustix::fs::unlinkat(&root_fd, name, AtFlags::REMOVEDIR);
    }
}

/// What an entry of a folder is, looked at without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryKind {
    File,
    /// A regular file named like a temporary upload ([`is_upload_temp`]).
    UploadTemp,
    Symlink,
    Dir,
    Other,
}

/// One entry of a folder: its name, what it is, its size, and when it last changed
/// (the later of its modification and status-change times, so a file just linked into
/// place counts as new even when its contents are older).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub name: std::ffi::OsString,
    pub kind: EntryKind,
    pub size: u64,
    pub changed: std::time::SystemTime,
    /// The modification time alone, which a live upload keeps moving.
    pub modified: std::time::SystemTime,
}

/// `name` in `dir` as `statat` sees it without following it; `None` when it is gone.
fn look(dir: &OwnedFd, name: impl rustix::path::Arg) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What an entry is, its size, when it last changed (see [`Entry`]) and was modified.
type Looked = (EntryKind, u64, std::time::SystemTime, std::time::SystemTime);

fn kind_and_time(st: &rustix::fs::Stat) -> Looked {
    let at = |secs: i64, nanos: i64| {
        std::time::UNIX_EPOCH
            + std::time::Duration::new(
                u64::try_from(secs).unwrap_or(0),
                u32::try_from(nanos).unwrap_or(0),
            )
    };
    #[allow(clippy::unnecessary_cast)]
    let modified = at(st.st_mtime as i64, st.st_mtime_nsec as i64);
    #[allow(clippy::unnecessary_cast)]
    let changed = modified.max(at(st.st_ctime as i64, st.st_ctime_nsec as i64));
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Symlink => EntryKind::Symlink,
        FileType::Directory => EntryKind::Dir,
        _ => EntryKind::Other,
    };
    (
        kind,
        u64::try_from(st.st_size).unwrap_or(0),
        changed,
        modified,
    )
}

/// Every entry of the open folder `dir` but `.` and `..`, each looked at with
/// `statat(AT_SYMLINK_NOFOLLOW)`: nothing is followed or opened. An entry that went
/// away between the listing and its look is left out.
pub(super) fn list_entries(dir: &OwnedFd) -> io::Result<Vec<Entry>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let Some(st) = look(dir, name)? else { continue };
        let (mut kind, size, changed, modified) = kind_and_time(&st);
        if kind == EntryKind::File && is_upload_temp(name.to_bytes()) {
            kind = EntryKind::UploadTemp;
        }
        out.push(Entry {
            name: std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned(),
            kind,
            size,
            changed,
            modified,
        });
    }
    Ok(out)
}

/// Opens a root folder to work beneath it. The root itself may be a symlink (a root
/// on another disk is normal); nothing beneath it is followed.
pub(super) fn open_root(root: &Path) -> Result<OwnedFd, Beneath> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::open(root, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(Beneath::Missing),
        Err(Errno::NOTDIR) => Err(Beneath::Refused("is not a directory")),
        Err(e) => Err(e.into()),
    }
}

/// Removes the regular file `name` from `dir` when it is still a regular file that
/// last changed before `cutoff`, and returns its size; `None` when it is gone, has
/// changed since, or is not a regular file (nothing is removed then).
pub(super) fn remove_file_if_older(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    cutoff: std::time::SystemTime,
) -> io::Result<Option<u64>> {
    let Some(st) = look(dir, name)? else {
        return Ok(None);
    };
    let (kind, size, changed, _) = kind_and_time(&st);
    if kind != EntryKind::File || changed >= cutoff {
        return Ok(None);
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => Ok(Some(size)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes the entry `name` of `parent` and, when it is a folder, everything in it,
/// and returns how many files went and their bytes. Nothing is followed: a symlink is
/// removed as a link, a folder is entered only through `openat(O_NOFOLLOW)` on its
/// parent's descriptor, so a folder swapped for a link mid-way is refused, not
/// entered.
pub(super) fn remove_tree(parent: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<(usize, u64)> {
    let Some(st) = look(parent, name)? else {
        return Ok((0, 0));
    };
    let (kind, size, _, _) = kind_and_time(&st);
    if kind != EntryKind::Dir {
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) => Ok((1, if kind == EntryKind::Symlink { 0 } else { size })),
            Err(Errno::NOENT) => Ok((0, 0)),
            Err(e) => Err(e.into()),
        };
    }
    let dir = rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty())?;
    let mut removed = (0, 0);
    for entry in list_entries(&dir)? {
        let (files, bytes) = remove_tree(&dir, &entry.name)?;
        removed.0 += files;
        removed.1 += bytes;
    }
    drop(dir);
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    // The removal must be durable before a caller reports the files gone.
    rustix::fs::fsync(parent)?;
    Ok(removed)
}

/// Whether `name` is a regular file directly inside `dir`, looked at without
/// following or opening it: the cheap check `send` repeats inside its write.
pub(super) fn regular_file_at(dir: &OwnedFd, name: &str) -> Result<(), Beneath> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => Ok(()),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            Err(Beneath::Refused("is a symlink"))
        }
        Ok(_) => Err(Beneath::Refused("is not a regular file")),
        Err(Errno::NOENT) => Err(Beneath::Missing),
        Err(e) => Err(e.into()),
    }
}

/// The `limit` smallest names after `after` (byte order) of the regular files directly
/// inside `dir` that `keep` accepts: no symlink, folder or upload temporary, only UTF-8
/// names, nothing opened. A folder has no order, so it is read whole, but only `limit`
/// names are kept and only a name that would be kept is looked at.
pub(super) fn regular_after(
    dir: &OwnedFd,
    after: &str,
    limit: usize,
    keep: impl Fn(&str) -> bool,
) -> io::Result<BTreeSet<String>> {
    let mut names = BTreeSet::<String>::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if is_upload_temp(name.to_bytes()) {
            continue;
        }
        let Ok(text) = name.to_str() else { continue };
        let beyond = names.len() >= limit && names.last().is_some_and(|l| text >= l.as_str());
        if text == "." || text == ".." || text <= after || beyond || !keep(text) {
            continue;
        }
        let regular = |st: rustix::fs::Stat| kind_and_time(&st).0 == EntryKind::File;
        if look(dir, name)?.is_some_and(regular) {
            names.insert(text.to_owned());
            if names.len() > limit {
                names.pop_last();
            }
        }
    }
    Ok(names)
}

/// How many names (`name`, `name (1)`, ...) a store tries before giving up.
pub(super) const MAX_CLAIM_ATTEMPTS: u32 = 10_000;

/// Writes `bytes` as a new file in `dir` under `name` or the first free numbered
/// variant of it, and returns the name it got. Never overwrites, never shows partial
/// contents under a stored name, and leaves no temporary file behind.
pub(super) fn write_new(
    dir: &OwnedFd,
    name: &str,
    bytes: &[u8],
    max_attempts: u32,
    sharing: Sharing,
) -> io::Result<String> {
    let mut temp = TempFile::create(dir.as_fd(), sharing)?;
    temp.file.write_all(bytes)?;
    temp.file.sync_all()?;
    let claimed = claim(&mut temp, name, max_attempts)?;
    drop(temp);
    if let Err(e) = rustix::fs::fsync(dir) {
        // The caller is told the store failed, so the name must not stay taken.
        let _ = rustix::fs::unlinkat(dir, claimed.as_str(), AtFlags::empty());
        return Err(e.into());
    }
    Ok(claimed)
}

/// Gives the temporary file its final name without ever replacing an existing file:
/// `link` fails with EEXIST when the name is taken, and so does a NOREPLACE rename on
/// file systems without hard links.
fn claim(temp: &mut TempFile<'_>, name: &str, max_attempts: u32) -> io::Result<String> {
    let mut use_rename = false;
    for n in 0..max_attempts {
        let candidate = if n == 0 {
            name.to_owned()
        } else {
            numbered_name(name, n)
        };
        loop {
            let result = if use_rename {
                temp.rename_noreplace(&candidate)
            } else {
                rustix::fs::linkat(
                    temp.dir,
                    temp.name.as_str(),
                    temp.dir,
                    candidate.as_str(),
                    AtFlags::empty(),
                )
            };
            match result {
                Ok(()) => return Ok(candidate),
                Err(Errno::EXIST) => break,
                Err(Errno::PERM | Errno::OPNOTSUPP | Errno::MLINK) if !use_rename => {
                    use_rename = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{max_attempts} names like this one are already taken"),
    ))
}

/// A freshly created file in a session folder that is unlinked when dropped (unless it
/// was renamed into place), with the file mode of its sharing from the start, so the
/// stored file it becomes (a link to it, or it renamed) has that mode too. Its name
/// starts with `.` and ends with `.`: a stored name never ends with a dot, so no
/// stored name or URI can ever name a temporary file.
struct TempFile<'a> {
    dir: BorrowedFd<'a>,
    name: String,
    file: File,
    present: bool,
}

impl<'a> TempFile<'a> {
    fn create(dir: BorrowedFd<'a>, sharing: Sharing) -> io::Result<Self> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut last = Errno::EXIST;
        for _ in 0..16 {
            // v7 ids carry random bits; O_EXCL makes a collision a retry, not a clash.
            let name = format!(
                "{TEMP_PREFIX}{}{TEMP_SUFFIX}",
                uuid::Uuid::now_v7().simple()
            );
            let mode = Mode::from_raw_mode(sharing.file_mode());
            match rustix::fs::openat(dir, name.as_str(), flags, mode) {
                Ok(fd) => {
                    // Set again: the umask may have taken the group's bits.
                    if let Err(e) = rustix::fs::fchmod(&fd, mode) {
                        let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
                        return Err(e.into());
                    }
                    return Ok(Self {
                        dir,
                        name,
                        file: File::from(fd),
                        present: true,
                    });
                }
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.into())
    }

    #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
    fn rename_noreplace(&mut self, to: &str) -> Result<(), Errno> {
        rustix::fs::renameat_with(
            self.dir,
            self.name.as_str(),
            self.dir,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        )?;
        self.present = false;
        Ok(())
    }

    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    fn rename_noreplace(&mut self, _to: &str) -> Result<(), Errno> {
        Err(Errno::NOTSUP)
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if self.present {
            let _ = rustix::fs::unlinkat(self.dir, self.name.as_str(), AtFlags::empty());
        }
    }
}

#[cfg(test)]
mod tests;
