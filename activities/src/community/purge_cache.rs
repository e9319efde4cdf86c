//! Purge cache: SCAN + UNLINK of the community's Redis namespace, then the
//! `postgres_purged → cache_purged` advance.

use workflows::community::{CacheReport, RequestRef};

use crate::store::Stage;

use super::Attempt;
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::heartbeat::PhaseProgress;

/// SCAN + UNLINK of `buzz:{community}:*`, then the `postgres_purged → cache_purged` advance.
pub async fn purge_cache((acts, ctx): Attempt<'_>, input: RequestRef) -> PhaseResult<CacheReport> {
    let finished = async |_| Ok(CacheReport { keys_unlinked: 0 });
    let stages = [Stage::PostgresPurged, Stage::CachePurged];
    let claim = Claim::fenced_at(input.request_id, &stages);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        let unlinked = acts
            .cache
            .purge_namespace(token.community_id, |so_far| {
                progress.set(PhaseProgress::counting(
                    "unlinking Redis keys",
                    so_far,
                    "keys unlinked",
                ));
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
