//! Per-prefix pacing of version deletes that adapts to the server: S3 allows about 3,500 DELETEs
//! per second per partitioned prefix (each version of a DeleteObjects call counts as one) and
//! answers `503 SlowDown` above what a partition holds at the moment. Each prefix's rate rises
//! additively while calls are acknowledged and falls multiplicatively on a throttle (AIMD, as
//! TCP does with its window), between a floor and a ceiling from the worker's configuration.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Real S3's documented DELETE rate per prefix; the worker's default ceiling.
pub const DEFAULT_DELETES_PER_SECOND_PER_PREFIX: u32 = 3_500;

/// The worker's default floor: a throttled prefix is never paced below this.
pub const DEFAULT_DELETES_PER_SECOND_FLOOR: u32 = 100;

/// Versions per second added to a prefix's rate per second of acknowledged deleting.
pub const ADDITIVE_INCREASE_PER_SECOND: f64 = 100.0;

/// The factor a throttle multiplies a prefix's rate by.
pub const MULTIPLICATIVE_DECREASE: f64 = 0.7;

/// Prefixes remembered before forgetting those idle at their ceiling.
const REMEMBERED_PREFIXES: usize = 1_024;

/// The bounds of every prefix's rate, versions per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateBounds {
    /// The highest rate a prefix is paced at, and where it starts (0: no ceiling — a prefix is
    /// not paced at all until its first throttle, then starts from
    /// [`DEFAULT_DELETES_PER_SECOND_PER_PREFIX`] decreased).
    pub ceiling: u32,
    /// The lowest rate a throttled prefix falls to (at least 1).
    pub floor: u32,
}

impl Default for RateBounds {
    fn default() -> Self {
        Self {
            ceiling: DEFAULT_DELETES_PER_SECOND_PER_PREFIX,
            floor: DEFAULT_DELETES_PER_SECOND_FLOOR,
        }
    }
}

impl RateBounds {
    fn ceiling(self) -> f64 {
        if self.ceiling == 0 {
            f64::INFINITY
        } else {
            f64::from(self.ceiling)
        }
    }

    /// At least 1, and never above a set ceiling.
    fn floor(self) -> u32 {
        let floor = self.floor.max(1);
        if self.ceiling == 0 {
            floor
        } else {
            floor.min(self.ceiling)
        }
    }
}

/// Which rate a call was let through at (the prefix's count of decreases then), so a throttle
/// answered to a call admitted before the last decrease (sent at the old rate) does not decrease
/// the rate again: one decrease per congestion event, however many calls were in flight when the
/// server began to throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    decreases: u64,
}

#[derive(Debug)]
struct PrefixRate {
    /// Versions per second (infinite: unpaced).
    rate: f64,
    /// When the prefix's next call may start.
    next_start: Instant,
    /// How often the rate was decreased.
    decreases: u64,
}

/// Schedules DeleteObjects calls so that, per prefix, versions are deleted at no more than that
/// prefix's current rate on average: each call reserves `versions / rate` seconds of the
/// prefix's timeline and starts when its reservation does. Calls still overlap (parallelism is
/// bounded by the caller); only their start times are spaced. Shared by every activity of a
/// worker process, so concurrent deletions of one prefix share one budget and one rate.
#[derive(Debug)]
pub struct PrefixPacer {
    bounds: RateBounds,
    prefixes: Mutex<HashMap<String, PrefixRate>>,
}

