//! The exported certificate: the receipt, its per-field digests, the signature, and the proof
//! that the signed receipt is in the transparency log.
//!
//! # Field digests
//!
//! In the manner of SD-JWT's per-claim digests, every leaf of the receipt's JSON (each scalar,
//! and each empty array or object) at RFC 6901 JSON pointer `p` gets its own digest:
//!
//! ```text
//! field_digests[p] = hex( SHA-256( JCS( [p, value] ) ) )      e.g. JCS(["/purge/rows_total",1239])
//! ```
//!
//! plus one entry at the root pointer `""` over the whole receipt,
//! `field_digests[""] = hex(SHA-256(JCS(["", receipt])))`. RFC 6901 pointers do not tell an
//! array from an object with members "0", "1", … (`["a"]` and `{"0": "a"}` have the same leaf
//! pointers); the whole-receipt digest pins that shape, while the per-leaf digests name the
//! field that changed.
//!
//! The Ed25519 signature covers `JCS(field_digests)` (the object of pointer → digest). A
//! verifier recomputes each leaf's digest from the receipt it was given and compares with the
//! signed one, so a change is reported by the field that changed, not just as "bad signature".
//!
//! # Receipt digest (the log leaf)
//!
//! `receipt_digest = SHA-256( JCS( {"field_digests": …, "signature": {"algorithm", "key_id",
//! "value"}} ) )`, 32 raw bytes (hex in JSON). It is the leaf appended to the transparency log.
//!
//! Integers beyond 2^53 cannot be represented exactly in canonical JSON and are refused when
//! signing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::canonical::{CanonicalError, canonical_bytes, canonical_json, sha256, sha256_hex};
use crate::checkpoint::Checkpoint;
use crate::keys::ReceiptSigningKey;
use crate::receipt::{ChunkStamp, RECEIPT_FORMAT, RECEIPT_FORMAT_V1, RECEIPT_FORMATS, Receipt};

/// The `format` of a certificate of a v2 receipt: it carries the chunk stamps (`chunk_stamps`)
/// the receipt states by their Merkle root.
pub const CERTIFICATE_FORMAT: &str = "buzz-deletion-certificate/v2";

/// The `format` of a certificate of a v1 receipt (whose manifest lists the stamps itself).
pub const CERTIFICATE_FORMAT_V1: &str = "buzz-deletion-certificate/v1";

/// The certificate format that goes with a receipt format.
pub fn certificate_format_for(receipt_format: &str) -> Option<&'static str> {
    match receipt_format {
        RECEIPT_FORMAT_V1 => Some(CERTIFICATE_FORMAT_V1),
        RECEIPT_FORMAT => Some(CERTIFICATE_FORMAT),
        _ => None,
    }
}

/// The only signature algorithm.
pub const SIGNATURE_ALGORITHM: &str = "ed25519";

/// Largest integer canonical JSON represents exactly (2^53).
const EXACT_INTEGER_LIMIT: u64 = 1 << 53;

/// The exported deletion certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    /// [`CERTIFICATE_FORMAT`], or [`CERTIFICATE_FORMAT_V1`] for a v1 receipt.
    pub format: String,
    /// The signed receipt.
    pub receipt: Receipt,
    /// v2: every chunk stamp, in chunk order, whose count and Merkle root the receipt signs
    /// (`/receipt/manifest/stamps`). Absent from a v1 certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_stamps: Option<Vec<ChunkStamp>>,
    /// JSON pointer of every receipt leaf → its digest.
    pub field_digests: BTreeMap<String, String>,
    /// The signature over the field digests.
    pub signature: ReceiptSignature,
    /// The transparency-log proof.
    pub log: LogProof,
}

/// The signature of a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptSignature {
    /// Always `ed25519`.
    pub algorithm: String,
    /// Key id of the signing key.
    pub key_id: String,
    /// Standard base64 Ed25519 signature over `JCS(field_digests)`.
    pub value: String,
}

