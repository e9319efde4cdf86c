//! `buzz-deletion migrate`: apply the embedded migrations.

use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::Report;

/// Applies every pending migration as the schema owner (BUZZ_OWNER_DATABASE_URL, else
/// DATABASE_URL), then confirms the schema is current.
pub async fn run() -> CliResult {
    let store = connect::owner_store().await?;
    store.migrate().await.map_err(|e| {
        CliError::Other(anyhow::anyhow!(
            "migration failed: {e}\nhint: migrations run as the schema owner: set \
                 {} to the owner's connection string",
            connect::OWNER_URL_ENV
        ))
    })?;
    store
        .check_schema_current()
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("schema check after migrate failed: {e}")))?;
    let latest = activities::store::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or_default();
    Report::new(
        &serde_json::json!({"migrated": true, "schema_version": latest}),
        format!("schema is current (version {latest})\n"),
    )
}
