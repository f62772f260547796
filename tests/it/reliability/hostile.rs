//! Hostile-input suite: trick upload names, crafted URIs, symlinks planted in and as a
//! session folder, and a race that swaps files for symlinks and FIFOs while dispatches
//! run. An escape is a byte of the sentinel (a file outside every session folder) in
//! any output, or a file written outside the configured root's session folder. It
//! never changes what the store does, only watches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use sessionstore::SessionId;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::store::Outgoing;

use crate::support::Whole;
use crate::support::{TestStore, count};

const SENTINEL: &[u8] = b"SENTINEL-7f3a9c-never-show-this";

/// The sentinel, raw or base64 (how a blob or image would carry it), in `text`.
fn leaks(text: &str) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD.encode(SENTINEL);
    text.contains(std::str::from_utf8(SENTINEL).unwrap()) || text.contains(&b64)
}

fn sentinel_in(dir: &Path) -> PathBuf {
    let path = dir.join("sentinel.txt");
    std::fs::write(&path, SENTINEL).unwrap();
    path
}

/// Every file under `dir`, recursively, not following symlinks.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

fn hostile_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "..",
        ".",
        "...",
        "....",
        " ",
        "   ",
        ". .",
        "/",
        "//",
        "\\",
        "/etc/passwd",
        "../../etc/passwd",
        "..\\..\\windows\\win.ini",
        "C:\\x",
        "C:",
        "\\\\?\\C:\\x",
        "\\\\server\\share\\f.txt",
        "a\0b.txt",
        "\0",
        "nul\0/../x",
        "a/../../b",
        "./a.txt",
        "a.txt.",
        "a.txt...",
        " a.txt ",
        "\ta.txt\n",
        "a\rb.txt",
        "\u{1b}[31mred.txt",
        "~",
        "~/.ssh/id_rsa",
        "$HOME",
        "%2e%2e",
        "..%2f..%2fetc",
        "CON",
        "aux.txt",
        "-rf",
        "--help",
        "\u{202e}txt.exe",
        "a\u{200b}b.txt",
        "\u{feff}bom.txt",
        "\u{2028}sep.txt",
        "\u{e0041}tag.txt",
        "caf\u{e9}.txt",
        "cafe\u{301}.txt",
        "\u{ff0e}\u{ff0e}",
        "\u{2024}\u{2024}",
        "a\u{2215}b",
        "a\u{29f8}b",
        "x\u{fe0f}",
        "\u{7f}del",
        ".upload-0123456789abcdef0123456789abcdef.partial.",
        ".hidden",
        "..hidden",
        "name (1).txt",
        "<script>.txt",
        "quote\"d.txt",
        "it's.txt",
        "*?.txt",
        "|pipe|",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    names.push("a".repeat(300));
    names.push(format!("{}.txt", "b".repeat(300)));
    names.push(format!("{}\u{e9}", "c".repeat(254)));
    names.push(format!("{}\u{1f600}.png", "d".repeat(250)));
    names.push("\u{e9}".repeat(200));
    names.push(format!("{}/{}", "e".repeat(200), "f".repeat(200)));
    names
}

#[tokio::test]
async fn hostile_upload_names_stay_in_their_session_folder() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let folder = t.folder(s);
    let names = hostile_names();
    let mut uris = Vec::new();
    for name in &names {
        let stored = t.upload(s, name, name.as_bytes()).await;
        assert_eq!(stored.uri.session(), s);
        assert!(stored.name.len() <= 255, "{name:?} -> {:?}", stored.name);
        let back = sessionstore::attachments::AttachmentUri::parse(&stored.uri.to_string())
            .unwrap_or_else(|e| panic!("{name:?}: its own URI does not parse: {e}"));
        assert_eq!(back, stored.uri);
        uris.push(stored.uri);
    }
    let mut escapes = 0;
    for file in files_under(t.dir.path()) {
        let in_folder = file.parent() == Some(folder.as_path());
        let db_file = file.parent() == Some(t.dir.path())
            && file
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("sessions.db");
        if !in_folder && !db_file {
            escapes += 1;
            eprintln!("written outside the session folder: {file:?}");
        }
    }
    // Every stored file goes back to the model with its bytes and a path inside the folder.
    let mut out = Outgoing::user("all of them");
    out.attach = uris;
    t.send(s, out).await;
    let dispatched = t
        .dispatch(s, Mode::Strict)
        .await
        .expect("every name reads back");
    for block in &dispatched.blocks {
        let value = crate::support::block_json(block);
        if let Some(context) = crate::support::context_of(&value) {
            let line = crate::support::context_line(context);
            let path = PathBuf::from(line.path);
            if path.parent() != Some(folder.as_path()) {
                escapes += 1;
            }
        }
    }
    println!("hostile/names: names {}, escapes {escapes}", names.len());
    assert_eq!(escapes, 0);
    assert_eq!(
        files_under(&folder).len(),
        names.len(),
        "one file per upload"
    );
}

