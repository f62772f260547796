//! Issue 13, the command line as people expect it: each finding checked through the
//! real binary (human output, `paths`, flags, `--text -`, small wording, logs,
//! completions, JSON errors, `session rename`, `attachment list/get`, exit codes), and
//! README's tour run as written.

use std::path::Path;
use std::process::Output;

use crate::support::{Bin, TestStore, assert_one_line_error, json, stderr, stdout};

/// The fixture's store migrated, with one session; its id.
fn session(t: &TestStore) -> String {
    json(&t.run(&["migrate", "--json"]));
    json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

fn assert_quiet_success(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
    assert_eq!(stderr(out), "", "nothing on stderr");
}

/// 13.2: stored text is escaped, one line a row, and cut with a marker.
#[test]
fn human_output_escapes_stored_text_and_cuts_long_text() {
    let t = TestStore::empty();
    let d = t.dir.path();
    json(&t.run(&["migrate", "--json"]));
    let title = "line one\nline two \u{1b}[31mred\u{1b}[0m";
    let s = json(&t.run(&["session", "new", "--title", title, "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let list = stdout(&t.run(&["session", "list"]));
    assert_eq!(list.lines().count(), 1, "one session, one row: {list:?}");
    assert!(
        !list.contains('\u{1b}'),
        "no escape sequence reaches the terminal"
    );
    assert!(
        list.contains("line one\\nline two \\u001b[31mred"),
        "{list}"
    );

    json(&t.run(&["send", "--session", &s, "--text", "first\nsecond", "--json"]));
    let long = "x".repeat(131 * 1024);
    let path = d.join("long.txt");
    std::fs::write(&path, &long).unwrap();
    let p = path.to_str().unwrap();
    json(&t.run(&["send", "--session", &s, "--text-file", p, "--json"]));
    let shown = stdout(&t.run(&["session", "show", &s]));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "a header and one row per message: {lines:?}"
    );
    assert!(lines[1].ends_with("first\\nsecond"), "{}", lines[1]);
    assert!(lines[2].len() < 1000, "the long text is cut");
    assert!(
        lines[2].contains(&format!(
            "[{} more characters; --json has the full text]",
            131 * 1024 - 300
        )),
        "{}",
        lines[2]
    );
    let whole = json(&t.run(&["session", "show", &s, "--json"]));
    assert_eq!(
        whole["messages"][1]["displayText"].as_str().map(str::len),
        Some(131 * 1024)
    );
}

/// 13.3: `paths` says where everything is and where each setting came from; `migrate`
/// names its database.
#[test]
fn paths_names_each_place_and_its_source() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let db = h.join("x.db");
    let out = Bin::new(h)
        .args(["paths", "--json", "--db"])
        .arg(&db)
        .env("SESSIONSTORE_LEGACY_ROOTS", h.join("old"))
        .output();
    let p = json(&out);
    assert_eq!(p["database"]["path"], db.to_str().unwrap());
    assert_eq!(p["database"]["source"], "flag");
    assert_eq!(p["database"]["exists"], false);
    let root = h.join(".local/share/sessionstore/attachments");
    assert_eq!(p["attachmentsRoot"]["path"], root.to_str().unwrap());
    assert_eq!(p["attachmentsRoot"]["source"], "default");
    assert_eq!(p["legacyRoots"][0], h.join("old").to_str().unwrap());
    assert_eq!(p["legacyRootsSource"], "environment");
    let out = Bin::new(h).args(["paths", "--db"]).arg(&db).output();
    assert_quiet_success(&out);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("{}  (from --db, not created yet)", db.display())),
        "{text}"
    );
    assert!(text.contains("legacy roots      none  (default)"), "{text}");

    let out = Bin::new(h).args(["migrate", "--db"]).arg(&db).output();
    assert_quiet_success(&out);
    assert!(
        stdout(&out).starts_with(&format!("{}: applied", db.display())),
        "{}",
        stdout(&out)
    );
}

/// `paths` with a PostgreSQL database shows the connection string, password
/// replaced, as a server rather than a file (no `exists`, nothing contacted: the
/// host here does not resolve). Logs and `migrate` never show the password either.
#[cfg(feature = "postgres")]
#[test]
fn paths_shows_a_server_without_its_password() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let url = "postgres://alice:s3cret@db.invalid:5432/sessions?sslmode=disable";
    let shown = "postgres://alice:***@db.invalid:5432/sessions?sslmode=disable";
    let out = Bin::new(h)
        .args(["paths", "--json", "-vv", "--db", url])
        .output();
    assert!(!stderr(&out).contains("s3cret"), "{}", stderr(&out));
    let p = json(&out);
    assert_eq!(
        p["database"],
        serde_json::json!({"url": shown, "source": "flag"})
    );
    let out = Bin::new(h)
        .arg("paths")
        .env("SESSIONSTORE_DB", url)
        .output();
    assert_quiet_success(&out);
    let text = stdout(&out);
    assert!(!text.contains("s3cret"), "{text}");
    assert!(
        text.lines().next().unwrap()
            == format!("database          {shown}  (from SESSIONSTORE_DB, a PostgreSQL server)"),
        "{text}"
    );
}

