//! Deletion metrics: what the activities did, counted where they know it.
//!
//! The instruments are created from the same `CoreMeter` the Temporal runtime reports its own
//! worker metrics to, so one Prometheus endpoint serves both. Without a meter (tests, or the
//! endpoint disabled) every recording is a no-op.
//!
//! Counting rules (each count is added once, after the durable write that makes it true):
//! - objects deleted: a chunk's acknowledged versions, when the chunk is stamped;
//! - rows purged: the request's total, when the purge advances the request to `postgres_purged`;
//! - keys purged: the keys one `purge_cache` attempt unlinked, when it advances the request;
//! - blocked: every `Blocked` event recorded in the audit trail, by phase.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use temporalio_common::telemetry::metrics::{
    CoreMeter, Counter, Gauge, HistogramF64, MetricAttributes, MetricKeyValue, MetricParameters,
    NewAttributes,
};

use crate::failure::{Classified, Severity};
use crate::store::lease_gauges::{LEASE_KINDS, LeaseGauges, ReapedLeases};
use crate::store::request_gauges::RequestGauges;

/// Name of the versions-deleted counter (the exporter adds `_total`).
pub const OBJECTS_DELETED: &str = "buzz_deletion_objects_deleted";
/// Name of the rows-purged counter (the exporter adds `_total`).
pub const ROWS_PURGED: &str = "buzz_deletion_rows_purged";
/// Name of the Redis-keys-purged counter (the exporter adds `_total`).
pub const KEYS_PURGED: &str = "buzz_deletion_keys_purged";
/// Name of the blocked-deletions counter (the exporter adds `_total`), labelled by `phase`.
pub const BLOCKED: &str = "buzz_deletion_blocked";
/// Name of the activity-duration histogram, in seconds, labelled by `activity` and `outcome`.
pub const ACTIVITY_DURATION: &str = "buzz_deletion_activity_duration_seconds";
/// Name of the gauge of the delete rate in force (versions per second) of the prefix last paced,
/// labelled by `family` (`media`, `thumbs`, `_meta`: the first segment of a tenant prefix, so the
/// label set stays bounded however many tenants are deleted).
pub const DELETE_RATE: &str = "buzz_deletion_delete_rate_per_prefix";
/// Name of the counter of DeleteObjects calls (or per-key answers) the server throttled, by
/// `family` (the exporter adds `_total`).
pub const DELETE_THROTTLES: &str = "buzz_deletion_delete_throttles";

/// Name of the requests gauge, labelled by `kind` and `state` (`store::request_gauges::STATES`).
pub const REQUESTS: &str = "buzz_deletion_requests";
/// Name of the gauge of how long the longest-blocked open request has been blocked, seconds.
pub const OLDEST_BLOCKED: &str = "buzz_deletion_oldest_blocked_seconds";
/// Name of the gauge of how long the longest-stalled request has gone without progress, seconds.
pub const OLDEST_STALLED: &str = "buzz_deletion_oldest_stalled_seconds";
/// Name of the failed-samples counter (the exporter adds `_total`).
pub const SAMPLE_FAILURES: &str = "buzz_deletion_metrics_sample_failures";
/// Name of the serving-write lease gauge, labelled by `kind` and `state`
/// (`store::lease_gauges::LEASE_STATES`).
pub const SERVING_LEASES: &str = "buzz_deletion_serving_leases";
/// Name of the gauge of seconds since the oldest stalled (expired, unreleased) lease of a `kind`
/// expired; above the stalled-writer window it means the reaper is not running.
pub const OLDEST_STALLED_LEASE: &str = "buzz_deletion_oldest_stalled_lease_seconds";
/// Name of the reaped-leases counter, labelled by `kind` (the exporter adds `_total`).
pub const LEASES_REAPED: &str = "buzz_deletion_serving_leases_reaped";
/// Name of the counter of reaper runs that failed (the exporter adds `_total`).
pub const LEASE_REAPER_FAILURES: &str = "buzz_deletion_lease_reaper_failures";

