//! Warnings from `verify` and `paths` about database files more exposed than the store
//! would make them. Never a problem, and never fixed by the store itself.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::{Config, Database, Sharing};
use crate::db::cipher::{Encryption, encryption_of};
use crate::db::schema;

/// Serializes as `{path, kind, message}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Exposure {
    pub path: PathBuf,
    pub kind: ExposureKind,
    /// What it is and the command that fixes it, in one line.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExposureKind {
    /// Its mode lets in someone the sharing setting leaves out.
    WideMode,
    /// A plain backup beside an encrypted database.
    PlaintextBackup,
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// None for PostgreSQL, whose files are the server's.
pub fn exposures(config: &Config) -> Vec<Exposure> {
    let Database::Sqlite(db) = &config.database else {
        return vec![];
    };
    let encrypted = config.key.is_some() || encryption_of(db) == Encryption::Encrypted;
    let mut found = Vec::new();
    for (file, backup) in database_files(db) {
        found.extend(wide_mode(&file, config.sharing, "the database's files"));
        if encrypted && backup && encryption_of(&file) == Encryption::Plain {
            found.push(Exposure {
                message: format!(
                    "{} is an unencrypted copy of the database, from before it was \
                     encrypted: remove it (rm {}) unless you still need it",
                    file.display(),
                    shell_word(&file)
                ),
                path: file,
                kind: ExposureKind::PlaintextBackup,
            });
        }
    }
    found
}

pub fn key_file_exposure(path: &Path, sharing: Sharing) -> Option<Exposure> {
    wide_mode(path, sharing, "the key file")
}

/// The main file first, then its side files and backups (flagged) in name order.
fn database_files(db: &Path) -> Vec<(PathBuf, bool)> {
    let Some(name) = db.file_name().map(|n| n.to_owned()) else {
        return vec![];
    };
    let mut files = vec![(db.to_owned(), false)];
    let Ok(entries) = std::fs::read_dir(schema::beside(db)) else {
        return files;
    };
    let mut beside: Vec<(PathBuf, bool)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let entry = e.file_name();
            let rest = entry
                .as_encoded_bytes()
                .strip_prefix(name.as_encoded_bytes())?;
            let side = matches!(rest, b"-wal" | b"-shm" | b"-journal");
            let backup = rest.starts_with(b".v") && rest.ends_with(b".bak");
            (side || backup).then(|| (e.path(), backup))
        })
        .collect();
    beside.sort();
    files.extend(beside);
    files
}

fn wide_mode(path: &Path, sharing: Sharing, what: &str) -> Option<Exposure> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mode = meta.mode() & 0o7777;
    let excess = sharing.excess(mode);
    if excess == 0 {
        return None;
    }
    let who = match (excess & 0o070 != 0, excess & 0o007 != 0) {
        (true, true) => "its group and others",
        (true, false) => "its group",
        _ => "others",
    };
    let fixed = mode & !excess & 0o777;
    Some(Exposure {
        message: format!(
            "{} ({what}) is open to {who} (mode {mode:04o}): chmod {fixed:o} {} closes it",
            path.display(),
            shell_word(path)
        ),
        path: path.to_owned(),
        kind: ExposureKind::WideMode,
    })
}

/// `path` as one word a shell reads back as it is: unquoted when it holds only
/// characters no shell treats specially, else in single quotes.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@%,".contains(&b));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests;
