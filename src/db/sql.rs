//! The seam between the store's SQL and the engine that runs it: `Tx` runs the same
//! statement text on SQLite and on PostgreSQL, with values of a few plain kinds and
//! rows read by column index. It knows nothing of the store's tables.
//!
//! Statements are written in the subset both engines share: `?N` placeholders (`$N`
//! for PostgreSQL), a new row's id through `Tx::insert_id`, `CAST(?N AS TEXT)` where
//! PostgreSQL could not infer a parameter's type, `CAST(… AS BIGINT)` around a sum.
//! Where the engines truly differ (full-text search, the catalog), the caller asks
//! `Tx::engine`.

#[cfg(feature = "postgres")]
use std::cell::RefCell;
#[cfg(feature = "postgres")]
use std::collections::HashMap;
use std::fmt;

/// Which engine a transaction runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

/// A failure of one statement, or a column that does not hold what the store wrote
/// there. Callers name the action when they turn it into `Error`.
#[derive(Debug)]
pub enum DbError {
    Sqlite(rusqlite::Error),
    #[cfg(feature = "postgres")]
    Postgres(postgres::Error),
    Column {
        index: usize,
        reason: String,
    },
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

#[cfg(feature = "postgres")]
impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        DbError::Postgres(e)
    }
}

impl DbError {
    /// A column that read, but not as the value the store writes there.
    pub fn column(index: usize, reason: impl fmt::Display) -> DbError {
        DbError::Column {
            index,
            reason: reason.to_string(),
        }
    }
}

pub type DbResult<T> = std::result::Result<T, DbError>;

/// One parameter of a statement.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

/// What can be bound as a parameter.
pub trait ToValue {
    fn value(&self) -> Value<'_>;
}

impl ToValue for i64 {
    fn value(&self) -> Value<'_> {
        Value::Int(*self)
    }
}

impl ToValue for u32 {
    fn value(&self) -> Value<'_> {
        Value::Int(i64::from(*self))
    }
}

impl ToValue for f64 {
    fn value(&self) -> Value<'_> {
        Value::Real(*self)
    }
}

impl ToValue for str {
    fn value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl ToValue for String {
    fn value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn value(&self) -> Value<'_> {
        (**self).value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn value(&self) -> Value<'_> {
        match self {
            Some(v) => v.value(),
            None => Value::Null,
        }
    }
}

/// `args![a, b]`: the parameters of a statement, in placeholder order.
macro_rules! args {
    ($($x:expr),* $(,)?) => {
        &[$($crate::db::sql::ToValue::value(&$x)),*][..]
    };
}
pub(crate) use args;

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(i),
            Value::Real(r) => ValueRef::Real(r),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
        }))
    }
}

