//! Inventory: the catalog, the three prefixes' versions and uploads, the Redis namespace size,
//! frozen with their digest before anyone approves.

use workflows::community::{InventorySummary, RequestRef};

use crate::store::{FrozenInventory, Stage};

use super::Attempt;
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::listing::{DiscardVersions, scan_tenant_prefixes};
use super::uploads::scan_tenant_uploads;

/// Takes the inventory (catalog, three prefixes' versions and uploads in progress, Redis
/// namespace size) and freezes it with its
/// digest. A retry after the freeze returns the frozen inventory unchanged.
pub async fn inventory(
    (acts, ctx): Attempt<'_>,
    input: RequestRef,
) -> PhaseResult<InventorySummary> {
    let finished = async |_| {
        Ok(acts
            .store
            .load_frozen_inventory(input.request_id)
            .await?
            .summary())
    };
    let claim = Claim::at(input.request_id, &[Stage::Submitted, Stage::Inventoried]);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        let request = acts.store.get_request(input.request_id).await?;
        let host = request.host.clone().unwrap_or_default();
        progress.update(|p| p.step = "scanning the catalog".to_owned());
        let catalog = acts.store.catalog_scan(token.community_id).await?;
        let prefixes = scan_tenant_prefixes(
            &acts.objects,
            token.community_id,
            progress,
            &mut DiscardVersions,
        )
        .await?;
        let uploads = scan_tenant_uploads(&acts.objects, token.community_id, progress).await?;
        progress.update(|p| p.step = "counting Redis keys".to_owned());
        let redis_keys = acts.cache.count_namespace(token.community_id).await?;
        let frozen = FrozenInventory::new(token.community_id, host, catalog, prefixes, redis_keys)
            .with_uploads(uploads);
        acts.store.freeze_inventory(&token, &frozen).await?;
        Ok(frozen.summary())
    })
    .await
}
