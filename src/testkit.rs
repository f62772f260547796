//! The test hooks (feature `testkit`, for the crate's own tests and benches): kept off
//! `Store`'s own methods, since a daemon has no use for them.

use crate::attachments::ReadObserver;
use crate::config::Config;
use crate::db::group::WriteStats;
use crate::error::Result;
use crate::store::Store;

/// `Store::open`, telling `observer` of every attachment read (tests and the probe
/// count reads this way). The observed store is the same one that writes.
pub async fn open_observing_reads(config: Config, observer: ReadObserver) -> Result<Store> {
    Store::open_observing_reads(config, observer).await
}

/// How `store`'s writer has shared its commits so far: the tests and the benches check
/// that commits are shared. All zero on a read-only store.
pub fn write_stats(store: &Store) -> WriteStats {
    store.write_stats()
}
