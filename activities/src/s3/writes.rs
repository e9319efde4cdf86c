//! Writes a deletion never makes: objects and delete markers (the serving path, the demo and the
//! simulator write through `put_object`), multipart uploads, bucket policies and version reads,
//! used by the serving library, the demo, the stack check and the tests.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use serde::{Deserialize, Serialize};

use super::ObjectStore;
use super::error::{
    ObjectStoreError, S3Operation, is_missing_version, is_no_such_upload, required,
};
use crate::store::object_addresses::MultipartUpload;

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

impl ObjectStore {
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
                SdkError::ServiceError(ref service) if is_missing_version(service.err()) => {
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
                certificate: None,
            })?;
        Ok(body.into_bytes().to_vec())
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
}
