//! Per-partition token buckets for deleted keys: refilled at `rate` tokens a second, holding at
//! most `rate` (one second of burst). Time is passed in, so the math is tested with a fake
//! clock.

use std::collections::HashMap;
use std::time::Duration;

/// When there are more idle partitions than this, full ones are forgotten (a full bucket is
/// what a new partition starts with, so forgetting it changes nothing).
const PRUNE_ABOVE: usize = 100_000;

/// The partition of `key`: the key up to and including its `depth`-th `/`, or the whole key
/// when it has fewer slashes. Depth 0 puts every key in the one partition `""`.
pub fn partition(key: &str, depth: usize) -> &str {
    if depth == 0 {
        return "";
    }
    key.match_indices('/')
        .nth(depth - 1)
        .map_or(key, |(at, _)| &key[..=at])
}

#[derive(Debug, Clone, Copy)]
struct Tokens {
    available: f64,
    refilled_at: Duration,
}

/// Token buckets keyed by partition.
#[derive(Debug, Default)]
pub struct Limiter {
    rate: f64,
    buckets: HashMap<Box<str>, Tokens>,
}

impl Limiter {
    /// A limiter of `rate` tokens a second per partition (0 = unlimited).
    pub fn new(rate: f64) -> Self {
        Self {
            rate: rate.max(0.0),
            buckets: HashMap::new(),
        }
    }

    /// The rate in tokens a second (0 = unlimited).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Changes the rate; buckets keep their tokens, capped at the new capacity.
    pub fn set_rate(&mut self, rate: f64) {
        self.rate = rate.max(0.0);
        let capacity = self.rate;
        for tokens in self.buckets.values_mut() {
            tokens.available = tokens.available.min(capacity);
        }
    }

    /// Forgets every bucket (all partitions start full again).
    pub fn reset(&mut self) {
        self.buckets.clear();
    }

    /// Takes `cost` tokens from each listed partition at time `now`, all or nothing: when any
    /// partition lacks its tokens nothing is taken and the lacking partitions are returned.
    /// A cost above the capacity can never be paid.
    pub fn try_take(&mut self, demand: &[(&str, u64)], now: Duration) -> Result<(), Vec<String>> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let (rate, capacity) = (self.rate, self.rate);
        let mut lacking = Vec::new();
        for &(partition, cost) in demand {
            let tokens = self.refilled(partition, now, rate, capacity);
            if tokens.available < cost as f64 {
                lacking.push(partition.to_owned());
            }
        }
        if !lacking.is_empty() {
            return Err(lacking);
        }
        for &(partition, cost) in demand {
            if let Some(tokens) = self.buckets.get_mut(partition) {
                tokens.available -= cost as f64;
            }
        }
        if self.buckets.len() > PRUNE_ABOVE {
            self.buckets.retain(|_, tokens| {
                let elapsed = now.saturating_sub(tokens.refilled_at).as_secs_f64();
                tokens.available + elapsed * rate < capacity
            });
        }
        Ok(())
    }

    /// The partition's bucket refilled up to `now` (created full).
    fn refilled(&mut self, partition: &str, now: Duration, rate: f64, capacity: f64) -> Tokens {
        let tokens = match self.buckets.get_mut(partition) {
            Some(tokens) => tokens,
            None => self.buckets.entry(Box::from(partition)).or_insert(Tokens {
                available: capacity,
                refilled_at: now,
            }),
        };
        let elapsed = now.saturating_sub(tokens.refilled_at).as_secs_f64();
        tokens.available = (tokens.available + elapsed * rate).min(capacity);
        tokens.refilled_at = now.max(tokens.refilled_at);
        *tokens
    }

    /// Tokens available in `partition` at `now` (for tests and stats).
    pub fn available(&mut self, partition: &str, now: Duration) -> f64 {
        let (rate, capacity) = (self.rate, self.rate);
        self.refilled(partition, now, rate, capacity).available
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn partitions_end_at_the_depth_th_slash() {
        assert_eq!(partition("media/u-1/abc", 2), "media/u-1/");
        assert_eq!(partition("media/u-1/a/b", 2), "media/u-1/");
        assert_eq!(partition("media/u-1/abc", 1), "media/");
        assert_eq!(partition("media/abc", 2), "media/abc");
        assert_eq!(partition("abc", 0), "");
    }

    #[test]
    fn a_new_partition_has_one_second_of_burst_then_refills_at_the_rate() {
        let mut limiter = Limiter::new(1000.0);
        assert!(limiter.try_take(&[("p/", 1000)], at(0)).is_ok());
        assert_eq!(
            limiter.try_take(&[("p/", 1)], at(0)),
            Err(vec!["p/".to_owned()])
        );
        // Half a second refills half the capacity.
        assert!(limiter.try_take(&[("p/", 500)], at(500)).is_ok());
        assert!(limiter.try_take(&[("p/", 1)], at(500)).is_err());
        // Never more than the capacity, however long idle.
        assert!((limiter.available("p/", at(60_000)) - 1000.0).abs() < 1e-9);
        assert!(limiter.try_take(&[("p/", 1001)], at(120_000)).is_err());
    }

    #[test]
    fn a_call_is_all_or_nothing_across_partitions() {
        let mut limiter = Limiter::new(10.0);
        assert!(limiter.try_take(&[("a/", 8)], at(0)).is_ok());
        assert_eq!(
            limiter.try_take(&[("b/", 5), ("a/", 5)], at(0)),
            Err(vec!["a/".to_owned()])
        );
        // b/ was not charged by the refused call.
        assert!((limiter.available("b/", at(0)) - 10.0).abs() < 1e-9);
        assert!((limiter.available("a/", at(0)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn unlimited_and_rate_changes() {
        let mut limiter = Limiter::new(0.0);
        assert!(limiter.try_take(&[("a/", 1_000_000)], at(0)).is_ok());
        limiter.set_rate(100.0);
        assert!(limiter.try_take(&[("a/", 100)], at(0)).is_ok());
        assert!(limiter.try_take(&[("a/", 1)], at(0)).is_err());
        limiter.set_rate(10.0);
        // Refilled at the new rate, capped at the new capacity.
        assert!((limiter.available("a/", at(5_000)) - 10.0).abs() < 1e-9);
        limiter.reset();
        assert!((limiter.available("a/", at(5_000)) - 10.0).abs() < 1e-9);
    }
}
