//! Session cursors (ACP schema 1.20's `unstable_session_cursors`, written here as JSON:
//! the schema crate in use is 1.17): the positions a client can fork at.
//!
//! A client that announces `clientCapabilities.session.cursors` gets one
//! `cursor_update` (position `after`) per agent message, thought and tool call, and in
//! a replay per user message, right after the update that first names it: ACP has no
//! end of a message, and an anchor `after` a message covers it however long it grows.
//! An agent chunk with no `messageId` is relayed (and recorded) with one the proxy
//! gives its message, the one change made to a relayed update. A cursor's id names
//! its entry (`agent_message:<messageId>`, `tool_call:<toolCallId>`, ...), so a fork
//! finds it across restarts. The agent's own `cursor_update`s are never relayed, nor
//! the capability passed on: the store owns forks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::rpc::Message;
use super::{Failure, Proxy, lock};
use crate::ids::{ItemId, MessageId, SessionId};
use crate::lifecycle::MAX_PAGE;
use crate::lifecycle::fork::Forked;
use crate::model::{Delivery, ItemBody, Role};
use crate::restore::ReplayItem;
use crate::store::PageQuery;

/// The session update a cursor is announced with.
const CURSOR_UPDATE: &str = "cursor_update";

/// Whether the client announced cursors, and per session the agent message or thought
/// the next chunk continues (as the store cuts them: the same kind and `messageId` or
/// none, with only tool call updates between).
#[derive(Default)]
pub(crate) struct Cursors {
    announced: AtomicBool,
    tails: Mutex<HashMap<SessionId, Tail>>,
}

struct Tail {
    thought: bool,
    message_id: String,
}

/// What becomes of an update from the agent.
pub(crate) enum Relay {
    /// Not relayed (nor recorded): the agent's own `cursor_update`.
    Drop,
    /// Relayed (as patched), then the cursor, if it announces one.
    Pass(Option<Message>),
}

/// What a cursor anchors, by the anchor's `type` and the id of the entry.
struct Anchor<'a> {
    kind: &'a str,
    id: &'a str,
}

impl Anchor<'_> {
    fn cursor_id(&self) -> String {
        format!("{}:{}", self.kind, self.id)
    }

    /// The `session/update` that announces this cursor to the client.
    fn notification(&self, session: SessionId) -> Message {
        let key = if self.kind == "tool_call" {
            "toolCallId"
        } else {
            "messageId"
        };
        Message::notification(
            crate::format::SESSION_UPDATE,
            json!({
                "sessionId": session.to_string(),
                "update": {
                    "sessionUpdate": CURSOR_UPDATE,
                    "cursorId": self.cursor_id(),
                    "capabilities": {"fork": {}},
                    "anchor": {"type": self.kind, key: self.id, "position": "after"},
                },
            }),
        )
    }

    fn parse(cursor: &str) -> Option<Anchor<'_>> {
        let (kind, id) = cursor.split_once(':')?;
        matches!(
            kind,
            "user_message" | "agent_message" | "agent_thought" | "tool_call"
        )
        .then_some(Anchor { kind, id })
        .filter(|a| !a.id.is_empty())
    }
}

impl Cursors {
    pub fn on(&self) -> bool {
        self.announced.load(Ordering::Acquire)
    }

    /// Remembers whether the client's `initialize` params announce cursors, and takes
    /// the capability out (with `session`, if left empty) before they go to the agent.
    pub fn take_capability(&self, params: &mut Value) {
        let Some(caps) = params
            .get_mut("clientCapabilities")
            .and_then(Value::as_object_mut)
        else {
            self.announced.store(false, Ordering::Release);
            return;
        };
        let announced = match caps.get_mut("session").and_then(Value::as_object_mut) {
            Some(session) => {
                let cursors = session.remove("cursors");
                if session.is_empty() && cursors.is_some() {
                    caps.remove("session");
                }
                cursors.is_some_and(|c| !c.is_null())
            }
            None => false,
        };
        self.announced.store(announced, Ordering::Release);
    }

