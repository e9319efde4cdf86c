//! Connections to Temporal and Postgres, with errors that say which service and how to fix it.

use std::time::Duration;

use temporalio_client::{Client, ClientOptions, ConnectionOptions};

use crate::error::CliError;

const TEMPORAL_HINT: &str = "start the local stack with `bash deploy/local/up && source .state/env`, \
     or set TEMPORAL_ADDRESS (host:port) and TEMPORAL_NAMESPACE";
const POSTGRES_HINT: &str = "start the local stack with `bash deploy/local/up && source .state/env`, \
     or set DATABASE_URL; run `buzz-deletion migrate` on a new database";

/// Where Temporal is, read from the environment.
#[derive(Debug, Clone)]
pub struct TemporalTarget {
    /// `host:port` or URL.
    pub address: String,
    /// Namespace.
    pub namespace: String,
}

impl TemporalTarget {
    /// Reads TEMPORAL_ADDRESS (default 127.0.0.1:7233) and TEMPORAL_NAMESPACE (default `default`).
    pub fn from_env() -> Self {
        let read = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        Self {
            address: read("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
            namespace: read("TEMPORAL_NAMESPACE", "default"),
        }
    }
}

/// Connects a Temporal client, failing within ten seconds with a message naming the address.
pub async fn temporal(target: &TemporalTarget) -> Result<Client, CliError> {
    let unavailable = |detail: String| CliError::Unavailable {
        service: "Temporal",
        address: target.address.clone(),
        detail,
        hint: TEMPORAL_HINT,
    };
    let with_scheme = if target.address.contains("://") {
        target.address.clone()
    } else {
        format!("http://{}", target.address)
    };
    let url = url::Url::parse(&with_scheme).map_err(|e| {
        CliError::Usage(format!(
            "TEMPORAL_ADDRESS={:?} is invalid: {e}",
            target.address
        ))
    })?;
    let connection = ConnectionOptions::new(url)
        .identity(format!("buzz-deletion-cli@{}", std::process::id()))
        .build();
    let options = ClientOptions::new(target.namespace.clone()).build();
    match tokio::time::timeout(
        Duration::from_secs(10),
        Client::connect(connection, options),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(_) => Err(unavailable("no answer within 10 s".to_owned())),
    }
}

/// The task queue workflows are started on: BUZZ_TASK_QUEUE, default `buzz-deletion`.
pub fn task_queue() -> String {
    std::env::var("BUZZ_TASK_QUEUE")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| workflows::TASK_QUEUE.to_owned())
}

/// Reads DATABASE_URL.
pub fn database_url() -> Result<String, CliError> {
    std::env::var("DATABASE_URL")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| CliError::Usage(format!("DATABASE_URL is not set: {POSTGRES_HINT}")))
}

/// Connects the deletion store and checks the schema is current.
pub async fn store() -> Result<activities::store::Store, CliError> {
    let url = database_url()?;
    let store =
        activities::store::Store::connect(&url)
            .await
            .map_err(|e| CliError::Unavailable {
                service: "PostgreSQL",
                address: redact_password(&url),
                detail: e.to_string(),
                hint: POSTGRES_HINT,
            })?;
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
