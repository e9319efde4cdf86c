//! How many activities the worker runs at once, and the PostgreSQL pool that serves them, sized
//! together so that the default pool never starves the default slots.
//!
//! A running activity holds at most [`CONNECTIONS_PER_SLOT`] pooled connections at once. Most
//! run one statement or transaction at a time. The freeze writes its chunk groups on a task beside
//! the listing: two. `delete_chunks` talks to PostgreSQL from four places at once (the fence
//! checks of its DeleteObjects calls in flight, its chunk reader, its grouped stamp and its
//! irreversible marker), and all of them share the attempt's budget of
//! [`activities::community::CONNECTIONS_PER_ATTEMPT`] connections
//! (`activities::community::connection_budget`): beyond it a statement waits for another of the
//! same attempt, so neither the delete parallelism nor the read-ahead multiplies the connections.
//! The pool therefore gets two connections per activity slot plus [`POOL_RESERVE`] (the
//! request-state sampler and one spare): even with every slot running `delete_chunks`, no
//! activity waits for a connection held by another. A pool smaller than the slots is refused at
//! start-up: activities beyond the pool would wait for a connection and fail transiently after
//! ten seconds, over and over, instead of running.
//!
//! The SDK's default is 100 activity slots; with the store's old fixed pool of 16 connections a
//! busy worker could hold up to 84 activities waiting for a connection. The worker now sets its
//! activity slots explicitly ([`DEFAULT_ACTIVITY_SLOTS`]) and derives the pool from them.

use activities::store::{DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS, PoolSettings};
use stack_config::env::StackEnv;

use crate::config::ConfigError;

/// Activities this worker runs at once, at most.
pub const ACTIVITY_SLOTS_ENV: &str = "BUZZ_ACTIVITY_SLOTS";
/// Connections of the worker's PostgreSQL pool, at most.
pub const PG_POOL_SIZE_ENV: &str = "BUZZ_PG_POOL_SIZE";
/// `lock_timeout` of the worker's PostgreSQL sessions, in milliseconds.
pub const PG_LOCK_TIMEOUT_ENV: &str = "BUZZ_PG_LOCK_TIMEOUT_MS";
/// `statement_timeout` of the worker's PostgreSQL sessions, in milliseconds.
pub const PG_STATEMENT_TIMEOUT_ENV: &str = "BUZZ_PG_STATEMENT_TIMEOUT_MS";
/// `idle_in_transaction_session_timeout` of the worker's PostgreSQL sessions, in milliseconds.
pub const PG_IDLE_TXN_TIMEOUT_ENV: &str = "BUZZ_PG_IDLE_TXN_TIMEOUT_MS";

/// Activity slots when [`ACTIVITY_SLOTS_ENV`] is unset.
pub const DEFAULT_ACTIVITY_SLOTS: usize = 16;
/// The most activity slots accepted.
pub const MAX_ACTIVITY_SLOTS: usize = 500;
/// The most pooled connections one running activity holds at once (see the module doc).
pub const CONNECTIONS_PER_SLOT: u32 = activities::community::CONNECTIONS_PER_ATTEMPT as u32;
/// Connections the default pool has beyond [`CONNECTIONS_PER_SLOT`] per activity slot.
pub const POOL_RESERVE: u32 = 2;
/// The largest pool accepted (PostgreSQL's own default `max_connections` is 100).
pub const MAX_PG_POOL_SIZE: u32 = 1_000;
/// The shortest non-zero session timeout accepted, in milliseconds: a shorter statement or lock
/// timeout would fail ordinary purge batches and catalog scans, retried without end.
pub const MIN_TIMEOUT_MS: u64 = 1_000;
/// The longest session timeout accepted, in milliseconds (a day).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The worker's activity slots and the pool settings that serve them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Activities run at once (the SDK's activity slot supplier, fixed size).
    pub activity_slots: usize,
    /// The PostgreSQL pool: size and session timeouts.
    pub postgres: PoolSettings,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            activity_slots: DEFAULT_ACTIVITY_SLOTS,
            postgres: PoolSettings {
                max_connections: default_pool_size(DEFAULT_ACTIVITY_SLOTS),
                ..PoolSettings::default()
            },
        }
    }
}

/// The pool for `slots` activity slots when [`PG_POOL_SIZE_ENV`] is unset.
pub fn default_pool_size(slots: usize) -> u32 {
    u32::try_from(slots)
        .unwrap_or(u32::MAX)
        .saturating_mul(CONNECTIONS_PER_SLOT)
        .saturating_add(POOL_RESERVE)
        .min(MAX_PG_POOL_SIZE)
}

