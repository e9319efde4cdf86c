//! S3 adapter: versioned listings and version-exact bulk deletes.
//!
//! Talks to any S3-compatible server (Ceph RGW locally) with path-style addressing and a custom
//! endpoint. Every failure is mapped once, from the SDK's error variant and HTTP status, to an
//! [`ObjectStoreError`] variant whose
//! [`Classified::severity`](crate::failure::Classified::severity) decides permanent versus
//! transient; no error message text is ever inspected.
//!
//! This file holds the configuration and the client; one concern a file besides: `listing.rs`
//! (versions, objects and multipart uploads under a prefix), `deletion.rs` (version-exact bulk
//! deletes and upload aborts), `writes.rs` (the writes and reads a deletion never makes: serving
//! path, demo, stack check, tests) and `error.rs` (the typed failures and their mapping from the
//! SDK).

mod addresses;
mod archive;
mod deletion;
mod error;
mod listing;
mod writes;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::types::BucketVersioningStatus;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

pub use addresses::{MultipartUpload, ObjectVersion, ObjectVersionRef};
pub use archive::ArchivedCopy;
pub use deletion::{
    AbortOutcome, BulkDeleteOutcome, DeleteFailure, DeleteFailureKind, MAX_VERSIONS_PER_DELETE,
};
pub use error::{MissingMarker, ObjectStoreError, S3Operation};
pub use listing::{UploadPage, VersionPage};
pub use writes::UploadedPart;

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
}
