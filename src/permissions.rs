//! Files and folders the store creates outside an attachment folder, with `Sharing`'s
//! mode whatever the umask (which may have taken bits a group setting needs): the mode
//! is set again on the open descriptor. Never changes what it did not just create.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::config::Sharing;

/// Creates the file `path` (`O_EXCL`) for writing, with the file mode of `sharing`.
pub(crate) fn create_new(path: &Path, sharing: Sharing) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(sharing.file_mode())
        .open(path)?;
    set_mode(&file, sharing.file_mode())?;
    Ok(file)
}

/// Sets the mode of what this process just created through its open descriptor, so no
/// other file can be changed in its place.
pub(crate) fn set_mode(fd: impl AsFd, mode: u32) -> io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(io::Error::from)
}

/// Creates `path` and missing folders above it with `sharing`'s folder mode.
pub(crate) fn create_dir_all(path: &Path, sharing: Sharing) -> io::Result<()> {
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_dir_all(parent, sharing)?;
    }
    match rustix::fs::mkdir(path, Mode::from_raw_mode(sharing.dir_mode() & 0o777)) {
        Ok(()) => {}
        // Made meanwhile by someone else: theirs, so left as it is.
        Err(rustix::io::Errno::EXIST) if path.is_dir() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::open(path, flags, Mode::empty())?;
    set_mode(&dir, sharing.dir_mode())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Runs `f` with the process's umask set to `umask`, restoring it after. The umask
    /// is process-wide, so the tests that change it take turns.
    pub(crate) fn with_umask<T>(umask: u32, f: impl FnOnce() -> T) -> T {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: umask(2) cannot fail and touches no memory.
        let old = unsafe { libc::umask(umask as libc::mode_t) };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    pub(crate) fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn files_and_folders_get_the_sharing_mode_whatever_the_umask() {
        for umask in [0o000, 0o022, 0o027, 0o077] {
            for sharing in [Sharing::Owner, Sharing::Group] {
                let tmp = tempfile::tempdir().unwrap();
                let (file, dir) = with_umask(umask, || {
                    let dir = tmp.path().join("a/b/c");
                    create_dir_all(&dir, sharing).unwrap();
                    let file = dir.join("f");
                    create_new(&file, sharing).unwrap();
                    (file, dir)
                });
                assert_eq!(mode_of(&file), sharing.file_mode(), "{umask:o} {sharing:?}");
                for folder in [tmp.path().join("a"), tmp.path().join("a/b"), dir] {
                    assert_eq!(
                        mode_of(&folder),
                        sharing.dir_mode(),
                        "{umask:o} {sharing:?}"
                    );
                }
                assert!(
                    create_new(&file, sharing).is_err(),
                    "never an existing file"
                );
            }
        }
    }

    #[test]
    fn an_existing_folder_keeps_its_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir_all(&open.join("inner"), Sharing::Owner).unwrap();
        assert_eq!(mode_of(&open), 0o755);
        assert_eq!(mode_of(&open.join("inner")), 0o700);
    }
}
