//! The attachment store's unit tests: resolution order across roots, concurrent and
//! hostile uploads, the checks of `send` against a full read, symlinks refused,
//! size limits and MIME sniffing. They use real files in temporary folders.

use super::*;
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use tempfile::TempDir;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

/// A store over real temporary roots: `configured`, plus `legacy` roots.
struct TestStore {
    dir: TempDir,
    store: AttachmentStore,
    session: SessionId,
}

impl TestStore {
    fn new(legacy: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots {
            configured: dir.path().join("configured"),
            legacy: (0..legacy)
                .map(|i| dir.path().join(format!("legacy{i}")))
                .collect(),
        };
        Self {
            store: AttachmentStore::new(roots),
            dir,
            session: SessionId::new(),
        }
    }

    fn folder(&self, root: &Path) -> PathBuf {
        root.join(self.session.to_string())
    }

    fn configured_folder(&self) -> PathBuf {
        self.folder(&self.store.roots().configured)
    }

    fn legacy_folder(&self, i: usize) -> PathBuf {
        self.folder(&self.store.roots().legacy[i])
    }

    /// Puts a file directly in a root, as an older version would have.
    fn plant(&self, folder: &Path, name: &str, bytes: &[u8]) -> AttachmentUri {
        std::fs::create_dir_all(folder).unwrap();
        std::fs::write(folder.join(name), bytes).unwrap();
        AttachmentUri::new(self.session, name)
    }

    fn read(&self, uri: &AttachmentUri) -> Result<Resolved, AttachmentError> {
        self.store.read(&self.session, uri)
    }

