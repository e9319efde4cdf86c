//! Reaps ended serving-write lease rows and samples the lease gauges, every
//! `BUZZ_LEASE_REAP_SECS` seconds (default 60), at most `BUZZ_LEASE_REAP_BATCH` rows per run
//! (default 5,000).
//!
//! Every external serving write mints one lease row; without reaping the lease table grows for
//! ever. A row is reaped once it is released or expired and past the stalled-writer window
//! (`activities::store::lease_gauges`). A run deletes one bounded batch: a backlog (a table that
//! grew before this reaper existed) drains over a few runs without one long transaction. Every
//! worker replica runs it; the database hands each run rows no other run holds, so replicas
//! neither block nor double-count. A failed run (Postgres unreachable) is logged and counted and
//! the worker keeps running: tidying leases never takes a deletion worker down.

use std::time::Duration;

use activities::metrics::LeaseInstruments;
use activities::store::Store;
use activities::store::lease_gauges::{LeaseGauges, MAX_REAP_BATCH, ReapedLeases};

/// The variable holding the period in whole seconds.
pub const REAP_SECS_ENV: &str = "BUZZ_LEASE_REAP_SECS";
/// The variable holding the most rows one run deletes.
pub const REAP_BATCH_ENV: &str = "BUZZ_LEASE_REAP_BATCH";
/// The period when unset.
pub const DEFAULT_REAP_SECS: u64 = 60;
/// Longest accepted period: beyond an hour the stalled-lease alert fires before a run.
pub const MAX_REAP_SECS: u64 = 3600;
/// The batch when unset.
pub const DEFAULT_REAP_BATCH: u32 = 5_000;

/// How the reaper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaperSettings {
    /// Time between runs.
    pub every: Duration,
    /// Most rows one run deletes.
    pub batch: u32,
}

/// A reaper variable's value is out of range.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?} is not {expected} (unset for the default, {default})")]
pub struct ReaperSettingError {
    /// The variable.
    pub name: &'static str,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub expected: String,
    /// Its default.
    pub default: String,
}

impl ReaperSettings {
    /// The settings from the variables' values (`None`: unset).
    pub fn from_values(
        every: Option<&str>,
        batch: Option<&str>,
    ) -> Result<Self, ReaperSettingError> {
        let every = match every {
            None => DEFAULT_REAP_SECS,
            Some(value) => parse_in(value, 1, MAX_REAP_SECS).ok_or_else(|| ReaperSettingError {
                name: REAP_SECS_ENV,
                value: value.to_owned(),
                expected: format!("a whole number of seconds between 1 and {MAX_REAP_SECS}"),
                default: DEFAULT_REAP_SECS.to_string(),
            })?,
        };
        let batch = match batch {
            None => DEFAULT_REAP_BATCH,
            Some(value) => parse_in(value, 1, u64::from(MAX_REAP_BATCH))
                .and_then(|b| u32::try_from(b).ok())
                .ok_or_else(|| ReaperSettingError {
                    name: REAP_BATCH_ENV,
                    value: value.to_owned(),
                    expected: format!("a whole number of rows between 1 and {MAX_REAP_BATCH}"),
                    default: DEFAULT_REAP_BATCH.to_string(),
                })?,
        };
        Ok(Self {
            every: Duration::from_secs(every),
            batch,
        })
    }
}

fn parse_in(value: &str, low: u64, high: u64) -> Option<u64> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|v| (low..=high).contains(v))
}

/// What one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaperRun {
    /// Rows reaped, per kind.
    pub reaped: ReapedLeases,
    /// The lease table after the reaping.
    pub gauges: LeaseGauges,
}

/// One run: reaps a batch, then samples the table. Counts and records both into `instruments`
/// (when metrics are on); on failure logs it and counts it, and the gauges keep their values.
pub async fn run_once(
    store: &Store,
    batch: u32,
    instruments: Option<&LeaseInstruments>,
) -> Option<ReaperRun> {
    let run = async {
        let reaped = store.reap_ended_serving_write_leases(batch).await?;
        if let Some(instruments) = instruments {
            instruments.reaped(reaped);
        }
        let gauges = store.sample_lease_gauges().await?;
        if let Some(instruments) = instruments {
            instruments.record(&gauges);
        }
        Ok::<_, activities::store::StoreError>(ReaperRun { reaped, gauges })
    };
    match run.await {
        Ok(run) => {
            if run.reaped.total() > 0 {
                tracing::info!(
                    community = run.reaped.community,
                    user = run.reaped.user,
                    "reaped ended serving-write leases past the stalled-writer window"
                );
            }
            Some(run)
        }
        Err(error) => {
            if let Some(instruments) = instruments {
                instruments.failed();
            }
            tracing::warn!(
                error = %error,
                "the serving-write lease reaper failed; it runs again at the next tick"
            );
            None
        }
    }
}

/// Runs the reaper every `settings.every` until the process ends (the first run at once).
pub fn spawn(store: Store, settings: ReaperSettings, instruments: Option<LeaseInstruments>) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            run_once(&store, settings.batch, instruments.as_ref()).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_when_unset_and_nonsense_is_refused_naming_the_variable() {
        assert_eq!(
            ReaperSettings::from_values(None, None).ok(),
            Some(ReaperSettings {
                every: Duration::from_secs(60),
                batch: 5_000
            })
        );
        assert_eq!(
            ReaperSettings::from_values(Some(" 5 "), Some("100000")).ok(),
            Some(ReaperSettings {
                every: Duration::from_secs(5),
                batch: 100_000
            })
        );
        for (every, batch, named) in [
            (Some("0"), None, REAP_SECS_ENV),
            (Some("3601"), None, REAP_SECS_ENV),
            (Some("1m"), None, REAP_SECS_ENV),
            (None, Some("0"), REAP_BATCH_ENV),
            (None, Some("100001"), REAP_BATCH_ENV),
            (None, Some("-3"), REAP_BATCH_ENV),
        ] {
            let error = ReaperSettings::from_values(every, batch)
                .err()
                .unwrap_or_else(|| panic!("{every:?}/{batch:?} must be refused"));
            assert_eq!(error.name, named);
            assert!(error.to_string().starts_with(named), "{error}");
        }
    }
}
