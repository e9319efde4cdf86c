//! `--key`: which SSH key signs an operator action (shared by every signed command).

use std::path::PathBuf;

use clap::Args;

/// The environment variable naming the operator's key when `--key` is not given.
pub const KEY_ENV: &str = "BUZZ_OPERATOR_KEY";

/// Which SSH key signs the action.
#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    /// The operator's SSH key: a private key file, or a `.pub` file whose private key is in
    /// the ssh-agent (SSH_AUTH_SOCK). Must be registered (`buzz-deletion operators list`).
    #[arg(long = "key", env = KEY_ENV, value_name = "PATH")]
    pub key: Option<PathBuf>,
    /// Sign with this RFC 3339 UTC time instead of now (whole seconds, `…Z`); for tests of the
    /// freshness window.
    #[arg(long, hide = true)]
    pub signed_at: Option<String>,
}
