//! S3 adapter: versioned listings and version-exact bulk deletes.
//!
//! Talks to any S3-compatible server (Ceph RGW locally) with path-style addressing and a custom
//! endpoint. Every failure is mapped once, from the SDK's error variant and HTTP status, to an
//! [`ObjectStoreError`] variant whose [`Classified::severity`] decides permanent versus transient;
//! no error message text is ever inspected.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Delete, ObjectIdentifier};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use serde::{Deserialize, Serialize};

use crate::failure::{Classified, Severity};
use crate::taxonomy::{ManifestEntry, VersionKind};

/// The most versions one DeleteObjects call accepts (an S3 protocol limit).
pub const MAX_VERSIONS_PER_DELETE: usize = 1000;

/// Page size used by the whole-prefix helpers ([`ObjectStore::snapshot_prefix`]).
const SNAPSHOT_PAGE_SIZE: i32 = 1000;

/// Credentials name shown in SDK diagnostics.
const CREDENTIALS_SOURCE: &str = "buzz-deletion-static";

/// Where the bucket lives and how to authenticate. Read once at the binary edge.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Base URL of the S3 server, e.g. `http://127.0.0.1:57480`.
    pub endpoint: String,
    /// The one shared, versioned bucket.
    pub bucket: String,
    /// Signing region (any non-empty value for RGW).
    pub region: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key; never printed.
    pub secret_key: String,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// A client bound to one bucket. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct ObjectStore {
    client: aws_sdk_s3::Client,
    bucket: Arc<str>,
    endpoint: Arc<str>,
}

impl fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStore")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .finish()
    }
}

/// One listed version of one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectVersion {
    /// The full object key.
    pub key: String,
    /// Its version id.
    pub version_id: String,
    /// Data or delete marker.
    pub kind: VersionKind,
    /// Stored bytes (0 for a delete marker).
    pub size: u64,
    /// Whether this is the key's current version.
    pub is_latest: bool,
}

impl ObjectVersion {
    /// The manifest entry a destructive stage freezes for this version.
    pub fn manifest_entry(&self) -> ManifestEntry {
        ManifestEntry::new(self.key.clone(), self.version_id.clone(), self.kind)
    }

    /// The reference a version-exact delete needs.
    pub fn version_ref(&self) -> ObjectVersionRef {
        ObjectVersionRef {
            key: self.key.clone(),
            version_id: self.version_id.clone(),
        }
    }
}

/// One page of a version listing, in the server's key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionPage {
    /// Object versions and delete markers of this page.
    pub entries: Vec<ObjectVersion>,
    /// `(key marker, version id marker)` to pass for the next page; `None` on the last page.
    pub next: Option<(String, String)>,
}

/// One multipart upload in progress (initiated, never completed nor aborted). It holds no
/// version yet, so version listings do not show it, but completing it creates one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MultipartUpload {
    /// The key the upload will create when completed.
    pub key: String,
    /// The upload id the server assigned.
    pub upload_id: String,
}

/// One page of a multipart-upload listing, in the server's (key, upload id) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPage {
    /// Uploads in progress on this page.
    pub uploads: Vec<MultipartUpload>,
    /// `(key marker, upload id marker)` to pass for the next page; `None` on the last page.
    pub next: Option<(String, String)>,
}

/// One uploaded part of a multipart upload, as ListParts reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UploadedPart {
    /// Its part number (1-based).
    pub part_number: i32,
    /// Its ETag (the MD5 of its bytes, for a part uploaded without SSE).
    pub e_tag: String,
    /// Its size in bytes.
    pub size: u64,
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

/// Exactly one version of one key, as a version-exact delete addresses it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectVersionRef {
    /// The full object key.
    pub key: String,
    /// The version to delete; never empty (an empty id would create a delete marker instead).
    pub version_id: String,
}

impl From<ManifestEntry> for ObjectVersionRef {
    fn from(entry: ManifestEntry) -> Self {
        Self {
            key: entry.key,
            version_id: entry.version_id,
        }
    }
}

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
    /// Any other code (`InternalError`, `SlowDown`, …): worth retrying.
    Other,
}

impl DeleteFailureKind {
    /// The kind of a per-key error `code` as the server spelled it.
    pub fn from_code(code: &str) -> Self {
        match code {
            "AccessDenied" => DeleteFailureKind::AccessDenied,
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

/// The S3 call an error came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Operation {
    /// HeadBucket.
    HeadBucket,
    /// GetBucketVersioning.
    GetBucketVersioning,
    /// ListObjectVersions.
    ListObjectVersions,
    /// ListObjectsV2.
    ListObjects,
    /// DeleteObjects.
    DeleteObjects,
    /// DeleteObject.
    DeleteObject,
    /// PutObject.
    PutObject,
    /// GetObject.
    GetObject,
    /// ListMultipartUploads.
    ListMultipartUploads,
    /// AbortMultipartUpload.
    AbortMultipartUpload,
    /// CreateMultipartUpload.
    CreateMultipartUpload,
    /// CompleteMultipartUpload.
    CompleteMultipartUpload,
    /// ListParts.
    ListParts,
    /// UploadPart.
    UploadPart,
    /// PutBucketPolicy.
    PutBucketPolicy,
    /// GetBucketPolicy.
    GetBucketPolicy,
    /// DeleteBucketPolicy.
    DeleteBucketPolicy,
}

impl fmt::Display for S3Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            S3Operation::HeadBucket => "HeadBucket",
            S3Operation::GetBucketVersioning => "GetBucketVersioning",
            S3Operation::ListObjectVersions => "ListObjectVersions",
            S3Operation::ListObjects => "ListObjectsV2",
            S3Operation::DeleteObjects => "DeleteObjects",
            S3Operation::DeleteObject => "DeleteObject",
            S3Operation::PutObject => "PutObject",
            S3Operation::GetObject => "GetObject",
            S3Operation::ListMultipartUploads => "ListMultipartUploads",
            S3Operation::AbortMultipartUpload => "AbortMultipartUpload",
            S3Operation::CreateMultipartUpload => "CreateMultipartUpload",
            S3Operation::CompleteMultipartUpload => "CompleteMultipartUpload",
            S3Operation::ListParts => "ListParts",
            S3Operation::UploadPart => "UploadPart",
            S3Operation::PutBucketPolicy => "PutBucketPolicy",
            S3Operation::GetBucketPolicy => "GetBucketPolicy",
            S3Operation::DeleteBucketPolicy => "DeleteBucketPolicy",
        })
    }
}

