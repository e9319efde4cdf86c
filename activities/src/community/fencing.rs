//! From approval to a drained, fenced community: preflight, fence, drain.

use std::time::Duration;

use temporalio_sdk::activities::ActivityContext;
use workflows::community::{DrainOutcome, FenceOutcome, RequestRef};

use crate::objects::{ObjectStoreError, S3Permission};
use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::{Stage, StoreError};
use crate::taxonomy::tenant_prefixes;

use super::CommunityActivities;
use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::{PhaseProgress, ProgressCell, heartbeating};

/// How often the fence re-checks live serving-write leases within one attempt.
const LEASE_POLL: Duration = Duration::from_millis(500);

/// Proves, on every tenant prefix and without deleting anything, each S3 permission the
/// destructive phase needs ([`S3Permission::ALL`]: list versions, list uploads, delete versions,
/// abort uploads; see `objects::probe`), and that the catalog has not drifted since the
/// inventory (a drift is permanent: the approval no longer describes what would be deleted).
/// Every missing permission is collected and the request blocks naming them all
/// ([`PhaseError::PermissionsMissing`]), before the fence and the irreversible marker.
pub async fn preflight(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RequestRef,
) -> PhaseResult<()> {
    let token = acts
        .store
        .claim(input.request_id, &[Stage::Approved])
        .await?;
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
        acts.store.load_frozen_inventory(input.request_id).await?;
        let prefixes = tenant_prefixes(token.community_id);
        prove_s3_permissions(acts, &prefixes, &progress).await?;
        acts.store.check_catalog_unchanged(&token).await?;
        let proven: Vec<&str> = S3Permission::ALL.iter().map(|p| p.action()).collect();
        acts.store
            .record_milestone(
                &token,
                Stage::Approved,
                "preflight",
                serde_json::json!({
                    "prefixes_listable": prefixes.len(),
                    "s3_permissions_proven": proven,
                    "catalog_unchanged": true,
                }),
            )
            .await?;
        Ok(())
    })
    .await
}

/// Proves every permission of [`S3Permission::ALL`] on every prefix; a denial is collected, any
/// other failure returned at once (a transient one is retried by Temporal).
async fn prove_s3_permissions(
    acts: &CommunityActivities,
    prefixes: &[String],
    progress: &ProgressCell,
) -> PhaseResult<()> {
    let mut missing = Vec::new();
    for prefix in prefixes {
        for permission in S3Permission::ALL {
            progress.update(|p| p.step = format!("proving {permission} on {prefix}"));
            match acts.objects.prove_permission(permission, prefix).await {
                Ok(()) => {}
                Err(ObjectStoreError::PermissionMissing(denied)) => missing.push(*denied),
                Err(other) => return Err(other.into()),
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PhaseError::PermissionsMissing { missing })
    }
}

/// Quiesces serving writes, then fences once no live serving-write lease remains. While leases
/// drain it waits (heartbeating "waiting on N leases") up to `fence_wait`, then fails
/// transiently so Temporal retries with backoff; the pending activity shows the wait in the UI.
pub async fn fence(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RequestRef,
) -> PhaseResult<FenceOutcome> {
    let token = acts
        .store
        .claim(input.request_id, &[Stage::Approved, Stage::Fenced])
        .await?;
    if token.stage == Stage::Fenced {
        return Ok(FenceOutcome {
            fence_generation: reported_fence_generation(token.fence_generation)?,
        });
    }
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
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
                Err(StoreError::ServingWritesLive {
                    count, operations, ..
                }) => {
                    progress.set(PhaseProgress {
                        step: format!(
                            "waiting on {count} live serving-write lease(s): {operations:?}"
                        ),
                        done: 0,
                        total: Some(count),
                        unit: "live leases".to_owned(),
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

/// Tells relays to drop the community's connections and requires every admitted serving write
/// to have drained, so the listing frozen next is the community's final storage state: no live
/// lease, and every lease left unreleased at fence time past its expiry plus the
/// protected-operation bound (see [`wait_for_stalled_leases`]).
pub async fn drain(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RequestRef,
) -> PhaseResult<DrainOutcome> {
    let token = acts.store.claim(input.request_id, &[Stage::Fenced]).await?;
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
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
        let stalled = wait_for_stalled_leases(acts, token.community_id, &progress).await?;
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
        });
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(StoreError::StalledServingWrites {
                community_id,
                count,
                until,
            }
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
