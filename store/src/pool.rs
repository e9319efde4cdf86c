//! The PostgreSQL pool: how many connections, and the session settings every pooled connection
//! carries. The worker sizes it from its activity slots (`worker/src/capacity.rs`); every other
//! caller takes [`PoolSettings::default`].

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::error::{StoreError, StoreResult};
use super::{Store, redact_password};

/// Connections the store opens by default: enough for a CLI command or a test.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;

/// How long a call waits for a pooled connection before failing (transiently).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server ends a session that sits idle inside a transaction this long by default
/// (`idle_in_transaction_session_timeout`, in milliseconds). No transaction of ours waits on
/// anything but its own statements, so a minute only ever ends a session whose client is gone.
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// How many connections a pool opens at most, and the session timeouts each one carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Connections open at once, at most (at least one is always allowed).
    pub max_connections: u32,
    /// Connections opened when the pool is created and kept open (at most `max_connections`):
    /// a latency-sensitive caller (a serving process) never waits for a connection to be
    /// opened on a loaded server in the middle of its work.
    pub min_connections: u32,
    /// `lock_timeout` in milliseconds (0: wait for locks without limit); `None` leaves the
    /// server's setting (its configuration, or one set on the role or database) in force.
    pub lock_timeout_ms: Option<u64>,
    /// `statement_timeout` in milliseconds (0: no limit); `None` leaves the server's setting.
    pub statement_timeout_ms: Option<u64>,
    /// `idle_in_transaction_session_timeout` in milliseconds; always set (see
    /// [`DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS`]).
    pub idle_in_transaction_timeout_ms: u64,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            min_connections: 0,
            lock_timeout_ms: None,
            statement_timeout_ms: None,
            idle_in_transaction_timeout_ms: DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS,
        }
    }
}

impl PoolSettings {
    /// The default settings with at most `max_connections` connections.
    pub fn with_max_connections(max_connections: u32) -> Self {
        PoolSettings {
            max_connections,
            ..PoolSettings::default()
        }
    }

    /// The run-time parameters sent with every connection's startup message, in milliseconds
    /// (PostgreSQL's unit for a bare number in these three settings).
    pub fn session_parameters(&self) -> Vec<(&'static str, String)> {
        let mut parameters = vec![
            // A session that sits inside a transaction without sending anything holds its row
            // locks for everyone. The chaos run caught one: a worker whose request was lost on
            // the network waited forever for the answer while its `FOR UPDATE` on the request
            // row blocked every later claim, stalling the deletion for good. The server ends
            // such a session (and so its transaction); the client's next read fails with a
            // connection error, which is transient.
            (
                "idle_in_transaction_session_timeout",
                self.idle_in_transaction_timeout_ms.to_string(),
            ),
            // Fail closed where rows could be invisible: a query that row-level security would
            // filter raises SQLSTATE 42501 instead of quietly reading fewer rows (the
            // closed-world check refuses such relations before approval; this is the second
            // line, for a policy added after it ran).
            ("row_security", "off".to_owned()),
        ];
        if let Some(ms) = self.lock_timeout_ms {
            parameters.push(("lock_timeout", ms.to_string()));
        }
        if let Some(ms) = self.statement_timeout_ms {
            parameters.push(("statement_timeout", ms.to_string()));
        }
        parameters
    }
}

impl Store {
    /// Connects to `database_url` with `settings`. Fails with [`StoreError::Connect`], naming
    /// the (password-redacted) URL and how to start PostgreSQL.
    pub async fn connect_with(database_url: &str, settings: &PoolSettings) -> StoreResult<Store> {
        let redacted = || redact_password(database_url);
        let parameters = settings.session_parameters();
        let options = PgConnectOptions::from_str(database_url)
            .map_err(|source| StoreError::Connect {
                url: redacted(),
                source,
            })?
            .options(
                parameters
                    .iter()
                    .map(|(name, value)| (*name, value.as_str())),
            );
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(1))
            .min_connections(
                settings
                    .min_connections
                    .min(settings.max_connections.max(1)),
            )
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A connection's buffers grow to the largest message it ever carried (a 10,000-entry
            // manifest chunk is ~1.6 MB) and keep that size; shrinking them on release bounds
            // a worker's memory by what is in use rather than by which connections once held
            // a chunk.
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    conn.shrink_buffers();
                    Ok(true)
                })
            })
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Connect {
                url: redacted(),
                source,
            })?;
        Ok(Store::from_pool(pool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_keep_the_servers_lock_and_statement_timeouts_and_end_idle_transactions() {
        let parameters = PoolSettings::default().session_parameters();
        assert_eq!(
            parameters,
            vec![
                ("idle_in_transaction_session_timeout", "60000".to_owned()),
                ("row_security", "off".to_owned()),
            ]
        );
    }

    #[test]
    fn configured_timeouts_are_sent_in_milliseconds_and_zero_means_none() {
        let settings = PoolSettings {
            max_connections: 3,
            min_connections: 0,
            lock_timeout_ms: Some(0),
            statement_timeout_ms: Some(2_500),
            idle_in_transaction_timeout_ms: 30_000,
        };
        let parameters = settings.session_parameters();
        assert!(parameters.contains(&("lock_timeout", "0".to_owned())));
        assert!(parameters.contains(&("statement_timeout", "2500".to_owned())));
        assert!(parameters.contains(&("idle_in_transaction_session_timeout", "30000".to_owned())));
    }
}
