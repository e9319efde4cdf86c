//! Samples the request states from Postgres into the alert gauges
//! (`activities::metrics::RequestStateGauges`) every `BUZZ_METRICS_SAMPLE_SECS` seconds.
//!
//! The counters say what the activities did; alerts also need what is true now (a deletion
//! blocked for hours, one making no progress), which only the database knows. A failed sample
//! (Postgres unreachable) is logged and counted, the gauges keep their last values, and the
//! worker keeps running: metrics never take a deletion worker down.

use std::future::Future;
use std::time::Duration;

use activities::metrics::RequestStateGauges;
use activities::store::Store;
use activities::store::request_gauges::RequestGauges;

/// The variable holding the sampling period in whole seconds.
pub const SAMPLE_SECS_ENV: &str = "BUZZ_METRICS_SAMPLE_SECS";

/// The period when the variable is unset.
pub const DEFAULT_SAMPLE_SECS: u64 = 30;

/// Longest accepted period: a gauge older than this misleads more than it helps.
pub const MAX_SAMPLE_SECS: u64 = 3600;

/// The period variable's value is not a whole number of seconds in range.
#[derive(Debug, thiserror::Error)]
#[error(
    "{SAMPLE_SECS_ENV}={value:?} is not a whole number of seconds between 1 and {MAX_SAMPLE_SECS} \
     (unset for the default, {DEFAULT_SAMPLE_SECS})"
)]
pub struct SampleIntervalError {
    /// The value given.
    pub value: String,
}

/// The sampling period from the variable's value (`None`: unset).
pub fn sample_interval(value: Option<&str>) -> Result<Duration, SampleIntervalError> {
    let Some(value) = value else {
        return Ok(Duration::from_secs(DEFAULT_SAMPLE_SECS));
    };
    match value.trim().parse::<u64>() {
        Ok(secs) if (1..=MAX_SAMPLE_SECS).contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(SampleIntervalError {
            value: value.to_owned(),
        }),
    }
}

/// Takes one sample and records it; on failure logs it, counts it and leaves the gauges as they
/// were. Returns whether the sample succeeded.
pub async fn sample_once<E, F>(gauges: &RequestStateGauges, sample: F) -> bool
where
    E: std::fmt::Display,
    F: Future<Output = Result<RequestGauges, E>>,
{
    match sample.await {
        Ok(sample) => {
            gauges.record(&sample);
            true
        }
        Err(error) => {
            gauges.sample_failed();
            tracing::warn!(
                error = %error,
                "request-state sample for the metrics failed; the gauges keep their last values"
            );
            false
        }
    }
}

