//! `buzz-deletion operators …`: the registry of operators' SSH keys. Owner only: it connects
//! with BUZZ_OWNER_DATABASE_URL (the worker role may read the registry, never write it).

use std::path::PathBuf;

use activities::identity::{OperatorRecord, add_operator, list_operators, revoke_operator};
use clap::Subcommand;

use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::{OutputFormat, Table, print_json};

/// `operators …` subcommands.
#[derive(Debug, Subcommand)]
pub enum OperatorsCommand {
    /// Register an operator's OpenSSH public key (ed25519, ecdsa P-256/P-384, or the sk-
    /// hardware kinds) under a name. Its fingerprint is the operator's identity.
    Add {
        /// The operator's name (a label, unique among keys not revoked).
        #[arg(long)]
        name: String,
        /// The public key file (`id_ed25519.pub`, `ssh-keygen -y` output, …).
        #[arg(long, value_name = "FILE")]
        public_key: PathBuf,
        /// Revoke the key that holds the name now (the operator's new key replaces it).
        #[arg(long)]
        replace: bool,
    },
    /// Every registered key, revoked ones included.
    List,
    /// Revoke an operator's key: recorded with who and why, never deleted; signatures made
    /// with it are refused from now on and stay verifiable as evidence.
    Revoke {
        /// The operator's name.
        name: String,
        /// Why.
        #[arg(long, default_value = "revoked by the owner")]
        reason: String,
    },
}

/// Runs one `operators` subcommand.
pub async fn run(format: OutputFormat, command: OperatorsCommand) -> CliResult {
    let url = activities::stack_env::StackEnv::process()
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
            print_records(format, "operator registered", &[record])?;
        }
        OperatorsCommand::List => {
            let records = list_operators(pool).await.map_err(refused)?;
            print_records(format, "operators", &records)?;
        }
        OperatorsCommand::Revoke { name, reason } => {
            let record = revoke_operator(pool, &name, &reason)
                .await
                .map_err(refused)?;
            print_records(format, "operator revoked", &[record])?;
        }
    }
    Ok(0)
}

fn print_records(format: OutputFormat, title: &str, records: &[OperatorRecord]) -> CliResult {
    match format {
        OutputFormat::Json => {
            if let [one] = records
                && title != "operators"
            {
                print_json(one)?;
            } else {
                print_json(&records)?;
            }
        }
        OutputFormat::Table => {
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
            println!("{}", table.render());
        }
    }
    Ok(0)
}
