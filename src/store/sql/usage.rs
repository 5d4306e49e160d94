//! The usage rollup (`usage_daily`, see `store::usage`): the statement both stores run in a
//! task's end, and its reads for `GET /api/v1/usage`.

use super::{sql, Sql, SqlStore};
use crate::store::usage::{day_text, UsageGroup, UsageQuery, UsageRow};
use crate::store::StoreResult;

pub(crate) use crate::store::usage::usage_day;

/// One ended task added to its account's row for the day, model and key: `$1` account, `$2` day,
/// `$3` model, `$4` key, `$5` images, `$6` pixels, `$7` backend ms, `$8` cost.
pub(crate) const ROLL_UP: Sql = sql!(
    "INSERT INTO usage_daily (account_id, day, model, key_id, tasks, images, pixels, backend_ms,
         cost)
     VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8)
     ON CONFLICT (account_id, day, model, key_id) DO UPDATE SET
         tasks = usage_daily.tasks + 1, images = usage_daily.images + excluded.images,
         pixels = usage_daily.pixels + excluded.pixels,
         backend_ms = usage_daily.backend_ms + excluded.backend_ms,
         cost = usage_daily.cost + excluded.cost"
);

/// The sums, the same for every grouping (PostgreSQL's `SUM` of a `BIGINT` is a `NUMERIC`).
macro_rules! usage_read {
    ($group:literal, $where:literal, $by:literal) => {
        sql!(
            "SELECT ",
            $group,
            ", CAST(SUM(tasks) AS BIGINT), CAST(SUM(images) AS BIGINT),
                CAST(SUM(pixels) AS BIGINT), CAST(SUM(backend_ms) AS BIGINT),
                CAST(SUM(cost) AS BIGINT)
             FROM usage_daily WHERE ",
            $where,
            " GROUP BY ",
            $by,
            " ORDER BY ",
            $by
        )
    };
}

// One account's: a range of the primary key. Every account's: a range of `usage_daily_by_day`.
const BY_DAY: Sql = usage_read!(
    "'' AS account_id, CAST(day AS TEXT)",
    "account_id = $1 AND day >= $2 AND day <= $3",
    "day"
);
const BY_MODEL: Sql = usage_read!(
    "'' AS account_id, model",
    "account_id = $1 AND day >= $2 AND day <= $3",
    "model"
);
const BY_KEY: Sql = usage_read!(
    "'' AS account_id, key_id",
    "account_id = $1 AND day >= $2 AND day <= $3",
    "key_id"
);
const ALL_BY_DAY: Sql = usage_read!(
    "account_id, CAST(day AS TEXT)",
    "day >= $1 AND day <= $2",
    "account_id, day"
);
const ALL_BY_MODEL: Sql = usage_read!(
    "account_id, model",
    "day >= $1 AND day <= $2",
    "account_id, model"
);
const ALL_BY_KEY: Sql = usage_read!(
    "account_id, key_id",
    "day >= $1 AND day <= $2",
    "account_id, key_id"
);

type Sums = (String, String, i64, i64, i64, i64, i64);

/// The rows `query` asks for, in the order of their group.
pub(crate) async fn usage<S: SqlStore>(
    store: &S,
    query: &UsageQuery,
) -> StoreResult<Vec<UsageRow>> {
    let statement = match (&query.account_id, query.group) {
        (Some(_), UsageGroup::Day) => &BY_DAY,
        (Some(_), UsageGroup::Model) => &BY_MODEL,
        (Some(_), UsageGroup::Key) => &BY_KEY,
        (None, UsageGroup::Day) => &ALL_BY_DAY,
        (None, UsageGroup::Model) => &ALL_BY_MODEL,
        (None, UsageGroup::Key) => &ALL_BY_KEY,
    };
    let rows: Vec<Sums> = match &query.account_id {
        Some(account) => {
            let args = [account.as_str().into(), query.from.into(), query.to.into()];
            store.reader().all(statement, &args).await?
        }
        None => {
            let args = [query.from.into(), query.to.into()];
            store.reader().all(statement, &args).await?
        }
    };
    Ok(rows
        .into_iter()
        .map(
            |(account_id, group, tasks, images, pixels, backend_ms, cost)| UsageRow {
                account_id: query.account_id.is_none().then_some(account_id),
                group: match query.group {
                    UsageGroup::Day => group.parse().map(day_text).unwrap_or(group),
                    UsageGroup::Model | UsageGroup::Key => group,
                },
                tasks,
                images,
                pixels,
                backend_ms,
                cost,
            },
        )
        .collect())
}
