//! `purge_agents` of one community: each agent's Redis namespace, then the agents' rows, then
//! the community verified again with the agents covered.
//!
//! Keys go before rows, so an agent row still present always means its namespace may still hold
//! keys, and a retry purges it again; every purged namespace is logged (even when empty), so the
//! verification knows every agent namespace once the rows are gone.

use serde_json::{Value, json};
use uuid::Uuid;
use workflows::user::footprint::{AGENTS_TABLE, agent_key_pattern};

use super::purge_db::{erase_rows, erased_summary, record_community_purged};
use super::verify::verify_community;
use super::{Eraser, ErasureError, HandlerRun};
use crate::store::user::erasure::PurgeLogKind;
use crate::store::user::erasure::rows::RowScope;

/// Runs `purge_agents` of `community_id` and returns the result to save.
pub(crate) async fn purge_agents(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
) -> Result<Value, ErasureError> {
    let agents = eraser
        .store
        .user_agent_ids(community_id, run.pubkey)
        .await?;
    for (done, agent) in agents.iter().enumerate() {
        let pattern = agent_key_pattern(community_id, *agent);
        eraser.store.require_current_attempt(&run.attempt).await?;
        let keys = eraser.cache.purge_matching(&pattern, |_| {}).await?;
        eraser
            .store
            .log_erased(
                &run.attempt,
                community_id,
                PurgeLogKind::AgentKeys,
                &pattern,
                keys,
            )
            .await?;
        run.beat("agent_keys", u64::try_from(done + 1).unwrap_or(u64::MAX))
            .await?;
    }
    erase_rows(eraser, run, community_id, RowScope::Only(AGENTS_TABLE)).await?;
    let verified = verify_community(eraser, run, community_id, &[]).await?;
    let result = json!({
        "agents_deleted": verified_agents_deleted(eraser, run).await?,
        "erased": erased_summary(eraser, run).await?,
        "verified": verified.summary(),
    });
    record_community_purged(eraser, run, community_id, &result).await?;
    Ok(result)
}

/// Agent rows this stage row's attempts deleted, from the purge log.
async fn verified_agents_deleted(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
) -> Result<u64, ErasureError> {
    Ok(eraser
        .store
        .erased_in_stage(run.attempt.request_id, run.attempt.stage_id)
        .await?
        .into_iter()
        .filter(|(what, _, _)| what == PurgeLogKind::Rows.as_str())
        .map(|(_, _, n)| n)
        .sum())
}
