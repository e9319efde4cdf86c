//! Connections to Temporal and Postgres, with errors that say which service and how to fix it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::stack_settings::StackSettings;
use stack_config::env::{self as stack_env, StackEnv};
use stack_config::temporal::{TemporalAccess, TemporalConnectError};
use temporalio_client::{Client, WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_common::HasWorkflowDefinition;

use crate::error::CliError;

const TEMPORAL_HINT: &str = "start the local stack with `bash deploy/local/up && source .state/env`, \
     or set TEMPORAL_ADDRESS (host:port) and TEMPORAL_NAMESPACE";
const POSTGRES_HINT: &str = "start the local stack with `bash deploy/local/up && source .state/env`, \
     or set DATABASE_URL (the worker role; BUZZ_OWNER_DATABASE_URL for `migrate`, \
     BUZZ_SERVING_DATABASE_URL for `demo`); run `buzz-deletion migrate` on a new database";

/// The CLI's Temporal address when TEMPORAL_ADDRESS is unset (the local dev server; the worker,
/// by contrast, requires the variable).
const DEFAULT_TEMPORAL_ADDRESS: &str = "127.0.0.1:7233";

/// Where Temporal is, read from the environment.
#[derive(Debug, Clone)]
pub struct TemporalTarget {
    /// `host:port` or URL.
    pub address: String,
    /// Namespace.
    pub namespace: String,
    /// TLS, mutual TLS, API key.
    pub access: TemporalAccess,
}

impl TemporalTarget {
    /// Reads TEMPORAL_ADDRESS (default 127.0.0.1:7233), TEMPORAL_NAMESPACE (default `default`)
    /// and the TLS / API-key settings (`TEMPORAL_TLS*`, `TEMPORAL_API_KEY(_FILE)`).
    pub fn from_env() -> Result<Self, CliError> {
        let env = StackEnv::process();
        Ok(Self {
            address: env
                .optional(stack_env::TEMPORAL_ADDRESS)
                .unwrap_or_else(|| DEFAULT_TEMPORAL_ADDRESS.to_owned()),
            namespace: env.temporal_namespace(),
            access: env
                .temporal_access()
                .map_err(|e| CliError::Usage(format!("Temporal: {e}")))?,
        })
    }
}

/// Connects a Temporal client, failing within ten seconds with a message naming the address
/// and, for a refusal, the variable to fix.
pub async fn temporal(target: &TemporalTarget) -> Result<Client, CliError> {
    stack_config::temporal::connect(
        &target.address,
        &target.namespace,
        &target.access,
        format!("buzz-deletion-cli@{}", std::process::id()),
        Duration::from_secs(10),
    )
    .await
    .map_err(|error| match error {
        TemporalConnectError::Unreachable { address, detail } => CliError::Unavailable {
            service: "Temporal",
            address,
            detail,
            hint: TEMPORAL_HINT,
        },
        TemporalConnectError::Address { .. } | TemporalConnectError::Material(_) => {
            CliError::Usage(error.to_string())
        }
        TemporalConnectError::Refused { .. } => CliError::Refused(error.to_string()),
    })
}

/// The task queue workflows are started on (the worker polls the same one): see
/// [`StackEnv::task_queue`].
pub fn task_queue() -> String {
    StackEnv::process().task_queue()
}

/// Starts `workflow` with `input` as `workflow_id` on the [`task_queue`] and waits for its
/// result (a worker must be running); the errors name it `what` and, once started, its id.
pub async fn run_workflow<W>(
    workflow: W,
    input: W::Input,
    workflow_id: &str,
    what: &str,
) -> Result<W::Output, CliError>
where
    W: HasWorkflowDefinition,
    W::Input: Send,
{
    let client = temporal(&TemporalTarget::from_env()?).await?;
    let options = WorkflowStartOptions::new(task_queue(), workflow_id).build();
    let handle = client
        .start_workflow(workflow, input, options)
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("could not start {what}: {e}")))?;
    handle
        .get_result(WorkflowGetResultOptions::default())
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("{what} {workflow_id} failed: {e}")))
}

/// Reads DATABASE_URL (or DATABASE_URL_FILE): the worker role, for every command but
/// `migrate` and `demo`.
pub fn database_url() -> Result<String, CliError> {
    StackEnv::process().database_url().map_err(|e| match e {
        stack_config::env::StackEnvError::Missing { name } => {
            CliError::Usage(format!("{name} is not set: {POSTGRES_HINT}"))
        }
        other => CliError::Usage(other.to_string()),
    })
}

/// The schema owner's URL for `migrate`: BUZZ_OWNER_DATABASE_URL, else DATABASE_URL.
pub fn owner_database_url() -> Result<(&'static str, String), CliError> {
    url_or_database_url(OWNER_URL_ENV)
}

/// The serving role's URL for `demo seed` / `demo serve` (they write tenant data as the relay
/// does): BUZZ_SERVING_DATABASE_URL, else DATABASE_URL.
pub fn serving_database_url() -> Result<(&'static str, String), CliError> {
    url_or_database_url(SERVING_URL_ENV)
}

