//! The in-memory versioned object store: pure logic, no I/O and no clock reads (times are
//! passed in), so every S3 semantic it implements is unit-tested here.
//!
//! Layout, sized for 10 million versions: per bucket one `BTreeMap` from key to that key's
//! versions, oldest first (the newest, the "latest", is the last element). A [`Version`] is 24
//! bytes; bodies (only versions written through PutObject or CompleteMultipartUpload have one)
//! live in a side table keyed by version id, so seeded versions cost no body at all.
//!
//! Version ids come from one monotonic counter and are rendered as 16 lowercase hex digits, so
//! "newer" is "larger" both as a number and as a string; paging resumes by id comparison, which
//! stays correct when the marker version was deleted in between.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::Bytes;
use smallvec::{SmallVec, smallvec};

/// The versions of one key, oldest first; two live inline (no allocation), the common case.
pub type Versions = SmallVec<[Version; 2]>;

/// Width of a rendered version or upload id.
const ID_WIDTH: usize = 16;

/// Renders a version or upload id: 16 lowercase hex digits, never empty.
pub fn render_id(id: u64) -> String {
    format!("{id:0ID_WIDTH$x}")
}

/// Parses an id rendered by [`render_id`]; anything else (`null`, another server's ids) is
/// `None`: no version of this store can carry it.
pub fn parse_id(text: &str) -> Option<u64> {
    if text.len() != ID_WIDTH
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// What a version is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An object version without a stored body (seeded): reads answer `size` zero bytes.
    Seeded,
    /// An object version whose body is in the bucket's body table.
    Stored,
    /// A delete marker.
    Marker,
}

/// One version or delete marker of a key (24 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// Unique, monotonic version id.
    pub id: u64,
    /// Size in bytes (0 for a marker).
    pub size: u64,
    /// Last-modified time, Unix seconds.
    pub modified: u32,
    /// Object, stored object or delete marker.
    pub kind: Kind,
}

impl Version {
    /// True for a delete marker.
    pub fn is_marker(&self) -> bool {
        self.kind == Kind::Marker
    }

    /// The ETag of a version without a stored body: synthetic, stable, 32 hex digits (not the
    /// MD5 of the zero bytes a read returns).
    pub fn synthetic_etag(&self) -> String {
        format!("{:016x}{:016x}", self.id, self.size)
    }
}

/// A stored body and its MD5 (the ETag).
#[derive(Debug, Clone)]
pub struct StoredBody {
    /// The bytes.
    pub bytes: Bytes,
    /// The ETag without quotes (MD5 hex, or `md5-of-md5s-N` for a multipart upload).
    pub etag: String,
}

/// One entry of a version listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVersion {
    /// The key.
    pub key: String,
    /// The version or marker.
    pub version: Version,
    /// True for the newest version (or marker) of the key.
    pub is_latest: bool,
}

/// One page of a version listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionListing {
    /// Versions and markers, in key order, newest first within a key.
    pub entries: Vec<ListedVersion>,
    /// `(NextKeyMarker, NextVersionIdMarker)` when truncated.
    pub next: Option<(String, u64)>,
}

/// One page of a current-object listing (ListObjectsV2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectListing {
    /// Latest versions that are not delete markers, in key order.
    pub objects: Vec<(String, Version)>,
    /// True when more keys follow (continue after the last key listed).
    pub truncated: bool,
}

/// A version-id marker of a listing request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionMarker {
    /// No version-id marker: resume after the whole key marker.
    None,
    /// Resume after this version of the key marker.
    Id(u64),
}

/// Why a listing request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// S3: "A version-id marker cannot be specified without a key marker."
    #[error("A version-id marker cannot be specified without a key marker.")]
    VersionMarkerWithoutKeyMarker,
}

/// What a version-exact delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// The version existed and is gone; `marker` tells whether it was a delete marker.
    Version {
        /// The removed version was a delete marker.
        marker: bool,
    },
    /// No such version (acknowledged all the same, as S3 does).
    Absent,
}

