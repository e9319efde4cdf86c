//! `buzz-deletion certificate …` and `buzz-deletion keys …`: verifying deletion certificates
//! offline, auditing one against the database, the log's latest checkpoint, and the receipt
//! signing key pair. (`community certificate` and `user certificate` export a certificate.)

use std::path::PathBuf;

use clap::{Args, Subcommand};
use uuid::Uuid;

/// `certificate …` subcommands.
#[derive(Debug, Subcommand)]
pub enum CertificateCommand {
    /// Verify a certificate file with no network and no database: the receipt's signature and
    /// per-field digests, its counts, its inclusion in the signed checkpoint and, with
    /// --checkpoint, the log's consistency with an older checkpoint you kept.
    Verify {
        /// The certificate (as `community certificate` or `user certificate` wrote it).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// A receipt public key (PEM, as `keys generate` wrote it). Repeat it for every key
        /// ever used (rotated-out keys included): the certificate names the one it needs.
        #[arg(long = "public-key", value_name = "KEY", required = true)]
        public_keys: Vec<PathBuf>,
        /// An older checkpoint (`certificate checkpoint --out`) to check the log against.
        #[arg(long, value_name = "OLD")]
        checkpoint: Option<PathBuf>,
        /// For a user deletion: confirm the receipt is about this target (`demo:…`).
        #[arg(long)]
        target: Option<String>,
    },
    /// Re-derive a request's receipt from the database and its audit chain and report every
    /// difference (a rewritten or removed audit row names the first bad row), and verify the
    /// stored receipt's and every stored checkpoint's signature with the public keys.
    Audit {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
        /// A receipt public key (PEM). Repeat it for every key ever used (rotated-out keys
        /// included). Defaults to the stack's BUZZ_RECEIPT_PUBLIC_KEY_FILE.
        #[arg(long = "public-key", value_name = "KEY")]
        public_keys: Vec<PathBuf>,
    },
    /// The transparency log's latest signed checkpoint (keep it to check later exports).
    Checkpoint(OutArgs),
}

/// `keys …` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Write a new Ed25519 receipt signing key pair: NAME.key (PKCS#8 PEM, mode 0600, for the
    /// worker's BUZZ_RECEIPT_SIGNING_KEY_FILE) and NAME.pub (for `certificate verify`).
    Generate {
        /// Directory to write into (created if missing; existing files are never overwritten).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// File name stem.
        #[arg(long, default_value = "receipt")]
        name: String,
    },
}

/// Where a command writes its JSON document (`--out`; stdout when absent). Named `--out`
/// because `--output` is the global output format.
#[derive(Debug, Clone, Args)]
pub struct OutArgs {
    /// Write the document to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `community certificate` / `user certificate`: export a finished request's certificate.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Request id.
    #[arg(value_name = "REQUEST_ID")]
    pub id: Uuid,
    /// Write the certificate to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// An older checkpoint you hold: the certificate then carries the consistency proof from it.
    #[arg(long, value_name = "OLD")]
    pub checkpoint: Option<PathBuf>,
}
