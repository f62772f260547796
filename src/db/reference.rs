//! The schema a database of each version should have, as `sqlite_master` records it,
//! for `verify` and every writing open. The newest version's is a snapshot built into
//! the binary (`reference-schema.json`, kept equal to what the migrations make by a
//! test); an older one's is made by its migrations in memory. It never opens a file.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::schema;
use crate::error::Result;

/// Schema objects as `sqlite_master` records them: `(type, name)` to `(table, sql)`,
/// the SQL's runs of whitespace made one space (layout is not a difference).
pub(crate) type Objects = BTreeMap<(String, String), (String, Option<String>)>;

/// The newest version's objects: `{"version": N, "objects": [[type, name, table,
/// sql], …]}`. Running the migrations instead cost more than half of a one-shot `send`.
const SNAPSHOT: &str = include_str!("reference-schema.json");

#[derive(serde::Serialize, serde::Deserialize)]
struct Snapshot {
    version: i64,
    objects: Vec<(String, String, String, Option<String>)>,
}

/// The objects of a database the migrations up to `version` make.
pub(crate) fn at(version: i64) -> Result<Objects> {
    if let Ok(snapshot) = serde_json::from_str::<Snapshot>(SNAPSHOT)
        && snapshot.version == version
    {
        return Ok(snapshot
            .objects
            .into_iter()
            .map(|(kind, name, table, sql)| ((kind, name), (table, sql)))
            .collect());
    }
    built(version)
}

/// [`at`] by running the migrations on an in-memory database.
fn built(version: i64) -> Result<Objects> {
    let failed = |e| crate::db::error::sqlite("build the reference schema", e);
    let mut reference = Connection::open_in_memory().map_err(failed)?;
    schema::build_reference(&mut reference, version)?;
    objects(&reference).map_err(failed)
}

pub(crate) fn objects(conn: &Connection) -> rusqlite::Result<Objects> {
    // `sqlite_stat*` tables are made by ANALYZE, which changes no behaviour.
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_stat%' ESCAPE '\\'",
    )?;
    let rows = stmt.query_map([], |r| {
        let sql: Option<String> = r.get(3)?;
        Ok((
            (r.get(0)?, r.get(1)?),
            (
                r.get(2)?,
                sql.map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")),
            ),
        ))
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snapshot is what the migrations make at the newest version:
    /// `SESSIONSTORE_BLESS=1 cargo test --lib reference` writes it; review the diff.
    #[test]
    fn the_snapshot_is_the_newest_schema_the_migrations_make() {
        let version = schema::latest_version();
        let made = built(version).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/db/reference-schema.json");
        if std::env::var_os("SESSIONSTORE_BLESS").is_some() {
            let snapshot = Snapshot {
                version,
                objects: made
                    .iter()
                    .map(|((k, n), (t, s))| (k.clone(), n.clone(), t.clone(), s.clone()))
                    .collect(),
            };
            let mut text = serde_json::to_string_pretty(&snapshot).unwrap();
            text.push('\n');
            std::fs::write(path, text).unwrap();
            return;
        }
        let on_disk: Snapshot = serde_json::from_str(SNAPSHOT).unwrap();
        assert_eq!(
            on_disk.version, version,
            "src/db/reference-schema.json is of another version: run \
             SESSIONSTORE_BLESS=1 cargo test --lib reference and review the diff"
        );
        assert!(
            at(version).unwrap() == made,
            "src/db/reference-schema.json differs from what the migrations make: run \
             SESSIONSTORE_BLESS=1 cargo test --lib reference and review the diff"
        );
    }

    /// An older version's reference is still built from its migrations.
    #[test]
    fn an_older_version_is_built_from_its_migrations() {
        let v1 = at(1).unwrap();
        assert!(v1.contains_key(&("table".to_owned(), "sessions".to_owned())));
        assert!(v1.len() < at(schema::latest_version()).unwrap().len());
    }
}
