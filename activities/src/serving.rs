//! The serving-write lease library, which lives in the `serving` crate so a relay can link it
//! without the rest of this one (see `docs/serving-integration.md`). Re-exported here so the
//! worker, the CLI, the demo and the tests keep one path to it; the store crate adds the
//! retry decision of its error (`Classified`) and a serving handle on any `Store`'s pool
//! (`Store::serving`).

pub use serving::{
    LiveServingWrites, MAX_PROTECTED_OPERATION, ServingDb, ServingError, ServingLeaseConfig,
    ServingWriteGuard, ServingWriteLease, acquire_serving_write, acquire_serving_write_with,
    acquire_user_serving_write_with, default_owner,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{Classified, Severity};
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
