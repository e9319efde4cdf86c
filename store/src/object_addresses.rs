//! What names a thing in the bucket: a listed version, the exact version a delete addresses,
//! and a multipart upload in progress. Listing produces them, deletion consumes them.

use serde::{Deserialize, Serialize};

use crate::taxonomy::{ManifestEntry, VersionKind};

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

/// One multipart upload in progress (initiated, never completed nor aborted). It holds no
/// version yet, so version listings do not show it, but completing it creates one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MultipartUpload {
    /// The key the upload will create when completed.
    pub key: String,
    /// The upload id the server assigned.
    pub upload_id: String,
}