/// `migrate` on PostgreSQL names the server without the password it connected with.
#[cfg(feature = "postgres")]
#[test]
fn migrate_names_a_server_without_its_password() {
    let Some(b) = crate::support::TestStore::postgres() else {
        return;
    };
    // The test server trusts its loopback clients, so a made-up password is ignored;
    // one the URL already has is kept.
    let (scheme, rest) = b.db().split_once("://").unwrap();
    let (user, host) = rest
        .split_once('@')
        .expect("a user in the test server's URL");
    let (url, password) = match user.split_once(':') {
        Some((_, password)) => (b.db().to_owned(), password.to_owned()),
        None => (
            format!("{scheme}://{user}:s3cret@{host}"),
            "s3cret".to_owned(),
        ),
    };
    for args in [&["migrate", "-v"][..], &["session", "new", "-v"]] {
        let out = Bin::new(b.dir.path())
            .args(args)
            .arg("--db")
            .arg(&url)
            .output();
        assert!(out.status.success(), "{}", stderr(&out));
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!said.contains(&password), "{said}");
    }
    let out = Bin::new(b.dir.path())
        .args(["migrate", "--db", &url])
        .output();
    assert!(
        stdout(&out).starts_with(&format!(
            "{scheme}://{}:***@",
            user.split(':').next().unwrap()
        )),
        "{}",
        stdout(&out)
    );
}

/// 13.4: flags that cannot apply are refused or documented.
#[test]
fn flags_that_cannot_apply_are_refused_or_documented() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    #[cfg(feature = "probe")]
    {
        let out = Bin::new(d).args(["probe", "--db", "x.db"]).output();
        let err = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            err.contains("--db, --attachments-root and --legacy-root do not apply"),
            "{err}"
        );
    }
    for command in ["dispatch", "drain", "restore", "events"] {
        let help = stdout(&Bin::new(d).args(["help"]).output());
        let row = help
            .lines()
            .find(|l| l.trim_start().starts_with(command))
            .unwrap();
        assert!(row.contains("JSON"), "{command}: {row}");
    }
    for command in ["drain", "restore"] {
        let help = stdout(&Bin::new(d).args([command, "--help"]).output());
        assert!(
            !help.contains("focus-hint"),
            "{command} does not offer focus-hint"
        );
    }
    let help = stdout(&Bin::new(d).args(["dispatch", "--help"]).output());
    assert!(help.contains("focus-hint"));
}

/// 13.5: `--text -` reads standard input; `--text-file` takes text too long for argv.
#[test]
fn text_comes_from_stdin_or_a_file() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    let out = t
        .bin()
        .args(["send", "--session", &s, "--text", "-", "--json"])
        .stdin(b"from a pipe\n")
        .output();
    json(&out);
    let big = "y".repeat(140 * 1024);
    let path = d.join("big.txt");
    std::fs::write(&path, &big).unwrap();
    json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text-file",
        path.to_str().unwrap(),
        "--json",
    ]));
    let shown = json(&t.run(&["session", "show", &s, "--json"]));
    assert_eq!(shown["messages"][0]["displayText"], "from a pipe\n");
    assert_eq!(
        shown["messages"][1]["displayText"].as_str().unwrap().len(),
        140 * 1024
    );
    let out = t.run(&["send", "--session", &s, "--text", "a", "--text-file", "b"]);
    crate::support::assert_usage_error(&out);
}

