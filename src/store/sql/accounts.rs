//! Accounts, keys, sessions and sign-in throttling ([`Accounts`]), once for both stores. Keys
//! and sessions are checked against the database on every request (no cache), so a revocation
//! or a sign-out holds from the next request on, on every node.

use async_trait::async_trait;
use uuid::Uuid;

use super::{sql, Arg, Durability, Sql, SqlStore, Write};
use crate::store::rows::{KeyOwnerRow, ACCOUNT_COLUMNS};
use crate::store::{
    now_ms, Account, Accounts, ApiKeyInfo, KeyOwner, KeyRow, LedgerRow, NewAccount, StoreResult,
};

pub(super) const ACCOUNT: Sql = Sql::both(ACCOUNT_COLUMNS);
/// The order rows were made in: SQLite's rowid, PostgreSQL's identity column.
pub(super) const MADE: Sql = Sql::each("rowid", "created_seq");

const COUNT: Sql = sql!("SELECT COUNT(*) FROM accounts");
/// No conflict target: the case-insensitive index on the email is what conflicts.
const CREATE: Sql = sql!(
    "INSERT INTO accounts (id, email, signing_secret, created_at, password_hash, admin, credits)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING"
);
/// A new account's starting balance, as one `signup` ledger row: none when the account was not
/// created (its email had one) or has unlimited credits.
const SIGNUP_CREDITS: Sql = sql!(
    "INSERT INTO credit_ledger (account_id, delta, reason, created_at)
     SELECT id, credits, 'signup', created_at FROM accounts WHERE id = $1 AND credits IS NOT NULL"
);
const FIRST: Sql = sql!(
    "SELECT ",
    ACCOUNT,
    " FROM accounts a ORDER BY a.created_at, a.",
    MADE,
    " LIMIT 1"
);
const BY_EMAIL: Sql = sql!(
    "SELECT ",
    ACCOUNT,
    " FROM accounts a WHERE lower(a.email) = lower($1)"
);
const BY_ID: Sql = sql!("SELECT ", ACCOUNT, " FROM accounts a WHERE a.id = $1");
const PASSWORD: Sql = sql!("SELECT password_hash FROM accounts WHERE id = $1");
const ALL: Sql = sql!(
    "SELECT ",
    ACCOUNT,
    " FROM accounts a ORDER BY a.created_at, a.",
    MADE
);
const SET_PASSWORD: Sql = sql!("UPDATE accounts SET password_hash = $1 WHERE id = $2");
const SET_ADMIN: Sql = sql!("UPDATE accounts SET admin = $1 WHERE id = $2");
pub(super) const SET_DISABLED: Sql = sql!("UPDATE accounts SET disabled = $1 WHERE id = $2");
const SET_SIGNING_SECRET: Sql = sql!("UPDATE accounts SET signing_secret = $1 WHERE id = $2");
/// On PostgreSQL the row's lock orders this against submits and refunds of the same account.
pub(super) const SET_CREDITS: Sql = sql!("UPDATE accounts SET credits = $1 WHERE id = $2");
/// After a balance is set: one `admin` ledger row of the difference between the balance and the
/// ledger's sum, so that the ledger still sums to the balance (none when they agree, or the
/// account has unlimited credits or does not exist).
pub(super) const ADMIN_CREDITS: Sql = sql!(
    "INSERT INTO credit_ledger (account_id, delta, reason, created_at)
     SELECT a.id, a.credits - l.total, 'admin', $2
     FROM accounts a,
          (SELECT CAST(COALESCE(SUM(delta), 0) AS BIGINT) AS total FROM credit_ledger
           WHERE account_id = $1) l
     WHERE a.id = $1 AND a.credits IS NOT NULL AND a.credits <> l.total"
);

/// The public id of a ledger row's task, on SQLite the id it had if it was stored before ids
/// came from `seq` (PostgreSQL has no such tasks).
const LEDGER_TASK: Sql = Sql::each("t.id", "NULL::text");
const LEDGER_TASKS: Sql = Sql::each(" LEFT JOIN tasks t ON t.seq = l.task_seq", "");
const LEDGER: Sql = sql!(
    "SELECT l.id, l.task_seq, ",
    LEDGER_TASK,
    ", l.delta, l.reason, l.created_at FROM credit_ledger l",
    LEDGER_TASKS,
    " WHERE l.account_id = $1 ORDER BY l.id DESC LIMIT $2"
);

