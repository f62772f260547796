//! Writes a whole session from a history handed to it (a fork, an import) through the
//! same write functions as `send` and `record`, so its own log replays to its rows.
//! Never copies an event or a row id: every row and event here is the new session's.

use super::sql::Tx;

use crate::error::Result;
use crate::ids::SessionId;
use crate::model::{Delivery, ForkedFrom, ItemBody, NewMessage, Setting};
use crate::record::RECORD_BATCH;
use crate::turns::Update;
use agent_client_protocol_schema::v1::{
    SessionUpdate, ToolCallId, ToolCallUpdate, ToolCallUpdateFields,
};

/// One entry of a history to write, in history order.
#[derive(Debug, Clone)]
pub enum Entry {
    Message(NewMessage, Delivery),
    /// A recorded item, written as the updates an agent would send for it
    /// (`turns::replay_updates`), so `record`'s own merge makes the row.
    Item(Box<ItemBody>),
}

/// A session to create with a history.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: SessionId,
    pub session: crate::model::NewSession,
    pub forked_from: Option<ForkedFrom>,
    pub settings: Vec<Setting>,
}

/// Creates `session` with its settings and no history yet; an [`Appender`] then writes
/// its entries in order, so a long history is never held whole.
pub fn create(conn: &Tx<'_>, session: &NewSession) -> Result<()> {
    super::queries::insert_session_as(conn, session.id, &session.session, session.forked_from)?;
    for setting in &session.settings {
        super::proxied::record_setting(conn, &session.id, setting)?;
    }
    Ok(())
}

/// Appends entries, with their events, to the history of `session` (made by
/// [`create`] in the same write), in order: a message with its own event, the updates
/// of consecutive items gathered into one `record` of up to [`RECORD_BATCH`] updates
/// (an item's updates never split), so what is held is one batch. [`Appender::finish`]
/// writes what is still gathered.
pub struct Appender {
    session: SessionId,
    pending: Vec<Update>,
    /// The kind of the last entry appended, when it was an agent message or thought.
    last_text: Option<&'static str>,
    /// The last tool call appended.
    last_call: Option<ToolCallId>,
}

impl Appender {
    pub fn new(session: SessionId) -> Appender {
        Appender {
            session,
            pending: Vec::new(),
            last_text: None,
            last_call: None,
        }
    }

    /// The session it writes.
    pub fn session(&self) -> SessionId {
        self.session
    }

    pub fn append(&mut self, conn: &Tx<'_>, entry: &Entry) -> Result<()> {
        match entry {
            Entry::Message(message, state) => {
                self.last_text = None;
                self.flush(conn)?;
                super::items::settle(conn, &self.session)?;
                super::queries::insert_message(conn, &self.session, message, *state)?;
            }
            // A copy carries history, not cost: the origin's `usage_update`s are left out.
            Entry::Item(body) if crate::turns::is_usage(body) => {}
            Entry::Item(body) => {
                let mut updates = crate::turns::replay_updates(body);
                // Two agent messages (or thoughts) in a row were kept apart by an update
                // of an earlier tool call: written as chunks alone, the second would
                // continue the first. An empty update of the last tool call keeps them
                // apart again.
                let text = matches!(
                    **body,
                    ItemBody::AgentMessage(_) | ItemBody::AgentThought(_)
                )
                .then(|| body.kind());
                if text.is_some()
                    && text == self.last_text
                    && let Some(call) = &self.last_call
                {
                    updates.insert(
                        0,
                        Update::Known(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                            call.clone(),
                            ToolCallUpdateFields::new(),
                        ))),
                    );
                }
                self.last_text = text;
                if let ItemBody::ToolCall(call) = &**body {
                    self.last_call = Some(call.tool_call_id.clone());
                }
                if self.pending.len() + updates.len() > RECORD_BATCH {
                    self.flush(conn)?;
                }
                self.pending.extend(updates);
            }
        }
        Ok(())
    }

    /// Writes the gathered updates, if any.
    pub fn finish(mut self, conn: &Tx<'_>) -> Result<()> {
        self.flush(conn)
    }

    fn flush(&mut self, conn: &Tx<'_>) -> Result<()> {
        if !self.pending.is_empty() {
            super::items::record_batch(conn, &self.session, &self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }
}