/// Every metric family the worker itself exports (the SDK's `temporal_…` metrics aside), as the
/// exporter spells them: what dashboards and alerts may name. `deploy/helm/check.py` reads this
/// list; a worker test scrapes the endpoint and compares it with what is really served.
pub const EXPORTED: [&str; 15] = [
    "buzz_deletion_objects_deleted_total",
    DELETE_RATE,
    "buzz_deletion_delete_throttles_total",
    "buzz_deletion_rows_purged_total",
    "buzz_deletion_keys_purged_total",
    "buzz_deletion_blocked_total",
    "buzz_deletion_activity_duration_seconds",
    REQUESTS,
    OLDEST_BLOCKED,
    OLDEST_STALLED,
    "buzz_deletion_metrics_sample_failures_total",
    SERVING_LEASES,
    OLDEST_STALLED_LEASE,
    "buzz_deletion_serving_leases_reaped_total",
    "buzz_deletion_lease_reaper_failures_total",
];

/// Bucket bounds of [`ACTIVITY_DURATION`], in seconds: from a bookkeeping write to a long
/// chunk-deletion call.
pub const ACTIVITY_DURATION_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The instruments, created once per process.
struct Instruments {
    meter: Arc<dyn CoreMeter>,
    objects_deleted: Counter,
    rows_purged: Counter,
    keys_purged: Counter,
    blocked: Counter,
    activity_duration: HistogramF64,
    delete_rate: Gauge,
    throttles: Counter,
    unlabelled: MetricAttributes,
}

/// A cheap, cloneable handle the activities record through; [`DeletionMetrics::disabled`] (the
/// default) records nothing.
#[derive(Clone, Default)]
pub struct DeletionMetrics(Option<Arc<Instruments>>);

impl std::fmt::Debug for DeletionMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DeletionMetrics")
            .field(&if self.0.is_some() {
                "enabled"
            } else {
                "disabled"
            })
            .finish()
    }
}

impl DeletionMetrics {
    /// Records nothing.
    pub fn disabled() -> Self {
        Self(None)
    }

    /// Creates the instruments on `meter`. The unlabelled counters start at zero so a scrape
    /// shows them before the first deletion.
    pub fn new(meter: Arc<dyn CoreMeter>) -> Self {
        let counter = |name: &'static str, description: &'static str| {
            meter.counter(
                MetricParameters::builder()
                    .name(name)
                    .description(description)
                    .build(),
            )
        };
        let instruments = Instruments {
            objects_deleted: counter(
                OBJECTS_DELETED,
                "Object versions and delete markers deleted (counted when their chunk is stamped)",
            ),
            rows_purged: counter(
                ROWS_PURGED,
                "Postgres rows purged, community rows included (counted when a purge completes)",
            ),
            keys_purged: counter(KEYS_PURGED, "Redis keys unlinked by completed cache purges"),
            blocked: counter(
                BLOCKED,
                "Deletions blocked by a permanent failure, by phase",
            ),
            activity_duration: meter.histogram_f64(
                MetricParameters::builder()
                    .name(ACTIVITY_DURATION)
                    .description(
                        "Duration of one community activity attempt, by activity and outcome",
                    )
                    .build(),
            ),
            delete_rate: meter.gauge(
                MetricParameters::builder()
                    .name(DELETE_RATE)
                    .description(
                        "Delete rate in force of the tenant prefix last paced, versions per \
                         second, by prefix family",
                    )
                    .build(),
            ),
            throttles: counter(
                DELETE_THROTTLES,
                "DeleteObjects calls or per-key answers S3 throttled (SlowDown), by prefix family",
            ),
            unlabelled: meter.new_attributes(NewAttributes::new(Vec::new())),
            meter,
        };
        for counter in [
            &instruments.objects_deleted,
            &instruments.rows_purged,
            &instruments.keys_purged,
        ] {
            counter.add(0, &instruments.unlabelled);
        }
        Self(Some(Arc::new(instruments)))
    }

    /// Adds versions deleted.
    pub fn objects_deleted(&self, versions: u64) {
        if let Some(m) = &self.0 {
            m.objects_deleted.add(versions, &m.unlabelled);
        }
    }

    /// Adds rows purged.
    pub fn rows_purged(&self, rows: u64) {
        if let Some(m) = &self.0 {
            m.rows_purged.add(rows, &m.unlabelled);
        }
    }

