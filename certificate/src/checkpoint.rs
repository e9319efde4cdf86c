//! Checkpoints: signed heads of the transparency log.
//!
//! A checkpoint states "the log of origin [`LOG_ORIGIN`] had `tree_size` receipts with root
//! `root_hash` at `signed_at`", signed with Ed25519 by the key `key_id`. The signature covers the
//! RFC 8785 canonical JSON of the checkpoint object without its `signature` member:
//!
//! ```text
//! {"key_id":"ed25519:…","origin":"buzz-deletion/transparency-log/v1","root_hash":"<64 hex>",
//!  "signed_at":"<canonical::timestamp>","tree_size":<n>}
//! ```
//!
//! A verifier who kept an older checkpoint can demand a consistency proof from it to a newer
//! one: if the log operator removed or changed any receipt in between, no such proof exists.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::canonical::{canonical_json, parse_timestamp, timestamp};
use crate::certificate::CertificateError;
use crate::keys::{KeyRing, ReceiptSigningKey};
use crate::verify::{CertificateProblem, is_hash_hex};

/// The origin line of our transparency log (distinguishes it from every other log).
pub const LOG_ORIGIN: &str = "buzz-deletion/transparency-log/v1";

/// A signed tree head of the transparency log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Always [`LOG_ORIGIN`].
    pub origin: String,
    /// Number of receipts in the log.
    pub tree_size: u64,
    /// RFC 6962 root hash of the log, 64 lowercase hex.
    pub root_hash: String,
    /// When it was signed ([`crate::canonical::timestamp`]).
    pub signed_at: String,
    /// Key id of the signing key.
    pub key_id: String,
    /// Standard base64 Ed25519 signature over the canonical JSON of the other members.
    pub signature: String,
}

impl Checkpoint {
    /// Signs the log head `tree_size` / `root_hash` at `signed_at`.
    pub fn sign(
        key: &ReceiptSigningKey,
        tree_size: u64,
        root_hash: impl Into<String>,
        signed_at: DateTime<Utc>,
    ) -> Result<Checkpoint, CertificateError> {
        let mut checkpoint = Checkpoint {
            origin: LOG_ORIGIN.to_owned(),
            tree_size,
            root_hash: root_hash.into(),
            signed_at: timestamp(signed_at),
            key_id: key.key_id(),
            signature: String::new(),
        };
        checkpoint.signature = key.sign(&checkpoint.signed_message()?);
        Ok(checkpoint)
    }

    /// The bytes the signature covers: canonical JSON of every member but `signature`.
    pub fn signed_message(&self) -> Result<Vec<u8>, CertificateError> {
        let body = serde_json::json!({
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash,
            "signed_at": self.signed_at,
            "key_id": self.key_id,
        });
        Ok(canonical_json(&body)?)
    }

    /// Checks origin, form and signature. The problem's `field` is a JSON pointer relative to
    /// the checkpoint object (`/signature`, `/key_id`, …).
    pub fn verify(&self, keys: &KeyRing) -> Result<(), CertificateProblem> {
        if self.origin != LOG_ORIGIN {
            return Err(CertificateProblem::new(
                "/origin",
                format!(
                    "is {:?}, not {LOG_ORIGIN:?}: this is not a checkpoint of the deletion transparency log",
                    self.origin
                ),
            ));
        }
        if !is_hash_hex(&self.root_hash) {
            return Err(CertificateProblem::new(
                "/root_hash",
                "is not a hash (64 lowercase hex characters)",
            ));
        }
        if let Err(error) = parse_timestamp(&self.signed_at) {
            return Err(CertificateProblem::new("/signed_at", error.to_string()));
        }
        let Some(key) = keys.get(&self.key_id) else {
            return Err(CertificateProblem::unknown_key(
                "/key_id",
                &self.key_id,
                keys,
            ));
        };
        let message = self
            .signed_message()
            .map_err(|error| CertificateProblem::new("/signature", error.to_string()))?;
        key.verify(&message, &self.signature).map_err(|error| {
            CertificateProblem::new(
                "/signature",
                format!(
                    "{error} (the checkpoint's origin, tree_size, root_hash, signed_at or key_id was changed after signing)"
                ),
            )
        })
    }

