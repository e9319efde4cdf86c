//! The receipt archive: a second bucket whose objects are kept under S3 Object Lock in
//! COMPLIANCE mode, so a signed receipt written there cannot be overwritten or deleted before its
//! retention ends, not even by the bucket's owner (unlike the `deletion.receipts` row, which the
//! database owner could rewrite). The bucket's default retention does the locking; the worker
//! checks at startup that it is there and records each copy's version and retain-until date.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{ObjectLockEnabled, ObjectLockRetentionMode};
use chrono::{DateTime, Utc};

use super::ObjectStore;
use super::error::{ObjectStoreError, S3Operation};

/// The S3 error code of GetObjectLockConfiguration on a bucket without object lock.
const NO_LOCK_CONFIGURATION: &str = "ObjectLockConfigurationNotFoundError";

/// One receipt written to the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedCopy {
    /// The object key.
    pub key: String,
    /// Its version.
    pub version_id: String,
    /// Until when it cannot be deleted, as the server reports it.
    pub retain_until: Option<DateTime<Utc>>,
}

impl ObjectStore {
    /// The same client and endpoint addressing `bucket` instead.
    pub fn for_bucket(&self, bucket: &str) -> ObjectStore {
        ObjectStore {
            client: self.client.clone(),
            bucket: bucket.into(),
            endpoint: self.endpoint.clone(),
        }
    }

    /// Refuses ([`ObjectStoreError::ArchiveNotLocked`]) a bucket without object lock enabled
    /// and a COMPLIANCE default retention.
    pub async fn check_compliance_lock(&self) -> Result<(), ObjectStoreError> {
        let not_locked = |reason: &str| ObjectStoreError::ArchiveNotLocked {
            bucket: self.bucket.to_string(),
            reason: reason.to_owned(),
        };
        let output = match self
            .client
            .get_object_lock_configuration()
            .bucket(self.bucket.as_ref())
            .send()
            .await
        {
            Ok(output) => output,
            // S3's answer for a bucket created without object lock (HTTP 404, like a missing
            // bucket, so the error code tells them apart).
            Err(SdkError::ServiceError(service))
                if service.err().code() == Some(NO_LOCK_CONFIGURATION) =>
            {
                return Err(not_locked("it was created without object lock"));
            }
            Err(error) => {
                return Err(self.sdk_error(S3Operation::GetObjectLockConfiguration, error));
            }
        };
        let config = output
            .object_lock_configuration()
            .ok_or_else(|| not_locked("it has no object lock configuration"))?;
        if config.object_lock_enabled() != Some(&ObjectLockEnabled::Enabled) {
            return Err(not_locked("object lock is not enabled"));
        }
        let mode = config
            .rule()
            .and_then(|rule| rule.default_retention())
            .and_then(|retention| retention.mode());
        if mode != Some(&ObjectLockRetentionMode::Compliance) {
            return Err(not_locked(
                "its default retention is not COMPLIANCE mode (GOVERNANCE can be bypassed)",
            ));
        }
        Ok(())
    }

    /// Writes `body` to `key` (locked by the bucket's default retention) and reads back the
    /// version's retain-until date.
    pub async fn put_locked(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> Result<ArchivedCopy, ObjectStoreError> {
        let version_id = self.put_object(key, body).await?;
        let head = self
            .client
            .head_object()
            .bucket(self.bucket.as_ref())
            .key(key)
            .version_id(&version_id)
            .send()
            .await
            .map_err(|error| self.sdk_error(S3Operation::HeadObject, error))?;
        let retain_until = head
            .object_lock_retain_until_date()
            .and_then(|at| DateTime::<Utc>::from_timestamp(at.secs(), at.subsec_nanos()));
        Ok(ArchivedCopy {
            key: key.to_owned(),
            version_id,
            retain_until,
        })
    }
}
