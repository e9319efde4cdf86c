//! Per-prefix pacing of version deletes, so a deletion stays under an S3 server's request-rate
//! limit per key prefix (AWS S3: 3,500 DELETE requests per second per prefix, where each version
//! in a DeleteObjects call counts as one DELETE).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Real S3's documented DELETE rate per prefix; the default bound of the worker.
pub const DEFAULT_DELETES_PER_SECOND_PER_PREFIX: u32 = 3_500;

/// Prefixes remembered before forgetting those whose schedule lies in the past.
const REMEMBERED_PREFIXES: usize = 1_024;

/// Schedules DeleteObjects calls so that, per prefix, versions are deleted at no more than
/// `per_second` on average: each call reserves `versions / per_second` seconds of the prefix's
/// timeline and starts when its reservation does. Calls still overlap (parallelism is bounded by
/// the caller); only their start times are spaced. `per_second == 0` disables pacing. Shared by
/// every activity of a worker process, so concurrent deletions of one prefix share one budget.
#[derive(Debug)]
pub struct PrefixPacer {
    per_second: u32,
    next_start: Mutex<HashMap<String, Instant>>,
}

impl PrefixPacer {
    /// A pacer allowing `per_second` version deletes per second per prefix (0: unlimited).
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second,
            next_start: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until a call deleting `versions` versions under `prefix` may start.
    pub async fn admit(&self, prefix: &str, versions: usize) {
        if let Some(wait) = self.reserve(prefix, versions, Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }

    /// Reserves the prefix's next slot at `now`; returns how long to wait for it (`None`: go).
    fn reserve(&self, prefix: &str, versions: usize, now: Instant) -> Option<Duration> {
        if self.per_second == 0 || versions == 0 {
            return None;
        }
        let cost = Duration::from_secs_f64(versions as f64 / f64::from(self.per_second));
        let Ok(mut schedule) = self.next_start.lock() else {
            // A poisoned lock means a panic elsewhere; pacing is a courtesy, not a guarantee.
            return None;
        };
        if schedule.len() >= REMEMBERED_PREFIXES {
            schedule.retain(|_, next| *next > now);
        }
        let slot = schedule.entry(prefix.to_owned()).or_insert(now);
        let start = (*slot).max(now);
        *slot = start + cost;
        (start > now).then(|| start - now)
    }
}

impl Default for PrefixPacer {
    fn default() -> Self {
        Self::new(DEFAULT_DELETES_PER_SECOND_PER_PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reserves each `(prefix, versions, at)` in turn on a pacer of `per_second`, asserting the
    /// wait each call is given.
    fn assert_waits(per_second: u32, calls: &[(&str, usize, Instant, Option<Duration>)]) {
        let pacer = PrefixPacer::new(per_second);
        for (call, &(prefix, versions, at, wait)) in calls.iter().enumerate() {
            assert_eq!(pacer.reserve(prefix, versions, at), wait, "call {call}");
        }
    }

    #[test]
    fn calls_on_one_prefix_are_spaced_by_their_share_of_the_rate() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_waits(
            2_000,
            &[
                ("media/a/", 1_000, now, None),
                ("media/a/", 1_000, now, Some(ms(500))),
                ("media/a/", 500, now, Some(ms(1_000))),
            ],
        );
    }

    #[test]
    fn prefixes_have_independent_budgets() {
        let now = Instant::now();
        let second = Some(Duration::from_secs(1));
        let calls = [
            ("media/a/", 1_000, now, None),
            ("thumbs/a/", 1_000, now, None),
        ];
        assert_waits(
            1_000,
            &[calls[0], calls[1], ("media/a/", 1_000, now, second)],
        );
    }

    #[test]
    fn an_idle_prefix_does_not_bank_credit_beyond_one_call() {
        let start = Instant::now();
        let later = start + Duration::from_secs(10);
        let second = Some(Duration::from_secs(1));
        assert_waits(
            1_000,
            &[
                ("media/a/", 1_000, start, None),
                ("media/a/", 1_000, later, None),
                ("media/a/", 1_000, later, second),
            ],
        );
    }

    #[test]
    fn zero_disables_pacing() {
        let pacer = PrefixPacer::new(0);
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(pacer.reserve("media/a/", 1_000, now), None);
        }
    }

    #[test]
    fn a_steady_stream_of_calls_averages_the_configured_rate() {
        let pacer = PrefixPacer::new(3_500);
        let now = Instant::now();
        let mut last_wait = Duration::ZERO;
        for _ in 0..36 {
            last_wait = pacer.reserve("media/a/", 1_000, now).unwrap_or_default();
        }
        // 36 calls of 1,000: the last starts after 35,000 versions' worth, i.e. 10 s.
        assert!(
            (last_wait.as_secs_f64() - 10.0).abs() < 0.001,
            "{last_wait:?}"
        );
    }
}