/// Which pagination marker a truncated version listing failed to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingMarker {
    /// `NextKeyMarker` absent.
    KeyMarker,
    /// `NextVersionIdMarker` absent.
    VersionIdMarker,
    /// Both absent.
    Both,
}

impl fmt::Display for MissingMarker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MissingMarker::KeyMarker => "key marker",
            MissingMarker::VersionIdMarker => "version id marker",
            MissingMarker::Both => "key marker or version id marker",
        })
    }
}

/// Everything that can go wrong talking to S3, one variant per retry decision.
#[derive(Debug, thiserror::Error)]
pub enum ObjectStoreError {
    /// The configuration cannot work (empty endpoint, bucket, …). Permanent.
    #[error("invalid S3 configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The request could not even be built (an SDK-side validation failed). Permanent.
    #[error("S3 {operation} request could not be built: {detail}")]
    InvalidRequest {
        /// The call.
        operation: S3Operation,
        /// The SDK's explanation.
        detail: String,
    },
    /// A version reference without a version id was passed to a version-exact delete. Permanent.
    #[error("refusing to delete {key} without a version id: that would add a delete marker")]
    MissingVersionId {
        /// The key whose version id is empty.
        key: String,
    },
    /// Credentials lack the permission (HTTP 401/403). Permanent until an operator fixes IAM.
    #[error("S3 {operation} on bucket {bucket} was denied (HTTP {status}, code {code:?})")]
    AccessDenied {
        /// The call.
        operation: S3Operation,
        /// The bucket.
        bucket: String,
        /// HTTP status.
        status: u16,
        /// S3 error code, for the operator.
        code: Option<String>,
    },
    /// The bucket does not exist (HTTP 404 on a bucket-level call). Permanent.
    #[error("S3 bucket {bucket} does not exist ({operation} returned HTTP 404)")]
    NoSuchBucket {
        /// The call.
        operation: S3Operation,
        /// The bucket.
        bucket: String,
    },
    /// The addressed object version does not exist (GetObject). Permanent.
    #[error("S3 object {key} version {version_id} does not exist")]
    NoSuchVersion {
        /// The key.
        key: String,
        /// The version id.
        version_id: String,
    },
    /// The addressed multipart upload does not exist (aborted or completed). Permanent.
    #[error("S3 multipart upload {upload_id} of {key} does not exist")]
    NoSuchUpload {
        /// The key.
        key: String,
        /// The upload id.
        upload_id: String,
    },
    /// The bucket is not versioned, so version-exact deletion cannot prove anything. Permanent.
    #[error("S3 bucket {bucket} versioning is {status}, but it must be Enabled")]
    VersioningNotEnabled {
        /// The bucket.
        bucket: String,
        /// What GetBucketVersioning reported (`Suspended` or `never enabled`).
        status: String,
    },
    /// A write on a versioned bucket came back without a version id. Permanent.
    #[error("S3 {operation} on {key} returned no version id; is bucket {bucket} versioned?")]
    NoVersionIdReturned {
        /// The call.
        operation: S3Operation,
        /// The bucket.
        bucket: String,
        /// The key written.
        key: String,
    },
    /// More versions than one DeleteObjects call accepts. Permanent: the caller must chunk.
    #[error("DeleteObjects accepts at most {limit} versions per call, {requested} were passed")]
    TooManyVersions {
        /// Versions passed.
        requested: usize,
        /// The protocol limit.
        limit: usize,
    },
    /// Any other 4xx: the server refuses this request as formed. Permanent.
    #[error("S3 {operation} was rejected (HTTP {status}, code {code:?})")]
    Rejected {
        /// The call.
        operation: S3Operation,
        /// HTTP status.
        status: u16,
        /// S3 error code.
        code: Option<String>,
    },
    /// The server is busy, throttling, or reports a conflicting operation (408/409/429/503).
    /// Transient.
    #[error("S3 {operation} is throttled or busy (HTTP {status}, code {code:?})")]
    Busy {
        /// The call.
        operation: S3Operation,
        /// HTTP status.
        status: u16,
        /// S3 error code.
        code: Option<String>,
    },
    /// A 5xx other than 503. Transient.
    #[error("S3 {operation} failed on the server (HTTP {status}, code {code:?})")]
    ServerError {
        /// The call.
        operation: S3Operation,
        /// HTTP status.
        status: u16,
        /// S3 error code.
        code: Option<String>,
    },
    /// No usable response: connection refused or reset, timeout, unparseable reply. Transient.
    #[error("S3 {operation} at {endpoint} got no usable response: {detail}")]
    Unreachable {
        /// The call.
        operation: S3Operation,
        /// The endpoint.
        endpoint: String,
        /// The SDK's error chain.
        detail: String,
    },
    /// A truncated version listing did not say where to continue. Transient (server hiccup).
    #[error("truncated version listing of {prefix} has no {missing}")]
    MissingListingMarker {
        /// The listed prefix.
        prefix: String,
        /// Which marker is missing.
        missing: MissingMarker,
    },
    /// A truncated listing returned the markers it was given, so paging would never end. Transient.
    #[error("listing of {prefix} did not advance past key {key_marker:?}")]
    ListingStalled {
        /// The listed prefix.
        prefix: String,
        /// The repeated key marker.
        key_marker: String,
    },
    /// A response lacked a field the protocol promises (a listed key without version id, …).
    /// Transient.
    #[error("S3 {operation} response lacks {field}")]
    IncompleteResponse {
        /// The call.
        operation: S3Operation,
        /// The missing field.
        field: &'static str,
    },
}