/// Where the receipt is in the transparency log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogProof {
    /// Leaf index of the receipt digest.
    pub leaf_index: u64,
    /// The receipt digest, 64 lowercase hex.
    pub receipt_digest: String,
    /// RFC 6962 inclusion proof against `checkpoint`.
    pub inclusion_proof: Vec<String>,
    /// The signed log head the proof is against.
    pub checkpoint: Checkpoint,
    /// Proof that `checkpoint` extends an older checkpoint (written as `null` when absent;
    /// the member itself is required).
    #[serde(deserialize_with = "present_option")]
    pub consistency: Option<ConsistencyProof>,
}

/// A consistency proof from an older checkpoint to the certificate's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyProof {
    /// The older checkpoint.
    pub from: Checkpoint,
    /// RFC 6962 consistency proof from `from` to the certificate's checkpoint.
    pub proof: Vec<String>,
}

/// A receipt with its field digests and signature, before it is placed in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedReceipt {
    /// The receipt.
    pub receipt: Receipt,
    /// JSON pointer of every receipt leaf → its digest.
    pub field_digests: BTreeMap<String, String>,
    /// The signature over the field digests.
    pub signature: ReceiptSignature,
}

/// Deserializes an `Option` whose member must be present (as `null` or a value).
fn present_option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// Signing, encoding or loading failed.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// Canonical JSON encoding failed.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// The receipt names another key than the one signing it.
    #[error("the receipt names key {receipt_key_id} but is being signed with key {key_id}")]
    KeyMismatch {
        /// `receipt.key_id`.
        receipt_key_id: String,
        /// The signing key's id.
        key_id: String,
    },
    /// The receipt has a format this crate does not know ([`RECEIPT_FORMATS`]).
    #[error("the receipt format is {found:?}, not one of {RECEIPT_FORMATS:?}")]
    WrongFormat {
        /// The format found.
        found: String,
    },
    /// An integer too large for canonical JSON.
    #[error(
        "{pointer} holds an integer beyond 2^53, which canonical JSON cannot represent exactly"
    )]
    Unrepresentable {
        /// JSON pointer of the value.
        pointer: String,
    },
    /// A value could not be turned into JSON.
    #[error("cannot encode {what} as JSON: {reason}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// serde_json's reason.
        reason: String,
    },
    /// JSON that is not the expected document.
    #[error("{what} is not valid: {reason}")]
    Parse {
        /// What was being read.
        what: String,
        /// serde_json's reason.
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Escapes one member name for an RFC 6901 JSON pointer.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Every leaf (scalar, empty array, empty object) of `value` with its RFC 6901 pointer, in
/// document order. `prefix` is the pointer of `value` itself ("" for the root).
pub fn leaves<'a>(value: &'a Value, prefix: &str) -> Vec<(String, &'a Value)> {
    let mut out = Vec::new();
    let mut pointer = prefix.to_owned();
    let collected: Result<(), std::convert::Infallible> =
        visit_leaves(value, &mut pointer, &mut |pointer, leaf| {
            out.push((pointer.to_owned(), leaf));
            Ok(())
        });
    let Ok(()) = collected;
    out
}

/// Calls `visit` with every leaf of `value` and its pointer (`pointer` is `value`'s own on
/// entry, and again on return), in document order; stops at the first error.
fn visit_leaves<'a, E>(
    value: &'a Value,
    pointer: &mut String,
    visit: &mut impl FnMut(&str, &'a Value) -> Result<(), E>,
) -> Result<(), E> {
    let length = pointer.len();
    match value {
        Value::Object(members) if !members.is_empty() => {
            for (name, member) in members {
                pointer.push('/');
                pointer.push_str(&escape_pointer_token(name));
                visit_leaves(member, pointer, visit)?;
                pointer.truncate(length);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                pointer.push('/');
                pointer.push_str(&i.to_string());
                visit_leaves(item, pointer, visit)?;
                pointer.truncate(length);
            }
        }
        _ => visit(pointer, value)?,
    }
    Ok(())
}

