//! The worker's Prometheus endpoint: after one deletion it reports exactly what the deletion
//! removed, next to the Temporal SDK's own worker metrics; its request-state gauges (sampled from
//! Postgres, what the alerts read) report a blocked deletion and how long it has been blocked.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use testkit::prelude::*;
use testkit::private_db::PrivateStory;
use testkit::workers::metrics_port;

/// A port nobody listens on right now (the worker binds it a moment later).
/// `GET /metrics` over a plain socket (no HTTP client crate needed for one request).
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("the worker's metrics endpoint on port {port} refused: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("{e}"));
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("reading /metrics: {e}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// Sample lines (`name{labels} value`) by their series, comments skipped.
fn samples(exposition: &str) -> HashMap<String, f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of an unlabelled series, panicking with the exposition when it is missing.
fn value(samples: &HashMap<String, f64>, series: &str, exposition: &str) -> u64 {
    samples
        .get(series)
        .map(|v| *v as u64)
        .unwrap_or_else(|| panic!("{series} is missing from /metrics:\n{exposition}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_counts_exactly_what_a_deletion_removed_beside_the_sdk_metrics() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue("metrics");
    let port = metrics_port();
    let port_text = port.to_string();
    let _worker = WorkerProcess::start(&queue, &[("BUZZ_METRICS_PORT", &port_text)]).await;
    let cli = Cli::new(&queue);
    let host = unique_host("metrics");
    let target = seed(&stack, &host, small_plan()).await;
    let before = snapshot(&stack, target.community_id).await;

    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve_and_finish(&id, &digest).await;

    let inspection = stack
        .store
        .inspect(id.parse().unwrap_or_default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rows_purged: u64 = inspection.purged.iter().map(|t| t.rows).sum();
    assert_eq!(
        rows_purged,
        before.row_count() as u64,
        "the purge removed every tenant row and the community row: {:?}",
        inspection.purged
    );

    let exposition = scrape(port);
    let samples = samples(&exposition);
    assert_eq!(
        value(&samples, "buzz_deletion_objects_deleted_total", &exposition),
        before.versions.len() as u64,
        "every version and delete marker of the community, once"
    );
    assert_eq!(
        inspection.chunks.versions_stamped,
        before.versions.len() as u64
    );
    assert_eq!(
        value(&samples, "buzz_deletion_rows_purged_total", &exposition),
        rows_purged
    );
    assert_eq!(
        value(&samples, "buzz_deletion_keys_purged_total", &exposition),
        before.keys.len() as u64
    );
    assert!(
        !samples
            .iter()
            .any(|(series, v)| series.starts_with("buzz_deletion_blocked_total") && *v > 0.0),
        "nothing blocked:\n{exposition}"
    );
    let delete_attempts = samples
        .get(
            "buzz_deletion_activity_duration_seconds_count{activity=\"community.delete_chunks\",outcome=\"ok\"}",
        )
        .copied()
        .unwrap_or_default();
    assert!(
        delete_attempts >= 1.0,
        "the phase-duration histogram must hold the delete phase:\n{exposition}"
    );
    assert!(
        samples.keys().any(|series| series.starts_with("temporal_")),
        "the SDK's own worker metrics must be served on the same endpoint:\n{exposition}"
    );
}

const BLOCKED_COMMUNITIES: &str = "buzz_deletion_requests{kind=\"community\",state=\"blocked\"}";
const ABORTED_COMMUNITIES: &str = "buzz_deletion_requests{kind=\"community\",state=\"aborted\"}";
const ACTIVE_COMMUNITIES: &str = "buzz_deletion_requests{kind=\"community\",state=\"active\"}";
const OLDEST_BLOCKED: &str = "buzz_deletion_oldest_blocked_seconds";
const OLDEST_STALLED: &str = "buzz_deletion_oldest_stalled_seconds";
const SAMPLE_FAILURES: &str = "buzz_deletion_metrics_sample_failures_total";

/// Scrapes every half second until `done` holds (60 s at most), returning that scrape. The
/// worker may still be starting (its endpoint not yet listening) at the first tries.
pub(super) async fn scrape_until(
    port: u16,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut exposition = String::from("(the endpoint never answered)");
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            exposition = tokio::task::spawn_blocking(move || scrape(port))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let samples = samples(&exposition);
            if done(&samples) {
                return samples;
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("/metrics never showed {what} within 60 s:\n{exposition}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A story on a database of its own (so the counts are exactly its own) whose worker, given
/// `env` too, serves `/metrics` on a port of its own; that port. Take the outage lock first.
pub(super) async fn metered_story(tag: &str, env: &[(&str, &str)]) -> (PrivateStory, u16) {
    let port = metrics_port();
    let port_text = port.to_string();
    let mut worker_env = vec![("BUZZ_METRICS_PORT", port_text.as_str())];
    worker_env.extend_from_slice(env);
    (PrivateStory::start(tag, &worker_env).await, port)
}

pub(super) fn gauge(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples
        .get(series)
        .copied()
        .unwrap_or_else(|| panic!("{series} is missing from /metrics: {samples:?}"))
}

/// On a database of its own (so the counts are exactly this test's requests): the gauges start
/// at zero, report the one blocked deletion with an age no older than its block, and return to
/// zero blocked once it is aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_gauges_report_a_blocked_deletion_its_age_and_its_abort() {
    let _shared = outage_lock().read().await;
    let (story, port) = metered_story("gauges", &[("BUZZ_METRICS_SAMPLE_SECS", "1")]).await;
    let (stack, cli) = (&story.stack, &story.cli);

    let empty = scrape_until(port, "the first sample", |s| {
        s.contains_key(BLOCKED_COMMUNITIES)
    })
    .await;
    assert_eq!(gauge(&empty, BLOCKED_COMMUNITIES), 0.0);
    assert_eq!(gauge(&empty, OLDEST_BLOCKED), 0.0);
    assert_eq!(gauge(&empty, OLDEST_STALLED), 0.0);

    // An unknown key shape blocks the inventory.
    let host = unique_host("gauges");
    let target = seed(stack, &host, small_plan()).await;
    plant_stray_key(stack, target.community_id).await;
    let (id, _) = cli.submit_blocked(&host, &[]).await;

    let blocked = scrape_until(port, "one blocked deletion older than a second", |s| {
        s.get(BLOCKED_COMMUNITIES) == Some(&1.0) && s.get(OLDEST_BLOCKED).is_some_and(|v| *v > 0.0)
    })
    .await;
    let blocked_for: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM now() - blocked_at)::float8 FROM deletion.requests \
         WHERE id = $1 AND blocked_reason IS NOT NULL",
    )
    .bind(id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("the request must be blocked in Postgres: {e}"));
    assert!(
        gauge(&blocked, OLDEST_BLOCKED) <= blocked_for.ceil(),
        "the oldest-blocked age ({}) is this request's, which was blocked {blocked_for} s ago",
        gauge(&blocked, OLDEST_BLOCKED)
    );
    assert_eq!(
        gauge(&blocked, ACTIVE_COMMUNITIES),
        0.0,
        "a blocked request is not active"
    );
    assert_eq!(gauge(&blocked, OLDEST_STALLED), 0.0, "nor stalled");
    assert_eq!(gauge(&blocked, SAMPLE_FAILURES), 0.0);

    // Aborted, it leaves the blocked series: the gauge drops to zero rather than keep its count.
    let id_text = id.to_string();
    cli.run(&[
        "community",
        "abort",
        &id_text,
        "--aborted-by",
        "carol",
        "--reason",
        "stray upload, deletion postponed",
    ])
    .await
    .expect_code(0);
    let aborted = scrape_until(port, "the deletion aborted and nothing blocked", |s| {
        s.get(ABORTED_COMMUNITIES) == Some(&1.0) && s.get(BLOCKED_COMMUNITIES) == Some(&0.0)
    })
    .await;
    assert_eq!(gauge(&aborted, OLDEST_BLOCKED), 0.0);
    assert_eq!(gauge(&aborted, SAMPLE_FAILURES), 0.0);

    story.end().await;
}
