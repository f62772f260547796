//! The store's records as plain data; the tables are a projection of the event payloads.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::attachments::AttachmentUri;
use agent_client_protocol_schema::v1::{self as acp, ContentBlock, Plan, SessionUpdate, ToolCall};

use crate::ids::{EventSeq, ItemId, MessageId, SessionId, TurnId};

macro_rules! text_enum {
    ($(#[$doc:meta])* $ty:ident, $what:literal { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $ty { $($variant),+ }

        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    other => Err(UnknownValue {
                        what: $what,
                        value: other.to_owned(),
                        expected: concat!($($text, " "),+),
                    }),
                }
            }
        }
    };
}

/// A text that names none of the values a record's field may take, with those it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}: expected one of {expected}")]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

text_enum!(
    /// Where a session's tools run. Only `local` tools share the daemon's filesystem.
    ToolsHost, "tools host" { Local => "local", Ssh => "ssh", Managed => "managed" }
);
text_enum!(
    /// Who spoke a message.
    Role, "role" { User => "user", Assistant => "assistant", System => "system" }
);
text_enum!(
    /// Who gave a session's title: an `explicit` one stays until the next explicit
    /// one; the `agent`'s or the first user `message`'s gives way to any later title.
    TitleSource, "title source" { Explicit => "explicit", Agent => "agent", Message => "message" }
);

impl TitleSource {
    /// Whether a title from `self` replaces one from `current` (`None`: no title, or
    /// one older than title sources, kept as if explicit).
    pub fn replaces(self, current: Option<TitleSource>, has_title: bool) -> bool {
        match self {
            TitleSource::Explicit => true,
            TitleSource::Agent | TitleSource::Message => {
                !has_title || matches!(current, Some(TitleSource::Agent | TitleSource::Message))
            }
        }
    }
}

text_enum!(
    /// Which sessions a listing takes by archive state (ACP's `SessionArchiveFilter`).
    ArchiveFilter, "archive filter" { Exclude => "exclude", Include => "include", Only => "only" }
);

// `text_enum!` takes no attribute on a variant, so no `#[default]` either.
#[allow(clippy::derivable_impls)]
impl Default for ArchiveFilter {
    fn default() -> ArchiveFilter {
        ArchiveFilter::Exclude
    }
}

text_enum!(
    /// `queued` is a mid-turn message waiting for the next drain.
    Delivery, "delivery state" { Delivered => "delivered", Queued => "queued" }
);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: SessionId,
    pub title: Option<String>,
    pub tools_host: ToolsHost,
    pub created_at: String,
    pub updated_at: String,
    /// The client's `cwd`, kept as given: not a path of the store's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The agent a proxy ran the session with, and the agent's own id for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentBinding>,
    /// Who gave the title in force (`None`: no title, or one written before V16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_source: Option<TitleSource>,
    /// Left out of the default listing; kept whole.
    #[serde(default)]
    pub archived: bool,
}

/// What finds a session's agent side again: the agent's program name and its own id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentBinding {
    pub agent: String,
    pub session: String,
}

/// A session as a caller creates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// A blank title is no title: the first user message then names the session.
    pub title: Option<String>,
    pub tools_host: ToolsHost,
    /// The client's working directory, kept as given (see [`Session::cwd`]).
    pub cwd: Option<String>,
    pub agent: Option<AgentBinding>,
}

impl Default for NewSession {
    /// An untitled session whose tools run locally, opened by no client.
    fn default() -> NewSession {
        NewSession {
            title: None,
            tools_host: ToolsHost::Local,
            cwd: None,
            agent: None,
        }
    }
}

/// One session as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub id: SessionId,
    pub title: Option<String>,
    pub tools_host: ToolsHost,
    pub created_at: String,
    pub updated_at: String,
    /// Messages of every role and state.
    pub messages: u64,
    /// The recorded sizes of the distinct attachments referred to, summed (no file read).
    pub attachment_bytes: u64,
    /// The working directory its client gave, for a session an ACP client opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub archived: bool,
}

/// A message's link to one attachment. No path, by design: dispatch reads it live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub ordinal: u32,
    pub uri: AttachmentUri,
    pub stored_name: String,
    pub mime_type: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: MessageId,
    pub session_id: SessionId,
    pub seq: i64,
    pub role: Role,
    /// What the user typed; shown in the UI and used for the title.
    pub display_text: String,
    /// The custom-command expansion the model gets instead of the display text.
    pub model_text: Option<String>,
    pub transcript: Option<String>,
    pub state: Delivery,
    pub created_at: String,
    pub refs: Vec<Reference>,
    /// An ACP prompt's blocks in the order sent; `None` for a `send`, whose order is
    /// text, transcript, references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<MessageBlock>>,
}

