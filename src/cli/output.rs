//! What the command line writes to stdout: flushed lines and JSON, and stored text made
//! safe for a terminal.

use std::io::{BufWriter, Write};

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes to stdout and flushes, so a closed pipe or a full disk is an error the
/// command reports (and, for `drain`, delivers nothing) rather than a panic.
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .context("cannot write the output")
}

/// Standard output for a document that may be large (a restore, a dispatch): a
/// duplicate of its descriptor behind a buffer of our own. `std::io::stdout()` is
/// line-buffered and looks through every byte handed to it for a line break: a third
/// of the CPU time of a restore of large attachments, where base64 holds none.
pub fn document() -> Result<BufWriter<std::fs::File>> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot write the output")?;
    Ok(BufWriter::with_capacity(64 * 1024, std::fs::File::from(fd)))
}

pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    emit(&serde_json::to_string(value)?)
}

/// A new entry's id: bare, or as `{"id": ...}` under `--json`.
pub fn print_id(json: bool, id: impl std::fmt::Display + Serialize) -> Result<()> {
    match json {
        true => print_json(&serde_json::json!({ "id": id })),
        false => emit(&id.to_string()),
    }
}

/// How many characters of a title a listing shows.
pub const TITLE_CHARS: usize = 80;
/// How many characters of a message's text `session show` shows.
pub const TEXT_CHARS: usize = 300;

/// Stored text as one row of human output: line breaks and tabs as `\n`, `\r`, `\t`,
/// every other control or invisible character as `\uXXXX` (so an escape sequence in a
/// title never reaches the terminal), and cut after `max` characters with a marker
/// saying how much was left out; `--json` has the whole text.
pub fn cell(text: &str, max: usize) -> String {
    let mut shown: String = text.chars().take(max).collect();
    let total = text.chars().count();
    let cut = total.saturating_sub(max);
    shown = shown
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t");
    let mut line = sessionstore::dispatch::hidden_escaped(&shown);
    if cut > 0 {
        line.push_str(&format!(
            "… [{cut} more characters; --json has the full text]"
        ));
    }
    line
}

/// A session's title as a cell, or `(untitled)`.
pub fn title_cell(title: Option<&str>) -> String {
    title.map_or_else(|| "(untitled)".to_owned(), |t| cell(t, TITLE_CHARS))
}

/// Text from outside (an error's chain, clap's message) for a terminal: each line's
/// control and invisible characters escaped, the line breaks kept.
pub fn terminal_lines(text: &str) -> String {
    text.lines()
        .map(sessionstore::dispatch::hidden_escaped)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line for a terminal: line breaks become spaces, everything hidden is escaped.
pub fn terminal_line(text: &str) -> String {
    sessionstore::dispatch::hidden_escaped(&text.replace(['\n', '\r'], " "))
}

/// "1 problem", "2 problems".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_escaped_line_cut_with_a_marker() {
        assert_eq!(cell("a\nb\tc", 10), "a\\nb\\tc");
        assert_eq!(cell("\u{1b}[31mred", 20), "\\u001b[31mred");
        assert_eq!(
            cell("abcdef", 3),
            "abc… [3 more characters; --json has the full text]"
        );
        assert_eq!(count(1, "problem", "problems"), "1 problem");
        assert_eq!(count(4, "problem", "problems"), "4 problems");
    }
}
