//! The serving-write lease library, which lives in the `serving` crate so a relay can link it
//! without the rest of this one (see `docs/serving-integration.md`). Re-exported here so the
//! worker, the CLI, the demo and the tests keep one path to it; what this crate adds is the
//! retry decision of its error ([`Classified`]) and a serving handle on any [`Store`]'s pool.

pub use serving::{
    LiveServingWrites, MAX_PROTECTED_OPERATION, ServingDb, ServingError, ServingLeaseConfig,
    ServingWriteGuard, ServingWriteLease, acquire_serving_write, acquire_serving_write_with,
    acquire_user_serving_write_with, default_owner,
};

use crate::failure::{Classified, Severity};
use crate::store::{Store, sqlx_error_severity};

/// Refusals, lost leases, bad input and unexpected answers are permanent; a database error is
/// transient or permanent by its SQLSTATE or driver error kind, as the store's are.
impl Classified for ServingError {
    fn severity(&self) -> Severity {
        match self {
            ServingError::Database(error) => sqlx_error_severity(error),
            ServingError::Quiescing { .. }
            | ServingError::Fenced { .. }
            | ServingError::UserQuiescing { .. }
            | ServingError::UserFenced { .. }
            | ServingError::UnknownCommunity { .. }
            | ServingError::LeaseLost { .. }
            | ServingError::OperationTooLong { .. }
            | ServingError::InvalidInput { .. }
            | ServingError::Corrupt { .. } => Severity::Permanent,
        }
    }
}

/// The serving calls on a store's pool, as whatever role the store is connected as.
impl From<&Store> for ServingDb {
    fn from(store: &Store) -> Self {
        store.serving()
    }
}

impl Store {
    /// A serving handle on this store's pool (shared, not a new connection).
    pub fn serving(&self) -> ServingDb {
        ServingDb::new(self.pool().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn same_verdict(sample: &str) -> (Option<String>, Option<String>) {
        (
            serving::pubkey_problem(sample).map(|problem| problem.to_string()),
            workflows::user::target::pubkey_problem(sample).map(|problem| problem.to_string()),
        )
    }

    proptest! {
        /// The relay's rule (crate `serving`) and the workflows' copy refuse the same keys for
        /// the same reason.
        #[test]
        fn the_two_copies_of_the_pubkey_rule_agree(sample in "[0-9a-fA-FgG' ]{60,68}") {
            let (relay, workflow) = same_verdict(&sample);
            prop_assert_eq!(relay, workflow);
        }
    }

    #[test]
    fn refusals_are_permanent_and_connection_trouble_transient() {
        let pubkey = "ab".repeat(32);
        for permanent in [
            ServingError::Quiescing {
                community_id: Uuid::nil(),
            },
            ServingError::Fenced {
                community_id: Uuid::nil(),
            },
            ServingError::UserQuiescing {
                pubkey: pubkey.clone(),
            },
            ServingError::UserFenced { pubkey },
            ServingError::UnknownCommunity {
                community_id: Uuid::nil(),
            },
            ServingError::LeaseLost {
                lease_id: Uuid::nil(),
                reason: "expired".into(),
            },
            ServingError::Database(sqlx::Error::RowNotFound),
        ] {
            assert_eq!(permanent.severity(), Severity::Permanent, "{permanent}");
        }
        assert_eq!(
            ServingError::Database(sqlx::Error::PoolTimedOut).severity(),
            Severity::Transient
        );
    }

    #[test]
    fn the_serving_and_workflow_pubkey_rules_agree() {
        let samples = [
            String::new(),
            "0a".repeat(32),
            "0a".repeat(31),
            "0a".repeat(33),
            "0A".repeat(32),
            format!("{}g", "0".repeat(63)),
            format!("{}'", "0".repeat(63)),
            format!("{}é", "0".repeat(63)),
            "f".repeat(64),
        ];
        for sample in samples {
            let (relay, workflow) = same_verdict(&sample);
            assert_eq!(relay, workflow, "{sample:?}");
        }
    }
}