    /// A turn begins: no agent message goes on past its prompt.
    pub fn turn_begins(&self, session: SessionId) {
        if self.on() {
            lock(&self.tails).remove(&session);
        }
    }

    /// An update from the agent, before it is relayed: the agent's own cursors are
    /// dropped; with cursors on, a chunk is given its message's `messageId`, and the
    /// first update of each entry brings its cursor.
    pub fn relayed(&self, session: SessionId, message: &mut Message) -> Relay {
        let Some(update) = message
            .params_mut()
            .and_then(|p| p.get_mut("update"))
            .and_then(Value::as_object_mut)
        else {
            return Relay::Pass(None);
        };
        let kind = update
            .get("sessionUpdate")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == CURSOR_UPDATE {
            return Relay::Drop;
        }
        if !self.on() {
            return Relay::Pass(None);
        }
        let mut tails = lock(&self.tails);
        match kind {
            "agent_message_chunk" | "agent_thought_chunk" => {
                let thought = kind == "agent_thought_chunk";
                let kind = if thought {
                    "agent_thought"
                } else {
                    "agent_message"
                };
                let given = update.get("messageId").and_then(Value::as_str);
                if let Some(tail) = tails.get(&session)
                    && tail.thought == thought
                    && given.is_none_or(|g| g == tail.message_id)
                {
                    if given.is_none() {
                        update.insert("messageId".to_owned(), tail.message_id.clone().into());
                    }
                    return Relay::Pass(None);
                }
                let message_id = match given {
                    Some(given) => given.to_owned(),
                    None => {
                        let id = ItemId::new().to_string();
                        update.insert("messageId".to_owned(), id.clone().into());
                        id
                    }
                };
                let cursor = Anchor {
                    kind,
                    id: &message_id,
                }
                .notification(session);
                tails.insert(
                    session,
                    Tail {
                        thought,
                        message_id,
                    },
                );
                Relay::Pass(Some(cursor))
            }
            "tool_call" => {
                tails.remove(&session);
                let cursor = update.get("toolCallId").and_then(Value::as_str).map(|id| {
                    Anchor {
                        kind: "tool_call",
                        id,
                    }
                    .notification(session)
                });
                Relay::Pass(cursor)
            }
            // Neither history the store keeps nor an entry of it: the message goes on.
            "tool_call_update" | "user_message_chunk" | "usage_update" | "notice" | "" => {
                Relay::Pass(None)
            }
            // Any other kind is an entry of its own, after which a chunk starts anew.
            _ => {
                tails.remove(&session);
                Relay::Pass(None)
            }
        }
    }
}

/// One entry of a replay with cursors on, before it is written: an agent message
/// recorded with no `messageId` is replayed under its item's id. The cursor to follow
/// the entry, if it has one.
pub(crate) fn replayed(session: SessionId, item: &mut ReplayItem) -> Option<Message> {
    let (kind, id) = match item {
        ReplayItem::Message(m) => {
            let kind = match m.message.role {
                _ if m.parts.is_empty() => return None,
                Role::User => "user_message",
                Role::Assistant => "agent_message",
                Role::System => return None,
            };
            (kind, m.message.id.to_string())
        }
        ReplayItem::Recorded(item) => {
            let item_id = item.id;
            match &mut item.body {
                ItemBody::AgentMessage(text) | ItemBody::AgentThought(text) => {
                    if text.content.is_empty() {
                        return None;
                    }
                    let id = text
                        .message_id
                        .get_or_insert_with(|| item_id.to_string().into())
                        .to_string();
                    let kind = match item.body {
                        ItemBody::AgentThought(_) => "agent_thought",
                        _ => "agent_message",
                    };
                    (kind, id)
                }
                ItemBody::ToolCall(call) => ("tool_call", call.tool_call_id.to_string()),
                _ => return None,
            }
        }
    };
    Some(Anchor { kind, id: &id }.notification(session))
}

