//! The serving-write lease reaper (migration 0019) and the lease sample, run as the worker role on
//! lease rows with known states and ages in a database of its own: what is reaped and what is
//! kept, that a run is bounded and a second finds nothing, that two reapers at once never count
//! a row twice, and which leases `community status` names while a fence or a drain waits.

use crate::store_support::{assert_about, exec};
use std::collections::BTreeSet;
use std::time::Duration;

use crate::store_support::private_db::with_private_db_as_worker;
use activities::store::lease_gauges::{LeaseGauges, ReapedLeases};
use activities::store::{Store, StoreError};
use uuid::Uuid;

/// A lease row written directly by the owner (times as SQL expressions), as a serving process
/// would have left it at that age.
async fn lease(
    owner: &Store,
    community: Uuid,
    user: Option<&str>,
    expires: &str,
    released: &str,
) -> Uuid {
    let id = Uuid::new_v4();
    let user = user.map_or("NULL".to_owned(), |u| format!("'{u}'"));
    exec(
        owner,
        &format!(
            "INSERT INTO deletion.serving_write_leases (id, community_id, operation, owner, \
             fence_generation, acquired_at, renewed_at, expires_at, released_at, user_pubkey) \
             VALUES ('{id}', '{community}', 's3_put', 'relay-{id}', 0, now() - interval '3 hours', \
             now() - interval '3 hours', {expires}, {released}, {user})"
        ),
    )
    .await;
    id
}

/// A lease row's user, expiry and release, as SQL expressions.
type Shape<'a> = (Option<&'a str>, &'a str, &'a str);

const IN_A_MINUTE: &str = "now() + interval '1 minute'";
const TEN_SECONDS_AGO: &str = "now() - interval '10 seconds'";
const TWO_MINUTES_AGO: &str = "now() - interval '2 minutes'";
const UNRELEASED: &str = "NULL";