/// Memory freed by deletes, dropped by the caller after it released the lock.
#[derive(Debug, Default)]
pub struct Garbage {
    keys: Vec<Box<str>>,
    bodies: Vec<StoredBody>,
}

impl Garbage {
    /// True when nothing was freed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.bodies.is_empty()
    }
}

/// What a read of one key (optionally one version) found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The version, with its body when stored.
    Found(Version, Option<Bytes>, Option<String>),
    /// The key has no versions (S3 `NoSuchKey`).
    NoSuchKey,
    /// The latest version is a delete marker (S3 `NoSuchKey` with `x-amz-delete-marker`).
    LatestIsMarker(u64),
    /// The asked version does not exist (S3 `NoSuchVersion`).
    NoSuchVersion,
    /// The asked version is a delete marker (S3 `MethodNotAllowed`).
    VersionIsMarker(u64),
}

/// The versions of one bucket.
#[derive(Debug, Default)]
pub struct Objects {
    keys: BTreeMap<Box<str>, Versions>,
    bodies: HashMap<u64, StoredBody>,
    versions: u64,
}

impl Objects {
    /// Number of versions and markers stored.
    pub fn version_count(&self) -> u64 {
        self.versions
    }

    /// Number of keys with at least one version or marker.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Adds a version (or marker) to `key`, in id order (normally as its latest).
    pub fn push(&mut self, key: &str, version: Version, body: Option<StoredBody>) {
        if let Some(body) = body {
            self.bodies.insert(version.id, body);
        }
        match self.keys.get_mut(key) {
            // Ids are reserved before the lock is taken, so a racing writer may land first.
            Some(versions) => match versions.last() {
                Some(last) if last.id > version.id => {
                    let at = versions.partition_point(|v| v.id < version.id);
                    versions.insert(at, version);
                }
                _ => versions.push(version),
            },
            None => {
                self.keys.insert(Box::from(key), smallvec![version]);
            }
        }
        self.versions += 1;
    }

    /// Removes exactly version `id` of `key`. An absent key or id is [`Removed::Absent`]; a key
    /// whose last version goes is removed from the map. Freed memory goes to `garbage`.
    pub fn remove_version(&mut self, key: &str, id: u64, garbage: &mut Garbage) -> Removed {
        let Some(versions) = self.keys.get_mut(key) else {
            return Removed::Absent;
        };
        let Ok(index) = versions.binary_search_by_key(&id, |v| v.id) else {
            return Removed::Absent;
        };
        let removed = versions.remove(index);
        if versions.is_empty()
            && let Some((key, _)) = self.keys.remove_entry(key)
        {
            garbage.keys.push(key);
        }
        if removed.kind == Kind::Stored
            && let Some(body) = self.bodies.remove(&removed.id)
        {
            garbage.bodies.push(body);
        }
        self.versions -= 1;
        Removed::Version {
            marker: removed.is_marker(),
        }
    }

    /// Reads `key`, its latest version or version `id`.
    pub fn lookup(&self, key: &str, id: Option<u64>) -> Lookup {
        let Some(versions) = self.keys.get(key) else {
            return if id.is_some() {
                Lookup::NoSuchVersion
            } else {
                Lookup::NoSuchKey
            };
        };
        let version = match id {
            None => match versions.last() {
                Some(latest) if latest.is_marker() => return Lookup::LatestIsMarker(latest.id),
                Some(latest) => *latest,
                None => return Lookup::NoSuchKey,
            },
            Some(id) => match versions.binary_search_by_key(&id, |v| v.id) {
                Ok(index) if versions[index].is_marker() => return Lookup::VersionIsMarker(id),
                Ok(index) => versions[index],
                Err(_) => return Lookup::NoSuchVersion,
            },
        };
        let stored = self.bodies.get(&version.id);
        Lookup::Found(
            version,
            stored.map(|s| s.bytes.clone()),
            stored.map(|s| s.etag.clone()),
        )
    }

    /// The ETag of `version` (stored MD5, or the synthetic one of a seeded version).
    pub fn etag(&self, version: &Version) -> String {
        match self.bodies.get(&version.id) {
            Some(stored) => stored.etag.clone(),
            None => version.synthetic_etag(),
        }
    }