impl PrefixPacer {
    /// A pacer whose prefixes start at the ceiling and adapt within `bounds`.
    pub fn new(bounds: RateBounds) -> Self {
        Self {
            bounds,
            prefixes: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until a call deleting `versions` versions under `prefix` may start.
    pub async fn admit(&self, prefix: &str, versions: usize) -> Admission {
        let (wait, admission) = self.reserve(prefix, versions, Instant::now());
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
        admission
    }

    /// `versions` under `prefix` were acknowledged: the rate rises by
    /// [`ADDITIVE_INCREASE_PER_SECOND`] per second of deleting at it, up to the ceiling.
    pub fn acknowledged(&self, prefix: &str, versions: u64) {
        let ceiling = self.bounds.ceiling();
        self.with_prefix(prefix, Instant::now(), |state| {
            if state.rate.is_finite() && versions > 0 {
                let seconds = versions as f64 / state.rate;
                state.rate = (state.rate + ADDITIVE_INCREASE_PER_SECOND * seconds).min(ceiling);
            }
        });
    }

    /// The server throttled a call admitted as `admitted`: unless the rate was decreased since
    /// that admission, it is multiplied by [`MULTIPLICATIVE_DECREASE`] (not below the floor).
    /// Returns the rate in force afterwards.
    pub fn throttled(&self, prefix: &str, admitted: Admission) -> u32 {
        let floor = f64::from(self.bounds.floor());
        self.with_prefix(prefix, Instant::now(), |state| {
            if state.decreases == admitted.decreases {
                let from = if state.rate.is_finite() {
                    state.rate
                } else {
                    f64::from(DEFAULT_DELETES_PER_SECOND_PER_PREFIX)
                };
                state.rate = (from * MULTIPLICATIVE_DECREASE).max(floor);
                state.decreases += 1;
            }
            rounded(state.rate)
        })
        .unwrap_or(self.bounds.floor())
    }

    /// The rate in force for `prefix`, versions per second (`None`: not paced).
    pub fn rate(&self, prefix: &str) -> Option<u32> {
        let ceiling = self.bounds.ceiling();
        let prefixes = self.prefixes.lock().ok()?;
        let rate = prefixes.get(prefix).map_or(ceiling, |state| state.rate);
        rate.is_finite().then(|| rounded(rate))
    }

    /// Reserves the prefix's next slot at `now`; returns how long to wait for it (`None`: go)
    /// and the admission.
    fn reserve(
        &self,
        prefix: &str,
        versions: usize,
        now: Instant,
    ) -> (Option<Duration>, Admission) {
        self.with_prefix(prefix, now, |state| {
            let admission = Admission {
                decreases: state.decreases,
            };
            if !state.rate.is_finite() || versions == 0 {
                return (None, admission);
            }
            let cost = Duration::from_secs_f64(versions as f64 / state.rate);
            let start = state.next_start.max(now);
            state.next_start = start + cost;
            ((start > now).then(|| start - now), admission)
        })
        .unwrap_or((None, Admission { decreases: 0 }))
    }

    /// Runs `f` on `prefix`'s state (created at the ceiling). `None` if the lock is poisoned (a
    /// panic elsewhere): pacing is a courtesy to the server, not a guarantee of the deletion.
    fn with_prefix<T>(
        &self,
        prefix: &str,
        now: Instant,
        f: impl FnOnce(&mut PrefixRate) -> T,
    ) -> Option<T> {
        let ceiling = self.bounds.ceiling();
        let mut prefixes = self.prefixes.lock().ok()?;
        if prefixes.len() >= REMEMBERED_PREFIXES {
            prefixes.retain(|_, state| state.next_start > now || state.rate < ceiling);
        }
        let state = prefixes.entry(prefix.to_owned()).or_insert(PrefixRate {
            rate: ceiling,
            next_start: now,
            decreases: 0,
        });
        Some(f(state))
    }
}

impl Default for PrefixPacer {
    fn default() -> Self {
        Self::new(RateBounds::default())
    }
}

fn rounded(rate: f64) -> u32 {
    if rate >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        rate.round() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(ceiling: u32) -> PrefixPacer {
        PrefixPacer::new(RateBounds {
            ceiling,
            floor: 100,
        })
    }

    /// Reserves each `(prefix, versions, at)` in turn on a pacer of `per_second`, asserting the
    /// wait each call is given.
    fn assert_waits(per_second: u32, calls: &[(&str, usize, Instant, Option<Duration>)]) {
        let pacer = pacer(per_second);
        for (call, &(prefix, versions, at, wait)) in calls.iter().enumerate() {
            assert_eq!(pacer.reserve(prefix, versions, at).0, wait, "call {call}");
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
    fn no_ceiling_paces_nothing_until_the_first_throttle() {
        let pacer = pacer(0);
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(pacer.reserve("media/a/", 1_000, now).0, None);
        }
        assert_eq!(pacer.rate("media/a/"), None);
        let (_, admitted) = pacer.reserve("media/a/", 1_000, now);
        let rate = pacer.throttled("media/a/", admitted);
        assert_eq!(rate, 2_450, "3,500 decreased by 0.7");
        assert_eq!(pacer.rate("media/a/"), Some(2_450));
        assert_eq!(pacer.reserve("media/a/", 1_000, now).0, None);
        assert!(
            pacer.reserve("media/a/", 1_000, now).0.is_some(),
            "paced from then on"
        );
    }

    #[test]
    fn a_steady_stream_of_calls_averages_the_configured_rate() {
        let pacer = pacer(3_500);
        let now = Instant::now();
        let mut last_wait = Duration::ZERO;
        for _ in 0..36 {
            last_wait = pacer.reserve("media/a/", 1_000, now).0.unwrap_or_default();
        }
        // 36 calls of 1,000: the last starts after 35,000 versions' worth, i.e. 10 s.
        assert!(
            (last_wait.as_secs_f64() - 10.0).abs() < 0.001,
            "{last_wait:?}"
        );
    }

    #[test]
    fn a_throttle_decreases_the_rate_once_per_congestion_event_and_never_below_the_floor() {
        let pacer = pacer(3_500);
        let now = Instant::now();
        let in_flight: Vec<Admission> = (0..8)
            .map(|_| pacer.reserve("media/a/", 1_000, now).1)
            .collect();
        // Eight calls in flight were all throttled: one decrease, not eight.
        for admitted in in_flight {
            assert_eq!(pacer.throttled("media/a/", admitted), 2_450);
        }
        // A call admitted after the decrease and throttled again decreases again.
        let (_, after) = pacer.reserve("media/a/", 1_000, now);
        assert_eq!(pacer.throttled("media/a/", after), 1_715);
        for _ in 0..40 {
            let (_, again) = pacer.reserve("media/a/", 1, now);
            pacer.throttled("media/a/", again);
        }
        assert_eq!(pacer.rate("media/a/"), Some(100));
        assert_eq!(
            pacer.rate("thumbs/a/"),
            Some(3_500),
            "other prefixes unaffected"
        );
    }

    #[test]
    fn a_floor_above_the_ceiling_is_the_ceiling() {
        let pacer = PrefixPacer::new(RateBounds {
            ceiling: 2,
            floor: 100,
        });
        assert_eq!(pacer.rate("media/a/"), Some(2));
        let (_, admitted) = pacer.reserve("media/a/", 1, Instant::now());
        assert_eq!(pacer.throttled("media/a/", admitted), 2);
    }

    #[test]
    fn acknowledged_deletes_raise_the_rate_additively_up_to_the_ceiling() {
        let pacer = pacer(3_500);
        let (_, admitted) = pacer.reserve("media/a/", 1, Instant::now());
        pacer.throttled("media/a/", admitted);
        assert_eq!(pacer.rate("media/a/"), Some(2_450));
        // 2,450 versions at 2,450/s is one second of deleting: +100/s.
        pacer.acknowledged("media/a/", 2_450);
        assert_eq!(pacer.rate("media/a/"), Some(2_550));
        for _ in 0..1_000 {
            pacer.acknowledged("media/a/", 10_000);
        }
        assert_eq!(pacer.rate("media/a/"), Some(3_500), "capped at the ceiling");
    }

    #[test]
    fn a_sawtooth_against_a_fixed_limit_averages_well_above_the_decreased_rate() {
        // A server holding `limit` per second, throttling whenever the rate exceeds it: the rate
        // climbs 100/s per second, drops to 0.7x, and climbs again. Its time-average over the
        // steady state must stay above 0.8 x the limit (must-show 3's bound, before the burst a
        // real token bucket adds).
        let limit = 2_000.0;
        let pacer = pacer(20_000);
        let mut seconds = 0.0;
        let mut deleted = 0.0;
        for step in 0..20_000 {
            let rate = f64::from(pacer.rate("p").unwrap_or(0));
            if rate > limit {
                let (_, admitted) = pacer.reserve("p", 1, Instant::now());
                pacer.throttled("p", admitted);
                continue;
            }
            let versions = 100.0;
            pacer.acknowledged("p", versions as u64);
            if step > 2_000 {
                seconds += versions / rate;
                deleted += versions;
            }
        }
        let average = deleted / seconds;
        assert!(average > 0.8 * limit, "{average}");
    }
}