/// 13.6: upper-case ids, canonical URIs, the degraded-dispatch warning, a closed pipe,
/// wording and sizes.
#[test]
fn small_things_read_right() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    json(&t.run(&["session", "show", &s.to_uppercase(), "--json"]));

    let file = d.join("café chart.png");
    std::fs::write(&file, crate::support::PNG).unwrap();
    json(&t.run(&["attach", "--session", &s, file.to_str().unwrap(), "--json"]));
    let raw = format!("attachment:///{s}/café chart.png");
    let out = t.run(&["send", "--session", &s, "--text", "x", "--attach", &raw]);
    let err = assert_one_line_error(&out);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        err.contains(&format!(
            "the canonical form is attachment:///{s}/caf%C3%A9%20chart.png"
        )),
        "{err}"
    );

    // A dispatch that leaves out an unreadable file warns once and still succeeds.
    let uri = format!("attachment:///{s}/caf%C3%A9%20chart.png");
    json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "look",
        "--attach",
        &uri,
        "--json",
    ]));
    std::fs::remove_file(d.join("attachments").join(&s).join("café chart.png")).unwrap();
    let out = t.run(&["dispatch", "--session", &s]);
    assert!(out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("warning: message ") && err.contains("café chart.png"),
        "{err}"
    );
    let out = t.run(&["dispatch", "--session", &s, "-q"]);
    assert_quiet_success(&out);

    // The reader went away: no error, as with other tools.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Bin::new(d)
        .args(["session", "list", "--db"])
        .arg(d.join("sessions.db"))
        .stdout(writer)
        .output();
    assert_quiet_success(&out);

    // An assistant message is "an assistant message".
    let reply = json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "ok",
        "--role",
        "assistant",
        "--json",
    ]));
    let id = reply["id"].as_str().unwrap();
    let err = assert_one_line_error(&t.run(&["dispatch", "--session", &s, "--message", id]));
    assert!(err.contains("is an assistant message"), "{err}");

    // Sizes read as people write them.
    let huge = d.join("huge.bin");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(65 * 1024 * 1024)
        .unwrap();
    let err = assert_one_line_error(&t.run(&["attach", "--session", &s, huge.to_str().unwrap()]));
    assert!(err.contains("it is 65 MiB, over the 64 MiB limit"), "{err}");
}

/// 13.6: options and arguments say what they are.
#[test]
fn every_option_has_help_text() {
    let dir = tempfile::tempdir().unwrap();
    for (command, wanted) in [
        (
            &["send"][..],
            &["The session to send to", "Who wrote the message"][..],
        ),
        (&["session", "new"], &["The session's title"]),
        (&["session", "show"], &["The session's id"]),
        (
            &["attach"],
            &["The files to store", "The session the files belong to"],
        ),
        (&["drain"], &["Fail, delivering nothing", "What to print"]),
    ] {
        let out = Bin::new(dir.path()).args(command).arg("--help").output();
        let help = stdout(&out);
        for w in wanted {
            assert!(help.contains(w), "{command:?}: {w:?} not in {help}");
        }
    }
}

/// 13.7: logs are quiet by default, `-v` shows a legacy-root read, `RUST_LOG` decides.
#[test]
fn logs_follow_v_q_and_rust_log() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    let legacy = d.join("legacy");
    std::fs::create_dir_all(legacy.join(&s)).unwrap();
    std::fs::write(legacy.join(&s).join("old.txt"), "secret contents").unwrap();
    let legacy = legacy.to_str().unwrap();
    let uri = format!("attachment:///{s}/old.txt");
    let send = [
        "send",
        "--session",
        &s,
        "--text",
        "x",
        "--attach",
        &uri,
        "--legacy-root",
        legacy,
    ];
    assert_quiet_success(&t.run(&send));
    let dispatch = ["dispatch", "--session", &s, "--legacy-root", legacy];
    assert_quiet_success(&t.run(&dispatch));
    let mut verbose = dispatch.to_vec();
    verbose.push("-v");
    let out = t.run(&verbose);
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(
        err.starts_with("info: attachment ") && err.contains("legacy root 1"),
        "{err}"
    );
    assert!(
        !err.contains("secret contents"),
        "a log never holds contents"
    );
    let out = Bin::new(d)
        .args(dispatch)
        .arg("--db")
        .arg(d.join("sessions.db"))
        .arg("--attachments-root")
        .arg(d.join("attachments"))
        .env("RUST_LOG", "info")
        .output();
    assert!(stderr(&out).contains("legacy root 1"));
}

/// 13.7 and 13.8: `--json` errors are one object with the library's kind.
#[test]
fn json_errors_carry_the_kind() {
    let t = TestStore::empty();
    let ghost = sessionstore::SessionId::new().to_string();
    let out = t.run(&["session", "show", &ghost, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["error"]["kind"], "no_database");
    let s = session(&t);
    let out = t.run(&["session", "show", &ghost, "--json"]);
    let err: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["error"]["kind"], "session_not_found");
    assert!(err["error"]["message"].as_str().unwrap().contains(&ghost));
    let bad = format!("attachment:///{s}/..%2Fx");
    let out = t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "x",
        "--attach",
        &bad,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["error"]["kind"], "malformed_reference");
    let out = t.run(&["send", "--json", "--session", &s, "--txt", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err: serde_json::Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["error"]["kind"], "usage");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'--text'")
    );
}