/// Variable holding the schema owner's connection string.
pub const OWNER_URL_ENV: &str = stack_env::OWNER_DATABASE_URL;
/// Variable holding the serving role's connection string.
pub const SERVING_URL_ENV: &str = stack_env::SERVING_DATABASE_URL;

/// `(variable, url)`: `name` (or the file `name_FILE` names) if set, else DATABASE_URL.
fn url_or_database_url(name: &'static str) -> Result<(&'static str, String), CliError> {
    match StackEnv::process()
        .optional_or_file(name)
        .map_err(|e| CliError::Usage(e.to_string()))?
    {
        Some(url) => Ok((name, url)),
        None => database_url().map(|url| ("DATABASE_URL", url)),
    }
}

/// Set once by `--allow-privileged-db-role` (see [`allow_privileged_db_role`]).
static ALLOW_PRIVILEGED_DB_ROLE: AtomicBool = AtomicBool::new(false);

/// Lets this process run as a superuser or the schema owner (throwaway local stacks only).
pub fn allow_privileged_db_role() {
    ALLOW_PRIVILEGED_DB_ROLE.store(true, Ordering::Relaxed);
}

fn privileged_role_allowed() -> bool {
    ALLOW_PRIVILEGED_DB_ROLE.load(Ordering::Relaxed)
        || activities::store::privileged_role_allowed(
            std::env::var(activities::store::ALLOW_PRIVILEGED_ROLE_ENV)
                .ok()
                .as_deref(),
        )
}

async fn connect_url(url: &str) -> Result<activities::store::Store, CliError> {
    connect_url_with(url, &activities::store::PoolSettings::default()).await
}

async fn connect_url_with(
    url: &str,
    settings: &activities::store::PoolSettings,
) -> Result<activities::store::Store, CliError> {
    activities::store::Store::connect_with(url, settings)
        .await
        .map_err(|e| {
            let refusal = match &e {
                activities::store::StoreError::Connect { source, .. } => {
                    stack_config::refusal::postgres_refusal(source, url)
                }
                _ => None,
            };
            match refusal {
                // A certificate or password refused: one line saying what to fix.
                Some(refusal) => CliError::Refused(format!(
                    "PostgreSQL at {} refused the connection: {}: {}",
                    redact_password(url),
                    refusal.reason,
                    refusal.fix
                )),
                None => CliError::Unavailable {
                    service: "PostgreSQL",
                    address: redact_password(url),
                    detail: e.to_string(),
                    hint: POSTGRES_HINT,
                },
            }
        })
}

/// Refuses (exit 1) a superuser or schema-owner connection unless explicitly allowed.
async fn refuse_privileged_role(
    store: &activities::store::Store,
    variable: &str,
    group: &str,
) -> Result<(), CliError> {
    let privileged = store
        .privileged_role()
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("could not read the connected role: {e}")))?;
    match privileged {
        Some(role) if !privileged_role_allowed() => Err(CliError::Refused(format!(
            "{} (For the CLI, --allow-privileged-db-role does the same.)",
            role.refusal(variable, group)
        ))),
        _ => Ok(()),
    }
}

/// Connects the deletion store as the worker role (DATABASE_URL), refusing a privileged role.
pub async fn store() -> Result<activities::store::Store, CliError> {
    let url = database_url()?;
    let store = connect_url(&url).await?;
    refuse_privileged_role(&store, "DATABASE_URL", activities::store::WORKER_GROUP).await?;
    Ok(store)
}

/// Connects as the schema owner, for `migrate` only.
pub async fn owner_store() -> Result<activities::store::Store, CliError> {
    let (_, url) = owner_database_url()?;
    connect_url(&url).await
}

/// Connects to `url` as given (the owner, for `operators`; no role check).
pub async fn owner_store_at(url: &str) -> Result<activities::store::Store, CliError> {
    connect_url(url).await
}

/// Connects as the serving role, for `demo seed` / `demo serve`, refusing a privileged role.
pub async fn serving_store() -> Result<activities::store::Store, CliError> {
    let (variable, url) = serving_database_url()?;
    let store = connect_url(&url).await?;
    refuse_privileged_role(&store, variable, activities::store::SERVING_GROUP).await?;
    Ok(store)
}

/// [`serving_store`] with a pool of `connections`, every one opened before this returns and
/// kept open: for a serving loop that knows how many statements it can have open at once and
/// must never wait for a connection to be opened mid-run.
pub async fn serving_store_warm(connections: u32) -> Result<activities::store::Store, CliError> {
    let (variable, url) = serving_database_url()?;
    let settings = activities::store::PoolSettings {
        max_connections: connections,
        min_connections: connections,
        ..activities::store::PoolSettings::default()
    };
    let store = connect_url_with(&url, &settings).await?;
    refuse_privileged_role(&store, variable, activities::store::SERVING_GROUP).await?;
    Ok(store)
}

/// The connection string with its password replaced, for error messages.
pub fn redact_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_error_messages() {
        assert_eq!(
            redact_password("postgres://buzz:secret@127.0.0.1:55432/buzz"),
            "postgres://buzz:***@127.0.0.1:55432/buzz"
        );
    }
}
