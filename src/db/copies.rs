//! Writes a whole session from a history handed to it (a fork's cut of another
//! session, an imported archive) through the same write functions as `send` and
//! `record`, so the new session's own event log replays to its rows. Never copies an
//! event or a row id from anywhere: every row and event here is the new session's.

use super::sql::Tx;

use crate::error::Result;
use crate::ids::SessionId;
use crate::model::{Delivery, ForkedFrom, ItemBody, NewMessage, Setting};

/// One entry of a history to write, in history order.
#[derive(Debug, Clone)]
pub enum Entry {
    Message(NewMessage, Delivery),
    /// A recorded item, written as the updates an agent would send for it
    /// (`turns::replay_updates`), so `record`'s own merge makes the row.
    Item(Box<ItemBody>),
}

/// A session to create with a history: its id, what it is created as, where it was
/// forked from, and the client settings it starts with.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: SessionId,
    pub session: crate::model::NewSession,
    pub forked_from: Option<ForkedFrom>,
    pub settings: Vec<Setting>,
}

/// Creates `session` with its settings and no history yet; [`append`] then writes
/// its entries one at a time, so a long history is never held whole.
pub fn create(conn: &Tx<'_>, session: &NewSession) -> Result<()> {
    super::queries::insert_session_as(conn, session.id, &session.session, session.forked_from)?;
    for setting in &session.settings {
        super::proxied::record_setting(conn, &session.id, setting)?;
    }
    Ok(())
}

/// Appends one entry, with its event, to the history of `session` (made by
/// [`create`] in the same write).
pub fn append(conn: &Tx<'_>, session: &SessionId, entry: &Entry) -> Result<()> {
    match entry {
        Entry::Message(message, state) => {
            super::turns::settle(conn, session)?;
            super::queries::insert_message(conn, session, message, *state)?;
        }
        Entry::Item(body) => {
            super::turns::record(conn, session, &crate::turns::replay_updates(body))?;
        }
    }
    Ok(())
}
