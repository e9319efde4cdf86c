//! The real handlers of a `user:<pubkey>` deletion: take the inventory, gate the user (per-user
//! write fence), purge their rows, media and keys per community, purge their agents, and verify
//! each community. Reference 003's stage graph is unchanged; only what the handlers do is real.

mod agents;
mod error;
mod gate;
mod inventory;
mod media;
mod purge_db;
mod verify;

use std::time::Duration;

use serde::Serialize;
use temporalio_sdk::activities::ActivityContext;
use uuid::Uuid;
use workflows::user::StageKind;
use workflows::user::inventory::UserInventory;

use crate::redis::Cache;
use crate::s3::ObjectStore;
use crate::store::Store;
use crate::store::user::erasure::ErasureAttempt;

pub use error::ErasureError;
pub use inventory::take_inventory;

/// Rows deleted per batch (one transaction each) unless the worker says otherwise.
pub const DEFAULT_ROW_BATCH: u32 = 1_000;

/// Everything the real handlers reach: Postgres, the bucket and Redis.
#[derive(Debug, Clone)]
pub struct Eraser {
    store: Store,
    objects: ObjectStore,
    cache: Cache,
    /// How long the gate waits for the user's serving writes to drain before the stage fails.
    drain_timeout: Duration,
    /// Rows deleted per transaction.
    row_batch: u32,
}

impl Eraser {
    /// Handlers over these clients.
    pub fn new(store: Store, objects: ObjectStore, cache: Cache) -> Self {
        Eraser {
            store,
            objects,
            cache,
            drain_timeout: Duration::from_secs(180),
            row_batch: DEFAULT_ROW_BATCH,
        }
    }

    /// The same handlers deleting at most `rows` rows per transaction (at least one).
    pub fn with_row_batch(mut self, rows: u32) -> Self {
        self.row_batch = rows.max(1);
        self
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The Redis client.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }
}

/// Where a handler attempt is, shown in the Web UI as the activity's heartbeat details.
#[derive(Debug, Clone, Serialize)]
struct Progress {
    stage: String,
    community_id: Option<Uuid>,
    step: String,
    done: u64,
}

/// One running handler: its attempt, the user, and the activity context to heartbeat on.
pub(crate) struct HandlerRun<'a> {
    pub ctx: &'a ActivityContext,
    pub attempt: ErasureAttempt,
    pub pubkey: &'a str,
    pub stage: &'a str,
    pub community_id: Option<Uuid>,
}

impl HandlerRun<'_> {
    /// Heartbeats `step` with a progress count, and stops a cancelled attempt.
    async fn beat(&self, step: &str, done: u64) -> Result<(), ErasureError> {
        // A lost heartbeat encoding only loses Web UI progress; the deadline still holds.
        let _ = self
            .ctx
            .record_heartbeat(Progress {
                stage: self.stage.to_owned(),
                community_id: self.community_id,
                step: step.to_owned(),
                done,
            })
            .await;
        if self.ctx.is_cancelled() {
            return Err(ErasureError::Cancelled);
        }
        Ok(())
    }
}

pub(crate) use gate::gate_user;

/// Runs a community stage of `community_id` (`purge_agents`, else `purge_db`) and returns the
/// result to save; refused first under declarations other than the approved inventory's.
pub(crate) async fn purge_community(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    inventory: &UserInventory,
    stage: StageKind,
    community_id: Uuid,
) -> Result<serde_json::Value, ErasureError> {
    verify::require_declarations_unchanged(eraser, inventory).await?;
    if stage == StageKind::PurgeAgents {
        agents::purge_agents(eraser, run, community_id).await
    } else {
        purge_db::purge_db(eraser, run, community_id).await
    }
}
