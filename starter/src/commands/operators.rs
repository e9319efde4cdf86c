//! `buzz-deletion operators …`: the registry of operators' SSH keys. Owner only: it connects
//! with BUZZ_OWNER_DATABASE_URL (the worker role may read the registry, never write it).

use activities::identity::{OperatorRecord, add_operator, list_operators, revoke_operator};

use crate::cli::OperatorsCommand;
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::render::Table;

/// Runs one `operators` subcommand.
pub async fn run(command: OperatorsCommand) -> CliResult {
    let url = stack_config::env::StackEnv::process()
        .owner_database_url()
        .map_err(|e| {
            CliError::Usage(format!(
                "{e}\nthe operator registry is managed by the schema owner only \
                 (the worker role may read it, never change it)"
            ))
        })?;
    let store = connect::owner_store_at(&url).await?;
    let pool = store.pool();
    let refused = |e: activities::identity::IdentityError| CliError::Refused(e.to_string());
    match command {
        OperatorsCommand::Add {
            name,
            public_key,
            replace,
        } => {
            let text = std::fs::read_to_string(&public_key).map_err(|e| {
                CliError::Usage(format!("--public-key {}: {e}", public_key.display()))
            })?;
            let record = add_operator(pool, &name, &text, replace)
                .await
                .map_err(refused)?;
            records_report("operator registered", &[record])
        }
        OperatorsCommand::List => {
            let records = list_operators(pool).await.map_err(refused)?;
            records_report("operators", &records)
        }
        OperatorsCommand::Revoke { name, reason } => {
            let record = revoke_operator(pool, &name, &reason)
                .await
                .map_err(refused)?;
            records_report("operator revoked", &[record])
        }
    }
}

/// One record as an object (add, revoke), a list as an array (list).
fn records_report(title: &str, records: &[OperatorRecord]) -> CliResult {
    let mut table = Table::new(
        title,
        &["name", "fingerprint", "algorithm", "added", "revoked"],
    );
    for r in records {
        table.row(vec![
            r.name.clone(),
            r.fingerprint.clone(),
            r.algorithm.clone(),
            r.added_at.to_rfc3339(),
            r.revoked_at
                .map(|t| format!("{t} ({})", r.revoke_reason.clone().unwrap_or_default()))
                .unwrap_or_default(),
        ]);
    }
    let text = format!("{}\n", table.render());
    match records {
        [one] if title != "operators" => Report::new(one, text),
        _ => Report::new(&records, text),
    }
}
