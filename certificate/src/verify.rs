//! Offline verification of a deletion certificate.
//!
//! [`verify_certificate`] works on the raw JSON of the certificate file, so that a changed
//! type, a removed member or an added member is reported as a problem at its JSON pointer
//! instead of failing to parse. It checks every link of the proof and collects ALL problems:
//!
//! 1. `/format` and `/receipt/format` are formats this verifier knows, and go together
//!    (certificate v1 with receipt v1, v2 with v2);
//! 2. every receipt leaf's digest equals its signed digest in `/field_digests` (a changed,
//!    added or removed receipt field is named by its pointer), and so does the whole-receipt
//!    digest (a change of shape only, array ↔ object, is reported at `/receipt`);
//! 3. the signature over the field digests verifies with the key named by `/signature/key_id`,
//!    which is `/receipt/key_id` and is in the [`KeyRing`];
//! 4. the receipt's counts agree ([`crate::receipt::check_counts`]); for v2, the chunk stamps the
//!    certificate carries (`/chunk_stamps`) hash to the count and Merkle root the receipt signs,
//!    each keeps the per-chunk rules, and they add up to the manifest's sums;
//! 5. `/log/receipt_digest` is the digest of this signed receipt, its inclusion proof at
//!    `/log/leaf_index` leads to the root of `/log/checkpoint`, and that checkpoint's
//!    signature verifies;
//! 6. the checkpoint extends an older checkpoint: the one the verifier kept (`older`), and/or the
//!    one in `/log/consistency`.
//!
//! Problems of a separately given older checkpoint are reported with the field prefix
//! [`OLDER_CHECKPOINT`] (it is not part of the certificate file).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::canonical::canonical_json;
use crate::certificate::{
    CERTIFICATE_FORMAT, CERTIFICATE_FORMAT_V1, SIGNATURE_ALGORITHM, WHOLE_RECEIPT,
    escape_pointer_token, exactly_representable, field_digests, leaves, receipt_digest,
    signed_message,
};
use crate::checkpoint::Checkpoint;
use crate::keys::KeyRing;
use crate::merkle;
use crate::receipt::{
    ChunkStamp, ManifestFacts, RECEIPT_FORMAT, RECEIPT_FORMAT_V1, Receipt, ReceiptKind, StampFold,
    Subject, check_counts,
};

/// Field prefix of problems found in the older checkpoint given to [`verify_certificate`].
pub const OLDER_CHECKPOINT: &str = "older checkpoint";

/// One thing wrong with a certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CertificateProblem {
    /// JSON pointer into the certificate file, e.g. `/receipt/purge/tables/0/rows`,
    /// `/signature/value`, `/log/inclusion_proof`, `/log/checkpoint/signature`.
    pub field: String,
    /// One line: what is wrong and what it means.
    pub problem: String,
}

impl fmt::Display for CertificateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for CertificateProblem {}

impl CertificateProblem {
    /// A problem at `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> CertificateProblem {
        CertificateProblem {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The same problem with `prefix` put before its field.
    pub fn prefixed(self, prefix: &str) -> CertificateProblem {
        CertificateProblem {
            field: format!("{prefix}{}", self.field),
            problem: self.problem,
        }
    }

    /// "signed by key id X, which is not among the public keys given".
    pub(crate) fn unknown_key(field: &str, key_id: &str, keys: &KeyRing) -> CertificateProblem {
        let given = keys.key_ids();
        let given = if given.is_empty() {
            "none".to_owned()
        } else {
            given.join(", ")
        };
        CertificateProblem::new(
            field,
            format!(
                "signed by key id {key_id}, which is not among the public keys given ({given}): pass the key that was current at signing time"
            ),
        )
    }
}

/// What a successfully verified certificate states (for a summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// The deletion request.
    pub request_id: Uuid,
    /// Community or user deletion.
    pub kind: ReceiptKind,
    /// What was deleted (community id and host, or the user commitment).
    pub subject: Subject,
    /// When the deletion completed.
    pub completed_at: String,
    /// Key id that signed the receipt.
    pub receipt_key_id: String,
    /// Key id that signed the log checkpoint.
    pub checkpoint_key_id: String,
    /// Size of the log at the checkpoint.
    pub tree_size: u64,
    /// The receipt's position in the log.
    pub leaf_index: u64,
    /// Tree size of the older checkpoint the log was shown to extend, if any.
    pub consistency_from: Option<u64>,
}

