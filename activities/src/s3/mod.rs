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
//! deletes and upload aborts), `probe.rs` (proving the permissions a deletion needs without
//! deleting anything), `writes.rs` (the writes and reads a deletion never makes: serving
//! path, demo, stack check, tests) and `error.rs` (the typed failures and their mapping from the
//! SDK).

mod archive;
mod deletion;
mod error;
mod listing;
mod probe;
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
use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};

pub use crate::store::object_addresses::{MultipartUpload, ObjectVersion, ObjectVersionRef};
pub use archive::ArchivedCopy;
pub use deletion::{
    AbortOutcome, BulkDeleteOutcome, DeleteFailure, DeleteFailureKind, MAX_VERSIONS_PER_DELETE,
};
pub use error::{MissingMarker, ObjectStoreError, S3Operation};
pub use listing::{UploadPage, VersionPage};
pub use probe::{
    MissingPermission, PROBE_KEY_NAME, PROBE_UPLOAD_ID, PROBE_VERSION_ID, S3Permission, probe_key,
};
pub use writes::UploadedPart;

/// Credentials name shown in SDK diagnostics.
const CREDENTIALS_SOURCE: &str = "buzz-deletion-static";

/// Where the bucket lives and how to authenticate. Read once at the binary edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Base URL of the S3 server, e.g. `http://127.0.0.1:57480` or
    /// `https://s3.eu-west-1.amazonaws.com`.
    pub endpoint: String,
    /// The one shared, versioned bucket.
    pub bucket: String,
    /// Signing region (`BUZZ_S3_REGION`); `None` takes it from the standard places
    /// (`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile), else
    /// [`stack_config::env::DEFAULT_S3_REGION`] (see `region_from_environment`).
    pub region: Option<String>,
    /// How requests are signed.
    pub credentials: S3Credentials,
    /// Path-style (`endpoint/bucket/key`, what RGW and most S3-compatible servers need) or
    /// virtual-hosted (`bucket.endpoint/key`, what AWS prefers).
    pub addressing: S3Addressing,
    /// A PEM file of CA certificates trusted for an `https://` endpoint, besides the system's
    /// (`BUZZ_S3_CA_FILE`; a private CA in front of an S3-compatible server).
    pub ca_file: Option<String>,
}

/// Where the S3 credentials come from.
#[derive(Clone, PartialEq, Eq)]
pub enum S3Credentials {
    /// A static access key pair (`BUZZ_S3_ACCESS_KEY`, `BUZZ_S3_SECRET_KEY`).
    Static {
        /// Access key id.
        access_key: String,
        /// Secret access key; never printed.
        secret_key: String,
    },
    /// The AWS SDK's default provider chain: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, the
    /// shared config and credentials files (`AWS_PROFILE`), a web identity token (Kubernetes
    /// service accounts, `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`), then container and
    /// instance metadata.
    DefaultChain,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            S3Credentials::Static { access_key, .. } => f
                .debug_struct("Static")
                .field("access_key", access_key)
                .field("secret_key", &"<redacted>")
                .finish(),
            S3Credentials::DefaultChain => f.write_str("DefaultChain"),
        }
    }
}

/// How bucket and key appear in a request URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum S3Addressing {
    /// `endpoint/bucket/key` (the default: RGW, MinIO and most S3-compatible servers).
    #[default]
    Path,
    /// `bucket.endpoint/key` (AWS S3's preferred form).
    VirtualHosted,
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

