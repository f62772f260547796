//! sessionstore: the backing store of an agent daemon's restorable sessions. See
//! ARCHITECTURE.md for the module map and the invariants each module keeps.

//!
//! The public face is what a daemon embedding the store needs: `Store` (which also
//! reaches migrations and `verify`), `Config`, the records, the errors, attachments and
//! the pure conversions. The SQL (`db`), the event projection and the probe's insides
//! stay crate-private; the probe is reached through `run_probe`, built with the
//! default-on `probe` feature (a daemon can leave it, and `tempfile`, out). `oracle`
//! is doc-hidden: what the contracts say, shared by the probe and the tests.

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
pub mod model;
pub mod openai;
mod probe;
pub(crate) mod projection;
pub mod replay;
pub mod store;
pub mod turns;

pub use config::Config;
pub use db::schema::{Backup, MigrationReport};
pub use db::search::Hit as SearchHit;
pub use db::turns::Recorded;
pub use db::verify::VerifyReport;
pub use dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
pub use error::{Error, Result};
pub use ids::{EventSeq, IdError, ItemId, MessageId, SessionId};
#[doc(hidden)]
pub use probe::oracle;
#[cfg(all(feature = "probe", feature = "postgres"))]
pub use probe::run_probe_on_postgres;
#[cfg(feature = "probe")]
pub use probe::{Check, ProbeError, ProbeReport, run_probe};
pub use store::Store;
