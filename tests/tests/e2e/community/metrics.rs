//! The worker's Prometheus endpoint: after one deletion it reports exactly what the deletion
//! removed, next to the Temporal SDK's own worker metrics.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use e2e::prelude::*;

/// A port nobody listens on right now (the worker binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free local port: {e}"))
}

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
    let port = free_port();
    let port_text = port.to_string();
    let _worker = WorkerProcess::start(&queue, &[("BUZZ_METRICS_PORT", &port_text)]).await;
    let cli = Cli::new(&queue);
    let host = unique_host("metrics");
    let target = seed(&stack, &host, small_plan()).await;
    let before = snapshot(&stack, target.community_id).await;

    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.watch_to_end(&id).await;

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