impl Classified for ObjectStoreError {
    fn severity(&self) -> Severity {
        match self {
            ObjectStoreError::InvalidConfig { .. }
            | ObjectStoreError::InvalidRequest { .. }
            | ObjectStoreError::MissingVersionId { .. }
            | ObjectStoreError::AccessDenied { .. }
            | ObjectStoreError::NoSuchBucket { .. }
            | ObjectStoreError::NoSuchVersion { .. }
            | ObjectStoreError::NoSuchUpload { .. }
            | ObjectStoreError::VersioningNotEnabled { .. }
            | ObjectStoreError::NoVersionIdReturned { .. }
            | ObjectStoreError::TooManyVersions { .. }
            | ObjectStoreError::Rejected { .. } => Severity::Permanent,
            ObjectStoreError::Busy { .. }
            | ObjectStoreError::ServerError { .. }
            | ObjectStoreError::Unreachable { .. }
            | ObjectStoreError::MissingListingMarker { .. }
            | ObjectStoreError::ListingStalled { .. }
            | ObjectStoreError::IncompleteResponse { .. } => Severity::Transient,
        }
    }
}

impl ObjectStore {
    /// Builds a client for `cfg.bucket`. Makes no network call; see [`ObjectStore::check_bucket`].
    ///
    /// The HTTPS client is built with rustls on ring explicitly: the workspace compiles only that
    /// crypto provider, so the SDK has no default client to fall back on.
    pub async fn connect(cfg: &S3Config) -> Result<Self, ObjectStoreError> {
        for (name, value) in [
            ("endpoint", &cfg.endpoint),
            ("bucket", &cfg.bucket),
            ("region", &cfg.region),
            ("access key", &cfg.access_key),
            ("secret key", &cfg.secret_key),
        ] {
            if value.trim().is_empty() {
                return Err(ObjectStoreError::InvalidConfig {
                    reason: format!("S3 {name} is empty"),
                });
            }
        }
        if !(cfg.endpoint.starts_with("http://") || cfg.endpoint.starts_with("https://")) {
            return Err(ObjectStoreError::InvalidConfig {
                reason: format!(
                    "S3 endpoint {:?} must start with http:// or https://",
                    cfg.endpoint
                ),
            });
        }
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(Duration::from_secs(120))
            .build();
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http)
            .region(Region::new(cfg.region.clone()))
            .credentials_provider(Credentials::new(
                cfg.access_key.clone(),
                cfg.secret_key.clone(),
                None,
                None,
                CREDENTIALS_SOURCE,
            ))
            .endpoint_url(cfg.endpoint.clone())
            .force_path_style(true)
            .timeout_config(timeouts)
            // S3-compatible servers differ in which flexible checksums they accept; send and
            // validate them only where the protocol requires one.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        Ok(Self {
            client: aws_sdk_s3::Client::from_conf(config),
            bucket: Arc::from(cfg.bucket.as_str()),
            endpoint: Arc::from(cfg.endpoint.as_str()),
        })
    }

    /// The bucket this store is bound to.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Checks the bucket exists, is reachable with these credentials, and has versioning Enabled.
    pub async fn check_bucket(&self) -> Result<(), ObjectStoreError> {
        self.client
            .head_bucket()
            .bucket(self.bucket.as_ref())
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::HeadBucket, error))?;
        let versioning = self
            .client
            .get_bucket_versioning()
            .bucket(self.bucket.as_ref())
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::GetBucketVersioning, error))?;
        match versioning.status() {
            Some(BucketVersioningStatus::Enabled) => Ok(()),
            other => Err(ObjectStoreError::VersioningNotEnabled {
                bucket: self.bucket.to_string(),
                status: other.map_or_else(
                    || "never enabled".to_owned(),
                    |status| status.as_str().to_owned(),
                ),
            }),
        }
    }

    /// One page of every version and delete marker under `prefix`, starting after `marker`.
    ///
    /// A truncated page must name both continuation markers; otherwise paging could silently
    /// stop early, so that is a transient error naming the missing marker.
    pub async fn list_versions_page(
        &self,
        prefix: &str,
        marker: Option<(String, String)>,
        max_keys: i32,
    ) -> Result<VersionPage, ObjectStoreError> {
        let (key_marker, version_id_marker) = marker.unzip();
        let output = self
            .client
            .list_object_versions()
            .bucket(self.bucket.as_ref())
            .prefix(prefix)
            .max_keys(max_keys)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_id_marker.clone())
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::ListObjectVersions, error))?;

        let mut entries =
            Vec::with_capacity(output.versions().len() + output.delete_markers().len());
        for version in output.versions() {
            entries.push(ObjectVersion {
                key: required(
                    S3Operation::ListObjectVersions,
                    version.key(),
                    "Version.Key",
                )?,
                version_id: required(
                    S3Operation::ListObjectVersions,
                    version.version_id(),
                    "Version.VersionId",
                )?,
                kind: VersionKind::Object,
                size: version
                    .size()
                    .and_then(|size| u64::try_from(size).ok())
                    .unwrap_or(0),
                is_latest: version.is_latest().unwrap_or(false),
            });
        }
        for marker in output.delete_markers() {
            entries.push(ObjectVersion {
                key: required(
                    S3Operation::ListObjectVersions,
                    marker.key(),
                    "DeleteMarker.Key",
                )?,
                version_id: required(
                    S3Operation::ListObjectVersions,
                    marker.version_id(),
                    "DeleteMarker.VersionId",
                )?,
                kind: VersionKind::DeleteMarker,
                size: 0,
                is_latest: marker.is_latest().unwrap_or(false),
            });
        }
        // The SDK splits versions and markers into two lists; restore one key order.
        entries.sort_by(|a, b| a.key.cmp(&b.key));

        let next = if output.is_truncated().unwrap_or(false) {
            let next = require_continuation_markers(
                prefix,
                output.next_key_marker(),
                output.next_version_id_marker(),
            )?;
            if key_marker.as_deref() == Some(next.0.as_str())
                && version_id_marker.as_deref() == Some(next.1.as_str())
            {
                return Err(ObjectStoreError::ListingStalled {
                    prefix: prefix.to_owned(),
                    key_marker: next.0,
                });
            }
            Some(next)
        } else {
            None
        };
        Ok(VersionPage { entries, next })
    }

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

    /// Proves these credentials may list versions under `prefix` (one `max-keys=1` listing).
    pub async fn preflight_list_versions(&self, prefix: &str) -> Result<(), ObjectStoreError> {
        self.list_versions_page(prefix, None, 1).await.map(|_| ())
    }

    /// The first version (object or delete marker) still retained under `prefix`, or `None`
    /// when the prefix lists nothing at all: the storage half of the absence proof.
    pub async fn prefix_is_empty(
        &self,
        prefix: &str,
    ) -> Result<Option<ObjectVersion>, ObjectStoreError> {
        let mut marker = None;
        loop {
            let page = self.list_versions_page(prefix, marker, 1).await?;
            if let Some(first) = page.entries.into_iter().next() {
                return Ok(Some(first));
            }
            // An empty but truncated page is legal S3; only the last page proves emptiness.
            match page.next {
                Some(next) => marker = Some(next),
                None => return Ok(None),
            }
        }
    }

    /// One page of the multipart uploads in progress under `prefix`, starting after `marker`.
    ///
    /// A truncated page must name both continuation markers, and they must move on; otherwise
    /// paging could stop early or never end, so either is a transient error.
    pub async fn list_uploads_page(
        &self,
        prefix: &str,
        marker: Option<(String, String)>,
        max_uploads: i32,
    ) -> Result<UploadPage, ObjectStoreError> {
        let operation = S3Operation::ListMultipartUploads;
        let (key_marker, upload_id_marker) = marker.unzip();
        let output = self
            .client
            .list_multipart_uploads()
            .bucket(self.bucket.as_ref())
            .prefix(prefix)
            .max_uploads(max_uploads)
            .set_key_marker(key_marker.clone())
            .set_upload_id_marker(upload_id_marker.clone())
            .send()
            .await
            .map_err(|error| self.sdk_error(operation, error))?;
        let uploads = output
            .uploads()
            .iter()
            .map(|upload| {
                Ok(MultipartUpload {
                    key: required(operation, upload.key(), "Upload.Key")?,
                    upload_id: required(operation, upload.upload_id(), "Upload.UploadId")?,
                })
            })
            .collect::<Result<Vec<_>, ObjectStoreError>>()?;
        let next = if output.is_truncated().unwrap_or(false) {
            let next = (
                required(operation, output.next_key_marker(), "NextKeyMarker")?,
                required(
                    operation,
                    output.next_upload_id_marker(),
                    "NextUploadIdMarker",
                )?,
            );
            if key_marker.as_deref() == Some(next.0.as_str())
                && upload_id_marker.as_deref() == Some(next.1.as_str())
            {
                return Err(ObjectStoreError::ListingStalled {
                    prefix: prefix.to_owned(),
                    key_marker: next.0,
                });
            }
            Some(next)
        } else {
            None
        };
        Ok(UploadPage { uploads, next })
    }

    /// Every multipart upload in progress under `prefix`, sorted. Holds the whole listing in
    /// memory: meant for tests and diagnostics, never for a deletion stage.
    pub async fn snapshot_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUpload>, ObjectStoreError> {
        let mut all = Vec::new();
        let mut marker = None;
        loop {
            let page = self
                .list_uploads_page(prefix, marker, SNAPSHOT_PAGE_SIZE)
                .await?;
            all.extend(page.uploads);
            match page.next {
                Some(next) => marker = Some(next),
                None => break,
            }
        }
        all.sort();
        Ok(all)
    }

    /// The first multipart upload still in progress under `prefix`, or `None` when there is
    /// none: the upload half of the storage absence proof.
    pub async fn first_upload(
        &self,
        prefix: &str,
    ) -> Result<Option<MultipartUpload>, ObjectStoreError> {
        let mut marker = None;
        loop {
            let page = self.list_uploads_page(prefix, marker, 1).await?;
            if let Some(first) = page.uploads.into_iter().next() {
                return Ok(Some(first));
            }
            match page.next {
                Some(next) => marker = Some(next),
                None => return Ok(None),
            }
        }
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

    /// Starts a multipart upload on `key` and returns it (for tests and the demo: the serving
    /// path's large uploads).
    pub async fn start_upload(&self, key: &str) -> Result<MultipartUpload, ObjectStoreError> {
        let operation = S3Operation::CreateMultipartUpload;
        let output = self
            .client
            .create_multipart_upload()
            .bucket(self.bucket.as_ref())
            .key(key)
            .send()
            .await
            .map_err(|error| self.sdk_error(operation, error))?;
        Ok(MultipartUpload {
            key: key.to_owned(),
            upload_id: required(operation, output.upload_id(), "UploadId")?,
        })
    }

    /// Uploads part `part_number` of `upload` and returns its ETag.
    pub async fn upload_part(
        &self,
        upload: &MultipartUpload,
        part_number: i32,
        body: Vec<u8>,
    ) -> Result<String, ObjectStoreError> {
        let operation = S3Operation::UploadPart;
        let output = self
            .client
            .upload_part()
            .bucket(self.bucket.as_ref())
            .key(&upload.key)
            .upload_id(&upload.upload_id)
            .part_number(part_number)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|error| self.sdk_error(operation, error))?;
        required(operation, output.e_tag(), "ETag")
    }

    /// Completes `upload` from `parts` (`(part number, ETag)`) and returns the new version id:
    /// what a serving process finishing a large upload does. Fails once the upload was aborted:
    /// S3 answers `NoSuchUpload` ([`ObjectStoreError::NoSuchUpload`]); Ceph RGW answers HTTP 500
    /// `InternalError` ("multipart completion is already in progress", observed locally), which
    /// maps to a transient [`ObjectStoreError::ServerError`] and never creates a version.
    pub async fn complete_upload(
        &self,
        upload: &MultipartUpload,
        parts: &[(i32, String)],
    ) -> Result<String, ObjectStoreError> {
        let operation = S3Operation::CompleteMultipartUpload;
        let completed = aws_sdk_s3::types::CompletedMultipartUpload::builder()
            .set_parts(Some(
                parts
                    .iter()
                    .map(|(number, e_tag)| {
                        aws_sdk_s3::types::CompletedPart::builder()
                            .part_number(*number)
                            .e_tag(e_tag)
                            .build()
                    })
                    .collect(),
            ))
            .build();
        let output = self
            .client
            .complete_multipart_upload()
            .bucket(self.bucket.as_ref())
            .key(&upload.key)
            .upload_id(&upload.upload_id)
            .multipart_upload(completed)
            .send()
            .await
            .map_err(|error| match error {
                SdkError::ServiceError(ref service) if is_no_such_upload(service.err()) => {
                    ObjectStoreError::NoSuchUpload {
                        key: upload.key.clone(),
                        upload_id: upload.upload_id.clone(),
                    }
                }
                other => self.sdk_error(operation, other),
            })?;
        output.version_id().map(str::to_owned).ok_or_else(|| {
            ObjectStoreError::NoVersionIdReturned {
                operation,
                bucket: self.bucket.to_string(),
                key: upload.key.clone(),
            }
        })
    }

    /// The parts uploaded so far to `upload` (first 1,000; for tests comparing uploads byte for
    /// byte through their ETags). [`ObjectStoreError::NoSuchUpload`] once it was aborted: S3
    /// answers `NoSuchUpload`, Ceph RGW `NoSuchKey` (HTTP 404; observed locally).
    pub async fn list_parts(
        &self,
        upload: &MultipartUpload,
    ) -> Result<Vec<UploadedPart>, ObjectStoreError> {
        let operation = S3Operation::ListParts;
        let output = self
            .client
            .list_parts()
            .bucket(self.bucket.as_ref())
            .key(&upload.key)
            .upload_id(&upload.upload_id)
            .send()
            .await
            .map_err(|error| match error {
                SdkError::ServiceError(ref service)
                    if is_no_such_upload(service.err())
                        || service.err().code() == Some("NoSuchKey") =>
                {
                    ObjectStoreError::NoSuchUpload {
                        key: upload.key.clone(),
                        upload_id: upload.upload_id.clone(),
                    }
                }
                other => self.sdk_error(operation, other),
            })?;
        let mut parts = output
            .parts()
            .iter()
            .map(|part| {
                Ok(UploadedPart {
                    part_number: part.part_number().ok_or(
                        ObjectStoreError::IncompleteResponse {
                            operation,
                            field: "Part.PartNumber",
                        },
                    )?,
                    e_tag: required(operation, part.e_tag(), "Part.ETag")?,
                    size: part
                        .size()
                        .and_then(|size| u64::try_from(size).ok())
                        .unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>, ObjectStoreError>>()?;
        parts.sort();
        Ok(parts)
    }

    /// The bucket policy document, or `None` when the bucket has none (for tests that must not
    /// overwrite someone else's policy).
    pub async fn bucket_policy(&self) -> Result<Option<String>, ObjectStoreError> {
        let result = self
            .client
            .get_bucket_policy()
            .bucket(self.bucket.as_ref())
            .send()
            .await;
        match result {
            Ok(output) => Ok(output.policy().map(str::to_owned)),
            Err(SdkError::ServiceError(service))
                if service.err().code() == Some("NoSuchBucketPolicy") =>
            {
                Ok(None)
            }
            Err(error) => Err(self.sdk_error(S3Operation::GetBucketPolicy, error)),
        }
    }

    /// Replaces the bucket policy with `policy` (a JSON document).
    pub async fn put_bucket_policy(&self, policy: &str) -> Result<(), ObjectStoreError> {
        self.client
            .put_bucket_policy()
            .bucket(self.bucket.as_ref())
            .policy(policy)
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::PutBucketPolicy, error))?;
        Ok(())
    }

    /// Removes the bucket policy.
    pub async fn delete_bucket_policy(&self) -> Result<(), ObjectStoreError> {
        self.client
            .delete_bucket_policy()
            .bucket(self.bucket.as_ref())
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::DeleteBucketPolicy, error))?;
        Ok(())
    }

    /// Writes `body` to `key` and returns the new version id.
    pub async fn put_object(&self, key: &str, body: Vec<u8>) -> Result<String, ObjectStoreError> {
        let output = self
            .client
            .put_object()
            .bucket(self.bucket.as_ref())
            .key(key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::PutObject, error))?;
        output.version_id().map(str::to_owned).ok_or_else(|| {
            ObjectStoreError::NoVersionIdReturned {
                operation: S3Operation::PutObject,
                bucket: self.bucket.to_string(),
                key: key.to_owned(),
            }
        })
    }

    /// Adds a delete marker on `key` (DeleteObject without a version id); returns its version id.
    pub async fn put_delete_marker(&self, key: &str) -> Result<String, ObjectStoreError> {
        let output = self
            .client
            .delete_object()
            .bucket(self.bucket.as_ref())
            .key(key)
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::DeleteObject, error))?;
        match (output.delete_marker(), output.version_id()) {
            (Some(true), Some(version_id)) => Ok(version_id.to_owned()),
            _ => Err(ObjectStoreError::NoVersionIdReturned {
                operation: S3Operation::DeleteObject,
                bucket: self.bucket.to_string(),
                key: key.to_owned(),
            }),
        }
    }

    /// The body of one exact version (for byte-for-byte comparisons in tests and diagnostics).
    pub async fn get_object_version(
        &self,
        key: &str,
        version_id: &str,
    ) -> Result<Vec<u8>, ObjectStoreError> {
        let output = self
            .client
            .get_object()
            .bucket(self.bucket.as_ref())
            .key(key)
            .version_id(version_id)
            .send()
            .await
            .map_err(|error| match error {
                SdkError::ServiceError(ref service) if service.err().is_no_such_key() => {
                    ObjectStoreError::NoSuchVersion {
                        key: key.to_owned(),
                        version_id: version_id.to_owned(),
                    }
                }
                other => self.sdk_error(S3Operation::GetObject, other),
            })?;
        let body = output
            .body
            .collect()
            .await
            .map_err(|error| ObjectStoreError::Unreachable {
                operation: S3Operation::GetObject,
                endpoint: self.endpoint.to_string(),
                detail: error.to_string(),
            })?;
        Ok(body.into_bytes().to_vec())
    }

    /// One page of current keys across the whole bucket (ListObjectsV2), for the taxonomy sweep.
    /// Returns the keys and the continuation token for the next page, `None` on the last page.
    pub async fn list_objects_page(
        &self,
        continuation: Option<String>,
        max_keys: i32,
    ) -> Result<(Vec<String>, Option<String>), ObjectStoreError> {
        let output = self
            .client
            .list_objects_v2()
            .bucket(self.bucket.as_ref())
            .max_keys(max_keys)
            .set_continuation_token(continuation)
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::ListObjects, error))?;
        let keys = output
            .contents()
            .iter()
            .map(|object| required(S3Operation::ListObjects, object.key(), "Contents.Key"))
            .collect::<Result<Vec<_>, _>>()?;
        let next = if output.is_truncated().unwrap_or(false) {
            Some(required(
                S3Operation::ListObjects,
                output.next_continuation_token(),
                "NextContinuationToken",
            )?)
        } else {
            None
        };
        Ok((keys, next))
    }

    /// Every version under `prefix`, sorted, for before/after comparisons. Holds the whole
    /// listing in memory: meant for tests and small prefixes, never for a deletion stage.
    pub async fn snapshot_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<ObjectVersion>, ObjectStoreError> {
        let mut all = Vec::new();
        let mut marker = None;
        loop {
            let page = self
                .list_versions_page(prefix, marker, SNAPSHOT_PAGE_SIZE)
                .await?;
            all.extend(page.entries);
            match page.next {
                Some(next) => marker = Some(next),
                None => break,
            }
        }
        all.sort();
        Ok(all)
    }

    /// Maps an SDK failure to its typed variant by the SDK error variant and HTTP status alone.
    fn sdk_error<E>(&self, operation: S3Operation, error: SdkError<E>) -> ObjectStoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        match error {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                let code = service.err().code().map(str::to_owned);
                match status_class(status) {
                    StatusClass::Denied => ObjectStoreError::AccessDenied {
                        operation,
                        bucket: self.bucket.to_string(),
                        status,
                        code,
                    },
                    StatusClass::NotFound => ObjectStoreError::NoSuchBucket {
                        operation,
                        bucket: self.bucket.to_string(),
                    },
                    StatusClass::Busy => ObjectStoreError::Busy {
                        operation,
                        status,
                        code,
                    },
                    StatusClass::Server => ObjectStoreError::ServerError {
                        operation,
                        status,
                        code,
                    },
                    StatusClass::Rejected => ObjectStoreError::Rejected {
                        operation,
                        status,
                        code,
                    },
                }
            }
            SdkError::ConstructionFailure(_) => ObjectStoreError::InvalidRequest {
                operation,
                detail: DisplayErrorContext(&error).to_string(),
            },
            // Timeouts, dispatch (connect/IO) failures, unparseable responses, and anything a
            // future SDK adds: no verdict from the server, so retrying may succeed.
            other => ObjectStoreError::Unreachable {
                operation,
                endpoint: self.endpoint.to_string(),
                detail: DisplayErrorContext(&other).to_string(),
            },
        }
    }
}

