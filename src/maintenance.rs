//! Work on a store's database that needs no open store, and is best done with none
//! open: bringing its schema up to date, and encrypting or rekeying it. Free functions
//! of the `Config` that names the database, not `Store` methods, since there is no
//! `Store` to call them on (and `change_key` refuses a database anything holds open).

use crate::config::Config;
use crate::db::{
    self,
    schema::{Backup, MigrationReport},
};
use crate::error::Result;
use crate::store::blocking;

/// How `migrate` runs; by default it applies the migrations, backing the database up
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// With `Backup::Make`, an SQLite database that already has a schema is first
    /// copied to `<db>.v<N>.bak` (`migrate --no-backup`: `Skip`).
    pub backup: Backup,
    /// Only say what would be applied, reading without writing a byte (a missing file
    /// is not created; `migrate --dry-run`).
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

/// Applies pending migrations to the database `config` names (with its key, when
/// encrypted), creating an SQLite file if needed and refusing a newer or foreign
/// database without writing to it. `Store::open` does the same; this is for a caller
/// that only wants the schema brought up to date, or (`dry_run`) to know what that
/// would apply.
///
/// On PostgreSQL no copy is taken: the pending migrations run in one transaction,
/// which applies them all or none.
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

/// Encrypts the plain SQLite database `config` names with `config.key`
/// (`NewKey::Encrypt`), or gives the encrypted one a new key (`NewKey::Rekey`), then
/// applies pending migrations (cargo feature `encryption`). Encrypting copies the
/// database into a new encrypted file that then takes its place, so no plaintext copy
/// is made; with `Backup::Make` that encrypted copy is also kept as `<db>.v<N>.bak`.
/// Rekeying with `Backup::Make` first copies the database to `<db>.v<N>.bak`,
/// encrypted with the new key, so the old key opens no copy. Nothing else may have the
/// database open meanwhile (`Error::Busy`).
#[cfg(feature = "encryption")]
pub async fn change_key(config: &Config, key: NewKey, backup: Backup) -> Result<MigrationReport> {
    let config = config.clone();
    match key {
        NewKey::Encrypt => blocking(move || db::encrypt(&config, backup)).await,
        NewKey::Rekey(new) => blocking(move || db::rekey(&config, &new, backup)).await,
    }
}
