//! The stack's environment as the tests see it: every variable is read through
//! `stack_config::env` (the one reader the worker and the CLI use too), and a missing one
//! fails the test naming it and how to start the stack. Also where the workspace's binaries are.

use std::path::PathBuf;

use stack_config::env::StackEnv;

/// How to get a stack when a variable or a server is missing.
pub const HOW_TO_START: &str = "start the local stack with `bash deploy/local/up && source .state/env` \
     (or run the whole suite with `bash deploy/local/test`)";

/// The value of the stack variable `name`; panics naming it when it is unset or empty.
pub fn required(name: &'static str) -> String {
    StackEnv::process()
        .required(name)
        .unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"))
}

/// The Temporal namespace of the stack (`TEMPORAL_NAMESPACE`, else `default`).
pub fn temporal_namespace() -> String {
    StackEnv::process().temporal_namespace()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` of the repository).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"))
}

/// Path of a workspace binary (built by `cargo build --workspace --bins` before the tests).
pub fn bin(name: &str) -> PathBuf {
    let path = target_dir().join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (deploy/local/test does)",
        path.display()
    );
    path
}

/// Writes `bytes` to `path`, a file that must not exist yet, readable by its owner alone (mode
/// 0600: what ssh-keygen wants of a key and a secret's file should be).
pub fn write_private_file(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.write_all(bytes)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The worker's receipt signing key, from the file `BUZZ_RECEIPT_SIGNING_KEY_FILE` names (the
/// local stack generates one); panics naming the variable when it is missing or unreadable.
pub fn receipt_key() -> activities::certificates::ReceiptKey {
    let path = required(activities::certificates::SIGNING_KEY_FILE_ENV);
    activities::certificates::load_receipt_key(std::path::Path::new(&path))
        .unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"))
}
