//! sessionstore: the backing store of an agent daemon's restorable sessions. See
//! ARCHITECTURE.md for the module map and the invariants each module keeps.

//!
//! The public face is what a daemon embedding the store needs: `Store` (which also
//! reaches migrations and `verify`), `Config`, the records, the errors, attachments and
//! the pure conversions. The SQL (`db`), the event projection and the probe's insides
//! stay crate-private. Cargo features carry what a daemon may not want: `acp` (the
//! ACP front, on the SDK), `probe` (`run_probe`, and `tempfile`), `postgres`, and the
//! command line's own `cli`; all are on by default. `testkit`, for the crate's own
//! tests, makes the test hooks public: `oracle` (what the contracts say, shared by the
//! probe and the tests) and `Store::open_with_read_observer`.

#[cfg(feature = "acp")]
pub mod acp;
pub mod attachments;
pub mod config;
pub(crate) mod db;
pub mod dispatch;
pub mod error;
pub mod focus;
pub mod format;
pub mod history;
pub mod ids;
pub mod lifecycle;
pub mod model;
pub mod openai;
#[cfg(any(feature = "probe", feature = "testkit"))]
mod probe;
pub(crate) mod projection;
pub mod replay;
pub mod store;
pub mod turns;

pub use config::Config;
pub use db::group::WriteStats;
pub use db::schema::{Backup, MigrationReport};
pub use db::search::Hit as SearchHit;
pub use db::turns::Recorded;
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
pub use store::Store;