const INSERT_KEY: Sql = sql!(
    "INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)"
);
/// The dashboard's own key of an account ([`crate::accounts::studio`]): made once, kept as it is
/// after (a revoked one stays revoked).
const ENSURE_KEY: Sql = sql!(
    "INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
);
const KEY_OWNER: Sql = sql!(
    "SELECT k.id AS key_id, k.last_used_at, ",
    ACCOUNT,
    " FROM api_keys k JOIN accounts a ON a.id = k.account_id
     WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND NOT a.disabled"
);
const TOUCH_KEY: Sql = sql!("UPDATE api_keys SET last_used_at = $1 WHERE id = $2");
const ALL_KEYS: Sql = sql!(
    "SELECT k.id, a.email AS account_email, k.name, k.prefix, k.created_at, k.last_used_at,
         k.revoked_at
     FROM api_keys k JOIN accounts a ON a.id = k.account_id
     ORDER BY k.created_at, k.",
    MADE
);
/// The dashboard's own key (prefix `studio`, which no generated key has) is not the account's to
/// list or revoke.
const ACCOUNT_KEYS: Sql = sql!(
    "SELECT k.id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at FROM api_keys k
     WHERE k.account_id = $1 AND k.prefix <> 'studio' ORDER BY k.created_at DESC, k.",
    MADE,
    " DESC"
);
const REVOKE_KEY: Sql =
    sql!("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL");
const REVOKE_ACCOUNT_KEY: Sql = sql!(
    "UPDATE api_keys SET revoked_at = $1
     WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL"
);

const CREATE_SESSION: Sql = sql!(
    "INSERT INTO sessions (token_hash, account_id, created_at, expires_at)
     VALUES ($1, $2, $3, $4)"
);
const SESSION_ACCOUNT: Sql = sql!(
    "SELECT ",
    ACCOUNT,
    " FROM sessions s JOIN accounts a ON a.id = s.account_id
     WHERE s.token_hash = $1 AND s.expires_at > $2 AND NOT a.disabled"
);
const DELETE_SESSION: Sql = sql!("DELETE FROM sessions WHERE token_hash = $1");
const SIGN_OUT: Sql = sql!("DELETE FROM sessions WHERE account_id = $1");
const DELETE_EXPIRED_SESSIONS: Sql = sql!("DELETE FROM sessions WHERE expires_at <= $1");

const THROTTLE_EVENTS: Sql =
    sql!("SELECT COUNT(*) FROM sign_in_failures WHERE scope = $1 AND at >= $2");
const FORGET_THROTTLE_EVENTS: Sql = sql!("DELETE FROM sign_in_failures WHERE at < $1");
const RECORD_THROTTLE_EVENTS: Sql = sql!(
    sqlite: "INSERT INTO sign_in_failures (scope, at) SELECT value, $2 FROM json_each($1)",
    postgres: "INSERT INTO sign_in_failures (scope, at) SELECT s, $2 FROM UNNEST($1::text[]) AS s",
);
/// `substr` and `length` count characters on both databases, so a prefix of any characters
/// matches (LIKE would read `_` and `%` in emails as wildcards).
const CLEAR_THROTTLE_EVENTS: Sql = sql!(
    "DELETE FROM sign_in_failures
     WHERE scope = $1 OR substr(scope, 1, length($1) + 1) = $1 || ' '"
);

/// Change one column of an account; with `sign_out`, its sessions go in the same transaction
/// (an account that does not exist has none). Whether the account exists.
async fn set<S: SqlStore>(
    store: &S,
    sql: &Sql,
    account_id: &str,
    value: Arg<'_>,
    sign_out: bool,
) -> StoreResult<bool> {
    let (set, account) = ([value, account_id.into()], [account_id.into()]);
    let both = [Write::new(sql, &set), Write::new(&SIGN_OUT, &account)];
    let writes = if sign_out { &both[..] } else { &both[..1] };
    Ok(store.write(Durability::Synced, writes).await?[0] == 1)
}

