//! The stack as a binary finds it (bench, chaos): migrated already by `buzz-deletion migrate`,
//! its variables read through `stack_config::env`, and every failure an error naming what is
//! missing or unreachable, never a panic.

use activities::redis::Cache;
use activities::s3::ObjectStore;
use activities::stack_settings::StackSettings;
use activities::store::Store;
use anyhow::{Context, Result, anyhow};
use stack_config::env::StackEnv;

use crate::stack::Stack;

/// The stack variable `name` (trimmed; blank counts as unset), or an error naming it and
/// `how_to_start` (how this binary gets its environment).
pub fn variable(name: &'static str, how_to_start: &str) -> Result<String> {
    StackEnv::process()
        .required(name)
        .map_err(|e| anyhow!("{} is not set: {how_to_start}", e.name()))
}

impl Stack {
    /// Connects to the three data stores without migrating: the schema must be current and the
    /// bucket usable; Redis is reached as the stack's `BUZZ_REDIS_MODE` says (one server or a
    /// cluster). A missing variable's error names `how_to_start`.
    pub async fn connect_running(how_to_start: &str) -> Result<Stack> {
        let env = StackEnv::process();
        let store = Store::connect(&variable("BUZZ_OWNER_DATABASE_URL", how_to_start)?)
            .await
            .context("PostgreSQL is not reachable as the owner")?;
        store
            .check_schema_current()
            .await
            .context("the schema is not current: run `buzz-deletion migrate`")?;
        let serving = Store::connect(&variable("BUZZ_SERVING_DATABASE_URL", how_to_start)?)
            .await
            .context("PostgreSQL is not reachable as the serving role")?;
        let s3 = env
            .s3()
            .map_err(|e| anyhow!("{} is not set: {how_to_start}", e.name()))?;
        let objects = ObjectStore::connect(&s3).await?;
        objects
            .check_bucket()
            .await
            .with_context(|| format!("the bucket at {} is not usable", s3.endpoint))?;
        let redis = env.redis().map_err(|e| anyhow!("{e}"))?;
        let cache = Cache::connect_with(&redis)
            .await
            .with_context(|| format!("Redis is not usable at {}", redis.redacted_url()))?;
        Ok(Stack {
            store,
            serving,
            objects,
            cache,
        })
    }
}
