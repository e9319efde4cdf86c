//! The decision taken for every media object a user uploaded in a community, recorded once.
//!
//! Media are content-addressed (`media/{community}/{sha256}`), so one object may back uploads of
//! several users. An object is deleted only when no remaining upload in the community references
//! it other than the user's own; an upload with no uploader on record counts as someone else's.
//! The versions a `delete` decision covers are listed by the caller *before* the references are
//! counted here, so a version put by a later upload of someone else is never among them (the
//! relay records an upload's row before it puts the object: see `docs/data-model.md`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{ErasureAttempt, PurgeLogKind};
use crate::error::{StoreError, StoreResult};
use crate::object_addresses::ObjectVersionRef;
use crate::taxonomy::derived_keys;
use crate::{Store, count_u64};

/// What is done with one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaDecisionKind {
    /// Only the user referenced it: its listed versions are deleted.
    Delete,
    /// Another upload references it: it is kept, only the user's upload rows go.
    KeepShared,
}

impl MediaDecisionKind {
    fn as_str(self) -> &'static str {
        match self {
            MediaDecisionKind::Delete => "delete",
            MediaDecisionKind::KeepShared => "keep_shared",
        }
    }
}

/// One recorded decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaDecision {
    /// The object key.
    pub object_key: String,
    /// The decision.
    pub decision: MediaDecisionKind,
    /// Uploads by others (or by nobody on record) referencing it when decided.
    pub other_references: u64,
    /// The user's own uploads referencing it when decided.
    pub user_references: u64,
    /// The versions a delete covers (empty when kept).
    pub versions: Vec<ObjectVersionRef>,
    /// When its versions were all acknowledged deleted.
    pub deleted_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct DecisionRow {
    object_key: String,
    decision: String,
    other_references: i64,
    user_references: i64,
    versions: serde_json::Value,
    deleted_at: Option<DateTime<Utc>>,
}

impl TryFrom<DecisionRow> for MediaDecision {
    type Error = StoreError;

    fn try_from(row: DecisionRow) -> StoreResult<Self> {
        let corrupt = |reason: String| StoreError::Corrupt {
            what: "media decision",
            reason,
        };
        let decision = match row.decision.as_str() {
            "delete" => MediaDecisionKind::Delete,
            "keep_shared" => MediaDecisionKind::KeepShared,
            other => return Err(corrupt(format!("unknown decision {other:?}"))),
        };
        let versions = serde_json::from_value(row.versions)
            .map_err(|e| corrupt(format!("{}: versions: {e}", row.object_key)))?;
        Ok(MediaDecision {
            object_key: row.object_key,
            decision,
            other_references: count_u64(row.other_references),
            user_references: count_u64(row.user_references),
            versions,
            deleted_at: row.deleted_at,
        })
    }
}

impl Store {
    /// The distinct object keys of the user's uploads in the community, sorted.
    pub async fn user_uploaded_objects(
        &self,
        community_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT object_key FROM buzz.media_uploads \
             WHERE community_id = $1 AND uploader_pubkey = $2 ORDER BY object_key",
        )
        .bind(community_id)
        .bind(pubkey)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The decision already recorded for the object, if any.
    pub async fn media_decision(
        &self,
        request_id: Uuid,
        community_id: Uuid,
        object_key: &str,
    ) -> StoreResult<Option<MediaDecision>> {
        sqlx::query_as::<_, DecisionRow>(
            "SELECT object_key, decision, other_references, user_references, versions, deleted_at \
             FROM deletion.user_media_decisions \
             WHERE request_id = $1 AND community_id = $2 AND object_key = $3",
        )
        .bind(request_id)
        .bind(community_id)
        .bind(object_key)
        .fetch_optional(&self.pool)
        .await?
        .map(MediaDecision::try_from)
        .transpose()
    }

