//! Demo rows: communities and rows in the six tenant tables of the model, written with plain SQL
//! the way the relay writes them, so the write-fence trigger guards them exactly as it guards the
//! relay's own writes.

use activities::store::RequestError;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

use activities::store::{Community, Store, StoreError, StoreResult, count_i64, normalize_host};

/// Creates the community served under `host` with a fresh random id, or returns the existing
/// one (idempotent on host). Its fence row is created `serving` by a database trigger.
pub async fn create_community(store: &Store, host: &str) -> StoreResult<Community> {
    let host = normalize_host(host)?;
    sqlx::query(
        "INSERT INTO buzz.communities (id, host, display_name) VALUES ($1, $2, $3) \
         ON CONFLICT (host) DO NOTHING",
    )
    .bind(Uuid::new_v4())
    .bind(&host)
    .bind(format!("Demo community {host}"))
    .execute(store.pool())
    .await?;
    store
        .community_by_host(&host)
        .await?
        .ok_or(StoreError::Request(RequestError::UnknownHost { host }))
}

/// Writes `rows_per_table` realistic rows into each of the six tenant tables of the model
/// (channels, events, memberships, pubkey allowlist, agents, media uploads) and returns how
/// many each received. Refused with SQLSTATE BZ001 once the community is fenced.
pub async fn seed_rows(
    store: &Store,
    community_id: Uuid,
    rows_per_table: u64,
) -> StoreResult<Vec<TableCount>> {
    let rows = count_i64("rows_per_table", rows_per_table)?;
    let mut tx = store.pool().begin().await?;
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
    store: &Store,
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
    .execute(store.pool())
    .await?;
    Ok(id)
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
