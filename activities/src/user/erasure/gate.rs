//! `gate_user`: the per-user write fence, exactly like a community's — quiesce (no new serving
//! write for the user is admitted), drain (wait until no lease for the user is live), fence (every
//! row write naming the user is refused, SQLSTATE BZ006), then wait out any lease left unreleased
//! at fence time. Once fenced, nothing the user writes survives the deletion: the gate checks
//! that the user holds data in no community the approved inventory does not list.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use uuid::Uuid;
use workflows::user::inventory::UserInventory;

use super::inventory::communities_with_user_keys;
use super::{Eraser, ErasureError, HandlerRun};
use crate::failure::{Classified, Severity};
use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::StoreError;

/// Pause between two drain checks.
const DRAIN_POLL: Duration = Duration::from_millis(500);

/// Runs `gate_user` and returns the result to save.
pub(crate) async fn gate_user(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    inventory: &UserInventory,
) -> Result<Value, ErasureError> {
    let request_id = run.attempt.request_id;
    let listed: BTreeSet<Uuid> = inventory
        .communities
        .iter()
        .map(|c| c.community_id)
        .collect();
    // Before anything is fenced, so that ownership can still be transferred.
    refuse_owned_communities_with_members(eraser, run.pubkey, &listed).await?;
    eraser.store.require_current_attempt(&run.attempt).await?;
    eraser.store.quiesce_user(request_id, run.pubkey).await?;
    let started = Instant::now();
    let fence = loop {
        match eraser.store.fence_user(request_id, run.pubkey).await {
            Ok(fence) => break fence,
            Err(error) if error.severity() == Severity::Transient => {
                wait_or_give_up(eraser, run, started, &error).await?;
            }
            Err(error) => return Err(error.into()),
        }
    };
    loop {
        match eraser
            .store
            .require_no_stalled_user_serving_writes(run.pubkey, MAX_PROTECTED_OPERATION)
            .await
        {
            Ok(_) => break,
            Err(error) if error.severity() == Severity::Transient => {
                wait_or_give_up(eraser, run, started, &error).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    let mut holding = eraser.store.user_communities(run.pubkey).await?;
    holding.extend(communities_with_user_keys(eraser, run.pubkey).await??);
    let uninventoried: Vec<Uuid> = holding.difference(&listed).copied().collect();
    if !uninventoried.is_empty() {
        return Err(ErasureError::UninventoriedCommunities {
            communities: uninventoried,
        });
    }
    Ok(json!({
        "gated": true,
        "fence_generation": fence.generation,
        "drained_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "communities_holding_data": holding.len(),
    }))
}

/// Refuses while the user owns a community of the inventory that has other members: their
/// community would be left without an owner. A community the user is the only member of does not
/// block (it is left without members once their rows are purged).
async fn refuse_owned_communities_with_members(
    eraser: &Eraser,
    pubkey: &str,
    listed: &BTreeSet<Uuid>,
) -> Result<(), ErasureError> {
    let listed: Vec<Uuid> = listed.iter().copied().collect();
    let blocking: Vec<String> = eraser
        .store
        .owned_communities(pubkey, &listed)
        .await?
        .into_iter()
        .filter(|owned| owned.other_members > 0)
        .map(|owned| {
            format!(
                "{} ({}) with {} other member(s)",
                owned.host.as_deref().unwrap_or("?"),
                owned.community_id,
                owned.other_members
            )
        })
        .collect();
    if blocking.is_empty() {
        Ok(())
    } else {
        Err(ErasureError::OwnsCommunities {
            communities: blocking,
        })
    }
}

/// Heartbeats and sleeps while the drain is not done, or gives up once it took longer than the
/// eraser's drain timeout (the stage fails with the last refusal; a later run continues).
async fn wait_or_give_up(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    started: Instant,
    refusal: &StoreError,
) -> Result<(), ErasureError> {
    if started.elapsed() >= eraser.drain_timeout {
        return Err(ErasureError::DrainTimeout {
            waited_secs: started.elapsed().as_secs(),
            detail: refusal.to_string(),
        });
    }
    run.beat(
        "drain",
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    )
    .await?;
    tokio::time::sleep(DRAIN_POLL).await;
    Ok(())
}
