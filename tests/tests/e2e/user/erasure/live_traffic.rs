//! Must-show 2 of issue 17: while the deletion runs, the relay keeps writing as the user and as
//! others. From the gate on, every write as the user is refused; whatever the user wrote before
//! the gate is purged; every write of the others is admitted and kept.

use std::time::Duration;

use activities::serving::ServingLeaseConfig;
use activities::taxonomy::user_keys::user_key_scan_pattern;
use chrono::{DateTime, Utc};
use demo::simulator::{
    AdmittedWrite, AuthoredOutcome, AuthoredWrite, CommunityReport, SimulationPlan, simulate,
};
use testkit::prelude::*;

use super::{fresh_pubkey, member, seed_footprint};

/// Whether an admitted write is still stored.
async fn stored(stack: &Stack, write: &AdmittedWrite) -> bool {
    match write {
        AdmittedWrite::Row(row) => {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM buzz.events WHERE id = $1")
                .bind(&row.key)
                .fetch_one(stack.store.pool())
                .await
                .unwrap_or_else(|e| panic!("event {}: {e}", row.key));
            n == 1
        }
        AdmittedWrite::Object(version) => stack
            .objects
            .get_object_version(&version.key, &version.version_id)
            .await
            .is_ok(),
        AdmittedWrite::Key(key) => {
            stack
                .cache
                .count_matching(key)
                .await
                .unwrap_or_else(|e| panic!("key {key}: {e}"))
                == 1
        }
    }
}

fn by<'a>(report: &'a CommunityReport, author: &'a str) -> impl Iterator<Item = &'a AuthoredWrite> {
    report.authored.iter().filter(move |w| w.author == author)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_as_the_user_are_refused_from_the_gate_on_and_the_others_are_all_kept() {
    let (stack, cli, _worker) = with_worker("user-live", &[]).await;
    let user = fresh_pubkey();
    let others = [fresh_pubkey(), fresh_pubkey()];
    let mut hosts = Vec::new();
    let mut communities = Vec::new();
    for tag in ["live-a", "live-b"] {
        let host = unique_host(tag);
        let community = seed(&stack, &host, small_plan()).await.community_id;
        for author in std::iter::once(&user).chain(others.iter()) {
            seed_footprint(&stack, community, author, &member(2, 0, 1)).await;
        }
        hosts.push(host);
        communities.push(community);
    }

    // Three authors (an odd number), so each one's writes cover every kind of the rotation.
    let mut plan = SimulationPlan::new(hosts.clone(), 15, None);
    plan.record_limit = 100_000;
    plan.authors = vec![user.clone(), others[0].clone(), others[1].clone()];
    plan.lease = ServingLeaseConfig {
        ttl: Duration::from_secs(10),
        renew_every: Duration::from_secs(2),
        owner: "user-live-simulator".to_owned(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let simulation = tokio::spawn({
        let (serving, objects, cache) = (
            stack.serving.clone(),
            stack.objects.clone(),
            stack.cache.clone(),
        );
        async move {
            simulate(&serving, &objects, &cache, &plan, async {
                let _ = stopped.await;
            })
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let id = cli
        .user_submit_and_approve(&format!("user:{user}"), "alice", "bob")
        .await;
    cli.user_run(&id).await.expect_exit(0);
    // The relay keeps writing a while after the deletion finished.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let _ = stop.send(());
    let report = simulation
        .await
        .unwrap_or_else(|e| panic!("simulator: {e}"))
        .unwrap_or_else(|e| panic!("simulator: {e}"));

    // The gate closes when the fence transaction holds the user's fence row, not when it began
    // (the row's `updated_at` is `now()`, the transaction's start: a write checked in between
    // passes the trigger and is purged). The `user.fenced` audit event is written in that
    // transaction after the row is locked, at `clock_timestamp()`: every write started later
    // waits for the commit and meets `fenced`.
    let fenced_at: DateTime<Utc> = sqlx::query_scalar(
        "SELECT a.at FROM deletion.audit_events a JOIN deletion.user_fences f \
           ON f.request_id = a.request_id AND f.state = 'fenced' \
         WHERE f.pubkey = $1 AND a.event = 'user.fenced'",
    )
    .bind(&user)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("the user is fenced, on record: {e}"));

    for (host, community) in hosts.iter().zip(&communities) {
        let served = report
            .community(host)
            .unwrap_or_else(|| panic!("no report for {host}"));
        assert!(!served.authored_truncated);
        // The user: some writes admitted before the gate (and purged since), every write started
        // after the fence refused, nothing of theirs left.
        let before: Vec<_> = by(served, &user)
            .filter(|w| w.started_at < fenced_at)
            .collect();
        let after: Vec<_> = by(served, &user)
            .filter(|w| w.started_at > fenced_at)
            .collect();
        assert!(
            before
                .iter()
                .any(|w| matches!(w.outcome, AuthoredOutcome::Admitted { .. })),
            "{host}: the user wrote before the gate"
        );
        assert!(
            after.len() >= 4,
            "{host}: only {} writes as the user after the fence",
            after.len()
        );
        for write in &after {
            assert_eq!(write.outcome, AuthoredOutcome::Refused, "{host}: {write:?}");
        }
        for write in by(served, &user) {
            if let AuthoredOutcome::Admitted {
                write: stored_write,
            } = &write.outcome
            {
                assert!(
                    !stored(&stack, stored_write).await,
                    "{host}: the user's write {stored_write:?} survived the deletion"
                );
            }
        }
        let left = stack
            .store
            .user_rows_left(*community, &user)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(left.values().all(|n| *n == 0), "{host}: {left:?}");
        let keys = stack
            .cache
            .count_matching(&user_key_scan_pattern(*community, &user))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys, 0, "{host}: keys of the user left");

        // The others: every write admitted and still stored.
        for other in &others {
            let counts = served.by_author[other];
            assert!(counts.attempted > 10, "{host}: {counts:?}");
            assert_eq!(
                counts.admitted, counts.attempted,
                "{host} {other}: {counts:?}"
            );
            for write in by(served, other) {
                let AuthoredOutcome::Admitted {
                    write: stored_write,
                } = &write.outcome
                else {
                    panic!("{host}: {write:?}");
                };
                assert!(
                    stored(&stack, stored_write).await,
                    "{host}: lost {stored_write:?}"
                );
            }
            let left = stack
                .store
                .user_rows_left(*community, other)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                left["buzz.events"] >= 2,
                "{host}: {other}'s seeded events are kept"
            );
        }
    }
}
