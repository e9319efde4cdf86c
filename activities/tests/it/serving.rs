//! The serving-write lease library as a relay's serving path uses it, against a real PostgreSQL
//! (`bash deploy/local/up && source .state/env`).

use crate::store_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Sets a flag when dropped: proves a protected future was cancelled, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_finished_write_releases_its_lease() {
    let store = store().await;
    let serving = serving_store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &serving,
        community.id,
        "s3_put",
        &config("relay-a", 5_000, 1_000),
    )
    .await
    .expect("acquire");
    assert_eq!(
        store
            .live_serving_writes(community.id)
            .await
            .expect("live")
            .count,
        1
    );
    let written = guard.protect(async { 42 }).await.expect("protected write");
    assert_eq!(written, 42);
    guard.finish().await.expect("finish");
    assert_eq!(
        store
            .live_serving_writes(community.id)
            .await
            .expect("live")
            .count,
        0
    );
}

#[tokio::test]
async fn acquisition_is_refused_once_quiescing_and_once_fenced() {
    let store = store().await;
    let serving = serving_store().await;
    let fixture = approved(&store, 0).await;
    let cfg = config("relay-a", 5_000, 1_000);
    store
        .begin_quiescing(&fixture.token)
        .await
        .expect("quiesce");
    let refused = acquire_serving_write_with(&serving, fixture.community.id, "s3_put", &cfg).await;
    match refused {
        Err(error) => {
            assert!(error.is_refused_because_fenced(), "{error}");
            assert!(matches!(error, ServingError::Quiescing { .. }));
        }
        Ok(_) => panic!("a quiescing community admitted a new serving write"),
    }
    store.fence(&fixture.token).await.expect("fence");
    let refused =
        acquire_serving_write_with(&serving, fixture.community.id, "redis_write", &cfg).await;
    match refused {
        Err(error) => {
            assert!(error.is_refused_because_fenced(), "{error}");
            assert!(matches!(error, ServingError::Fenced { .. }));
        }
        Ok(_) => panic!("a fenced community admitted a serving write"),
    }
}

#[tokio::test]
async fn the_heartbeat_keeps_a_long_write_alive_past_its_ttl() {
    let store = store().await;
    let serving = serving_store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &serving,
        community.id,
        "push",
        &config("relay-a", 1_500, 200),
    )
    .await
    .expect("acquire");
    guard
        .protect(tokio::time::sleep(Duration::from_millis(3_500)))
        .await
        .expect("a write longer than the TTL survives while the heartbeat renews");
    assert!(!guard.is_lost());
    guard.finish().await.expect("finish");
}

#[tokio::test]
async fn protect_cancels_the_write_when_the_heartbeat_is_lost() {
    let store = store().await;
    let serving = serving_store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &serving,
        community.id,
        "s3_put",
        &config("relay-a", 5_000, 100),
    )
    .await
    .expect("acquire");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let write = async move {
        let _flag = flag;
        tokio::time::sleep(Duration::from_secs(30)).await;
    };
    // Another party ends the lease behind the holder's back (as an expiry would): the next
    // renewal is refused and the heartbeat declares the lease lost.
    let lease_id = guard.lease().id;
    let store_for_expiry = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::query("UPDATE deletion.serving_write_leases SET expires_at = now() - interval '1 second' WHERE id = $1")
            .bind(lease_id)
            .execute(store_for_expiry.pool())
            .await
            .expect("expire lease");
    });

    let outcome = tokio::time::timeout(Duration::from_secs(5), guard.protect(write)).await;
    match outcome {
        Ok(Err(error)) => assert!(error.is_lease_lost(), "{error}"),
        Ok(Ok(())) => panic!("the write completed although its lease was lost"),
        Err(_) => panic!("the protected write was not cancelled within 5 s of losing its lease"),
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the protected future was dropped"
    );
    assert!(guard.is_lost());
    assert!(
        guard
            .finish()
            .await
            .is_err_and(|error| error.is_lease_lost())
    );
}