#[cfg(feature = "postgres")]
impl postgres::types::ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        use postgres::types::{IsNull, Type};
        match *self {
            Value::Null => Ok(IsNull::Yes),
            // The parameter's type is what PostgreSQL inferred from the statement: an
            // integer goes out in the width it asked for.
            Value::Int(i) => match *ty {
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Value::Real(r) => r.to_sql(ty, out),
            Value::Text(t) => t.to_sql(ty, out),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// One row of a result, read by column index.
pub struct Row<'r>(RowRef<'r>);

enum RowRef<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    #[cfg(feature = "postgres")]
    Postgres(&'r postgres::Row),
}

/// What a column can be read as.
pub trait FromColumn: Sized {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self>;
}

impl Row<'_> {
    pub fn get<T: FromColumn>(&self, index: usize) -> DbResult<T> {
        T::read(self, index)
    }

    /// A text column parsed into one of the store's typed values.
    pub fn parsed<T: std::str::FromStr>(&self, index: usize) -> DbResult<T>
    where
        T::Err: fmt::Display,
    {
        self.with_text(index, |text| {
            text.ok_or_else(|| DbError::column(index, "null"))?
                .parse()
                .map_err(|e: T::Err| DbError::column(index, e))
        })
    }

    /// Runs `f` on a text column without copying it (`None` for NULL).
    pub fn with_text<T>(
        &self,
        index: usize,
        f: impl FnOnce(Option<&str>) -> DbResult<T>,
    ) -> DbResult<T> {
        match &self.0 {
            RowRef::Sqlite(row) => {
                use rusqlite::types::ValueRef;
                match row.get_ref(index)? {
                    ValueRef::Null => f(None),
                    ValueRef::Text(bytes) => f(Some(
                        std::str::from_utf8(bytes).map_err(|e| DbError::column(index, e))?,
                    )),
                    other => Err(DbError::column(
                        index,
                        format!("{} where text was expected", other.data_type()),
                    )),
                }
            }
            #[cfg(feature = "postgres")]
            RowRef::Postgres(row) => f(row.try_get::<_, Option<&str>>(index)?),
        }
    }

    fn int(&self, index: usize) -> DbResult<Option<i64>> {
        match &self.0 {
            RowRef::Sqlite(row) => Ok(row.get(index)?),
            #[cfg(feature = "postgres")]
            RowRef::Postgres(row) => {
                use postgres::types::Type;
                let ty = row.columns()[index].type_().clone();
                Ok(match ty {
                    Type::INT8 => row.try_get::<_, Option<i64>>(index)?,
                    Type::INT4 => row.try_get::<_, Option<i32>>(index)?.map(i64::from),
                    Type::INT2 => row.try_get::<_, Option<i16>>(index)?.map(i64::from),
                    Type::BOOL => row.try_get::<_, Option<bool>>(index)?.map(i64::from),
                    other => {
                        return Err(DbError::column(
                            index,
                            format!("{other} where an integer was expected"),
                        ));
                    }
                })
            }
        }
    }
}

impl FromColumn for i64 {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        row.int(index)?
            .ok_or_else(|| DbError::column(index, "null where an integer was expected"))
    }
}

impl FromColumn for Option<i64> {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        row.int(index)
    }
}

impl FromColumn for u32 {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        u32::try_from(i64::read(row, index)?).map_err(|e| DbError::column(index, e))
    }
}

impl FromColumn for u64 {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        u64::try_from(i64::read(row, index)?).map_err(|e| DbError::column(index, e))
    }
}

impl FromColumn for Option<u64> {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        row.int(index)?
            .map(|n| u64::try_from(n).map_err(|e| DbError::column(index, e)))
            .transpose()
    }
}

impl FromColumn for bool {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        Ok(i64::read(row, index)? != 0)
    }
}

impl FromColumn for f64 {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        match &row.0 {
            RowRef::Sqlite(r) => Ok(r.get(index)?),
            #[cfg(feature = "postgres")]
            RowRef::Postgres(r) => {
                use postgres::types::Type;
                Ok(match *r.columns()[index].type_() {
                    Type::FLOAT4 => f64::from(r.try_get::<_, f32>(index)?),
                    _ => r.try_get::<_, f64>(index)?,
                })
            }
        }
    }
}

impl FromColumn for Option<f64> {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        match &row.0 {
            RowRef::Sqlite(r) => Ok(r.get(index)?),
            #[cfg(feature = "postgres")]
            RowRef::Postgres(r) => Ok(r.try_get::<_, Option<f64>>(index)?),
        }
    }
}

impl FromColumn for String {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        row.with_text(index, |t| {
            t.map(str::to_owned)
                .ok_or_else(|| DbError::column(index, "null where text was expected"))
        })
    }
}

impl FromColumn for Option<String> {
    fn read(row: &Row<'_>, index: usize) -> DbResult<Self> {
        row.with_text(index, |t| Ok(t.map(str::to_owned)))
    }
}

/// One transaction, on either engine; the code that made it commits it (`db::write`).
pub struct Tx<'t>(TxRef<'t>);

enum TxRef<'t> {
    Sqlite(&'t rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(RefCell<PgTx<'t>>),
}

