//! Moderation term lists ([`ModerationLists`]), once for both stores.

use async_trait::async_trait;

use super::{sql, Durability, Sql, SqlStore};
use crate::domain::moderation::TermList;
use crate::store::{ModerationLists, StoreError, StoreResult};

const ALL: Sql = sql!("SELECT name, terms, updated_at FROM moderation_lists ORDER BY name");
const ONE: Sql = sql!("SELECT terms FROM moderation_lists WHERE name = $1");
const PUT: Sql = sql!(
    "INSERT INTO moderation_lists (name, terms, updated_at) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET terms = excluded.terms, updated_at = excluded.updated_at"
);
const DELETE: Sql = sql!("DELETE FROM moderation_lists WHERE name = $1");
/// Changes whenever a list is put or removed: the count, and the sum of the times written.
const VERSION: Sql =
    sql!("SELECT COUNT(*), CAST(COALESCE(SUM(updated_at), 0) AS BIGINT) FROM moderation_lists");

fn terms_of(text: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Other(std::sync::Arc::new(e)))
}

#[async_trait]
impl<S: SqlStore> ModerationLists for S {
    async fn moderation_lists(&self) -> StoreResult<Vec<(TermList, i64)>> {
        let rows: Vec<(String, String, i64)> = self.reader().all(&ALL, &[]).await?;
        rows.into_iter()
            .map(|(name, terms, at)| {
                Ok((
                    TermList {
                        name,
                        terms: terms_of(&terms)?,
                    },
                    at,
                ))
            })
            .collect()
    }

    async fn moderation_list(&self, name: &str) -> StoreResult<Option<Vec<String>>> {
        let row: Option<(String,)> = self.reader().optional(&ONE, &[name.into()]).await?;
        row.map(|(terms,)| terms_of(&terms)).transpose()
    }

    async fn put_moderation_list(&self, list: &TermList, at: i64) -> StoreResult<()> {
        let terms = serde_json::to_string(&list.terms).expect("strings serialize");
        let args = [list.name.as_str().into(), terms.as_str().into(), at.into()];
        self.execute(Durability::Synced, &PUT, &args).await?;
        Ok(())
    }

    async fn delete_moderation_list(&self, name: &str) -> StoreResult<bool> {
        let removed = self
            .execute(Durability::Synced, &DELETE, &[name.into()])
            .await?;
        Ok(removed > 0)
    }

    async fn moderation_version(&self) -> StoreResult<(i64, i64)> {
        self.reader().one(&VERSION, &[]).await
    }
}
