//! The price of the exclusion proof per DeleteObjects call: every call is bracketed by two
//! `Store::verify_fence` queries. Measured on a finished request, whose token is still current
//! and whose community is still fenced, so each check runs its full path and succeeds.

use std::time::{Duration, Instant};

use activities::store::{ExecToken, Stage};
use anyhow::{Context, Result};
use uuid::Uuid;

use crate::stack::Stack;

/// Sequential checks timed.
pub const FENCE_CHECKS: u32 = 200;

/// Mean latency of one `verify_fence` over [`FENCE_CHECKS`] sequential calls.
pub async fn mean_fence_check(stack: &Stack, request_id: Uuid) -> Result<Duration> {
    let request = stack.store.get_request(request_id).await?;
    let token = ExecToken {
        request_id,
        community_id: request
            .community_id
            .context("a community request has a community")?,
        stage: request
            .stage
            .parse::<Stage>()
            .map_err(|e| anyhow::anyhow!("unknown stage {:?}", e.0))?,
        exec_generation: request.exec_generation,
        fence_generation: request.fence_generation,
    };
    let started = Instant::now();
    for _ in 0..FENCE_CHECKS {
        stack.store.verify_fence(&token).await?;
    }
    Ok(started.elapsed() / FENCE_CHECKS)
}