    /// Reads a checkpoint JSON file (as written by `serde_json`), refusing unknown members.
    pub fn read_file(path: &Path) -> Result<Checkpoint, CertificateError> {
        let text = std::fs::read_to_string(path).map_err(|source| CertificateError::Io {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|error| CertificateError::Parse {
            what: format!("checkpoint file {}", path.display()),
            reason: error.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ReceiptSigningKey;
    use chrono::TimeZone;

    fn signed_at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 22, 0, 0).unwrap()
    }

    #[test]
    fn signed_checkpoint_verifies_and_every_member_is_covered() {
        let key = ReceiptSigningKey::generate().unwrap();
        let ring = KeyRing::new(vec![key.public_key()]);
        let root = "ab".repeat(32);
        let checkpoint = Checkpoint::sign(&key, 7, root.clone(), signed_at()).unwrap();
        assert_eq!(checkpoint.origin, LOG_ORIGIN);
        assert_eq!(checkpoint.signed_at, "2026-11-30T22:00:00.000000Z");
        assert_eq!(checkpoint.key_id, key.key_id());
        checkpoint.verify(&ring).unwrap();

        type Change = fn(&mut Checkpoint);
        let changes: [(Change, &str); 6] = [
            (|c| c.tree_size = 8, "/signature"),
            (|c| c.root_hash = "cd".repeat(32), "/signature"),
            (
                |c| c.signed_at = "2026-11-30T22:00:01.000000Z".to_owned(),
                "/signature",
            ),
            (
                |c| c.signed_at = "2026-11-30T22:00:00Z".to_owned(),
                "/signed_at",
            ),
            (|c| c.root_hash = "AB".repeat(32), "/root_hash"),
            (|c| c.origin = "another/log".to_owned(), "/origin"),
        ];
        for (change, field) in changes {
            let mut changed = checkpoint.clone();
            change(&mut changed);
            assert_eq!(changed.verify(&ring).unwrap_err().field, field);
        }

        let other = ReceiptSigningKey::generate().unwrap();
        let problem = checkpoint
            .verify(&KeyRing::new(vec![other.public_key()]))
            .unwrap_err();
        assert_eq!(problem.field, "/key_id");
        assert!(problem.problem.contains(&key.key_id()), "{problem}");
        // Claiming another key id does not help.
        let mut changed = checkpoint.clone();
        changed.key_id = other.key_id();
        assert_eq!(
            changed
                .verify(&KeyRing::new(vec![key.public_key(), other.public_key()]))
                .unwrap_err()
                .field,
            "/signature"
        );
    }

    #[test]
    fn checkpoint_file_round_trips_and_refuses_unknown_members() {
        let key = ReceiptSigningKey::generate().unwrap();
        let checkpoint = Checkpoint::sign(&key, 3, "00".repeat(32), signed_at()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "certificate-checkpoint-{}",
            hex::encode(crate::keys::random_bytes::<8>().unwrap())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("checkpoint.json");
        std::fs::write(&path, serde_json::to_string_pretty(&checkpoint).unwrap()).unwrap();
        assert_eq!(Checkpoint::read_file(&path).unwrap(), checkpoint);
        let mut value = serde_json::to_value(&checkpoint).unwrap();
        value["extra"] = serde_json::json!(1);
        std::fs::write(&path, value.to_string()).unwrap();
        let error = Checkpoint::read_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("checkpoint.json") && error.contains("extra"),
            "{error}"
        );
        let error = Checkpoint::read_file(&dir.join("absent.json")).unwrap_err();
        assert!(error.to_string().contains("absent.json"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
