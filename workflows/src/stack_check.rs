//! `StackCheck`: a round trip through the whole stack — one heartbeating activity that touches
//! Postgres, Redis and S3, then a durable timer. It proves a worker is wired to every dependency
//! and, on the time-skipping server, that long waits cost no wall time.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{ActivityOptions, WorkflowContext, WorkflowResult};

use crate::activity_contract;

/// What to check and how long to sleep afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCheckInput {
    /// Written to Redis and S3 and read back, so a stale answer cannot pass.
    pub nonce: String,
    /// Durable timer after the activity, in seconds.
    pub sleep_secs: u64,
}

/// What the activity found in each store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TouchReport {
    /// Highest applied migration version in Postgres.
    pub postgres_schema_version: i64,
    /// Keys written under a throwaway namespace, found again by SCAN, then unlinked (1).
    pub redis_keys_round_tripped: u64,
    /// Version id S3 gave the probe object (proves bucket versioning is on).
    pub s3_version_id: String,
    /// The nonce as read back from S3.
    pub s3_echo: String,
}

/// The workflow's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCheckReport {
    /// What the activity saw.
    pub touched: TouchReport,
    /// Workflow time that passed across the timer, in seconds.
    pub slept_secs: u64,
}

activity_contract!(
    /// Reads the schema version, writes and reads back the nonce in Redis and S3, heartbeating
    /// after each store.
    TouchStores = "stack.touch_stores": StackCheckInput => TouchReport
);

/// Round-trip workflow used by the foundation tests and `buzz-deletion stack-check`.
#[workflow]
#[derive(Default)]
pub struct StackCheck;

#[workflow_methods]
impl StackCheck {
    /// Touches every store once, then sleeps on a durable timer.
    #[run]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: StackCheckInput,
    ) -> WorkflowResult<StackCheckReport> {
        let options = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(60))
            .heartbeat_timeout(Duration::from_secs(20))
            .retry_policy(crate::retry::a_few_times(Duration::from_secs(1), 5))
            .build();
        let touched = ctx
            .execute_activity(TouchStores, input.clone(), options)
            .await?;
        let before = ctx.workflow_time();
        ctx.timer(Duration::from_secs(input.sleep_secs)).await;
        let slept_secs = match (before, ctx.workflow_time()) {
            (Some(a), Some(b)) => b.duration_since(a).map(|d| d.as_secs()).unwrap_or(0),
            _ => 0,
        };
        Ok(StackCheckReport {
            touched,
            slept_secs,
        })
    }
}
