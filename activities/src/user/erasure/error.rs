//! Why a real handler did not finish, each classified once: transient failures are retried by
//! Temporal (a new attempt, a new generation, continuing from what is logged); permanent ones are
//! saved on the stage row as its failure, with the remedy, and the run stops there.

use crate::store::RequestError;
use uuid::Uuid;

use crate::failure::{Classified, Report, Severity, variants};
use crate::redis::CacheError;
use crate::s3::ObjectStoreError;
use crate::store::StoreError;

use super::inventory::UndeclaredKeys;

/// Why a real handler stopped.
#[derive(Debug, thiserror::Error)]
pub enum ErasureError {
    /// Postgres failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user-deletion store failed.
    #[error(transparent)]
    UserStore(#[from] crate::store::user::UserStoreError),
    /// S3 failed or refused.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// Redis failed or refused.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// This worker was started without the clients a real user needs.
    #[error(
        "this worker cannot erase real users: it has no S3 bucket or Redis configured \
         (BUZZ_S3_* and REDIS_URL); start the worker with them and run again"
    )]
    NotConfigured,
    /// `user.take_inventory` called for a target that is not `user:<pubkey>`.
    #[error(
        "target {0:?} is not a user: target; only user:<64-hex pubkey> has an inventory to take"
    )]
    NotAUserTarget(String),
    /// The user owns communities that have other members: deleting the user would leave them
    /// without an owner.
    #[error(
        "blocked: the user owns {}; transfer ownership of each to another member, then \
         `buzz-deletion user unblock REQUEST_ID --reason …` and run again",
        .communities.join(", ")
    )]
    OwnsCommunities {
        /// Each as `host (community id) with N other member(s)`.
        communities: Vec<String>,
    },
    /// A per-community stage row without its community.
    #[error("stage row {0} names no community; the stage history is corrupt")]
    NoCommunity(String),
    /// A media upload row of the user names an object outside its community's prefix.
    #[error(
        "community {community_id}: an upload of the user names object {object_key:?}, which is \
         outside the community's prefix media/{community_id}/ or not of the exact shape \
         media/{community_id}/<sha256>; nothing of it was deleted. Correct or remove that \
         buzz.media_uploads row, then run again"
    )]
    ForeignObjectKey {
        /// The community.
        community_id: Uuid,
        /// The key.
        object_key: String,
    },
    /// The user-data declarations differ from the ones the approved inventory was taken under.
    #[error(
        "the user-data declarations changed since the inventory was approved ({change}); the \
         approval no longer covers them: abort this request and submit a new one"
    )]
    DeclarationsChanged {
        /// What differs.
        change: String,
    },
    /// Once fenced, the user holds data in a community the approved inventory does not list.
    #[error(
        "the user has data in {} community(ies) the approved inventory does not list: {}; the \
         approval does not cover them: abort this request and submit a new one (its inventory \
         will list them)",
        .communities.len(),
        .communities.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ")
    )]
    UninventoriedCommunities {
        /// The communities.
        communities: Vec<Uuid>,
    },
    /// A purged community still holds something of the user.
    #[error("community {community_id}: verification failed: {what}; run again to purge it")]
    NotVerified {
        /// The community.
        community_id: Uuid,
        /// What is left.
        what: String,
    },
    /// The user's serving writes did not drain in time.
    #[error(
        "the user's serving writes did not drain within {waited_secs} s ({detail}); run again once \
         the serving side released them (docs/operations.md, \"Stalled serving-write leases\")"
    )]
    DrainTimeout {
        /// How long the gate waited.
        waited_secs: u64,
        /// The last refusal.
        detail: String,
    },
    /// Keys under the user's prefix that match no declared per-user key shape appeared after
    /// the inventory: the erasure cannot tell whether they are the user's.
    #[error(
        "{found} Redis key(s) under the user's prefix match no declared per-user key shape: \
         {named:?}; nothing of them was deleted. Delete them if they are stray, or declare the \
         shape in store/src/taxonomy/user_keys.rs (docs/data-model.md, \"Per-user Redis \
         keys\"), then `buzz-deletion user unblock REQUEST_ID --reason …` and run again"
    )]
    UndeclaredUserKeys {
        /// How many keys matched no shape.
        found: u64,
        /// The first of them.
        named: Vec<String>,
    },
    /// Temporal cancelled the attempt.
    #[error("the handler attempt was cancelled")]
    Cancelled,
}

impl From<UndeclaredKeys> for ErasureError {
    /// Undeclared keys met after the inventory (at the gate) are a stage failure with its remedy.
    fn from(keys: UndeclaredKeys) -> Self {
        ErasureError::UndeclaredUserKeys {
            found: keys.found,
            named: keys.named,
        }
    }
}

impl ErasureError {
    /// Whether a newer attempt superseded this one (it must stop without saving anything).
    pub fn is_stale_generation(&self) -> bool {
        match self {
            ErasureError::Store(StoreError::Request(RequestError::StaleGeneration { .. })) => true,
            ErasureError::UserStore(error) => error.is_stale_generation(),
            _ => false,
        }
    }
}

impl ErasureError {
    /// Whether the failure is saved on the stage row (the stage fails, the run stops with the
    /// remedy) rather than handed to Temporal: permanent failures are; transient ones are
    /// retried as a new attempt, and a superseded or cancelled attempt saves nothing.
    pub fn is_saved_as_stage_failure(&self) -> bool {
        self.severity() == Severity::Permanent && !self.is_stale_generation()
    }
}

impl Classified for ErasureError {
    fn severity(&self) -> Severity {
        match self {
            ErasureError::Store(error) => error.severity(),
            ErasureError::UserStore(error) => error.severity(),
            ErasureError::Objects(error) => error.severity(),
            ErasureError::Cache(error) => error.severity(),
            ErasureError::Cancelled => Severity::Transient,
            variants!(
                ErasureError: NotConfigured, NotAUserTarget, NoCommunity, OwnsCommunities,
                ForeignObjectKey, DeclarationsChanged, UninventoriedCommunities, NotVerified,
                DrainTimeout, UndeclaredUserKeys
            ) => Severity::Permanent,
        }
    }

    fn report(&self) -> Report {
        match self {
            ErasureError::Cancelled => Report::Cancelled,
            ErasureError::Store(error) => error.report(),
            ErasureError::UserStore(error) => error.report(),
            _ => Report::BySeverity,
        }
    }
}
