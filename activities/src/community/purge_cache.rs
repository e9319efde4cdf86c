//! Purge cache: SCAN + UNLINK of the community's Redis namespace, then the
//! `postgres_purged → cache_purged` advance.

use temporalio_sdk::activities::ActivityContext;
use workflows::community::{CacheReport, RequestRef};

use crate::store::Stage;

use super::CommunityActivities;
use super::failure::PhaseResult;
use super::heartbeat::{PhaseProgress, ProgressCell, heartbeating};

/// SCAN + UNLINK of `buzz:{community}:*`, then the `postgres_purged → cache_purged` advance.
pub async fn purge_cache(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RequestRef,
) -> PhaseResult<CacheReport> {
    let token = acts
        .store
        .claim(
            input.request_id,
            &[Stage::PostgresPurged, Stage::CachePurged],
        )
        .await?;
    if token.stage == Stage::CachePurged {
        return Ok(CacheReport { keys_unlinked: 0 });
    }
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
        acts.store.load_frozen_inventory(input.request_id).await?;
        acts.store.verify_fence(&token).await?;
        let unlinked = acts
            .cache
            .purge_namespace(token.community_id, |so_far| {
                progress.set(PhaseProgress {
                    step: "unlinking Redis keys".to_owned(),
                    done: so_far,
                    total: None,
                    unit: "keys unlinked".to_owned(),
                });
            })
            .await?;
        acts.store.verify_fence(&token).await?;
        acts.store
            .advance(
                &token,
                Stage::PostgresPurged,
                Stage::CachePurged,
                serde_json::json!({"keys_unlinked": unlinked}),
            )
            .await?;
        acts.settings.metrics.keys_purged(unlinked);
        Ok(CacheReport {
            keys_unlinked: unlinked,
        })
    })
    .await
}