/// Whether canonical JSON represents this value exactly (integers up to 2^53).
pub(crate) fn exactly_representable(value: &Value) -> bool {
    match value {
        Value::Number(number) => match (number.as_u64(), number.as_i64()) {
            (Some(n), _) => n <= EXACT_INTEGER_LIMIT,
            (None, Some(n)) => n.unsigned_abs() <= EXACT_INTEGER_LIMIT,
            (None, None) => true,
        },
        _ => true,
    }
}

/// The digest of one leaf: hex SHA-256 of `JCS([pointer, value])`.
pub fn leaf_digest(pointer: &str, value: &Value) -> Result<String, CanonicalError> {
    let pair = Value::Array(vec![Value::String(pointer.to_owned()), value.clone()]);
    Ok(sha256_hex(&canonical_json(&pair)?))
}

/// The pointer of the whole receipt in [`field_digests`]: RFC 6901's root pointer, the empty
/// string.
pub const WHOLE_RECEIPT: &str = "";

/// The field digests of a receipt's JSON (pointers relative to the receipt): one per leaf, plus
/// one at [`WHOLE_RECEIPT`] (`""`) over the whole receipt, which pins its shape. Pointers alone
/// do not tell `["a"]` from `{"0": "a"}`; the whole-receipt digest does.
pub fn field_digests(receipt_json: &Value) -> Result<BTreeMap<String, String>, CanonicalError> {
    let mut digests = BTreeMap::new();
    visit_leaves(receipt_json, &mut String::new(), &mut |pointer, value| {
        digests.insert(pointer.to_owned(), leaf_digest(pointer, value)?);
        Ok::<(), CanonicalError>(())
    })?;
    digests.insert(
        WHOLE_RECEIPT.to_owned(),
        leaf_digest(WHOLE_RECEIPT, receipt_json)?,
    );
    Ok(digests)
}

/// The bytes the receipt signature covers: `JCS(field_digests)`.
pub fn signed_message(field_digests: &Value) -> Result<Vec<u8>, CanonicalError> {
    canonical_json(field_digests)
}

/// The receipt digest (log leaf) from the JSON of the field digests and the signature.
pub fn receipt_digest(
    field_digests: &Value,
    signature: &Value,
) -> Result<[u8; 32], CanonicalError> {
    let mut object = serde_json::Map::new();
    object.insert("field_digests".to_owned(), field_digests.clone());
    object.insert("signature".to_owned(), signature.clone());
    Ok(sha256(&canonical_json(&Value::Object(object))?))
}

fn to_value<T: Serialize>(value: &T, what: &'static str) -> Result<Value, CertificateError> {
    serde_json::to_value(value).map_err(|error| CertificateError::Encode {
        what,
        reason: error.to_string(),
    })
}

/// Computes the field digests of `receipt` and signs them with `key`. The receipt must name
/// `key` (`receipt.key_id == key.key_id()`) and have a known format ([`RECEIPT_FORMATS`]; the
/// worker issues [`RECEIPT_FORMAT`]).
///
/// This does not run [`crate::receipt::check_counts`]; the caller should, before signing.
pub fn sign_receipt(
    receipt: Receipt,
    key: &ReceiptSigningKey,
) -> Result<SignedReceipt, CertificateError> {
    let key_id = key.key_id();
    if receipt.key_id != key_id {
        return Err(CertificateError::KeyMismatch {
            receipt_key_id: receipt.key_id,
            key_id,
        });
    }
    if !RECEIPT_FORMATS.contains(&receipt.format.as_str()) {
        return Err(CertificateError::WrongFormat {
            found: receipt.format,
        });
    }
    let receipt_json = to_value(&receipt, "the receipt")?;
    if let Some((pointer, _)) = leaves(&receipt_json, "")
        .into_iter()
        .find(|(_, value)| !exactly_representable(value))
    {
        return Err(CertificateError::Unrepresentable { pointer });
    }
    let field_digests = field_digests(&receipt_json)?;
    // The receipt's JSON tree is the largest thing here; it is not needed past its digests.
    drop(receipt_json);
    // `signed_message` of the digests' JSON, encoded straight from the map.
    let message = canonical_bytes(&field_digests)?;
    let signature = ReceiptSignature {
        algorithm: SIGNATURE_ALGORITHM.to_owned(),
        key_id,
        value: key.sign(&message),
    };
    Ok(SignedReceipt {
        receipt,
        field_digests,
        signature,
    })
}

