//! `record`: ACP session updates from standard input, one a line, each checked before
//! the store is opened and kept in an unlinked temporary file the store reads back a
//! batch at a time, so the input is never held whole.

use sessionstore::store::Access;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use sessionstore::record::{RECORD_BATCH, UpdateSource};
use sessionstore::{Config, Error, SessionId, Store};

use super::output::{count, emit, print_json};
use super::parse_session;

#[derive(Args)]
pub struct RecordArgs {
    /// The session the updates belong to
    #[arg(long, value_name = "ID", value_parser = parse_session)]
    session: SessionId,
}

/// The checked lines, as given, in an unlinked temporary file, and where the blank
/// lines were (skipped, but still counted in the line numbers errors name).
struct Spool {
    file: File,
    dir: PathBuf,
    session: SessionId,
    lines: LineMap,
}

impl Spool {
    /// Reads and checks every line of `input`, naming the first bad one by its number.
    fn read(input: impl BufRead, session: SessionId) -> Result<Spool> {
        let dir = std::env::temp_dir();
        let file = unlinked(&dir)
            .with_context(|| format!("cannot make a temporary file in {}", dir.display()))?;
        let mut out = BufWriter::with_capacity(64 * 1024, file);
        let mut blanks = Vec::new();
        let mut updates = 0;
        for (n, line) in input.lines().enumerate() {
            let line = line.context("cannot read standard input")?;
            if line.trim().is_empty() {
                blanks.push(updates);
                continue;
            }
            sessionstore::turns::parse_line(&line, session).map_err(|refusal| {
                Error::UpdateRefused {
                    line: n + 1,
                    refusal,
                }
            })?;
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .with_context(|| format!("cannot write a temporary file in {}", dir.display()))?;
            updates += 1;
        }
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write a temporary file in {}", dir.display()))?;
        let lines = LineMap { blanks, updates };
        Ok(Spool {
            file,
            dir,
            session,
            lines,
        })
    }
}

/// A new file in `dir` that no name reaches: made with `O_EXCL` under a name of its
/// own, then unlinked while it stays open.
fn unlinked(dir: &std::path::Path) -> std::io::Result<File> {
    for n in 0u32.. {
        let path = dir.join(format!(".sessionstore-record-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    unreachable!("some numbered name is free")
}

/// The spool read back from its start, parsed again a batch at a time (every line
/// parsed once already, so a failure here is the temporary file's).
impl UpdateSource for Spool {
    fn batches(
        &mut self,
        each: &mut dyn FnMut(Vec<sessionstore::turns::Update>) -> sessionstore::Result<()>,
    ) -> sessionstore::Result<()> {
        let io = |cause| Error::Io {
            path: self.dir.clone(),
            cause,
        };
        self.file.rewind().map_err(io)?;
        let mut batch = Vec::with_capacity(RECORD_BATCH);
        for line in BufReader::with_capacity(64 * 1024, &self.file).lines() {
            let line = line.map_err(io)?;
            let update = sessionstore::turns::parse_line(&line, self.session).map_err(|e| {
                io(std::io::Error::other(format!(
                    "a spooled update no longer parses: {e}"
                )))
            })?;
            batch.push(update);
            if batch.len() == RECORD_BATCH {
                each(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(RECORD_BATCH),
                ))?;
            }
        }
        if !batch.is_empty() {
            each(batch)?;
        }
        Ok(())
    }
}

/// A bad line stores nothing and is named by its number (blank lines are skipped but
/// still counted).
pub async fn record(config: Config, json: bool, args: RecordArgs) -> Result<()> {
    let spool = Spool::read(std::io::stdin().lock(), args.session)?;
    // Where each update's line is, kept once the spool itself has gone to the store.
    let lines = spool.lines.clone();
    let store = Store::open_as(config, Access::Existing).await?;
    let recorded = match store.record(args.session, spool).await {
        // The store numbers the updates it was given from 1; blank lines were skipped,
        // so its number maps back to the input's line.
        Err(Error::UpdateRefused { line, refusal }) => Err(Error::UpdateRefused {
            line: lines.line_of(line),
            refusal,
        }),
        other => other,
    }?;
    if json {
        print_json(&recorded)
    } else {
        emit(&format!(
            "recorded {} into {}",
            count(recorded.recorded, "update", "updates"),
            count(recorded.items.len(), "item", "items")
        ))
    }
}

/// Update numbers (from 1) to input lines: an update is on its own number plus the
/// blank lines before it.
#[derive(Clone)]
struct LineMap {
    /// For each blank line, how many updates came before it.
    blanks: Vec<usize>,
    updates: usize,
}

impl LineMap {
    fn line_of(&self, update: usize) -> usize {
        if update == 0 || update > self.updates {
            return update;
        }
        update + self.blanks.partition_point(|&before| before < update)
    }
}
