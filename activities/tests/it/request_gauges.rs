//! The request-state sample behind the worker's alert gauges, run as the worker role on requests
//! with known states and ages in a database of its own (so the counts are exactly these
//! requests): which state each lands in, and which timestamps count as progress.

use crate::store_support::private_db::with_private_db_as_worker;
use crate::store_support::{assert_about, exec};
use activities::store::Store;
use activities::store::request_gauges::RequestGauges;
use uuid::Uuid;

/// Inserts a request row directly (the owner may; no workflow needed for a sample), `created`
/// and the optional `extra` assignments as SQL expressions.
async fn request(owner: &Store, kind: &str, stage: &str, created: &str, extra: &str) -> Uuid {
    let id = Uuid::new_v4();
    let community = Uuid::new_v4();
    let (community_sql, host, target) = if kind == "community" {
        (
            format!("'{community}'"),
            format!("'h-{}.test'", community.simple()),
            "NULL".to_owned(),
        )
    } else {
        (
            "NULL".to_owned(),
            "NULL".to_owned(),
            format!("'u-{}'", id.simple()),
        )
    };
    exec(
        owner,
        &format!(
            "INSERT INTO deletion.requests (id, kind, community_id, host, target, workflow_id, \
             requested_by, stage, created_at) VALUES ('{id}', '{kind}', {community_sql}, {host}, \
             {target}, 'wf-{id}', 'alice', '{stage}', {created})"
        ),
    )
    .await;
    if !extra.is_empty() {
        exec(
            owner,
            &format!("UPDATE deletion.requests SET {extra} WHERE id = '{id}'"),
        )
        .await;
    }
    id
}

/// Appends audit events `(event, at)` to a request's chain (seq 1, 2, … with linked hashes).
async fn audit(owner: &Store, request: Uuid, events: &[(&str, &str)]) {
    let mut prev = "0".repeat(64);
    for (i, (event, at)) in events.iter().enumerate() {
        let hash = format!("{:064x}", i + 1);
        exec(
            owner,
            &format!(
                "INSERT INTO deletion.audit_events (request_id, at, actor, event, seq, prev_hash, \
                 row_hash) VALUES ('{request}', {at}, 'test', '{event}', {}, '{prev}', '{hash}')",
                i + 1
            ),
        )
        .await;
        prev = hash;
    }
}

fn count(gauges: &RequestGauges, kind: &str, state: &str) -> u64 {
    gauges
        .count(kind, state)
        .unwrap_or_else(|| panic!("no {kind}/{state} series in {gauges:?}"))
}

async fn sample(worker: &Store) -> RequestGauges {
    worker
        .sample_request_gauges()
        .await
        .unwrap_or_else(|e| panic!("the worker role must be able to sample: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_and_ages_count_only_real_progress_sampled_as_the_worker_role() {
    with_private_db_as_worker("gauges", async |owner, worker| {
        let empty = sample(&worker).await;
        assert!(empty.counts.iter().all(|c| c.requests == 0), "{empty:?}");
        assert_eq!(
            (empty.oldest_blocked_secs, empty.oldest_stalled_secs),
            (0, 0)
        );

        // Active, created 3 h ago, stage reached 2 h ago, a purge batch 10 min ago. A refused
        // approval 1 min ago and its claim's fresh `updated_at` are not progress.
        let purging = request(
            &owner,
            "community",
            "fenced",
            "now() - interval '3 hours'",
            "",
        )
        .await;
        audit(
            &owner,
            purging,
            &[
                ("fenced", "now() - interval '2 hours'"),
                ("approval_rejected", "now() - interval '1 minute'"),
            ],
        )
        .await;
        exec(
            &owner,
            &format!(
                "INSERT INTO deletion.purge_progress \
             (request_id, table_name, rows_deleted, updated_at) \
             VALUES ('{purging}', 'buzz.events', 40, now() - interval '10 minutes')"
            ),
        )
        .await;
        let one = sample(&worker).await;
        assert_eq!(count(&one, "community", "active"), 1, "{one:?}");
        assert_about(one.oldest_stalled_secs, 600, "since the last purge batch");
        assert_eq!(one.oldest_blocked_secs, 0);

        // A user deletion waiting for its retry since it was created 2 h ago: the oldest now.
        request(
            &owner,
            "user",
            "retry_wait",
            "now() - interval '2 hours'",
            "",
        )
        .await;
        // Waiting 5 h for a human's approval: neither stalled nor active.
        request(
            &owner,
            "community",
            "inventoried",
            "now() - interval '5 hours'",
            "",
        )
        .await;
        // Blocked 30 min ago (created 6 h ago): blocked, not stalled.
        request(
            &owner,
            "community",
            "drained",
            "now() - interval '6 hours'",
            "blocked_stage = 'drained', blocked_reason = 'unknown key', \
         blocked_at = now() - interval '30 minutes'",
        )
        .await;
        // Ended a day ago: completed and aborted, never stalled.
        request(
            &owner,
            "community",
            "retention_pending",
            "now() - interval '2 days'",
            "completed_at = now() - interval '1 day'",
        )
        .await;
        request(
            &owner,
            "user",
            "aborted",
            "now() - interval '2 days'",
            "completed_at = now() - interval '1 day'",
        )
        .await;

        let all = sample(&worker).await;
        for (kind, state, expected) in [
            ("community", "active", 1),
            ("user", "retry_wait", 1),
            ("community", "awaiting_approval", 1),
            ("community", "blocked", 1),
            ("community", "completed", 1),
            ("user", "aborted", 1),
            ("user", "active", 0),
            ("user", "blocked", 0),
            ("community", "aborted", 0),
        ] {
            assert_eq!(
                count(&all, kind, state),
                expected,
                "{kind}/{state}: {all:?}"
            );
        }
        assert_about(
            all.oldest_stalled_secs,
            7200,
            "the retry-waiting user deletion",
        );
        assert_about(all.oldest_blocked_secs, 1800, "blocked 30 min ago");
    })
    .await;
}