/// A PostgreSQL transaction and its connection's prepared statements.
#[cfg(feature = "postgres")]
struct PgTx<'t> {
    tx: postgres::Transaction<'t>,
    statements: &'t mut Statements,
}

/// The statements a PostgreSQL connection has prepared, by their text: each run after
/// the first is one round trip to the server instead of two.
#[cfg(feature = "postgres")]
pub type Statements = HashMap<String, postgres::Statement>;

#[cfg(feature = "postgres")]
impl PgTx<'_> {
    fn statement(&mut self, sql: &str) -> DbResult<postgres::Statement> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(&postgres_text(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

impl<'t> Tx<'t> {
    /// A view of an SQLite connection that is inside a transaction.
    pub fn sqlite(conn: &'t rusqlite::Connection) -> Tx<'t> {
        Tx(TxRef::Sqlite(conn))
    }

    #[cfg(feature = "postgres")]
    pub fn postgres(tx: postgres::Transaction<'t>, statements: &'t mut Statements) -> Tx<'t> {
        Tx(TxRef::Postgres(RefCell::new(PgTx { tx, statements })))
    }

    /// The PostgreSQL transaction back, to commit it.
    #[cfg(feature = "postgres")]
    pub fn into_postgres(self) -> Option<postgres::Transaction<'t>> {
        match self.0 {
            TxRef::Postgres(tx) => Some(tx.into_inner().tx),
            TxRef::Sqlite(_) => None,
        }
    }

    pub fn engine(&self) -> Engine {
        match self.0 {
            TxRef::Sqlite(_) => Engine::Sqlite,
            #[cfg(feature = "postgres")]
            TxRef::Postgres(_) => Engine::Postgres,
        }
    }

    /// The SQLite connection under this transaction (pragmas, catalog); `None` on
    /// PostgreSQL.
    pub fn sqlite_conn(&self) -> Option<&rusqlite::Connection> {
        match self.0 {
            TxRef::Sqlite(conn) => Some(conn),
            #[cfg(feature = "postgres")]
            TxRef::Postgres(_) => None,
        }
    }

    /// Runs statements without parameters or a cached statement (a savepoint's).
    pub fn batch(&self, sql: &str) -> DbResult<()> {
        match &self.0 {
            TxRef::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            TxRef::Postgres(tx) => Ok(tx.borrow_mut().tx.batch_execute(sql)?),
        }
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    pub fn execute(&self, sql: &str, args: &[Value<'_>]) -> DbResult<usize> {
        match &self.0 {
            TxRef::Sqlite(conn) => Ok(conn
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args))?),
            #[cfg(feature = "postgres")]
            TxRef::Postgres(tx) => {
                let mut tx = tx.borrow_mut();
                let statement = tx.statement(sql)?;
                let changed = tx.tx.execute(&statement, &pg_args(args))?;
                Ok(changed as usize)
            }
        }
    }

    /// Runs an `INSERT … VALUES` of one row and gives the new row's `key`, which must be
    /// the table's `INTEGER PRIMARY KEY`: on SQLite through `last_insert_rowid()` (a
    /// `RETURNING` there builds an ephemeral table on every insert), on PostgreSQL
    /// through `RETURNING`. `None` only when PostgreSQL returned no row.
    pub fn insert_id(&self, insert: &str, key: &str, args: &[Value<'_>]) -> DbResult<Option<i64>> {
        match &self.0 {
            TxRef::Sqlite(conn) => {
                let _ = key; // named only by PostgreSQL's RETURNING
                self.execute(insert, args)?;
                Ok(Some(conn.last_insert_rowid()))
            }
            #[cfg(feature = "postgres")]
            TxRef::Postgres(_) => {
                self.query_row(&format!("{insert} RETURNING {key}"), args, |r| r.get(0))
            }
        }
    }

    /// The first row of a query read by `f`, or `None` when there is none.
    pub fn query_row<T>(
        &self,
        sql: &str,
        args: &[Value<'_>],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Option<T>> {
        let mut f = Some(f);
        let mut out = None;
        self.for_each_until(sql, args, |row| {
            let f = f
                .take()
                .expect("called once: the scan stops after the first row");
            out = Some(f(row)?);
            Ok(false)
        })?;
        Ok(out)
    }

    /// Every row of a query read by `f`, in order.
    pub fn query_map<T>(
        &self,
        sql: &str,
        args: &[Value<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        let mut out = Vec::new();
        self.for_each(sql, args, |row| {
            out.push(f(row)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` on each row in order, without collecting them.
    pub fn for_each(
        &self,
        sql: &str,
        args: &[Value<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<()>,
    ) -> DbResult<()> {
        self.for_each_until(sql, args, |row| f(row).map(|()| true))
    }

    /// Calls `f` on each row in order until it returns `false`.
    pub fn for_each_until(
        &self,
        sql: &str,
        args: &[Value<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<bool>,
    ) -> DbResult<()> {
        match &self.0 {
            TxRef::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                while let Some(row) = rows.next()? {
                    if !f(&Row(RowRef::Sqlite(row)))? {
                        break;
                    }
                }
                Ok(())
            }
            #[cfg(feature = "postgres")]
            TxRef::Postgres(tx) => {
                use postgres::fallible_iterator::FallibleIterator;
                // `f` may not run another statement on this transaction while the rows
                // stream in (the borrow would panic); no caller does.
                let mut guard = tx.borrow_mut();
                let statement = guard.statement(sql)?;
                let mut rows = guard.tx.query_raw(&statement, pg_args(args))?;
                while let Some(row) = rows.next()? {
                    if !f(&Row(RowRef::Postgres(&row)))? {
                        // The server can fail a statement after its first rows (a
                        // serialization failure further into the scan). Dropped unread,
                        // that error would be lost and the next statement fail as
                        // "current transaction is aborted", which no retry recognizes.
                        while rows.next()?.is_some() {}
                        break;
                    }
                }
                Ok(())
            }
        }
    }
}

/// The server the unit tests that need PostgreSQL run on (`SESSIONSTORE_TEST_POSTGRES`);
/// without it they pass without running.
#[cfg(all(test, feature = "postgres"))]
pub(crate) fn test_server() -> Option<String> {
    std::env::var("SESSIONSTORE_TEST_POSTGRES")
        .ok()
        .filter(|v| !v.is_empty())
}

#[cfg(feature = "postgres")]
fn pg_args<'a>(args: &'a [Value<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

/// The statement with SQLite's `?N` placeholders as PostgreSQL's `$N`, outside quotes.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_text(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::{Tx, postgres_text};

    #[test]
    fn placeholders_become_numbered_dollars_outside_quotes() {
        assert_eq!(
            postgres_text("SELECT ?1, '?2', x FROM t WHERE a = ?12 AND b = '?'"),
            "SELECT $1, '?2', x FROM t WHERE a = $12 AND b = '?'"
        );
    }

    /// An error the server sends after the first row reaches the caller of
    /// `query_row`, instead of leaving the transaction aborted for the next statement.
    #[test]
    fn an_error_after_the_first_row_is_not_lost() {
        let Some(url) = super::test_server() else {
            return;
        };
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut statements = super::Statements::new();
        let tx = Tx::postgres(client.transaction().unwrap(), &mut statements);
        // The first row is 1/1; the second, 1/0, fails once the first is on its way.
        let first = tx.query_row(
            "SELECT 1 / x FROM (VALUES (1), (0)) AS v(x)",
            args![],
            |r| r.get::<i64>(0),
        );
        let Err(super::DbError::Postgres(e)) = first else {
            panic!("the division by zero was lost: {first:?}");
        };
        assert_eq!(e.code(), Some(&postgres::error::SqlState::DIVISION_BY_ZERO));
    }
}