    /// Adds Redis keys purged.
    pub fn keys_purged(&self, keys: u64) {
        if let Some(m) = &self.0 {
            m.keys_purged.add(keys, &m.unlabelled);
        }
    }

    /// Records the delete rate in force for `prefix` (labelled by its family).
    pub fn delete_rate(&self, prefix: &str, versions_per_second: u32) {
        if let Some(m) = &self.0 {
            let labels = m.labels(vec![MetricKeyValue::new("family", prefix_family(prefix))]);
            m.delete_rate
                .record(u64::from(versions_per_second), &labels);
        }
    }

    /// Counts one throttled call under `prefix` (labelled by its family).
    pub fn throttled(&self, prefix: &str) {
        if let Some(m) = &self.0 {
            let labels = m.labels(vec![MetricKeyValue::new("family", prefix_family(prefix))]);
            m.throttles.add(1, &labels);
        }
    }

    /// Counts one deletion blocked in `phase`.
    pub fn blocked(&self, phase: &str) {
        if let Some(m) = &self.0 {
            let labels = m.labels(vec![MetricKeyValue::new("phase", phase.to_owned())]);
            m.blocked.add(1, &labels);
        }
    }

    /// Records how long one attempt of `activity` took and how it ended.
    pub fn activity_finished(&self, activity: &str, outcome: Outcome, elapsed: Duration) {
        if let Some(m) = &self.0 {
            let labels = m.labels(vec![
                MetricKeyValue::new("activity", activity.to_owned()),
                MetricKeyValue::new("outcome", outcome.as_str()),
            ]);
            m.activity_duration.record(elapsed.as_secs_f64(), &labels);
        }
    }

    /// Runs `work` and records its duration under `activity`, with the outcome its result implies.
    pub async fn timed<T, E: Classified>(
        &self,
        activity: &str,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = work.await;
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => match e.severity() {
                Severity::Transient => Outcome::Transient,
                Severity::Permanent => Outcome::Permanent,
            },
        };
        self.activity_finished(activity, outcome, started.elapsed());
        result
    }
}

/// The family of a tenant prefix: its first segment (`media/<community>/` → `media`).
fn prefix_family(prefix: &str) -> String {
    prefix.split('/').next().unwrap_or_default().to_owned()
}

impl Instruments {
    fn labels(&self, labels: Vec<MetricKeyValue>) -> MetricAttributes {
        self.meter.new_attributes(NewAttributes::new(labels))
    }
}

/// How an activity attempt ended, as the `outcome` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It returned a result.
    Ok,
    /// It failed and Temporal retries it.
    Transient,
    /// It failed permanently (the deletion blocks).
    Permanent,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Transient => "transient",
            Outcome::Permanent => "permanent",
        }
    }
}

/// The gauges sampled from Postgres for the alerts (`store::request_gauges`), and the counter of
/// samples that failed. Cheap to clone.
#[derive(Clone)]
pub struct RequestStateGauges(Arc<GaugeInstruments>);

struct GaugeInstruments {
    meter: Arc<dyn CoreMeter>,
    requests: Gauge,
    oldest_blocked: Gauge,
    oldest_stalled: Gauge,
    sample_failures: Counter,
    unlabelled: MetricAttributes,
}

impl std::fmt::Debug for RequestStateGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestStateGauges")
    }
}

impl RequestStateGauges {
    /// Creates the instruments on `meter`. The gauges appear with the first successful sample
    /// (a zero before any sample would claim nothing is blocked); the failure counter at zero.
    pub fn new(meter: Arc<dyn CoreMeter>) -> Self {
        let gauge = |name: &'static str, description: &'static str| {
            meter.gauge(
                MetricParameters::builder()
                    .name(name)
                    .description(description)
                    .build(),
            )
        };
        let instruments = GaugeInstruments {
            requests: gauge(REQUESTS, "Deletion requests by kind and state"),
            oldest_blocked: gauge(
                OLDEST_BLOCKED,
                "Seconds the longest-blocked open deletion request has been blocked (0 if none)",
            ),
            oldest_stalled: gauge(
                OLDEST_STALLED,
                "Seconds since the last progress of the longest-stalled active deletion (0 if none)",
            ),
            sample_failures: meter.counter(
                MetricParameters::builder()
                    .name(SAMPLE_FAILURES)
                    .description(
                        "Request-state samples that failed (the gauges keep their last values)",
                    )
                    .build(),
            ),
            unlabelled: meter.new_attributes(NewAttributes::new(Vec::new())),
            meter,
        };
        instruments.sample_failures.add(0, &instruments.unlabelled);
        Self(Arc::new(instruments))
    }

