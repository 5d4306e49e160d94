//! How a shared statement reaches either database: the values it binds ([`Arg`]), and its reads,
//! which both stores make through sqlx ([`Reader`]).

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{Arguments, Database, Encode, FromRow, Postgres, Sqlite, Type};

use super::text::Sql;
use crate::store::{StoreError, StoreResult};

/// A value bound to a placeholder.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Int(i64),
    MaybeInt(Option<i64>),
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Bytes(&'a [u8]),
    Bool(bool),
    /// A list of numbers: an array on PostgreSQL, JSON text on SQLite (read with `json_each`).
    Ints(&'a [i64]),
    /// A list of texts, the same way.
    Texts(&'a [String]),
}

impl From<i64> for Arg<'_> {
    fn from(value: i64) -> Self {
        Arg::Int(value)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(value: Option<i64>) -> Self {
        Arg::MaybeInt(value)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(value: &'a str) -> Self {
        Arg::Text(value)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(value: &'a String) -> Self {
        Arg::Text(value)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(value: Option<&'a str>) -> Self {
        Arg::MaybeText(value)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(value: &'a [u8]) -> Self {
        Arg::Bytes(value)
    }
}

impl From<bool> for Arg<'_> {
    fn from(value: bool) -> Self {
        Arg::Bool(value)
    }
}

impl<'a> From<&'a [i64]> for Arg<'a> {
    fn from(value: &'a [i64]) -> Self {
        Arg::Ints(value)
    }
}

impl<'a> From<&'a [String]> for Arg<'a> {
    fn from(value: &'a [String]) -> Self {
        Arg::Texts(value)
    }
}

/// A list as one JSON text: how a list reaches SQLite as one bound value, for `json_each`.
pub(crate) fn json(list: &impl serde::Serialize) -> String {
    serde_json::to_string(list).expect("lists of ids serialize")
}

/// How a database takes a list bound as one value.
pub(crate) trait Lists: Database {
    fn add_ints<'q>(args: &mut Self::Arguments<'q>, list: &'q [i64]) -> Result<(), BoxDynError>;
    fn add_texts<'q>(args: &mut Self::Arguments<'q>, list: &'q [String])
        -> Result<(), BoxDynError>;
}

impl Lists for Sqlite {
    fn add_ints<'q>(args: &mut Self::Arguments<'q>, list: &'q [i64]) -> Result<(), BoxDynError> {
        args.add(json(&list))
    }

    fn add_texts<'q>(
        args: &mut Self::Arguments<'q>,
        list: &'q [String],
    ) -> Result<(), BoxDynError> {
        args.add(json(&list))
    }
}

impl Lists for Postgres {
    fn add_ints<'q>(args: &mut Self::Arguments<'q>, list: &'q [i64]) -> Result<(), BoxDynError> {
        args.add(list)
    }

    fn add_texts<'q>(
        args: &mut Self::Arguments<'q>,
        list: &'q [String],
    ) -> Result<(), BoxDynError> {
        args.add(list)
    }
}

/// `args` as sqlx binds them to a statement of `DB`.
pub(crate) fn arguments<'q, DB>(args: &[Arg<'q>]) -> StoreResult<DB::Arguments<'q>>
where
    DB: Lists,
    i64: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
    bool: Encode<'q, DB> + Type<DB>,
{
    let mut out = DB::Arguments::default();
    for arg in args {
        match *arg {
            Arg::Int(v) => out.add(v),
            Arg::MaybeInt(v) => out.add(v),
            Arg::Text(v) => out.add(v),
            Arg::MaybeText(v) => out.add(v),
            Arg::Bytes(v) => out.add(v),
            Arg::Bool(v) => out.add(v),
            Arg::Ints(v) => DB::add_ints(&mut out, v),
            Arg::Texts(v) => DB::add_texts(&mut out, v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(out)
}

/// A row that both databases decode into the same type.
pub(crate) trait SharedRow:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

impl<T> SharedRow for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// A statement's text: a [`Sql`], or text made for one database at run time.
pub(crate) trait Statement: Sync {
    fn text(&self, sqlite: bool) -> &str;
}

impl Statement for Sql {
    fn text(&self, sqlite: bool) -> &str {
        self.on(sqlite)
    }
}

impl Statement for str {
    fn text(&self, _: bool) -> &str {
        self
    }
}

/// Where a store reads: SQLite's pool of readers, or PostgreSQL's pool.
#[derive(Clone, Copy)]
pub(crate) enum Reader<'a> {
    Sqlite(&'a SqlitePool),
    Postgres(&'a PgPool),
}

impl Reader<'_> {
    pub(crate) fn is_sqlite(self) -> bool {
        matches!(self, Reader::Sqlite(_))
    }

    /// Every row `sql` selects.
    pub(crate) async fn all<T: SharedRow>(
        self,
        sql: &(impl Statement + ?Sized),
        args: &[Arg<'_>],
    ) -> StoreResult<Vec<T>> {
        self.fetch_all(sql, args, true).await
    }

    /// Every row `sql` selects, planned for these values each time: on PostgreSQL an unnamed
    /// statement, so that a plan made for one search's words (a walk down the account's tasks
    /// for common ones, the GIN index for rare ones) is never reused as a generic plan for
    /// another's.
    pub(crate) async fn all_planned_each_time<T: SharedRow>(
        self,
        sql: &(impl Statement + ?Sized),
        args: &[Arg<'_>],
    ) -> StoreResult<Vec<T>> {
        self.fetch_all(sql, args, false).await
    }

    /// Every row `sql` selects, as a prepared statement kept for reuse (`persistent`) or not.
    async fn fetch_all<T: SharedRow>(
        self,
        sql: &(impl Statement + ?Sized),
        args: &[Arg<'_>],
        persistent: bool,
    ) -> StoreResult<Vec<T>> {
        let text = sql.text(self.is_sqlite());
        Ok(match self {
            Reader::Sqlite(pool) => {
                let args = arguments::<Sqlite>(args)?;
                sqlx::query_as_with(text, args)
                    .persistent(persistent)
                    .fetch_all(pool)
                    .await?
            }
            Reader::Postgres(pool) => {
                let args = arguments::<Postgres>(args)?;
                sqlx::query_as_with(text, args)
                    .persistent(persistent)
                    .fetch_all(pool)
                    .await?
            }
        })
    }

    /// The row `sql` selects, if any (a statement that selects at most one).
    pub(crate) async fn optional<T: SharedRow>(
        self,
        sql: &(impl Statement + ?Sized),
        args: &[Arg<'_>],
    ) -> StoreResult<Option<T>> {
        Ok(self.all(sql, args).await?.into_iter().next())
    }

    /// The one row `sql` selects.
    pub(crate) async fn one<T: SharedRow>(
        self,
        sql: &(impl Statement + ?Sized),
        args: &[Arg<'_>],
    ) -> StoreResult<T> {
        self.optional(sql, args)
            .await?
            .ok_or_else(|| StoreError::from(sqlx::Error::RowNotFound))
    }
}
