//! `purge_db` of one community: the user's media objects (decided per object), their rows in
//! every declared table but the agents', and their per-user Redis keys; then the community is
//! verified and the saved result says whether the user has agents there (reference 003's
//! branch).

use serde_json::{Value, json};
use uuid::Uuid;
use workflows::user::footprint::AGENTS_TABLE;

use super::media::erase_media;
use super::verify::verify_community;
use super::{Eraser, ErasureError, HandlerRun};
use crate::redis::CacheError;
use crate::store::user::erasure::PurgeLogKind;
use crate::store::user::erasure::rows::RowScope;
use crate::taxonomy::user_keys::{user_key_scan_pattern, user_key_shape};

/// Runs `purge_db` of `community_id` and returns the result to save.
pub(crate) async fn purge_db(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
) -> Result<Value, ErasureError> {
    // Objects first: their decisions read the user's upload rows, which the row step deletes.
    let media = erase_media(eraser, run, community_id).await?;
    erase_rows(
        eraser,
        run,
        community_id,
        RowScope::AllExcept(&[AGENTS_TABLE]),
    )
    .await?;

    let pattern = user_key_scan_pattern(community_id, run.pubkey);
    eraser.store.require_current_attempt(&run.attempt).await?;
    let declared = |key: &str| user_key_shape(community_id, run.pubkey, key).is_some();
    let keys = match eraser
        .cache
        .purge_declared_matching(&pattern, declared, |_| {})
        .await
    {
        Ok(keys) => keys,
        Err(CacheError::UndeclaredKey { key, .. }) => {
            return Err(ErasureError::UndeclaredUserKeys {
                found: 1,
                named: vec![key],
            });
        }
        Err(other) => return Err(other.into()),
    };
    eraser
        .store
        .log_erased(
            &run.attempt,
            community_id,
            PurgeLogKind::UserKeys,
            &pattern,
            keys,
        )
        .await?;
    run.beat("keys", keys).await?;

    let verified = verify_community(eraser, run, community_id, &[AGENTS_TABLE]).await?;
    let agents_left = verified.agents_left;
    let erased = erased_summary(eraser, run).await?;
    let result = json!({
        "has_agents": agents_left > 0,
        "agents_found": agents_left,
        "erased": erased,
        "media": media,
        "verified": verified.summary(),
    });
    record_community_purged(eraser, run, community_id, &result).await?;
    Ok(result)
}

/// Writes the stage's `user.community_purged` audit event (once per stage row) with its result.
pub(crate) async fn record_community_purged(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
    result: &Value,
) -> Result<(), ErasureError> {
    let detail = json!({"community_id": community_id, "stage": run.stage, "result": result});
    eraser
        .store
        .audit_erasure(&run.attempt, "user.community_purged", &detail)
        .await?;
    Ok(())
}

/// Deletes the user's rows in the community's tables of `scope`, heartbeating every batch.
pub(crate) async fn erase_rows(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
    scope: RowScope<'_>,
) -> Result<(), ErasureError> {
    let mut done = 0u64;
    for target in eraser.store.user_row_targets(scope).await? {
        loop {
            let removed = eraser
                .store
                .erase_row_batch(
                    &run.attempt,
                    community_id,
                    &target,
                    run.pubkey,
                    eraser.row_batch,
                )
                .await?;
            if removed == 0 {
                break;
            }
            done = done.saturating_add(removed);
            run.beat("rows", done).await?;
        }
    }
    Ok(())
}

/// Everything this stage row's attempts removed, from the purge log (so a retried attempt
/// reports what its predecessors deleted too).
pub(crate) async fn erased_summary(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
) -> Result<Value, ErasureError> {
    let mut summary = serde_json::Map::new();
    for (what, subject, removed) in eraser
        .store
        .erased_in_stage(run.attempt.request_id, run.attempt.stage_id)
        .await?
    {
        let entry = summary
            .entry(what)
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(by_subject) = entry {
            by_subject.insert(subject, json!(removed));
        }
    }
    Ok(Value::Object(summary))
}
