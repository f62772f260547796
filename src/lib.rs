//! sessionstore: the backing store of an agent daemon's restorable sessions.

pub mod attachments;
pub mod ids;

pub use ids::{EventSeq, IdError, MessageId, SessionId};
