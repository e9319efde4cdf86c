//! Heartbeats that carry readable progress while a phase works.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use temporalio_sdk::activities::ActivityContext;

use super::failure::{PhaseError, PhaseResult};

/// How often progress is sent. The SDK throttles to 80 % of the heartbeat timeout anyway; a
/// short period keeps the Web UI's "last heartbeat" fresh.
const HEARTBEAT_PERIOD: Duration = Duration::from_secs(2);

/// Progress a person can read in the Web UI's pending-activity panel, and that a retried attempt
/// reads back to report where its predecessor stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseProgress {
    /// What the phase is doing right now, in words.
    pub step: String,
    /// Units done so far (versions, rows, keys, chunks: see `unit`).
    pub done: u64,
    /// Units in total, when known.
    pub total: Option<u64>,
    /// What `done` and `total` count.
    pub unit: String,
    /// The delete rate in force per tenant prefix, versions per second, while objects are
    /// deleted (it adapts to S3's `SlowDown`; see `pacing`). Empty otherwise.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rates: std::collections::BTreeMap<String, u32>,
}

impl PhaseProgress {
    /// `step`, counting `done` units of `unit` towards a total not known in advance.
    pub fn counting(step: impl Into<String>, done: u64, unit: &str) -> Self {
        Self {
            step: step.into(),
            done,
            total: None,
            unit: unit.to_owned(),
            rates: Default::default(),
        }
    }
}

/// Shared, cheaply updated progress of one activity attempt.
#[derive(Debug, Clone, Default)]
pub struct ProgressCell(Arc<Mutex<PhaseProgress>>);

impl ProgressCell {
    /// Replaces the whole progress record.
    pub fn set(&self, progress: PhaseProgress) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = progress;
        }
    }

    /// Updates the step description and counters in place.
    pub fn update(&self, f: impl FnOnce(&mut PhaseProgress)) {
        if let Ok(mut slot) = self.0.lock() {
            f(&mut slot);
        }
    }

    /// A copy of the current progress.
    pub fn snapshot(&self) -> PhaseProgress {
        self.0.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// Runs `work` while heartbeating `progress` every couple of seconds; stops with
/// [`PhaseError::Cancelled`] as soon as Temporal cancels the attempt (dropping `work`, so no
/// further irreversible call is issued from it).
pub async fn heartbeating<T>(
    ctx: &ActivityContext,
    progress: &ProgressCell,
    work: impl Future<Output = PhaseResult<T>>,
) -> PhaseResult<T> {
    let mut ticker = tokio::time::interval(HEARTBEAT_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled() => return Err(PhaseError::Cancelled),
            outcome = &mut work => {
                // Leave the final progress as the attempt's last heartbeat detail.
                let _ = ctx.record_heartbeat(progress.snapshot()).await;
                return outcome;
            }
            _ = ticker.tick() => {
                // A heartbeat that cannot be encoded is not worth failing the phase for.
                let _ = ctx.record_heartbeat(progress.snapshot()).await;
            }
        }
    }
}
