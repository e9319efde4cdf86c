//! Everything a community holds in the three stores, byte for byte, and the two assertions every
//! deletion test makes with it: the target is gone (rows, object versions, delete markers,
//! multipart uploads, Redis keys), and a neighbour is byte-identical (with a diff naming what
//! moved when it is not).

use std::collections::BTreeMap;
use std::fmt;

use activities::redis::Cache;
use activities::s3::{MultipartUpload, ObjectStore, ObjectVersion};
use activities::store::{Store, TableSnapshot};
use activities::taxonomy::{VersionKind, tenant_prefixes};
use anyhow::Context;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::stack::Stack;

/// The bytes of one object version (printed as length and SHA-256, never in full).
#[derive(Clone, PartialEq, Eq)]
pub struct Body(pub Vec<u8>);

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes sha256:{}",
            self.0.len(),
            hex_of(&Sha256::digest(&self.0))
        )
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything a community holds in the three stores, for before/after comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Rows per tenant table plus the community row (each row as canonical JSON text).
    pub rows: Vec<TableSnapshot>,
    /// Every version and delete marker under its three prefixes (key, version id, size, kind).
    pub versions: Vec<ObjectVersion>,
    /// The bytes of every data version, by (key, version id).
    pub bodies: BTreeMap<(String, String), Body>,
    /// Every unfinished multipart upload under its three prefixes.
    pub uploads: Vec<MultipartUpload>,
    /// Every Redis key of its namespace with its DUMP serialization.
    pub keys: Vec<(String, Vec<u8>)>,
}

impl Snapshot {
    /// Reads everything `community` holds: rows as `store`'s role sees them, every version (and
    /// the bytes of every data version) and unfinished upload under its prefixes, every key of
    /// its Redis namespace.
    pub async fn capture(
        store: &Store,
        objects: &ObjectStore,
        cache: &Cache,
        community: Uuid,
    ) -> anyhow::Result<Snapshot> {
        let rows = store
            .snapshot_rows(community)
            .await
            .context("snapshot rows")?;
        let mut versions = Vec::new();
        let mut uploads = Vec::new();
        for prefix in tenant_prefixes(community) {
            versions.extend(
                objects
                    .snapshot_prefix(&prefix)
                    .await
                    .with_context(|| format!("snapshot {prefix}"))?,
            );
            uploads.extend(
                objects
                    .snapshot_uploads(&prefix)
                    .await
                    .with_context(|| format!("uploads under {prefix}"))?,
            );
        }
        let mut bodies = BTreeMap::new();
        for version in versions.iter().filter(|v| v.kind == VersionKind::Object) {
            let body = objects
                .get_object_version(&version.key, &version.version_id)
                .await
                .with_context(|| format!("body of {}@{}", version.key, version.version_id))?;
            bodies.insert(
                (version.key.clone(), version.version_id.clone()),
                Body(body),
            );
        }
        let keys = cache
            .snapshot_namespace(community)
            .await
            .context("snapshot keys")?;
        Ok(Snapshot {
            rows,
            versions,
            bodies,
            uploads,
            keys,
        })
    }

    /// Total rows across tenant tables.
    pub fn row_count(&self) -> usize {
        self.rows.iter().map(|t| t.rows.len()).sum()
    }

    /// Delete markers among the versions.
    pub fn delete_markers(&self) -> usize {
        self.versions
            .iter()
            .filter(|v| v.kind == VersionKind::DeleteMarker)
            .count()
    }

    /// Whether nothing at all is left: no row, version, delete marker, upload or key.
    pub fn is_empty(&self) -> bool {
        self.row_count() == 0
            && self.versions.is_empty()
            && self.uploads.is_empty()
            && self.keys.is_empty()
    }

