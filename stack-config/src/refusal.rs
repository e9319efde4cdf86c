//! A dependency that refuses this process (worker or CLI) — a certificate it cannot trust, a password it rejects —
//! is reported on one line naming the service, the address (password redacted), what was
//! refused and which variable to fix. Found by the errors' types, never their text.

use std::error::Error as StdError;

use crate::tls::{find_tls_error, server_certificate_problem};
use redis::{ErrorKind, RedisError};

/// PostgreSQL's SQLSTATE for a wrong password (`invalid_password`).
const PG_INVALID_PASSWORD: &str = "28P01";

/// A refusal: what was refused and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What the server (or the TLS check) refused.
    pub reason: String,
    /// What to change.
    pub fix: String,
}

/// The server's certificate was not accepted: `ca_variable` names where the trusted CA is set.
pub fn tls_refusal(
    error: &(dyn StdError + 'static),
    ca_variable: &str,
    ca_file: Option<&str>,
) -> Option<Refusal> {
    let problem = server_certificate_problem(find_tls_error(error)?)?;
    Some(Refusal {
        reason: problem.reason().to_owned(),
        fix: problem.fix(ca_variable, ca_file),
    })
}

/// Why PostgreSQL refused the connection, when it did.
pub fn postgres_refusal(error: &sqlx::Error, url: &str) -> Option<Refusal> {
    if let sqlx::Error::Database(database) = error
        && database.code().as_deref() == Some(PG_INVALID_PASSWORD)
    {
        return Some(Refusal {
            reason: "password authentication failed".to_owned(),
            fix: "check the role and password in DATABASE_URL (or in the file DATABASE_URL_FILE names)"
                .to_owned(),
        });
    }
    // The URL's sslrootcert= wins over PGSSLROOTCERT (the Helm chart's CA mount), as in sqlx.
    let in_url = url::Url::parse(url).ok().and_then(|url| {
        url.query_pairs()
            .find(|(key, _)| key == "sslrootcert")
            .map(|(_, value)| value.into_owned())
    });
    match in_url {
        Some(file) => tls_refusal(error, "DATABASE_URL's sslrootcert", Some(&file)),
        None => match std::env::var("PGSSLROOTCERT").ok() {
            Some(file) => tls_refusal(error, "PGSSLROOTCERT", Some(&file)),
            None => tls_refusal(error, "DATABASE_URL's sslrootcert (or PGSSLROOTCERT)", None),
        },
    }
}

/// Why Redis refused the connection, when it did: `error` is the Redis client's own error (what
/// the cache adapter's `Denied` and `Unavailable` carry; its other failures are no refusal).
pub fn redis_refusal(error: &RedisError, ca_file: Option<&str>) -> Option<Refusal> {
    if error.kind() == ErrorKind::AuthenticationFailed {
        return Some(Refusal {
            reason: "AUTH failed (wrong user or password)".to_owned(),
            fix: "check the user and password in REDIS_URL (rediss://user:password@host:port, or in the file REDIS_URL_FILE names)"
                .to_owned(),
        });
    }
    tls_refusal(error, crate::env::REDIS_CA_FILE, ca_file)
}
