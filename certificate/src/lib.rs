//! Deletion certificates: the proof, readable without our servers, that a deletion happened as
//! recorded.
//!
//! This crate is the ONE implementation of every encoding the proof depends on. The worker uses
//! it to write (hash-chain the audit trail, sign the receipt, append the receipt digest to the
//! transparency log, sign checkpoints) and the offline verifier uses it to read back
//! (recompute and compare). Because both sides share this code, an encoding cannot drift
//! between writer and reader.
//!
//! It does no I/O apart from reading and writing key files ([`keys`]) and reading a checkpoint
//! file ([`checkpoint::Checkpoint::read_file`]): no database, no network, no async runtime. That
//! is deliberate: a certificate must verify on a laptop with every server of ours stopped,
//! given only the certificate file and the public keys.
//!
//! Modules, in the order the proof is built:
//! - [`canonical`]: RFC 8785 canonical JSON, SHA-256 hex and the one timestamp format.
//! - [`chain`]: the hash-chained audit trail of a request and its verification.
//! - [`keys`]: Ed25519 signing and public keys (PKCS#8 / SPKI PEM files) and key ids.
//! - [`receipt`]: what a completed deletion asserts, and its internal consistency rules.
//! - [`certificate`]: per-field digests, the receipt signature and the exported certificate.
//! - [`merkle`]: the RFC 6962 transparency log over receipt digests.
//! - [`checkpoint`]: signed tree heads of that log.
//! - [`verify`]: offline verification of a certificate, naming every problem by JSON pointer.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod canonical;
pub mod certificate;
pub mod chain;
pub mod checkpoint;
pub mod keys;
pub mod merkle;
pub mod receipt;
pub mod verify;

pub use canonical::{
    CanonicalError, TimestampError, canonical_json, parse_timestamp, sha256_hex, timestamp,
};
pub use certificate::{
    CERTIFICATE_FORMAT, Certificate, CertificateError, ConsistencyProof, LogProof,
    ReceiptSignature, SignedReceipt, assemble, sign_receipt,
};
pub use chain::{
    ChainBreak, ChainHead, ChainRow, EventContent, GENESIS_HASH, event_hash, verify_against_head,
    verify_chain,
};
pub use checkpoint::{Checkpoint, LOG_ORIGIN};
pub use keys::{KeyError, KeyRing, ReceiptPublicKey, ReceiptSigningKey, write_key_pair};
pub use merkle::MerkleError;
pub use receipt::{
    ApprovalFacts, ChunkStamp, DeclarationFacts, Generations, InventoriedRelation, InventoryFacts,
    ManifestFacts, PurgeFacts, RECEIPT_FORMAT, Receipt, ReceiptKind, StageReached, Subject,
    TableRows, check_counts, coverage_problems, new_salt, target_commitment,
};
pub use verify::{CertificateProblem, Verified, verify_certificate, verify_signed_receipt};
