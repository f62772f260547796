//! `sessionstore redact`'s SQL: the one rewrite of the event log besides a session's
//! erasure. Inside the caller's write, the trigger that refuses an UPDATE of `events`
//! is lifted and put back exactly as it was (SQLite: made again from the text
//! `sqlite_master` holds; PostgreSQL: disabled and enabled), so the schema `verify`
//! compares is unchanged and nothing outside that write sees the log unguarded. The
//! session's rows are then made again from its rewritten log. It never touches
//! attachment files.

use super::entries::LogPages;
use super::error::sql;
use super::repair;
use super::sql::{Engine, Tx, args};

use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::Event;
use crate::projection::{Entry, Replayer};

/// Each event of `session`'s log in order, read a page at a time, handed to `f`.
pub(crate) fn each_event_paged(
    conn: &Tx<'_>,
    session: &SessionId,
    mut f: impl FnMut(Event<String>) -> Result<()>,
) -> Result<()> {
    let mut log = LogPages::new(conn, session)?;
    while !log.done() {
        for event in log.next_page(conn)? {
            f(event)?;
        }
    }
    Ok(())
}

/// The append-only guard on `events`, lifted: [`Lifted::restore`] puts it back.
pub(crate) enum Lifted {
    /// SQLite: the trigger's own text, to make it again word for word (`None`: there
    /// was none to lift).
    Sqlite(Option<String>),
    Postgres,
}

/// Lifts the trigger that refuses an UPDATE of `events`, inside `conn`'s write.
pub(crate) fn lift_guard(conn: &Tx<'_>) -> Result<Lifted> {
    match conn.engine() {
        Engine::Sqlite => {
            let text: Option<String> = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'events_no_update'",
                    args![],
                    |r| r.get(0),
                )
                .map_err(sql("read the event log's guard"))?;
            if text.is_some() {
                conn.batch("DROP TRIGGER events_no_update")
                    .map_err(sql("lift the event log's guard"))?;
            }
            Ok(Lifted::Sqlite(text))
        }
        Engine::Postgres => {
            conn.batch("ALTER TABLE events DISABLE TRIGGER events_no_update")
                .map_err(sql("lift the event log's guard"))?;
            Ok(Lifted::Postgres)
        }
    }
}

impl Lifted {
    /// Puts the guard back, in the same write.
    pub(crate) fn restore(self, conn: &Tx<'_>) -> Result<()> {
        let statement = match &self {
            Lifted::Sqlite(Some(text)) => text.as_str(),
            Lifted::Sqlite(None) => return Ok(()),
            Lifted::Postgres => "ALTER TABLE events ENABLE TRIGGER events_no_update",
        };
        conn.batch(statement)
            .map_err(sql("restore the event log's guard"))
    }
}

/// Rewrites `session`'s log and rows in `conn`'s write: `redact` is given the log's
/// events in order (then `None`: the log ended) and gives them back in order, each with
/// its new payload when it changed; it may hold an event back until the next. The rows
/// are removed first, while the log still holds what their delete triggers hand the
/// search index, then made again from the rewritten log. Returns how many events were
/// rewritten; a log that does not replay whole is `Error::LogMismatch`.
pub(crate) fn rewrite_session(
    conn: &Tx<'_>,
    session: &SessionId,
    mut redact: impl FnMut(Option<Event<String>>) -> Vec<(Event<String>, Option<String>)>,
) -> Result<u64> {
    repair::remove_rows(conn, session)?;
    let guard = lift_guard(conn)?;
    let mut replayer = Replayer::windowed(*session);
    let mut rewritten = 0;
    let mut write = |ready: Vec<(Event<String>, Option<String>)>| -> Result<()> {
        for (mut event, payload) in ready {
            if let Some(payload) = payload {
                conn.execute(
                    "UPDATE events SET payload = ?2 WHERE seq = ?1",
                    args![event.seq.0, payload],
                )
                .map_err(sql("rewrite an event"))?;
                event.payload = payload;
                rewritten += 1;
            }
            replayer.apply(&event);
            for entry in replayer.take_retired() {
                write_entry(conn, &entry)?;
            }
        }
        Ok(())
    };
    each_event_paged(conn, session, |event| write(redact(Some(event))))?;
    write(redact(None))?;
    guard.restore(conn)?;
    replayer.close();
    for entry in replayer.take_retired() {
        write_entry(conn, &entry)?;
    }
    let (projection, problems) = replayer.finish();
    match projection {
        Some(p) if problems.is_empty() => repair::write_session(conn, &p)?,
        _ => {
            return Err(Error::LogMismatch {
                session: *session,
                problems,
            });
        }
    }
    Ok(rewritten)
}

/// One entry's row, with its references (its search entry is a trigger's, V18).
fn write_entry(conn: &Tx<'_>, entry: &Entry) -> Result<()> {
    match entry {
        Entry::Message(m) => repair::write_message(conn, m),
        Entry::Item(item) => repair::write_item(conn, item),
    }
}
