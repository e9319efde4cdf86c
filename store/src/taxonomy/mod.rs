//! Object-key taxonomy: tenant prefixes, exact writer shapes, manifest entries and digests.
//!
//! Pure functions only: nothing here performs I/O, so every ownership decision a destructive
//! stage relies on can be property-tested in isolation.
//!
//! A community's objects live under three *tenant prefixes* in the shared bucket, and the relay's
//! writers produce exactly one key shape under each (`h` = 64 lowercase hex digits, the content
//! hash; `c` = the community id as a lowercase hyphenated UUID):
//!
//! | root     | exact shape              |
//! | -------- | ------------------------ |
//! | `media`  | `media/{c}/{h}`          |
//! | `thumbs` | `thumbs/{c}/{h}.webp`    |
//! | `_meta`  | `_meta/{c}/{h}.json`     |
//!
//! A deletion only ever claims keys of those exact shapes; anything else found under a tenant
//! prefix fails closed in the caller.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

mod derived;
mod lanes;
pub mod user_keys;

pub use derived::{DERIVED_ROOTS, derived_keys};
pub use lanes::{
    LANES_PER_PREFIX, ListingLane, lanes_cover_prefixes, listing_lanes, whole_prefix_lanes,
};

/// The first key segment of each tenant prefix, in the order [`tenant_prefixes`] returns them.
pub const TENANT_PREFIX_ROOTS: [&str; 3] = ["media", "thumbs", "_meta"];

/// Length of the content hash that names every tenant object.
const CONTENT_HASH_LEN: usize = 64;

/// Length of a hyphenated UUID (`8-4-4-4-12`).
const HYPHENATED_UUID_LEN: usize = 36;

/// One of the three tenant prefix roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixRoot {
    /// `media/{c}/{h}`: original uploads.
    Media,
    /// `thumbs/{c}/{h}.webp`: rendered thumbnails.
    Thumbs,
    /// `_meta/{c}/{h}.json`: per-object metadata documents.
    Meta,
}

impl PrefixRoot {
    /// All roots, in the order of [`TENANT_PREFIX_ROOTS`].
    pub const ALL: [PrefixRoot; 3] = [PrefixRoot::Media, PrefixRoot::Thumbs, PrefixRoot::Meta];

    /// The key segment this root is spelled as.
    pub fn as_str(self) -> &'static str {
        match self {
            PrefixRoot::Media => TENANT_PREFIX_ROOTS[0],
            PrefixRoot::Thumbs => TENANT_PREFIX_ROOTS[1],
            PrefixRoot::Meta => TENANT_PREFIX_ROOTS[2],
        }
    }

    /// The root spelled exactly as `segment` (case-sensitive, as S3 keys are).
    pub fn from_segment(segment: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|root| root.as_str() == segment)
    }

    /// The community's prefix under this root: `{root}/{c}/`.
    pub fn prefix(self, community: Uuid) -> String {
        format!("{}/{}/", self.as_str(), community.hyphenated())
    }

    /// The suffix the writer appends to the content hash under this root.
    fn name_suffix(self) -> &'static str {
        match self {
            PrefixRoot::Media => "",
            PrefixRoot::Thumbs => ".webp",
            PrefixRoot::Meta => ".json",
        }
    }

    /// The one definition of the exact key the relay writes under this root for content `hash`
    /// in `community`: `media/{c}/{h}`, `thumbs/{c}/{h}.webp`, `_meta/{c}/{h}.json`. Every
    /// ownership decision reads it: [`classify_key`] (the community path and the sweep) through
    /// [`PrefixRoot::is_exact_object_name`], and [`derived_keys`] (the user path).
    pub fn object_key(self, community: Uuid, hash: &str) -> String {
        format!("{}{hash}{}", self.prefix(community), self.name_suffix())
    }

    /// The content hash `name` (the part after `{root}/{c}/`) was written for, when it is the
    /// exact shape the writer produces.
    fn hash_of_name(self, name: &str) -> Option<&str> {
        name.strip_suffix(self.name_suffix())
            .filter(|hash| is_content_hash(hash))
    }

    /// Whether `name` (the part after `{root}/{c}/`) is the exact shape the writer produces.
    fn is_exact_object_name(self, name: &str) -> bool {
        self.hash_of_name(name).is_some()
    }
}

impl fmt::Display for PrefixRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The community's three tenant prefixes, `media/{c}/`, `thumbs/{c}/`, `_meta/{c}/`, in that order.
pub fn tenant_prefixes(community: Uuid) -> [String; 3] {
    PrefixRoot::ALL.map(|root| root.prefix(community))
}

/// True only for a key of an exact writer shape under one of `community`'s own tenant prefixes.
///
/// Anything else — another community, a non-canonical spelling of this community's id, a nested
/// path, a hash of the wrong length or case, a stray suffix — is not the community's to delete.
///
/// Called once per listed version, so it compares the key segment by segment against the
/// community's id spelled once on the stack instead of formatting the three prefixes each time.
pub fn is_tenant_owned_key(community: Uuid, key: &str) -> bool {
    let mut spelled = Uuid::encode_buffer();
    let id: &str = community.hyphenated().encode_lower(&mut spelled);
    let Some((root_segment, rest)) = key.split_once('/') else {
        return false;
    };
    let Some(root) = PrefixRoot::ALL
        .into_iter()
        .find(|root| root.as_str() == root_segment)
    else {
        return false;
    };
    rest.strip_prefix(id)
        .and_then(|after_id| after_id.strip_prefix('/'))
        .is_some_and(|name| root.is_exact_object_name(name))
}

