//! Connections to the local stack's three data stores, from the same environment variables the
//! worker reads. An unreachable server fails the run with its name and how to start it.

use activities::redis::Cache;
use activities::s3::ObjectStore;
use activities::stack_settings::StackSettings;
use activities::store::Store;
use anyhow::{Context, Result, anyhow};
use stack_config::env::StackEnv;

const HOW_TO_START: &str = "start the local stack with `bash deploy/local/up && source .state/env`";

/// Postgres, the S3 bucket and Redis.
#[derive(Debug, Clone)]
pub struct Stack {
    /// Postgres (tenant rows and the exclusion proof).
    pub store: Store,
    /// The shared versioned bucket.
    pub objects: ObjectStore,
    /// Redis.
    pub cache: Cache,
}

/// Reads a required variable (trimmed; blank counts as unset) through the test kit, naming how
/// to start the stack when it is missing.
pub fn env(name: &'static str) -> Result<String> {
    testkit::running_stack::variable(name, HOW_TO_START)
}

impl Stack {
    /// This stack's bucket and Redis with PostgreSQL replaced by the database at `owner_url` (a
    /// benchmark's database of its own).
    pub async fn on_database(&self, owner_url: &str) -> Result<Stack> {
        Ok(Stack {
            store: Store::connect(owner_url)
                .await
                .context("connect to the benchmark's database")?,
            objects: self.objects.clone(),
            cache: self.cache.clone(),
        })
    }

    /// Connects to all three stores and checks the schema is current and the bucket versioned.
    pub async fn connect() -> Result<Stack> {
        // The harness seeds tenant data, deletes rows directly (the floor) and reads the proof:
        // it connects as the schema owner (the workers it starts use DATABASE_URL).
        let database_url = env("BUZZ_OWNER_DATABASE_URL").or_else(|_| env("DATABASE_URL"))?;
        let store = Store::connect(&database_url)
            .await
            .with_context(|| format!("PostgreSQL is not reachable; {HOW_TO_START}"))?;
        store
            .check_schema_current()
            .await
            .context("the schema is not current: run `target/debug/buzz-deletion migrate`")?;
        let s3 = StackEnv::process()
            .s3()
            .map_err(|e| anyhow!("{} is not set: {HOW_TO_START}", e.name()))?;
        let objects = ObjectStore::connect(&s3).await?;
        objects.check_bucket().await.with_context(|| {
            format!(
                "S3 (Ceph RGW) bucket not usable at {}; {HOW_TO_START}",
                s3.endpoint
            )
        })?;
        let redis_url = env("REDIS_URL")?;
        let cache = Cache::connect(&redis_url)
            .await
            .with_context(|| format!("Redis is not reachable at {redis_url}; {HOW_TO_START}"))?;
        Ok(Stack {
            store,
            objects,
            cache,
        })
    }
}