/// Collected problems.
#[derive(Default)]
struct Problems(Vec<CertificateProblem>);

impl Problems {
    fn push(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.0.push(CertificateProblem::new(field, problem));
    }
}

/// The members of a v1 certificate.
const TOP_MEMBERS_V1: &[&str] = &["format", "receipt", "field_digests", "signature", "log"];
/// The members of a v2 certificate: v1's and the chunk stamps.
const TOP_MEMBERS: &[&str] = &[
    "format",
    "receipt",
    "chunk_stamps",
    "field_digests",
    "signature",
    "log",
];
/// Where a v2 certificate carries its chunk stamps.
pub const CHUNK_STAMPS: &str = "/chunk_stamps";
const SIGNATURE_MEMBERS: &[&str] = &["algorithm", "key_id", "value"];
const LOG_MEMBERS: &[&str] = &[
    "leaf_index",
    "receipt_digest",
    "inclusion_proof",
    "checkpoint",
    "consistency",
];
const CHECKPOINT_MEMBERS: &[&str] = &[
    "origin",
    "tree_size",
    "root_hash",
    "signed_at",
    "key_id",
    "signature",
];
const CONSISTENCY_MEMBERS: &[&str] = &["from", "proof"];

/// Checks that `value` is an object with exactly the `names` members; reports missing and
/// added members at their pointers. Returns the object (even with members missing), or `None`
/// if `value` is absent (reported by the parent) or not an object (reported here).
fn members<'a>(
    value: Option<&'a Value>,
    at: &str,
    names: &[&str],
    problems: &mut Problems,
) -> Option<&'a Map<String, Value>> {
    // An absent member was reported by its parent's member check.
    let value = value?;
    let Some(object) = value.as_object() else {
        problems.push(at, "is not a JSON object");
        return None;
    };
    for name in names {
        if !object.contains_key(*name) {
            problems.push(format!("{at}/{name}"), "is missing");
        }
    }
    for name in object.keys() {
        if !names.contains(&name.as_str()) {
            problems.push(
                format!("{at}/{}", escape_pointer_token(name)),
                "is not a member of this certificate: it was added",
            );
        }
    }
    Some(object)
}

/// A member read as the type `read` accepts (its absence was reported by [`members`]); a
/// member of another type is a problem, `mistyped`.
fn get_as<'a, T>(
    object: &'a Map<String, Value>,
    at: &str,
    name: &str,
    problems: &mut Problems,
    (read, mistyped): (fn(&'a Value) -> Option<T>, &str),
) -> Option<T> {
    let value = read(object.get(name)?);
    if value.is_none() {
        problems.push(format!("{at}/{name}"), mistyped);
    }
    value
}

/// A string member.
fn get_str<'a>(
    object: &'a Map<String, Value>,
    at: &str,
    name: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    get_as(
        object,
        at,
        name,
        problems,
        (Value::as_str, "is not a string"),
    )
}

/// An unsigned integer member.
fn get_u64(
    object: &Map<String, Value>,
    at: &str,
    name: &str,
    problems: &mut Problems,
) -> Option<u64> {
    let unsigned = "is not a non-negative integer";
    get_as(object, at, name, problems, (Value::as_u64, unsigned))
}

/// An array-of-hashes member: every element 64 lowercase hex characters.
fn get_hashes(
    object: &Map<String, Value>,
    at: &str,
    name: &str,
    problems: &mut Problems,
) -> Option<Vec<String>> {
    let value = object.get(name)?;
    let Some(items) = value.as_array() else {
        problems.push(format!("{at}/{name}"), "is not an array");
        return None;
    };
    let mut hashes = Vec::with_capacity(items.len());
    let mut valid = true;
    for (i, item) in items.iter().enumerate() {
        match item.as_str().filter(|text| is_hash_hex(text)) {
            Some(text) => hashes.push(text.to_owned()),
            None => {
                problems.push(
                    format!("{at}/{name}/{i}"),
                    "is not a hash (64 lowercase hex characters)",
                );
                valid = false;
            }
        }
    }
    valid.then_some(hashes)
}