/// Where a bucket key falls in the taxonomy, for the bucket-wide sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "shape")]
pub enum KeyShape {
    /// An exact writer shape under `community`'s tenant prefix of `root`.
    Tenant {
        /// The owning community.
        community: Uuid,
        /// Which tenant prefix the key sits under.
        root: PrefixRoot,
    },
    /// The key's first segment is a tenant root and its second segment spells a UUID, but the key
    /// is not an exact writer shape of that community.
    ///
    /// Precisely: the key is `{root}/{id}` or `{root}/{id}/{rest}` where `root` is one of
    /// [`TENANT_PREFIX_ROOTS`] (case-sensitive) and `id` is a hyphenated UUID whose hex digits may
    /// be of either case. This covers keys a deletion's prefix listing would reject
    /// (`media/{c}/notes.txt`, `media/{c}/{h}/x`), keys that mimic a tenant prefix with a
    /// non-canonical id spelling (`media/{C-IN-UPPER-CASE}/{h}`, which S3 treats as a different
    /// prefix and a deletion would therefore miss), and a bare `media/{c}` without its slash.
    UnknownUnderTenantPrefix {
        /// The community the id segment names (case folded).
        community: Uuid,
    },
    /// Not under any tenant prefix: another root, a leading or doubled slash, or a second
    /// segment that is not a hyphenated UUID. Outside every deletion's contract.
    Outside,
}

/// Classifies one bucket key; see [`KeyShape`] for the exact rules.
pub fn classify_key(key: &str) -> KeyShape {
    let Some((root_segment, after_root)) = key.split_once('/') else {
        return KeyShape::Outside;
    };
    let Some(root) = PrefixRoot::from_segment(root_segment) else {
        return KeyShape::Outside;
    };
    let (id_segment, name) = match after_root.split_once('/') {
        Some((id, name)) => (id, Some(name)),
        None => (after_root, None),
    };
    let Some(community) = parse_hyphenated_uuid_any_case(id_segment) else {
        return KeyShape::Outside;
    };
    let canonical_id = id_segment == community.hyphenated().to_string();
    match name {
        Some(name) if canonical_id && root.is_exact_object_name(name) => {
            KeyShape::Tenant { community, root }
        }
        _ => KeyShape::UnknownUnderTenantPrefix { community },
    }
}

/// Parses `8-4-4-4-12` hex of any case; rejects the simple, braced and URN spellings that
/// `Uuid::parse_str` also accepts, so the rule in [`KeyShape`] stays exactly as documented.
fn parse_hyphenated_uuid_any_case(segment: &str) -> Option<Uuid> {
    let bytes = segment.as_bytes();
    let well_formed = bytes.len() == HYPHENATED_UUID_LEN
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if well_formed {
        Uuid::parse_str(segment).ok()
    } else {
        None
    }
}

/// Exactly 64 lowercase hex digits.
fn is_content_hash(candidate: &str) -> bool {
    candidate.len() == CONTENT_HASH_LEN
        && candidate
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether a listed version holds data or is a delete marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionKind {
    /// A version carrying object data.
    Object,
    /// A delete marker: no data, but a version id that must itself be deleted.
    DeleteMarker,
}

impl VersionKind {
    /// The spelling used in manifest entries (same as the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            VersionKind::Object => "object",
            VersionKind::DeleteMarker => "delete_marker",
        }
    }

    fn from_manifest_name(name: &str) -> Option<Self> {
        match name {
            "object" => Some(VersionKind::Object),
            "delete_marker" => Some(VersionKind::DeleteMarker),
            _ => None,
        }
    }
}

impl fmt::Display for VersionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One version frozen into a manifest: exactly what a version-exact delete needs, plus its kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// The full object key.
    pub key: String,
    /// The S3 version id (`"null"` for a version written before versioning was enabled).
    pub version_id: String,
    /// Object data or delete marker.
    pub kind: VersionKind,
}

impl ManifestEntry {
    /// Builds an entry from its parts.
    pub fn new(key: impl Into<String>, version_id: impl Into<String>, kind: VersionKind) -> Self {
        Self {
            key: key.into(),
            version_id: version_id.into(),
            kind,
        }
    }

    /// The canonical encoding: a compact JSON array `["key","version id","kind"]`.
    ///
    /// JSON string escaping makes it unambiguous for keys holding any character (quotes,
    /// commas, newlines, tabs), and serde_json's compact output makes it one string per entry,
    /// which is what the digest and the chunk rows are computed over.
    pub fn encode(&self) -> String {
        encode_triple(&self.key, &self.version_id, self.kind.as_str())
    }

