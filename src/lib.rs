//! sessionstore: the backing store of an agent daemon's restorable sessions (module
//! map and invariants: ARCHITECTURE.md). A daemon's loop: store a prompt with its
//! files, dispatch it, record the agent's answer, later restore it as a stream.
//!
//! ```
//! use sessionstore::dispatch::{Memo, Mode};
//! use sessionstore::format::{Format, StreamWriter};
//! use sessionstore::record::Values;
//! use sessionstore::restore::Replay;
//! use sessionstore::model::{Delivery, NewSession};
//! use sessionstore::store::{Access, Dispatched, Prompt, PromptBlock, Upload};
//! use sessionstore::{Config, DAEMON_ATTACHMENT_CONTEXT_META_KEY, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let config = Config::in_dir(dir.path()); // sessions.db and attachments/ in one folder
//! let store = Store::open(config.clone()).await?;
//! let session = store.create_session(NewSession::default()).await?;
//!
//! // The user's prompt: text and a file, stored together (or not at all).
//! let prompt = Prompt {
//!     blocks: vec![
//!         PromptBlock::Text { text: "what does this say?".into(), meta: None },
//!         PromptBlock::Upload {
//!             upload: Upload { name: "notes.txt".into(), bytes: b"buy milk".to_vec() },
//!             meta: None,
//!         },
//!     ],
//!     delivery: Delivery::Delivered,
//! };
//! let message = store.send(session.id, prompt).await?;
//!
//! // What the model gets: the file's block carries where it was read, now.
//! let dispatched = store
//!     .dispatch(session.id, Some(message.id), Mode::Strict, Memo::new())
//!     .await
//!     .map(Dispatched::from)?;
//! let block = serde_json::to_value(&dispatched.blocks[1])?;
//! let context = block["_meta"][DAEMON_ATTACHMENT_CONTEXT_META_KEY].as_str().unwrap();
//! assert!(context.contains(&*dir.path().join("attachments").to_string_lossy()));
//!
//! // The agent's answer, as the `update`s of its `session/update`s.
//! store
//!     .record(session.id, Values(vec![serde_json::json!({
//!         "sessionUpdate": "agent_message_chunk",
//!         "content": {"type": "text", "text": "It says: buy milk."}
//!     })]))
//!     .await?;
//! drop(store);
//!
//! // Later, in a fresh process: restore as a stream, each item written as it comes.
//! let store = Store::open_as(config, Access::ReadOnly).await?;
//! let mut items = store.restore(session.id, 64 << 20, Replay::whole()).await?;
//! let mut out = StreamWriter::begin(Vec::new(), Format::AcpUpdates, session.id, "")?;
//! while let Some(item) = items.next().await {
//!     out.item(&item?)?;
//! }
//! let lines = String::from_utf8(out.finish()?)?;
//! // One `session/update` per block: the user's text and file, the agent's answer.
//! assert_eq!(lines.lines().count(), 3);
//! assert!(lines.contains("buy milk"));
//! # Ok(())
//! # }
//! ```
//!
//! The public face is what an embedding daemon needs; the SQL (`db`), the projection
//! and the probe's insides stay crate-private. Features: `acp`, `probe`, `postgres`,
//! `cli` (all default); `testkit` makes the test hooks (`oracle`, `testkit`) public.

#[cfg(feature = "acp")]
pub mod acp;
pub mod attachments;
pub mod config;
pub(crate) mod db;
pub mod dispatch;
pub mod error;
pub mod focus;
pub mod format;
pub mod ids;
pub mod lifecycle;
pub mod maintenance;
pub mod model;
pub mod openai;
pub(crate) mod permissions;
#[cfg(any(feature = "probe", feature = "testkit"))]
mod probe;
pub(crate) mod projection;
pub mod record;
pub mod redact;
pub mod restore;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod turns;

pub use config::Config;
#[cfg(feature = "testkit")]
pub use db::group::WriteStats;
pub use db::items::Recorded;
pub use db::repair::RepairReport;
pub use db::schema::{Backup, MigrationReport};
pub use db::search::Hit as SearchHit;
pub use db::verify::VerifyReport;
pub use dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
pub use error::{Error, Result};
pub use ids::{EntryId, EventSeq, IdError, ItemId, MessageId, SessionId};
#[cfg(feature = "testkit")]
pub use probe::oracle;
#[cfg(all(feature = "probe", feature = "postgres"))]
pub use probe::run_probe_on_postgres;
#[cfg(feature = "probe")]
pub use probe::{Check, ProbeError, ProbeReport, run_probe};
pub use store::{SessionClaim, Store};

/// What protects a store's data beyond `config`'s settings: an SQLite file's
/// encryption, and the warnings about database files more exposed than the store makes.
pub mod privacy {
    pub use crate::db::cipher::{Encryption, encryption_of};
    pub use crate::db::schema::KeyChange;
    pub use crate::db::verify::{Exposure, ExposureKind, exposures, key_file_exposure};
}