impl Proxy {
    /// `session/fork` of `origin` up to and including the entry `cursor` names; a
    /// cursor that names no entry of the session is invalid params.
    pub(super) async fn fork_at_cursor(
        &self,
        origin: SessionId,
        cursor: &Value,
    ) -> Result<Forked, Failure> {
        let Value::String(cursor) = cursor else {
            return Err(Failure::invalid_params(format!(
                "cursorId must be a string, not {cursor}"
            )));
        };
        self.store.session(origin).await?;
        let unknown = || {
            Failure::invalid_params(format!(
                "session {origin} has no cursor {cursor:?} (a cursorId from a cursor_update of it)"
            ))
        };
        let anchor = Anchor::parse(cursor).ok_or_else(unknown)?;
        // A stored message: a user message, or an assistant message of an imported
        // or restored history.
        if matches!(anchor.kind, "user_message" | "agent_message")
            && let Ok(id) = anchor.id.parse::<MessageId>()
            && let Ok(m) = self.store.message(id).await
        {
            let role = if anchor.kind == "user_message" {
                Role::User
            } else {
                Role::Assistant
            };
            if m.session_id != origin || m.role != role || m.state == Delivery::Queued {
                return Err(unknown());
            }
            return Ok(self.store.fork_session(origin, Some(id), None).await?);
        }
        if anchor.kind == "user_message" {
            return Err(unknown());
        }
        let named = |body: &ItemBody, item: ItemId| match (anchor.kind, body) {
            ("agent_message", ItemBody::AgentMessage(t))
            | ("agent_thought", ItemBody::AgentThought(t)) => match &t.message_id {
                Some(id) => &*id.0 == anchor.id,
                None => item.to_string() == anchor.id,
            },
            ("tool_call", ItemBody::ToolCall(call)) => &*call.tool_call_id.0 == anchor.id,
            _ => false,
        };
        // The last entry of that name (an agent may reuse an id in two runs), read a
        // page at a time.
        let mut found = None;
        let mut query = PageQuery::first(MAX_PAGE);
        loop {
            let page = self.store.items(origin, query).await?;
            if let Some(last) = page.entries.into_iter().rfind(|i| named(&i.body, i.id)) {
                found = Some(last);
            }
            match page.next {
                Some(next) => query = PageQuery::after(Some(next), MAX_PAGE),
                None => break,
            }
        }
        let item = found.as_ref().ok_or_else(unknown)?;
        Ok(self.store.fork_session_at_item(origin, item, None).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(session: SessionId, update: Value) -> Message {
        Message::notification(
            "session/update",
            json!({"sessionId": session.to_string(), "update": update}),
        )
    }

    fn cursor_of(relay: Relay) -> Option<Value> {
        match relay {
            Relay::Drop => panic!("dropped"),
            Relay::Pass(c) => c.map(|m| m.params().unwrap()["update"].clone()),
        }
    }

    #[test]
    fn the_capability_is_remembered_and_taken_out() {
        let cursors = Cursors::default();
        let mut params = json!({"clientCapabilities": {"fs": {}, "session": {"cursors": {}}}});
        cursors.take_capability(&mut params);
        assert!(cursors.on());
        assert_eq!(params, json!({"clientCapabilities": {"fs": {}}}));
        let mut params =
            json!({"clientCapabilities": {"session": {"cursors": null, "notices": {}}}});
        cursors.take_capability(&mut params);
        assert!(!cursors.on());
        assert_eq!(
            params,
            json!({"clientCapabilities": {"session": {"notices": {}}}})
        );
        let mut params = json!({"protocolVersion": 1});
        cursors.take_capability(&mut params);
        assert!(!cursors.on());
        assert_eq!(params, json!({"protocolVersion": 1}));
    }

    /// One cursor per message, thought and tool call, as the store cuts them: a chunk
    /// without an id continues the message before it (and is given its id); another
    /// id, another kind or another entry starts a new one; updates of tool calls do not.
    #[test]
    fn one_cursor_per_entry_as_the_store_cuts_them() {
        let cursors = Cursors::default();
        cursors.take_capability(&mut json!({"clientCapabilities": {"session": {"cursors": {}}}}));
        let s = SessionId::new();
        let chunk = |kind: &str, id: Option<&str>| {
            let mut u = json!({"sessionUpdate": kind, "content": {"type": "text", "text": "x"}});
            if let Some(id) = id {
                u["messageId"] = id.into();
            }
            update(s, u)
        };
        let mut first = chunk("agent_message_chunk", None);
        let c = cursor_of(cursors.relayed(s, &mut first)).expect("a cursor");
        let given = first.params().unwrap()["update"]["messageId"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            c,
            json!({"sessionUpdate": "cursor_update", "cursorId": format!("agent_message:{given}"),
                "capabilities": {"fork": {}},
                "anchor": {"type": "agent_message", "messageId": given, "position": "after"}})
        );
        let mut second = chunk("agent_message_chunk", None);
        assert_eq!(cursor_of(cursors.relayed(s, &mut second)), None);
        assert_eq!(second.params().unwrap()["update"]["messageId"], given);
        let mut done = update(
            s,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c0"}),
        );
        assert_eq!(cursor_of(cursors.relayed(s, &mut done)), None);
        assert_eq!(
            cursor_of(cursors.relayed(s, &mut chunk("agent_message_chunk", Some(&given)))),
            None
        );
        let thought = cursor_of(cursors.relayed(s, &mut chunk("agent_thought_chunk", None)));
        assert_eq!(thought.unwrap()["anchor"]["type"], "agent_thought");
        let named = cursor_of(cursors.relayed(s, &mut chunk("agent_message_chunk", Some("m2"))));
        assert_eq!(named.unwrap()["cursorId"], "agent_message:m2");
        let other = cursor_of(cursors.relayed(s, &mut chunk("agent_message_chunk", Some("m3"))));
        assert_eq!(other.unwrap()["cursorId"], "agent_message:m3");
        let mut call = update(s, json!({"sessionUpdate": "tool_call", "toolCallId": "c1"}));
        let call = cursor_of(cursors.relayed(s, &mut call)).unwrap();
        assert_eq!(
            call["anchor"],
            json!({"type": "tool_call", "toolCallId": "c1", "position": "after"})
        );
        assert!(
            cursor_of(cursors.relayed(s, &mut chunk("agent_message_chunk", Some("m3")))).is_some()
        );
        let mut own = update(
            s,
            json!({"sessionUpdate": "cursor_update", "cursorId": "x"}),
        );
        assert!(matches!(cursors.relayed(s, &mut own), Relay::Drop));
    }

    #[test]
    fn without_the_capability_nothing_changes_but_the_agents_cursors_dropped() {
        let cursors = Cursors::default();
        let s = SessionId::new();
        let mut chunk = update(
            s,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}),
        );
        let before = chunk.clone();
        assert_eq!(cursor_of(cursors.relayed(s, &mut chunk)), None);
        assert_eq!(chunk, before);
        let mut own = update(
            s,
            json!({"sessionUpdate": "cursor_update", "cursorId": "x"}),
        );
        assert!(matches!(cursors.relayed(s, &mut own), Relay::Drop));
    }

    #[test]
    fn cursor_ids_name_their_anchor() {
        let a = Anchor::parse("tool_call:call:1").unwrap();
        assert_eq!((a.kind, a.id), ("tool_call", "call:1"));
        assert_eq!(a.cursor_id(), "tool_call:call:1");
        for bad in ["", "tool_call", "tool_call:", "plan:p", "nonsense"] {
            assert!(Anchor::parse(bad).is_none(), "{bad}");
        }
    }
}
