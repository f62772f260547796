//! TLS to PostgreSQL, on the server `SESSIONSTORE_TEST_POSTGRES_TLS` names (a
//! `sslmode=verify-full` connection string whose `sslrootcert` is the authority that
//! signed the server's certificate, as `.ci/postgres tls-url` gives): a certificate
//! for another name, or signed by another authority, is refused in one line without
//! the password; `verify-ca` takes another name; the logs say whether a connection is
//! encrypted, and `paths` shows the mode. The suite's own bodies run over it too
//! (`over_tls!` beside each `conformance!`). Skipped, with a note, when no such server
//! is named.

use crate::support::{Bin, assert_one_line_error, json, postgres_tls_url, stderr, stdout};

/// The TLS server's URL, with a password in it (the test server trusts loopback
/// clients and ignores it), so that every message can be checked for it.
fn server() -> Option<String> {
    let Some(url) = postgres_tls_url() else {
        crate::support::skipped_tls_notice();
        return None;
    };
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (user, host) = rest.split_once('@').expect("the URL names its user");
    Some(format!("{scheme}://{user}:{SECRET}@{host}"))
}

const SECRET: &str = "s3cret-tls";

/// `url` reaching the same server under the host name `name` (`hostaddr` still
/// 127.0.0.1, where it listens), so the certificate is checked against `name`.
fn named(url: &str, name: &str) -> String {
    let (before, after) = url.split_once('@').unwrap();
    let (_host, rest) = after.split_once(':').unwrap();
    let (port_db, query) = rest.split_once('?').unwrap();
    format!("{before}@{name}:{port_db}?hostaddr=127.0.0.1&{query}")
}

/// `args` on the database `url`, from a home of its own.
fn run(url: &str, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    Bin::new(home.path())
        .args(args)
        .args(["--db", url])
        .output()
}

#[test]
fn verify_full_refuses_another_host_name_and_another_authority() {
    let Some(url) = server() else {
        return;
    };
    // The same server is taken under the name and address its certificate holds.
    let out = run(&url, &["migrate", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for (db, why) in [
        (
            named(&url, "wrong.example"),
            "certificate not valid for name \"wrong.example\"",
        ),
        (url.replace("/ca.crt", "/other-ca.crt"), "UnknownIssuer"),
    ] {
        let out = run(&db, &["migrate", "--dry-run"]);
        let err = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(1), "{db}: {err}");
        assert!(err.contains(why), "{db}: {err}");
        assert!(err.contains("TLS handshake"), "{db}: {err}");
        assert!(!err.contains(SECRET), "{err}");
    }
    // verify-ca checks the authority and not the name; an authority it cannot read
    // is refused before any connection, as the string's own mistake.
    let ca_only = named(&url, "wrong.example").replace("verify-full", "verify-ca");
    let out = run(&ca_only, &["migrate", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(
        &url.replace("/ca.crt", "/no-such-ca.crt"),
        &["migrate", "--dry-run"],
    );
    let err = assert_one_line_error(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("cannot read sslrootcert"), "{err}");
    assert!(!err.contains(SECRET), "{err}");
}

#[test]
fn the_log_says_whether_a_connection_is_encrypted_and_paths_shows_the_mode() {
    let Some(url) = server() else {
        return;
    };
    let plain = url
        .split_once('?')
        .map(|(base, _)| format!("{base}?sslmode=disable"))
        .unwrap();
    // No sslmode and a host name that is not local: TLS is required, unasked.
    let remote = named(&url, "db.example")
        .split('&')
        .filter(|p| !p.starts_with("sslmode=") && !p.starts_with("sslrootcert="))
        .collect::<Vec<_>>()
        .join("&");
    for (db, said) in [
        (&url, "over TLS (sslmode verify-full)"),
        (&plain, "without TLS (sslmode disable)"),
        (&remote, "over TLS (sslmode require)"),
    ] {
        let out = run(db, &["migrate", "--dry-run", "-v"]);
        assert!(out.status.success(), "{db}: {}", stderr(&out));
        let log = stderr(&out);
        assert!(log.contains(said), "{db}: {log}");
        assert!(!log.contains(SECRET), "{log}");
    }
    let p = json(&run(&url, &["paths", "--json"]));
    assert_eq!(p["tls"]["mode"], "verify-full", "{p}");
    assert_eq!(p["tls"]["chosen"], "given", "{p}");
    assert!(
        p["tls"]["rootCert"].as_str().unwrap().ends_with("/ca.crt"),
        "{p}"
    );
    let p = json(&run(&remote, &["paths", "--json"]));
    assert_eq!(p["tls"]["mode"], "require", "{p}");
    assert_eq!(p["tls"]["chosen"], "remote-default", "{p}");
    let text = stdout(&run(&remote, &["paths"]));
    assert!(
        text.contains("tls               require  (default for a server that is not local)"),
        "{text}"
    );
    assert!(!text.contains(SECRET), "{text}");
}