    /// One page of ListObjectVersions, exactly S3's paging: entries strictly after
    /// `(key_marker, version_marker)` (after the whole key marker when no version-id marker is
    /// given), keys starting with `prefix`, newest first within a key, at most `max` entries.
    /// Truncated (with both next markers naming the last entry) only when another entry
    /// follows.
    pub fn list_versions(
        &self,
        prefix: &str,
        key_marker: Option<&str>,
        version_marker: VersionMarker,
        max: usize,
    ) -> Result<VersionListing, ListError> {
        let key_marker = key_marker.filter(|k| !k.is_empty());
        let start: Bound<&str> = match (key_marker, version_marker) {
            (None, VersionMarker::Id(_)) => return Err(ListError::VersionMarkerWithoutKeyMarker),
            (None, VersionMarker::None) => Bound::Included(prefix),
            (Some(marker), _) if marker < prefix => Bound::Included(prefix),
            (Some(marker), VersionMarker::Id(_)) => Bound::Included(marker),
            (Some(marker), VersionMarker::None) => Bound::Excluded(marker),
        };
        let mut listing = VersionListing::default();
        for (key, versions) in self
            .keys
            .range::<str, (Bound<&str>, Bound<&str>)>((start, Bound::Unbounded))
        {
            if !key.starts_with(prefix) {
                break;
            }
            let below = match version_marker {
                VersionMarker::Id(id) if Some(key.as_ref()) == key_marker => id,
                _ => u64::MAX,
            };
            let latest = versions.last().map(|v| v.id);
            for version in versions.iter().rev().filter(|v| v.id < below) {
                if listing.entries.len() == max {
                    listing.next = listing
                        .entries
                        .last()
                        .map(|last| (last.key.clone(), last.version.id));
                    return Ok(listing);
                }
                listing.entries.push(ListedVersion {
                    key: key.to_string(),
                    version: *version,
                    is_latest: Some(version.id) == latest,
                });
            }
        }
        Ok(listing)
    }

    /// One page of ListObjectsV2: keys starting with `prefix`, strictly after `after`, whose
    /// latest version is not a delete marker; at most `max`.
    pub fn list_objects(&self, prefix: &str, after: Option<&str>, max: usize) -> ObjectListing {
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut listing = ObjectListing::default();
        for (key, versions) in self
            .keys
            .range::<str, (Bound<&str>, Bound<&str>)>((start, Bound::Unbounded))
        {
            if !key.starts_with(prefix) {
                break;
            }
            let Some(latest) = versions.last().filter(|v| !v.is_marker()) else {
                continue;
            };
            if listing.objects.len() == max {
                listing.truncated = true;
                break;
            }
            listing.objects.push((key.to_string(), *latest));
        }
        listing
    }

    /// Merges a seeded map (ids all larger than any stored). Takes the fast path (no per-key
    /// work under the caller's lock) when no stored key starts with `prefix`.
    pub fn merge_seeded(&mut self, prefix: &str, mut seeded: BTreeMap<Box<str>, Versions>) {
        let added: u64 = seeded.values().map(|v| v.len() as u64).sum();
        let overlaps = self
            .keys
            .range::<str, (Bound<&str>, Bound<&str>)>((Bound::Included(prefix), Bound::Unbounded))
            .next()
            .is_some_and(|(key, _)| key.starts_with(prefix));
        if self.keys.is_empty() {
            self.keys = seeded;
        } else if !overlaps {
            self.keys.append(&mut seeded);
        } else {
            for (key, mut versions) in seeded {
                let stored = self.keys.entry(key).or_default();
                stored.append(&mut versions);
                stored.sort_unstable_by_key(|v| v.id);
            }
        }
        self.versions += added;
    }

    /// Drops everything; returns what was dropped (to free outside the lock) and its count.
    pub fn take_all(&mut self) -> (Objects, u64) {
        let taken = std::mem::take(self);
        let count = taken.versions;
        (taken, count)
    }
}

