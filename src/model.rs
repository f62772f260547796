//! The store's records: sessions, messages, references and events, as plain data.
//! Nothing here does IO; the database layer reads and writes these, and the event
//! payloads here are the record that the tables are a projection of.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::attachments::AttachmentUri;
use crate::error::Error;
use crate::ids::{EventSeq, MessageId, SessionId};

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
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    other => Err(Error::UnknownValue {
                        what: $what,
                        value: other.to_owned(),
                        expected: concat!($($text, " "),+),
                    }),
                }
            }
        }
    };
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
}

/// A message's link to one attachment. There is no path here, by design: the path is
/// found by a live read at dispatch time.
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
    },
    SessionRenamed {
        title: String,
    },
    MessageAppended {
        #[serde(flatten)]
        message: AppendedMessage,
    },
    MessageDelivered {
        id: MessageId,
    },
}

impl EventPayload {
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::SessionCreated { .. } => "session_created",
            EventPayload::SessionRenamed { .. } => "session_renamed",
            EventPayload::MessageAppended { .. } => "message_appended",
            EventPayload::MessageDelivered { .. } => "message_delivered",
        }
    }
}

/// A message as its `message_appended` event records it: everything but the session
/// and time, which the event row itself carries.
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub seq: EventSeq,
    pub session_id: SessionId,
    pub session_seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub created_at: String,
}
