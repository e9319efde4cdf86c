//! `operators …`: the grammar of the operator registry.

use std::path::PathBuf;

use clap::Subcommand;

/// `operators …` subcommands.
#[derive(Debug, Subcommand)]
pub enum OperatorsCommand {
    /// Register an operator's OpenSSH public key (ed25519, ecdsa P-256/P-384, or the sk-
    /// hardware kinds) under a name. Its fingerprint is the operator's identity.
    Add {
        /// The operator's name (a label, unique among keys not revoked).
        #[arg(long)]
        name: String,
        /// The public key file (`id_ed25519.pub`, `ssh-keygen -y` output, …).
        #[arg(long, value_name = "FILE")]
        public_key: PathBuf,
        /// Revoke the key that holds the name now (the operator's new key replaces it).
        #[arg(long)]
        replace: bool,
    },
    /// Every registered key, revoked ones included.
    List,
    /// Revoke an operator's key: recorded with who and why, never deleted; signatures made
    /// with it are refused from now on and stay verifiable as evidence.
    Revoke {
        /// The operator's name.
        name: String,
        /// Why.
        #[arg(long, default_value = "revoked by the owner")]
        reason: String,
    },
}