/// What to seed under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedPlan {
    /// Key prefix, e.g. `media/<uuid>/`.
    pub prefix: String,
    /// Number of keys.
    pub keys: u64,
    /// Object versions per key.
    pub versions_per_key: u64,
    /// Every M-th key (1-based) gets a delete marker as its latest; 0 = none.
    pub delete_marker_every: u64,
    /// Size of every object version.
    pub size: u64,
    /// Unfinished multipart uploads to create under the prefix.
    pub uploads: u64,
    /// Digits the key index is zero-padded to, at least (the automatic width, at least 8, when
    /// larger): 64 makes the index a 64-hex-digit content hash, as the platform's keys are.
    pub width: usize,
    /// Appended to every key (`.webp`, `.json`).
    pub suffix: String,
    /// Start each key's name with 16 hex digits mixed from its index (then the padded index),
    /// so names spread over the hex digits as content hashes do, instead of all sharing the
    /// zero-padded index's leading zeros.
    pub spread: bool,
}

impl SeedPlan {
    /// Versions and markers the plan creates.
    pub fn version_total(&self) -> u64 {
        let markers = self
            .keys
            .checked_div(self.delete_marker_every)
            .unwrap_or_default();
        self.keys * self.versions_per_key + markers
    }

    /// Ids the plan consumes (versions, markers and uploads).
    pub fn id_total(&self) -> u64 {
        self.version_total() + self.uploads
    }

    /// Digits of the zero-padded key index (at least 8).
    fn width(&self) -> usize {
        let largest = self.keys.max(self.uploads).saturating_sub(1);
        largest.to_string().len().max(8).max(self.width)
    }

    /// The name of key `index`.
    pub fn key(&self, index: u64) -> String {
        let mut key = String::new();
        self.push_key(&mut key, index, self.width());
        key
    }

    /// Appends the name of key `index` (its index padded to `width` digits).
    fn push_key(&self, key: &mut String, index: u64, width: usize) {
        key.push_str(&self.prefix);
        if self.spread {
            const MIXED_DIGITS: usize = 16;
            push_hex(key, mix64(index));
            push_padded(key, index, width.saturating_sub(MIXED_DIGITS));
        } else {
            push_padded(key, index, width);
        }
        key.push_str(&self.suffix);
    }

    /// Builds the seeded versions with ids from `first_id` on, key-major, oldest first; the
    /// marker of a marked key is its newest entry.
    pub fn build_versions(&self, first_id: u64, now: u32) -> BTreeMap<Box<str>, Versions> {
        let width = self.width();
        let mut id = first_id;
        let mut key = String::with_capacity(self.prefix.len() + width + self.suffix.len());
        (0..self.keys)
            .map(|index| {
                let marked =
                    self.delete_marker_every != 0 && (index + 1) % self.delete_marker_every == 0;
                let mut versions =
                    Versions::with_capacity(self.versions_per_key as usize + usize::from(marked));
                for _ in 0..self.versions_per_key {
                    versions.push(Version {
                        id,
                        size: self.size,
                        modified: now,
                        kind: Kind::Seeded,
                    });
                    id += 1;
                }
                if marked {
                    versions.push(Version {
                        id,
                        size: 0,
                        modified: now,
                        kind: Kind::Marker,
                    });
                    id += 1;
                }
                key.clear();
                self.push_key(&mut key, index, width);
                (Box::from(key.as_str()), versions)
            })
            .collect()
    }

    /// The seeded uploads' `(key, upload id)`, ids from `first_id` on.
    pub fn upload_keys(&self, first_id: u64) -> Vec<(String, u64)> {
        (0..self.uploads)
            .map(|index| (self.key(index), first_id + index))
            .collect()
    }
}

/// A bijection of `u64` that scatters neighbouring values (SplitMix64's finaliser).
fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Appends `value` as 16 lowercase hex digits.
fn push_hex(out: &mut String, value: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(char::from(HEX[((value >> (shift * 4)) & 0xf) as usize]));
    }
}