/// How an HTTP error status is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusClass {
    Denied,
    NotFound,
    Busy,
    Server,
    Rejected,
}

/// 401/403 denied; 404 missing bucket (every call that reaches here addresses the bucket, object
/// lookups handle their own 404); 408/409/429/503 busy; other 5xx server; other 4xx rejected.
fn status_class(status: u16) -> StatusClass {
    match status {
        401 | 403 => StatusClass::Denied,
        404 => StatusClass::NotFound,
        408 | 409 | 429 | 503 => StatusClass::Busy,
        500..=599 => StatusClass::Server,
        _ => StatusClass::Rejected,
    }
}

/// Whether a service error carries the S3 code `NoSuchUpload` (ListParts and
/// CompleteMultipartUpload do not model it as a variant; the code is the protocol's verdict).
fn is_no_such_upload(error: &impl ProvideErrorMetadata) -> bool {
    error.code() == Some("NoSuchUpload")
}

fn invalid_request(
    operation: S3Operation,
    error: &aws_sdk_s3::error::BuildError,
) -> ObjectStoreError {
    ObjectStoreError::InvalidRequest {
        operation,
        detail: error.to_string(),
    }
}

fn required(
    operation: S3Operation,
    value: Option<&str>,
    field: &'static str,
) -> Result<String, ObjectStoreError> {
    value
        .map(str::to_owned)
        .ok_or(ObjectStoreError::IncompleteResponse { operation, field })
}

