//! Acquiring a lease: one call of `deletion.acquire_serving_write_lease` (community writes) or
//! `deletion.acquire_user_serving_write_lease` (writes made for one user), each of which holds
//! the fence rows `FOR SHARE` while it inserts the lease, so a concurrent fence either sees the
//! lease or refuses it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::ServingDb;
use crate::error::ServingError;
use crate::lease::{ServingWriteLease, require_named, require_pubkey, ttl_seconds};

/// What both acquisition functions return: an outcome and, when acquired, the lease's fields.
type AcquireRow = (String, Option<Uuid>, Option<i64>, Option<DateTime<Utc>>);

impl ServingDb {
    /// Admits one external serving write: refused with [`ServingError::Quiescing`] or
    /// [`ServingError::Fenced`] once deletion started, [`ServingError::UnknownCommunity`] for an
    /// unknown community. The fence row is held `FOR SHARE` while the lease is inserted, so a
    /// concurrent `fence` either sees this lease or refuses it.
    pub async fn acquire_serving_write_lease(
        &self,
        community_id: Uuid,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<ServingWriteLease, ServingError> {
        self.acquire_lease(community_id, None, operation, owner, ttl)
            .await
    }

    /// Admits one external serving write made for the user `pubkey` in `community_id`: refused
    /// with [`ServingError::Quiescing`] / [`ServingError::Fenced`] by the community's fence,
    /// [`ServingError::UserQuiescing`] / [`ServingError::UserFenced`] by the user's,
    /// [`ServingError::UnknownCommunity`] for an unknown community. Both fence rows are held
    /// `FOR SHARE` while the lease is inserted. The lease is also a lease of the community: its
    /// drain and fence count it.
    pub async fn acquire_user_serving_write_lease(
        &self,
        community_id: Uuid,
        pubkey: &str,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<ServingWriteLease, ServingError> {
        self.acquire_lease(community_id, Some(pubkey), operation, owner, ttl)
            .await
    }

    /// Both acquisitions: a community lease (`user` is `None`, one call of
    /// `deletion.acquire_serving_write_lease`) or a lease made for the user `user` (one call of
    /// `deletion.acquire_user_serving_write_lease`), the arguments checked first.
    pub(crate) async fn acquire_lease(
        &self,
        community_id: Uuid,
        user: Option<&str>,
        operation: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<ServingWriteLease, ServingError> {
        if let Some(pubkey) = user {
            require_pubkey("pubkey", pubkey)?;
        }
        require_named("operation", operation)?;
        require_named("owner", owner)?;
        let ttl = ttl_seconds(ttl)?;
        let query = match user {
            None => sqlx::query_as::<_, AcquireRow>(
                "SELECT outcome, lease_id, fence_generation, expires_at \
                 FROM deletion.acquire_serving_write_lease($1, $2, $3, $4)",
            )
            .bind(community_id),
            Some(pubkey) => sqlx::query_as::<_, AcquireRow>(
                "SELECT outcome, lease_id, fence_generation, expires_at \
                 FROM deletion.acquire_user_serving_write_lease($1, $2, $3, $4, $5)",
            )
            .bind(community_id)
            .bind(pubkey),
        };
        let (outcome, id, fence_generation, expires_at) = query
            .bind(operation)
            .bind(owner)
            .bind(ttl)
            .fetch_one(self.pool())
            .await?;
        let (id, fence_generation, expires_at) =
            match (outcome.as_str(), user, id, fence_generation, expires_at) {
                ("acquired", _, Some(id), Some(generation), Some(expires_at)) => {
                    (id, generation, expires_at)
                }
                ("quiescing", ..) => return Err(ServingError::Quiescing { community_id }),
                ("fenced", ..) => return Err(ServingError::Fenced { community_id }),
                ("user_quiescing", Some(pubkey), ..) => {
                    return Err(ServingError::UserQuiescing {
                        pubkey: pubkey.to_owned(),
                    });
                }
                ("user_fenced", Some(pubkey), ..) => {
                    return Err(ServingError::UserFenced {
                        pubkey: pubkey.to_owned(),
                    });
                }
                ("unknown_community", ..) => {
                    return Err(ServingError::UnknownCommunity { community_id });
                }
                (other, None, ..) => {
                    return Err(ServingError::Corrupt {
                        what: "serving-write lease acquisition",
                        reason: format!("outcome {other:?} for community {community_id}"),
                    });
                }
                (other, Some(pubkey), ..) => {
                    return Err(ServingError::Corrupt {
                        what: "user serving-write lease acquisition",
                        reason: format!(
                            "outcome {other:?} for user {pubkey} in community {community_id}"
                        ),
                    });
                }
            };
        Ok(ServingWriteLease {
            id,
            community_id,
            operation: operation.to_owned(),
            owner: owner.to_owned(),
            fence_generation,
            expires_at,
            user_pubkey: user.map(str::to_owned),
        })
    }
}
