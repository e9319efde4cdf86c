//! Tenant data for the tests: hosts no other test uses, the standard small plan, seeding through
//! the serving API as the serving role.

use std::time::Duration;

use activities::s3::ObjectVersionRef;
use activities::serving::ServingWriteLease;
use demo::{SeedPlan, SeedReport, seed_community};
use uuid::Uuid;

use crate::snapshot::{Kept, snapshot};
use crate::stack::Stack;

/// A host name no other test uses.
pub fn unique_host(tag: &str) -> String {
    format!("{tag}-{}.test.example", Uuid::new_v4().simple())
}

/// A small but complete tenant: versions, delete markers, rows and keys.
pub fn small_plan() -> SeedPlan {
    SeedPlan {
        objects: 6,
        versions: 2,
        delete_markers: 2,
        rows: 5,
        redis_keys: 7,
        parallelism: 8,
    }
}

/// A tenant small enough to keep a recorded history small, complete enough to touch every store.
pub fn tiny_plan() -> SeedPlan {
    SeedPlan {
        objects: 3,
        versions: 2,
        delete_markers: 1,
        rows: 3,
        redis_keys: 3,
        parallelism: 4,
    }
}

/// `objects` objects of three versions each, with delete markers, rows and keys: enough
/// versions that deletion, chunk by chunk, runs long enough to be interrupted.
pub fn paced_plan(objects: u32) -> SeedPlan {
    SeedPlan {
        objects,
        versions: 3,
        delete_markers: 10,
        rows: 5,
        redis_keys: 5,
        parallelism: 16,
    }
}

/// The `community submit` flags that delete one DeleteObjects call at a time, every chunk in
/// one activity call.
pub const ONE_DELETE_AT_A_TIME: [&str; 4] =
    ["--delete-parallelism", "1", "--chunks-per-call", "1000"];

/// A worker's settings that make object deletion take seconds: one version per manifest chunk,
/// two deletes per second per prefix (room to act between the freeze and the last delete).
pub const ONE_VERSION_PER_CHUNK_SLOWLY: [(&str, &str); 2] = [
    ("BUZZ_MANIFEST_CHUNK_ENTRIES", "1"),
    ("BUZZ_DELETE_RATE_PER_PREFIX", "2"),
];

/// Puts an object under `community`'s media prefix that no writer of ours makes (a key of
/// unknown shape): the inventory blocks on it, naming it, until it is removed. Returns the key
/// and the version written.
pub async fn plant_stray_key(stack: &Stack, community: Uuid) -> (String, String) {
    let key = format!("media/{community}/not-a-content-hash.tmp");
    let version = stack
        .objects
        .put_object(&key, b"stray".to_vec())
        .await
        .unwrap_or_else(|e| panic!("planting {key}: {e}"));
    (key, version)
}

/// Deletes every version of `key` under `community`'s media prefix: the operator's remedy
/// for a stray key the inventory blocked on.
pub async fn remove_stray_key(stack: &Stack, community: Uuid, key: &str) {
    let versions: Vec<ObjectVersionRef> = stack
        .objects
        .snapshot_prefix(&format!("media/{community}/"))
        .await
        .unwrap_or_else(|e| panic!("listing media/{community}/: {e}"))
        .into_iter()
        .filter(|v| v.key == key)
        .map(|v| v.version_ref())
        .collect();
    stack
        .objects
        .delete_versions(&versions)
        .await
        .unwrap_or_else(|e| panic!("deleting {key}: {e}"));
}

/// Seeds a community through the serving API, as the serving role.
pub async fn seed(stack: &Stack, host: &str, plan: SeedPlan) -> SeedReport {
    seed_community(&stack.serving, &stack.objects, &stack.cache, host, plan)
        .await
        .unwrap_or_else(|e| panic!("seeding {host}: {e}"))
}

/// Seeds a community of [`small_plan`] on a fresh host named after `tag`; its id.
pub async fn small_community(stack: &Stack, tag: &str) -> Uuid {
    seed(stack, &unique_host(tag), small_plan())
        .await
        .community_id
}

/// A community a story seeded on a host of its own: a deletion's target, or a neighbour it must
/// leave alone.
pub struct Tenant {
    /// Its host.
    pub host: String,
    /// Its community id.
    pub id: Uuid,
}

impl Tenant {
    /// Seeds a community of `plan` through the serving API on a fresh host named after `tag`.
    pub async fn seed(stack: &Stack, tag: &str, plan: SeedPlan) -> Tenant {
        let host = unique_host(tag);
        let id = seed(stack, &host, plan).await.community_id;
        Tenant { host, id }
    }

    /// What it holds now in the three stores, to prove later that nothing of it changed.
    pub async fn kept(&self, stack: &Stack) -> Kept {
        Kept::now(stack, self.id).await
    }

    /// Panics, listing what is left, unless nothing of it is left in any store.
    pub async fn assert_gone(&self, stack: &Stack, what: &str) {
        snapshot(stack, self.id).await.assert_gone(what);
    }
}

/// An S3 put admitted for `community` under a lease of `ttl` held by `owner`, whose serving
/// process is then never heard of again (crashed, or stalled before its put): nothing renews or
/// releases the lease.
pub async fn abandoned_s3_put_lease(
    stack: &Stack,
    community: Uuid,
    owner: &str,
    ttl: Duration,
) -> ServingWriteLease {
    let serving = stack.serving.serving();
    let lease = serving.acquire_serving_write_lease(community, "s3_put", owner, ttl);
    lease
        .await
        .unwrap_or_else(|e| panic!("an s3_put lease for {community}: {e}"))
}
