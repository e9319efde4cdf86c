//! Drain: relays told to drop the community, and every admitted serving write drained (no live
//! lease; every stalled one past its expiry plus the protected-operation bound).

use crate::store::FenceError;
use std::time::Duration;

use workflows::community::{DrainOutcome, RequestRef};

use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::{Stage, StoreError};

use super::claim::{Claim, claimed};
use super::failure::{PhaseError, PhaseResult};
use super::fence::LEASE_POLL;
use super::heartbeat::{PhaseProgress, ProgressCell};
use super::{Attempt, CommunityActivities};

/// Tells relays to drop the community's connections and requires every admitted serving write
/// to have drained, so the listing frozen next is the community's final storage state: no live
/// lease, and every lease left unreleased at fence time past its expiry plus the
/// protected-operation bound (see [`wait_for_stalled_leases`]).
pub async fn drain((acts, ctx): Attempt<'_>, input: RequestRef) -> PhaseResult<DrainOutcome> {
    let claim = Claim::at(input.request_id, &[Stage::Fenced]);
    claimed((acts, ctx), claim, async |token, progress| {
        acts.store.verify_fence(&token).await?;
        progress.update(|p| p.step = "publishing DisconnectCommunity".to_owned());
        let receivers = acts.cache.publish_disconnect(token.community_id).await?;
        acts.store.verify_fence(&token).await?;
        let live = acts.store.live_serving_writes(token.community_id).await?;
        if live.count > 0 {
            return Err(PhaseError::ServingWritesLive {
                count: live.count,
                operations: live.operations,
            });
        }
        let stalled = wait_for_stalled_leases(acts, token.community_id, progress).await?;
        acts.store.verify_fence(&token).await?;
        acts.store
            .record_milestone(
                &token,
                Stage::Fenced,
                "serving_writes_drained",
                serde_json::json!({
                    "disconnect_receivers": receivers,
                    "stalled_leases_waited_for": stalled,
                    "protected_operation_bound_secs": MAX_PROTECTED_OPERATION.as_secs(),
                }),
            )
            .await?;
        Ok(DrainOutcome {
            disconnect_receivers: receivers,
        })
    })
    .await
}

/// Waits, heartbeating "waiting on N stalled lease(s) until T", until every lease left
/// unreleased at fence time is past `expires_at` plus [`MAX_PROTECTED_OPERATION`] on the
/// database clock: only then can no writer the lease library admitted still land an object
/// version. Gives up after `fence_wait` with a transient failure, so Temporal retries with
/// backoff and the pending activity shows the wait. Returns how many leases were waited for.
async fn wait_for_stalled_leases(
    acts: &CommunityActivities,
    community_id: uuid::Uuid,
    progress: &ProgressCell,
) -> PhaseResult<u64> {
    let deadline = tokio::time::Instant::now() + acts.settings.fence_wait;
    let mut waited_for = 0;
    loop {
        let stalled = acts
            .store
            .stalled_serving_writes(community_id, MAX_PROTECTED_OPERATION)
            .await?;
        let (count, Some(until)) = (stalled.count, stalled.until) else {
            return Ok(waited_for);
        };
        if count == 0 {
            return Ok(waited_for);
        }
        waited_for = waited_for.max(count);
        progress.set(PhaseProgress {
            step: format!(
                "waiting on {count} stalled lease(s) until {} ({:?}: {})",
                until.to_rfc3339(),
                stalled.operations,
                "expiry plus the protected-operation bound"
            ),
            done: 0,
            total: Some(count),
            unit: "stalled leases".to_owned(),
            rates: Default::default(),
        });
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(StoreError::Fence(FenceError::StalledServingWrites {
                community_id,
                count,
                until,
            })
            .into());
        }
        // Sleep until the database says the last one leaves its bound, but never past this
        // attempt's wait, and re-read at least every LEASE_POLL.
        let remaining = (until - stalled.now).to_std().unwrap_or_default();
        let nap = remaining
            .min(LEASE_POLL)
            .min(deadline.saturating_duration_since(now))
            .max(Duration::from_millis(50));
        tokio::time::sleep(nap).await;
    }
}
