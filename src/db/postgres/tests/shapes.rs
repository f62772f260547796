//! Issue 46: both engines hold the same tables, columns and constraints for the
//! store's data, read from each engine's catalog and compared, with the differences
//! each engine is allowed listed by name.

use std::collections::{BTreeMap, BTreeSet};

use postgres::{Client, NoTls};

use super::super::*;
use super::migrated;

/// One engine's schema of a table or view of the store's data, normalized: its
/// columns in order with whether each may be NULL (a primary key's never may), its
/// primary key, unique keys, references, other indexes (columns, unique, partial) and
/// how many checks it has.
#[derive(Debug, Default, PartialEq)]
struct Shape {
    view: bool,
    columns: Vec<(String, bool)>,
    primary: Vec<String>,
    unique: BTreeSet<Vec<String>>,
    references: BTreeSet<(Vec<String>, String, Vec<String>)>,
    indexes: BTreeSet<(String, Vec<String>, bool, bool)>,
    checks: usize,
}

/// Whether a table or view holds the store's data: not the search index (each
/// engine's own), nor the migrations' history or SQLite's own tables.
fn holds_data(name: &str) -> bool {
    !name.starts_with("search") && !name.starts_with("sqlite_") && name != "refinery_schema_history"
}

/// The shapes of SQLite's data tables and views at the newest version.
fn sqlite_shapes() -> BTreeMap<String, Shape> {
    let mut conn = rusqlite::Connection::open_in_memory().unwrap();
    crate::db::schema::build_reference(&mut conn, latest_version()).unwrap();
    let objects: Vec<(String, String, String)> = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let names = |sql: &str, of: &str| -> Vec<String> {
        conn.prepare(sql)
            .unwrap()
            .query_map([of], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    let mut shapes = BTreeMap::new();
    for (kind, name, sql) in objects.into_iter().filter(|(_, n, _)| holds_data(n)) {
        let mut shape = Shape {
            view: kind == "view",
            ..Shape::default()
        };
        let columns: Vec<(String, bool, i64)> = conn
            .prepare("SELECT name, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid")
            .unwrap()
            .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut primary: Vec<(i64, String)> = Vec::new();
        for (column, not_null, pk) in columns {
            shape.columns.push((column.clone(), !not_null && pk == 0));
            if pk > 0 {
                primary.push((pk, column));
            }
        }
        primary.sort();
        shape.primary = primary.into_iter().map(|(_, c)| c).collect();
        let indexes: Vec<(String, String, bool, bool)> = conn
            .prepare("SELECT name, origin, \"unique\", partial FROM pragma_index_list(?1)")
            .unwrap()
            .query_map([&name], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for (index, origin, unique, partial) in indexes {
            let columns = names(
                "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
                &index,
            );
            match origin.as_str() {
                "pk" => {}
                "u" => {
                    shape.unique.insert(columns);
                }
                _ => {
                    shape.indexes.insert((index, columns, unique, partial));
                }
            }
        }
        let keys: Vec<(i64, String, String, String)> = conn
            .prepare(
                "SELECT id, \"from\", \"table\", \"to\" FROM pragma_foreign_key_list(?1)
                 ORDER BY id, seq",
            )
            .unwrap()
            .query_map([&name], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut by_id: BTreeMap<i64, (Vec<String>, String, Vec<String>)> = BTreeMap::new();
        for (id, from, table, to) in keys {
            let key = by_id.entry(id).or_insert_with(|| (vec![], table, vec![]));
            key.0.push(from);
            key.2.push(to);
        }
        shape.references = by_id.into_values().collect();
        let squeezed: String = sql.to_uppercase().split_whitespace().collect();
        shape.checks = if shape.view {
            0
        } else {
            squeezed.matches("CHECK(").count()
        };
        shapes.insert(name, shape);
    }
    shapes
}

/// The shapes of PostgreSQL's data tables and views, in the schema `url` names.
fn postgres_shapes(url: &str) -> BTreeMap<String, Shape> {
    let mut client = Client::connect(url, NoTls).unwrap();
    let objects = client
        .query(
            "SELECT table_name::text, table_type::text FROM information_schema.tables
             WHERE table_schema = current_schema()",
            &[],
        )
        .unwrap();
    let mut shapes = BTreeMap::new();
    for row in objects {
        let (name, kind): (String, String) = (row.get(0), row.get(1));
        if !holds_data(&name) {
            continue;
        }
        let mut shape = Shape {
            view: kind == "VIEW",
            ..Shape::default()
        };
        for row in client
            .query(
                "SELECT column_name::text, is_nullable = 'YES' FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = $1
                 ORDER BY ordinal_position",
                &[&name],
            )
            .unwrap()
        {
            shape.columns.push((row.get(0), row.get(1)));
        }
        let columns_of = "(SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}')
                            FROM unnest(KEYS) WITH ORDINALITY k(num, ord)
                            JOIN pg_attribute a ON a.attrelid = REL AND a.attnum = k.num)";
        let constraints = format!(
            "SELECT c.contype::text, {}, (SELECT relname::text FROM pg_class WHERE oid = c.confrelid), {}
             FROM pg_constraint c WHERE c.conrelid = to_regclass($1)",
            columns_of.replace("KEYS", "c.conkey").replace("REL", "c.conrelid"),
            columns_of.replace("KEYS", "c.confkey").replace("REL", "c.confrelid"),
        );
        for row in client.query(&constraints, &[&name]).unwrap() {
            let (kind, columns): (String, Vec<String>) = (row.get(0), row.get(1));
            match kind.as_str() {
                "p" => shape.primary = columns,
                "u" => {
                    shape.unique.insert(columns);
                }
                "f" => {
                    shape.references.insert((
                        columns,
                        row.get::<_, Option<String>>(2).unwrap(),
                        row.get(3),
                    ));
                }
                "c" => shape.checks += 1,
                _ => {}
            }
        }
        let indexes = format!(
            "SELECT i.relname::text, {}, ix.indisunique, ix.indpred IS NOT NULL
             FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid
             WHERE ix.indrelid = to_regclass($1)
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid)",
            columns_of
                .replace("KEYS", "ix.indkey::int2[]")
                .replace("REL", "ix.indrelid"),
        );
        for row in client.query(&indexes, &[&name]).unwrap() {
            shape
                .indexes
                .insert((row.get(0), row.get(1), row.get(2), row.get(3)));
        }
        shapes.insert(name, shape);
    }
    shapes
}

/// The tables SQLite alone holds for the store's data: its index of the log by
/// session (V13), written a batch at a time.
const SQLITE_ONLY: &[&str] = &["event_keys", "event_keys_upto"];

/// Issue 46: both engines hold the same tables and views for the store's data, with
/// the same columns in the same order, the same nullability, keys, references and
/// indexes, and as many checks on each table (what each check says is the engines'
/// own wording; `catalog.txt` and the reference schema pin that). What may differ is
/// named, and must be there: the search index (every object named `search*`, left
/// out of both), and the log's index by session, SQLite's `event_keys` and
/// `event_keys_upto` against PostgreSQL's `UNIQUE (session_id, session_seq)` on
/// `events`. Nothing else may differ.
#[test]
fn both_engines_hold_the_same_tables_columns_and_constraints() {
    let Some(server) = test_server() else {
        return;
    };
    let (schema, _, db) = migrated(&server, "shapes");
    drop(db);
    let mut postgres = postgres_shapes(&schema.url());
    schema.remove().unwrap();
    let mut sqlite = sqlite_shapes();
    for name in SQLITE_ONLY {
        assert!(sqlite.remove(*name).is_some(), "SQLite has no {name}");
    }
    let events = postgres.get_mut("events").unwrap();
    let key = vec!["session_id".to_owned(), "session_seq".to_owned()];
    assert!(events.unique.remove(&key), "{events:?}");
    assert_eq!(
        sqlite.keys().collect::<Vec<_>>(),
        postgres.keys().collect::<Vec<_>>()
    );
    for (name, shape) in &sqlite {
        assert_eq!(Some(shape), postgres.get(name), "{name}");
    }
}