/// Appends `value` zero-padded to `width` digits (no formatting machinery: seeding is hot).
fn push_padded(out: &mut String, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    while value > 0 {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
    }
    let used = digits.len() - at;
    for _ in used..width {
        out.push('0');
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// One part of a multipart upload.
#[derive(Debug, Clone)]
pub struct UploadedPart {
    /// The bytes.
    pub bytes: Bytes,
    /// MD5 of the bytes.
    pub md5: [u8; 16],
    /// Upload time, Unix seconds.
    pub modified: u32,
}

/// One unfinished multipart upload.
#[derive(Debug, Clone, Default)]
pub struct Upload {
    /// Initiation time, Unix seconds.
    pub initiated: u32,
    /// Parts by number.
    pub parts: BTreeMap<i32, UploadedPart>,
}

/// One page of ListMultipartUploads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadListing {
    /// `(key, upload id, initiated)` in key then upload-id order.
    pub uploads: Vec<(String, u64, u32)>,
    /// `(NextKeyMarker, NextUploadIdMarker)` when truncated.
    pub next: Option<(String, u64)>,
}

/// The unfinished multipart uploads of one bucket.
#[derive(Debug, Default)]
pub struct Uploads {
    map: BTreeMap<(Box<str>, u64), Upload>,
}

impl Uploads {
    /// Number of uploads.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Starts an upload.
    pub fn create(&mut self, key: &str, id: u64, now: u32) {
        self.map.insert(
            (Box::from(key), id),
            Upload {
                initiated: now,
                parts: BTreeMap::new(),
            },
        );
    }

    /// The upload `id` of `key`, if it exists.
    pub fn get_mut(&mut self, key: &str, id: u64) -> Option<&mut Upload> {
        self.map.get_mut(&(Box::from(key), id))
    }

    /// Removes (aborts or completes) an upload; `None` when unknown.
    pub fn remove(&mut self, key: &str, id: u64) -> Option<Upload> {
        self.map.remove(&(Box::from(key), id))
    }

    /// One page of ListMultipartUploads: S3's markers (with an upload-id marker, the key
    /// marker's uploads after that id, then later keys; without one, keys after the key
    /// marker).
    pub fn list(
        &self,
        prefix: &str,
        key_marker: Option<&str>,
        upload_id_marker: Option<&str>,
        max: usize,
    ) -> UploadListing {
        let key_marker = key_marker.filter(|k| !k.is_empty());
        let upload_id_marker = upload_id_marker.filter(|u| !u.is_empty());
        let start_key = match key_marker {
            Some(marker) if marker >= prefix => marker,
            _ => prefix,
        };
        let mut listing = UploadListing::default();
        let from = (Box::<str>::from(start_key), 0u64);
        for ((key, id), upload) in self.map.range(from..) {
            if !key.starts_with(prefix) {
                break;
            }
            if Some(key.as_ref()) == key_marker {
                // Lexicographic comparison of the rendered id, as S3 documents.
                let after_marker =
                    upload_id_marker.is_some_and(|marker| render_id(*id).as_str() > marker);
                if !after_marker {
                    continue;
                }
            }
            if listing.uploads.len() == max {
                listing.next = listing
                    .uploads
                    .last()
                    .map(|(key, id, _)| (key.clone(), *id));
                break;
            }
            listing
                .uploads
                .push((key.to_string(), *id, upload.initiated));
        }
        listing
    }

    /// Drops every upload; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let count = self.map.len();
        self.map = BTreeMap::new();
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(id: u64) -> Version {
        Version {
            id,
            size: 10,
            modified: 0,
            kind: Kind::Seeded,
        }
    }

    fn marker(id: u64) -> Version {
        Version {
            id,
            size: 0,
            modified: 0,
            kind: Kind::Marker,
        }
    }

    /// a: 1, 2, marker 3 (latest); b: 4, 5; c: marker 6; d: 7. Prefix-free keys plus one
    /// outside the prefix.
    fn sample() -> Objects {
        let mut objects = Objects::default();
        for (key, v) in [
            ("p/a", object(1)),
            ("p/a", object(2)),
            ("p/a", marker(3)),
            ("p/b", object(4)),
            ("p/b", object(5)),
            ("p/c", marker(6)),
            ("p/d", object(7)),
            ("q/z", object(8)),
        ] {
            objects.push(key, v, None);
        }
        objects
    }

    fn ids(listing: &VersionListing) -> Vec<(String, u64, bool)> {
        listing
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.version.id, e.is_latest))
            .collect()
    }

    /// Pages through everything under `prefix` with page size `max`.
    fn all_pages(objects: &Objects, prefix: &str, max: usize) -> Vec<(String, u64, bool)> {
        let mut all = Vec::new();
        let mut marker: Option<(String, u64)> = None;
        loop {
            let page = objects
                .list_versions(
                    prefix,
                    marker.as_ref().map(|(k, _)| k.as_str()),
                    marker
                        .as_ref()
                        .map_or(VersionMarker::None, |(_, id)| VersionMarker::Id(*id)),
                    max,
                )
                .unwrap_or_default();
            assert!(page.entries.len() <= max);
            all.extend(ids(&page));
            match page.next {
                Some(next) => marker = Some(next),
                None => return all,
            }
        }
    }

    #[test]
    fn ids_render_fixed_width_and_round_trip() {
        assert_eq!(render_id(1), "0000000000000001");
        assert_eq!(parse_id(&render_id(u64::MAX)), Some(u64::MAX));
        assert!(render_id(9) < render_id(10));
        assert_eq!(parse_id("null"), None);
        assert_eq!(parse_id("000000000000000A"), None);
    }

    #[test]
    fn a_listing_is_key_ordered_newest_first_with_is_latest() {
        let listing = sample()
            .list_versions("p/", None, VersionMarker::None, 1000)
            .unwrap_or_default();
        assert_eq!(
            ids(&listing),
            vec![
                ("p/a".into(), 3, true),
                ("p/a".into(), 2, false),
                ("p/a".into(), 1, false),
                ("p/b".into(), 5, true),
                ("p/b".into(), 4, false),
                ("p/c".into(), 6, true),
                ("p/d".into(), 7, true),
            ]
        );
        assert_eq!(listing.next, None);
    }

    #[test]
    fn paging_resumes_after_key_and_version_even_mid_key_and_on_markers() {
        let objects = sample();
        let whole = all_pages(&objects, "p/", 1000);
        for max in 1..=8 {
            assert_eq!(all_pages(&objects, "p/", max), whole, "page size {max}");
        }
        // A page ending on a delete marker in mid-key: the next marker is that marker's id.
        let first = objects
            .list_versions("p/", None, VersionMarker::None, 1)
            .unwrap_or_default();
        assert_eq!(first.next, Some(("p/a".into(), 3)));
        let second = objects
            .list_versions("p/", Some("p/a"), VersionMarker::Id(3), 2)
            .unwrap_or_default();
        assert_eq!(
            ids(&second),
            vec![("p/a".into(), 2, false), ("p/a".into(), 1, false)]
        );
        assert_eq!(second.next, Some(("p/a".into(), 1)));
    }

    #[test]
    fn an_exact_fit_is_not_truncated() {
        let listing = sample()
            .list_versions("p/", None, VersionMarker::None, 7)
            .unwrap_or_default();
        assert_eq!(listing.entries.len(), 7);
        assert_eq!(listing.next, None);
    }

    #[test]
    fn a_key_marker_alone_skips_the_whole_key() {
        let listing = sample()
            .list_versions("p/", Some("p/a"), VersionMarker::None, 1000)
            .unwrap_or_default();
        assert_eq!(listing.entries[0].key, "p/b");
    }

    #[test]
    fn a_deleted_marker_version_still_resumes_by_id() {
        let mut objects = sample();
        let mut garbage = Garbage::default();
        assert_eq!(
            objects.remove_version("p/a", 2, &mut garbage),
            Removed::Version { marker: false }
        );
        let listing = objects
            .list_versions("p/", Some("p/a"), VersionMarker::Id(2), 1)
            .unwrap_or_default();
        assert_eq!(ids(&listing), vec![("p/a".into(), 1, false)]);
    }

    #[test]
    fn a_version_marker_needs_a_key_marker() {
        assert_eq!(
            sample().list_versions("p/", None, VersionMarker::Id(3), 10),
            Err(ListError::VersionMarkerWithoutKeyMarker)
        );
    }

    #[test]
    fn removing_reports_markers_and_absence_and_drops_empty_keys() {
        let mut objects = sample();
        let mut garbage = Garbage::default();
        assert_eq!(
            objects.remove_version("p/c", 6, &mut garbage),
            Removed::Version { marker: true }
        );
        assert_eq!(objects.lookup("p/c", None), Lookup::NoSuchKey);
        assert_eq!(objects.key_count(), 4);
        assert!(!garbage.is_empty());
        // Already gone, never existed, or a key that never existed: all absent.
        assert_eq!(
            objects.remove_version("p/c", 6, &mut garbage),
            Removed::Absent
        );
        assert_eq!(
            objects.remove_version("p/a", 99, &mut garbage),
            Removed::Absent
        );
        assert_eq!(
            objects.remove_version("nope", 1, &mut garbage),
            Removed::Absent
        );
        assert_eq!(objects.version_count(), 7);
    }

    #[test]
    fn lookups_distinguish_missing_keys_versions_and_markers() {
        let objects = sample();
        assert_eq!(objects.lookup("p/a", None), Lookup::LatestIsMarker(3));
        assert_eq!(objects.lookup("p/a", Some(3)), Lookup::VersionIsMarker(3));
        assert!(matches!(
            objects.lookup("p/a", Some(2)),
            Lookup::Found(v, None, None) if v.id == 2
        ));
        assert_eq!(objects.lookup("p/a", Some(42)), Lookup::NoSuchVersion);
        assert_eq!(objects.lookup("p/zz", None), Lookup::NoSuchKey);
        assert_eq!(objects.lookup("p/zz", Some(1)), Lookup::NoSuchVersion);
    }

    #[test]
    fn object_listings_hide_marked_keys_and_page_by_key() {
        let objects = sample();
        let page = objects.list_objects("p/", None, 1);
        assert_eq!(page.objects[0].0, "p/b");
        assert!(page.truncated);
        let page = objects.list_objects("p/", Some("p/b"), 1);
        assert_eq!(page.objects[0].0, "p/d");
        assert!(!page.truncated);
        assert_eq!(objects.list_objects("", None, 10).objects.len(), 3);
    }

    #[test]
    fn seeding_names_keys_and_places_markers_latest() {
        let plan = SeedPlan {
            prefix: "media/x/".into(),
            keys: 10,
            versions_per_key: 2,
            delete_marker_every: 3,
            size: 5,
            uploads: 2,
            width: 0,
            suffix: String::new(),
            spread: false,
        };
        assert_eq!(plan.version_total(), 23);
        assert_eq!(plan.key(7), "media/x/00000007");
        let hashed = SeedPlan {
            prefix: "thumbs/x/".into(),
            width: 64,
            suffix: ".webp".into(),
            ..plan.clone()
        };
        assert_eq!(hashed.key(7), format!("thumbs/x/{:064}.webp", 7));
        let built_hashed = hashed.build_versions(1, 0);
        assert!(built_hashed.contains_key(hashed.key(9).as_str()));
        // Spread names are content-hash shaped, distinct, and lead with every hex digit.
        let spread = SeedPlan {
            keys: 4096,
            spread: true,
            ..hashed.clone()
        };
        let names: std::collections::BTreeSet<String> = (0..spread.keys)
            .map(|i| {
                spread
                    .key(i)
                    .trim_start_matches("thumbs/x/")
                    .trim_end_matches(".webp")
                    .to_owned()
            })
            .collect();
        assert_eq!(names.len(), 4096);
        assert!(names.iter().all(|name| {
            name.len() == 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }));
        let leading: std::collections::BTreeMap<char, usize> =
            names.iter().fold(Default::default(), |mut counts, name| {
                *counts
                    .entry(name.chars().next().unwrap_or('?'))
                    .or_default() += 1;
                counts
            });
        assert_eq!(leading.len(), 16, "{leading:?}");
        assert!(
            leading.values().all(|&n| (160..=352).contains(&n)),
            "{leading:?}"
        );
        assert!(
            spread
                .build_versions(1, 0)
                .contains_key(spread.key(99).as_str())
        );
        let built = plan.build_versions(100, 0);
        assert_eq!(built.len(), 10);
        let third = &built["media/x/00000002"];
        assert_eq!(third.len(), 3);
        assert!(third[2].is_marker());
        let mut objects = sample();
        objects.merge_seeded(&plan.prefix, built);
        assert_eq!(objects.version_count(), 8 + 23);
        // Seeding the same prefix again merges versions instead of replacing keys.
        let again = plan.build_versions(1000, 0);
        objects.merge_seeded(&plan.prefix, again);
        assert_eq!(objects.version_count(), 8 + 46);
        let listing = objects
            .list_versions("media/x/00000000", None, VersionMarker::None, 10)
            .unwrap_or_default();
        assert_eq!(
            listing
                .entries
                .iter()
                .map(|e| e.version.id)
                .collect::<Vec<_>>(),
            vec![1001, 1000, 101, 100]
        );
    }

    #[test]
    fn padded_keys_match_format() {
        for (value, width) in [(0, 8), (7, 8), (123_456_789, 8), (42, 10)] {
            let mut out = String::new();
            push_padded(&mut out, value, width);
            assert_eq!(out, format!("{value:0width$}"));
        }
    }

    #[test]
    fn upload_listing_follows_key_and_upload_markers() {
        let mut uploads = Uploads::default();
        uploads.create("p/a", 1, 0);
        uploads.create("p/a", 2, 0);
        uploads.create("p/b", 3, 0);
        uploads.create("q/c", 4, 0);
        let page = uploads.list("p/", None, None, 2);
        assert_eq!(page.uploads.len(), 2);
        assert_eq!(page.next, Some(("p/a".into(), 2)));
        let rest = uploads.list("p/", Some("p/a"), Some(&render_id(2)), 2);
        assert_eq!(
            rest.uploads,
            vec![("p/b".to_owned(), 3, 0)],
            "after the marker id"
        );
        assert_eq!(rest.next, None);
        let after_key = uploads.list("p/", Some("p/a"), None, 10);
        assert_eq!(after_key.uploads.len(), 1);
        assert!(uploads.remove("p/a", 1).is_some());
        assert!(uploads.remove("p/a", 1).is_none());
    }

    /// Lock time of one 1,000-version DeleteObjects on 10M versions (5M keys x 2). Run with
    /// `cargo test --release -- --ignored --nocapture lock_time`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn lock_time_of_a_thousand_version_delete() {
        let plan = SeedPlan {
            prefix: "media/0b7e4b6c-3c1e-4c55-9d6b-6f1f5a1c2d3e/".into(),
            keys: 5_000_000,
            versions_per_key: 2,
            delete_marker_every: 0,
            size: 1,
            uploads: 0,
            width: 0,
            suffix: String::new(),
            spread: false,
        };
        let mut objects = Objects::default();
        objects.merge_seeded(&plan.prefix, plan.build_versions(1, 0));
        // Key i holds ids 2i+1 and 2i+2.
        let contiguous: Vec<(String, u64)> = (2_500_000..2_500_500u64)
            .flat_map(|i| [(plan.key(i), 2 * i + 1), (plan.key(i), 2 * i + 2)])
            .collect();
        let scattered: Vec<(String, u64)> = (0..1000u64)
            .map(|n| {
                let i = (n * 4_999_999 + 12_345) % 5_000_000;
                (plan.key(i), 2 * i + 1)
            })
            .collect();
        for (name, batch) in [("contiguous", contiguous), ("scattered", scattered)] {
            let mut garbage = Garbage::default();
            let started = std::time::Instant::now();
            for (key, id) in &batch {
                assert!(matches!(
                    objects.remove_version(key, *id, &mut garbage),
                    Removed::Version { .. }
                ));
            }
            let locked = started.elapsed();
            drop(garbage);
            println!("{name}: 1000 version deletes in {locked:?} of lock time");
        }
    }
}
