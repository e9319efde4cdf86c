//! The Prometheus endpoint: one `/metrics` page with the Temporal SDK's worker metrics
//! (`temporal_…`) and the deletion metrics (`buzz_deletion_…`), both recorded into one registry.
//!
//! The SDK ships the exporter (`start_prometheus_metric_exporter`, an HTTP server on the worker's
//! Tokio runtime); the runtime gets its meter through [`runtime_options`], and the activities get
//! the same meter through [`activities::metrics::DeletionMetrics`]. No HTTP or metrics crate is
//! added for this.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use activities::metrics::{
    ACTIVITY_DURATION, ACTIVITY_DURATION_BUCKETS, DeletionMetrics, RequestStateGauges,
};
use temporalio_common::telemetry::metrics::CoreMeter;
use temporalio_common::telemetry::{
    HistogramBucketOverrides, PrometheusExporterOptions, TelemetryOptions,
    start_prometheus_metric_exporter,
};
use temporalio_sdk::runtime::RuntimeOptions;

/// The endpoint could not be started.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not serve Prometheus metrics on {address}: {detail}\n\
     hint: choose a free port with BUZZ_METRICS_PORT, or set it to 0 to disable metrics"
)]
pub struct MetricsError {
    /// Where it tried to listen.
    pub address: SocketAddr,
    /// The underlying error.
    pub detail: String,
}

/// A running `/metrics` endpoint and the meter behind it.
pub struct MetricsEndpoint {
    /// The address it listens on (all interfaces, so Prometheus can scrape the pod).
    pub address: SocketAddr,
    meter: Arc<dyn CoreMeter>,
}

impl MetricsEndpoint {
    /// Starts the endpoint on `port` (all interfaces). Needs a Tokio runtime.
    pub fn start(port: u16) -> Result<Self, MetricsError> {
        let address = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
        let options = PrometheusExporterOptions::builder()
            .socket_addr(address)
            // Prometheus naming conventions: counters end in `_total`, durations are seconds
            // with the unit in the name.
            .counters_total_suffix(true)
            .use_seconds_for_durations(true)
            .unit_suffix(true)
            .histogram_bucket_overrides(HistogramBucketOverrides {
                overrides: HashMap::from([(
                    ACTIVITY_DURATION.to_owned(),
                    ACTIVITY_DURATION_BUCKETS.to_vec(),
                )]),
            })
            .build();
        let started = start_prometheus_metric_exporter(options).map_err(|e| MetricsError {
            address,
            detail: format!("{e:#}"),
        })?;
        Ok(Self {
            address: started.bound_addr,
            meter: started.meter,
        })
    }

    /// The deletion metrics, recorded into this endpoint's registry.
    pub fn deletion_metrics(&self) -> DeletionMetrics {
        DeletionMetrics::new(self.meter.clone())
    }

    /// The request-state gauges (`crate::request_sampler`), recorded into this registry.
    pub fn request_state_gauges(&self) -> RequestStateGauges {
        RequestStateGauges::new(self.meter.clone())
    }

    /// The serving-write lease gauges and reaper counters (`crate::lease_reaper`), recorded into
    /// this registry.
    pub fn lease_instruments(&self) -> activities::metrics::LeaseInstruments {
        activities::metrics::LeaseInstruments::new(self.meter.clone())
    }
}

/// Runtime options whose telemetry reports the SDK's worker metrics to `endpoint` (or nowhere).
/// Fails only if the SDK rejects its own default options.
pub fn runtime_options(endpoint: Option<&MetricsEndpoint>) -> Result<RuntimeOptions, String> {
    let telemetry = TelemetryOptions::builder()
        .maybe_metrics(endpoint.map(|e| e.meter.clone()))
        .build();
    RuntimeOptions::builder()
        .telemetry_options(telemetry)
        .build()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// The endpoint's `/metrics` response (status line, headers and body).
    pub(crate) fn scrape(address: SocketAddr) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", address.port()))
            .unwrap_or_else(|e| panic!("connect {address}: {e}"));
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .unwrap_or_else(|e| panic!("{e}"));
        response
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deletion_metrics_are_served_with_prometheus_names_and_exact_values() {
        let endpoint = MetricsEndpoint::start(0).unwrap_or_else(|e| panic!("{e}"));
        let metrics = endpoint.deletion_metrics();
        let before = tokio::task::spawn_blocking({
            let address = endpoint.address;
            move || scrape(address)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            before.contains("\nbuzz_deletion_objects_deleted_total 0\n"),
            "counters are visible at zero before the first deletion:\n{before}"
        );

        metrics.objects_deleted(12);
        metrics.objects_deleted(3);
        metrics.rows_purged(31);
        metrics.keys_purged(7);
        metrics.blocked("inventory");
        metrics.activity_finished(
            "community.delete_chunks",
            activities::metrics::Outcome::Ok,
            std::time::Duration::from_millis(1500),
        );
        let after = tokio::task::spawn_blocking({
            let address = endpoint.address;
            move || scrape(address)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        for line in [
            "buzz_deletion_objects_deleted_total 15",
            "buzz_deletion_rows_purged_total 31",
            "buzz_deletion_keys_purged_total 7",
            "buzz_deletion_blocked_total{phase=\"inventory\"} 1",
            "buzz_deletion_activity_duration_seconds_bucket{activity=\"community.delete_chunks\",outcome=\"ok\",le=\"1\"} 0",
            "buzz_deletion_activity_duration_seconds_bucket{activity=\"community.delete_chunks\",outcome=\"ok\",le=\"2.5\"} 1",
            "buzz_deletion_activity_duration_seconds_sum{activity=\"community.delete_chunks\",outcome=\"ok\"} 1.5",
        ] {
            assert!(
                after.lines().any(|l| l == line),
                "missing `{line}` in:\n{after}"
            );
        }
    }
}
