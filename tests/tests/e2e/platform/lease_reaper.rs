//! The production worker reaps serving-write lease rows (issue 30, part 2): after a serving run
//! and a relay that crashed with writes admitted, every row past the stalled-writer window is
//! gone, a writer still running keeps its lease, and the lease gauges on `/metrics` read the
//! right counts at each step.

use std::collections::HashMap;
use std::time::Duration;

use testkit::prelude::*;
use testkit::seed::abandoned_s3_put_lease;

use super::metrics::{gauge, metered_story, scrape_until};

fn series(kind: &str, state: &str) -> String {
    format!("buzz_deletion_serving_leases{{kind=\"{kind}\",state=\"{state}\"}}")
}

fn reaped(kind: &str) -> String {
    format!("buzz_deletion_serving_leases_reaped_total{{kind=\"{kind}\"}}")
}

fn oldest_stalled(kind: &str) -> String {
    format!("buzz_deletion_oldest_stalled_lease_seconds{{kind=\"{kind}\"}}")
}

/// The six lease series and two reaped counters of a scrape, for comparing a whole step.
fn lease_counts(s: &HashMap<String, f64>) -> [u64; 8] {
    let read = |name: String| s.get(&name).map_or(u64::MAX, |v| *v as u64);
    [
        read(series("community", "live")),
        read(series("community", "stalled")),
        read(series("community", "ended")),
        read(series("user", "live")),
        read(series("user", "stalled")),
        read(series("user", "ended")),
        read(reaped("community")),
        read(reaped("user")),
    ]
}

async fn lease_rows(stack: &Stack, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM deletion.serving_write_leases WHERE {sql}"
    )))
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_run_with_abandoned_leases_leaves_no_row_past_the_window_and_the_gauges_follow() {
    let _shared = outage_lock().read().await;
    let (story, port) = metered_story("reaper", &[("BUZZ_LEASE_REAP_SECS", "1")]).await;
    let stack = &story.stack;
    let cli = story
        .cli
        .clone()
        .with_env("BUZZ_SERVING_DATABASE_URL", &story.db.serving);
    let host = unique_host("reaper");
    let target = seed(stack, &host, small_plan()).await;
    let community = target.community_id;

    // Seeding wrote under leases it released: the gauges read exactly those (the reaper samples
    // every second, so a sample taken before or during the seeding is waited past, not read).
    let seeded = u64::try_from(lease_rows(stack, "released_at IS NOT NULL").await).unwrap_or(0);
    assert_eq!(lease_rows(stack, "released_at IS NULL").await, 0);
    scrape_until(port, "the seeding's released leases, nothing else", |s| {
        lease_counts(s) == [0, 0, seeded, 0, 0, 0, 0, 0]
    })
    .await;

    // A serving run: every external write under a lease, released when it finished. Released
    // leases are kept until past their expiry plus the window (60 s + 30 s here).
    let served = cli
        .run(&[
            "demo",
            "serve",
            "--hosts",
            &host,
            "--rate",
            "10",
            "--duration",
            "2",
        ])
        .await
        .expect_code(0);
    let ended = lease_rows(stack, "released_at IS NOT NULL").await;
    assert!(
        ended > 0,
        "the serving run wrote under leases: {}",
        served.stdout
    );
    assert_eq!(lease_rows(stack, "released_at IS NULL").await, 0);
    let ended = u64::try_from(ended).unwrap_or_default();
    let after_run = scrape_until(port, "the run's released leases", |s| {
        s.get(&series("community", "ended")) == Some(&(ended as f64))
    })
    .await;
    assert_eq!(lease_counts(&after_run), [0, 0, ended, 0, 0, 0, 0, 0]);

    // A relay crashed with three community writes and one write for a user admitted (their
    // leases lapse in a second and are never released); another relay's write is still running.
    for _ in 0..3 {
        abandoned_s3_put_lease(stack, community, "crashed-relay:7", Duration::from_secs(1)).await;
    }
    stack
        .serving
        .serving()
        .acquire_user_serving_write_lease(
            community,
            &"ef".repeat(32),
            "redis_write",
            "crashed-relay:7",
            Duration::from_secs(1),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let running = stack
        .serving
        .serving()
        .acquire_serving_write_lease(community, "push", "relay:9", Duration::from_secs(600))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stalled = scrape_until(
        port,
        "three stalled community leases and one user lease",
        |s| {
            lease_counts(s) == [1, 3, ended, 0, 1, 0, 0, 0]
                && s.get(&oldest_stalled("community"))
                    .is_some_and(|v| *v >= 1.0)
        },
    )
    .await;
    // Inside the window nothing is reaped (the drain of a deletion could still need them): the
    // sample above was taken by the reaper right after a pass, and both reaped counters read 0.
    assert!(gauge(&stalled, &oldest_stalled("user")) >= 1.0);

    // Two minutes later (the rows aged on the database clock rather than waited for), every
    // ended and abandoned lease is past its window: the reaper removes them all and keeps the
    // running writer's lease.
    sqlx::query(
        "UPDATE deletion.serving_write_leases SET acquired_at = acquired_at - interval '2 min', \
         renewed_at = renewed_at - interval '2 min', expires_at = expires_at - interval '2 min', \
         released_at = released_at - interval '2 min' WHERE id <> $1",
    )
    .bind(running.id)
    .execute(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let reaped_all = scrape_until(port, "every ended and abandoned lease reaped", |s| {
        lease_counts(s) == [1, 0, 0, 0, 0, 0, ended + 3, 1]
    })
    .await;
    assert_eq!(gauge(&reaped_all, &oldest_stalled("community")), 0.0);
    assert_eq!(gauge(&reaped_all, &oldest_stalled("user")), 0.0);
    assert_eq!(
        gauge(&reaped_all, "buzz_deletion_lease_reaper_failures_total"),
        0.0
    );
    assert_eq!(
        lease_rows(
            stack,
            "(released_at IS NOT NULL OR expires_at < now()) \
             AND expires_at < now() - interval '30 seconds'"
        )
        .await,
        0,
        "no ended or stalled row older than the window"
    );
    assert_eq!(lease_rows(stack, "true").await, 1);
    assert_eq!(
        lease_rows(stack, &format!("id = '{}'", running.id)).await,
        1
    );

    story.end().await;
}