#[async_trait]
impl<S: SqlStore> Accounts for S {
    async fn account_count(&self) -> StoreResult<i64> {
        let (count,) = self.reader().one(&COUNT, &[]).await?;
        Ok(count)
    }

    /// The account is read back once its transaction has committed.
    async fn create_user(&self, new: &NewAccount) -> StoreResult<Option<Account>> {
        let id = Uuid::new_v4().to_string();
        let account = [
            id.as_str().into(),
            new.email.trim().into(),
            new.signing_secret.as_str().into(),
            now_ms().into(),
            new.password_hash.as_deref().into(),
            new.admin.into(),
            new.credits.into(),
        ];
        let created = [id.as_str().into()];
        let writes = [
            Write::new(&CREATE, &account),
            Write::new(&SIGNUP_CREDITS, &created),
        ];
        if self.write(Durability::Synced, &writes).await?[0] == 0 {
            return Ok(None);
        }
        self.account_by_id(&id).await
    }

    async fn first_account(&self) -> StoreResult<Option<Account>> {
        self.reader().optional(&FIRST, &[]).await
    }

    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        self.reader()
            .optional(&BY_EMAIL, &[email.trim().into()])
            .await
    }

    async fn account_by_id(&self, account_id: &str) -> StoreResult<Option<Account>> {
        self.reader().optional(&BY_ID, &[account_id.into()]).await
    }

    async fn account_for_sign_in(
        &self,
        email: &str,
    ) -> StoreResult<Option<(Account, Option<String>)>> {
        let Some(account) = self.account_by_email(email).await? else {
            return Ok(None);
        };
        let (hash,) = self
            .reader()
            .one(&PASSWORD, &[account.id.as_str().into()])
            .await?;
        Ok(Some((account, hash)))
    }

    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        self.reader().all(&ALL, &[]).await
    }

    async fn set_password(&self, account_id: &str, password_hash: &str) -> StoreResult<bool> {
        set(self, &SET_PASSWORD, account_id, password_hash.into(), true).await
    }

    async fn set_admin(&self, account_id: &str, admin: bool) -> StoreResult<bool> {
        set(self, &SET_ADMIN, account_id, admin.into(), false).await
    }

    async fn set_disabled(&self, account_id: &str, disabled: bool) -> StoreResult<bool> {
        set(self, &SET_DISABLED, account_id, disabled.into(), disabled).await
    }

    async fn set_credits(&self, account_id: &str, credits: Option<i64>) -> StoreResult<bool> {
        let set = [credits.into(), account_id.into()];
        let ledger = [account_id.into(), now_ms().into()];
        let writes = [
            Write::new(&SET_CREDITS, &set),
            Write::new(&ADMIN_CREDITS, &ledger),
        ];
        Ok(self.write(Durability::Synced, &writes).await?[0] == 1)
    }

    async fn credit_ledger(&self, account_id: &str, limit: i64) -> StoreResult<Vec<LedgerRow>> {
        type Row = (i64, Option<i64>, Option<String>, i64, String, i64);
        let rows: Vec<Row> = self
            .reader()
            .all(&LEDGER, &[account_id.into(), limit.into()])
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, seq, legacy, delta, reason, created_at)| LedgerRow {
                id,
                task_id: seq.map(|seq| self.ids().of_row(seq, legacy.as_deref())),
                delta,
                reason,
                created_at,
            })
            .collect())
    }

    async fn set_signing_secret(&self, account_id: &str, secret: &str) -> StoreResult<()> {
        let args = [secret.into(), account_id.into()];
        self.execute(Durability::Synced, &SET_SIGNING_SECRET, &args)
            .await?;
        Ok(())
    }

    async fn insert_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<String> {
        write_key(self, &INSERT_KEY, account_id, name, prefix, key_hash).await
    }

    async fn ensure_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<()> {
        write_key(self, &ENSURE_KEY, account_id, name, prefix, key_hash).await?;
        Ok(())
    }

    async fn key_owner(&self, key_hash: &[u8]) -> StoreResult<Option<KeyOwner>> {
        let row: Option<KeyOwnerRow> = self
            .reader()
            .optional(&KEY_OWNER, &[key_hash.into()])
            .await?;
        Ok(row.map(KeyOwnerRow::into_owner))
    }

    async fn touch_api_key(&self, key_id: &str, at: i64) -> StoreResult<()> {
        let args = [at.into(), key_id.into()];
        self.execute(Durability::Committed, &TOUCH_KEY, &args)
            .await?;
        Ok(())
    }

    async fn list_api_keys(&self) -> StoreResult<Vec<ApiKeyInfo>> {
        self.reader().all(&ALL_KEYS, &[]).await
    }

    async fn account_keys(&self, account_id: &str) -> StoreResult<Vec<KeyRow>> {
        self.reader().all(&ACCOUNT_KEYS, &[account_id.into()]).await
    }

    async fn revoke_api_key(&self, id: &str) -> StoreResult<bool> {
        let args = [now_ms().into(), id.into()];
        Ok(self.execute(Durability::Synced, &REVOKE_KEY, &args).await? == 1)
    }

    async fn revoke_account_key(&self, account_id: &str, key_id: &str) -> StoreResult<bool> {
        let args = [now_ms().into(), key_id.into(), account_id.into()];
        Ok(self
            .execute(Durability::Synced, &REVOKE_ACCOUNT_KEY, &args)
            .await?
            == 1)
    }

    async fn create_session(
        &self,
        account_id: &str,
        token_hash: &[u8; 32],
        expires_at: i64,
    ) -> StoreResult<()> {
        let args = [
            token_hash.as_slice().into(),
            account_id.into(),
            now_ms().into(),
            expires_at.into(),
        ];
        self.execute(Durability::Synced, &CREATE_SESSION, &args)
            .await?;
        Ok(())
    }

    async fn session_account(
        &self,
        token_hash: &[u8; 32],
        now: i64,
    ) -> StoreResult<Option<Account>> {
        let args = [token_hash.as_slice().into(), now.into()];
        self.reader().optional(&SESSION_ACCOUNT, &args).await
    }

    async fn delete_session(&self, token_hash: &[u8; 32]) -> StoreResult<bool> {
        let args = [token_hash.as_slice().into()];
        Ok(self
            .execute(Durability::Synced, &DELETE_SESSION, &args)
            .await?
            == 1)
    }

    async fn delete_account_sessions(&self, account_id: &str) -> StoreResult<u64> {
        self.execute(Durability::Synced, &SIGN_OUT, &[account_id.into()])
            .await
    }

    async fn delete_expired_sessions(&self, now: i64) -> StoreResult<u64> {
        self.execute(
            Durability::Committed,
            &DELETE_EXPIRED_SESSIONS,
            &[now.into()],
        )
        .await
    }

    async fn throttle_events(&self, scope: &str, since: i64) -> StoreResult<i64> {
        let args = [scope.into(), since.into()];
        let (count,) = self.reader().one(&THROTTLE_EVENTS, &args).await?;
        Ok(count)
    }

    async fn record_throttle_events(
        &self,
        scopes: &[String],
        at: i64,
        forget_before: i64,
    ) -> StoreResult<()> {
        let forget = [forget_before.into()];
        let record = [scopes.into(), at.into()];
        let writes = [
            Write::new(&FORGET_THROTTLE_EVENTS, &forget),
            Write::new(&RECORD_THROTTLE_EVENTS, &record),
        ];
        self.write(Durability::Committed, &writes).await?;
        Ok(())
    }

    async fn clear_throttle_events(&self, scope: &str) -> StoreResult<()> {
        self.execute(
            Durability::Committed,
            &CLEAR_THROTTLE_EVENTS,
            &[scope.into()],
        )
        .await?;
        Ok(())
    }
}

/// Write a key's row with `sql` ([`INSERT_KEY`] or [`ENSURE_KEY`]); the id it was given.
async fn write_key(
    store: &impl SqlStore,
    sql: &Sql,
    account_id: &str,
    name: &str,
    prefix: &str,
    key_hash: &[u8],
) -> StoreResult<String> {
    let id = Uuid::new_v4().to_string();
    let args = [
        id.as_str().into(),
        account_id.into(),
        name.into(),
        prefix.into(),
        key_hash.into(),
        now_ms().into(),
    ];
    store.execute(Durability::Synced, sql, &args).await?;
    Ok(id)
}