    /// Parses an encoding produced by [`ManifestEntry::encode`]; any other spelling of the same
    /// triple (extra whitespace, different escapes) is rejected so one entry has one encoding.
    pub fn decode(encoded: &str) -> Result<Self, TaxonomyError> {
        if let Some(entry) = Self::decode_plain(encoded) {
            return Ok(entry);
        }
        Self::decode_escaped(encoded)
    }

    /// [`ManifestEntry::decode`] of the common spelling, with no character escaped: `["`, three
    /// parts free of `"`, `\` and control characters joined by `","`, a known kind, `"]`. That
    /// string is the canonical encoding of exactly those parts, so no parser is needed; `None`
    /// for anything else, which the full parser decides ([`ManifestEntry::decode_escaped`]).
    fn decode_plain(encoded: &str) -> Option<Self> {
        let inner = encoded.strip_prefix("[\"")?.strip_suffix("\"]")?;
        let mut parts = inner.split("\",\"");
        let (key, version_id, kind) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || [key, version_id, kind].iter().any(|part| !is_plain(part)) {
            return None;
        }
        Some(Self {
            key: key.to_owned(),
            version_id: version_id.to_owned(),
            kind: VersionKind::from_manifest_name(kind)?,
        })
    }

    /// [`ManifestEntry::decode`] through the JSON parser, for spellings with escapes (and to
    /// name what is wrong with one that does not decode).
    fn decode_escaped(encoded: &str) -> Result<Self, TaxonomyError> {
        let (key, version_id, kind): (String, String, String) = serde_json::from_str(encoded)
            .map_err(|error| TaxonomyError::MalformedManifestEntry {
                reason: error.to_string(),
            })?;
        let kind = VersionKind::from_manifest_name(&kind)
            .ok_or(TaxonomyError::UnknownVersionKind { kind: kind.clone() })?;
        let entry = Self {
            key,
            version_id,
            kind,
        };
        if entry.encode() != encoded {
            return Err(TaxonomyError::NonCanonicalManifestEntry {
                encoded: encoded.to_owned(),
            });
        }
        Ok(entry)
    }
}

/// The canonical encoding of one multipart upload in progress, as folded into a prefix's upload
/// digest: a compact JSON array `["key","upload id","multipart_upload"]`. The third element can
/// never be a [`VersionKind`] name, so an upload's encoding never equals a version's.
pub fn encode_upload(key: &str, upload_id: &str) -> String {
    encode_triple(key, upload_id, UPLOAD_ENTRY_KIND)
}

/// `["a","b","c"]` in serde_json's compact form: the bytes `json!([a, b, c]).to_string()`
/// gives (the same serializer and escapes), written straight into one string rather than
/// through a `Value` and `Display`, which every listed version and every chunk check pays for.
fn encode_triple(a: &str, b: &str, c: &str) -> String {
    if is_plain(a) && is_plain(b) && is_plain(c) {
        // Nothing to escape: serde_json writes each string between quotes as it is.
        let mut encoded = String::with_capacity(a.len() + b.len() + c.len() + 10);
        for (opening, part) in [("[\"", a), ("\",\"", b), ("\",\"", c)] {
            encoded.push_str(opening);
            encoded.push_str(part);
        }
        encoded.push_str("\"]");
        return encoded;
    }
    // Serializing three strings into memory cannot fail; the fallback keeps the one spelling.
    serde_json::to_string(&(a, b, c)).unwrap_or_else(|_| serde_json::json!([a, b, c]).to_string())
}

/// Whether serde_json writes `part` inside its quotes unchanged: no quote, no backslash and no
/// control character below U+0020 (the only characters its compact form escapes).
fn is_plain(part: &str) -> bool {
    !part.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

/// The kind element of [`encode_upload`].
const UPLOAD_ENTRY_KIND: &str = "multipart_upload";

/// Why a manifest entry could not be decoded. Always permanent: a stored manifest that does not
/// decode cannot be made valid by retrying.
#[derive(Debug, thiserror::Error)]
pub enum TaxonomyError {
    /// Not a JSON array of three strings.
    #[error("manifest entry is not a [key, version id, kind] array: {reason}")]
    MalformedManifestEntry {
        /// The parser's explanation.
        reason: String,
    },
    /// The kind is neither `object` nor `delete_marker`.
    #[error("manifest entry has unknown version kind {kind:?}")]
    UnknownVersionKind {
        /// The kind as found.
        kind: String,
    },
    /// A valid triple, but not spelled the way `encode` spells it.
    #[error("manifest entry is not in canonical encoding: {encoded:?}")]
    NonCanonicalManifestEntry {
        /// The entry as found.
        encoded: String,
    },
}

// Every one is permanent: retrying cannot change the answer.
crate::failure::permanent_failure!(TaxonomyError);

/// Domain separator so this digest can never collide with another sha256 use in the project.
const DIGEST_DOMAIN: &[u8] = b"buzz-deletion/key-stream-digest/v1";

/// An order-independent digest of a multiset of manifest entries.
///
/// Each entry's canonical encoding is hashed with sha256 and the hashes are summed modulo 2^256,
/// so the result does not depend on listing order (S3 pages, parallel prefixes, chunk replays)
/// yet changes when any key, version id or kind changes, or when an entry is added or removed.
/// `finish` binds the count in as well. Memory is constant whatever the number of entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyStreamDigest {
    /// Sum of the entry hashes as four little-endian u64 limbs (limb 0 least significant).
    sum: [u64; 4],
    count: u64,
}

