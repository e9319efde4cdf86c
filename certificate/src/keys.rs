//! Ed25519 keys that sign receipts and log checkpoints.
//!
//! Key files are the formats OpenSSL reads and writes, so operators can create, inspect and
//! back up keys with standard tools:
//! - private key: PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as written by
//!   `openssl genpkey -algorithm ed25519`; written here with mode 0600;
//! - public key: SPKI PEM (`-----BEGIN PUBLIC KEY-----`), as written by
//!   `openssl pkey -pubout`.
//!
//! A key is named by its key id, `ed25519:` followed by the first 16 hex characters of the
//! SHA-256 of the raw 32-byte public key. Receipts and checkpoints carry the key id of the key
//! that signed them; a verifier holds a [`KeyRing`] of public keys (current and rotated-out)
//! and picks the key by id. Errors never print key material.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes,
};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::canonical::sha256_hex;

/// What went wrong with a key, a key file or a signature.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The operating system's random source failed.
    #[error("cannot get random bytes from the operating system: {reason}")]
    Random {
        /// The getrandom error.
        reason: String,
    },
    /// A key file could not be read or written.
    #[error("{path}: {action}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was attempted ("cannot read the key file", …).
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// [`write_key_pair`] refuses to overwrite a key file.
    #[error(
        "{path} already exists: refusing to overwrite a key file (move it away or choose another name)"
    )]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// A key pair name that is not a plain file name.
    #[error(
        "{name:?} is not a usable key name: use letters, digits, '-', '_' or '.' (no '/', not starting with '.')"
    )]
    InvalidName {
        /// The refused name.
        name: String,
    },
    /// Text that is not an Ed25519 private key in PKCS#8 PEM.
    #[error(
        "{origin} is not an Ed25519 private key in PKCS#8 PEM (-----BEGIN PRIVATE KEY-----): {reason}"
    )]
    InvalidPrivateKey {
        /// Where the text came from (a path, or "the given PEM text").
        origin: String,
        /// The decoder's reason (never key material).
        reason: String,
    },
    /// Text that is not an Ed25519 public key in SPKI PEM.
    #[error(
        "{origin} is not an Ed25519 public key in SPKI PEM (-----BEGIN PUBLIC KEY-----): {reason}"
    )]
    InvalidPublicKey {
        /// Where the text came from.
        origin: String,
        /// The decoder's reason.
        reason: String,
    },
    /// A key could not be encoded as PEM.
    #[error("cannot encode the key as PEM: {reason}")]
    Encode {
        /// The encoder's reason.
        reason: String,
    },
    /// A signature that is not base64 of 64 bytes.
    #[error("the signature is not the standard base64 of a 64-byte Ed25519 signature: {reason}")]
    MalformedSignature {
        /// What is wrong with it.
        reason: String,
    },
    /// A well-formed signature that does not verify.
    #[error(
        "the signature does not verify with public key {key_id}: the signed content was changed, or another key signed it"
    )]
    BadSignature {
        /// The key the signature was checked with.
        key_id: String,
    },
    /// A salt that is not hex.
    #[error("the salt is not hex: {reason}")]
    InvalidSalt {
        /// The decoder's reason.
        reason: String,
    },
}

/// The key id of a raw public key: `ed25519:` + first 16 hex chars of its SHA-256.
fn key_id_of(public: &VerifyingKey) -> String {
    let digest = sha256_hex(public.as_bytes());
    format!("ed25519:{}", &digest[..16])
}

/// Random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], KeyError> {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).map_err(|error| KeyError::Random {
        reason: error.to_string(),
    })?;
    Ok(bytes)
}

/// The private key that signs receipts and checkpoints.
pub struct ReceiptSigningKey(SigningKey);

impl std::fmt::Debug for ReceiptSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReceiptSigningKey")
            .field(&self.key_id())
            .finish()
    }
}

impl ReceiptSigningKey {
    /// A new key from 32 bytes of operating-system randomness.
    pub fn generate() -> Result<Self, KeyError> {
        let secret = random_bytes::<32>()?;
        Ok(Self(SigningKey::from_bytes(&secret)))
    }

    /// The key as PKCS#8 v1 PEM, byte-compatible with what `openssl genpkey` writes.
    pub fn to_pkcs8_pem(&self) -> Result<String, KeyError> {
        let pem = KeypairBytes {
            secret_key: self.0.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|error| KeyError::Encode {
            reason: error.to_string(),
        })?;
        Ok(pem.as_str().to_owned())
    }

    /// The public half.
    pub fn public_key(&self) -> ReceiptPublicKey {
        ReceiptPublicKey(self.0.verifying_key())
    }

    /// The key id (see the module documentation).
    pub fn key_id(&self) -> String {
        key_id_of(&self.0.verifying_key())
    }

    /// Signs `message`; returns the standard base64 of the 64-byte signature.
    pub fn sign(&self, message: &[u8]) -> String {
        STANDARD.encode(self.0.sign(message).to_bytes())
    }
}