/// Resolves the default chain's credentials once, so a process without any fails at start with
/// what to set rather than at its first request.
async fn require_chain_credentials(shared: &aws_config::SdkConfig) -> Result<(), ObjectStoreError> {
    use aws_sdk_s3::config::ProvideCredentials;
    let missing = |detail: String| ObjectStoreError::InvalidConfig {
        reason: format!(
            "no S3 credentials: set BUZZ_S3_ACCESS_KEY and BUZZ_S3_SECRET_KEY (or their _FILE \
             variants), or provide them the AWS way (AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, AWS_PROFILE with a shared credentials file, a web identity \
             token, a container or instance role): {detail}"
        ),
    };
    let provider = shared
        .credentials_provider()
        .ok_or_else(|| missing("the default provider chain is not available".to_owned()))?;
    provider
        .provide_credentials()
        .await
        .map(|_| ())
        .map_err(|error| missing(error.to_string()))
}

/// The region named by the configuration or the environment, first found of: `configured`
/// (`BUZZ_S3_REGION`), `AWS_REGION`, `AWS_DEFAULT_REGION` (read through `lookup`); blank values
/// count as unset. `None` leaves the region to the AWS SDK's remaining places (the shared
/// profile, instance metadata), then to [`signing_region`]'s default.
pub(crate) fn region_from_environment(
    configured: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let from_environment = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .into_iter()
        .filter_map(lookup);
    configured
        .map(str::to_owned)
        .into_iter()
        .chain(from_environment)
        .map(|value| value.trim().to_owned())
        .find(|value| !value.is_empty())
}

/// The region requests are signed for: the one found (by [`region_from_environment`] or the
/// SDK's places), else [`stack_config::env::DEFAULT_S3_REGION`].
pub(crate) fn signing_region(found: Option<&Region>) -> Region {
    found
        .cloned()
        .unwrap_or_else(|| Region::new(stack_config::env::DEFAULT_S3_REGION))
}

impl ObjectStore {
    /// Builds a client for `cfg.bucket`. With static credentials it makes no network call (see
    /// [`ObjectStore::check_bucket`]); with the default chain it resolves the credentials once.
    ///
    /// The HTTPS client is built with rustls on ring explicitly: the workspace compiles only that
    /// crypto provider, so the SDK has no default client to fall back on.
    pub async fn connect(cfg: &S3Config) -> Result<Self, ObjectStoreError> {
        let mut required = vec![("endpoint", &cfg.endpoint), ("bucket", &cfg.bucket)];
        if let Some(region) = &cfg.region {
            required.push(("region", region));
        }
        if let S3Credentials::Static {
            access_key,
            secret_key,
        } = &cfg.credentials
        {
            required.push(("access key", access_key));
            required.push(("secret key", secret_key));
        }
        for (name, value) in required {
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
        let mut trust = TrustStore::default();
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path).map_err(|e| ObjectStoreError::InvalidConfig {
                reason: format!("BUZZ_S3_CA_FILE={path}: cannot read the CA file ({e})"),
            })?;
            trust = trust.with_pem_certificate(pem);
        }
        let tls = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| ObjectStoreError::InvalidConfig {
                reason: format!("S3 TLS settings: {e}"),
            })?;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .tls_context(tls)
            .build_https();
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(Duration::from_secs(120))
            .build();
        // Region and credentials from the AWS SDK's standard places unless given.
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http.clone());
        if let Some(region) =
            region_from_environment(cfg.region.as_deref(), |name| std::env::var(name).ok())
        {
            loader = loader.region(Region::new(region));
        }
        if let S3Credentials::Static {
            access_key,
            secret_key,
        } = &cfg.credentials
        {
            loader = loader.credentials_provider(Credentials::new(
                access_key.clone(),
                secret_key.clone(),
                None,
                None,
                CREDENTIALS_SOURCE,
            ));
        }
        let shared = loader.load().await;
        if cfg.credentials == S3Credentials::DefaultChain {
            require_chain_credentials(&shared).await?;
        }
        let region = signing_region(shared.region());
        let config = aws_sdk_s3::config::Builder::from(&shared)
            .behavior_version(BehaviorVersion::latest())
            .http_client(http)
            .region(region)
            .endpoint_url(cfg.endpoint.clone())
            .force_path_style(cfg.addressing == S3Addressing::Path)
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