/// 64 lowercase hex characters: how every hash of a certificate and a checkpoint is written.
pub(crate) fn is_hash_hex(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A checkpoint object at `at`, checked member by member.
fn parse_checkpoint(
    value: Option<&Value>,
    at: &str,
    problems: &mut Problems,
) -> Option<Checkpoint> {
    let object = members(value, at, CHECKPOINT_MEMBERS, problems)?;
    let origin = get_str(object, at, "origin", problems);
    let tree_size = get_u64(object, at, "tree_size", problems);
    let root_hash = get_str(object, at, "root_hash", problems);
    let signed_at = get_str(object, at, "signed_at", problems);
    let key_id = get_str(object, at, "key_id", problems);
    let signature = get_str(object, at, "signature", problems);
    if let Some(root) = root_hash
        && !is_hash_hex(root)
    {
        problems.push(
            format!("{at}/root_hash"),
            "is not a hash (64 lowercase hex characters)",
        );
        return None;
    }
    Some(Checkpoint {
        origin: origin?.to_owned(),
        tree_size: tree_size?,
        root_hash: root_hash?.to_owned(),
        signed_at: signed_at?.to_owned(),
        key_id: key_id?.to_owned(),
        signature: signature?.to_owned(),
    })
}

/// Checks a checkpoint's signature, reporting under `at`.
fn check_checkpoint(
    checkpoint: &Checkpoint,
    at: &str,
    keys: &KeyRing,
    problems: &mut Problems,
) -> bool {
    match checkpoint.verify(keys) {
        Ok(()) => true,
        Err(problem) => {
            problems.0.push(problem.prefixed(at));
            false
        }
    }
}

/// A constant string member.
fn expect_format(value: Option<&Value>, at: &str, expected: &str, problems: &mut Problems) {
    match value {
        None => {} // reported as missing
        Some(Value::String(found)) if found == expected => {}
        Some(found) => problems.push(
            at,
            format!("is {found}, not {expected:?}: not a certificate this verifier understands"),
        ),
    }
}

/// Verifies a signed receipt as stored (`SignedReceipt::to_json`: `receipt`, `field_digests`,
/// `signature`) with the public keys in `keys`: the signature over the field digests, and every
/// receipt leaf against its digest. Empty when it verifies. What `certificate audit` checks of
/// the receipt a database holds, so a receipt rewritten consistently (digests recomputed) but
/// signed with any key outside `keys` is caught.
pub fn verify_signed_receipt(json: &Value, keys: &KeyRing) -> Vec<CertificateProblem> {
    let mut problems = Problems::default();
    let Some(top) = json.as_object() else {
        return vec![CertificateProblem::new(
            "",
            "is not a JSON object: not a signed receipt",
        )];
    };
    if check_signed_digests(top, keys, &mut problems).is_none() && problems.0.is_empty() {
        problems.push("/signature", "could not be checked");
    }
    problems.0
}

/// Verifies a certificate (the parsed JSON of the certificate file) with the public keys in
/// `keys`, and optionally against an `older` checkpoint the verifier kept. Returns what the
/// certificate states, or every problem found.
pub fn verify_certificate(
    json: &Value,
    keys: &KeyRing,
    older: Option<&Checkpoint>,
) -> Result<Verified, Vec<CertificateProblem>> {
    let mut problems = Problems::default();
    // A v1 certificate (of a v1 receipt) has no chunk stamps; any other format is checked as the
    // current one, and reported.
    let v1 = json.get("format").and_then(Value::as_str) == Some(CERTIFICATE_FORMAT_V1);
    let (names, receipt_format) = match v1 {
        true => (TOP_MEMBERS_V1, RECEIPT_FORMAT_V1),
        false => (TOP_MEMBERS, RECEIPT_FORMAT),
    };
    let Some(top) = members(Some(json), "", names, &mut problems) else {
        return Err(vec![CertificateProblem::new(
            "",
            "is not a JSON object: not a deletion certificate",
        )]);
    };
    if !v1 {
        expect_format(
            top.get("format"),
            "/format",
            CERTIFICATE_FORMAT,
            &mut problems,
        );
    }

    let receipt = check_receipt(top.get("receipt"), receipt_format, &mut problems);
    if let (false, Some(receipt)) = (v1, &receipt) {
        check_chunk_stamps(top.get("chunk_stamps"), &receipt.manifest, &mut problems);
    }
    let receipt_key_id = check_signed_digests(top, keys, &mut problems);
    if let Some(receipt) = &receipt {
        for problem in check_counts(receipt) {
            problems.0.push(problem.prefixed("/receipt"));
        }
    }
    let log = check_log(top, keys, older, &mut problems);

    match (problems.0.is_empty(), receipt, receipt_key_id, log) {
        (true, Some(receipt), Some(receipt_key_id), Some(log)) => Ok(Verified {
            request_id: receipt.request_id,
            kind: receipt.kind,
            subject: receipt.subject,
            completed_at: receipt.completed_at,
            receipt_key_id,
            checkpoint_key_id: log.checkpoint_key_id,
            tree_size: log.tree_size,
            leaf_index: log.leaf_index,
            consistency_from: log.consistency_from,
        }),
        (true, ..) => Err(vec![CertificateProblem::new(
            "",
            "could not be verified completely",
        )]),
        (false, ..) => Err(problems.0),
    }
}

/// Parses the receipt strictly and checks its format (the one `expected` of its certificate's
/// format) and number ranges.
fn check_receipt(
    value: Option<&Value>,
    expected: &str,
    problems: &mut Problems,
) -> Option<Receipt> {
    let value = value?;
    if let Some(object) = value.as_object() {
        expect_format(object.get("format"), "/receipt/format", expected, problems);
    }
    for (pointer, leaf) in leaves(value, "/receipt") {
        if !exactly_representable(leaf) {
            problems.push(
                pointer,
                "is an integer beyond 2^53, which the signed digests cannot pin down exactly",
            );
        }
    }
    match serde_json::from_value::<Receipt>(value.clone()) {
        Ok(receipt) => Some(receipt),
        Err(error) => {
            problems.push("/receipt", format!("is not a valid receipt: {error}"));
            None
        }
    }
}

/// Checks a v2 certificate's chunk stamps against its receipt's manifest: their count and
/// Merkle root are the signed ones (each stamp hashed as the JSON it is given, canonicalised),
/// each stamp keeps the per-chunk rules, and they add up to the manifest's sums. A changed,
/// added, removed or reordered stamp makes the root differ; the verifier cannot tell which
/// stamp from the root alone, so that is reported at `/chunk_stamps`.
fn check_chunk_stamps(value: Option<&Value>, manifest: &ManifestFacts, problems: &mut Problems) {
    let Some(value) = value else {
        return; // reported as missing
    };
    let Some(items) = value.as_array() else {
        problems.push(CHUNK_STAMPS, "is not an array");
        return;
    };
    let mut fold = StampFold::new(CHUNK_STAMPS);
    for (i, item) in items.iter().enumerate() {
        let at = format!("{CHUNK_STAMPS}/{i}");
        let leaf = match canonical_json(item) {
            Ok(leaf) => leaf,
            Err(error) => {
                problems.push(at, error.to_string());
                return;
            }
        };
        match serde_json::from_value::<ChunkStamp>(item.clone()) {
            Ok(stamp) => fold.push_leaf(&leaf, &stamp),
            Err(error) => fold.push_unreadable(
                &leaf,
                CertificateProblem::new(at, format!("is not a chunk stamp: {error}")),
            ),
        }
    }
    problems.0.extend(fold.problems().iter().cloned());
    let Some(signed) = &manifest.stamps else {
        return; // reported by the receipt's shape rule
    };
    let folded = fold.root();
    if folded.count != signed.count {
        problems.push(
            CHUNK_STAMPS,
            format!(
                "holds {} chunk stamps but the receipt signs {} (/receipt/manifest/stamps/count): stamps were added or removed after signing",
                folded.count, signed.count
            ),
        );
    } else if folded.merkle_root != signed.merkle_root {
        problems.push(
            CHUNK_STAMPS,
            format!(
                "the stamps hash to Merkle root {} but the receipt signs {} (/receipt/manifest/stamps/merkle_root): a stamp was changed or reordered after signing",
                folded.merkle_root, signed.merkle_root
            ),
        );
    }
    let (total, deleted, missing) = fold.sums();
    for (name, stated, summed) in [
        ("versions_total", manifest.versions_total, total),
        ("versions_deleted", manifest.versions_deleted, deleted),
        ("already_missing", manifest.already_missing, missing),
    ] {
        if stated != summed {
            problems.push(
                format!("/receipt/manifest/{name}"),
                format!("is {stated} but the chunk stamps add up to {summed}: the counts of the receipt disagree"),
            );
        }
    }
}

/// Checks the signature over the field digests and every receipt leaf against its digest.
/// Returns the receipt's key id when the signature verifies.
fn check_signed_digests(
    top: &Map<String, Value>,
    keys: &KeyRing,
    problems: &mut Problems,
) -> Option<String> {
    let receipt_json = top.get("receipt");
    let digests_json = top.get("field_digests");
    let signed = parse_field_digests(digests_json, problems);
    let signature = members(
        top.get("signature"),
        "/signature",
        SIGNATURE_MEMBERS,
        problems,
    );
    let signature_ok = match (digests_json, signature) {
        (Some(digests_json), Some(signature)) => {
            check_signature(digests_json, signature, receipt_json, keys, problems)
        }
        _ => None,
    };
    if let (Some(receipt_json), Some(signed)) = (receipt_json, &signed) {
        compare_digests(receipt_json, signed, signature_ok == Some(false), problems);
    }
    match signature_ok {
        Some(true) => signature
            .and_then(|s| s.get("key_id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// `/field_digests` as a map of pointer → digest.
fn parse_field_digests(
    value: Option<&Value>,
    problems: &mut Problems,
) -> Option<BTreeMap<String, String>> {
    let value = value?;
    let Some(object) = value.as_object() else {
        problems.push("/field_digests", "is not a JSON object");
        return None;
    };
    let mut digests = BTreeMap::new();
    for (pointer, digest) in object {
        match digest.as_str() {
            Some(digest) => {
                digests.insert(pointer.clone(), digest.to_owned());
            }
            None => problems.push(
                format!("/field_digests/{}", escape_pointer_token(pointer)),
                "is not a string",
            ),
        }
    }
    Some(digests)
}

/// Verifies the receipt signature. `Some(true)` verified, `Some(false)` does not verify,
/// `None` could not be checked (unknown key, malformed members).
fn check_signature(
    digests_json: &Value,
    signature: &Map<String, Value>,
    receipt_json: Option<&Value>,
    keys: &KeyRing,
    problems: &mut Problems,
) -> Option<bool> {
    let algorithm = get_str(signature, "/signature", "algorithm", problems);
    let key_id = get_str(signature, "/signature", "key_id", problems);
    let value = get_str(signature, "/signature", "value", problems);
    if let Some(algorithm) = algorithm
        && algorithm != SIGNATURE_ALGORITHM
    {
        problems.push(
            "/signature/algorithm",
            format!("is {algorithm:?}, not {SIGNATURE_ALGORITHM:?}"),
        );
    }
    let receipt_key_id = receipt_json
        .and_then(|r| r.get("key_id"))
        .and_then(Value::as_str);
    if let (Some(key_id), Some(receipt_key_id)) = (key_id, receipt_key_id)
        && key_id != receipt_key_id
    {
        problems.push(
            "/signature/key_id",
            format!("is {key_id} but the receipt names key {receipt_key_id}: the receipt and its signature do not belong together"),
        );
    }
    let key_id = key_id?;
    let value = value?;
    let Some(key) = keys.get(key_id) else {
        problems.0.push(CertificateProblem::unknown_key(
            "/signature/key_id",
            key_id,
            keys,
        ));
        return None;
    };
    let message = match signed_message(digests_json) {
        Ok(message) => message,
        Err(error) => {
            problems.push("/field_digests", error.to_string());
            return Some(false);
        }
    };
    match key.verify(&message, value) {
        Ok(()) => Some(true),
        Err(error) => {
            problems.push(
                "/signature/value",
                format!("{error}: the signature or the field digests were changed after signing"),
            );
            Some(false)
        }
    }
}

/// Compares every receipt leaf with its signed digest. When the signature does not verify,
/// the digests themselves are suspect, so a mismatch is reported at the digest's pointer.
fn compare_digests(
    receipt_json: &Value,
    signed: &BTreeMap<String, String>,
    signature_failed: bool,
    problems: &mut Problems,
) {
    let computed = match field_digests(receipt_json) {
        Ok(computed) => computed,
        Err(error) => {
            problems.push("/receipt", error.to_string());
            return;
        }
    };
    let at = |pointer: &str| {
        if signature_failed {
            format!("/field_digests/{}", escape_pointer_token(pointer))
        } else {
            format!("/receipt{pointer}")
        }
    };
    let before = problems.0.len();
    for (pointer, digest) in computed.iter().filter(|(p, _)| *p != WHOLE_RECEIPT) {
        match signed.get(pointer) {
            Some(signed_digest) if signed_digest == digest => {}
            Some(_) if signature_failed => problems.push(
                at(pointer),
                format!("does not match /receipt{pointer} and the signature does not verify: the digest or the field was changed after signing"),
            ),
            Some(_) => problems.push(
                at(pointer),
                "changed after signing: its digest does not match the signed digest",
            ),
            None if signature_failed => problems.push(
                at(pointer),
                format!("is missing although the receipt has /receipt{pointer}, and the signature does not verify: the digest was removed or the field added"),
            ),
            None => problems.push(
                at(pointer),
                "was added after signing: no signed digest covers it",
            ),
        }
    }
    for pointer in signed
        .keys()
        .filter(|p| *p != WHOLE_RECEIPT && !computed.contains_key(*p))
    {
        if signature_failed {
            problems.push(
                at(pointer),
                format!("names /receipt{pointer}, which the receipt does not have, and the signature does not verify: a digest was added or the field removed"),
            );
        } else {
            problems.push(
                at(pointer),
                "was removed after signing: the signed digests list it but the receipt does not have it",
            );
        }
    }
    // The whole-receipt digest; only worth a problem of its own when every field matched.
    if problems.0.len() == before && signed.get(WHOLE_RECEIPT) != computed.get(WHOLE_RECEIPT) {
        let problem = if signature_failed {
            "the digest of the whole receipt does not match it and the signature does not verify: the digest was changed after signing"
        } else {
            "its shape changed after signing: every field matches its digest, but the digest of the whole receipt does not (an array became an object or the reverse)"
        };
        problems.push(at(WHOLE_RECEIPT), problem);
    }
}

/// What the log section established.
struct LogFacts {
    checkpoint_key_id: String,
    tree_size: u64,
    leaf_index: u64,
    consistency_from: Option<u64>,
}

/// Checks `/log`: receipt digest, inclusion proof, checkpoint, consistency.
fn check_log(
    top: &Map<String, Value>,
    keys: &KeyRing,
    older: Option<&Checkpoint>,
    problems: &mut Problems,
) -> Option<LogFacts> {
    let before = problems.0.len();
    let log = members(top.get("log"), "/log", LOG_MEMBERS, problems)?;
    let leaf_index = get_u64(log, "/log", "leaf_index", problems);
    let stated_digest = get_str(log, "/log", "receipt_digest", problems);
    let inclusion = get_hashes(log, "/log", "inclusion_proof", problems);
    let checkpoint = parse_checkpoint(log.get("checkpoint"), "/log/checkpoint", problems);

    // The stated receipt digest is the digest of this certificate's signed receipt.
    let stated = stated_digest.and_then(|text| {
        let digest = is_hash_hex(text)
            .then(|| hex::decode(text).ok())
            .flatten()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
        if digest.is_none() {
            problems.push(
                "/log/receipt_digest",
                "is not a hash (64 lowercase hex characters)",
            );
        }
        digest
    });
    if let (Some(stated), Some(digests), Some(signature)) =
        (stated, top.get("field_digests"), top.get("signature"))
    {
        match receipt_digest(digests, signature) {
            Ok(computed) if computed == stated => {}
            Ok(computed) => problems.push(
                "/log/receipt_digest",
                format!(
                    "is not {}, the digest of this certificate's field digests and signature: the log entry is for another receipt, or the signature was changed",
                    hex::encode(computed)
                ),
            ),
            Err(error) => problems.push("/log/receipt_digest", error.to_string()),
        }
    }

    if let Some(checkpoint) = &checkpoint {
        check_checkpoint(checkpoint, "/log/checkpoint", keys, problems);
        if let (Some(index), Some(stated), Some(proof)) = (leaf_index, stated, &inclusion) {
            check_inclusion(checkpoint, index, &stated, proof, problems);
        }
    }

    let consistency_from = check_consistency(log, checkpoint.as_ref(), keys, older, problems);
    let checkpoint = checkpoint?;
    (problems.0.len() == before).then(|| LogFacts {
        checkpoint_key_id: checkpoint.key_id,
        tree_size: checkpoint.tree_size,
        leaf_index: leaf_index.unwrap_or_default(),
        consistency_from,
    })
}

fn check_inclusion(
    checkpoint: &Checkpoint,
    index: u64,
    digest: &[u8; 32],
    proof: &[String],
    problems: &mut Problems,
) {
    if index >= checkpoint.tree_size {
        problems.push(
            "/log/leaf_index",
            format!(
                "is {index}, outside the checkpoint's log of {} receipts",
                checkpoint.tree_size
            ),
        );
        return;
    }
    if let Err(error) = merkle::verify_inclusion(
        digest,
        index,
        checkpoint.tree_size,
        proof,
        &checkpoint.root_hash,
    ) {
        problems.push(
            "/log/inclusion_proof",
            format!("{error}: the receipt is not shown to be in the log the checkpoint signs (the proof, leaf_index or checkpoint was changed)"),
        );
    }
}

/// Checks `/log/consistency` and the older checkpoint; returns the tree size the log was
/// shown to extend.
fn check_consistency(
    log: &Map<String, Value>,
    checkpoint: Option<&Checkpoint>,
    keys: &KeyRing,
    older: Option<&Checkpoint>,
    problems: &mut Problems,
) -> Option<u64> {
    // The proof carried in the certificate, whether or not an older checkpoint was given.
    let carried = match log.get("consistency") {
        None | Some(Value::Null) => None,
        Some(value) => members(
            Some(value),
            "/log/consistency",
            CONSISTENCY_MEMBERS,
            problems,
        )
        .and_then(|object| {
            let from = parse_checkpoint(object.get("from"), "/log/consistency/from", problems);
            let proof = get_hashes(object, "/log/consistency", "proof", problems);
            Some((from?, proof?))
        }),
    };
    let mut shown_from = None;
    if let (Some((from, proof)), Some(checkpoint)) = (&carried, checkpoint)
        && check_checkpoint(from, "/log/consistency/from", keys, problems)
    {
        match merkle::verify_consistency(
            from.tree_size,
            &from.root_hash,
            checkpoint.tree_size,
            &checkpoint.root_hash,
            proof,
        ) {
            Ok(()) => shown_from = Some(from.tree_size),
            Err(error) => problems.push(
                "/log/consistency/proof",
                format!("the log was rewritten since the older checkpoint: a receipt was removed or changed ({error})"),
            ),
        }
    }

    let (Some(older), Some(checkpoint)) = (older, checkpoint) else {
        return shown_from;
    };
    if let Err(problem) = older.verify(keys) {
        problems.0.push(problem.prefixed(OLDER_CHECKPOINT));
        return None;
    }
    if older.tree_size > checkpoint.tree_size {
        problems.push(
            "/log/checkpoint/tree_size",
            format!(
                "is {}, smaller than the older checkpoint's {}: the log shrank (it was rewritten), or this certificate was exported before the older checkpoint: export it again",
                checkpoint.tree_size, older.tree_size
            ),
        );
        return None;
    }
    if older.tree_size == checkpoint.tree_size {
        if older.root_hash != checkpoint.root_hash {
            problems.push(
                "/log/checkpoint/root_hash",
                "differs from the older checkpoint of the same size: the log was rewritten since the older checkpoint: a receipt was removed or changed",
            );
            return None;
        }
        return Some(older.tree_size);
    }
    match &carried {
        None => {
            if log.get("consistency").is_some_and(Value::is_null) {
                problems.push(
                    "/log/consistency",
                    format!(
                        "carries no consistency proof from tree size {}: export it again with --checkpoint OLD",
                        older.tree_size
                    ),
                );
            }
            None
        }
        Some((from, _))
            if from.tree_size != older.tree_size || from.root_hash != older.root_hash =>
        {
            problems.push(
                "/log/consistency/from",
                format!(
                    "is the checkpoint of tree size {}, not the older checkpoint given (tree size {}): export it again with --checkpoint OLD",
                    from.tree_size, older.tree_size
                ),
            );
            None
        }
        Some(_) => shown_from,
    }
}

#[cfg(test)]
mod tests;