/// One block of a stored prompt. Attachments are kept as references (read again at
/// each dispatch); client blocks the store does not take apart are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MessageBlock {
    /// Text, with the block's own `_meta`.
    Text {
        text: String,
        #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
        meta: Option<acp::Meta>,
    },
    /// The reference of this ordinal, with the block's own `_meta`.
    Reference {
        ordinal: u32,
        #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
        meta: Option<acp::Meta>,
    },
    /// A client block kept as the JSON it came as, unknown fields included.
    Verbatim { block: serde_json::Value },
}

impl Message {
    /// The text the model gets: the expansion when there is one, else what was typed.
    pub fn model_text(&self) -> &str {
        self.model_text.as_deref().unwrap_or(&self.display_text)
    }
}

/// A message as the caller hands it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub role: Role,
    pub display_text: String,
    pub model_text: Option<String>,
    pub transcript: Option<String>,
    pub refs: Vec<NewReference>,
    /// The prompt's block order (see [`Message::content`]).
    pub content: Option<Vec<MessageBlock>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReference {
    pub uri: AttachmentUri,
    pub stored_name: String,
    pub mime_type: String,
    pub size: u64,
}

/// What an event records. The tables can be rebuilt from these alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventPayload {
    SessionCreated {
        title: Option<String>,
        #[serde(rename = "toolsHost")]
        tools_host: ToolsHost,
        /// Where a fork came from; absent for a session created afresh.
        #[serde(
            rename = "forkedFrom",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        forked_from: Option<ForkedFrom>,
        /// The client's working directory, for a session a client opened.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<AgentBinding>,
        /// Who gave `title`; absent in events written before V16.
        #[serde(
            rename = "titleSource",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        title_source: Option<TitleSource>,
    },
    /// A proxy started a new agent session for this session.
    AgentBound {
        agent: AgentBinding,
    },
    /// A turn began at `seq` (its first message's place), delivering `messages`.
    TurnStarted {
        id: TurnId,
        seq: i64,
        messages: Vec<MessageId>,
    },
    /// A turn ended: the agent answered with a stop reason, or the turn failed.
    TurnEnded {
        id: TurnId,
        #[serde(flatten)]
        end: TurnEnd,
        /// The `usage` the agent's answer reported; absent if none, or in older events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<TurnUsage>,
    },
    /// A client setting the agent took: its params less the session id.
    SettingRecorded {
        #[serde(flatten)]
        setting: Setting,
    },
    /// A title, from `source` (absent before V16); one that does not replace the title
    /// in force ([`TitleSource::replaces`]) changes nothing.
    SessionRenamed {
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<TitleSource>,
    },
    /// The session is archived: kept whole, left out of the default listing.
    SessionArchived {},
    /// The session is back in the default listing.
    SessionUnarchived {},
    MessageAppended {
        #[serde(flatten)]
        message: AppendedMessage,
    },
    MessageDelivered {
        id: MessageId,
    },
    /// A batch of ACP session updates as received, and the items it created in order.
    /// Updates merged into an earlier item name none: `turns::apply` finds them.
    TurnRecorded {
        updates: Vec<serde_json::Value>,
        items: Vec<CreatedItem>,
    },
    /// `sessionstore redact` rewrote this session: how many secrets of each kind went,
    /// never a value. It changes no row but the session's last change.
    SessionRedacted {
        redacted: std::collections::BTreeMap<String, u64>,
    },
}

/// The session and message a fork was cut at (`None`: no delivered message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    pub session: SessionId,
    pub message: Option<MessageId>,
}

/// An item a `turn_recorded` event created: the id and seq it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedItem {
    pub id: ItemId,
    pub seq: i64,
}