    /// Every decision recorded for the request in the community, by object key.
    pub async fn media_decisions(
        &self,
        request_id: Uuid,
        community_id: Uuid,
    ) -> StoreResult<Vec<MediaDecision>> {
        sqlx::query_as::<_, DecisionRow>(
            "SELECT object_key, decision, other_references, user_references, versions, deleted_at \
             FROM deletion.user_media_decisions \
             WHERE request_id = $1 AND community_id = $2 ORDER BY object_key",
        )
        .bind(request_id)
        .bind(community_id)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(MediaDecision::try_from)
        .collect()
    }

    /// Counts the references to `object_key` in the community and records the decision, with
    /// `listed` (the versions listed just before) when it is a delete. The first recorded
    /// decision stands: a repeat returns it unchanged.
    pub async fn decide_media_object(
        &self,
        attempt: &ErasureAttempt,
        community_id: Uuid,
        pubkey: &str,
        object_key: &str,
        listed: &[ObjectVersionRef],
    ) -> StoreResult<MediaDecision> {
        let mut tx = self.begin_attempt(attempt).await?;
        let (others, own): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE uploader_pubkey IS DISTINCT FROM $3), \
                    count(*) FILTER (WHERE uploader_pubkey = $3) \
             FROM buzz.media_uploads WHERE community_id = $1 AND object_key = $2",
        )
        .bind(community_id)
        .bind(object_key)
        .bind(pubkey)
        .fetch_one(&mut *tx)
        .await?;
        let decision = if others > 0 {
            MediaDecisionKind::KeepShared
        } else {
            MediaDecisionKind::Delete
        };
        // The decision covers the object and the objects derived from it, nothing else.
        let derived = derived_keys(object_key).unwrap_or_default();
        let covered = |key: &str| key == object_key || derived.iter().any(|d| d == key);
        let versions: Vec<&ObjectVersionRef> = match decision {
            MediaDecisionKind::Delete => listed.iter().filter(|v| covered(&v.key)).collect(),
            MediaDecisionKind::KeepShared => Vec::new(),
        };
        let versions = serde_json::to_value(&versions).map_err(|e| StoreError::Corrupt {
            what: "media decision",
            reason: format!("cannot encode versions: {e}"),
        })?;
        sqlx::query(
            "INSERT INTO deletion.user_media_decisions \
                 (request_id, community_id, object_key, decision, other_references, \
                  user_references, versions, exec_generation) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (request_id, community_id, object_key) DO NOTHING",
        )
        .bind(attempt.request_id)
        .bind(community_id)
        .bind(object_key)
        .bind(decision.as_str())
        .bind(others)
        .bind(own)
        .bind(&versions)
        .bind(attempt.generation)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.media_decision(attempt.request_id, community_id, object_key)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                what: "media decision",
                reason: format!("{object_key}: not found right after it was recorded"),
            })
    }

    /// Stamps a delete decision done (its `deleted` versions all acknowledged) and logs the
    /// versions of each key it covered (`per_key`: the media object and the objects derived
    /// from it), generation-checked; a repeat on a stamped decision changes nothing.
    pub async fn stamp_media_deleted(
        &self,
        attempt: &ErasureAttempt,
        community_id: Uuid,
        object_key: &str,
        deleted: u64,
        per_key: &[(String, u64)],
    ) -> StoreResult<()> {
        let mut tx = self.begin_attempt(attempt).await?;
        let stamped = sqlx::query(
            "UPDATE deletion.user_media_decisions \
             SET deleted_at = clock_timestamp(), deleted_versions = $4 \
             WHERE request_id = $1 AND community_id = $2 AND object_key = $3 \
               AND decision = 'delete' AND deleted_at IS NULL",
        )
        .bind(attempt.request_id)
        .bind(community_id)
        .bind(object_key)
        .bind(crate::count_i64("deleted", deleted)?)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if stamped > 0 {
            for (key, versions) in per_key.iter().filter(|(_, versions)| *versions > 0) {
                attempt
                    .log(
                        &mut tx,
                        community_id,
                        PurgeLogKind::ObjectVersions,
                        key,
                        *versions,
                    )
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }
}
