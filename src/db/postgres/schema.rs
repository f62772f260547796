//! PostgreSQL's migrations (same versions, names and refusals as SQLite's), applied in
//! one transaction under an advisory lock, and the schema check. It touches no record.

use postgres::Client;
use refinery::Migration;

use super::pool::{Pool, shown_path};
use crate::config::PostgresUrl;
use crate::db::error::{postgres as pg, sql};
use crate::db::schema::{Applied, MigrationReport, current, label, pending};
use crate::db::sql::{Tx, args};
use crate::error::{Error, Result};
use crate::model::{Problem, ProblemKind};

mod embedded {
    refinery::embed_migrations!("migrations-postgres");
}

/// A key for the advisory lock that makes concurrent `migrate` runs take turns.
const MIGRATION_LOCK: i64 = 0x5e55_1075_70e0_0001;

/// In version order.
fn migrations() -> Vec<Migration> {
    let mut all = embedded::migrations::runner().get_migrations().clone();
    all.sort_by_key(|m| m.version());
    all
}

pub fn latest_version() -> i64 {
    crate::db::schema::latest(&migrations())
}

/// refinery's history in the connection's schema, or `None` when there is none.
pub(super) fn read_history(client: &mut Client) -> Result<Option<Vec<Applied>>> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )
        .map_err(pg("read the schema history"))?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT version, name FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .map_err(pg("read the schema history"))?;
    Ok(Some(
        rows.iter()
            .map(|r| Applied {
                version: i64::from(r.get::<_, i32>(0)),
                name: r.get(1),
            })
            .collect(),
    ))
}

/// `schema::refuse_unknown` with this binary's PostgreSQL migrations.
pub(super) fn refuse_unknown(shown: &str, applied: &[Applied]) -> Result<()> {
    crate::db::schema::refuse_unknown(&shown_path(shown), applied, &migrations())
}

/// One transaction (DDL is transactional: a failure leaves the schema as it was),
/// under an advisory lock so two hosts starting at once take turns.
pub(super) fn migrate_client(client: &mut Client, shown: &str) -> Result<MigrationReport> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(pg("take the migration lock"))?;
    let result = (|| {
        let before = read_history(client)?.unwrap_or_default();
        refuse_unknown(shown, &before)?;
        let report = embedded::migrations::runner()
            .set_grouped(true)
            .set_abort_divergent(true)
            .set_abort_missing(true)
            .run(client)
            .map_err(|e| {
                // refinery's own words, then the server's reason ("permission
                // denied for schema public"), which it keeps as the cause.
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text.push_str(": ");
                    text.push_str(&c.to_string());
                    if let Some(pg) = c.downcast_ref::<postgres::Error>()
                        && let Some(db) = pg.as_db_error()
                    {
                        text.push_str(": ");
                        text.push_str(db.message());
                    }
                    cause = c.source();
                }
                Error::Migration(text)
            })?;
        let applied = report.applied_migrations().iter().map(label).collect();
        let after = read_history(client)?.unwrap_or_default();
        Ok(MigrationReport {
            applied,
            pending: vec![],
            current: current(&after),
            backup: None,
            encryption: None,
        })
    })();
    // The lock is the session's: released here, or when the connection closes.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    result
}

/// `migrate --db postgres://…`: no backup, as all migrations apply or none does.
pub fn migrate(url: &PostgresUrl) -> Result<MigrationReport> {
    let pool = Pool::new(url, 1)?;
    let mut conn = pool.get()?;
    migrate_client(&mut conn.client, pool.shown())
}

/// What `migrate` would apply, read without changing anything.
pub fn plan(url: &PostgresUrl) -> Result<MigrationReport> {
    let pool = Pool::new(url, 1)?;
    let shown = pool.shown().clone();
    let mut client = pool.get()?;
    let applied = read_history(&mut client.client)?.unwrap_or_default();
    refuse_unknown(&shown, &applied)?;
    let migrations = migrations();
    Ok(MigrationReport {
        applied: vec![],
        pending: pending(&migrations, &applied)
            .into_iter()
            .map(label)
            .collect(),
        current: current(&applied),
        backup: None,
        encryption: None,
    })
}

