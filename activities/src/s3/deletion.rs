//! Deletion: version-exact bulk deletes (`DeleteObjects`, at most 1,000 versions a call) whose
//! acknowledgements are matched by key and version id, and the abort of a multipart upload.

use std::collections::HashMap;

use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use serde::{Deserialize, Serialize};

use super::ObjectStore;
use super::error::{ObjectStoreError, S3Operation, invalid_request};
use crate::store::object_addresses::{MultipartUpload, ObjectVersionRef};

/// The most versions one DeleteObjects call accepts (an S3 protocol limit).
pub const MAX_VERSIONS_PER_DELETE: usize = 1000;

/// A version the server explicitly refused to delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteFailure {
    /// The key as reported by the server.
    pub key: String,
    /// The version id as reported by the server (empty if it omitted one).
    pub version_id: String,
    /// The S3 error code, e.g. `AccessDenied`.
    pub code: String,
    /// The server's message, for the operator.
    pub message: String,
}

/// The per-key error codes of a DeleteObjects answer that change what the caller does. Parsed
/// from the `Errors[].Code` field only, never from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteFailureKind {
    /// `AccessDenied`: a bucket policy, IAM rule or object lock refuses this one key. Retrying
    /// cannot help until an operator changes the rule.
    AccessDenied,
    /// `SlowDown`: the key's partition is over its request rate. The version is retried after
    /// the prefix's rate was lowered (see `community::pacing`).
    Throttled,
    /// Any other code (`InternalError`, …): worth retrying.
    Other,
}

impl DeleteFailureKind {
    /// The kind of a per-key error `code` as the server spelled it.
    pub fn from_code(code: &str) -> Self {
        match code {
            "AccessDenied" => DeleteFailureKind::AccessDenied,
            "SlowDown" => DeleteFailureKind::Throttled,
            _ => DeleteFailureKind::Other,
        }
    }
}

impl DeleteFailure {
    /// What this per-key error means for the caller, by its code.
    pub fn kind(&self) -> DeleteFailureKind {
        DeleteFailureKind::from_code(&self.code)
    }
}

/// What one DeleteObjects call acknowledged, matched against what was requested.
///
/// The caller decides what a partial acknowledgement means; this type only reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkDeleteOutcome {
    /// Number of versions sent.
    pub requested: u64,
    /// Requested versions the server acknowledged as deleted (by key and version id).
    pub deleted: u64,
    /// Requested versions the server reported an error for.
    pub failed: Vec<DeleteFailure>,
    /// Requested versions the server neither acknowledged nor reported an error for.
    pub unacknowledged: Vec<ObjectVersionRef>,
}

impl BulkDeleteOutcome {
    /// True when every requested version was acknowledged as deleted and none failed.
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty() && self.unacknowledged.is_empty() && self.deleted == self.requested
    }
}

/// What AbortMultipartUpload found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortOutcome {
    /// The upload existed and is aborted now (its parts are freed).
    Aborted,
    /// The server no longer knows the upload id (`NoSuchUpload`): aborted or completed before.
    AlreadyGone,
}