#[tokio::test]
async fn an_upload_named_like_a_temporary_is_not_stored_as_one() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let stored = t.upload(s, ".upload-x.partial.", b"mine").await;
    assert!(!stored.name.starts_with(".upload-"), "{:?}", stored.name);
}

#[tokio::test]
async fn crafted_uris_are_refused_and_store_nothing() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let other = t.session().await;
    t.upload(s, "a.txt", b"mine").await;
    t.upload(s, "é.txt", b"accent").await;
    t.upload(other, "secret.txt", SENTINEL).await;
    let sentinel = sentinel_in(t.dir.path());
    let own = format!("attachment:///{s}");
    let uris: Vec<String> = vec![
        format!("attachment:///{other}/secret.txt"),
        format!("{own}/..%2f{other}%2fsecret.txt"),
        format!("{own}/%2e%2e/{other}/secret.txt"),
        format!("{own}/../{other}/secret.txt"),
        format!("{own}/%252e%252e%252f{other}%252fsecret.txt"),
        format!("{own}/%2E%2E"),
        format!("{own}/.."),
        format!("{own}/."),
        format!("{own}/"),
        format!("{own}"),
        format!("{own}/a.txt?x=1"),
        format!("{own}/a.txt#frag"),
        format!("{own}/a.txt/"),
        format!("{own}/a.txt%00.png"),
        format!("{own}/a.txt%2f"),
        format!("{own}/sub%5ca.txt"),
        format!("{own}/%61.txt"),
        format!("{own}/%c3%a9.txt"),
        format!("{own}/e%CC%81.txt"),
        format!("ATTACHMENT:///{s}/a.txt"),
        format!("Attachment:///{s}/a.txt"),
        format!("attachment://host/{s}/a.txt"),
        format!("attachment://{s}/a.txt"),
        format!("attachment:/{s}/a.txt"),
        format!("attachment:///{}/a.txt", s.to_string().to_uppercase()),
        format!("attachment:///{s}//a.txt"),
        format!("attachment:///{s}/a.txt "),
        format!(" attachment:///{s}/a.txt"),
        format!("attachment:///{s}/a%20.txt%20"),
        format!("file://{}", sentinel.display()),
        format!("attachment:///{s}/{}", sentinel.display()),
        format!(
            "attachment:///{s}/%2F{}",
            sentinel
                .display()
                .to_string()
                .trim_start_matches('/')
                .replace('/', "%2F")
        ),
        "attachment:///../../etc/passwd".to_owned(),
        "attachment:///etc/passwd".to_owned(),
        format!("attachment:///{s}/a.txt\n"),
        format!("attachment:///{s}/%"),
        format!("attachment:///{s}/%zz"),
        "".to_owned(),
    ];
    let before = t.store().all_messages(s).await.unwrap().len();
    let mut accepted = Vec::new();
    for uri in &uris {
        // The library takes URIs parsed; a text that does not parse is refused there.
        let Ok(parsed) = uri.parse::<sessionstore::attachments::AttachmentUri>() else {
            continue;
        };
        let mut out = Outgoing::user("crafted");
        out.attach = vec![parsed];
        if t.store().send(s, out).await.is_ok() {
            accepted.push(uri.clone());
        }
        let cli = t.run(&[
            "send",
            "--session",
            &s.to_string(),
            "--text",
            "x",
            "--attach",
            uri,
        ]);
        assert_ne!(cli.status.code(), Some(101), "{uri:?}");
        assert!(!leaks(&String::from_utf8_lossy(&cli.stderr)), "{uri:?}");
    }
    let after = t.store().all_messages(s).await.unwrap().len();
    println!(
        "hostile/uris: uris {}, accepted {}, escapes 0",
        uris.len(),
        accepted.len()
    );
    assert!(accepted.is_empty(), "accepted: {accepted:?}");
    assert_eq!(before, after, "a refused send stored nothing");
}

