//! Schemas of their own on a PostgreSQL server, for a store that must see no other
//! (the probe's run, a test, a benchmark), and `off_runtime` for blocking clients used
//! from async code. It touches no store's schema.

use super::tls::connect;
use crate::config::PostgresUrl;
use crate::db::error::postgres as pg;
use crate::error::Error;
use crate::error::Result;

/// `url` with `schema` first on its search path (`options=-c search_path=…`), added to
/// the options the URL already has, which a second `options` parameter would replace.
/// `schema` must be a plain identifier; the probe's and the tests' are.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let setting = format!("-c%20search_path%3D{schema}");
    let Some((base, query)) = url.split_once('?') else {
        return format!("{url}?options={setting}");
    };
    let mut found = false;
    let mut params: Vec<String> = query
        .split('&')
        .map(|param| match param.strip_prefix("options=") {
            Some(options) if !found => {
                found = true;
                format!("options={options}%20{setting}")
            }
            _ => param.to_owned(),
        })
        .collect();
    if !found {
        params.push(format!("options={setting}"));
    }
    format!("{base}?{}", params.join("&"))
}

/// Runs `f`, which uses a blocking client, on a thread of its own: the client runs a
/// runtime of its own, which cannot start on a thread that drives async tasks.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// Runs `sql` on a connection of its own to the server `url` names, outside any store.
fn on_server(url: &str, sql: &str, action: &'static str) -> Result<()> {
    let url = PostgresUrl::new(url).ok_or_else(|| Error::ConnectionString {
        url: crate::config::redact(url),
        detail: "it is not a postgres:// URL".to_owned(),
    })?;
    off_runtime(|| {
        let mut client = connect(&url)?;
        client.batch_execute(sql).map_err(pg(action))
    })
}

/// A schema of its own on a PostgreSQL server, removed by `remove` or, at the latest,
/// when this is dropped, a panic included.
pub struct ScratchSchema {
    server: String,
    name: String,
    removed: bool,
}

impl ScratchSchema {
    /// A new empty schema `<prefix>_<uuid>` on `server`.
    pub fn create(server: &str, prefix: &str) -> Result<ScratchSchema> {
        let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        on_server(server, &format!("CREATE SCHEMA {name}"), "create a schema")?;
        Ok(ScratchSchema {
            server: server.to_owned(),
            name,
            removed: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's connection string with this schema first on the search path:
    /// what a store is opened on.
    pub fn url(&self) -> String {
        with_search_path(&self.server, &self.name)
    }

    /// Drops the schema and everything in it now, saying whether that worked.
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        self.drop_schema()
    }

    fn drop_schema(&self) -> Result<()> {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        on_server(&self.server, &sql, "drop a schema")
    }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.drop_schema();
        }
    }
}
