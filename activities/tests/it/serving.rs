//! Serving-write leases against the deletion's fence and drain, against a real PostgreSQL
//! (`bash deploy/local/up && source .state/env`). The guard's own behaviour (renewal, loss,
//! the protected-operation bound, release) is tested with the `serving` crate
//! (`serving/tests/it/guard.rs`).

use crate::store_support;
use activities::store::FenceError;

use std::time::Duration;

use activities::serving::{ServingError, ServingLeaseConfig, acquire_serving_write_with};
use activities::store::{Stage, StoreError};
use store_support::*;

fn config(owner: &str, ttl_ms: u64, renew_ms: u64) -> ServingLeaseConfig {
    ServingLeaseConfig {
        ttl: Duration::from_millis(ttl_ms),
        renew_every: Duration::from_millis(renew_ms),
        owner: owner.to_owned(),
    }
}

#[tokio::test]
async fn acquisition_is_refused_once_quiescing_and_once_fenced() {
    let store = store().await;
    let serving = serving_store().await;
    let fixture = approved(&store, 0).await;
    let cfg = config("relay-a", 5_000, 1_000);
    fixture.quiesce().await;
    let refused = acquire_serving_write_with(&serving, fixture.community.id, "s3_put", &cfg).await;
    match refused {
        Err(error) => {
            assert!(error.is_refused_because_fenced(), "{error}");
            assert_matches!(error, ServingError::Quiescing { .. });
        }
        Ok(_) => panic!("a quiescing community admitted a new serving write"),
    }
    store.fence(&fixture.token).await.expect("fence");
    let refused =
        acquire_serving_write_with(&serving, fixture.community.id, "redis_write", &cfg).await;
    match refused {
        Err(error) => {
            assert!(error.is_refused_because_fenced(), "{error}");
            assert_matches!(error, ServingError::Fenced { .. });
        }
        Ok(_) => panic!("a fenced community admitted a serving write"),
    }
}

#[tokio::test]
async fn an_admitted_write_finishes_during_quiescing_and_then_the_fence_closes() {
    let store = store().await;
    let serving = serving_store().await;
    let fixture = approved(&store, 0).await;
    let guard = acquire_serving_write_with(
        &serving,
        fixture.community.id,
        "s3_put",
        &config("relay-a", 1_500, 200),
    )
    .await
    .expect("admitted while serving");
    fixture.quiesce().await;

    let refused = store.fence(&fixture.token).await;
    assert_matches!(
        refused,
        Err(StoreError::Fence(FenceError::ServingWritesLive { .. }))
    );
    // The admitted write outlives its TTL while quiescing: the heartbeat keeps renewing.
    guard
        .protect(tokio::time::sleep(Duration::from_millis(2_500)))
        .await
        .expect("admitted write completes during quiescing");
    guard.finish().await.expect("finish");

    store
        .fence(&fixture.token)
        .await
        .expect("fence after the write drained");
    assert_eq!(fixture.stage().await, Stage::Fenced);
}

#[tokio::test]
async fn the_freeze_gate_holds_an_expired_unreleased_lease_until_expiry_plus_the_bound() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    let community_id = fixture.community.id;
    let bound = Duration::from_secs(2);
    // A write that finished and released before the fence does not count.
    let finished = store
        .serving()
        .acquire_serving_write_lease(
            community_id,
            "redis_write",
            "relay-done",
            Duration::from_secs(30),
        )
        .await
        .expect("acquire");
    assert!(
        store
            .release_serving_write_lease(&finished)
            .await
            .expect("release")
    );
    // A serving process admits a write and stalls: no heartbeat, no release.
    let stalled = store
        .serving()
        .acquire_serving_write_lease(
            community_id,
            "s3_put",
            "relay-stalled",
            Duration::from_secs(1),
        )
        .await
        .expect("acquire");
    fixture.quiesce().await;
    // The fence waits for it while it is live, and closes once it expired.
    let fenced = loop {
        match store.fence(&fixture.token).await {
            Ok(generation) => break generation,
            Err(StoreError::Fence(FenceError::ServingWritesLive { .. })) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("fence: {other}"),
        }
    };
    assert!(fenced > 0);

    // Inside expiry + bound: refused, naming the one stalled lease and when it ends.
    let refused = store
        .require_no_stalled_serving_writes(community_id, bound)
        .await;
    let until = match refused {
        Err(StoreError::Fence(FenceError::StalledServingWrites { count, until, .. })) => {
            assert_eq!(count, 1);
            until
        }
        other => panic!("the freeze gate let a stalled lease through: {other:?}"),
    };
    assert_eq!(until, stalled.expires_at + chrono::Duration::seconds(2));
    let report = store
        .stalled_serving_writes(community_id, bound)
        .await
        .expect("stalled");
    assert_eq!(report.operations, vec!["s3_put".to_owned()]);
    assert!(report.now < until, "compared on the database clock");

    // The stalled writer wakes and releases after the fence: that proves nothing, still refused.
    assert!(
        !store
            .release_serving_write_lease(&stalled)
            .await
            .expect("release")
    );
    assert_matches!(
        store
            .require_no_stalled_serving_writes(community_id, bound)
            .await,
        Err(StoreError::Fence(FenceError::StalledServingWrites {
            count: 1,
            ..
        }))
    );
    // Reaping with no retention keeps the row while it is inside the protected-operation bound.
    store
        .reap_serving_write_leases(Duration::ZERO)
        .await
        .expect("reap");
    let kept: bool = scalar_for(
        &store,
        "SELECT EXISTS (SELECT 1 FROM deletion.serving_write_leases WHERE id = $1)",
        stalled.id,
    )
    .await;
    assert!(kept, "the reaper removed a lease the drain still needs");

    // Past expiry + bound on the database clock: the gate opens.
    let wait = (until - report.now).to_std().unwrap_or_default() + Duration::from_millis(200);
    tokio::time::sleep(wait).await;
    let open = store
        .require_no_stalled_serving_writes(community_id, bound)
        .await
        .expect("no stalled lease left inside its bound");
    assert_eq!(open.count, 0);
}