/// [`lease`] for each shape, in order.
async fn leases(owner: &Store, community: Uuid, shapes: &[Shape<'_>]) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(shapes.len());
    for (user, expires, released) in shapes {
        ids.push(lease(owner, community, *user, expires, released).await);
    }
    ids
}

async fn remaining(store: &Store) -> BTreeSet<Uuid> {
    sqlx::query_scalar::<_, Uuid>("SELECT id FROM deletion.serving_write_leases")
        .fetch_all(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .collect()
}

async fn sample(worker: &Store) -> LeaseGauges {
    worker
        .sample_lease_gauges()
        .await
        .unwrap_or_else(|e| panic!("the worker role must be able to sample leases: {e}"))
}

fn count(gauges: &LeaseGauges, kind: &str, state: &str) -> u64 {
    gauges
        .count(kind, state)
        .unwrap_or_else(|| panic!("no {kind}/{state} series in {gauges:?}"))
}

/// Asserts the live, stalled and ended leases of `kind` in `gauges`.
fn assert_counts(gauges: &LeaseGauges, kind: &str, [live, stalled, ended]: [u64; 3]) {
    for (state, leases) in [("live", live), ("stalled", stalled), ("ended", ended)] {
        assert_eq!(count(gauges, kind, state), leases, "{kind}/{state}");
    }
}

async fn reap(worker: &Store, batch: u32) -> ReapedLeases {
    worker
        .reap_ended_serving_write_leases(batch)
        .await
        .unwrap_or_else(|e| panic!("the worker role must be able to reap: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_removes_only_rows_past_the_window_a_bounded_batch_at_a_time() {
    with_private_db_as_worker("reaper", async |owner, worker| {
        let community = Uuid::new_v4();
        let user = "ab".repeat(32);

        let empty = sample(&worker).await;
        assert!(empty.counts.iter().all(|c| c.leases == 0), "{empty:?}");

        // Kept: a live lease, a stalled one still inside its 30 s window, one released early whose
        // expiry is still ahead, and a live per-user lease.
        let kept: BTreeSet<Uuid> = leases(
            &owner,
            community,
            &[
                (None, IN_A_MINUTE, UNRELEASED),
                (None, TEN_SECONDS_AGO, UNRELEASED),
                (None, IN_A_MINUTE, TWO_MINUTES_AGO),
                (Some(&user), IN_A_MINUTE, UNRELEASED),
            ],
        )
        .await
        .into_iter()
        .collect();
        // Reapable: 25 stalled community leases two hours old, a stalled user lease an hour old, a
        // released lease past its window, and a stalled one five minutes old.
        let two_hours_old = (None, "now() - interval '2 hours'", UNRELEASED);
        let mut reapable = vec![two_hours_old; 25];
        reapable.extend([
            (Some(user.as_str()), "now() - interval '1 hour'", UNRELEASED),
            (
                None,
                "now() - interval '9 minutes'",
                "now() - interval '10 minutes'",
            ),
            (None, "now() - interval '5 minutes'", UNRELEASED),
        ]);
        leases(&owner, community, &reapable).await;

        let before = sample(&worker).await;
        assert_counts(&before, "community", [1, 27, 2]);
        assert_counts(&before, "user", [1, 1, 0]);
        assert_about(
            before.oldest_stalled("community").unwrap_or(0),
            7200,
            "oldest stalled community lease",
        );
        assert_about(
            before.oldest_stalled("user").unwrap_or(0),
            3600,
            "oldest stalled user lease",
        );

        // Bounded, oldest first: the 25 two-hour-old rows go before the user's hour-old one.
        for (community, user) in [(10, 0), (10, 0), (7, 1)] {
            assert_eq!(reap(&worker, 10).await, ReapedLeases { community, user });
        }
        // Idempotent: nothing is left to reap, and every kept row is still there.
        assert_eq!(reap(&worker, 10).await, ReapedLeases::default());
        assert_eq!(remaining(&owner).await, kept);

        // Left: the one stalled inside its window, and the one released early, expiry ahead.
        let after = sample(&worker).await;
        assert_counts(&after, "community", [1, 1, 1]);
        assert_eq!(count(&after, "user", "live"), 1);
        assert_eq!(count(&after, "user", "stalled"), 0);
        assert_about(
            after.oldest_stalled("community").unwrap_or(0),
            10,
            "the stalled lease inside its window",
        );
        assert_eq!(after.oldest_stalled("user"), Some(0));

        // A batch outside 1..=100000 is refused before reaching the database.
        for batch in [0, 100_001] {
            assert_matches!(
                worker.reap_ended_serving_write_leases(batch).await,
                Err(StoreError::InvalidInput { field: "batch", .. })
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reapers_at_once_reap_every_row_once() {
    with_private_db_as_worker("reaper-race", async |owner, worker| {
        let community = Uuid::new_v4();
        exec(
            &owner,
            &format!(
                "INSERT INTO deletion.serving_write_leases (id, community_id, operation, owner, \
             fence_generation, expires_at) SELECT gen_random_uuid(), '{community}', 's3_put', \
             'relay', 0, now() - interval '1 hour' FROM generate_series(1, 400)"
            ),
        )
        .await;
        // The worker's pool holds two connections: two calls at once are two transactions.
        let mut total = 0;
        loop {
            let (a, b) = tokio::join!(reap(&worker, 60), reap(&worker, 60));
            if a.total() + b.total() == 0 {
                break;
            }
            total += a.total() + b.total();
        }
        assert_eq!(total, 400, "every row counted exactly once");
        assert!(remaining(&owner).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_leases_a_fence_and_then_a_drain_wait_for() {
    with_private_db_as_worker("awaited", async |owner, worker| {
        let community = Uuid::new_v4();
        let bound = Duration::from_secs(30);
        let user = "cd".repeat(32);

        let [live, user_live, stalled, released] = leases(
            &owner,
            community,
            &[
                (None, IN_A_MINUTE, UNRELEASED),
                (Some(&user), "now() + interval '2 minutes'", UNRELEASED),
                (None, TEN_SECONDS_AGO, UNRELEASED),
                (None, IN_A_MINUTE, TWO_MINUTES_AGO),
            ],
        )
        .await[..] else {
            panic!("four leases were written")
        };
        // Another community's live lease is never named.
        lease(&owner, Uuid::new_v4(), None, IN_A_MINUTE, UNRELEASED).await;

        // Serving (no fence row yet): the fence waits for the live leases only.
        let waiting = worker
            .awaited_serving_leases(community, bound, 50)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let ids: Vec<Uuid> = waiting.iter().map(|l| l.id).collect();
        assert_eq!(ids, vec![live, user_live], "soonest to stop holding first");
        assert!(waiting.iter().all(|l| l.holds == "fence"));
        assert_eq!(waiting[1].user_pubkey.as_deref(), Some(user.as_str()));
        assert_eq!(waiting[0].until, waiting[0].expires_at);

        // Fenced 20 s ago: the drain waits for every lease unreleased at fence time inside its
        // window, the stalled one included; the one released before the fence proves its write.
        let fenced = format!(
            "INSERT INTO deletion.community_fences \
             (community_id, state, generation, updated_at) \
             VALUES ('{community}', 'fenced', 2, now() - interval '20 seconds')"
        );
        exec(&owner, &fenced).await;
        let draining = worker
            .awaited_serving_leases(community, bound, 50)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let ids: BTreeSet<Uuid> = draining.iter().map(|l| l.id).collect();
        assert_eq!(ids, [live, user_live, stalled].into());
        assert!(!ids.contains(&released));
        for l in &draining {
            assert_eq!(l.holds, "drain");
            assert_eq!(l.until, l.expires_at + chrono::Duration::seconds(30));
        }
        assert_eq!(
            draining[0].id, stalled,
            "the stalled one stops holding first"
        );

        // At most `limit` are listed.
        assert_eq!(
            worker
                .awaited_serving_leases(community, bound, 2)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .len(),
            2
        );
    })
    .await;
}