    /// Panics, listing what is left, unless nothing of the community is left anywhere.
    pub fn assert_gone(&self, what: &str) {
        let mut left = Vec::new();
        if self.row_count() > 0 {
            left.push(format!("rows: {:?}", self.rows));
        }
        if !self.versions.is_empty() {
            left.push(format!(
                "{} versions ({} delete markers): {:?}",
                self.versions.len(),
                self.delete_markers(),
                self.versions
            ));
        }
        if !self.uploads.is_empty() {
            left.push(format!("uploads: {:?}", self.uploads));
        }
        if !self.keys.is_empty() {
            let names: Vec<&str> = self.keys.iter().map(|(k, _)| k.as_str()).collect();
            left.push(format!("keys: {names:?}"));
        }
        assert!(left.is_empty(), "{what}: left behind\n{}", left.join("\n"));
    }

    /// What differs from `other` (`-` only here, `+` only there, `~` changed), one line each.
    pub fn diff(&self, other: &Snapshot) -> Vec<String> {
        let mut lines = Vec::new();
        let rows = |s: &Snapshot| -> BTreeMap<(String, String), ()> {
            s.rows
                .iter()
                .flat_map(|t| t.rows.iter().map(|r| ((t.table.clone(), r.clone()), ())))
                .collect()
        };
        set_diff(&mut lines, "row", &rows(self), &rows(other), |(t, r)| {
            format!("{t}: {r}")
        });
        let versions = |s: &Snapshot| -> BTreeMap<(String, String), String> {
            s.versions
                .iter()
                .map(|v| ((v.key.clone(), v.version_id.clone()), format!("{v:?}")))
                .collect()
        };
        set_diff(
            &mut lines,
            "version",
            &versions(self),
            &versions(other),
            |(k, v)| format!("{k}@{v}"),
        );
        let bodies = |s: &Snapshot| -> BTreeMap<(String, String), String> {
            s.bodies
                .iter()
                .map(|(id, body)| (id.clone(), format!("{body:?}")))
                .collect()
        };
        set_diff(
            &mut lines,
            "bytes of",
            &bodies(self),
            &bodies(other),
            |(k, v)| format!("{k}@{v}"),
        );
        let uploads = |s: &Snapshot| -> BTreeMap<(String, String), ()> {
            s.uploads
                .iter()
                .map(|u| ((u.key.clone(), u.upload_id.clone()), ()))
                .collect()
        };
        set_diff(
            &mut lines,
            "upload",
            &uploads(self),
            &uploads(other),
            |(k, id)| format!("{k} ({id})"),
        );
        let keys = |s: &Snapshot| -> BTreeMap<String, String> {
            s.keys
                .iter()
                .map(|(k, dump)| (k.clone(), format!("{:?}", Body(dump.clone()))))
                .collect()
        };
        set_diff(&mut lines, "key", &keys(self), &keys(other), |k| k.clone());
        if lines.is_empty() && self != other {
            lines.push("same content in another order".to_owned());
        }
        lines
    }
}

/// Appends `-`/`+`/`~` lines for entries only in `before`, only in `after`, or with another value.
fn set_diff<K: Ord, V: PartialEq + fmt::Debug>(
    lines: &mut Vec<String>,
    label: &str,
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
    name: impl Fn(&K) -> String,
) {
    for (key, value) in before {
        match after.get(key) {
            None => lines.push(format!("- {label} {}", name(key))),
            Some(now) if now != value => {
                lines.push(format!("~ {label} {}: {value:?} -> {now:?}", name(key)))
            }
            Some(_) => {}
        }
    }
    for key in after.keys().filter(|k| !before.contains_key(k)) {
        lines.push(format!("+ {label} {}", name(key)));
    }
}

/// Panics with a diff unless `after` is byte-identical to `before`.
pub fn assert_identical(before: &Snapshot, after: &Snapshot, what: &str) {
    if before != after {
        panic!(
            "{what}: not byte-identical\n{}",
            before.diff(after).join("\n")
        );
    }
}

/// Panics with a diff unless `community`, snapshotted now, is byte-identical to `before`.
pub async fn assert_unchanged(stack: &Stack, community: Uuid, before: &Snapshot, what: &str) {
    assert_identical(before, &snapshot(stack, community).await, what);
}