impl KeyStreamDigest {
    /// An empty digest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one entry.
    pub fn fold(&mut self, entry: &ManifestEntry) {
        self.fold_encoded(&entry.encode());
    }

    /// Adds one entry given in its canonical encoding (as stored in manifest chunk rows).
    pub fn fold_encoded(&mut self, encoded: &str) {
        let hash: [u8; 32] = Sha256::digest(encoded.as_bytes()).into();
        self.add_hash(&hash);
        self.count = self.count.saturating_add(1);
    }

    /// Number of entries folded so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds every entry `other` holds: folding two multisets apart and merging gives the digest
    /// of their union, so a prefix's digest can be assembled from its chunks' partial sums.
    pub fn merge(&mut self, other: &KeyStreamDigest) {
        let mut bytes = [0u8; 32];
        for (limb_index, limb) in other.sum.iter().enumerate() {
            let start = 32 - 8 * (limb_index + 1);
            bytes[start..start + 8].copy_from_slice(&limb.to_be_bytes());
        }
        self.add_hash(&bytes);
        self.count = self.count.saturating_add(other.count);
    }

    /// The running sum as 64 lowercase hex digits (big-endian), the form a chunk row stores
    /// beside its entry count; [`KeyStreamDigest::from_partial_sum`] reads it back.
    pub fn partial_sum(&self) -> String {
        let mut out = String::with_capacity(64);
        for limb in self.sum.iter().rev() {
            out.push_str(&format!("{limb:016x}"));
        }
        out
    }

    /// The digest of `count` entries whose running sum is `sum` (as [`KeyStreamDigest::partial_sum`]
    /// writes it); `None` unless `sum` is exactly 64 lowercase hex digits.
    pub fn from_partial_sum(sum: &str, count: u64) -> Option<Self> {
        if sum.len() != 64
            || !sum
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        let mut limbs = [0u64; 4];
        for (index, limb) in limbs.iter_mut().enumerate() {
            // limb 0 is the least significant: the last 16 hex digits.
            let end = 64 - 16 * index;
            *limb = u64::from_str_radix(sum.get(end - 16..end)?, 16).ok()?;
        }
        Some(Self { sum: limbs, count })
    }

    /// The digest as lowercase hex (committing to both the sum and the count) and the count.
    pub fn finish(self) -> (String, u64) {
        let mut hasher = Sha256::new();
        hasher.update(DIGEST_DOMAIN);
        for limb in self.sum.iter().rev() {
            hasher.update(limb.to_be_bytes());
        }
        hasher.update(self.count.to_be_bytes());
        (hex::encode(hasher.finalize()), self.count)
    }