#[tokio::test]
async fn a_dropped_guard_releases_its_lease() {
    let store = store().await;
    let serving = serving_store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &serving,
        community.id,
        "redis_write",
        &config("relay-a", 30_000, 5_000),
    )
    .await
    .expect("acquire");
    drop(guard);
    for _ in 0..50 {
        if store
            .live_serving_writes(community.id)
            .await
            .expect("live")
            .count
            == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("a dropped guard left its lease live");
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
    store
        .begin_quiescing(&fixture.token)
        .await
        .expect("quiesce");

    let refused = store.fence(&fixture.token).await;
    assert!(
        matches!(refused, Err(StoreError::ServingWritesLive { .. })),
        "{refused:?}"
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
async fn protect_abandons_a_write_that_outlasts_the_protected_operation_bound() {
    let store = store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &store,
        community.id,
        "s3_put",
        &config("relay-a", 30_000, 5_000),
    )
    .await
    .expect("acquire");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let write = async move {
        let _flag = flag;
        tokio::time::sleep(Duration::from_secs(30)).await;
    };
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        guard.protect_within(Duration::from_millis(300), write),
    )
    .await;
    match outcome {
        Ok(Err(ServingError::OperationTooLong { limit, .. })) => {
            assert_eq!(limit, Duration::from_millis(300));
        }
        Ok(other) => panic!("expected OperationTooLong, got {other:?}"),
        Err(_) => panic!("the write was not abandoned at its bound"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the write's future was dropped"
    );
    // The lease itself is still good: the bound ends the write, not the lease.
    guard.finish().await.expect("finish");
}

/// A write whose first poll blocks the thread, as a paused process does: once it is woken past
/// its deadline it must not be polled again.
struct PausingWrite {
    polls: Arc<std::sync::atomic::AtomicU32>,
    pause: Duration,
}

impl std::future::Future for PausingWrite {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let polls = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if polls == 1 {
            // The process stops here (SIGSTOP, a GC pause) with its write half sent...
            std::thread::sleep(self.pause);
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        // ...and a second poll would finish it: it must never happen past the deadline.
        std::task::Poll::Ready(())
    }
}

#[tokio::test]
async fn a_writer_resuming_from_a_pause_past_its_bound_never_polls_its_write_again() {
    let store = store().await;
    let community = community(&store).await;
    let guard = acquire_serving_write_with(
        &store,
        community.id,
        "s3_put",
        &config("relay-a", 30_000, 5_000),
    )
    .await
    .expect("acquire");
    let polls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let write = PausingWrite {
        polls: Arc::clone(&polls),
        pause: Duration::from_millis(600),
    };
    let outcome = guard
        .protect_within(Duration::from_millis(200), write)
        .await;
    assert!(
        matches!(outcome, Err(ServingError::OperationTooLong { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "the write was polled again after its bound"
    );
    guard.finish().await.expect("finish");
}

#[tokio::test]
async fn the_freeze_gate_holds_an_expired_unreleased_lease_until_expiry_plus_the_bound() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    let community_id = fixture.community.id;
    let bound = Duration::from_secs(2);
    // A write that finished and released before the fence does not count.
    let finished = store
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
        .acquire_serving_write_lease(
            community_id,
            "s3_put",
            "relay-stalled",
            Duration::from_secs(1),
        )
        .await
        .expect("acquire");
    store
        .begin_quiescing(&fixture.token)
        .await
        .expect("quiesce");
    // The fence waits for it while it is live, and closes once it expired.
    let fenced = loop {
        match store.fence(&fixture.token).await {
            Ok(generation) => break generation,
            Err(StoreError::ServingWritesLive { .. }) => {
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
        Err(StoreError::StalledServingWrites { count, until, .. }) => {
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
    assert!(matches!(
        store
            .require_no_stalled_serving_writes(community_id, bound)
            .await,
        Err(StoreError::StalledServingWrites { count: 1, .. })
    ));
    // Reaping with no retention keeps the row while it is inside the protected-operation bound.
    store
        .reap_serving_write_leases(Duration::ZERO)
        .await
        .expect("reap");
    let kept: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM deletion.serving_write_leases WHERE id = $1)",
    )
    .bind(stalled.id)
    .fetch_one(store.pool())
    .await
    .expect("query");
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
