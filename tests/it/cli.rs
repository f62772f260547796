//! The command line's shared contract: global flags anywhere, environment variables,
//! the default data directory, and one-line errors.

use crate::support::{Bin, TestStore, assert_one_line_error, assert_usage_error, json, stdout};

#[test]
fn global_flags_work_before_or_after_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let root = dir.path().join("files");
    let out = Bin::new(dir.path())
        .arg("--db")
        .arg(&db)
        .args(["session", "new", "--json", "--attachments-root"])
        .arg(&root)
        .output();
    let id = json(&out)["id"].as_str().unwrap().to_owned();
    let out = Bin::new(dir.path())
        .args(["--json", "session", "show", &id])
        .env("SESSIONSTORE_DB", &db)
        .env("SESSIONSTORE_ATTACHMENTS_ROOT", &root)
        .output();
    assert_eq!(json(&out)["session"]["id"], id.as_str());
}

#[test]
fn with_no_flags_everything_lives_in_the_data_directory() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path()).args(["migrate", "--json"]).output();
    assert_eq!(json(&out)["current"], crate::support::latest_version());
    let out = Bin::new(home.path())
        .args(["session", "new", "--title", "x", "--json"])
        .output();
    let id = json(&out)["id"].as_str().unwrap().to_owned();
    let out = Bin::new(home.path())
        .args(["events", "--session", &id])
        .output();
    assert!(out.status.success());
    let first: serde_json::Value =
        serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "session_created");
    assert!(
        home.path()
            .join(".local/share/sessionstore/sessions.db")
            .is_file()
    );
}

#[test]
fn bad_ids_and_unknown_sessions_are_one_line_errors() {
    let t = TestStore::empty();
    let run = |args: &[&str]| t.run(args);
    let err = assert_usage_error(&run(&["events", "--session", "../../etc"]));
    assert!(err.contains("invalid session id"), "{err}");
    let ghost = sessionstore::SessionId::new().to_string();
    let err = assert_one_line_error(&run(&["session", "show", &ghost]));
    assert!(err.contains("no database at"), "{err}");
    let err = assert_usage_error(&run(&["session", "new", "--tools-host", "mars"]));
    assert!(
        err.contains("'mars'") && err.contains("--tools-host"),
        "{err}"
    );
    assert!(err.contains("local, ssh, managed"), "{err}");
    assert!(
        !t.dir.path().join("sessions.db").exists(),
        "a refused command created nothing"
    );
    json(&run(&["migrate", "--json"]));
    let err = assert_one_line_error(&run(&["session", "show", &ghost]));
    assert!(err.contains(&format!("no session {ghost}")), "{err}");
}

/// Issue 13.1: a usage error prints clap's own message, which names what is wrong.
#[test]
fn usage_errors_print_clap_s_message_with_exit_2_and_help_still_prints() {
    let t = TestStore::empty();
    let s = sessionstore::SessionId::new().to_string();
    for (args, says) in [
        (&["dispatch"][..], "--session <ID>"),
        (
            &["send", "--session"],
            "a value is required for '--session <ID>'",
        ),
        (
            &["send", "--session", &s],
            "--text <TEXT>|--text-file <PATH>",
        ),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (
            &["sesion", "list"],
            "a similar subcommand exists: 'session'",
        ),
        (
            &["send", "--session", &s, "--txt", "t"],
            "a similar argument exists: '--text'",
        ),
        (
            &["send", "--session", &s, "--text", "t", "--role", "system"],
            "[possible values: user, assistant]",
        ),
        (
            &["dispatch", "--session", &s, "--format", "bogus"],
            "[possible values: acp, openai, openai-responses, focus-hint]",
        ),
        (
            &["drain", "--session", &s, "--format", "focus-hint"],
            "[possible values: acp, openai, openai-responses]",
        ),
        (&[], "Usage: sessionstore"),
    ] {
        let out = t.run(args);
        let err = if args.is_empty() {
            // With no command at all, clap prints the help, on stderr, and exits 2.
            assert_eq!(out.status.code(), Some(2));
            crate::support::stderr(&out)
        } else {
            assert_usage_error(&out)
        };
        assert!(err.contains(says), "{args:?}: {says:?} not in {err}");
    }
    assert!(
        !t.dir.path().join("sessions.db").exists(),
        "a usage error opens nothing"
    );
    let out = Bin::new(t.dir.path()).arg("--help").output();
    assert!(out.status.success());
    assert!(stdout(&out).contains("migrate"));
}

