//! Communities and demo rows: what the serving path would write, for demos, tests and benchmarks.
//!
//! Rows are written with plain SQL into the tenant tables, so the write-fence trigger guards them
//! exactly as it guards the relay's own writes.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use super::catalog::COMMUNITIES_TABLE;
use super::error::{StoreError, StoreResult};
use super::tenant_tree::{count_table_rows, tenant_tables};
use super::{Store, count_i64, count_u64};

/// Longest DNS name.
const MAX_HOST_LEN: usize = 253;

/// A tenant of the relay platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Community {
    /// Community id (lowercase hyphenated UUID in every key that names it).
    pub id: Uuid,
    /// The host it is served under, lower-cased.
    pub host: String,
    /// Display name.
    pub display_name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A community's rows in one table, each as JSON text, sorted: two snapshots are equal exactly
/// when the rows are byte-identical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSnapshot {
    /// Schema-qualified table.
    pub table: String,
    /// Rows as `to_jsonb(row)::text`, sorted.
    pub rows: Vec<String>,
}

/// The canonical spelling of a host: trimmed, lower-cased, without a trailing dot.
pub(crate) fn normalize_host(host: &str) -> StoreResult<String> {
    let host = host.trim().trim_end_matches('.').to_lowercase();
    let invalid = |reason: &str| StoreError::InvalidInput {
        field: "host",
        reason: format!("{host:?} {reason}"),
    };
    if host.is_empty() {
        return Err(invalid("is empty"));
    }
    if host.len() > MAX_HOST_LEN {
        return Err(invalid("is longer than 253 characters"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(invalid("is not a host name"));
    }
    Ok(host)
}

impl Store {
    /// The community served under `host` (matched after normalising), if any.
    pub async fn community_by_host(&self, host: &str) -> StoreResult<Option<Community>> {
        let host = normalize_host(host)?;
        let community = sqlx::query_as::<_, Community>(
            "SELECT id, host, display_name, created_at FROM buzz.communities WHERE host = $1",
        )
        .bind(host)
        .fetch_optional(&self.pool)
        .await?;
        Ok(community)
    }

    /// The community with this id, if it still exists.
    pub async fn community_by_id(&self, community_id: Uuid) -> StoreResult<Option<Community>> {
        let community = sqlx::query_as::<_, Community>(
            "SELECT id, host, display_name, created_at FROM buzz.communities WHERE id = $1",
        )
        .bind(community_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(community)
    }

    /// Creates the community served under `host` with a fresh random id, or returns the existing
    /// one (idempotent on host). Its fence row is created `serving` by a database trigger.
    pub async fn create_community(&self, host: &str) -> StoreResult<Community> {
        let host = normalize_host(host)?;
        sqlx::query(
            "INSERT INTO buzz.communities (id, host, display_name) VALUES ($1, $2, $3) \
             ON CONFLICT (host) DO NOTHING",
        )
        .bind(Uuid::new_v4())
        .bind(&host)
        .bind(format!("Demo community {host}"))
        .execute(&self.pool)
        .await?;
        self.community_by_host(&host)
            .await?
            .ok_or(StoreError::UnknownHost { host })
    }

    /// Writes `rows_per_table` realistic rows into each of the six tenant tables of the model
    /// (channels, events, memberships, pubkey allowlist, agents, media uploads) and returns how
    /// many each received. Refused with SQLSTATE BZ001 once the community is fenced.
    pub async fn seed_rows(
        &self,
        community_id: Uuid,
        rows_per_table: u64,
    ) -> StoreResult<Vec<TableCount>> {
        let rows = count_i64("rows_per_table", rows_per_table)?;
        let mut tx = self.pool.begin().await?;
        let mut counts = Vec::with_capacity(SEED_STATEMENTS.len());
        for (table, sql) in SEED_STATEMENTS {
            let inserted = sqlx::query(sql)
                .bind(community_id)
                .bind(rows)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            counts.push(TableCount {
                table: table.to_owned(),
                rows: inserted,
            });
        }
        tx.commit().await?;
        Ok(counts)
    }

    /// Records one uploaded object the way the relay's media path does (`buzz.media_uploads`).
    pub async fn record_media_upload(
        &self,
        community_id: Uuid,
        sha256: &str,
        object_key: &str,
        bytes: u64,
    ) -> StoreResult<Uuid> {
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(community_id)
        .bind(sha256)
        .bind(object_key)
        .bind(count_i64("bytes", bytes)?)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// Every row of the community in every tenant table plus its community row, as sorted JSON
    /// text per table (tables sorted, `buzz.communities` last). Used to prove another community
    /// was left byte-identical.
    pub async fn snapshot_rows(&self, community_id: Uuid) -> StoreResult<Vec<TableSnapshot>> {
        let mut conn = self.pool.acquire().await?;
        let mut snapshots = Vec::new();
        for table in tenant_tables(&mut conn).await? {
            let mut rows: Vec<String> = Vec::new();
            for heap in table.heaps() {
                let sql = format!(
                    "SELECT to_jsonb(t)::text FROM ONLY {} t WHERE community_id = $1",
                    heap.sql_name()
                );
                let heap_rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(community_id)
                    .fetch_all(&mut *conn)
                    .await?;
                rows.extend(heap_rows);
            }
            rows.sort();
            snapshots.push(TableSnapshot {
                table: table.qualified(),
                rows,
            });
        }
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT to_jsonb(c)::text FROM buzz.communities c WHERE id = $1 ORDER BY 1",
        )
        .bind(community_id)
        .fetch_all(&mut *conn)
        .await?;
        snapshots.push(TableSnapshot {
            table: COMMUNITIES_TABLE.to_owned(),
            rows,
        });
        Ok(snapshots)
    }

    /// Rows of the community per tenant table (every heap of its tree counted once, whether or
    /// not its fence is sound: counting is how a leftover is found), `buzz.communities` (0 or 1)
    /// last.
    pub async fn count_community_rows(&self, community_id: Uuid) -> StoreResult<Vec<TableCount>> {
        let mut conn = self.pool.acquire().await?;
        let mut counts = Vec::new();
        for table in tenant_tables(&mut conn).await? {
            counts.push(TableCount {
                table: table.qualified(),
                rows: count_table_rows(&mut conn, &table, community_id).await?,
            });
        }
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM buzz.communities WHERE id = $1")
            .bind(community_id)
            .fetch_one(&mut *conn)
            .await?;
        counts.push(TableCount {
            table: COMMUNITIES_TABLE.to_owned(),
            rows: count_u64(rows),
        });
        Ok(counts)
    }
}

/// One INSERT per tenant table of the demo model; `$1` is the community, `$2` the row count.
/// Random identifiers make repeated seeding add rows rather than collide.
const SEED_STATEMENTS: [(&str, &str); 6] = [
    (
        "buzz.channels",
        "INSERT INTO buzz.channels (id, community_id, name, topic) \
         SELECT gen_random_uuid(), $1, 'channel-' || substr(md5(random()::text), 1, 12), \
                'Demo channel ' || g \
         FROM generate_series(1, $2) g ON CONFLICT DO NOTHING",
    ),
    (
        "buzz.events",
        "INSERT INTO buzz.events (id, community_id, channel_id, pubkey, kind, content) \
         SELECT md5(random()::text) || md5(random()::text), $1, \
                (SELECT c.id FROM buzz.channels c WHERE c.community_id = $1 ORDER BY c.id LIMIT 1), \
                md5(random()::text) || md5(random()::text), \
                (ARRAY[1, 7, 9, 40, 42])[1 + g % 5], 'demo message ' || g \
         FROM generate_series(1, $2) g ON CONFLICT DO NOTHING",
    ),
    (
        "buzz.memberships",
        "INSERT INTO buzz.memberships (community_id, pubkey, role) \
         SELECT $1, md5(random()::text) || md5(random()::text), \
                CASE WHEN g = 1 THEN 'owner' ELSE 'member' END \
         FROM generate_series(1, $2) g ON CONFLICT DO NOTHING",
    ),
    (
        "buzz.pubkey_allowlist",
        "INSERT INTO buzz.pubkey_allowlist (community_id, pubkey, added_by) \
         SELECT $1, md5(random()::text) || md5(random()::text), 'demo-seed' \
         FROM generate_series(1, $2) g ON CONFLICT DO NOTHING",
    ),
    (
        "buzz.agents",
        "INSERT INTO buzz.agents (id, community_id, pubkey, name, config) \
         SELECT gen_random_uuid(), $1, md5(random()::text) || md5(random()::text), \
                'agent-' || g, jsonb_build_object('model', 'demo', 'temperature', 0.2) \
         FROM generate_series(1, $2) g",
    ),
    (
        "buzz.media_uploads",
        "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes) \
         SELECT gen_random_uuid(), $1, h, 'media/' || $1::text || '/' || h, \
                (1024 + random() * 1000000)::bigint \
         FROM (SELECT g, md5(random()::text) || md5(random()::text) AS h \
               FROM generate_series(1, $2) g) s",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalised_to_lower_case_without_trailing_dot() {
        assert_eq!(
            normalize_host(" Relay.Example.COM. ").ok(),
            Some("relay.example.com".into())
        );
        assert!(normalize_host("  ").is_err());
        assert!(normalize_host("a b").is_err());
        assert!(normalize_host("http://x").is_err());
    }
}