/// Gives a key wrapper its PEM parsing and file reading: `$from_pem` parses PEM text with
/// `$decode` (a refusal is `KeyError::$invalid`, naming where the text came from, never the key)
/// and `read_file` reads a PEM file (an I/O failure says `$read`).
macro_rules! pem_key {
    ($key:ident: $doc:literal $from_pem:ident = $decode:path, $invalid:ident, $read:literal) => {
        impl $key {
            #[doc = $doc]
            pub fn $from_pem(pem: &str) -> Result<Self, KeyError> {
                Self::parse(pem, "the given PEM text")
            }

            fn parse(pem: &str, origin: &str) -> Result<Self, KeyError> {
                $decode(pem).map(Self).map_err(|error| KeyError::$invalid {
                    origin: origin.to_owned(),
                    reason: error.to_string(),
                })
            }

            /// Reads the key's PEM file.
            pub fn read_file(path: &Path) -> Result<Self, KeyError> {
                let pem = read_pem(path, $read)?;
                Self::parse(&pem, &path.display().to_string())
            }
        }
    };
}

pem_key!(ReceiptSigningKey: "Parses a PKCS#8 PEM private key."
    from_pkcs8_pem = SigningKey::from_pkcs8_pem, InvalidPrivateKey,
    "cannot read the private key file");
pem_key!(ReceiptPublicKey: "Parses an SPKI PEM public key."
    from_spki_pem = VerifyingKey::from_public_key_pem, InvalidPublicKey,
    "cannot read the public key file");

/// The text of the PEM file at `path`; a failure names the file and `action`.
fn read_pem(path: &Path, action: &'static str) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.to_owned(),
        action,
        source,
    })
}

/// A public key that verifies receipts and checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptPublicKey(VerifyingKey);

impl ReceiptPublicKey {
    /// The key as SPKI PEM.
    pub fn to_spki_pem(&self) -> Result<String, KeyError> {
        self.0
            .to_public_key_pem(LineEnding::LF)
            .map_err(|error| KeyError::Encode {
                reason: error.to_string(),
            })
    }

    /// The key id (see the module documentation).
    pub fn key_id(&self) -> String {
        key_id_of(&self.0)
    }

    /// Verifies a standard-base64 Ed25519 signature over `message` (strict verification:
    /// refuses malleable signatures and weak keys).
    pub fn verify(&self, message: &[u8], signature_b64: &str) -> Result<(), KeyError> {
        let bytes =
            STANDARD
                .decode(signature_b64)
                .map_err(|error| KeyError::MalformedSignature {
                    reason: error.to_string(),
                })?;
        // Refuse non-canonical base64 spellings of the same bytes.
        if STANDARD.encode(&bytes) != signature_b64 {
            return Err(KeyError::MalformedSignature {
                reason: "not the canonical padded base64 of its bytes".to_owned(),
            });
        }
        let bytes: [u8; 64] =
            bytes
                .try_into()
                .map_err(|bytes: Vec<u8>| KeyError::MalformedSignature {
                    reason: format!("{} bytes instead of 64", bytes.len()),
                })?;
        let signature = Signature::from_bytes(&bytes);
        self.0
            .verify_strict(message, &signature)
            .map_err(|_| KeyError::BadSignature {
                key_id: self.key_id(),
            })
    }
}

/// Generates a key pair and writes `<dir>/<name>.key` (PKCS#8 PEM, mode 0600) and
/// `<dir>/<name>.pub` (SPKI PEM). Refuses to overwrite either file. Returns both paths and the
/// key id.
pub fn write_key_pair(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf, String), KeyError> {
    let valid = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(KeyError::InvalidName {
            name: name.to_owned(),
        });
    }
    let key_path = dir.join(format!("{name}.key"));
    let pub_path = dir.join(format!("{name}.pub"));
    for path in [&key_path, &pub_path] {
        if path.exists() {
            return Err(KeyError::AlreadyExists { path: path.clone() });
        }
    }
    let key = ReceiptSigningKey::generate()?;
    let public_pem = key.public_key().to_spki_pem()?;
    let private_pem = key.to_pkcs8_pem()?;
    write_new(&key_path, private_pem.as_bytes(), 0o600)?;
    if let Err(error) = write_new(&pub_path, public_pem.as_bytes(), 0o644) {
        // Do not leave half a pair behind: the caller can simply run again.
        let _ = std::fs::remove_file(&key_path);
        return Err(error);
    }
    Ok((key_path, pub_path, key.key_id()))
}

/// Creates `path` (failing if it exists) with `mode` and writes `contents`.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<(), KeyError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                KeyError::AlreadyExists {
                    path: path.to_owned(),
                }
            } else {
                KeyError::Io {
                    path: path.to_owned(),
                    action: "cannot create the key file",
                    source,
                }
            }
        })?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|source| KeyError::Io {
            path: path.to_owned(),
            action: "cannot write the key file",
            source,
        })
}

/// The public keys a verifier trusts, found by key id (the current key and rotated-out ones).
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    keys: BTreeMap<String, ReceiptPublicKey>,
}

impl KeyRing {
    /// A ring of the given keys (a key given twice is kept once).
    pub fn new(keys: Vec<ReceiptPublicKey>) -> KeyRing {
        KeyRing {
            keys: keys.into_iter().map(|key| (key.key_id(), key)).collect(),
        }
    }

    /// The key with this key id, if it is in the ring.
    pub fn get(&self, key_id: &str) -> Option<&ReceiptPublicKey> {
        self.keys.get(key_id)
    }

    /// The key ids in the ring, sorted.
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
