//! Multipart uploads in progress under the tenant prefixes: tenant data that no version listing
//! shows. Completing one creates an object version, so a stalled serving process could bring an
//! object back after the versions were deleted. They are counted into the frozen inventory,
//! aborted first thing in the destructive phase (the first acknowledged abort sets the
//! irreversible marker), and required absent by verification.
//!
//! Every listing is of a tenant prefix with its trailing slash (`media/{c}/`), so a neighbour
//! whose id merely starts with the same characters is never listed, and every listed upload's key
//! must be an exact writer shape of the community (fail closed, as for versions).

use uuid::Uuid;
use workflows::community::UploadSummary;

use crate::s3::{AbortOutcome, MultipartUpload, ObjectStore};
use crate::store::{ExecToken, UploadAbortRecord};
use crate::taxonomy::{KeyStreamDigest, encode_upload, is_tenant_owned_key, tenant_prefixes};

use super::CommunityActivities;
use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::ProgressCell;
use super::marker::{CallEffect, Marker};

/// Uploads per listing page (the S3 maximum).
const UPLOAD_PAGE_SIZE: i32 = 1000;

/// Refuses an upload whose key is not an exact writer shape of the community.
fn require_tenant_owned(
    community: Uuid,
    prefix: &str,
    upload: &MultipartUpload,
) -> PhaseResult<()> {
    if is_tenant_owned_key(community, &upload.key) {
        Ok(())
    } else {
        Err(PhaseError::UnknownKeyShape {
            prefix: prefix.to_owned(),
            key: upload.key.clone(),
        })
    }
}

/// Lists the uploads in progress under each tenant prefix, checking each key's exact shape, and
/// returns one summary (count, order-independent digest over key and upload id) per prefix.
/// Memory: one listing page.
pub async fn scan_tenant_uploads(
    objects: &ObjectStore,
    community: Uuid,
    progress: &ProgressCell,
) -> PhaseResult<Vec<UploadSummary>> {
    let mut summaries = Vec::with_capacity(3);
    for prefix in tenant_prefixes(community) {
        progress.update(|p| p.step = format!("listing multipart uploads under {prefix}"));
        let mut digest = KeyStreamDigest::new();
        let mut marker = None;
        loop {
            let page = objects
                .list_uploads_page(&prefix, marker, UPLOAD_PAGE_SIZE)
                .await?;
            for upload in &page.uploads {
                require_tenant_owned(community, &prefix, upload)?;
                digest.fold_encoded(&encode_upload(&upload.key, &upload.upload_id));
            }
            match page.next {
                Some(next) => marker = Some(next),
                None => break,
            }
        }
        let (uploads_digest, uploads) = digest.finish();
        summaries.push(UploadSummary {
            prefix,
            uploads,
            uploads_digest,
        });
    }
    Ok(summaries)
}

/// Aborts every upload in progress under the community's tenant prefixes, as listed now (at the
/// irreversible point: an upload started since the inventory is the community's too). Each
/// abort is recorded as pending with `marker` before the irreversible marker is set (the first
/// acknowledged abort sets it), bracketed by fence and generation checks in Postgres, and
/// recorded as an `upload_aborted` audit event; an upload already gone counts as done. Returns
/// how many were aborted (or found gone) by this call.
pub async fn abort_tenant_uploads(
    acts: &CommunityActivities,
    token: &ExecToken,
    marker: &Marker<'_>,
    progress: &ProgressCell,
) -> PhaseResult<u64> {
    let mut handled = 0u64;
    for prefix in tenant_prefixes(token.community_id) {
        progress.update(|p| p.step = format!("aborting multipart uploads under {prefix}"));
        let mut page_marker = None;
        loop {
            let page = acts
                .objects
                .list_uploads_page(&prefix, page_marker, UPLOAD_PAGE_SIZE)
                .await?;
            // Check the whole page before aborting any of it: a stray key blocks the batch.
            for upload in &page.uploads {
                require_tenant_owned(token.community_id, &prefix, upload)?;
            }
            for upload in &page.uploads {
                // AbortMultipartUpload is an HTTP DELETE: paced with the version deletes.
                acts.pacer.admit(&prefix, 1).await;
                marker.before_call().await?;
                acts.store.verify_fence(token).await?;
                if !marker.start_call() {
                    return Err(PhaseError::Cancelled);
                }
                let answer = acts.objects.abort_upload(upload).await;
                marker.book(CallEffect::of_abort(&answer));
                marker.confirm_if_acknowledged().await?;
                let outcome = answer?;
                acts.store.verify_fence(token).await?;
                acts.store
                    .record_upload_aborted(
                        token,
                        &UploadAbortRecord {
                            prefix: &prefix,
                            key: &upload.key,
                            upload_id: &upload.upload_id,
                            outcome: match outcome {
                                AbortOutcome::Aborted => "aborted",
                                AbortOutcome::AlreadyGone => "already_gone",
                            },
                        },
                    )
                    .await?;
                handled += 1;
                progress.update(|p| {
                    p.step = format!("aborted {handled} multipart upload(s); last under {prefix}")
                });
            }
            match page.next {
                Some(next) => page_marker = Some(next),
                None => break,
            }
        }
    }
    Ok(handled)
}

/// The upload half of the storage absence proof: no upload in progress under any of `prefixes`.
/// One found is a [`PhaseError::StillPresent`] naming its key and upload id.
pub async fn verify_no_uploads(
    objects: &ObjectStore,
    prefixes: &[String],
    progress: &ProgressCell,
) -> PhaseResult<()> {
    for prefix in prefixes {
        progress.update(|p| p.step = format!("listing multipart uploads under {prefix}"));
        if let Some(upload) = objects.first_upload(prefix).await? {
            return Err(PhaseError::StillPresent {
                what: "a multipart upload in progress",
                detail: format!("{} (upload id {})", upload.key, upload.upload_id),
            });
        }
    }
    Ok(())
}
