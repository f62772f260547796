//! sessionstore: the backing store of an agent daemon's restorable sessions. See
//! ARCHITECTURE.md for the module map and the invariants each module keeps.

pub mod attachments;
pub mod config;
pub mod db;
pub mod dispatch;
pub mod error;
pub mod focus;
pub mod ids;
pub mod model;
pub mod openai;
pub mod probe;
pub mod projection;
pub mod store;

pub use config::Config;
pub use dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
pub use error::{Error, Result};
pub use ids::{EventSeq, IdError, MessageId, SessionId};
pub use store::Store;
