//! The command line's pieces beside `main.rs`: a file per command group, output,
//! errors, logs, and the argument parsers they share. No behaviour the library lacks.

mod allocator;
pub mod attachment;
pub mod errors;
pub mod lifecycle;
pub mod logging;
pub mod output;
pub mod paths;
pub mod record;
pub mod send;
pub mod session;
pub mod usage;
pub mod verify;

use sessionstore::{EntryId, IdError, MessageId, SessionId};

/// A session id as the store prints it; upper-case hex is taken too, since a UUID's
/// letters are the same either way.
pub fn parse_session(text: &str) -> Result<SessionId, String> {
    text.to_ascii_lowercase()
        .parse()
        .map_err(|_: IdError| invalid("session", text))
}

/// A message id, bare or as `send --json` printed it, in either case.
pub fn parse_message(text: &str) -> Result<MessageId, String> {
    let bare = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(o)) => match o.get("id") {
            Some(serde_json::Value::String(id)) => id.clone(),
            _ => return Err(format!("{text:?} has no \"id\" string")),
        },
        _ => text.to_owned(),
    };
    bare.to_ascii_lowercase()
        .parse()
        .map_err(|_: IdError| invalid("message", &bare))
}

/// A history entry's id (a message's or a recorded item's), bare or as printed in
/// `{"id": ...}`, in either case.
pub fn parse_entry(text: &str) -> Result<EntryId, String> {
    let message = parse_message(text).map_err(|_| invalid("message or item", text))?;
    Ok(EntryId::from(message))
}

fn invalid(kind: &str, text: &str) -> String {
    format!("invalid {kind} id {text:?}: expected a UUID like 0190b3c2-7d4e-7abc-8def-0123456789ab")
}