/// Tables and triggers (from the migrations' text) and constraints and indexes
/// (`CATALOG`) against the schema: a dropped trigger would let the log be edited, a
/// dropped unique constraint two appends take one place.
pub fn schema_problems(tx: &Tx<'_>) -> Result<Vec<Problem>> {
    let version: i64 = tx
        .query_row(
            "SELECT coalesce(max(version), 0) FROM refinery_schema_history",
            args![],
            |r| r.get(0),
        )
        .map_err(sql("read the schema history"))?
        .unwrap_or(0);
    let mut tables = std::collections::BTreeSet::new();
    let mut triggers = std::collections::BTreeSet::new();
    let mut functions = std::collections::BTreeMap::new();
    for m in migrations()
        .iter()
        .filter(|m| i64::from(m.version()) <= version)
    {
        let sql = m.sql().unwrap_or_default();
        functions.extend(function_bodies(sql));
        for (verb, name) in created_names(sql) {
            match verb {
                Named::Table(true) => tables.insert(name),
                Named::Table(false) => tables.remove(&name),
                Named::Trigger(true) => triggers.insert(name),
                Named::Trigger(false) => triggers.remove(&name),
            };
        }
    }
    let have_tables: std::collections::BTreeSet<String> = tx
        .query_map(
            "SELECT table_name FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
               AND table_name <> 'refinery_schema_history'",
            args![],
            |r| r.get(0),
        )
        .map_err(sql("list tables"))?
        .into_iter()
        .collect();
    let have_triggers: std::collections::BTreeSet<String> = tx
        .query_map(
            "SELECT t.tgname::text FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND t.tgenabled <> 'D'",
            args![],
            |r| r.get(0),
        )
        .map_err(sql("list triggers"))?
        .into_iter()
        .collect();
    // A trigger can stay in place with its function rewritten to let every change
    // through: each function's body is compared with the one its migration made.
    let have_functions: std::collections::BTreeMap<String, String> = tx
        .query_map(
            "SELECT p.proname::text, p.prosrc FROM pg_proc p
               JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = current_schema()",
            args![],
            |r| Ok((r.get::<String>(0)?, squeeze(&r.get::<String>(1)?))),
        )
        .map_err(sql("list functions"))?
        .into_iter()
        .collect();
    let mut problems = Vec::new();
    for (name, body) in &functions {
        match have_functions.get(name) {
            None => problems.push(Problem::new(
                ProblemKind::SchemaMissing,
                format!("function {name} is missing; the version-{version} schema has it"),
            )),
            Some(found) if found != body => problems.push(Problem::new(
                ProblemKind::SchemaChanged,
                format!("function {name} differs from the version-{version} schema"),
            )),
            Some(_) => {}
        }
    }
    for name in have_functions.keys() {
        if !functions.contains_key(name) {
            problems.push(Problem::new(
                ProblemKind::SchemaExtra,
                format!("function {name} is not in the version-{version} schema"),
            ));
        }
    }
    for (kind, want, have) in [
        ("table", &tables, &have_tables),
        ("trigger", &triggers, &have_triggers),
    ] {
        for name in want.difference(have) {
            problems.push(Problem::new(
                ProblemKind::SchemaMissing,
                format!(
                    "{kind} {name} is missing (or disabled); the version-{version} schema has it"
                ),
            ));
        }
        for name in have.difference(want) {
            problems.push(Problem::new(
                ProblemKind::SchemaExtra,
                format!("{kind} {name} is not in the version-{version} schema"),
            ));
        }
    }
    problems.extend(catalog_problems(tx, version)?);
    Ok(problems)
}

/// The newest migrations' constraints and indexes as the server words them (it names
/// inline constraints and rewrites `IN (…)` as `= ANY (ARRAY[…])`), captured by
/// `tests::the_catalog_file_is_what_the_migrations_make` (`SESSIONSTORE_BLESS=1`).
pub(super) const CATALOG: &str = include_str!("catalog.txt");

/// Constraints and indexes by (kind, table, name), to their definitions.
type Catalog = std::collections::BTreeMap<(String, String, String), String>;

/// The schema version `CATALOG` describes, and what it lists.
fn expected_catalog() -> (i64, Catalog) {
    let mut version = 0;
    let mut catalog = Catalog::new();
    for line in CATALOG
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some(v) = line.strip_prefix("version ") {
            version = v
                .parse()
                .expect("catalog.txt names its version as a number");
            continue;
        }
        let mut words = line.splitn(4, ' ');
        let mut word = || {
            words
                .next()
                .expect("each catalog.txt line is a kind, a table, a name and a definition")
                .to_owned()
        };
        let key = (word(), word(), word());
        catalog.insert(key, word());
    }
    (version, catalog)
}

