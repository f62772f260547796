use super::*;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Session folders, uploads and an upload's temporary file (what a killed upload
/// leaves) get the sharing's modes whatever the umask; a folder that was there
/// keeps its own.
#[test]
fn folders_uploads_and_temporaries_get_the_sharing_mode_whatever_the_umask() {
    use crate::permissions::tests::{mode_of, with_umask};
    for umask in [0o000, 0o022, 0o077] {
        for sharing in [Sharing::Owner, Sharing::Group] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("root");
            let (temp_mode, name) = with_umask(umask, || {
                let dir = create_session_dir(&root, "s", sharing).unwrap();
                let temp = TempFile::create(dir.as_fd(), sharing).unwrap();
                let st = rustix::fs::fstat(&temp.file).unwrap();
                drop(temp);
                (
                    st.st_mode & 0o7777,
                    write_new(&dir, "a.txt", b"x", 1, sharing).unwrap(),
                )
            });
            let what = format!("umask {umask:03o}, {sharing:?}");
            assert_eq!(mode_of(&root), sharing.dir_mode(), "{what}");
            assert_eq!(mode_of(&root.join("s")), sharing.dir_mode(), "{what}");
            assert_eq!(
                mode_of(&root.join("s").join(name)),
                sharing.file_mode(),
                "{what}"
            );
            assert_eq!(temp_mode, sharing.file_mode(), "{what}");
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("s")).unwrap();
    std::fs::set_permissions(
        tmp.path().join("s"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    create_session_dir(tmp.path(), "s", Sharing::Owner).unwrap();
    assert_eq!(
        crate::permissions::tests::mode_of(&tmp.path().join("s")),
        0o755
    );
}

#[test]
fn a_failed_claim_leaves_no_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = create_session_dir(tmp.path(), "s", Sharing::Owner).unwrap();
    assert_eq!(
        write_new(&dir, "a.txt", b"one", 1, Sharing::Owner).unwrap(),
        "a.txt"
    );
    let e = write_new(&dir, "a.txt", b"two", 1, Sharing::Owner).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(entries(&tmp.path().join("s")), ["a.txt"]);
    assert_eq!(std::fs::read(tmp.path().join("s/a.txt")).unwrap(), b"one");
}

#[test]
fn the_sweep_pattern_matches_every_temporary_name_and_no_stored_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = create_session_dir(tmp.path(), "s", Sharing::Owner).unwrap();
    for _ in 0..20 {
        let temp = TempFile::create(dir.as_fd(), Sharing::Owner).unwrap();
        assert!(is_upload_temp(temp.name.as_bytes()), "{}", temp.name);
        assert!(!is_upload_temp(
            crate::attachments::sanitize_name(&temp.name).as_bytes()
        ));
    }
}

#[test]
fn rename_fallback_never_overwrites() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = create_session_dir(tmp.path(), "s", Sharing::Owner).unwrap();
    std::fs::write(tmp.path().join("s/a.txt"), b"old").unwrap();
    let mut temp = TempFile::create(dir.as_fd(), Sharing::Owner).unwrap();
    temp.file.write_all(b"new").unwrap();
    assert_eq!(temp.rename_noreplace("a.txt"), Err(Errno::EXIST));
    temp.rename_noreplace("b.txt").unwrap();
    drop(temp);
    assert_eq!(entries(&tmp.path().join("s")), ["a.txt", "b.txt"]);
    assert_eq!(std::fs::read(tmp.path().join("s/a.txt")).unwrap(), b"old");
    assert_eq!(std::fs::read(tmp.path().join("s/b.txt")).unwrap(), b"new");
}

#[test]
fn special_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("s");
    std::fs::create_dir(&folder).unwrap();
    std::fs::create_dir(folder.join("sub")).unwrap();
    let fifo = folder.join("pipe");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(folder.join("sock")).unwrap();
    let dir = open_session_dir(&folder).unwrap();
    for name in ["sub", "pipe", "sock"] {
        assert!(
            matches!(
                read_beneath(&dir, name, 10),
                Err(ReadFailure::Beneath(Beneath::Refused(_)))
            ),
            "{name}"
        );
    }
    assert!(matches!(
        read_beneath(&dir, "none", 10),
        Err(ReadFailure::Beneath(Beneath::Missing))
    ));
}

#[test]
fn a_file_over_the_limit_is_refused_by_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = create_session_dir(tmp.path(), "s", Sharing::Owner).unwrap();
    std::fs::write(tmp.path().join("s/at"), b"12345").unwrap();
    std::fs::write(tmp.path().join("s/over"), b"123456").unwrap();
    // A sparse file: its size says 1 TiB but no byte of it is ever read.
    File::create(tmp.path().join("s/huge"))
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    assert_eq!(read_beneath(&dir, "at", 5).unwrap(), b"12345");
    assert!(matches!(
        read_beneath(&dir, "over", 5),
        Err(ReadFailure::TooLarge(6))
    ));
    assert!(matches!(
        read_beneath(&dir, "huge", 5),
        Err(ReadFailure::TooLarge(size)) if size == 1 << 40
    ));
}

/// Files in /proc report a size of 0 whatever they hold: the stand-in for a file that
/// grows after its size was checked, so the cap on the read itself is what stops it.
#[cfg(target_os = "linux")]
#[test]
fn a_file_larger_than_its_reported_size_is_cut_off_at_the_limit() {
    let folder = Path::new("/proc").join(std::process::id().to_string());
    let Ok(dir) = open_session_dir(&folder) else {
        return; // no /proc here
    };
    let status = std::fs::read(folder.join("status")).unwrap();
    assert!(
        status.len() > 10,
        "a process status is longer than 10 bytes"
    );
    assert_eq!(
        rustix::fs::stat(folder.join("status")).unwrap().st_size,
        0,
        "the test relies on /proc reporting no size"
    );
    assert!(matches!(
        read_beneath(&dir, "status", 10),
        Err(ReadFailure::TooLarge(11))
    ));
    assert!(read_beneath(&dir, "status", 1 << 20).is_ok());
}

#[test]
fn a_root_that_is_a_file_is_missing_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("root"), b"x").unwrap();
    assert!(matches!(
        open_session_dir(&tmp.path().join("root/s")),
        Err(Beneath::Missing)
    ));
    std::fs::write(tmp.path().join("s"), b"x").unwrap();
    assert!(matches!(
        open_session_dir(&tmp.path().join("s")),
        Err(Beneath::Refused("is not a directory"))
    ));
}
