//! Listing: version listings of a prefix (paged, with both continuation markers required),
//! plain object listings, and the multipart uploads in progress under a prefix.

use std::future::Future;

use super::ObjectStore;
use super::error::{MissingMarker, ObjectStoreError, S3Operation, required};
use crate::store::object_addresses::{MultipartUpload, ObjectVersion};
use crate::taxonomy::VersionKind;

/// Page size used by the whole-prefix helpers ([`ObjectStore::snapshot_prefix`]).
pub(super) const SNAPSHOT_PAGE_SIZE: i32 = 1000;

/// One page of a version listing, in the server's key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionPage {
    /// Object versions and delete markers of this page.
    pub entries: Vec<ObjectVersion>,
    /// `(key marker, version id marker)` to pass for the next page; `None` on the last page.
    pub next: Option<(String, String)>,
}

/// One page of a multipart-upload listing, in the server's (key, upload id) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPage {
    /// Uploads in progress on this page.
    pub uploads: Vec<MultipartUpload>,
    /// `(key marker, upload id marker)` to pass for the next page; `None` on the last page.
    pub next: Option<(String, String)>,
}

impl ObjectStore {
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
        self.list_versions_from(prefix, key_marker, version_id_marker, max_keys)
            .await
    }

    /// The first page of the versions under `prefix` from `key` on (a key marker without a
    /// version id marker), as a resumed freeze lists on from the last key it stored whole. AWS
    /// S3 starts after `key`; the local gateway lists `key`'s own versions again first, so a
    /// caller wanting only later keys drops those itself.
    pub async fn list_versions_after_key(
        &self,
        prefix: &str,
        key: String,
        max_keys: i32,
    ) -> Result<VersionPage, ObjectStoreError> {
        self.list_versions_from(prefix, Some(key), None, max_keys)
            .await
    }

    async fn list_versions_from(
        &self,
        prefix: &str,
        key_marker: Option<String>,
        version_id_marker: Option<String>,
        max_keys: i32,
    ) -> Result<VersionPage, ObjectStoreError> {
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
            Some(require_progress(
                prefix,
                (key_marker.as_deref(), version_id_marker.as_deref()),
                next,
            )?)
        } else {
            None
        };
        Ok(VersionPage { entries, next })
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
        first_listed(move |marker| self.list_versions_page(prefix, marker, 1)).await
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
        all_listed(move |marker| self.list_versions_page(prefix, marker, SNAPSHOT_PAGE_SIZE)).await
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
            Some(require_progress(
                prefix,
                (key_marker.as_deref(), upload_id_marker.as_deref()),
                next,
            )?)
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
        all_listed(move |marker| self.list_uploads_page(prefix, marker, SNAPSHOT_PAGE_SIZE)).await
    }

    /// The first multipart upload still in progress under `prefix`, or `None` when there is
    /// none: the upload half of the storage absence proof.
    pub async fn first_upload(
        &self,
        prefix: &str,
    ) -> Result<Option<MultipartUpload>, ObjectStoreError> {
        first_listed(move |marker| self.list_uploads_page(prefix, marker, 1)).await
    }
}

/// A pair of continuation markers: (key marker, version id or upload id marker).
type Markers = (String, String);

/// A listing page continued by a pair of markers.
trait MarkedPage {
    /// What the page lists.
    type Item;
    /// The page's items and the markers of the next page (`None` on the last page).
    fn into_parts(self) -> (Vec<Self::Item>, Option<Markers>);
}

impl MarkedPage for VersionPage {
    type Item = ObjectVersion;
    fn into_parts(self) -> (Vec<ObjectVersion>, Option<Markers>) {
        (self.entries, self.next)
    }
}

impl MarkedPage for UploadPage {
    type Item = MultipartUpload;
    fn into_parts(self) -> (Vec<MultipartUpload>, Option<Markers>) {
        (self.uploads, self.next)
    }
}

/// Every item of a listing, page after page from the start, sorted.
async fn all_listed<P, F, Fut>(mut page: F) -> Result<Vec<P::Item>, ObjectStoreError>
where
    P: MarkedPage,
    P::Item: Ord,
    F: FnMut(Option<Markers>) -> Fut,
    Fut: Future<Output = Result<P, ObjectStoreError>>,
{
    let mut all = Vec::new();
    let mut marker = None;
    loop {
        let (items, next) = page(marker).await?.into_parts();
        all.extend(items);
        match next {
            Some(next) => marker = Some(next),
            None => break,
        }
    }
    all.sort();
    Ok(all)
}

/// The first item of a listing, or `None` when the whole listing is empty.
async fn first_listed<P, F, Fut>(mut page: F) -> Result<Option<P::Item>, ObjectStoreError>
where
    P: MarkedPage,
    F: FnMut(Option<Markers>) -> Fut,
    Fut: Future<Output = Result<P, ObjectStoreError>>,
{
    let mut marker = None;
    loop {
        let (items, next) = page(marker).await?.into_parts();
        if let Some(first) = items.into_iter().next() {
            return Ok(Some(first));
        }
        // An empty but truncated page is legal S3; only the last page proves emptiness.
        match next {
            Some(next) => marker = Some(next),
            None => return Ok(None),
        }
    }
}

/// `next`, unless it repeats the markers this page was asked with: paging would never end, so
/// that is [`ObjectStoreError::ListingStalled`].
fn require_progress(
    prefix: &str,
    asked: (Option<&str>, Option<&str>),
    next: Markers,
) -> Result<Markers, ObjectStoreError> {
    if asked == (Some(next.0.as_str()), Some(next.1.as_str())) {
        return Err(ObjectStoreError::ListingStalled {
            prefix: prefix.to_owned(),
            key_marker: next.0,
        });
    }
    Ok(next)
}

/// Both continuation markers of a truncated version listing, or which one is missing.
pub(super) fn require_continuation_markers(
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
