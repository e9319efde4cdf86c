//! Fixtures: the relay's handle (the serving role), the owner's store for what a relay cannot do
//! (creating a community, ending a lease behind the holder's back), and lease timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::store::{Community, Store};
use serving::{ServingDb, ServingLeaseConfig, ServingWriteGuard, acquire_serving_write_with};
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

/// Which role admits a test's write: the relay's (serving) or the schema owner's.
#[derive(Clone, Copy)]
pub enum Via {
    /// The serving role's handle, as a relay holds it.
    Serving,
    /// The owner's store, converted into a serving handle.
    Owner,
}

/// A fresh community and one write admitted on it as `relay-a` with this timing.
pub struct Admitted {
    /// The owner's store (to read live leases, end a lease behind the holder's back).
    pub store: Store,
    /// The community the write is for.
    pub community: Community,
    /// The admitted write's guard.
    pub guard: ServingWriteGuard,
}

/// Admits an `operation` write on a fresh community through `via`, with this lease timing.
pub async fn admitted(via: Via, operation: &str, ttl_ms: u64, renew_ms: u64) -> Admitted {
    let store = owner().await;
    let community = community(&store).await;
    let db = match via {
        Via::Serving => serving_db().await,
        Via::Owner => ServingDb::from(&store),
    };
    let guard = acquire_serving_write_with(
        db,
        community.id,
        operation,
        &config("relay-a", ttl_ms, renew_ms),
    )
    .await
    .expect("acquire");
    Admitted {
        store,
        community,
        guard,
    }
}

/// How many serving writes of the community are live, as `db` reads them.
pub async fn live_count(db: impl Into<ServingDb>, community_id: Uuid) -> u64 {
    db.into()
        .live_serving_writes(community_id)
        .await
        .expect("live")
        .count
}

/// A write that would run for 30 s, and the flag its future sets when it is dropped.
pub fn watched_write() -> (Arc<AtomicBool>, impl Future<Output = ()>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let write = async move {
        let _flag = flag;
        tokio::time::sleep(Duration::from_secs(30)).await;
    };
    (dropped, write)
}

/// Sets a flag when dropped: proves a protected future was cancelled, not left running.
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
