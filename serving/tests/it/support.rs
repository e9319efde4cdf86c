//! Fixtures: the relay's handle (the serving role), the owner's store for what a relay cannot do
//! (creating a community, ending a lease behind the holder's back), and lease timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::store::{Community, Store};
use serving::{ServingDb, ServingLeaseConfig};
use uuid::Uuid;

/// The serving crate's handle as the serving role, on a migrated schema.
pub async fn serving_db() -> ServingDb {
    testkit::stack::serving_db(4).await
}

/// The schema owner's store, on a migrated schema.
pub async fn owner() -> Store {
    Store::from_pool(testkit::stack::owner_pool(4).await)
}

/// A fresh community with a unique host (tests run in parallel).
pub async fn community(owner: &Store) -> Community {
    let host = format!("t-{}.test.example", Uuid::new_v4().simple());
    demo::create_community(owner, &host)
        .await
        .expect("create community")
}

/// A lease configuration with this owner and timing.
pub fn config(owner: &str, ttl_ms: u64, renew_ms: u64) -> ServingLeaseConfig {
    ServingLeaseConfig {
        ttl: Duration::from_millis(ttl_ms),
        renew_every: Duration::from_millis(renew_ms),
        owner: owner.to_owned(),
    }
}

/// Sets a flag when dropped: proves a protected future was cancelled, not left running.
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
