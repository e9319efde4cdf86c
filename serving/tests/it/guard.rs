//! The guard as a relay's serving path uses it: a write admitted, renewed past its TTL, cancelled
//! when its lease is lost, abandoned at its bound, released when finished or dropped. Moved from
//! the activities crate's integration tests with the library.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serving::{ServingError, ServingWriteGuard};

use crate::support::*;

#[tokio::test]
async fn a_finished_write_releases_its_lease() {
    let write = admitted(Via::Serving, "s3_put", 5_000, 1_000).await;
    let (store, community_id) = (&write.store, write.community.id);
    assert_eq!(live_count(store, community_id).await, 1);
    let written = write.guard.protect(async { 42 }).await;
    assert_eq!(written.expect("protected write"), 42);
    write.guard.finish().await.expect("finish");
    assert_eq!(live_count(store, community_id).await, 0);
}

#[tokio::test]
async fn the_heartbeat_keeps_a_long_write_alive_past_its_ttl() {
    let guard = admitted(Via::Serving, "push", 1_500, 200).await.guard;
    guard
        .protect(tokio::time::sleep(Duration::from_millis(3_500)))
        .await
        .expect("a write longer than the TTL survives while the heartbeat renews");
    assert!(!guard.is_lost());
    guard.finish().await.expect("finish");
}

#[tokio::test]
async fn protect_cancels_the_write_when_the_heartbeat_is_lost() {
    let Admitted { store, guard, .. } = admitted(Via::Serving, "s3_put", 5_000, 100).await;
    let (dropped, write) = watched_write();
    // Another party ends the lease behind the holder's back (as an expiry would): the next
    // renewal is refused and the heartbeat declares the lease lost.
    let lease_id = guard.lease().id;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::query("UPDATE deletion.serving_write_leases SET expires_at = now() - interval '1 second' WHERE id = $1")
            .bind(lease_id)
            .execute(store.pool())
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
    let write = admitted(Via::Serving, "redis_write", 30_000, 5_000).await;
    drop(write.guard);
    for _ in 0..50 {
        if live_count(&write.store, write.community.id).await == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("a dropped guard left its lease live");
}

/// A write admitted through the owner's handle with a long lease: only a bound ends it.
async fn bounded_guard() -> ServingWriteGuard {
    admitted(Via::Owner, "s3_put", 30_000, 5_000).await.guard
}

#[tokio::test]
async fn protect_abandons_a_write_that_outlasts_the_protected_operation_bound() {
    let guard = bounded_guard().await;
    let (dropped, write) = watched_write();
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
    let guard = bounded_guard().await;
    // The bound starts before the lease is verified; on a loaded machine that round trip can
    // outlast it, and then the write is (rightly) never polled at all, which proves nothing about
    // a resumed pause. Such an attempt is repeated; every attempt must poll at most once.
    let mut paused_once = false;
    for _attempt in 0..5 {
        let polls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let write = PausingWrite {
            polls: Arc::clone(&polls),
            pause: Duration::from_millis(1_500),
        };
        let outcome = guard
            .protect_within(Duration::from_millis(1_000), write)
            .await;
        assert!(
            matches!(outcome, Err(ServingError::OperationTooLong { .. })),
            "{outcome:?}"
        );
        let polled = polls.load(Ordering::SeqCst);
        assert!(
            polled <= 1,
            "the write was polled again after its bound ({polled} polls)"
        );
        if polled == 1 {
            paused_once = true;
            break;
        }
    }
    assert!(
        paused_once,
        "no attempt polled the write before its bound: the machine is too loaded"
    );
    guard.finish().await.expect("finish");
}