    /// `sum += hash (mod 2^256)`, reading `hash` as a big-endian 256-bit integer.
    fn add_hash(&mut self, hash: &[u8; 32]) {
        let mut carry = false;
        for (limb_index, limb) in self.sum.iter_mut().enumerate() {
            // limb 0 is the least significant, i.e. the last 8 bytes of the big-endian hash.
            let start = 32 - 8 * (limb_index + 1);
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&hash[start..start + 8]);
            let addend = u64::from_be_bytes(bytes);
            let (partial, overflow_a) = limb.overflowing_add(addend);
            let (total, overflow_b) = partial.overflowing_add(u64::from(carry));
            *limb = total;
            carry = overflow_a || overflow_b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "6f1c2e0a-5b3d-4c8e-9a7f-0123456789ab";
    const B: &str = "0b9e8d7c-6a5f-4e3d-8c2b-a1b2c3d4e5f6";

    fn a() -> Uuid {
        Uuid::parse_str(A).unwrap()
    }

    fn hash(seed: u8) -> String {
        hex::encode(Sha256::digest([seed]))
    }

    /// The encoding before it was written straight into a string: the reference spelling.
    fn encoded_through_value(a: &str, b: &str, c: &str) -> String {
        serde_json::json!([a, b, c]).to_string()
    }

    /// The ownership check before it compared segments: the reference answer.
    fn owned_by_formatted_prefixes(community: Uuid, key: &str) -> bool {
        PrefixRoot::ALL.into_iter().any(|root| {
            key.strip_prefix(&root.prefix(community))
                .is_some_and(|name| root.is_exact_object_name(name))
        })
    }

    /// Keys near and far from the tenant shapes: every root spelling, the id in either case or
    /// another community's, valid and broken names, missing and doubled slashes.
    fn key_near_the_shapes() -> impl Strategy<Value = String> {
        let root = prop_oneof![
            Just("media".to_owned()),
            Just("thumbs".to_owned()),
            Just("_meta".to_owned()),
            Just("Media".to_owned()),
            Just("".to_owned()),
            "[a-z_]{0,7}",
        ];
        let id = prop_oneof![
            Just(A.to_owned()),
            Just(A.to_uppercase()),
            Just(B.to_owned()),
            Just(A[..35].to_owned()),
            Just(String::new()),
        ];
        let name = prop_oneof![
            Just(hash(1)),
            Just(format!("{}.webp", hash(2))),
            Just(format!("{}.json", hash(3))),
            Just(format!("{}.jpg", hash(4))),
            Just(hash(5).to_uppercase()),
            Just(format!("{}/x", hash(6))),
            Just(hash(7)[..63].to_owned()),
            "\\PC{0,70}",
        ];
        let separator = prop_oneof![Just("/"), Just("//"), Just("")];
        (root, separator.clone(), id, separator, name)
            .prop_map(|(root, s1, id, s2, name)| format!("{root}{s1}{id}{s2}{name}"))
    }

    proptest! {
        #[test]
        fn the_encoding_is_byte_for_byte_the_value_spelling(
            a in "\\PC*|[\\x00-\\x1f\"\\\\/]{0,8}",
            b in "\\PC{0,40}",
            c in "[a-z_]{0,20}",
        ) {
            prop_assert_eq!(encode_triple(&a, &b, &c), encoded_through_value(&a, &b, &c));
        }

        #[test]
        fn decoding_answers_as_the_json_parser_does(
            encoded in prop_oneof![
                "\\PC{0,60}",
                ("\\PC{0,30}|[a-z\"\\\\,\\[\\]]{0,12}", "\\PC{0,20}", "object|delete_marker|[a-z_\"]{0,14}")
                    .prop_map(|(a, b, c)| encoded_through_value(&a, &b, &c)),
                ("[a-z/\",\\[\\] ]{0,30}").prop_map(|inner| format!("[\"{inner}\"]")),
            ],
        ) {
            let fast = ManifestEntry::decode(&encoded).map_err(|error| error.to_string());
            let reference = ManifestEntry::decode_escaped(&encoded).map_err(|error| error.to_string());
            prop_assert_eq!(fast, reference);
        }

        #[test]
        fn ownership_is_decided_as_by_the_formatted_prefixes(key in key_near_the_shapes()) {
            prop_assert_eq!(is_tenant_owned_key(a(), &key), owned_by_formatted_prefixes(a(), &key));
        }
    }

    #[test]
    fn near_canonical_spellings_decode_as_the_json_parser_decides() {
        for encoded in [
            r#"["media/a","v1","object"]"#,
            r#"["","","delete_marker"]"#,
            r#"["media/a","v1","object","extra"]"#,
            r#"["media/a","v1"]"#,
            r#"["media/a", "v1","object"]"#,
            r#"["media/a","v1","folder"]"#,
            r#"["media/a","v\1","object"]"#,
            r#"["media/a","v1","object"]"#,
            r#"["media/a","v1","object"] "#,
            r#"["media/a","v1",object]"#,
            r#"["a","b"],"object"]"#,
            "[\"tab\there\",\"v\",\"object\"]",
        ] {
            let fast = ManifestEntry::decode(encoded).map_err(|error| error.to_string());
            let reference = ManifestEntry::decode_escaped(encoded).map_err(|e| e.to_string());
            assert_eq!(fast, reference, "{encoded}");
        }
        assert!(ManifestEntry::decode(r#"["media/a","v1","object"]"#).is_ok());
        assert!(ManifestEntry::decode(r#"["media/a","v1","object","extra"]"#).is_err());
    }

    #[test]
    fn control_characters_quotes_and_non_ascii_encode_as_before() {
        for (key, version) in [
            ("media/a\"b", "v\\1"),
            ("tab\there\nnewline", "\u{0}\u{1f}\u{7f}"),
            ("ünïcödé/😀", "/slash/"),
            ("", ""),
        ] {
            assert_eq!(
                encode_triple(key, version, "object"),
                encoded_through_value(key, version, "object")
            );
        }
        let id = a();
        for root in PrefixRoot::ALL {
            let valid = format!("{}{}{}", root.prefix(id), hash(9), root.name_suffix());
            assert!(is_tenant_owned_key(id, &valid), "{valid}");
            assert!(!is_tenant_owned_key(id, &valid.replace(A, B)), "{valid}");
            assert!(!is_tenant_owned_key(
                id,
                &valid.replace(A, &A.to_uppercase())
            ));
        }
    }

    fn encoded_digest(entries: &[String]) -> KeyStreamDigest {
        let mut digest = KeyStreamDigest::new();
        for entry in entries {
            digest.fold_encoded(entry);
        }
        digest
    }

    proptest! {
        #[test]
        fn chunks_merged_give_the_digest_of_the_whole_and_the_stored_sum_reads_back(
            entries in proptest::collection::vec("[a-z0-9/]{1,12}", 0..40),
            cut in 0usize..40,
        ) {
            let cut = cut.min(entries.len());
            let (head, tail) = entries.split_at(cut);
            let mut merged = KeyStreamDigest::from_partial_sum(
                &encoded_digest(head).partial_sum(),
                head.len() as u64,
            )
            .unwrap_or_default();
            merged.merge(&encoded_digest(tail));
            prop_assert_eq!(merged.clone(), encoded_digest(&entries));
            prop_assert_eq!(merged.finish(), encoded_digest(&entries).finish());
        }
    }

    #[test]
    fn a_stored_sum_that_is_not_64_lowercase_hex_digits_is_refused() {
        let sum = encoded_digest(&["x".to_owned()]).partial_sum();
        assert_eq!(sum.len(), 64);
        assert!(KeyStreamDigest::from_partial_sum(&sum, 1).is_some());
        for bad in [
            sum.to_uppercase(),
            sum[1..].to_owned(),
            format!("{sum}0"),
            format!("+{}", &sum[1..]),
            String::new(),
        ] {
            if bad != sum {
                assert!(
                    KeyStreamDigest::from_partial_sum(&bad, 1).is_none(),
                    "{bad}"
                );
            }
        }
    }

    #[test]
    fn upload_encoding_is_unambiguous_and_never_a_version_encoding() {
        let key = format!("media/{A}/{}", hash(9));
        let upload = encode_upload(&key, "2~abc");
        assert_eq!(
            upload,
            format!("[\"{key}\",\"2~abc\",\"multipart_upload\"]")
        );
        for kind in [VersionKind::Object, VersionKind::DeleteMarker] {
            assert_ne!(
                upload,
                ManifestEntry::new(key.clone(), "2~abc", kind).encode()
            );
        }
        assert!(ManifestEntry::decode(&upload).is_err());
        assert_ne!(encode_upload("a\",\"b", "c"), encode_upload("a", "b\",\"c"));
    }

    #[test]
    fn upload_digest_is_order_independent_and_changes_with_each_upload() {
        let uploads = [("k1", "u1"), ("k1", "u2"), ("k2", "u1")];
        let digest_of = |order: &[(&str, &str)]| {
            let mut digest = KeyStreamDigest::new();
            for (key, id) in order {
                digest.fold_encoded(&encode_upload(key, id));
            }
            digest.finish()
        };
        let forward = digest_of(&uploads);
        let mut reversed = uploads;
        reversed.reverse();
        assert_eq!(forward, digest_of(&reversed));
        assert_eq!(forward.1, 3);
        assert_ne!(forward, digest_of(&uploads[..2]));
        assert_ne!(
            forward,
            digest_of(&[("k1", "u1"), ("k1", "u2"), ("k2", "u3")])
        );
    }

    #[test]
    fn tenant_prefixes_are_the_three_roots_with_the_lowercase_hyphenated_id() {
        let upper = Uuid::parse_str(&A.to_uppercase()).unwrap();
        assert_eq!(
            tenant_prefixes(upper),
            [
                format!("media/{A}/"),
                format!("thumbs/{A}/"),
                format!("_meta/{A}/"),
            ]
        );
    }

    #[test]
    fn exact_writer_shapes_are_tenant_owned() {
        let h = hash(1);
        for key in [
            format!("media/{A}/{h}"),
            format!("thumbs/{A}/{h}.webp"),
            format!("_meta/{A}/{h}.json"),
        ] {
            assert!(is_tenant_owned_key(a(), &key), "{key}");
        }
    }

    #[test]
    fn listed_adversarial_keys_are_not_tenant_owned() {
        let h = hash(2);
        let upper_a = A.to_uppercase();
        let upper_h = h.to_uppercase();
        for key in [
            format!("media/{A}-x/{h}"),
            format!("media/{A}/../{B}/{h}"),
            format!("media/{upper_a}/{h}"),
            format!("media/{B}/{h}"),
            format!("media/{A}/{h}x"),
            format!("media/{A}/{}", &h[1..]),
            format!("media/{A}/{h}0"),
            format!("media/{A}/{upper_h}"),
            format!("thumbs/{A}/{h}.webp.bak"),
            format!("thumbs/{A}/{h}"),
            format!("_meta/{A}/{h}"),
            format!("_meta/{A}/{h}.webp"),
            format!("/media/{A}/{h}"),
            format!("media//{A}/{h}"),
            format!("media/{A}//{h}"),
            format!("media/{A}/"),
            format!("media/{A}"),
            format!("Media/{A}/{h}"),
            format!("meta/{A}/{h}.json"),
            format!("media/{A}/sub/{h}"),
        ] {
            assert!(!is_tenant_owned_key(a(), &key), "{key}");
        }
    }

    #[test]
    fn classify_key_reports_exact_unknown_and_outside_shapes() {
        let h = hash(3);
        assert_eq!(
            classify_key(&format!("thumbs/{A}/{h}.webp")),
            KeyShape::Tenant {
                community: a(),
                root: PrefixRoot::Thumbs
            }
        );
        let unknown = KeyShape::UnknownUnderTenantPrefix { community: a() };
        assert_eq!(classify_key(&format!("thumbs/{A}/{h}.webp.bak")), unknown);
        assert_eq!(classify_key(&format!("media/{A}/")), unknown);
        assert_eq!(classify_key(&format!("media/{A}")), unknown);
        assert_eq!(classify_key(&format!("media/{A}//{h}")), unknown);
        assert_eq!(
            classify_key(&format!("media/{}/{h}", A.to_uppercase())),
            unknown
        );
        assert_eq!(classify_key(&format!("media/{A}-x/{h}")), KeyShape::Outside);
        assert_eq!(classify_key(&format!("/media/{A}/{h}")), KeyShape::Outside);
        assert_eq!(classify_key(&format!("media//{A}/{h}")), KeyShape::Outside);
        assert_eq!(classify_key(&format!("avatars/{A}/{h}")), KeyShape::Outside);
        let simple = a().simple().to_string();
        assert_eq!(
            classify_key(&format!("media/{simple}/{h}")),
            KeyShape::Outside
        );
        assert_eq!(classify_key("media"), KeyShape::Outside);
        assert_eq!(classify_key(""), KeyShape::Outside);
    }

    #[test]
    fn manifest_entry_encoding_is_a_compact_json_array() {
        let entry = ManifestEntry::new("media/x\n\"y\"", "v1", VersionKind::DeleteMarker);
        assert_eq!(entry.encode(), r#"["media/x\n\"y\"","v1","delete_marker"]"#);
    }

    #[test]
    fn manifest_entry_decode_rejects_non_canonical_and_unknown_kinds() {
        assert!(matches!(
            ManifestEntry::decode(r#"["k", "v", "object"]"#),
            Err(TaxonomyError::NonCanonicalManifestEntry { .. })
        ));
        assert!(matches!(
            ManifestEntry::decode(r#"["\u006b","v","object"]"#),
            Err(TaxonomyError::NonCanonicalManifestEntry { .. })
        ));
        assert!(matches!(
            ManifestEntry::decode(r#"["k","v","Object"]"#),
            Err(TaxonomyError::UnknownVersionKind { .. })
        ));
        assert!(matches!(
            ManifestEntry::decode(r#"["k","v"]"#),
            Err(TaxonomyError::MalformedManifestEntry { .. })
        ));
        assert!(matches!(
            ManifestEntry::decode("k v object"),
            Err(TaxonomyError::MalformedManifestEntry { .. })
        ));
    }

    #[test]
    fn empty_digest_is_stable_and_counts_zero() {
        let (first, count) = KeyStreamDigest::new().finish();
        assert_eq!(count, 0);
        assert_eq!(first, KeyStreamDigest::new().finish().0);
        assert_eq!(first.len(), 64);
    }

    #[test]
    fn digest_sum_carries_across_limbs() {
        let mut digest = KeyStreamDigest::new();
        digest.add_hash(&[0xff; 32]);
        digest.add_hash(&{
            let mut one = [0u8; 32];
            one[31] = 1;
            one
        });
        assert_eq!(digest.sum, [0, 0, 0, 0], "2^256 - 1 + 1 wraps to zero");
    }

    #[test]
    fn digest_distinguishes_a_duplicated_entry_from_a_single_one() {
        let entry = ManifestEntry::new("k", "v", VersionKind::Object);
        let mut once = KeyStreamDigest::new();
        once.fold(&entry);
        let mut twice = KeyStreamDigest::new();
        twice.fold(&entry);
        twice.fold(&entry);
        assert_ne!(once.finish().0, twice.finish().0);
    }

    fn digest_of(entries: &[ManifestEntry]) -> (String, u64) {
        let mut digest = KeyStreamDigest::new();
        for entry in entries {
            digest.fold(entry);
        }
        digest.finish()
    }

    fn any_entry() -> impl Strategy<Value = ManifestEntry> {
        ("\\PC{0,40}", "[a-zA-Z0-9._-]{0,32}", any::<bool>()).prop_map(
            |(key, version_id, marker)| {
                let kind = if marker {
                    VersionKind::DeleteMarker
                } else {
                    VersionKind::Object
                };
                ManifestEntry::new(key, version_id, kind)
            },
        )
    }

    fn any_uuid() -> impl Strategy<Value = Uuid> {
        any::<u128>().prop_map(Uuid::from_u128)
    }

    fn any_hash() -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<u8>(), 32).prop_map(hex::encode)
    }

    fn any_root() -> impl Strategy<Value = PrefixRoot> {
        prop::sample::select(PrefixRoot::ALL.to_vec())
    }

    fn exact_key(community: Uuid, root: PrefixRoot, h: &str) -> String {
        let suffix = match root {
            PrefixRoot::Media => "",
            PrefixRoot::Thumbs => ".webp",
            PrefixRoot::Meta => ".json",
        };
        format!("{}{h}{suffix}", root.prefix(community))
    }

    /// Keys built to look like `a`'s but break exactly one rule each.
    fn adversarial_key(a: Uuid) -> impl Strategy<Value = String> {
        let a_text = a.hyphenated().to_string();
        (
            any_root(),
            any_hash(),
            any_uuid(),
            0usize..16,
            "[a-zA-Z0-9./_-]{1,6}",
        )
            .prop_map(move |(root, h, other, mutation, junk)| {
                let exact = exact_key(a, root, &h);
                let r = root.as_str();
                let key = match mutation {
                    0 => format!("{r}/{a_text}-x/{h}"),
                    1 => format!("{r}/{a_text}/../{other}/{h}"),
                    2 => exact.replace(&a_text, &a_text.to_uppercase()),
                    3 => exact_key(other, root, &h),
                    4 => format!("{exact}{junk}"),
                    5 => exact.replacen(&h, &h[1..], 1),
                    6 => exact.replacen(&h, &format!("{h}0"), 1),
                    7 => exact.replacen(&h, &h.to_uppercase().replace('0', "A"), 1),
                    8 => format!("thumbs/{a_text}/{h}.webp.bak"),
                    9 => format!("_meta/{a_text}/{h}"),
                    10 => format!("/{exact}"),
                    11 => exact.replacen('/', "//", 1),
                    12 => format!("{}{junk}{h}", root.prefix(a)),
                    13 => format!("{junk}{exact}"),
                    14 => format!("{r}/{}/{h}", a.simple()),
                    _ => format!("{}{junk}/{h}", root.prefix(a)),
                };
                let exact_for_a = PrefixRoot::ALL.map(|root| exact_key(a, root, &h));
                (key, exact_for_a)
            })
            // A mutation can reproduce a genuine key by chance (an id with no letters upper-cased,
            // `other == a`); such a key is no attack, so it is dropped rather than asserted on.
            .prop_filter("mutation must change the key", |(key, exact_for_a)| {
                !exact_for_a.contains(key)
            })
            .prop_map(|(key, _)| key)
    }

    /// Keys assembled from tenant-looking parts, so that the structured cases are actually hit.
    fn prefix_like_key(a: Uuid) -> impl Strategy<Value = String> {
        let a_text = a.hyphenated().to_string();
        let roots = prop::sample::select(vec!["media", "thumbs", "_meta", "Media", "x", ""]);
        let ids = prop_oneof![
            Just(a_text.clone()),
            Just(a_text.to_uppercase()),
            any_uuid().prop_map(|u| u.hyphenated().to_string()),
            "[0-9a-fA-F-]{30,40}",
        ];
        let suffixes = prop::sample::select(vec!["", ".webp", ".json", ".webp.bak", "/x"]);
        let names = prop_oneof![
            (any_hash(), suffixes).prop_map(|(h, s)| format!("{h}{s}")),
            "[0-9a-fA-F./]{0,70}",
        ];
        (roots, ids, names).prop_map(|(root, id, name)| format!("{root}/{id}/{name}"))
    }

    proptest! {
        #[test]
        fn adversarial_variants_of_a_community_key_are_never_owned_by_it(
            (a, key) in any_uuid().prop_flat_map(|a| (Just(a), adversarial_key(a))),
        ) {
            prop_assert!(!is_tenant_owned_key(a, &key), "{key}");
            prop_assert!(
                !matches!(classify_key(&key), KeyShape::Tenant { community, .. } if community == a),
                "{key}"
            );
        }

        #[test]
        fn every_exact_shape_is_owned_and_classified_as_tenant(
            a in any_uuid(), root in any_root(), h in any_hash(),
        ) {
            let key = exact_key(a, root, &h);
            prop_assert!(is_tenant_owned_key(a, &key));
            prop_assert_eq!(classify_key(&key), KeyShape::Tenant { community: a, root });
        }

        #[test]
        fn ownership_and_classification_agree_on_arbitrary_keys(
            (a, key) in any_uuid().prop_flat_map(|a| (
                Just(a),
                prop_oneof![prefix_like_key(a), "\\PC{0,120}"],
            )),
        ) {
            let owned = is_tenant_owned_key(a, &key);
            let classified =
                matches!(classify_key(&key), KeyShape::Tenant { community, .. } if community == a);
            prop_assert_eq!(owned, classified);
        }

        #[test]
        fn manifest_entry_round_trips_arbitrary_strings(
            key in any::<String>(), version_id in any::<String>(), marker in any::<bool>(),
        ) {
            let kind = if marker { VersionKind::DeleteMarker } else { VersionKind::Object };
            let entry = ManifestEntry::new(key, version_id, kind);
            prop_assert_eq!(ManifestEntry::decode(&entry.encode()).unwrap(), entry);
        }

        #[test]
        fn digest_is_independent_of_listing_order(
            (entries, shuffled) in proptest::collection::vec(any_entry(), 0..40)
                .prop_flat_map(|entries| (Just(entries.clone()), Just(entries).prop_shuffle())),
        ) {
            prop_assert_eq!(digest_of(&entries), digest_of(&shuffled));
        }

        #[test]
        fn digest_changes_when_any_one_key_version_or_kind_changes(
            entries in proptest::collection::vec(any_entry(), 1..30),
            index in any::<prop::sample::Index>(),
            field in 0usize..3,
        ) {
            let mut changed = entries.clone();
            let target = &mut changed[index.index(entries.len())];
            match field {
                0 => target.key.push('~'),
                1 => target.version_id.push('~'),
                _ => {
                    target.kind = match target.kind {
                        VersionKind::Object => VersionKind::DeleteMarker,
                        VersionKind::DeleteMarker => VersionKind::Object,
                    }
                }
            }
            prop_assert_ne!(digest_of(&entries).0, digest_of(&changed).0);
        }
    }
}
