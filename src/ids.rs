//! Identifier newtypes; parsing here is the only place a raw id string becomes typed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Position of an event in the global, append-only event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventSeq(pub i64);

/// Why an id string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} id {input:?}: expected a hyphenated lower-case UUID")]
pub struct IdError {
    pub kind: &'static str,
    pub input: String,
}

/// The UUID `s` spells if it is in the one canonical spelling (hyphenated lower-case:
/// what `Display` prints), checked without encoding it back (restore parses thousands
/// of ids): at 36 bytes the parser takes only the hyphenated form, in either case.
fn canonical_uuid(s: &str) -> Option<Uuid> {
    if s.len() != uuid::fmt::Hyphenated::LENGTH || s.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    Uuid::try_parse(s).ok()
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $ty:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $ty(Uuid);

        impl $ty {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $ty {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl FromStr for $ty {
            type Err = IdError;

            /// Only the canonical hyphenated form: an id has exactly one spelling.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let err = || IdError {
                    kind: $kind,
                    input: s.to_owned(),
                };
                canonical_uuid(s).map(Self).ok_or_else(err)
            }
        }
    };
}

uuid_id!(
    /// A session's id: a UUID v7, stored and printed as hyphenated lowercase text.
    SessionId, "session"
);
uuid_id!(
    /// A message's id: a UUID v7, unique across sessions so `--message` needs no session.
    MessageId, "message"
);
uuid_id!(
    /// A recorded turn item's id: a UUID v7, unique across sessions.
    ItemId, "item"
);
uuid_id!(
    /// A turn's id (one prompt's round with the agent): a UUID v7.
    TurnId, "turn"
);
uuid_id!(
    /// A history entry's id, a message's or an item's (unique, so the id alone says which).
    EntryId, "history entry"
);

impl From<MessageId> for EntryId {
    fn from(id: MessageId) -> EntryId {
        EntryId(id.0)
    }
}

impl From<ItemId> for EntryId {
    fn from(id: ItemId) -> EntryId {
        EntryId(id.0)
    }
}

impl fmt::Display for EventSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_only_in_canonical_form() {
        let id = SessionId::new();
        assert_eq!(id.to_string().parse::<SessionId>().unwrap(), id);
        let upper = id.to_string().to_uppercase();
        assert!(upper.parse::<SessionId>().is_err());
        assert!("../etc".parse::<SessionId>().is_err());
        let simple = id.as_uuid().simple().to_string();
        assert!(simple.parse::<SessionId>().is_err());
        let braced = id.as_uuid().braced().to_string();
        assert!(braced.parse::<SessionId>().is_err());
        // The right length and characters, a hyphen one place off.
        let text = id.to_string();
        let moved = format!("{}{}-{}", &text[..8], &text[9..10], &text[10..]);
        assert!(moved.parse::<SessionId>().is_err());
        let max = Uuid::max().hyphenated().to_string();
        assert_eq!(max.parse::<SessionId>().unwrap().as_uuid(), Uuid::max());
        // One upper-case letter, the last, is enough to refuse it.
        assert!(format!("{}F", &max[..35]).parse::<SessionId>().is_err());
    }
}
