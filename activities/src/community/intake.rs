//! Before approval: registering the request, freezing its inventory; operator events; abort.

use temporalio_sdk::activities::ActivityContext;
use workflows::community::{
    AbortInput, AbortOutcome, AbortRequest, ApprovalInput, ApprovalRecord, EventInput,
    InventorySummary, RegisterInput, RegisteredRequest, RequestEvent, RequestRef,
};

use crate::identity::consumer_of;
use crate::store::{FrozenInventory, Stage};

use super::CommunityActivities;
use super::failure::PhaseResult;
use super::fencing::reported_fence_generation;
use super::heartbeat::{ProgressCell, heartbeating};
use super::listing::{DiscardVersions, scan_tenant_prefixes};
use super::uploads::scan_tenant_uploads;

/// Records the request row; idempotent for the same request id.
pub async fn register(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RegisterInput,
) -> PhaseResult<RegisteredRequest> {
    let request = acts
        .store
        .register_community_request(&input, &consumer_of(ctx))
        .await?;
    let community_id = request
        .community_id
        .ok_or_else(|| crate::store::StoreError::Corrupt {
            what: "community deletion request",
            reason: "it names no community_id".to_owned(),
        })?;
    Ok(RegisteredRequest {
        request_id: request.id,
        community_id,
    })
}

/// Takes the inventory (catalog, three prefixes' versions and uploads in progress, Redis
/// namespace size) and freezes it with its
/// digest. A retry after the freeze returns the frozen inventory unchanged.
pub async fn inventory(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: RequestRef,
) -> PhaseResult<InventorySummary> {
    let token = acts
        .store
        .claim(input.request_id, &[Stage::Submitted, Stage::Inventoried])
        .await?;
    if token.stage == Stage::Inventoried {
        return Ok(acts
            .store
            .load_frozen_inventory(input.request_id)
            .await?
            .summary());
    }
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
        let request = acts.store.get_request(input.request_id).await?;
        let host = request.host.clone().unwrap_or_default();
        progress.update(|p| p.step = "scanning the catalog".to_owned());
        let catalog = acts.store.catalog_scan(token.community_id).await?;
        let prefixes = scan_tenant_prefixes(
            &acts.objects,
            token.community_id,
            &progress,
            &mut DiscardVersions,
        )
        .await?;
        let uploads = scan_tenant_uploads(&acts.objects, token.community_id, &progress).await?;
        progress.update(|p| p.step = "counting Redis keys".to_owned());
        let redis_keys = acts.cache.count_namespace(token.community_id).await?;
        let frozen = FrozenInventory::new(token.community_id, host, catalog, prefixes, redis_keys)
            .with_uploads(uploads);
        acts.store.freeze_inventory(&token, &frozen).await?;
        Ok(frozen.summary())
    })
    .await
}

/// Persists approval evidence (the store re-checks digest, two-person rule and stage).
pub async fn record_approval(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: ApprovalInput,
) -> PhaseResult<ApprovalRecord> {
    Ok(acts
        .store
        .record_approval(input.request_id, &input.approval, &consumer_of(ctx))
        .await?)
}

/// Verifies and records an abort's signature; returns the abort under the registered name.
pub async fn accept_abort(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: AbortInput,
) -> PhaseResult<AbortRequest> {
    Ok(acts
        .store
        .accept_abort(input.request_id, &input.abort, &consumer_of(ctx))
        .await?)
}

/// Appends an operator event to the audit trail (recording or clearing a block).
pub async fn record_event(
    acts: &CommunityActivities,
    ctx: &ActivityContext,
    input: EventInput,
) -> PhaseResult<()> {
    acts.store.record_event(&input, &consumer_of(ctx)).await?;
    if let RequestEvent::Blocked { phase, .. } = &input.event {
        acts.settings.metrics.blocked(phase);
    }
    Ok(())
}

/// Lifts quiescing/fence (bumping the generation) and ends the request aborted; refused once the
/// irreversible point was marked.
pub async fn abort(acts: &CommunityActivities, input: AbortInput) -> PhaseResult<AbortOutcome> {
    let generation = acts
        .store
        .unfence_for_abort(input.request_id, &input.abort)
        .await?;
    Ok(AbortOutcome {
        fence_generation: reported_fence_generation(Some(generation))?,
    })
}