/// Issue 13.8: the exit codes are in `--help`.
#[test]
fn help_lists_the_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Bin::new(dir.path()).arg("--help").output();
    let help = stdout(&out);
    for line in ["0  ok", "1  failure", "2  usage", "3  refused input"] {
        assert!(help.contains(line), "{line:?} not in {help}");
    }
}

#[test]
fn empty_environment_variables_count_as_unset() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path())
        .args(["migrate", "--json"])
        .env("SESSIONSTORE_DB", "")
        .env("SESSIONSTORE_ATTACHMENTS_ROOT", "")
        .env("SESSIONSTORE_LEGACY_ROOTS", "")
        .output();
    assert_eq!(json(&out)["current"], crate::support::latest_version());
    assert!(
        home.path()
            .join(".local/share/sessionstore/sessions.db")
            .is_file()
    );
}

#[test]
fn commands_that_only_read_never_create_a_database() {
    let t = TestStore::empty();
    let ghost = sessionstore::SessionId::new().to_string();
    let out = t.run(&["session", "list", "--json"]);
    assert_eq!(
        json(&out),
        serde_json::json!({"sessions": [], "nextCursor": null})
    );
    for args in [
        &["verify"][..],
        &["events", "--session", &ghost],
        &["dispatch", "--session", &ghost],
        &["drain", "--session", &ghost],
        &["restore", "--session", &ghost],
        &["send", "--session", &ghost, "--text", "hi"],
    ] {
        let err = assert_one_line_error(&t.run(args));
        assert!(err.contains("no database at"), "{args:?}: {err}");
    }
    assert!(!t.dir.path().join("sessions.db").exists());
}

#[test]
fn an_error_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    // A database path beneath a plain file cannot be created.
    let out = Bin::new(dir.path())
        .args(["migrate", "--db"])
        .arg(file.join("sessions.db"))
        .output();
    let err = assert_one_line_error(&out);
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}

#[test]
fn refused_input_exits_3_and_other_failures_exit_1() {
    let t = TestStore::empty();
    let run = |args: &[&str]| t.run(args);
    let session = sessionstore::SessionId::new().to_string();
    let bad = format!("attachment:///{session}/..%2Fx");
    let out = run(&[
        "send",
        "--session",
        &session,
        "--text",
        "x",
        "--attach",
        &bad,
    ]);
    let err = assert_one_line_error(&out);
    assert!(err.contains(&bad), "{err}");
    assert_eq!(
        out.status.code(),
        Some(3),
        "a malformed uri is refused input"
    );
    let out = run(&["send", "--session", &session, "--text", "x"]);
    assert_one_line_error(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a missing database is a failure"
    );
}

/// A command whose feature this binary was built without is hidden from the help and
/// refused in one line that names the feature, as a usage error (exit 2), before any
/// database is opened.
#[cfg(any(not(feature = "acp"), not(feature = "probe")))]
#[test]
fn a_command_left_out_of_the_build_names_its_feature() {
    let dir = tempfile::tempdir().unwrap();
    let help = stdout(&Bin::new(dir.path()).arg("--help").output());
    let left_out = [
        ("acp", cfg!(feature = "acp")),
        ("probe", cfg!(feature = "probe")),
    ];
    for (command, _) in left_out.iter().filter(|(_, built)| !built) {
        let out = Bin::new(dir.path()).arg(command).output();
        let err = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("needs the `{command}` feature")),
            "{err}"
        );
        assert!(
            !help.lines().any(|l| l.trim_start().starts_with(command)),
            "{help}"
        );
        assert!(!dir.path().join(".local").exists(), "nothing was created");
    }
}