impl SignedReceipt {
    /// The receipt digest: the leaf this receipt adds to the transparency log.
    pub fn digest(&self) -> Result<[u8; 32], CertificateError> {
        /// What [`receipt_digest`] hashes, borrowed: no copy of the field digests is built.
        #[derive(Serialize)]
        struct Digested<'a> {
            field_digests: &'a BTreeMap<String, String>,
            signature: &'a ReceiptSignature,
        }
        let digested = Digested {
            field_digests: &self.field_digests,
            signature: &self.signature,
        };
        Ok(sha256(&canonical_bytes(&digested)?))
    }

    /// The JSON to store (e.g. in a `jsonb` column); [`SignedReceipt::from_json`] reads it back.
    pub fn to_json(&self) -> Result<Value, CertificateError> {
        to_value(self, "the signed receipt")
    }

    /// Reads a signed receipt written by [`SignedReceipt::to_json`], refusing unknown members.
    /// Member order and whitespace do not matter (everything signed is canonical JSON).
    pub fn from_json(value: &Value) -> Result<Self, CertificateError> {
        serde_json::from_value(value.clone()).map_err(|error| CertificateError::Parse {
            what: "the signed receipt".to_owned(),
            reason: error.to_string(),
        })
    }
}

/// Builds the certificate of a signed receipt placed at `leaf_index` of the log, with its
/// inclusion proof against `checkpoint`, optionally a consistency proof from an older
/// checkpoint, and (v2) the chunk stamps the receipt states by their root. The format follows
/// the receipt's: a v1 receipt's certificate carries no `chunk_stamps`, whatever is given.
pub fn assemble(
    signed: SignedReceipt,
    leaf_index: u64,
    inclusion_proof: Vec<String>,
    checkpoint: Checkpoint,
    consistency: Option<ConsistencyProof>,
    chunk_stamps: Option<Vec<ChunkStamp>>,
) -> Result<Certificate, CertificateError> {
    let receipt_digest = hex::encode(signed.digest()?);
    let format = certificate_format_for(&signed.receipt.format).ok_or_else(|| {
        CertificateError::WrongFormat {
            found: signed.receipt.format.clone(),
        }
    })?;
    let chunk_stamps = chunk_stamps.filter(|_| format == CERTIFICATE_FORMAT);
    Ok(Certificate {
        format: format.to_owned(),
        receipt: signed.receipt,
        chunk_stamps,
        field_digests: signed.field_digests,
        signature: signed.signature,
        log: LogProof {
            leaf_index,
            receipt_digest,
            inclusion_proof,
            checkpoint,
            consistency,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ReceiptSigningKey;
    use crate::receipt::tests::sample_receipt;
    use serde_json::json;

    #[test]
    fn field_digests_cover_every_leaf_with_escaped_pointers() {
        let value =
            json!({"a": {"b/c": 1, "d~e": [true, null]}, "empty": {}, "none": [], "s": "x"});
        let digests = field_digests(&value).unwrap();
        let pointers: Vec<&str> = digests.keys().map(String::as_str).collect();
        assert_eq!(
            pointers,
            [
                "",
                "/a/b~1c",
                "/a/d~0e/0",
                "/a/d~0e/1",
                "/empty",
                "/none",
                "/s"
            ]
        );
        assert_eq!(
            digests[""],
            sha256_hex(&canonical_json(&json!(["", value])).unwrap()),
            "the whole-receipt digest"
        );
        // Same leaf pointers, different shape: only the whole-receipt digest differs.
        let array = field_digests(&json!({"a": ["x"]})).unwrap();
        let object = field_digests(&json!({"a": {"0": "x"}})).unwrap();
        assert_eq!(array["/a/0"], object["/a/0"]);
        assert_ne!(array[""], object[""]);
        for (pointer, digest) in &digests {
            let leaf = value.pointer(pointer).unwrap();
            assert_eq!(leaf_digest(pointer, leaf).unwrap(), *digest);
        }
        assert_eq!(
            digests["/a/b~1c"],
            sha256_hex(br#"["/a/b~1c",1]"#),
            "digest = SHA-256 of the canonical JSON of [pointer, value]"
        );
        assert_eq!(digests["/empty"], sha256_hex(br#"["/empty",{}]"#));
    }

    #[test]
    fn signing_checks_the_key_and_the_digest_is_stable_through_jsonb_like_reordering() {
        let key = ReceiptSigningKey::generate().unwrap();
        let other = ReceiptSigningKey::generate().unwrap();
        let receipt = sample_receipt(&key.key_id());
        assert!(matches!(
            sign_receipt(receipt.clone(), &other),
            Err(CertificateError::KeyMismatch { .. })
        ));
        let mut wrong_format = receipt.clone();
        wrong_format.format = "v0".to_owned();
        assert!(matches!(
            sign_receipt(wrong_format, &key),
            Err(CertificateError::WrongFormat { .. })
        ));
        let mut huge = receipt.clone();
        huge.inventory.object_bytes = (1 << 53) + 1;
        assert!(matches!(
            sign_receipt(huge, &key),
            Err(CertificateError::Unrepresentable { pointer }) if pointer == "/inventory/object_bytes"
        ));

        let signed = sign_receipt(receipt, &key).unwrap();
        let message =
            signed_message(&serde_json::to_value(&signed.field_digests).unwrap()).unwrap();
        key.public_key()
            .verify(&message, &signed.signature.value)
            .unwrap();
        // The digest, encoded straight from the struct, is the documented one of the JSON.
        assert_eq!(
            signed.digest().unwrap(),
            receipt_digest(
                &serde_json::to_value(&signed.field_digests).unwrap(),
                &serde_json::to_value(&signed.signature).unwrap()
            )
            .unwrap()
        );
        assert_eq!(signed.signature.algorithm, "ed25519");
        assert!(signed.field_digests.contains_key("/purge/tables/1/rows"));
        assert!(signed.field_digests.contains_key("/verification/checked"));

        // Stored as text with another member order (as jsonb would), read back: same digest.
        let text = signed.to_json().unwrap().to_string();
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        let back = SignedReceipt::from_json(&reparsed).unwrap();
        assert_eq!(back, signed);
        assert_eq!(back.digest().unwrap(), signed.digest().unwrap());
        let mut extra = reparsed.clone();
        extra["note"] = json!("x");
        assert!(SignedReceipt::from_json(&extra).is_err());
    }

    #[test]
    fn certificate_requires_the_consistency_member() {
        let key = ReceiptSigningKey::generate().unwrap();
        let signed = sign_receipt(sample_receipt(&key.key_id()), &key).unwrap();
        let leaf = signed.digest().unwrap();
        let root = crate::merkle::root(&[leaf]);
        let checkpoint = Checkpoint::sign(&key, 1, root, chrono::Utc::now()).unwrap();
        let certificate = assemble(signed, 0, vec![], checkpoint, None, None).unwrap();
        assert_eq!(certificate.log.receipt_digest, hex::encode(leaf));
        let value = serde_json::to_value(&certificate).unwrap();
        assert_eq!(value["log"]["consistency"], Value::Null);
        assert_eq!(
            serde_json::from_value::<Certificate>(value.clone()).unwrap(),
            certificate
        );
        let mut missing = value;
        missing["log"]
            .as_object_mut()
            .unwrap()
            .remove("consistency");
        assert!(serde_json::from_value::<Certificate>(missing).is_err());
    }
}