impl Capacity {
    /// Reads the five variables through `lookup` (trimmed; blank is unset), refusing a value out
    /// of bounds and a pool smaller than the activity slots, each naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = StackEnv::new(&lookup);
        let activity_slots = match env.optional(ACTIVITY_SLOTS_ENV) {
            None => DEFAULT_ACTIVITY_SLOTS,
            Some(value) => {
                let slots = whole_number(ACTIVITY_SLOTS_ENV, &value)?;
                usize::try_from(slots)
                    .ok()
                    .filter(|n| (1..=MAX_ACTIVITY_SLOTS).contains(n))
                    .ok_or_else(|| ConfigError::Invalid {
                        name: ACTIVITY_SLOTS_ENV,
                        value,
                        reason: format!("activity slots are 1 to {MAX_ACTIVITY_SLOTS}"),
                    })?
            }
        };
        let max_connections = match env.optional(PG_POOL_SIZE_ENV) {
            None => default_pool_size(activity_slots),
            Some(value) => pool_size(&value, activity_slots)?,
        };
        let timeout = |name: &'static str, zero_allowed: bool| -> Result<Option<u64>, _> {
            env.optional(name)
                .map(|value| session_timeout(name, &value, zero_allowed))
                .transpose()
        };
        Ok(Capacity {
            activity_slots,
            postgres: PoolSettings {
                max_connections,
                min_connections: 0,
                lock_timeout_ms: timeout(PG_LOCK_TIMEOUT_ENV, true)?,
                statement_timeout_ms: timeout(PG_STATEMENT_TIMEOUT_ENV, true)?,
                idle_in_transaction_timeout_ms: timeout(PG_IDLE_TXN_TIMEOUT_ENV, false)?
                    .unwrap_or(DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS),
            },
        })
    }
}

fn whole_number(name: &'static str, value: &str) -> Result<u64, ConfigError> {
    value.parse::<u64>().map_err(|e| ConfigError::Invalid {
        name,
        value: value.to_owned(),
        reason: format!("not a whole number ({e})"),
    })
}

/// A pool of at least one connection per activity slot and at most [`MAX_PG_POOL_SIZE`].
fn pool_size(value: &str, activity_slots: usize) -> Result<u32, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: PG_POOL_SIZE_ENV,
        value: value.to_owned(),
        reason,
    };
    let size = whole_number(PG_POOL_SIZE_ENV, value)?;
    let size = u32::try_from(size)
        .ok()
        .filter(|n| *n <= MAX_PG_POOL_SIZE)
        .ok_or_else(|| invalid(format!("at most {MAX_PG_POOL_SIZE} connections")))?;
    if (size as usize) < activity_slots {
        return Err(invalid(format!(
            "smaller than the {activity_slots} activity slots ({ACTIVITY_SLOTS_ENV}): every \
             running activity needs a connection, and those without one fail after waiting \
             ten seconds; set at least {activity_slots} (the default is {}), or lower \
             {ACTIVITY_SLOTS_ENV}",
            default_pool_size(activity_slots)
        )));
    }
    Ok(size)
}