/// A community's contents at one moment, and the proof that nothing of them changed since.
pub struct Kept {
    /// The community.
    pub community: Uuid,
    /// What it held when taken.
    pub before: Snapshot,
}

impl Kept {
    /// Takes what `community` holds now.
    pub async fn now(stack: &Stack, community: Uuid) -> Kept {
        Kept {
            community,
            before: snapshot(stack, community).await,
        }
    }

    /// Panics with a diff unless the community, snapshotted now, is byte-identical to what it
    /// held when taken.
    pub async fn assert_unchanged(&self, stack: &Stack, what: &str) {
        assert_unchanged(stack, self.community, &self.before, what).await;
    }
}

/// Snapshots a community in all three stores (rows as the schema owner).
pub async fn snapshot(stack: &Stack, community: Uuid) -> Snapshot {
    Snapshot::capture(&stack.store, &stack.objects, &stack.cache, community)
        .await
        .unwrap_or_else(|e| panic!("snapshot of {community}: {e:#}"))
}

/// Every version and delete marker under the community's prefixes (no bytes: cheap enough to
/// poll while a writer or a deletion is at work).
pub async fn object_versions(stack: &Stack, community: Uuid) -> Vec<ObjectVersion> {
    let mut versions = Vec::new();
    for prefix in tenant_prefixes(community) {
        versions.extend(
            stack
                .objects
                .snapshot_prefix(&prefix)
                .await
                .unwrap_or_else(|e| panic!("snapshot {prefix}: {e}")),
        );
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(key: &str, id: &str, kind: VersionKind) -> ObjectVersion {
        ObjectVersion {
            key: key.to_owned(),
            version_id: id.to_owned(),
            kind,
            size: 0,
            is_latest: true,
        }
    }

    fn empty() -> Snapshot {
        Snapshot {
            rows: vec![TableSnapshot {
                table: "buzz.events".to_owned(),
                rows: Vec::new(),
            }],
            versions: Vec::new(),
            bodies: BTreeMap::new(),
            uploads: Vec::new(),
            keys: Vec::new(),
        }
    }

    #[test]
    fn one_leftover_of_any_kind_is_not_gone() {
        empty().assert_gone("nothing");
        let mut leftovers = Vec::new();
        let mut row = empty();
        row.rows[0].rows.push("{}".to_owned());
        leftovers.push(row);
        let mut marker = empty();
        marker
            .versions
            .push(version("media/x", "v1", VersionKind::DeleteMarker));
        leftovers.push(marker);
        let mut upload = empty();
        upload.uploads.push(MultipartUpload {
            key: "media/x".to_owned(),
            upload_id: "u1".to_owned(),
        });
        leftovers.push(upload);
        let mut key = empty();
        key.keys.push(("c:x".to_owned(), vec![1]));
        leftovers.push(key);
        for left in leftovers {
            assert!(!left.is_empty());
            let caught = std::panic::catch_unwind(|| left.assert_gone("target"));
            assert!(caught.is_err(), "{left:?} passed as gone");
        }
    }

    #[test]
    fn one_changed_byte_is_named_in_the_diff_and_fails_the_identity() {
        let mut before = empty();
        before
            .versions
            .push(version("media/x", "v1", VersionKind::Object));
        before.bodies.insert(
            ("media/x".to_owned(), "v1".to_owned()),
            Body(b"abc".to_vec()),
        );
        let mut after = before.clone();
        after.bodies.insert(
            ("media/x".to_owned(), "v1".to_owned()),
            Body(b"abd".to_vec()),
        );
        let diff = before.diff(&after);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(diff[0].starts_with("~ bytes of media/x@v1"), "{diff:?}");
        assert!(
            std::panic::catch_unwind(|| assert_identical(&before, &after, "neighbour")).is_err()
        );
        assert_identical(&before, &before.clone(), "neighbour");
        assert!(before.diff(&before).is_empty());
    }
}