impl EventPayload {
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::SessionCreated { .. } => "session_created",
            EventPayload::SessionRenamed { .. } => "session_renamed",
            EventPayload::SessionArchived { .. } => "session_archived",
            EventPayload::SessionUnarchived { .. } => "session_unarchived",
            EventPayload::MessageAppended { .. } => "message_appended",
            EventPayload::MessageDelivered { .. } => "message_delivered",
            EventPayload::TurnRecorded { .. } => "turn_recorded",
            EventPayload::AgentBound { .. } => "agent_bound",
            EventPayload::TurnStarted { .. } => "turn_started",
            EventPayload::TurnEnded { .. } => "turn_ended",
            EventPayload::SettingRecorded { .. } => "setting_recorded",
            EventPayload::SessionRedacted { .. } => "session_redacted",
        }
    }
}

/// A message as its `message_appended` event records it (less session and time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppendedMessage {
    pub id: MessageId,
    pub seq: i64,
    pub role: Role,
    pub display_text: String,
    pub model_text: Option<String>,
    pub transcript: Option<String>,
    pub state: Delivery,
    pub refs: Vec<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<MessageBlock>>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TurnEnd {
    /// The agent's `stopReason` (`end_turn`, `cancelled`, …), as it said it.
    Stopped {
        #[serde(rename = "stopReason")]
        stop_reason: String,
    },
    /// The turn failed: the agent answered with an error, or went away.
    Failed { reason: String },
}

/// A turn: where it began, the messages it delivered, how it ended. One with no end
/// was interrupted, or is running now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub id: TurnId,
    pub session_id: SessionId,
    pub seq: i64,
    pub messages: Vec<MessageId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<TurnEnd>,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// The tokens the agent reported for the turn as it ended, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<TurnUsage>,
}

impl Turn {
    /// How the turn stands, in one word: `ended` (with `end_turn`), `cancelled`, `failed`,
    /// another stop reason as the agent gave it, or `interrupted` (no end recorded).
    pub fn state(&self) -> &str {
        match &self.end {
            None => "interrupted",
            Some(TurnEnd::Failed { .. }) => "failed",
            Some(TurnEnd::Stopped { stop_reason }) if stop_reason == "end_turn" => "ended",
            Some(TurnEnd::Stopped { stop_reason }) => stop_reason,
        }
    }
}

/// A client setting, the latest of its kind: `key` is the config option's id for
/// `session/set_config_option` (else empty), `params` lack the session id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub method: String,
    #[serde(default)]
    pub key: String,
    pub params: serde_json::Value,
}

/// One entry of the event log. Callers get the payload as a `Value`; restore decodes
/// its text straight into an [`EventPayload`] (a `Value` first cost more than the check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event<P = serde_json::Value> {
    pub seq: EventSeq,
    pub session_id: SessionId,
    pub session_seq: i64,
    pub kind: String,
    pub payload: P,
    pub created_at: String,
}

/// A recorded part of a turn; `seq` is shared with messages: one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: ItemId,
    pub session_id: SessionId,
    pub seq: i64,
    pub body: ItemBody,
    pub created_at: String,
    /// When a later update last changed it (a tool-call update, a continued chunk).
    pub updated_at: String,
}

/// What an item holds, as the agent sent it (serialized with the ACP schema types).
#[derive(Debug, Clone, PartialEq)]
pub enum ItemBody {
    /// Consecutive `agent_message_chunk`s, coalesced.
    AgentMessage(AgentText),
    /// Consecutive `agent_thought_chunk`s, coalesced.
    AgentThought(AgentText),
    /// A `tool_call` with every `tool_call_update` for it merged in.
    ToolCall(ToolCall),
    Plan(Plan),
    /// A session-level update (`current_mode_update`, …), stored as given.
    Session(SessionUpdate),
    /// An update of a kind this store does not know, kept and replayed as it came.
    Opaque(serde_json::Value),
}

/// A coalesced agent message or thought: adjacent text joined into one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentText {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<acp::MessageId>,
    pub content: Vec<ContentBlock>,
}

/// `T` read from a JSON object only: serde's derived read also takes an array of the
/// fields, which the ACP types this stands in for refuse.
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Fields(std::marker::PhantomData))
            .map(Object)
    }
}

/// A plain text content block read directly (serde reads a tagged `ContentBlock`
/// through a buffer). Any other field makes it refuse, so where it reads,
/// `ContentBlock`'s read gives the same block; `type` is a string, as an enum would
/// also take `{"text": null}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlainText<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    text: String,
}

impl PlainText<'_> {
    /// The block, or `None` when its type is not `text`.
    pub(crate) fn into_block(self) -> Option<ContentBlock> {
        (self.kind == "text").then(|| ContentBlock::Text(acp::TextContent::new(self.text)))
    }
}

