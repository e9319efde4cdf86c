//! The `StackCheck` activity: one write-and-read-back in each store, leaving nothing behind.

use std::sync::Arc;

use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use uuid::Uuid;
use workflows::stack_check::{StackCheckInput, TouchReport};

use crate::redis::Cache;
use crate::s3::{ObjectStore, ObjectVersionRef};
use crate::store::Store;

/// Key prefix of the probe object: outside every tenant prefix, so no deletion ever lists it.
pub const PROBE_PREFIX: &str = "_stack-check/";

/// The stores the stack check touches.
#[derive(Debug, Clone)]
pub struct StackCheckActivities {
    store: Store,
    objects: ObjectStore,
    cache: Cache,
}

impl StackCheckActivities {
    /// Binds the activity to its stores.
    pub fn new(store: Store, objects: ObjectStore, cache: Cache) -> Self {
        Self {
            store,
            objects,
            cache,
        }
    }
}

#[activities]
impl StackCheckActivities {
    /// Reads the schema version, round-trips a key through Redis and an object version through
    /// S3 (then removes both), heartbeating after each store.
    #[activity(definition = workflows::stack_check::TouchStores)]
    pub async fn touch_stores(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: StackCheckInput,
    ) -> Result<TouchReport, ActivityError> {
        let version: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM public._sqlx_migrations")
                .fetch_one(self.store.pool())
                .await?;
        ctx.record_heartbeat("postgres ok").await?;

        let namespace = Uuid::new_v4();
        self.cache
            .set(
                &format!("buzz:{namespace}:stack-check"),
                input.nonce.as_bytes(),
            )
            .await?;
        let round_tripped = self.cache.count_namespace(namespace).await?;
        self.cache.purge_namespace(namespace, |_| {}).await?;
        ctx.record_heartbeat("redis ok").await?;

        let key = format!("{PROBE_PREFIX}{}", Uuid::new_v4());
        let version_id = self
            .objects
            .put_object(&key, input.nonce.clone().into_bytes())
            .await?;
        let body = self.objects.get_object_version(&key, &version_id).await?;
        self.objects
            .delete_versions(&[ObjectVersionRef {
                key,
                version_id: version_id.clone(),
            }])
            .await?;
        ctx.record_heartbeat("s3 ok").await?;

        Ok(TouchReport {
            postgres_schema_version: version.unwrap_or_default(),
            redis_keys_round_tripped: round_tripped,
            s3_version_id: version_id,
            s3_echo: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}