impl ObjectStore {
    /// Deletes exactly `versions` in ONE DeleteObjects call with explicit version ids.
    ///
    /// Quiet mode is off so the server acknowledges every version; acknowledgements are matched
    /// to the request by key and version id and counted. Nothing is retried here and a partial
    /// acknowledgement is returned as-is: the caller decides whether the chunk is done.
    ///
    /// Observed on the local Ceph RGW (and S3 documents the same): every `Deleted` entry echoes
    /// the requested key and `VersionId`; a deleted delete marker additionally carries
    /// `DeleteMarker=true` and `DeleteMarkerVersionId` equal to that id. A version id that no
    /// longer exists — already deleted, or never existed, even on a key that never existed — is
    /// also acknowledged as deleted, not reported as an error. An acknowledgement therefore
    /// means "this version is absent now", which makes a replayed chunk idempotent; it does not
    /// prove the version ever existed (the verify stage's listing proves absence). The
    /// `objects_it` test `re_deleting_already_deleted_versions_is_acknowledged_as_deleted` pins it.
    pub async fn delete_versions(
        &self,
        versions: &[ObjectVersionRef],
    ) -> Result<BulkDeleteOutcome, ObjectStoreError> {
        if versions.len() > MAX_VERSIONS_PER_DELETE {
            return Err(ObjectStoreError::TooManyVersions {
                requested: versions.len(),
                limit: MAX_VERSIONS_PER_DELETE,
            });
        }
        if let Some(unversioned) = versions.iter().find(|v| v.version_id.is_empty()) {
            return Err(ObjectStoreError::MissingVersionId {
                key: unversioned.key.clone(),
            });
        }
        if versions.is_empty() {
            return Ok(BulkDeleteOutcome::default());
        }
        let identifiers = versions
            .iter()
            .map(|version| {
                ObjectIdentifier::builder()
                    .key(&version.key)
                    .version_id(&version.version_id)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| invalid_request(S3Operation::DeleteObjects, &error))?;
        let delete = Delete::builder()
            .set_objects(Some(identifiers))
            .quiet(false)
            .build()
            .map_err(|error| invalid_request(S3Operation::DeleteObjects, &error))?;
        let output = self
            .client
            .delete_objects()
            .bucket(self.bucket.as_ref())
            .delete(delete)
            .customize()
            // The caller retries: a throttle must reach its per-prefix rate at once, not after
            // the SDK's own backoff (see `community::pacing`).
            .config_override(
                aws_sdk_s3::config::Builder::new()
                    .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled()),
            )
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::DeleteObjects, error))?;

        let acknowledged = output.deleted().iter().filter_map(|deleted| {
            let key = deleted.key()?;
            // A deleted delete marker may be reported through DeleteMarkerVersionId only.
            let version_id = deleted
                .version_id()
                .or_else(|| deleted.delete_marker_version_id())?;
            Some((key, version_id))
        });
        let refused = output.errors().iter().map(|error| DeleteFailure {
            key: error.key().unwrap_or_default().to_owned(),
            version_id: error.version_id().unwrap_or_default().to_owned(),
            code: error.code().unwrap_or_default().to_owned(),
            message: error.message().unwrap_or_default().to_owned(),
        });
        Ok(match_delete_acknowledgements(
            versions,
            acknowledged,
            refused.collect(),
        ))
    }

    /// Aborts one multipart upload, freeing its parts; completing it afterwards fails. An upload
    /// id the server no longer knows (`NoSuchUpload`, HTTP 404) is [`AbortOutcome::AlreadyGone`],
    /// so a replayed abort converges.
    pub async fn abort_upload(
        &self,
        upload: &MultipartUpload,
    ) -> Result<AbortOutcome, ObjectStoreError> {
        let result = self
            .client
            .abort_multipart_upload()
            .bucket(self.bucket.as_ref())
            .key(&upload.key)
            .upload_id(&upload.upload_id)
            .send()
            .await;
        match result {
            Ok(_) => Ok(AbortOutcome::Aborted),
            Err(SdkError::ServiceError(service)) if service.err().is_no_such_upload() => {
                Ok(AbortOutcome::AlreadyGone)
            }
            Err(error) => Err(self.sdk_error(S3Operation::AbortMultipartUpload, error)),
        }
    }
}

/// Matches server acknowledgements to the request: only an acknowledgement naming a requested
/// key AND version id counts, so a response about some other version can never stamp a chunk.
pub(super) fn match_delete_acknowledgements<'a>(
    requested: &[ObjectVersionRef],
    acknowledged: impl Iterator<Item = (&'a str, &'a str)>,
    failed: Vec<DeleteFailure>,
) -> BulkDeleteOutcome {
    let mut acked: HashMap<(&str, &str), bool> = requested
        .iter()
        .map(|version| ((version.key.as_str(), version.version_id.as_str()), false))
        .collect();
    for pair in acknowledged {
        if let Some(seen) = acked.get_mut(&pair) {
            *seen = true;
        }
    }
    let refused: std::collections::HashSet<(&str, &str)> = failed
        .iter()
        .map(|failure| (failure.key.as_str(), failure.version_id.as_str()))
        .collect();
    let mut deleted = 0u64;
    let mut unacknowledged = Vec::new();
    for version in requested {
        let pair = (version.key.as_str(), version.version_id.as_str());
        if acked.get(&pair).copied().unwrap_or(false) {
            deleted += 1;
        } else if !refused.contains(&pair) {
            unacknowledged.push(version.clone());
        }
    }
    BulkDeleteOutcome {
        requested: requested.len() as u64,
        deleted,
        failed,
        unacknowledged,
    }
}
