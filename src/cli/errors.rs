//! How a failed command ends: clap's message for a usage error, else one line (or one
//! JSON object under `--json`) on stderr, and the exit codes.

use std::process::ExitCode;

use sessionstore::Error;

use super::output::{terminal_line, terminal_lines};

/// The exit codes, as `--help` and README list them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  ok
  1  failure (a missing database or session, an I/O error, problems found by verify)
  2  usage (unknown command or flag, a malformed value)
  3  refused input (a newer or foreign database, an unsafe name or URI,
     an unreadable reference in strict mode)";

/// A mistake in how the command was called that clap cannot see (flags that only
/// make sense together): exit 2, like clap's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// 0 when a check found nothing wrong, 1 when it did.
pub fn status(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Whether `--json` is among the arguments, for a usage error, where clap could not
/// say.
pub fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

fn print_json_error(kind: &str, message: &str) {
    let value = serde_json::json!({ "error": { "kind": kind, "message": message } });
    eprintln!("{value}");
}

/// Help and version print as clap writes them, on stdout with exit 0; anything else
/// prints clap's message as it is (the argument it is about, the values it takes, a
/// similar flag), escaped for the terminal, with exit 2.
pub fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.render().to_string();
            if json_requested() {
                let message = text
                    .lines()
                    .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                let message = message.strip_prefix("error: ").unwrap_or(&message);
                print_json_error("usage", message);
            } else {
                eprintln!("{}", terminal_lines(text.trim_end()));
            }
            ExitCode::from(2)
        }
    }
}

/// The library's error in the chain, if there is one.
fn library_error(e: &anyhow::Error) -> Option<&Error> {
    e.chain().find_map(|c| c.downcast_ref::<Error>())
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A machine-readable name for the failure: the library's `kind()`, `usage` for a
/// mistake in the call, `io` for the command line's own I/O, else `failure`.
fn kind(e: &anyhow::Error) -> &'static str {
    if let Some(lib) = library_error(e) {
        return lib.kind();
    }
    if e.chain().any(|c| c.is::<Usage>()) {
        return "usage";
    }
    if e.chain().any(|c| c.is::<std::io::Error>()) {
        return "io";
    }
    "failure"
}

/// 3 when the store refused its input, 2 for a usage mistake, 1 for any other
/// failure.
fn exit_code(e: &anyhow::Error) -> ExitCode {
    match library_error(e) {
        Some(lib) if lib.is_refused() => ExitCode::from(3),
        _ if e.chain().any(|c| c.is::<Usage>()) => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    }
}

/// Reports a failed command. For a command that only reads, a reader that closed
/// stdout early (`| head`) is no failure to report: it stops quietly with 0, as other
/// Unix tools do. `drain` (`quiet_pipe` false) still says so: its output is the
/// delivery, and nothing was delivered.
pub fn report(e: &anyhow::Error, json: bool, quiet_pipe: bool) -> ExitCode {
    if quiet_pipe && broken_pipe(e) {
        return ExitCode::SUCCESS;
    }
    // The error and its causes on one line (each library error reports its cause as
    // `source()` and does not repeat it). Messages echo paths, names and a database's
    // own text, any of which may hold escape sequences, so every hidden character is
    // printed as `\uXXXX` and never reaches the terminal raw.
    let message = terminal_line(&format!("{e:#}"));
    if json {
        print_json_error(kind(e), &message);
    } else {
        eprintln!("error: {message}");
    }
    exit_code(e)
}
