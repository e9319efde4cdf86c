//! Fence: serving writes quiesced, then the community fenced once no serving-write lease is live.

use crate::store::FenceError;
use std::time::Duration;

use workflows::community::{FenceOutcome, RequestRef};

use crate::store::{ExecToken, Stage, StoreError};

use super::Attempt;
use super::claim::{Claim, resumable};
use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::PhaseProgress;

/// How often the fence re-checks live serving-write leases within one attempt.
pub(super) const LEASE_POLL: Duration = Duration::from_millis(500);

/// Quiesces serving writes, then fences once no live serving-write lease remains. While leases
/// drain it waits (heartbeating "waiting on N leases") up to `fence_wait`, then fails
/// transiently so Temporal retries with backoff; the pending activity shows the wait in the UI.
pub async fn fence((acts, ctx): Attempt<'_>, input: RequestRef) -> PhaseResult<FenceOutcome> {
    let finished = async |token: ExecToken| {
        Ok(FenceOutcome {
            fence_generation: reported_fence_generation(token.fence_generation)?,
        })
    };
    let claim = Claim::at(input.request_id, &[Stage::Approved, Stage::Fenced]);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        acts.store.load_frozen_inventory(input.request_id).await?;
        progress.update(|p| p.step = "quiescing serving writes".to_owned());
        acts.store.begin_quiescing(&token).await?;
        let deadline = tokio::time::Instant::now() + acts.settings.fence_wait;
        loop {
            match acts.store.fence(&token).await {
                Ok(generation) => {
                    return Ok(FenceOutcome {
                        fence_generation: reported_fence_generation(Some(generation))?,
                    });
                }
                Err(StoreError::Fence(FenceError::ServingWritesLive {
                    count, operations, ..
                })) => {
                    progress.set(PhaseProgress {
                        step: format!(
                            "waiting on {count} live serving-write lease(s): {operations:?}"
                        ),
                        done: 0,
                        total: Some(count),
                        unit: "live leases".to_owned(),
                        rates: Default::default(),
                    });
                    if tokio::time::Instant::now() >= deadline {
                        return Err(PhaseError::ServingWritesLive { count, operations });
                    }
                    tokio::time::sleep(LEASE_POLL).await;
                }
                Err(other) => return Err(other.into()),
            }
        }
    })
    .await
}

/// The fence generation a request recorded, as the workflow's contracts carry it. A fenced
/// request always recorded the generation it fenced at (in the same transaction), and generations
/// count up from 0: a missing or negative one is a damaged row, refused permanently rather than
/// reported as generation 0 (the generation every later irreversible call is checked against).
pub(super) fn reported_fence_generation(generation: Option<i64>) -> PhaseResult<u64> {
    let corrupt = |reason: String| {
        PhaseError::Store(StoreError::Corrupt {
            what: "fence generation",
            reason,
        })
    };
    let generation = generation
        .ok_or_else(|| corrupt("the fenced request recorded no fence generation".into()))?;
    u64::try_from(generation)
        .map_err(|_| corrupt(format!("fence generation {generation} is negative")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{Classified, Severity};

    #[test]
    fn a_missing_or_negative_fence_generation_is_a_permanent_corrupt_row_not_zero() {
        assert_eq!(reported_fence_generation(Some(0)).ok(), Some(0));
        assert_eq!(reported_fence_generation(Some(7)).ok(), Some(7));
        for bad in [None, Some(-1)] {
            let refused = reported_fence_generation(bad).unwrap_err();
            assert!(
                matches!(
                    refused,
                    PhaseError::Store(StoreError::Corrupt {
                        what: "fence generation",
                        ..
                    })
                ),
                "{refused:?}"
            );
            assert_eq!(refused.severity(), Severity::Permanent);
        }
    }
}