/// Samples `store` every `every` until the process ends (the first sample at once).
pub fn spawn(store: Store, gauges: RequestStateGauges, every: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            sample_once(&gauges, store.sample_request_gauges()).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use activities::metrics::EXPORTED;
    use activities::store::request_gauges::{KINDS, STATES, StateCount};

    use super::*;
    use crate::metrics::MetricsEndpoint;
    use crate::metrics::tests::scrape;

    #[test]
    fn the_period_defaults_to_thirty_seconds_and_refuses_nonsense() {
        assert_eq!(sample_interval(None).ok(), Some(Duration::from_secs(30)));
        assert_eq!(
            sample_interval(Some(" 5 ")).ok(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            sample_interval(Some("3600")).ok(),
            Some(Duration::from_secs(3600))
        );
        for bad in ["0", "-1", "1.5", "30s", "", "3601"] {
            let error = sample_interval(Some(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad:?} must be refused"));
            assert!(
                error.to_string().contains(SAMPLE_SECS_ENV),
                "the error names the variable: {error}"
            );
        }
    }

    async fn scrape_async(address: SocketAddr) -> String {
        tokio::task::spawn_blocking(move || scrape(address))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn sample(blocked: u64, oldest_blocked_secs: u64, oldest_stalled_secs: u64) -> RequestGauges {
        let counts = KINDS
            .iter()
            .flat_map(|kind| {
                STATES.iter().map(move |state| StateCount {
                    kind,
                    state,
                    requests: if *kind == "community" && *state == "blocked" {
                        blocked
                    } else {
                        0
                    },
                })
            })
            .collect();
        RequestGauges {
            counts,
            oldest_blocked_secs,
            oldest_stalled_secs,
        }
    }

    fn has_line(exposition: &str, line: &str) -> bool {
        exposition.lines().any(|l| l == line)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_sample_is_counted_and_keeps_the_last_values() {
        let endpoint = MetricsEndpoint::start(0).unwrap_or_else(|e| panic!("{e}"));
        let gauges = endpoint.request_state_gauges();

        let before = scrape_async(endpoint.address).await;
        assert!(
            has_line(&before, "buzz_deletion_metrics_sample_failures_total 0"),
            "the failure counter is visible at zero:\n{before}"
        );
        assert!(
            !before.contains("buzz_deletion_oldest_blocked_seconds"),
            "no gauge before the first sample (a zero would claim nothing is blocked):\n{before}"
        );

        assert!(sample_once(&gauges, async { Ok::<_, String>(sample(2, 3700, 45)) }).await);
        assert!(
            !sample_once(&gauges, async {
                Err::<RequestGauges, _>("PostgreSQL not reachable".to_owned())
            })
            .await
        );
        let after = scrape_async(endpoint.address).await;
        for line in [
            "buzz_deletion_requests{kind=\"community\",state=\"blocked\"} 2",
            "buzz_deletion_requests{kind=\"user\",state=\"blocked\"} 0",
            "buzz_deletion_requests{kind=\"community\",state=\"active\"} 0",
            "buzz_deletion_oldest_blocked_seconds 3700",
            "buzz_deletion_oldest_stalled_seconds 45",
            "buzz_deletion_metrics_sample_failures_total 1",
        ] {
            assert!(has_line(&after, line), "missing `{line}` in:\n{after}");
        }

        // The next good sample replaces every value, zeros included.
        assert!(sample_once(&gauges, async { Ok::<_, String>(sample(0, 0, 0)) }).await);
        let cleared = scrape_async(endpoint.address).await;
        for line in [
            "buzz_deletion_requests{kind=\"community\",state=\"blocked\"} 0",
            "buzz_deletion_oldest_blocked_seconds 0",
            "buzz_deletion_metrics_sample_failures_total 1",
        ] {
            assert!(has_line(&cleared, line), "missing `{line}` in:\n{cleared}");
        }
    }

    /// `activities::metrics::EXPORTED` (what the dashboard and alert checks accept) is exactly
    /// the set of `buzz_deletion_` families a worker serves once every instrument recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_exported_list_is_exactly_what_the_endpoint_serves() {
        let endpoint = MetricsEndpoint::start(0).unwrap_or_else(|e| panic!("{e}"));
        let deletion = endpoint.deletion_metrics();
        let gauges = endpoint.request_state_gauges();
        deletion.blocked("inventory");
        deletion.delete_rate("media/c/", 3_500);
        deletion.throttled("media/c/");
        deletion.activity_finished(
            "community.inventory",
            activities::metrics::Outcome::Ok,
            Duration::from_millis(10),
        );
        sample_once(&gauges, async { Ok::<_, String>(sample(1, 1, 1)) }).await;
        let leases = endpoint.lease_instruments();
        leases.record(
            &activities::store::lease_gauges::LeaseGauges::from_rows(&[])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        leases.reaped(activities::store::lease_gauges::ReapedLeases {
            community: 1,
            user: 0,
        });
        let exposition = scrape_async(endpoint.address).await;
        let mut served: Vec<&str> = exposition
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| name.starts_with("buzz_deletion_"))
            .collect();
        served.sort_unstable();
        served.dedup();
        let mut listed = EXPORTED.to_vec();
        listed.sort_unstable();
        assert_eq!(served, listed, "{exposition}");
    }
}
