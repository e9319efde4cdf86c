//! The failures a community activity can end with, and how each becomes a Temporal failure.

use crate::store::RequestError;
use temporalio_sdk::activities::ActivityError;
use workflows::contract::{
    ABORT_REFUSED_FAILURE_TYPE, LATE_OBJECT_VERSION_FAILURE_TYPE, STALE_GENERATION_FAILURE_TYPE,
};

use crate::failure::{Classified, Report, Severity, activity_error, variants};
use crate::redis::CacheError;
use crate::s3::{MissingPermission, ObjectStoreError};
use crate::store::StoreError;
use crate::taxonomy::TaxonomyError;

/// Why a phase did not finish.
#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    /// The Postgres store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object store refused or failed.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// Redis refused or failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A manifest entry could not be decoded.
    #[error(transparent)]
    Taxonomy(#[from] TaxonomyError),
    /// A key under one of the community's tenant prefixes does not have an exact writer shape.
    /// Fail closed: an operator must look at it (and remove or move it) before deletion goes on.
    #[error(
        "key {key:?} under tenant prefix {prefix} is outside the exact writer taxonomy; \
         inspect it, remove or move it, then unblock"
    )]
    UnknownKeyShape {
        /// The tenant prefix listed.
        prefix: String,
        /// The offending key.
        key: String,
    },
    /// A manifest entry names a key that is not this community's (the manifest is corrupt or
    /// was tampered with): refuse to delete anything on its word.
    #[error(
        "manifest chunk {chunk_no} names key {key:?}, which is not a key of community {community}"
    )]
    ForeignManifestKey {
        /// The chunk.
        chunk_no: u32,
        /// The foreign key.
        key: String,
        /// The community being deleted.
        community: uuid::Uuid,
    },
    /// The object store did not acknowledge every version of a chunk; the chunk stays unstamped
    /// and is retried (deleting an absent version is acknowledged, so a retry converges).
    #[error(
        "chunk {chunk_no}: {acknowledged} of {requested} versions acknowledged; first failure: {first_failure}"
    )]
    PartialAcknowledgement {
        /// The chunk.
        chunk_no: u32,
        /// Versions acknowledged deleted.
        acknowledged: u64,
        /// Versions sent.
        requested: u64,
        /// The first failure or unacknowledged version.
        first_failure: String,
    },
    /// DeleteObjects refused one version with the per-key code `AccessDenied` on attempt after
    /// attempt (a bucket policy, IAM rule or object lock protects it). Retrying cannot help until
    /// an operator lifts the rule for that key.
    #[error(
        "chunk {chunk_no}: deleting key {key:?} version {version_id} was denied (AccessDenied) \
         on attempt {attempts}; a bucket policy, IAM rule or object lock protects it: lift it \
         for this key, then unblock"
    )]
    VersionDeleteDenied {
        /// The chunk.
        chunk_no: u32,
        /// The denied key.
        key: String,
        /// The denied version.
        version_id: String,
        /// The activity attempt that gave up.
        attempts: u32,
    },
    /// Preflight found S3 permissions the destructive phase needs missing (each probed without
    /// deleting anything). Nothing was fenced or deleted; retrying cannot help until an operator
    /// grants them.
    #[error(
        "preflight: the worker's S3 credentials lack {} permission(s) the deletion needs; \
         nothing was fenced or deleted: {}. Grant them, then unblock (or abort: the community \
         is served again)",
        .missing.len(),
        .missing.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    PermissionsMissing {
        /// Every missing permission, per prefix.
        missing: Vec<MissingPermission>,
    },
    /// Serving writes admitted before quiescing are still live; the fence waits for them.
    #[error("waiting on {count} live serving-write lease(s): {operations:?}")]
    ServingWritesLive {
        /// Live leases.
        count: u64,
        /// Their operations.
        operations: Vec<String>,
    },
    /// Verification found something of the community still present.
    #[error("verification found {what} still present: {detail}")]
    StillPresent {
        /// Which store.
        what: &'static str,
        /// What was found.
        detail: String,
    },
    /// Verification found an object version under a tenant prefix that no manifest chunk lists:
    /// it appeared after the manifest was frozen (a serving writer outlived its lease, or wrote
    /// without one). Retrying cannot make it go away, so the request blocks; the unblock deletes
    /// it as a late manifest chunk (`community.delete_late_versions`).
    #[error(
        "late object version: {key}@{version_id} ({kind}) under {prefix} appeared after the \
         manifest was frozen and is in no manifest chunk; find the writer that outlived (or \
         skipped) its serving-write lease, then unblock: the unblock deletes every such version \
         as a late manifest chunk and verifies again"
    )]
    LateObjectVersion {
        /// The tenant prefix listed.
        prefix: String,
        /// The object key.
        key: String,
        /// The version id.
        version_id: String,
        /// `object` or `delete_marker`.
        kind: String,
    },
    /// A listing was handed key ranges that do not cut the tenant's three prefixes into lanes
    /// covering every key exactly once (a defect of the worker, never of the data): nothing is
    /// listed, since a gap would leave versions out of the manifest.
    #[error(
        "the listing lanes {lanes:?} do not cover the tenant's three prefixes exactly once; \
         nothing was listed. This is a worker defect: report it, run a release whose lanes \
         cover the prefixes, then unblock"
    )]
    LanesIncomplete {
        /// The lanes handed over, labelled.
        lanes: Vec<String>,
    },
    /// Temporal asked the activity to stop (the workflow moved on or timed it out).
    #[error("activity cancelled")]
    Cancelled,
}