/// Plants symlinks where a stored file was, beside it, and as the session folder, and
/// dispatches through the library and the binary: the sentinel never shows.
#[tokio::test]
async fn planted_symlinks_are_never_followed() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let sentinel = sentinel_in(t.dir.path());
    let a = t.upload(s, "a.txt", b"mine").await;
    let b = t.upload(s, "b.png", crate::support::PNG).await;
    let mut out = Outgoing::user("both");
    out.attach = vec![a.uri.clone(), b.uri.clone()];
    t.send(s, out).await;
    let folder = t.folder(s);
    let check = |label: &str, escapes: &mut usize| {
        let cli = t.run(&["dispatch", "--session", &s.to_string()]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&cli.stdout),
            String::from_utf8_lossy(&cli.stderr)
        );
        assert_ne!(cli.status.code(), Some(101), "{label}: {text}");
        if leaks(&text) {
            *escapes += 1;
            eprintln!("{label}: {text}");
        }
    };
    let mut escapes = 0;
    std::fs::remove_file(folder.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(&sentinel, folder.join("a.txt")).unwrap();
    let d = t.dispatch(s, Mode::Degrade).await.unwrap();
    if leaks(&serde_json::to_string(&d.blocks).unwrap()) {
        escapes += 1;
    }
    assert!(
        t.dispatch(s, Mode::Strict).await.is_err(),
        "a symlinked file is refused"
    );
    check("file as symlink", &mut escapes);
    // The session folder itself replaced by a symlink to a folder holding the names.
    let decoy = t.dir.path().join("decoy");
    std::fs::create_dir(&decoy).unwrap();
    std::fs::write(decoy.join("a.txt"), SENTINEL).unwrap();
    std::fs::write(decoy.join("b.png"), SENTINEL).unwrap();
    std::fs::rename(&folder, t.dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&decoy, &folder).unwrap();
    let d = t.dispatch(s, Mode::Degrade).await.unwrap();
    if leaks(&serde_json::to_string(&d.blocks).unwrap()) {
        escapes += 1;
    }
    check("folder as symlink", &mut escapes);
    // An upload into a symlinked folder is refused, and writes nothing into the decoy.
    assert!(
        t.store()
            .attach_one(s, "new.txt".into(), b"x".to_vec())
            .await
            .is_err()
    );
    assert!(!decoy.join("new.txt").exists());
    println!("hostile/symlinks: planted 3, escapes {escapes}");
    assert_eq!(escapes, 0);
}

