//! Work on a database best done with no store open (migrating, encrypting, rekeying):
//! free functions of its `Config`, not `Store` methods.

use crate::config::Config;
use crate::db::{
    self,
    schema::{Backup, MigrationReport},
};
use crate::error::Result;
use crate::store::blocking;

/// How `migrate` runs (default: back up, then apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// With `Backup::Make`, an SQLite database that already has a schema is first
    /// copied to `<db>.v<N>.bak` (`migrate --no-backup`: `Skip`).
    pub backup: Backup,
    /// Only say what would be applied, writing nothing (`migrate --dry-run`).
    pub dry_run: bool,
}

impl Default for Migration {
    fn default() -> Migration {
        Migration {
            backup: Backup::Make,
            dry_run: false,
        }
    }
}

/// Applies pending migrations to the database `config` names, as `Store::open` does,
/// creating an SQLite file if needed and refusing a newer or foreign one unwritten. On
/// PostgreSQL no copy is taken: one transaction applies them all or none.
pub async fn migrate(config: &Config, how: Migration) -> Result<MigrationReport> {
    let config = config.clone();
    if how.dry_run {
        blocking(move || db::migration_plan(&config)).await
    } else {
        blocking(move || db::migrate(&config, how.backup)).await
    }
}

/// The key `change_key` gives an SQLite database (cargo feature `encryption`).
#[cfg(feature = "encryption")]
#[derive(Debug, Clone)]
pub enum NewKey {
    /// Encrypt the plain database with `config.key`.
    Encrypt,
    /// Give the encrypted database (opened with `config.key`) this key instead.
    Rekey(crate::config::DatabaseKey),
}

/// Encrypts the plain SQLite database `config` names with `config.key`, or rekeys an
/// encrypted one, then migrates (feature `encryption`). Encrypting writes a new file
/// that takes its place (no plaintext copy); a `Backup::Make` backup is encrypted with
/// the new key, so the old key opens no copy. Nothing else may hold it (`Error::Busy`).
#[cfg(feature = "encryption")]
pub async fn change_key(config: &Config, key: NewKey, backup: Backup) -> Result<MigrationReport> {
    let config = config.clone();
    match key {
        NewKey::Encrypt => blocking(move || db::encrypt(&config, backup)).await,
        NewKey::Rekey(new) => blocking(move || db::rekey(&config, &new, backup)).await,
    }
}
