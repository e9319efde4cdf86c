//! Tenant data for the tests: hosts no other test uses, the standard small plan, seeding through
//! the serving API as the serving role.

use demo::{SeedPlan, SeedReport, seed_community};
use uuid::Uuid;

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

/// Seeds a community through the serving API, as the serving role.
pub async fn seed(stack: &Stack, host: &str, plan: SeedPlan) -> SeedReport {
    seed_community(&stack.serving, &stack.objects, &stack.cache, host, plan)
        .await
        .unwrap_or_else(|e| panic!("seeding {host}: {e}"))
}
