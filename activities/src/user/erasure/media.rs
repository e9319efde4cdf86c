//! The user's media objects in one community: a recorded decision per object, then a
//! version-exact delete of the objects only the user referenced.
//!
//! Per object: the versions of exactly that key and of the objects derived from it (its
//! thumbnail and metadata document, `taxonomy::derived_keys`) are listed first, then the
//! references are counted and the decision recorded with those versions
//! (`Store::decide_media_object`): a shared object is kept with everything derived from it, an
//! object only the user referenced is deleted with it. A delete re-checks the attempt before and
//! after each DeleteObjects call, aborts multipart uploads still in progress on the keys
//! (completing one later would bring the object back), and stamps the decision, logging each
//! key's versions. A retry finds the recorded decision and continues it; it never decides twice.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{Eraser, ErasureError, HandlerRun};
use crate::s3::{MAX_VERSIONS_PER_DELETE, ObjectVersionRef};
use crate::store::user::erasure::media::{MediaDecision, MediaDecisionKind};
use crate::taxonomy::derived_keys;

/// Versions (or uploads) listed per page.
const LIST_PAGE: i32 = 1000;

/// What the media step did in one community.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MediaOutcome {
    /// Objects deleted (every listed version of each).
    pub deleted_objects: u64,
    /// Objects kept because another upload references them.
    pub kept_shared: u64,
    /// Versions deleted across the deleted objects (and the objects derived from them).
    pub versions_deleted: u64,
    /// Objects derived from the deleted media objects (thumbnails, metadata documents) deleted
    /// with them; those of a kept media object are kept with it.
    pub derived_objects_deleted: u64,
}

/// The prefix every media object of the community lives under.
pub(crate) fn media_prefix(community_id: Uuid) -> String {
    format!("media/{}/", community_id.hyphenated())
}

/// Decides and carries out every media object of the user in `community_id`.
pub(crate) async fn erase_media(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
) -> Result<MediaOutcome, ErasureError> {
    let prefix = media_prefix(community_id);
    let keys = eraser
        .store
        .user_uploaded_objects(community_id, run.pubkey)
        .await?;
    // Refused before anything is deleted: an upload row naming another tenant's object, or an
    // object of no exact media shape (nothing tells which objects derive from it).
    if let Some(foreign) = keys
        .iter()
        .find(|key| !key.starts_with(&prefix) || derived_keys(key).is_none())
    {
        return Err(ErasureError::ForeignObjectKey {
            community_id,
            object_key: foreign.clone(),
        });
    }
    for (done, key) in keys.iter().enumerate() {
        run.beat("media", u64::try_from(done).unwrap_or(u64::MAX))
            .await?;
        let decision = match eraser
            .store
            .media_decision(run.attempt.request_id, community_id, key)
            .await?
        {
            Some(decision) => decision,
            None => {
                // The media object's versions and those of the objects derived from it, listed
                // before the references are counted.
                let mut listed = exact_versions(eraser, key).await?;
                for derived in derived_keys(key).into_iter().flatten() {
                    listed.extend(exact_versions(eraser, &derived).await?);
                }
                eraser
                    .store
                    .decide_media_object(&run.attempt, community_id, run.pubkey, key, &listed)
                    .await?
            }
        };
        if decision.decision == MediaDecisionKind::Delete && decision.deleted_at.is_none() {
            carry_out_delete(eraser, run, community_id, &decision).await?;
        }
    }
    // Decisions of earlier attempts count too: their upload rows may be gone already.
    let mut outcome = MediaOutcome::default();
    for decision in eraser
        .store
        .media_decisions(run.attempt.request_id, community_id)
        .await?
    {
        match decision.decision {
            MediaDecisionKind::Delete => {
                outcome.deleted_objects += 1;
                let derived: BTreeSet<&str> = decision
                    .versions
                    .iter()
                    .map(|v| v.key.as_str())
                    .filter(|key| *key != decision.object_key)
                    .collect();
                outcome.derived_objects_deleted = outcome
                    .derived_objects_deleted
                    .saturating_add(u64::try_from(derived.len()).unwrap_or(u64::MAX));
                outcome.versions_deleted = outcome
                    .versions_deleted
                    .saturating_add(u64::try_from(decision.versions.len()).unwrap_or(u64::MAX));
            }
            MediaDecisionKind::KeepShared => outcome.kept_shared += 1,
        }
    }
    Ok(outcome)
}

/// Every version and delete marker of exactly `key` (a listing by prefix also returns longer
/// keys, which are other objects).
pub(crate) async fn exact_versions(
    eraser: &Eraser,
    key: &str,
) -> Result<Vec<ObjectVersionRef>, ErasureError> {
    let mut versions = Vec::new();
    let mut marker = None;
    loop {
        let page = eraser
            .objects
            .list_versions_page(key, marker, LIST_PAGE)
            .await?;
        versions.extend(
            page.entries
                .iter()
                .filter(|entry| entry.key == key)
                .map(|entry| entry.version_ref()),
        );
        match page.next {
            Some(next) => marker = Some(next),
            None => return Ok(versions),
        }
    }
}

/// Deletes the decision's versions (and aborts uploads in progress on its key), generation-
/// checked around every irreversible call, then stamps it.
async fn carry_out_delete(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    community_id: Uuid,
    decision: &MediaDecision,
) -> Result<(), ErasureError> {
    let mut deleted = 0u64;
    for chunk in decision.versions.chunks(MAX_VERSIONS_PER_DELETE) {
        eraser.store.require_current_attempt(&run.attempt).await?;
        let outcome = eraser.objects.delete_versions(chunk).await?;
        eraser.store.require_current_attempt(&run.attempt).await?;
        if !outcome.is_complete() {
            return Err(ErasureError::NotVerified {
                community_id,
                what: format!(
                    "object {}: {} of {} versions acknowledged deleted ({} failed); run again",
                    decision.object_key,
                    outcome.deleted,
                    outcome.requested,
                    outcome.failed.len()
                ),
            });
        }
        deleted = deleted.saturating_add(outcome.deleted);
        run.beat("media", deleted).await?;
    }
    let mut per_key: BTreeMap<&str, u64> = BTreeMap::new();
    for version in &decision.versions {
        *per_key.entry(version.key.as_str()).or_default() += 1;
    }
    for key in derived_keys(&decision.object_key)
        .into_iter()
        .flatten()
        .chain(std::iter::once(decision.object_key.clone()))
    {
        abort_uploads_on(eraser, run, &key).await?;
    }
    let per_key: Vec<(String, u64)> = per_key
        .into_iter()
        .map(|(key, versions)| (key.to_owned(), versions))
        .collect();
    eraser
        .store
        .stamp_media_deleted(
            &run.attempt,
            community_id,
            &decision.object_key,
            deleted,
            &per_key,
        )
        .await?;
    Ok(())
}

/// Aborts every multipart upload in progress on exactly `key`.
async fn abort_uploads_on(
    eraser: &Eraser,
    run: &HandlerRun<'_>,
    key: &str,
) -> Result<(), ErasureError> {
    let mut marker = None;
    loop {
        let page = eraser
            .objects
            .list_uploads_page(key, marker, LIST_PAGE)
            .await?;
        for upload in page.uploads.iter().filter(|upload| upload.key == key) {
            eraser.store.require_current_attempt(&run.attempt).await?;
            eraser.objects.abort_upload(upload).await?;
        }
        match page.next {
            Some(next) => marker = Some(next),
            None => return Ok(()),
        }
    }
}