    fn refused(&self, uri: &AttachmentUri) -> String {
        match self.read(uri) {
            Err(e @ AttachmentError::Refused { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn stores_with_different_roots_resolve_after_a_move() {
    let t = TestStore::new(0);
    let stored = t.store.store(&t.session, "moved.txt", b"moving").unwrap();
    let new_root = t.dir.path().join("new-root");
    std::fs::create_dir_all(&new_root).unwrap();
    std::fs::rename(t.configured_folder(), t.folder(&new_root)).unwrap();

    let moved = AttachmentStore::new(Roots {
        configured: new_root.clone(),
        legacy: vec![],
    });
    let r = moved.read(&t.session, &stored.uri).unwrap();
    assert_eq!(&*r.bytes, b"moving");
    assert_eq!(r.path, t.folder(&new_root).join("moved.txt"));
    assert!(t.read(&stored.uri).unwrap_err().is_not_found());

    // A store that keeps the new root as a legacy root finds it there.
    let both = AttachmentStore::new(Roots {
        configured: t.store.roots().configured.clone(),
        legacy: vec![new_root.clone()],
    });
    let r = both.read(&t.session, &stored.uri).unwrap();
    assert_eq!(r.root, RootKind::Legacy(0));
    assert_eq!(r.path, t.folder(&new_root).join("moved.txt"));
}

#[test]
fn relative_roots_are_made_absolute() {
    let store = AttachmentStore::new(Roots {
        configured: PathBuf::from("rel/configured"),
        legacy: vec![PathBuf::from("rel/legacy")],
    });
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(store.roots().configured, cwd.join("rel/configured"));
    assert_eq!(store.roots().legacy, [cwd.join("rel/legacy")]);
}

#[test]
fn ten_concurrent_uploads_of_one_name_get_ten_files() {
    let t = TestStore::new(0);
    let stored: Vec<(Vec<u8>, StoredAttachment)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..10)
            .map(|i| {
                let t = &t;
                s.spawn(move || {
                    let bytes = format!("upload number {i}").repeat(1000).into_bytes();
                    let stored = t.store.store(&t.session, "a.txt", &bytes).unwrap();
                    (bytes, stored)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let names: BTreeSet<_> = stored.iter().map(|(_, s)| s.name.clone()).collect();
    let expected: BTreeSet<_> = std::iter::once("a.txt".to_owned())
        .chain((1..10).map(|i| format!("a ({i}).txt")))
        .collect();
    assert_eq!(names, expected);
    for (bytes, s) in &stored {
        assert_eq!(&*t.read(&s.uri).unwrap().bytes, bytes.as_slice());
        assert_eq!(s.size, bytes.len() as u64);
    }
    let on_disk: BTreeSet<_> = std::fs::read_dir(t.configured_folder())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(on_disk, expected, "no temporary file may be left behind");
}

#[test]
fn names_with_spaces_unicode_quotes_and_markup() {
    let t = TestStore::new(0);
    let nfc = t.store.store(&t.session, "Café menu.txt", b"1").unwrap();
    let nfd = t
        .store
        .store(&t.session, "Cafe\u{301} menu.txt", b"2")
        .unwrap();
    assert_eq!(nfc.name, "Caf\u{e9} menu.txt");
    assert_eq!(nfd.name, "Caf\u{e9} menu (1).txt");
    let quotes = t
        .store
        .store(&t.session, "say \"hi\" 'there'.md", b"3")
        .unwrap();
    assert_eq!(quotes.name, "say \"hi\" 'there'.md");
    let markup = t.store.store(&t.session, "<b>markup</b>", b"4").unwrap();
    assert_eq!(markup.name, "b>");
    let angle = t
        .store
        .store(&t.session, "<b>markup<b>.html", b"5")
        .unwrap();
    assert_eq!(angle.name, "<b>markup<b>.html");
    for s in [&nfc, &nfd, &quotes, &markup, &angle] {
        let parsed = AttachmentUri::parse(&s.uri.to_string()).unwrap();
        assert_eq!(parsed, s.uri);
        assert!(t.configured_folder().join(&s.name).is_file(), "{}", s.name);
        t.read(&parsed).unwrap();
    }
}

#[test]
fn traversal_upload_names_stay_in_the_session_folder() {
    let t = TestStore::new(0);
    let cases = [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\x", "x"),
        ("..", "attachment"),
        (".", "attachment (1)"),
        ("/abs/path", "path"),
        ("nul\0byte.txt", "nulbyte.txt"),
        ("ctrl\u{7}\u{1b}\r\n.txt", "ctrl.txt"),
    ];
    for (upload, expected) in cases {
        let s = t
            .store
            .store(&t.session, upload, upload.as_bytes())
            .unwrap();
        let r = t.read(&s.uri).unwrap();
        assert_eq!(r.path.parent(), Some(t.configured_folder().as_path()));
        assert_eq!(&*r.bytes, upload.as_bytes());
        assert_eq!(s.name, expected, "{upload:?}");
    }
    let root_entries: Vec<_> = std::fs::read_dir(&t.store.roots().configured)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(root_entries, [t.session.to_string().as_str()]);
}

/// `check` opens what `read` opens, in the same roots in the same order, refuses
/// what it refuses, and records what a full read gives.
#[test]
fn check_agrees_with_a_full_read_in_every_case() {
    let mut t = TestStore::new(2);
    t.store = t.store.clone().with_limit(3 * SNIFF_BYTES as u64);
    let mut long_text = vec![b'x'; SNIFF_BYTES - 1];
    long_text.extend_from_slice("é, then a NUL \0 past the sniffed part".as_bytes());
    let mut uris = vec![
        t.plant(&t.configured_folder(), "photo.jpg", PNG),
        t.plant(&t.configured_folder(), "README", &long_text),
        t.plant(&t.configured_folder(), "empty", b""),
        t.plant(
            &t.legacy_folder(1),
            "old notes",
            b"only in the second legacy root",
        ),
        t.plant(&t.legacy_folder(0), "both.txt", b"legacy copy"),
        t.plant(&t.configured_folder(), "both.txt", b"configured copy"),
        t.plant(
            &t.configured_folder(),
            "big.bin",
            &vec![1; 3 * SNIFF_BYTES + 1],
        ),
        t.plant(
            &t.legacy_folder(0),
            "dir",
            b"legacy copy of a folder's name",
        ),
        AttachmentUri::new(t.session, "missing.txt"),
        AttachmentUri::new(t.session, "../escape"),
        AttachmentUri::new(SessionId::new(), "photo.jpg"),
    ];
    std::fs::create_dir(t.configured_folder().join("dir")).unwrap();
    symlink("README", t.configured_folder().join("link")).unwrap();
    uris.push(AttachmentUri::new(t.session, "link"));
    // One `SessionDirs` for every check, as a send holds one for its references,
    // gives what a fresh open of each folder gives, refusals included.
    let mut dirs = SessionDirs::default();
    for uri in uris.iter().chain(&uris) {
        let fresh = t.store.check(&t.session, uri);
        let shared = t.store.check_in(&mut dirs, &t.session, uri);
        assert_eq!(format!("{fresh:?}"), format!("{shared:?}"), "{uri}");
    }
    let other = SessionId::new();
    let folder = t.store.roots().configured.join(other.to_string());
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("theirs.txt"), b"x").unwrap();
    let theirs = AttachmentUri::new(other, "theirs.txt");
    let found = t.store.check_in(&mut dirs, &other, &theirs);
    assert_eq!(
        found.map(|c| c.path).ok(),
        Some(folder.join("theirs.txt")),
        "another session's lookup must not use this session's folders"
    );
    for uri in &uris {
        match (t.store.check(&t.session, uri), t.read(uri)) {
            (Ok(checked), Ok(read)) => {
                assert_eq!(checked.name, read.name, "{uri}");
                assert_eq!(checked.mime, read.mime, "{uri}");
                assert_eq!(checked.size, read.bytes.len() as u64, "{uri}");
                assert_eq!(checked.path, read.path, "{uri}");
                assert_eq!(checked.root, read.root, "{uri}");
            }
            (Err(c), Err(r)) => assert_eq!(c.to_string(), r.to_string(), "{uri}"),
            (c, r) => panic!("{uri}: check gave {c:?}, read gave {r:?}"),
        }
    }
    let readme = t.store.check(&t.session, &uris[1]).unwrap();
    assert_eq!(readme.mime, "text/plain");
    let old = t.store.check(&t.session, &uris[3]).unwrap();
    assert_eq!(old.root, RootKind::Legacy(1));
}

/// `send` repeats its check inside the write through the folder the check held
/// open; that repeat must see what a fresh open of the folder sees: the file
/// there, gone, or swapped for a link, in the configured root and a legacy one.
#[test]
fn still_there_through_the_held_folder_agrees_with_a_fresh_open() {
    let t = TestStore::new(1);
    let here = t.plant(&t.configured_folder(), "here.txt", b"a");
    let old = t.plant(&t.legacy_folder(0), "old.txt", b"b");
    let taken = t.plant(&t.configured_folder(), "taken.txt", b"c");
    let swapped = t.plant(&t.legacy_folder(0), "swapped.txt", b"d");
    let mut dirs = SessionDirs::default();
    let found: Vec<_> = [&here, &old, &taken, &swapped]
        .into_iter()
        .map(|uri| {
            (
                uri,
                t.store.check_in(&mut dirs, &t.session, uri).unwrap().root,
            )
        })
        .collect();
    assert_eq!(found[1].1, RootKind::Legacy(0));
    std::fs::remove_file(t.configured_folder().join("taken.txt")).unwrap();
    std::fs::remove_file(t.legacy_folder(0).join("swapped.txt")).unwrap();
    symlink("old.txt", t.legacy_folder(0).join("swapped.txt")).unwrap();
    let outcome = |dirs: &SessionDirs, uri: &AttachmentUri, root: &RootKind| {
        format!("{:?}", t.store.still_there(dirs, &t.session, uri, root))
    };
    let expected = ["Ok(())", "Ok(())", "Err(NotFound", "Err(Refused"];
    for ((uri, root), expected) in found.iter().zip(expected) {
        let held = outcome(&dirs, uri, root);
        assert!(held.starts_with(expected), "{uri}: {held}");
        assert_eq!(held, outcome(&SessionDirs::default(), uri, root), "{uri}");
    }
    // Folders held for another session are not used for this one.
    assert!(
        dirs.held(&SessionId::new(), &RootKind::Configured)
            .is_none()
    );
}

/// Bytes this thread has read through system calls so far (Linux's per-thread IO
/// accounting), or `None` where the kernel does not keep it.
fn thread_bytes_read() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn check_reads_only_the_start_of_a_file() {
    let t = TestStore::new(0);
    let size = 16 << 20;
    let mut bytes = vec![b'a'; size];
    bytes[size - 1] = 0;
    let uri = t.plant(&t.configured_folder(), "huge log", &bytes);
    let Some(before) = thread_bytes_read() else {
        return; // no per-thread IO accounting here
    };
    let checked = t.store.check(&t.session, &uri).unwrap();
    let after_check = thread_bytes_read().unwrap();
    assert_eq!(checked.size, size as u64);
    assert_eq!(checked.mime, "text/plain");
    // Reading /proc itself counts too, so allow a little beyond the sniffed part.
    let by_check = after_check - before;
    assert!(by_check < 64 * 1024, "check read {by_check} bytes");
    // The same accounting sees a full read, so the bound above means something.
    let read = t.read(&uri).unwrap();
    let by_read = thread_bytes_read().unwrap() - after_check;
    assert!(by_read >= size as u64, "read counted {by_read} bytes");
    assert_eq!(read.mime, checked.mime);
}

#[test]
fn a_symlink_in_the_session_folder_is_refused() {
    let t = TestStore::new(1);
    let outside = t.dir.path().join("secret.txt");
    std::fs::write(&outside, b"secret").unwrap();
    let stored = t.store.store(&t.session, "inside.txt", b"inside").unwrap();
    symlink(&outside, t.configured_folder().join("out.txt")).unwrap();
    symlink("inside.txt", t.configured_folder().join("in.txt")).unwrap();
    // A regular copy in a legacy root must not be used instead of a refusal.
    t.plant(&t.legacy_folder(0), "out.txt", b"legacy");

    let msg = t.refused(&AttachmentUri::new(t.session, "out.txt"));
    assert!(msg.contains("is a symlink"), "{msg}");
    let msg = t.refused(&AttachmentUri::new(t.session, "in.txt"));
    assert!(msg.contains("is a symlink"), "{msg}");
    assert!(!msg.contains('\n'));
    assert_eq!(&*t.read(&stored.uri).unwrap().bytes, b"inside");
    assert!(
        t.store
            .download(&t.session, &AttachmentUri::new(t.session, "in.txt"))
            .is_err()
    );
}

#[test]
fn a_session_folder_that_is_a_symlink_is_refused() {
    let t = TestStore::new(1);
    let elsewhere = t.dir.path().join("elsewhere");
    let uri = t.plant(&elsewhere, "a.txt", b"elsewhere");
    std::fs::create_dir_all(&t.store.roots().configured).unwrap();
    symlink(&elsewhere, t.configured_folder()).unwrap();
    t.plant(&t.legacy_folder(0), "a.txt", b"legacy");
    let msg = t.refused(&uri);
    assert!(
        msg.contains("session folder") && msg.contains("is a symlink"),
        "{msg}"
    );

    // Storing into it is refused too, and writes nothing there.
    let e = t.store.store(&t.session, "b.txt", b"b").unwrap_err();
    assert!(matches!(e, AttachmentError::Store { .. }), "{e}");
    assert!(!elsewhere.join("b.txt").exists());
}

#[test]
fn a_file_deleted_after_storing_is_not_found() {
    let t = TestStore::new(1);
    let stored = t.store.store(&t.session, "gone.txt", b"bye").unwrap();
    std::fs::remove_file(t.configured_folder().join("gone.txt")).unwrap();
    let e = t.read(&stored.uri).unwrap_err();
    assert!(e.is_not_found());
    assert_eq!(e.uri(), Some(&stored.uri));
    let msg = e.to_string();
    assert!(
        msg.contains(&t.store.roots().configured.display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&t.store.roots().legacy[0].display().to_string()),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    match e {
        AttachmentError::NotFound { tried, .. } => assert_eq!(
            tried,
            [
                t.configured_folder().join("gone.txt"),
                t.legacy_folder(0).join("gone.txt")
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_sessions_file_never_resolves() {
    let t = TestStore::new(0);
    let a = t.session;
    let b = SessionId::new();
    let stored = t.store.store(&a, "same.txt", b"session a").unwrap();

    // A's URI presented for session B is refused outright.
    let e = t.store.read(&b, &stored.uri).unwrap_err();
    assert!(matches!(e, AttachmentError::Refused { .. }), "{e}");

    // B's own URI for the same name finds nothing, even though A has the file.
    let b_uri = AttachmentUri::new(b, "same.txt");
    assert!(t.store.read(&b, &b_uri).unwrap_err().is_not_found());
    assert!(t.store.download(&b, &b_uri).unwrap_err().is_not_found());
}

#[test]
fn unsafe_names_in_hand_built_uris_are_refused() {
    let t = TestStore::new(0);
    t.store.store(&t.session, "a.txt", b"a").unwrap();
    for name in [
        "..",
        ".",
        "",
        "../a.txt",
        "x/../a.txt",
        "a.txt\0",
        " a.txt",
        "a.txt.",
    ] {
        let msg = t.refused(&AttachmentUri::new(t.session, name));
        assert!(msg.contains("not a safe stored name"), "{msg}");
    }
}

#[test]
fn a_300_byte_name_is_cut_keeping_the_extension() {
    let t = TestStore::new(0);
    let upload = format!("{}.txt", "n".repeat(296));
    assert_eq!(upload.len(), 300);
    let s = t.store.store(&t.session, &upload, b"long").unwrap();
    assert!(
        s.name.len() <= 255 && s.name.ends_with(".txt"),
        "{}",
        s.name
    );
    let again = t.store.store(&t.session, &upload, b"long 2").unwrap();
    assert!(again.name.len() <= 255 && again.name.ends_with(" (1).txt"));
    assert_eq!(&*t.read(&again.uri).unwrap().bytes, b"long 2");
}

#[test]
fn image_types_come_from_magic_bytes() {
    let t = TestStore::new(0);
    let png = t.store.store(&t.session, "photo.jpg", PNG).unwrap();
    assert_eq!(png.mime, "image/png");
    assert_eq!(t.read(&png.uri).unwrap().mime, "image/png");
    let fake = t
        .store
        .store(&t.session, "fake.png", b"not an image")
        .unwrap();
    assert_eq!(fake.mime, "application/octet-stream");
    assert_eq!(t.read(&fake.uri).unwrap().mime, "application/octet-stream");
}

#[test]
fn a_file_over_the_limit_is_too_large_and_ends_the_search() {
    let mut t = TestStore::new(1);
    t.store = t.store.clone().with_limit(4);
    let uri = t.plant(&t.configured_folder(), "big.txt", b"12345");
    // A smaller copy in a legacy root must not be read instead.
    t.plant(&t.legacy_folder(0), "big.txt", b"123");
    let e = t.read(&uri).unwrap_err();
    assert!(
        matches!(
            e,
            AttachmentError::TooLarge {
                size: 5,
                limit: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.uri(), Some(&uri));
    assert!(!e.is_not_found());
    assert_eq!(
        e.to_string(),
        format!("attachment {uri} is 5 bytes, over the 4 bytes limit")
    );
    assert!(matches!(
        t.store.download(&t.session, &uri),
        Err(AttachmentError::TooLarge { .. })
    ));

    let at = t.plant(&t.configured_folder(), "at.txt", b"1234");
    assert_eq!(&*t.read(&at).unwrap().bytes, b"1234");
}

#[test]
fn an_upload_over_the_limit_is_refused_before_anything_is_written() {
    let mut t = TestStore::new(0);
    t.store = t.store.clone().with_limit(4);
    let e = t
        .store
        .store(&t.session, "big\nname.txt", b"12345")
        .unwrap_err();
    assert!(
        matches!(
            e,
            AttachmentError::UploadTooLarge {
                size: 5,
                limit: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.uri(), None);
    assert_eq!(
        e.to_string(),
        "cannot store attachment \"big\\nname.txt\": it is 5 bytes, over the 4 bytes limit"
    );
    assert!(
        !t.store.roots().configured.exists(),
        "not even the root is created"
    );

    let at = t.store.store(&t.session, "at.txt", b"1234").unwrap();
    assert_eq!(at.size, 4);
}

#[test]
fn download_has_bytes_mime_and_name() {
    let t = TestStore::new(0);
    let s = t.store.store(&t.session, "d.txt", b"download").unwrap();
    let d = t.store.download(&t.session, &s.uri).unwrap();
    assert_eq!(
        d,
        Download {
            bytes: b"download".to_vec(),
            mime: "text/plain".into(),
            name: "d.txt".into()
        }
    );
}

#[test]
fn stored_attachment_json_shape() {
    let t = TestStore::new(0);
    let s = t.store.store(&t.session, "a b.txt", b"x").unwrap();
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "name": "a b.txt",
            "uri": format!("attachment:///{}/a%20b.txt", t.session),
            "mimeType": "text/plain",
            "size": 1
        })
    );
}