impl Classified for PhaseError {
    fn severity(&self) -> Severity {
        match self {
            PhaseError::Store(e) => e.severity(),
            PhaseError::Objects(e) => e.severity(),
            PhaseError::Cache(e) => e.severity(),
            variants!(
                PhaseError: Taxonomy, UnknownKeyShape, ForeignManifestKey, VersionDeleteDenied,
                PermissionsMissing, LateObjectVersion, LanesIncomplete
            ) => Severity::Permanent,
            variants!(
                PhaseError: PartialAcknowledgement, ServingWritesLive, StillPresent, Cancelled
            ) => Severity::Transient,
        }
    }

    /// Permanent failures become non-retryable application failures the workflow blocks on;
    /// transient ones stay retryable so Temporal backs off and tries again.
    ///
    /// A stale generation is retryable on purpose: it means another attempt claimed the request
    /// after this one. If this attempt is the one Temporal is waiting for (a zombie claimed after
    /// it), the retry re-claims and goes on; if this attempt is itself the zombie, Temporal
    /// already timed it out and discards its failure. Either way a stale generation never blocks
    /// the request. A late object version and an abort refused by the irreversible marker get
    /// non-retryable types of their own so the workflow can tell them apart.
    fn report(&self) -> Report {
        let typed = |type_name, non_retryable| Report::Typed {
            type_name,
            non_retryable,
        };
        if matches!(self, PhaseError::Cancelled) {
            Report::Cancelled
        } else if matches!(self, PhaseError::LateObjectVersion { .. }) {
            typed(LATE_OBJECT_VERSION_FAILURE_TYPE, true)
        } else if self.is_stale_generation() {
            typed(STALE_GENERATION_FAILURE_TYPE, false)
        } else if self.is_abort_refusal() {
            typed(ABORT_REFUSED_FAILURE_TYPE, true)
        } else {
            Report::BySeverity
        }
    }
}

impl PhaseError {
    /// Whether this is the store refusing a write from a superseded attempt.
    fn is_stale_generation(&self) -> bool {
        matches!(
            self,
            PhaseError::Store(StoreError::Request(RequestError::StaleGeneration { .. }))
        )
    }

    /// Whether this is an abort refused because the irreversible point was recorded first.
    fn is_abort_refusal(&self) -> bool {
        matches!(
            self,
            PhaseError::Store(StoreError::Request(
                RequestError::IrreversibleStarted { .. }
            ))
        )
    }
}

/// Sends a phase failure to Temporal through the one mapping, [`crate::failure::activity_error`]
/// (see [`PhaseError::report`] for the failures with a type of their own).
pub fn into_activity_error(error: PhaseError) -> ActivityError {
    activity_error(error)
}

/// Result of one phase.
pub type PhaseResult<T> = Result<T, PhaseError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ApprovalError;

    #[test]
    fn unknown_key_shape_is_permanent_and_partial_ack_is_transient() {
        let unknown = PhaseError::UnknownKeyShape {
            prefix: "media/x/".into(),
            key: "media/x/oops".into(),
        };
        assert_eq!(unknown.severity(), Severity::Permanent);
        let partial = PhaseError::PartialAcknowledgement {
            chunk_no: 7,
            acknowledged: 1,
            requested: 2,
            first_failure: "k@v: InternalError".into(),
        };
        assert_eq!(partial.severity(), Severity::Transient);
        assert!(partial.to_string().contains("1 of 2 versions acknowledged"));
    }

    /// The type name and retryability Temporal sees for `error`.
    fn as_sent(error: PhaseError) -> Option<(String, bool)> {
        match into_activity_error(error) {
            ActivityError::Application(failure) => Some((
                failure.type_name().unwrap_or_default().to_owned(),
                failure.is_non_retryable(),
            )),
            _ => None,
        }
    }

    #[test]
    fn a_stale_generation_is_sent_retryable_so_a_late_zombie_cannot_block_the_live_attempt() {
        let stale = PhaseError::Store(StoreError::Request(RequestError::StaleGeneration {
            request_id: uuid::Uuid::nil(),
            expected: 4,
            actual: 5,
        }));
        assert_eq!(
            as_sent(stale),
            Some((STALE_GENERATION_FAILURE_TYPE.to_owned(), false))
        );
    }

    #[test]
    fn evidence_mismatch_is_permanent_and_an_abort_refusal_has_its_own_type() {
        let tampered = PhaseError::Store(StoreError::Approval(ApprovalError::EvidenceMismatch {
            request_id: uuid::Uuid::nil(),
            differences: vec!["x".into()],
        }));
        assert_eq!(
            as_sent(tampered),
            Some((workflows::contract::PERMANENT_FAILURE_TYPE.to_owned(), true))
        );
        let refused = PhaseError::Store(StoreError::Request(RequestError::IrreversibleStarted {
            request_id: uuid::Uuid::nil(),
            stage: "drained".into(),
        }));
        assert_eq!(
            as_sent(refused),
            Some((ABORT_REFUSED_FAILURE_TYPE.to_owned(), true))
        );
    }
}