/// An [`AgentText`] body of [`PlainText`] blocks only, read directly.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PlainAgentText<'a> {
    #[serde(default)]
    message_id: Option<String>,
    #[serde(borrow)]
    content: Vec<Object<PlainText<'a>>>,
}

/// Reads a JSON array of content blocks: plain text only directly, anything else
/// (errors too) through `ContentBlock`'s own read, which agrees where both read.
pub(crate) fn content_blocks(json: &str) -> serde_json::Result<Vec<ContentBlock>> {
    if let Ok(plain) = serde_json::from_str::<Vec<Object<PlainText>>>(json)
        && let Some(blocks) = plain
            .into_iter()
            .map(|Object(block)| block.into_block())
            .collect::<Option<Vec<_>>>()
    {
        return Ok(blocks);
    }
    serde_json::from_str(json)
}

impl AgentText {
    /// Reads a body as the `agent_message` and `agent_thought` columns hold it.
    fn from_json(body: &str) -> serde_json::Result<AgentText> {
        if let Ok(Object(plain)) = serde_json::from_str::<Object<PlainAgentText>>(body)
            && let Some(content) = plain
                .content
                .into_iter()
                .map(|Object(block)| block.into_block())
                .collect::<Option<Vec<_>>>()
        {
            return Ok(AgentText {
                message_id: plain.message_id.map(acp::MessageId::from),
                content,
            });
        }
        serde_json::from_str(body)
    }
}

impl ItemBody {
    /// The `kind` column: the item's own name, or the session update's tag.
    pub fn kind(&self) -> &'static str {
        match self {
            ItemBody::AgentMessage(_) => "agent_message",
            ItemBody::AgentThought(_) => "agent_thought",
            ItemBody::ToolCall(_) => "tool_call",
            ItemBody::Plan(_) => "plan",
            ItemBody::Session(SessionUpdate::AvailableCommandsUpdate(_)) => {
                "available_commands_update"
            }
            ItemBody::Session(SessionUpdate::CurrentModeUpdate(_)) => "current_mode_update",
            ItemBody::Session(SessionUpdate::SessionInfoUpdate(_)) => "session_info_update",
            ItemBody::Session(SessionUpdate::ConfigOptionUpdate(_)) => "config_option_update",
            ItemBody::Session(_) => "session_update",
            ItemBody::Opaque(_) => "opaque",
        }
    }

    /// The `body` column: the ACP JSON of what is kept.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&BodyJson(self)).expect("ACP schema values always serialize")
    }

    /// Reads a row back; an `Err` names a kind or body this store could not have written.
    pub fn from_json(kind: &str, body: &str) -> Result<ItemBody, String> {
        let bad = |e: serde_json::Error| format!("{kind} body does not parse: {e}");
        let item = match kind {
            "agent_message" => ItemBody::AgentMessage(AgentText::from_json(body).map_err(bad)?),
            "agent_thought" => ItemBody::AgentThought(AgentText::from_json(body).map_err(bad)?),
            "tool_call" => ItemBody::ToolCall(serde_json::from_str(body).map_err(bad)?),
            "plan" => ItemBody::Plan(serde_json::from_str(body).map_err(bad)?),
            "opaque" => ItemBody::Opaque(serde_json::from_str(body).map_err(bad)?),
            _ => ItemBody::Session(serde_json::from_str(body).map_err(bad)?),
        };
        if item.kind() != kind {
            return Err(format!("a {kind} row holds a {} body", item.kind()));
        }
        Ok(item)
    }
}

/// An item's `body` column: the ACP value it keeps, as that type serializes.
struct BodyJson<'a>(&'a ItemBody);

impl Serialize for BodyJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            ItemBody::AgentMessage(t) | ItemBody::AgentThought(t) => t.serialize(s),
            ItemBody::ToolCall(c) => c.serialize(s),
            ItemBody::Plan(p) => p.serialize(s),
            ItemBody::Session(u) => u.serialize(s),
            ItemBody::Opaque(v) => v.serialize(s),
        }
    }
}

mod problem;
pub use problem::{Problem, ProblemKind};
mod usage;
pub use usage::{
    Context, Cost, SessionFigures, SessionUsage, TokenSums, TurnUsage, UsageReport, UsageTotal,
};

#[cfg(test)]
mod tests;