/// 13.7: `session rename`, `attachment list`, `attachment get`.
#[test]
fn rename_list_and_get() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    let renamed = json(&t.run(&["session", "rename", &s, "new name", "--json"]));
    assert_eq!(renamed["title"], "new name");
    let shown = json(&t.run(&["session", "show", &s, "--json"]));
    assert_eq!(shown["session"]["title"], "new name");

    let notes = d.join("notes.txt");
    std::fs::write(&notes, "quarterly notes\n").unwrap();
    let other = d.join("other.txt");
    std::fs::write(&other, "kept").unwrap();
    let stored = json(&t.run(&[
        "attach",
        "--session",
        &s,
        notes.to_str().unwrap(),
        other.to_str().unwrap(),
        "--json",
    ]));
    let uri = stored[0]["uri"].as_str().unwrap().to_owned();
    let gone = stored[1]["uri"].as_str().unwrap().to_owned();
    let m = json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "x",
        "--attach",
        &uri,
        "--attach",
        &gone,
        "--json",
    ]));
    std::fs::remove_file(d.join("attachments").join(&s).join("other.txt")).unwrap();
    let listed = json(&t.run(&["attachment", "list", "--session", &s, "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed[0]["name"], "notes.txt");
    assert_eq!(listed[0]["size"], 16);
    assert_eq!(listed[0]["mimeType"], "text/plain");
    assert_eq!(listed[0]["messages"][0], m["id"]);
    assert_eq!(listed[1]["name"], "other.txt");
    assert_eq!(listed[1]["present"], false);
    let human = stdout(&t.run(&["attachment", "list", "--session", &s]));
    assert!(
        human.contains("notes.txt  16 bytes  text/plain  used by"),
        "{human}"
    );
    assert!(
        !human.contains(d.to_str().unwrap()),
        "no path in the listing"
    );

    let out = t.run(&["attachment", "get", &uri]);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"quarterly notes\n");
    let copy = d.join("copy.txt");
    let out = t.run(&["attachment", "get", &uri, "--out", copy.to_str().unwrap()]);
    assert_quiet_success(&out);
    assert_eq!(std::fs::read(&copy).unwrap(), b"quarterly notes\n");
    let out = t.run(&["attachment", "get", &format!("attachment:///{s}/..%2Fetc")]);
    assert_one_line_error(&out);
    assert_eq!(out.status.code(), Some(3));
    let out = t.run(&["attachment", "get", &gone]);
    let err = assert_one_line_error(&out);
    assert!(err.contains("not found"), "{err}");
}

/// 13.7: `completions bash` loads in bash; zsh, fish and powershell print too.
#[test]
fn completions_load_in_bash() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sessionstore.bash");
    let out = Bin::new(dir.path()).args(["completions", "bash"]).output();
    assert!(out.status.success());
    std::fs::write(&script, &out.stdout).unwrap();
    let loaded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source {:?} && complete -p sessionstore", script))
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    assert_eq!(stderr(&loaded), "");
    assert!(stdout(&loaded).contains("sessionstore"));
    for shell in ["zsh", "fish", "powershell"] {
        let out = Bin::new(dir.path()).args(["completions", shell]).output();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
}

/// Nothing prints colour or progress when stdout is not a terminal.
#[test]
fn no_colour_or_progress_off_a_terminal() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    let file = d.join("a.txt");
    std::fs::write(&file, "a").unwrap();
    for args in [
        &["attach", "--session", &s, file.to_str().unwrap()][..],
        &["verify"],
        &["session", "list"],
        &["paths"],
    ] {
        let out = t.run(args);
        assert_quiet_success(&out);
        assert!(!out.stdout.contains(&0x1b), "{args:?}: no escape sequence");
    }
    let out = Bin::new(d).arg("frobnicate").output();
    assert!(!out.stderr.contains(&0x1b), "usage errors are not coloured");
}

