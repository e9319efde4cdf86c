//! Errors: every S3 failure mapped once, from the SDK's error variant and the HTTP status, to an
//! [`ObjectStoreError`] variant whose severity decides permanent versus transient.

use std::fmt;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::ObjectStore;
use super::probe::MissingPermission;
use crate::failure::{Classified, Severity, variants};

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
    /// GetObjectLockConfiguration.
    GetObjectLockConfiguration,
    /// HeadObject.
    HeadObject,
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
            S3Operation::GetObjectLockConfiguration => "GetObjectLockConfiguration",
            S3Operation::HeadObject => "HeadObject",
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
    /// The receipt archive bucket does not keep objects under compliance-mode object lock.
    #[error(
        "S3 bucket {bucket} cannot archive receipts: {reason}; create it with object lock \
         enabled and a COMPLIANCE default retention (docs/certificates.md), or unset \
         BUZZ_RECEIPT_ARCHIVE_BUCKET"
    )]
    ArchiveNotLocked {
        /// The bucket.
        bucket: String,
        /// What its configuration lacks.
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
        /// What TLS said of the server's certificate, when that is why (found by type).
        certificate: Option<stack_config::tls::ServerCertificateProblem>,
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
    /// A permission probe was denied: these credentials lack a permission the deletion needs
    /// (see [`ObjectStore::prove_permission`]). Permanent until an operator grants it.
    #[error("{0}")]
    PermissionMissing(Box<MissingPermission>),
    /// A permission probe got an answer that neither proves nor refutes the permission (a
    /// per-key `InternalError`, …). Transient.
    #[error("S3 permission probe {call} was inconclusive: {answer}")]
    ProbeInconclusive {
        /// The probe call.
        call: String,
        /// What came back.
        answer: String,
    },
}

impl ObjectStoreError {
    /// Whether this failure proves the call changed nothing in the bucket: it was refused before
    /// it was sent, or the server refused the request as a whole with a 4xx verdict (denied,
    /// no such bucket, malformed). A timeout, a dropped connection, a 5xx or a throttle proves
    /// nothing: the server may have acted before it failed. Decided by variant, never by text.
    pub fn changed_nothing(&self) -> bool {
        match self {
            variants!(
                ObjectStoreError: InvalidConfig, InvalidRequest, MissingVersionId, TooManyVersions,
                AccessDenied, NoSuchBucket, Rejected
            ) => true,
            variants!(
                ObjectStoreError: ArchiveNotLocked, NoSuchVersion, NoSuchUpload,
                VersioningNotEnabled, NoVersionIdReturned, Busy, ServerError, Unreachable,
                MissingListingMarker, ListingStalled, IncompleteResponse, PermissionMissing,
                ProbeInconclusive
            ) => false,
        }
    }
}

impl ObjectStoreError {
    /// Whether the server asked for a lower request rate as a whole (HTTP 503 `SlowDown` or 429):
    /// the call changed nothing and is retried once the prefix's rate was lowered. Decided by
    /// variant and status, never by text.
    pub fn is_throttle(&self) -> bool {
        matches!(
            self,
            ObjectStoreError::Busy {
                status: 429 | 503,
                ..
            }
        )
    }
}

impl Classified for ObjectStoreError {
    fn severity(&self) -> Severity {
        match self {
            variants!(
                ObjectStoreError: InvalidConfig, ArchiveNotLocked, InvalidRequest, MissingVersionId,
                AccessDenied, NoSuchBucket, NoSuchVersion, NoSuchUpload, VersioningNotEnabled,
                NoVersionIdReturned, TooManyVersions, Rejected, PermissionMissing
            ) => Severity::Permanent,
            variants!(
                ObjectStoreError: ProbeInconclusive, Busy, ServerError, Unreachable,
                MissingListingMarker, ListingStalled, IncompleteResponse
            ) => Severity::Transient,
        }
    }
}

impl ObjectStore {
    /// Maps an SDK failure to its typed variant by the SDK error variant and HTTP status alone.
    pub(super) fn sdk_error<E>(
        &self,
        operation: S3Operation,
        error: SdkError<E>,
    ) -> ObjectStoreError
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
                certificate: stack_config::tls::find_tls_error(&other)
                    .and_then(stack_config::tls::server_certificate_problem),
                detail: DisplayErrorContext(&other).to_string(),
            },
        }
    }
}

/// How an HTTP error status is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StatusClass {
    Denied,
    NotFound,
    Busy,
    Server,
    Rejected,
}

/// 401/403 denied; 404 missing bucket (every call that reaches here addresses the bucket, object
/// lookups handle their own 404); 408/409/429/503 busy; other 5xx server; other 4xx rejected.
pub(super) fn status_class(status: u16) -> StatusClass {
    match status {
        401 | 403 => StatusClass::Denied,
        404 => StatusClass::NotFound,
        408 | 409 | 429 | 503 => StatusClass::Busy,
        500..=599 => StatusClass::Server,
        _ => StatusClass::Rejected,
    }
}

/// Whether a GetObject of an explicit version found no such version: Ceph RGW answers
/// `NoSuchKey` (the SDK's modelled variant), AWS S3 answers `NoSuchVersion` (a code the SDK does
/// not model). Both are the protocol's verdict, read from the error code, never the message.
pub(super) fn is_missing_version(
    error: &aws_sdk_s3::operation::get_object::GetObjectError,
) -> bool {
    error.is_no_such_key() || error.code() == Some("NoSuchVersion")
}

/// Whether a service error carries the S3 code `NoSuchUpload` (ListParts and
/// CompleteMultipartUpload do not model it as a variant; the code is the protocol's verdict).
pub(super) fn is_no_such_upload(error: &impl ProvideErrorMetadata) -> bool {
    error.code() == Some("NoSuchUpload")
}

pub(super) fn invalid_request(
    operation: S3Operation,
    error: &aws_sdk_s3::error::BuildError,
) -> ObjectStoreError {
    ObjectStoreError::InvalidRequest {
        operation,
        detail: error.to_string(),
    }
}

pub(super) fn required(
    operation: S3Operation,
    value: Option<&str>,
    field: &'static str,
) -> Result<String, ObjectStoreError> {
    value
        .map(str::to_owned)
        .ok_or(ObjectStoreError::IncompleteResponse { operation, field })
}
