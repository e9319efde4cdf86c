//! The lease a serving write holds, the live-lease count, and the argument checks every lease
//! call makes before it reaches the database.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::ServingError;
use crate::pubkey::pubkey_problem;

/// A lease on one external serving write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingWriteLease {
    /// Lease id.
    pub id: Uuid,
    /// The community written to.
    pub community_id: Uuid,
    /// What the write is (`s3_put`, `redis_write`, `push`, …).
    pub operation: String,
    /// The serving process holding it.
    pub owner: String,
    /// The fence generation when it was acquired.
    pub fence_generation: i64,
    /// When it lapses unless renewed.
    pub expires_at: DateTime<Utc>,
    /// The user the write is made for (a per-user lease, refused once that user is fenced);
    /// `None` for a community-only lease.
    #[serde(default)]
    pub user_pubkey: Option<String>,
}

/// Live serving writes of a community.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveServingWrites {
    /// Unreleased, unexpired leases.
    pub count: u64,
    /// Their operations, deduplicated and sorted.
    pub operations: Vec<String>,
}

/// A lease's time to live in seconds, as the lease functions take it; zero is refused.
pub(crate) fn ttl_seconds(ttl: Duration) -> Result<f64, ServingError> {
    if ttl.is_zero() {
        return Err(ServingError::InvalidInput {
            field: "ttl",
            reason: "a lease needs a positive time to live".to_owned(),
        });
    }
    Ok(ttl.as_secs_f64())
}

/// Refuses an empty (after trimming) name: an operation or an owner.
pub(crate) fn require_named(field: &'static str, value: &str) -> Result<(), ServingError> {
    if value.trim().is_empty() {
        Err(ServingError::InvalidInput {
            field,
            reason: "must not be empty".to_owned(),
        })
    } else {
        Ok(())
    }
}

/// Refuses a value that is not a user's key (see [`crate::pubkey_problem`]).
pub(crate) fn require_pubkey(field: &'static str, pubkey: &str) -> Result<(), ServingError> {
    match pubkey_problem(pubkey) {
        None => Ok(()),
        Some(problem) => Err(ServingError::InvalidInput {
            field,
            reason: format!("{pubkey:?} is not a 64-hex lowercase pubkey: {problem}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_ttl_an_empty_name_and_a_bad_pubkey_are_refused_as_input() {
        assert!(matches!(
            ttl_seconds(Duration::ZERO),
            Err(ServingError::InvalidInput { field: "ttl", .. })
        ));
        assert_eq!(ttl_seconds(Duration::from_millis(1500)).ok(), Some(1.5));
        assert!(matches!(
            require_named("owner", "  "),
            Err(ServingError::InvalidInput { field: "owner", .. })
        ));
        assert!(require_named("owner", "relay-a").is_ok());
        assert!(require_pubkey("pubkey", &"0a".repeat(32)).is_ok());
        assert!(matches!(
            require_pubkey("pubkey", &"0A".repeat(32)),
            Err(ServingError::InvalidInput {
                field: "pubkey",
                ..
            })
        ));
    }
}