    /// Sets every gauge from one sample.
    pub fn record(&self, sample: &RequestGauges) {
        let m = &self.0;
        for count in &sample.counts {
            let labels = m.meter.new_attributes(NewAttributes::new(vec![
                MetricKeyValue::new("kind", count.kind),
                MetricKeyValue::new("state", count.state),
            ]));
            m.requests.record(count.requests, &labels);
        }
        m.oldest_blocked
            .record(sample.oldest_blocked_secs, &m.unlabelled);
        m.oldest_stalled
            .record(sample.oldest_stalled_secs, &m.unlabelled);
    }

    /// Counts one failed sample; the gauges keep their last values.
    pub fn sample_failed(&self) {
        self.0.sample_failures.add(1, &self.0.unlabelled);
    }
}

/// The serving-write lease gauges and the reaper's counters (`worker::lease_reaper`). Cheap to
/// clone.
#[derive(Clone)]
pub struct LeaseInstruments(Arc<LeaseInstrumentSet>);

struct LeaseInstrumentSet {
    meter: Arc<dyn CoreMeter>,
    leases: Gauge,
    oldest_stalled: Gauge,
    reaped: Counter,
    failures: Counter,
    by_kind: [MetricAttributes; 2],
    unlabelled: MetricAttributes,
}

impl std::fmt::Debug for LeaseInstruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseInstruments")
    }
}

impl LeaseInstruments {
    /// Creates the instruments on `meter`: the counters appear at zero for both kinds, the
    /// gauges with the first successful sample.
    pub fn new(meter: Arc<dyn CoreMeter>) -> Self {
        let parameters = |name: &'static str, description: &'static str| {
            MetricParameters::builder()
                .name(name)
                .description(description)
                .build()
        };
        let by_kind = LEASE_KINDS.map(|kind| {
            meter.new_attributes(NewAttributes::new(vec![MetricKeyValue::new("kind", kind)]))
        });
        let set = LeaseInstrumentSet {
            leases: meter.gauge(parameters(
                SERVING_LEASES,
                "Serving-write lease rows by kind and state (live, stalled, ended)",
            )),
            oldest_stalled: meter.gauge(parameters(
                OLDEST_STALLED_LEASE,
                "Seconds since the oldest stalled (expired, unreleased) serving-write lease of a \
                 kind expired (0 if none)",
            )),
            reaped: meter.counter(parameters(
                LEASES_REAPED,
                "Serving-write lease rows reaped past the stalled-writer window, by kind",
            )),
            failures: meter.counter(parameters(
                LEASE_REAPER_FAILURES,
                "Lease reaper runs that failed (reaping or sampling; the gauges keep their last \
                 values)",
            )),
            unlabelled: meter.new_attributes(NewAttributes::new(Vec::new())),
            by_kind,
            meter,
        };
        for labels in &set.by_kind {
            set.reaped.add(0, labels);
        }
        set.failures.add(0, &set.unlabelled);
        Self(Arc::new(set))
    }

    /// Sets every lease gauge from one sample.
    pub fn record(&self, sample: &LeaseGauges) {
        let m = &self.0;
        for count in &sample.counts {
            let labels = m.meter.new_attributes(NewAttributes::new(vec![
                MetricKeyValue::new("kind", count.kind),
                MetricKeyValue::new("state", count.state),
            ]));
            m.leases.record(count.leases, &labels);
        }
        for (labels, secs) in m.by_kind.iter().zip(sample.oldest_stalled_secs) {
            m.oldest_stalled.record(secs, labels);
        }
    }

    /// Adds one reaping call's counts.
    pub fn reaped(&self, reaped: ReapedLeases) {
        let [community, user] = &self.0.by_kind;
        self.0.reaped.add(reaped.community, community);
        self.0.reaped.add(reaped.user, user);
    }

    /// Counts one failed run.
    pub fn failed(&self) {
        self.0.failures.add(1, &self.0.unlabelled);
    }
}