/// Milliseconds between [`MIN_TIMEOUT_MS`] and [`MAX_TIMEOUT_MS`], or 0 (no limit) where allowed.
fn session_timeout(
    name: &'static str,
    value: &str,
    zero_allowed: bool,
) -> Result<u64, ConfigError> {
    let ms = whole_number(name, value)?;
    if ms == 0 && zero_allowed {
        return Ok(0);
    }
    if (MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&ms) {
        return Ok(ms);
    }
    let range = format!("milliseconds from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}");
    Err(ConfigError::Invalid {
        name,
        value: value.to_owned(),
        reason: if zero_allowed {
            format!("{range}, or 0 for no limit")
        } else {
            format!(
                "{range}; 0 is refused: without it a session cut off inside a transaction \
                 would hold its row locks until the server noticed the lost connection"
            )
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lookup_in;

    fn capacity(env: &[(&str, &str)]) -> Result<Capacity, ConfigError> {
        Capacity::from_lookup(lookup_in(env))
    }

    fn refusal(env: &[(&str, &str)]) -> String {
        capacity(env)
            .expect_err("the value must be refused")
            .to_string()
    }

    #[test]
    fn the_default_pool_covers_the_default_slots_with_a_reserve() {
        let capacity = capacity(&[]).expect("defaults");
        assert_eq!(capacity, Capacity::default());
        assert_eq!(capacity.activity_slots, 16);
        assert_eq!(capacity.postgres.max_connections, 34);
        assert!(capacity.postgres.max_connections as usize >= capacity.activity_slots);
        assert_eq!(capacity.postgres.lock_timeout_ms, None);
        assert_eq!(capacity.postgres.statement_timeout_ms, None);
        assert_eq!(capacity.postgres.idle_in_transaction_timeout_ms, 60_000);
    }

    #[test]
    fn the_default_pool_follows_the_activity_slots() {
        let capacity = capacity(&[(ACTIVITY_SLOTS_ENV, "40")]).expect("40 slots");
        assert_eq!(capacity.activity_slots, 40);
        assert_eq!(capacity.postgres.max_connections, 82);
        // 500 slots would want 1,002: capped at the largest pool accepted.
        let capacity = capacity_max();
        assert_eq!(capacity.postgres.max_connections, MAX_PG_POOL_SIZE);
    }

    fn capacity_max() -> Capacity {
        capacity(&[(ACTIVITY_SLOTS_ENV, "500")]).expect("500 slots")
    }

    #[test]
    fn the_pool_size_setting_is_honoured_within_its_bounds() {
        for (value, expected) in [("16", 16), (" 40 ", 40), ("1000", 1_000)] {
            let capacity = capacity(&[(PG_POOL_SIZE_ENV, value)]).expect("in bounds");
            assert_eq!(capacity.postgres.max_connections, expected, "{value}");
        }
        let capacity =
            capacity(&[(ACTIVITY_SLOTS_ENV, "2"), (PG_POOL_SIZE_ENV, "2")]).expect("2 and 2");
        assert_eq!(
            (capacity.activity_slots, capacity.postgres.max_connections),
            (2, 2)
        );
    }

    #[test]
    fn a_pool_smaller_than_the_activity_slots_is_refused_naming_both() {
        let message = refusal(&[(PG_POOL_SIZE_ENV, "15")]);
        assert!(
            message.starts_with("BUZZ_PG_POOL_SIZE=\"15\" is invalid: smaller than the 16"),
            "{message}"
        );
        assert!(message.contains("BUZZ_ACTIVITY_SLOTS"), "{message}");
        let message = refusal(&[(PG_POOL_SIZE_ENV, "0")]);
        assert!(message.contains("smaller than the 16"), "{message}");
    }

    #[test]
    fn out_of_range_and_malformed_values_are_refused_naming_the_variable() {
        for (env, name) in [
            (&[(PG_POOL_SIZE_ENV, "1001")][..], PG_POOL_SIZE_ENV),
            (&[(PG_POOL_SIZE_ENV, "twenty")][..], PG_POOL_SIZE_ENV),
            (&[(PG_POOL_SIZE_ENV, "-1")][..], PG_POOL_SIZE_ENV),
            (&[(ACTIVITY_SLOTS_ENV, "0")][..], ACTIVITY_SLOTS_ENV),
            (&[(ACTIVITY_SLOTS_ENV, "501")][..], ACTIVITY_SLOTS_ENV),
            (&[(PG_LOCK_TIMEOUT_ENV, "999")][..], PG_LOCK_TIMEOUT_ENV),
            (
                &[(PG_STATEMENT_TIMEOUT_ENV, "86400001")][..],
                PG_STATEMENT_TIMEOUT_ENV,
            ),
            (
                &[(PG_IDLE_TXN_TIMEOUT_ENV, "0")][..],
                PG_IDLE_TXN_TIMEOUT_ENV,
            ),
            (
                &[(PG_IDLE_TXN_TIMEOUT_ENV, "5s")][..],
                PG_IDLE_TXN_TIMEOUT_ENV,
            ),
        ] {
            let message = refusal(env);
            assert!(message.starts_with(&format!("{name}=")), "{message}");
        }
    }

    #[test]
    fn session_timeouts_are_read_in_milliseconds_and_zero_lifts_a_limit() {
        let capacity = capacity(&[
            (PG_LOCK_TIMEOUT_ENV, "5000"),
            (PG_STATEMENT_TIMEOUT_ENV, "0"),
            (PG_IDLE_TXN_TIMEOUT_ENV, "30000"),
        ])
        .expect("timeouts");
        assert_eq!(capacity.postgres.lock_timeout_ms, Some(5_000));
        assert_eq!(capacity.postgres.statement_timeout_ms, Some(0));
        assert_eq!(capacity.postgres.idle_in_transaction_timeout_ms, 30_000);
    }
}
