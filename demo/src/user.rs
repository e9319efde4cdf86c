//! A user's footprint in one community, written the way the relay writes it (rows as the serving
//! role with plain SQL, so the write fences judge them; objects and keys under the user's
//! serving-write lease): a membership (or none, for a former participant), events, an
//! allow-list entry, agents with their Redis namespace, media uploads (content-addressed, so an
//! upload of content someone else also uploaded shares their object) with the thumbnail and
//! metadata document the relay derives from each, and per-user keys of the declared shapes.
//!
//! The relay's upload protocol: the `media_uploads` row is recorded *before* the object is put, so
//! a user deletion counting references can never miss an upload whose version it is about to list
//! (see `docs/data-model.md`, "Media decisions").

use sha2::{Digest, Sha256};
use uuid::Uuid;

use activities::redis::Cache;
use activities::s3::ObjectStore;
use activities::store::Store;
use activities::taxonomy::derived_keys;
use activities::taxonomy::user_keys::user_key_prefix;
use serving::{ServingLeaseConfig, acquire_user_serving_write_with};

use super::SeedError;

/// What to write for one user in one community.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserSeed {
    /// A member today (a membership row); `false` writes no membership (a former participant).
    pub member: bool,
    /// Membership role when a member (`member`, `owner`, …).
    pub role: Option<String>,
    /// Events authored.
    pub events: u32,
    /// An allow-list entry.
    pub allowlisted: bool,
    /// Agents acting for the user, each with two keys in its namespace.
    pub agents: u32,
    /// Uploads: the content of each (same content = same object).
    pub uploads: Vec<Vec<u8>>,
    /// Per-user keys under `buzz:{community}:user:{pubkey}`, of the declared shapes in turn
    /// ([`user_key`]).
    pub keys: u32,
}

/// What was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserSeedReport {
    /// Agent ids.
    pub agents: Vec<Uuid>,
    /// Object keys of the uploads, with the version each put created.
    pub uploads: Vec<(String, String)>,
    /// The objects derived from each upload (thumbnail, metadata document), with their versions.
    pub derived: Vec<(String, String)>,
    /// Redis keys written (user and agent namespaces).
    pub keys: Vec<String>,
}

/// The content address of `body` in `community`: `media/{community}/{sha256}`.
pub fn media_key(community_id: Uuid, body: &[u8]) -> (String, String) {
    let sha = hex::encode(Sha256::digest(body));
    (format!("media/{}/{sha}", community_id.hyphenated()), sha)
}

/// Writes `seed` for `pubkey` in `community_id`, as the serving side does.
pub async fn seed_user(
    serving: &Store,
    objects: &ObjectStore,
    cache: &Cache,
    community_id: Uuid,
    pubkey: &str,
    seed: &UserSeed,
) -> Result<UserSeedReport, SeedError> {
    let pool = serving.pool();
    let lease = ServingLeaseConfig::default();
    if seed.member {
        sqlx::query(
            "INSERT INTO buzz.memberships (community_id, pubkey, role) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(community_id)
        .bind(pubkey)
        .bind(seed.role.as_deref().unwrap_or("member"))
        .execute(pool)
        .await
        .map_err(activities::store::StoreError::from)?;
    }
    for n in 0..seed.events {
        let id = hex::encode(Sha256::digest(Uuid::new_v4().as_bytes()));
        sqlx::query(
            "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
             VALUES ($1, $2, $3, 1, $4)",
        )
        .bind(id)
        .bind(community_id)
        .bind(pubkey)
        .bind(format!("note {n} by {}", &pubkey[..8]))
        .execute(pool)
        .await
        .map_err(activities::store::StoreError::from)?;
    }
    if seed.allowlisted {
        sqlx::query(
            "INSERT INTO buzz.pubkey_allowlist (community_id, pubkey, added_by) VALUES ($1, $2, 'admin') \
             ON CONFLICT DO NOTHING",
        )
        .bind(community_id)
        .bind(pubkey)
        .execute(pool)
        .await
        .map_err(activities::store::StoreError::from)?;
    }
    let mut report = UserSeedReport::default();
    for n in 0..seed.agents {
        let id = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO buzz.agents (id, community_id, pubkey, name) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(community_id)
        .bind(pubkey)
        .bind(format!("agent {n}"))
        .execute(pool)
        .await
        .map_err(activities::store::StoreError::from)?;
        for suffix in ["state", "inbox"] {
            let key = format!(
                "buzz:{}:agent:{}:{suffix}",
                community_id.hyphenated(),
                id.hyphenated()
            );
            set_key(serving, cache, community_id, pubkey, &lease, &key).await?;
            report.keys.push(key);
        }
        report.agents.push(id);
    }
    for body in &seed.uploads {
        let (key, sha) = media_key(community_id, body);
        // Row first, then the object (the relay's upload protocol).
        sqlx::query(
            "INSERT INTO buzz.media_uploads (id, community_id, sha256, object_key, bytes, uploader_pubkey) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(Uuid::new_v4())
        .bind(community_id)
        .bind(&sha)
        .bind(&key)
        .bind(i64::try_from(body.len()).unwrap_or(i64::MAX))
        .bind(pubkey)
        .execute(pool)
        .await
        .map_err(activities::store::StoreError::from)?;
        let guard =
            acquire_user_serving_write_with(serving, community_id, pubkey, "media_put", &lease)
                .await?;
        let version = guard
            .protect(objects.put_object(&key, body.clone()))
            .await??;
        // What the relay derives from every upload: its thumbnail and metadata document.
        for derived in derived_keys(&key).into_iter().flatten() {
            let rendition = format!("{derived} of {sha}").into_bytes();
            let derived_version = guard
                .protect(objects.put_object(&derived, rendition))
                .await??;
            report.derived.push((derived, derived_version));
        }
        guard.finish().await?;
        report.uploads.push((key, version));
    }
    for n in 0..seed.keys {
        let key = user_key(community_id, pubkey, n);
        set_key(serving, cache, community_id, pubkey, &lease, &key).await?;
        report.keys.push(key);
    }
    Ok(report)
}

/// The `n`-th per-user key the seeder writes, cycling through the declared shapes
/// (`taxonomy::user_keys`): the bare profile key, presence, inbox, then sessions.
pub fn user_key(community_id: Uuid, pubkey: &str, n: u32) -> String {
    let prefix = user_key_prefix(community_id, pubkey);
    match n {
        0 => prefix,
        1 => format!("{prefix}:presence"),
        2 => format!("{prefix}:inbox"),
        n => format!("{prefix}:session:{n}"),
    }
}

/// Sets one key under the user's serving-write lease.
async fn set_key(
    serving: &Store,
    cache: &Cache,
    community_id: Uuid,
    pubkey: &str,
    lease: &ServingLeaseConfig,
    key: &str,
) -> Result<(), SeedError> {
    let guard =
        acquire_user_serving_write_with(serving, community_id, pubkey, "redis_set", lease).await?;
    guard
        .protect(cache.set(key, format!("value of {key}").as_bytes()))
        .await??;
    guard.finish().await?;
    Ok(())
}
