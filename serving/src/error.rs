//! The one error type of the serving crate: every way a serving write can be refused, lost or
//! fail. Whether retrying can help is decided by variant (the `activities` crate classifies it for
//! Temporal: only [`ServingError::Database`] can be transient), never by message text.

use std::time::Duration;

use uuid::Uuid;

/// Why a serving write was refused or abandoned, or a lease call failed.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// The community is quiescing for deletion: no new serving write is admitted.
    #[error("serving write refused: community {community_id} is quiescing for deletion")]
    Quiescing {
        /// The community.
        community_id: Uuid,
    },
    /// The community is fenced for deletion.
    #[error("serving write refused: community {community_id} is fenced for deletion")]
    Fenced {
        /// The community.
        community_id: Uuid,
    },
    /// The user the write is made for is quiescing for deletion: no new write for them is
    /// admitted.
    #[error("serving write refused: user {pubkey} is quiescing for deletion")]
    UserQuiescing {
        /// The user's pubkey.
        pubkey: String,
    },
    /// The user the write is made for is fenced for deletion.
    #[error("serving write refused: user {pubkey} is fenced for deletion")]
    UserFenced {
        /// The user's pubkey.
        pubkey: String,
    },
    /// No community has this id (never created, or already deleted).
    #[error("community {community_id} not found")]
    UnknownCommunity {
        /// The community asked for.
        community_id: Uuid,
    },
    /// The lease is no longer valid (released, expired, not the caller's, or its community or
    /// user fenced while it was held); the protected write was (or must be) abandoned.
    #[error("serving-write lease {lease_id} lost: {reason}")]
    LeaseLost {
        /// The lease.
        lease_id: Uuid,
        /// Why.
        reason: String,
    },
    /// The protected operation did not finish within its bound and was abandoned (never polled
    /// again); the write may or may not have landed.
    #[error(
        "serving write under lease {lease_id} abandoned: it did not finish within {limit:?} \
         (the protected-operation bound)"
    )]
    OperationTooLong {
        /// The lease.
        lease_id: Uuid,
        /// The bound it exceeded.
        limit: Duration,
    },
    /// An argument is unusable (an empty operation or owner, a zero TTL, a malformed pubkey);
    /// refused before any SQL.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The argument.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The database answered something the lease functions never return: the schema is not the
    /// one this library was built for.
    #[error("unexpected answer from {what}: {reason}")]
    Corrupt {
        /// The call.
        what: &'static str,
        /// What came back.
        reason: String,
    },
    /// Any other database error (connection, pool, permission); whether retrying helps follows
    /// its SQLSTATE or driver error kind.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl ServingError {
    /// Whether the write was refused because the community, or the user it is made for, is
    /// being deleted (quiescing or fenced): the serving path should answer "unavailable", not
    /// retry.
    pub fn is_refused_because_fenced(&self) -> bool {
        matches!(
            self,
            ServingError::Quiescing { .. }
                | ServingError::Fenced { .. }
                | ServingError::UserQuiescing { .. }
                | ServingError::UserFenced { .. }
        )
    }

    /// Whether an admitted write lost its lease.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, ServingError::LeaseLost { .. })
    }

    /// The same error seen from under the admitted lease `lease_id`: a fence found while the
    /// lease is held means the lease no longer protects anything, so it is lost.
    pub(crate) fn under_lease(self, lease_id: Uuid) -> Self {
        match self {
            ServingError::Fenced { community_id } => ServingError::LeaseLost {
                lease_id,
                reason: format!("community {community_id} is fenced"),
            },
            ServingError::UserFenced { pubkey } => ServingError::LeaseLost {
                lease_id,
                reason: format!("user {pubkey} is fenced"),
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_found_under_a_lease_loses_it_and_other_errors_pass_through() {
        let lease_id = Uuid::new_v4();
        let community_id = Uuid::new_v4();
        let lost = ServingError::Fenced { community_id }.under_lease(lease_id);
        assert!(lost.is_lease_lost(), "{lost}");
        assert!(lost.to_string().contains(&community_id.to_string()));
        let pubkey = "ab".repeat(32);
        let lost = ServingError::UserFenced {
            pubkey: pubkey.clone(),
        }
        .under_lease(lease_id);
        assert!(lost.is_lease_lost() && lost.to_string().contains(&pubkey));
        let refused = ServingError::Quiescing { community_id }.under_lease(lease_id);
        assert!(refused.is_refused_because_fenced());
    }
}