/// While dispatches run, another thread keeps replacing a referenced file with a
/// symlink to the sentinel, a FIFO, a folder and the real file again.
#[test]
fn swapping_files_for_symlinks_and_fifos_during_dispatch_leaks_nothing_and_never_hangs() {
    let dispatches = count("SESSIONSTORE_RACE_DISPATCHES", 200, 2000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(TestStore::new());
    let s: SessionId = rt.block_on(t.session());
    let sentinel = sentinel_in(t.dir.path());
    let a = rt.block_on(t.upload(s, "a.txt", b"the real file"));
    let mut out = Outgoing::user("race");
    out.attach = vec![a.uri.clone()];
    rt.block_on(t.send(s, out));
    let target = t.folder(s).join("a.txt");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let target = target.clone();
        std::thread::spawn(move || {
            let mut round = 0u64;
            let staging = target.with_file_name("staging");
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&staging);
                let _ = std::fs::remove_dir(&staging);
                match round % 4 {
                    0 => std::os::unix::fs::symlink(&sentinel, &staging).unwrap(),
                    1 => rustix::fs::mknodat(
                        rustix::fs::CWD,
                        &staging,
                        rustix::fs::FileType::Fifo,
                        rustix::fs::Mode::from_raw_mode(0o600),
                        0,
                    )
                    .unwrap(),
                    2 => std::fs::create_dir(&staging).unwrap(),
                    _ => std::fs::write(&staging, b"the real file").unwrap(),
                }
                // A rename cannot swap a folder for a file or back, so the old entry goes
                // first in those rounds.
                if round % 4 == 2 {
                    let _ = std::fs::remove_file(&target);
                } else {
                    let _ = std::fs::remove_dir(&target);
                }
                let _ = std::fs::rename(&staging, &target);
                // Each state lasts a moment, so dispatches meet every one of them.
                std::thread::sleep(Duration::from_micros(200));
                round += 1;
            }
            round
        })
    };
    let (mut escapes, mut hangs, mut read_ok) = (0, 0, 0);
    // The dispatches run on a thread of their own, so one that hangs is seen by the
    // timeout below instead of stopping the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let store = t.store().clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        for _ in 0..dispatches {
            let memo = Memo::new();
            let d = rt.block_on(store.dispatch(s, None, Mode::Degrade, memo));
            let d = d
                .map(|d| serde_json::to_string(&d.into_blocks()).unwrap())
                .map_err(|e| e.to_string());
            if tx.send(d).is_err() {
                return;
            }
        }
    });
    for _ in 0..dispatches {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Err(_) => {
                hangs += 1;
                break;
            }
            Ok(Ok(text)) => {
                if leaks(&text) {
                    escapes += 1;
                }
                if text.contains("the real file") {
                    read_ok += 1;
                }
            }
            Ok(Err(e)) => panic!("a degrading dispatch failed: {e}"),
        }
    }
    // A few through the binary as well, with a timeout each.
    for _ in 0..dispatches.min(20) {
        let ran = t
            .bin()
            .args(["dispatch", "--session", &s.to_string()])
            .timeout(Duration::from_secs(30))
            .bounded();
        match ran {
            None => hangs += 1,
            Some(out) => {
                assert_ne!(out.status.code(), Some(101));
                if leaks(&String::from_utf8_lossy(&out.stdout))
                    || leaks(&String::from_utf8_lossy(&out.stderr))
                {
                    escapes += 1;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    println!(
        "hostile/race: dispatches {dispatches} (+{} through the binary), swaps {swaps}, real reads {read_ok}, escapes {escapes}, hangs {hangs}",
        dispatches.min(20)
    );
    assert_eq!(escapes, 0);
    assert_eq!(hangs, 0);
}

#[test]
fn errors_about_hostile_paths_carry_no_raw_control_characters() {
    let t = TestStore::empty();
    crate::support::json(&t.run(&["migrate", "--json"]));
    let s = crate::support::json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let missing = t.dir.path().join("\u{1b}[31mred\u{7f}\u{202e}.txt");
    let out = t.run(&["attach", "--session", &s, missing.to_str().unwrap()]);
    let err = crate::support::assert_one_line_error(&out);
    assert!(
        !err.trim_end()
            .chars()
            .any(|c| c.is_control() || c == '\u{202e}'),
        "{err:?}"
    );
}

/// `attachment get` takes a bare URI with no session around it, so it is the shortest
/// way from a crafted text to a read: traversal toward another session's file or a
/// folder no session owns, a planted symlink, absolute paths. Each is refused in one
/// line, through stdout and through `--out`, and the sentinel never shows.
#[tokio::test]
async fn attachment_get_with_crafted_uris_reads_nothing_outside_the_named_session_folder() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let other = t.session().await;
    let a = t.upload(s, "a.txt", b"mine").await;
    t.upload(other, "secret.txt", SENTINEL).await;
    let sentinel = sentinel_in(t.dir.path());
    // A folder under the root that no session row owns, as a deleted session leaves.
    let ghost = sessionstore::SessionId::new();
    let ghost_folder = t.dir.path().join("attachments").join(ghost.to_string());
    std::fs::create_dir_all(&ghost_folder).unwrap();
    std::fs::write(ghost_folder.join("secret.txt"), SENTINEL).unwrap();
    let folder = t.folder(s);
    std::os::unix::fs::symlink(&sentinel, folder.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(format!("../{other}/secret.txt"), folder.join("peek.txt")).unwrap();
    let own = format!("attachment:///{s}");
    let encoded_sentinel = sentinel
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F");
    let uris: Vec<String> = vec![
        format!("{own}/..%2f{other}%2fsecret.txt"),
        format!("{own}/..%2F{other}%2Fsecret.txt"),
        format!("{own}/%2e%2e/{other}/secret.txt"),
        format!("{own}/../{other}/secret.txt"),
        format!("{own}/%252e%252e%252f{other}%252fsecret.txt"),
        format!("{own}/..%5c{other}%5csecret.txt"),
        format!("{own}/..%2f..%2fsentinel.txt"),
        format!("{own}/%2F{encoded_sentinel}"),
        format!("{own}/link.txt"),
        format!("{own}/peek.txt"),
        format!("attachment:///{ghost}/secret.txt"),
        format!("{own}/..%2f{ghost}%2fsecret.txt"),
        format!(
            "attachment:///{}/secret.txt",
            other.to_string().to_uppercase()
        ),
        format!("attachment://{other}/secret.txt"),
        format!("attachment:///{other}//secret.txt"),
        format!("attachment:///{other}/secret.txt%00"),
        format!("file://{}", sentinel.display()),
        "attachment:///../sentinel.txt".to_owned(),
        format!("attachment:///{s}/../../sentinel.txt"),
    ];
    let out_dir = tempfile::tempdir().unwrap();
    let (mut escapes, mut refused) = (0, 0);
    for uri in &uris {
        let target = out_dir.path().join("got");
        for extra in [vec![], vec!["--out", target.to_str().unwrap()]] {
            let mut args = vec!["attachment", "get", uri.as_str()];
            args.extend(extra);
            let out = t.run(&args);
            assert_ne!(out.status.code(), Some(101), "{uri:?}");
            let written: Vec<u8> = files_under(out_dir.path())
                .iter()
                .flat_map(|f| std::fs::read(f).unwrap_or_default())
                .collect();
            if leaks(&String::from_utf8_lossy(&out.stdout))
                || leaks(&String::from_utf8_lossy(&out.stderr))
                || leaks(&String::from_utf8_lossy(&written))
            {
                escapes += 1;
                eprintln!("{uri:?} {args:?}: {out:?}");
            }
            if !out.status.success() {
                refused += 1;
                crate::support::assert_one_line_error(&out);
            }
            assert!(
                files_under(out_dir.path()).is_empty(),
                "{uri:?}: a refused get wrote a file"
            );
        }
    }
    println!(
        "hostile/get: uris {}, runs {}, refused {refused}, escapes {escapes}",
        uris.len(),
        uris.len() * 2
    );
    assert_eq!(escapes, 0);
    assert_eq!(refused, uris.len() * 2, "every crafted get is refused");
    // The same command reads the session's own file, so the refusals above are not
    // the command failing everywhere.
    let out = t.run(&["attachment", "get", &a.uri.to_string()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"mine");
}

/// `session fork --at` names a message by id alone; one of another session is refused
/// in one line (plain and `--json`), and no session or folder is made.
#[test]
fn a_fork_at_another_sessions_message_is_refused_and_makes_nothing() {
    use crate::support::json;
    let t = TestStore::empty();
    let d = t.dir.path();
    let new = |title: &str| {
        json(&t.run(&["session", "new", "--title", title, "--json"]))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let a = new("a");
    let b = new("b");
    std::fs::write(d.join("f.txt"), b"a's file").unwrap();
    let uri = json(&t.run(&[
        "attach",
        "--session",
        &a,
        d.join("f.txt").to_str().unwrap(),
        "--json",
    ]))[0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let m = json(&t.run(&[
        "send",
        "--session",
        &a,
        "--text",
        "a's",
        "--attach",
        &uri,
        "--json",
    ]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    json(&t.run(&["send", "--session", &b, "--text", "b's", "--json"]));
    let sessions = || -> i64 {
        rusqlite::Connection::open(d.join("sessions.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap()
    };
    let before = (sessions(), crate::support::snapshot(&d.join("attachments")));
    let out = t.run(&["session", "fork", &b, "--at", &m]);
    crate::support::assert_one_line_error(&out);
    let out = t.run(&["session", "fork", &b, "--at", &m, "--json"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    let value: serde_json::Value = serde_json::from_str(err.trim_end()).unwrap();
    assert!(value["error"]["kind"].is_string(), "{value}");
    let folders = std::fs::read_dir(d.join("attachments")).unwrap().count();
    assert_eq!(
        (sessions(), crate::support::snapshot(&d.join("attachments"))),
        before
    );
    assert_eq!(folders, 1, "only a's folder");
    // The same fork at a's own message works, so the refusal is about the session.
    json(&t.run(&["session", "fork", &a, "--at", &m, "--json"]));
    assert_eq!(sessions(), 3);
}
