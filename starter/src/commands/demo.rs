//! `buzz-deletion demo …`: demo data written through the serving API.

use activities::redis::{Cache, CacheError};
use activities::s3::{ObjectStore, S3Config};
use activities::stack_settings::StackSettings;
use demo::{SeedPlan, seed_community};
use stack_config::env::StackEnv;

use crate::cli::{DemoCommand, SeedArgs, SeedUserArgs};
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::host;
use crate::output::Report;
use crate::render::Table;

/// Runs one `demo` subcommand.
pub async fn run(command: DemoCommand) -> CliResult {
    match command {
        DemoCommand::Seed(args) => seed(args).await,
        DemoCommand::SeedUser(args) => seed_user(args).await,
        DemoCommand::Serve(args) => super::demo_serve::serve(args).await,
    }
}

/// S3 settings from the BUZZ_S3_* variables (see [`stack_config::env`]).
pub fn s3_config_from_env() -> Result<S3Config, CliError> {
    Ok(StackEnv::process().s3()?)
}

/// Connects S3 and Redis from the environment, naming whichever is unreachable.
pub async fn connect_data_stores() -> Result<(ObjectStore, Cache), CliError> {
    let s3 = s3_config_from_env()?;
    let objects = ObjectStore::connect(&s3)
        .await
        .map_err(|e| CliError::Unavailable {
            service: "S3",
            address: s3.endpoint.clone(),
            detail: e.to_string(),
            hint: "start the local stack with `bash deploy/local/up && source .state/env`",
        })?;
    objects
        .check_bucket()
        .await
        .map_err(|e| CliError::Unavailable {
            service: "S3 bucket",
            address: format!("{}/{}", s3.endpoint, s3.bucket),
            detail: e.to_string(),
            hint: "start the local stack with `bash deploy/local/up && source .state/env`",
        })?;
    let redis = StackEnv::process().redis()?;
    let cache = Cache::connect_with(&redis).await.map_err(|e| match e {
        // Reachable, but not the kind of server BUZZ_REDIS_MODE says: the message names the fix.
        CacheError::ModeMismatch { .. } => CliError::Refused(e.to_string()),
        other => CliError::Unavailable {
            service: "Redis",
            address: redis.redacted_url(),
            detail: other.to_string(),
            hint: "start the local stack with `bash deploy/local/up && source .state/env`",
        },
    })?;
    Ok((objects, cache))
}

async fn seed(args: SeedArgs) -> CliResult {
    let host = host::resolve(Some(&args.host), None)?;
    let store = connect::serving_store().await?;
    let (objects, cache) = connect_data_stores().await?;
    let plan = SeedPlan {
        objects: args.objects,
        versions: args.versions.max(1),
        delete_markers: args.delete_markers,
        rows: args.rows,
        redis_keys: args.redis_keys,
        parallelism: args.parallelism,
    };
    let report = seed_community(&store, &objects, &cache, &host, plan)
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("seeding {host} failed: {e}")))?;
    let mut table = Table::new(
        format!("seeded {} ({})", report.host, report.community_id),
        &["what", "count"],
    );
    for t in &report.rows {
        table.row(vec![format!("rows in {}", t.table), t.rows.to_string()]);
    }
    table.row(vec![
        "object versions".into(),
        report.object_versions.to_string(),
    ]);
    table.row(vec![
        "delete markers".into(),
        report.delete_markers.to_string(),
    ]);
    table.row(vec!["redis keys".into(), report.redis_keys.to_string()]);
    Report::new(&report, table.render())
}

async fn seed_user(args: SeedUserArgs) -> CliResult {
    if let Some(problem) = workflows::user::target::pubkey_problem(&args.pubkey) {
        return Err(CliError::Refused(format!(
            "--pubkey {}: {problem}; give the user's key as 64 lowercase hex characters",
            args.pubkey
        )));
    }
    let host = host::resolve(Some(&args.host), None)?;
    let store = connect::serving_store().await?;
    let (objects, cache) = connect_data_stores().await?;
    let community = demo::create_community(&store, &host)
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("creating {host} failed: {e}")))?;
    let seed = demo::user::UserSeed {
        member: args.role.is_some(),
        role: args.role.clone(),
        events: args.events,
        allowlisted: args.allowlisted,
        agents: args.agents,
        uploads: args
            .uploads
            .iter()
            .map(|u| u.clone().into_bytes())
            .collect(),
        keys: args.keys,
    };
    let report = demo::user::seed_user(&store, &objects, &cache, community.id, &args.pubkey, &seed)
        .await
        .map_err(|e| {
            CliError::Other(anyhow::anyhow!(
                "seeding {} in {host} failed: {e}",
                args.pubkey
            ))
        })?;
    let mut table = Table::new(
        format!("seeded user {} in {} ({})", args.pubkey, host, community.id),
        &["what", "count"],
    );
    table.row(vec![
        "membership".into(),
        args.role
            .clone()
            .unwrap_or_else(|| "none (former participant)".into()),
    ]);
    table.row(vec!["events".into(), args.events.to_string()]);
    table.row(vec!["agents".into(), report.agents.len().to_string()]);
    table.row(vec!["uploads".into(), report.uploads.len().to_string()]);
    table.row(vec!["redis keys".into(), report.keys.len().to_string()]);
    let document = serde_json::json!({
        "community_id": community.id,
        "host": host,
        "pubkey": args.pubkey,
        "agents": report.agents,
        "uploads": report.uploads.iter().map(|(key, version)| serde_json::json!({"key": key, "version_id": version})).collect::<Vec<_>>(),
        "keys": report.keys,
    });
    Report::new(&document, table.render())
}