/// Both continuation markers of a truncated version listing, or which one is missing.
fn require_continuation_markers(
    prefix: &str,
    key_marker: Option<&str>,
    version_id_marker: Option<&str>,
) -> Result<(String, String), ObjectStoreError> {
    let missing = match (key_marker, version_id_marker) {
        (Some(key), Some(version)) => return Ok((key.to_owned(), version.to_owned())),
        (None, Some(_)) => MissingMarker::KeyMarker,
        (Some(_), None) => MissingMarker::VersionIdMarker,
        (None, None) => MissingMarker::Both,
    };
    Err(ObjectStoreError::MissingListingMarker {
        prefix: prefix.to_owned(),
        missing,
    })
}

/// Matches server acknowledgements to the request: only an acknowledgement naming a requested
/// key AND version id counts, so a response about some other version can never stamp a chunk.
fn match_delete_acknowledgements<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vref(key: &str, version_id: &str) -> ObjectVersionRef {
        ObjectVersionRef {
            key: key.to_owned(),
            version_id: version_id.to_owned(),
        }
    }

    /// The listing error for the given markers must be transient and name `missing` as `text`.
    fn assert_missing_marker(
        key_marker: Option<&str>,
        version_id_marker: Option<&str>,
        missing: MissingMarker,
        text: &str,
    ) {
        let error =
            require_continuation_markers("media/c/", key_marker, version_id_marker).unwrap_err();
        assert!(
            matches!(&error, ObjectStoreError::MissingListingMarker { missing: m, .. } if *m == missing),
            "{error:?}"
        );
        assert_eq!(error.severity(), Severity::Transient);
        assert!(error.to_string().contains(text), "{error}");
    }

    #[test]
    fn truncated_listing_without_key_marker_is_transient_and_names_it() {
        assert_missing_marker(None, Some("v1"), MissingMarker::KeyMarker, "no key marker");
    }

    #[test]
    fn truncated_listing_without_version_id_marker_is_transient_and_names_it() {
        assert_missing_marker(
            Some("k"),
            None,
            MissingMarker::VersionIdMarker,
            "no version id marker",
        );
    }

    #[test]
    fn truncated_listing_without_either_marker_is_transient_and_names_both() {
        assert_missing_marker(
            None,
            None,
            MissingMarker::Both,
            "no key marker or version id marker",
        );
    }

    #[test]
    fn truncated_listing_with_both_markers_continues_from_them() {
        assert_eq!(
            require_continuation_markers("p/", Some("k"), Some("v")).unwrap(),
            ("k".to_owned(), "v".to_owned())
        );
    }

    #[test]
    fn full_acknowledgement_is_complete() {
        let requested = [vref("a", "1"), vref("b", "2")];
        let outcome =
            match_delete_acknowledgements(&requested, [("a", "1"), ("b", "2")].into_iter(), vec![]);
        assert_eq!(outcome.deleted, 2);
        assert!(outcome.is_complete());
    }

    #[test]
    fn partial_acknowledgement_reports_the_missing_version() {
        let requested = [vref("a", "1"), vref("b", "2")];
        let outcome = match_delete_acknowledgements(&requested, [("a", "1")].into_iter(), vec![]);
        assert_eq!(outcome.deleted, 1);
        assert_eq!(outcome.unacknowledged, vec![vref("b", "2")]);
        assert!(!outcome.is_complete());
    }

    #[test]
    fn acknowledgement_of_another_version_of_the_same_key_does_not_count() {
        let requested = [vref("a", "1")];
        let outcome =
            match_delete_acknowledgements(&requested, [("a", "new-marker")].into_iter(), vec![]);
        assert_eq!(outcome.deleted, 0);
        assert_eq!(outcome.unacknowledged, vec![vref("a", "1")]);
    }

    #[test]
    fn refused_version_is_reported_as_failed_not_unacknowledged() {
        let requested = [vref("a", "1"), vref("b", "2")];
        let failure = DeleteFailure {
            key: "b".into(),
            version_id: "2".into(),
            code: "AccessDenied".into(),
            message: "no".into(),
        };
        let outcome = match_delete_acknowledgements(
            &requested,
            [("a", "1")].into_iter(),
            vec![failure.clone()],
        );
        assert_eq!(outcome.deleted, 1);
        assert_eq!(outcome.failed, vec![failure]);
        assert!(outcome.unacknowledged.is_empty());
        assert!(!outcome.is_complete());
    }

    #[test]
    fn per_key_delete_errors_are_classified_by_code_only() {
        let failure = |code: &str, message: &str| DeleteFailure {
            key: "k".into(),
            version_id: "v".into(),
            code: code.into(),
            message: message.into(),
        };
        assert_eq!(
            failure("AccessDenied", "").kind(),
            DeleteFailureKind::AccessDenied
        );
        // The message never decides: a transient code saying "access denied" stays transient.
        assert_eq!(
            failure("InternalError", "AccessDenied").kind(),
            DeleteFailureKind::Other
        );
        assert_eq!(failure("SlowDown", "").kind(), DeleteFailureKind::Other);
        assert_eq!(failure("", "").kind(), DeleteFailureKind::Other);
        // S3 codes are case-sensitive.
        assert_eq!(failure("accessdenied", "").kind(), DeleteFailureKind::Other);
    }

    #[test]
    fn http_statuses_map_to_retry_decisions() {
        assert_eq!(status_class(403), StatusClass::Denied);
        assert_eq!(status_class(401), StatusClass::Denied);
        assert_eq!(status_class(404), StatusClass::NotFound);
        assert_eq!(status_class(503), StatusClass::Busy);
        assert_eq!(status_class(429), StatusClass::Busy);
        assert_eq!(status_class(409), StatusClass::Busy);
        assert_eq!(status_class(500), StatusClass::Server);
        assert_eq!(status_class(400), StatusClass::Rejected);
    }

    /// A configuration whose endpoint refuses connections: reaching the network is a different
    /// error from the ones these tests expect, so a test passing proves no call was made.
    fn unroutable_config() -> S3Config {
        S3Config {
            endpoint: "http://127.0.0.1:1".into(),
            bucket: "b".into(),
            region: "us-east-1".into(),
            access_key: "k".into(),
            secret_key: "s".into(),
        }
    }

    #[tokio::test]
    async fn more_than_a_thousand_versions_are_refused_before_any_call() {
        let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
        let versions: Vec<_> = (0..1001).map(|i| vref(&format!("k{i}"), "v")).collect();
        let error = store.delete_versions(&versions).await.unwrap_err();
        assert!(matches!(
            error,
            ObjectStoreError::TooManyVersions {
                requested: 1001,
                limit: 1000
            }
        ));
        assert_eq!(error.severity(), Severity::Permanent);
    }

    #[tokio::test]
    async fn a_version_ref_without_version_id_is_refused_before_any_call() {
        let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
        let error = store
            .delete_versions(&[vref("a", "1"), vref("k", "")])
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ObjectStoreError::MissingVersionId { key } if key == "k"),
            "{error:?}"
        );
        assert_eq!(error.severity(), Severity::Permanent);
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_transient() {
        let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
        let error = store.preflight_list_versions("media/").await.unwrap_err();
        assert!(
            matches!(error, ObjectStoreError::Unreachable { .. }),
            "{error:?}"
        );
        assert_eq!(error.severity(), Severity::Transient);
    }

    #[tokio::test]
    async fn empty_configuration_fields_are_rejected() {
        let blank_bucket = S3Config {
            bucket: " ".into(),
            ..unroutable_config()
        };
        let error = ObjectStore::connect(&blank_bucket).await.unwrap_err();
        assert!(matches!(error, ObjectStoreError::InvalidConfig { .. }));
        assert_eq!(error.severity(), Severity::Permanent);
    }
}