/// README's `sh` blocks between `from` and `to` (headings), each up to its closing
/// fence, with `cargo run` standing for the built binary and the fixtures where the
/// repository has them.
pub(crate) fn readme_script(from: &str, to: &str) -> String {
    let readme = include_str!("../../README.md");
    let start = readme.find(from).expect("the first heading");
    let end = start + readme[start..].find(to).expect("the last heading");
    let mut section = &readme[start..end];
    let mut script = String::new();
    while let Some(open) = section.find("```sh\n") {
        let block = &section[open + 6..];
        let close = block.find("```").expect("a closed block");
        script.push_str(&block[..close]);
        section = &block[close + 3..];
    }
    // A binary built without the probe refuses `probe`; the rest of the tour runs.
    if cfg!(not(feature = "probe")) {
        script = script
            .lines()
            .filter(|l| !l.starts_with("cargo run -- probe"))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    let binary = env!("CARGO_BIN_EXE_sessionstore");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    script
        .replace("cargo run -q --", binary)
        .replace("cargo run --", binary)
        .replace("tests/fixtures", fixtures)
}

/// `script` under `bash -euo pipefail` in `dir`, with `dir` as the home and nothing
/// else of the environment but `PATH`.
fn run_script(dir: &Path, script: &str) -> Output {
    run_script_with(dir, script, &[])
}

/// `run_script` with `env` set as well.
pub(crate) fn run_script_with(dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", dir)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("XDG_DATA_HOME", dir.join(".local/share"))
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// README's tour, run as written with `cargo run` standing for the built binary.
#[test]
fn readme_tour_runs_as_written() {
    let script = readme_script("## A short tour", "`record` reads");
    assert!(
        script.contains(" paths")
            && script.contains("--text -")
            && script.contains("attachment get")
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Bin::new(dir.path())
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("XDG_DATA_HOME", dir.path().join(".local/share"))
        .arg("--version")
        .output();
    assert!(out.status.success());
    let out = run_script(dir.path(), &script);
    assert!(
        out.status.success(),
        "the tour failed: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(dir.path().join("notes-copy.txt")).unwrap(),
        b"quarterly notes\nbudget: 42\n"
    );
}

/// 13.6: a session whose log does not replay is named once in the refusal of a copy.
#[test]
fn the_log_mismatch_refusal_names_its_session_once() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let s = session(&t);
    json(&t.run(&["send", "--session", &s, "--text", "hello", "--json"]));
    let conn = rusqlite::Connection::open(d.join("sessions.db")).unwrap();
    // An event delivering a message that was never appended: the log no longer
    // replays.
    conn.execute(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         SELECT session_id, max(session_seq) + 1, 'message_delivered', ?2, 'now'
         FROM events WHERE session_id = ?1 GROUP BY session_id",
        [
            s.clone(),
            format!(
                r#"{{"kind":"message_delivered","id":"{}"}}"#,
                sessionstore::MessageId::new()
            ),
        ],
    )
    .unwrap();
    drop(conn);
    // A copy (fork, export) checks the session against its log first.
    let err = assert_one_line_error(&t.run(&["session", "fork", &s]));
    assert_eq!(err.matches(&s).count(), 1, "{err}");
    assert!(err.contains("which was never appended"), "{err}");
}

/// `record` counts in the singular where there is one.
#[test]
fn record_counts_read_in_the_singular() {
    let t = TestStore::empty();
    let id = session(&t);
    let line = br#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}"#;
    let out = t
        .bin()
        .args(["record", "--session", &id])
        .stdin(line)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), "recorded 1 update into 1 item");
}

/// An export that cannot write its output says so, naming the file, and leaves nothing.
#[test]
fn an_export_that_cannot_write_says_write() {
    let t = TestStore::empty();
    let id = session(&t);
    for format in ["tar", "markdown"] {
        let out_file = t.dir.path().join("missing").join("out");
        let out = out_file.to_str().unwrap();
        let run = t.run(&["export", "--session", &id, "--out", out, "--format", format]);
        let err = assert_one_line_error(&run);
        assert!(
            err.starts_with(&format!("error: cannot write {out}")),
            "{err}"
        );
        assert!(!t.dir.path().join("missing").exists());
    }
}

/// `import` is one of the commands that make a database: an archive carried to a
/// machine with no store yet comes in whole.
#[test]
fn import_makes_the_database_it_imports_into() {
    let from = TestStore::empty();
    let id = session(&from);
    let archive = from.dir.path().join("s.tar");
    let out = from.run(&[
        "export",
        "--session",
        &id,
        "--out",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let to = TestStore::empty();
    assert!(!to.db_path().exists());
    let imported = json(&to.run(&["import", archive.to_str().unwrap(), "--keep-id", "--json"]));
    assert_eq!(imported["id"], id.as_str());
    assert!(to.run(&["verify"]).status.success());
}

/// README's first command is `cargo run -- migrate`: with the test agent a second
/// binary of the package, `cargo run` must be told which one is the store's, or it
/// refuses to choose (found by trying README's commands on a fresh machine).
#[test]
fn cargo_run_runs_the_store_binary() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = &metadata["packages"][0];
    assert_eq!(package["default_run"], "sessionstore", "{package}");
    let bins: Vec<&str> = package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"][0] == "bin")
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(bins.contains(&"sessionstore"), "{bins:?}");
}