/// In `CATALOG`'s terms, refinery's table aside; an index without the schema name
/// `pg_get_indexdef` prefixes.
fn catalog(tx: &Tx<'_>) -> Result<Catalog> {
    let rows = |statement, action| {
        tx.query_map(statement, args![], |r| {
            Ok(((r.get(0)?, r.get(1)?, r.get(2)?), r.get(3)?))
        })
        .map_err(sql(action))
    };
    let constraints = rows(
        "SELECT 'constraint', c.relname::text, k.conname::text, pg_get_constraintdef(k.oid, true)
           FROM pg_constraint k
           JOIN pg_class c ON c.oid = k.conrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = current_schema() AND k.contype IN ('p', 'u', 'f', 'c', 'x')
            AND c.relname <> 'refinery_schema_history'",
        "list constraints",
    )?;
    let indexes = rows(
        "SELECT 'index', t.relname::text, i.relname::text,
                replace(pg_get_indexdef(x.indexrelid), ' ON ' || quote_ident(n.nspname) || '.', ' ON ')
           FROM pg_index x
           JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_class t ON t.oid = x.indrelid
           JOIN pg_namespace n ON n.oid = t.relnamespace
          WHERE n.nspname = current_schema() AND t.relname <> 'refinery_schema_history'",
        "list indexes",
    )?;
    // A definition the server spreads over lines (a CASE) is kept on one, as the
    // file's line format needs.
    Ok(constraints
        .into_iter()
        .chain(indexes)
        .map(|(key, definition): (_, String)| {
            (
                key,
                definition.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect())
}

/// `CATALOG`'s text for the connection's schema at `version`, as the test that keeps
/// the file true writes it.
#[cfg(test)]
pub(super) fn catalog_text(tx: &Tx<'_>, version: i64) -> Result<String> {
    let mut text = String::from(
        "# The constraints and indexes the PostgreSQL migrations make, as the server words\n\
         # them (`kind table name definition`), read from a freshly migrated schema by\n\
         # `db::postgres::tests::the_catalog_file_is_what_the_migrations_make`. The schema\n\
         # check compares a database with this; `SESSIONSTORE_BLESS=1 cargo test` with\n\
         # `SESSIONSTORE_TEST_POSTGRES` set rewrites it after a new migration.\n",
    );
    text.push_str(&format!("version {version}\n"));
    for ((kind, table, name), definition) in catalog(tx)? {
        text.push_str(&format!("{kind} {table} {name} {definition}\n"));
    }
    Ok(text)
}

/// Differences from `CATALOG`, at its (newest) version only: an older schema is
/// migrated by a writing open and refused by a reading one.
fn catalog_problems(tx: &Tx<'_>, version: i64) -> Result<Vec<Problem>> {
    let (described, want) = expected_catalog();
    if version != described {
        return Ok(vec![]);
    }
    let have = catalog(tx)?;
    let mut problems = Vec::new();
    for (key @ (kind, table, name), definition) in &want {
        match have.get(key) {
            None => problems.push(Problem::new(
                ProblemKind::SchemaMissing,
                format!(
                    "{kind} {name} (on {table}) is missing; the version-{version} schema has it"
                ),
            )),
            Some(found) if found != definition => problems.push(Problem::new(
                ProblemKind::SchemaChanged,
                format!("{kind} {name} differs from the version-{version} schema"),
            )),
            Some(_) => {}
        }
    }
    for (kind, table, name) in have.keys() {
        if !want.contains_key(&(kind.clone(), table.clone(), name.clone())) {
            problems.push(Problem::new(
                ProblemKind::SchemaExtra,
                format!("{kind} {name} (on {table}) is not in the version-{version} schema"),
            ));
        }
    }
    Ok(problems)
}

/// Runs of whitespace made one space: layout is not a difference.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each `CREATE [OR REPLACE] FUNCTION` as (name, squeezed body); later ones replace.
fn function_bodies(sql: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find("FUNCTION ") {
        let before = &rest[..at];
        rest = &rest[at + "FUNCTION ".len()..];
        // Only a definition: `EXECUTE FUNCTION f()` in a trigger names one.
        let defines = before
            .trim_end()
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|w| w == "CREATE" || w == "REPLACE");
        if !defines {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = rest.find("$$") else { break };
        let body_and_rest = &rest[open + 2..];
        let Some(close) = body_and_rest.find("$$") else {
            break;
        };
        out.push((name, squeeze(&body_and_rest[..close])));
        rest = &body_and_rest[close + 2..];
    }
    out
}

pub(super) enum Named {
    /// `true` when made, `false` when dropped.
    Table(bool),
    Trigger(bool),
}

/// `CREATE TABLE x`, `CREATE TRIGGER x`, `DROP TRIGGER x` and the like in a
/// migration's text, in order, comments skipped.
pub(super) fn created_names(sql: &str) -> Vec<(Named, String)> {
    let words: Vec<String> = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == '(' || c == ';'))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let verb = w.to_ascii_uppercase();
        let make = match verb.as_str() {
            "CREATE" => true,
            "DROP" => false,
            _ => continue,
        };
        let mut j = i + 1;
        // CREATE OR REPLACE / CREATE CONSTRAINT TRIGGER
        while j < words.len()
            && matches!(
                words[j].to_ascii_uppercase().as_str(),
                "OR" | "REPLACE" | "CONSTRAINT"
            )
        {
            j += 1;
        }
        let Some(kind) = words.get(j).map(|k| k.to_ascii_uppercase()) else {
            continue;
        };
        j += 1;
        while j < words.len()
            && matches!(
                words[j].to_ascii_uppercase().as_str(),
                "IF" | "NOT" | "EXISTS"
            )
        {
            j += 1;
        }
        let Some(name) = words.get(j) else { continue };
        let name = name.trim_matches('"').to_owned();
        match kind.as_str() {
            "TABLE" => out.push((Named::Table(make), name)),
            "TRIGGER" => out.push((Named::Trigger(make), name)),
            _ => {}
        }
    }
    out
}
