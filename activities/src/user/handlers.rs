//! The dummy handlers of a user deletion. They change no tenant data: each takes the configured
//! delay (heartbeating), then reports the result a real handler would — or the injected failure.

use std::time::Duration;

use serde_json::json;
use temporalio_sdk::activities::ActivityContext;
use tokio::time::Instant;
use uuid::Uuid;
use workflows::user::{HandlerDirectives, StageKind};

/// Longest sleep between two heartbeats; far below the handler heartbeat timeout.
const HEARTBEAT_SLICE: Duration = Duration::from_millis(200);

/// Why a dummy handler produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// The run asked this stage to fail (`--fail-stage`).
    #[error("injected failure: --fail-stage {0} (dummy handler, nothing was changed)")]
    Injected(StageKind),
    /// Temporal cancelled the attempt (its heartbeat timed out or the workflow asked).
    #[error("the handler attempt was cancelled")]
    Cancelled,
}

/// Progress shown in the Web UI while a handler runs.
#[derive(Debug, Clone, serde::Serialize)]
struct HandlerHeartbeat {
    stage_id: Uuid,
    stage: StageKind,
    elapsed_ms: u64,
    delay_ms: u64,
}

/// Runs the dummy handler of `stage` (on `community_id` for per-community stages).
pub async fn run_dummy_handler(
    ctx: &ActivityContext,
    stage_id: Uuid,
    stage: StageKind,
    community_id: Option<Uuid>,
    directives: &HandlerDirectives,
) -> Result<serde_json::Value, HandlerError> {
    take_delay(ctx, stage_id, stage, directives.stage_delay_ms).await?;
    if directives.fail_stage == Some(stage) {
        return Err(HandlerError::Injected(stage));
    }
    Ok(dummy_result(stage, community_id, directives))
}

/// The result a real handler would save. `purge_db` observes agents unless the run says the
/// community has none (`--demo-no-agents-in`).
pub fn dummy_result(
    stage: StageKind,
    community_id: Option<Uuid>,
    directives: &HandlerDirectives,
) -> serde_json::Value {
    match stage {
        StageKind::GateUser => json!({"dummy": true, "gated": true}),
        StageKind::PurgeDb => {
            let has_agents =
                community_id.is_none_or(|community| !directives.no_agents_in.contains(&community));
            json!({"dummy": true, "rows_deleted": 0, "has_agents": has_agents})
        }
        StageKind::PurgeAgents => json!({"dummy": true, "agents_deleted": 0}),
    }
}

/// Sleeps `delay_ms` in short slices, heartbeating after each so a dead worker is noticed within
/// the heartbeat timeout and a cancelled attempt stops promptly.
pub(crate) async fn take_delay(
    ctx: &ActivityContext,
    stage_id: Uuid,
    stage: StageKind,
    delay_ms: u64,
) -> Result<(), HandlerError> {
    let delay = Duration::from_millis(delay_ms);
    let started = Instant::now();
    loop {
        let elapsed = started.elapsed();
        // A failed heartbeat encoding only loses Web UI progress; the deadline still holds.
        let _ = ctx
            .record_heartbeat(HandlerHeartbeat {
                stage_id,
                stage,
                elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                delay_ms,
            })
            .await;
        if ctx.is_cancelled() {
            return Err(HandlerError::Cancelled);
        }
        if elapsed >= delay {
            return Ok(());
        }
        tokio::time::sleep(HEARTBEAT_SLICE.min(delay - elapsed)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_db_reports_agents_unless_the_run_says_none() {
        let b = Uuid::from_u128(0xb);
        let c = Uuid::from_u128(0xc);
        let directives = HandlerDirectives {
            no_agents_in: vec![c],
            ..HandlerDirectives::default()
        };
        assert_eq!(
            dummy_result(StageKind::PurgeDb, Some(b), &directives)["has_agents"],
            json!(true)
        );
        assert_eq!(
            dummy_result(StageKind::PurgeDb, Some(c), &directives)["has_agents"],
            json!(false)
        );
    }
}
