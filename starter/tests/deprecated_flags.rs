//! The real binary prints the deprecation warning on stderr, once, before running the command
//! the old spelling names (here refused for its missing key before anything is contacted).

use std::process::Command;

fn approve(digest_flag: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_buzz-deletion"))
        .args([
            "community",
            "approve",
            "5d0c6f5e-8a0e-4d5c-9a43-2f3b9c1e7a10",
            digest_flag,
            "sha256:0123abcd",
        ])
        .env_remove("BUZZ_OPERATOR_KEY")
        .output()
        .expect("run buzz-deletion")
}

#[test]
fn the_old_digest_flag_warns_on_stderr_and_runs_the_same_command() {
    let old = approve("--digest");
    let new = approve("--inventory-digest");
    let old_err = String::from_utf8_lossy(&old.stderr);
    let new_err = String::from_utf8_lossy(&new.stderr);
    let warning =
        "warning: --digest is deprecated and goes away in release 0.2.0; use --inventory-digest";
    assert_eq!(old_err.matches(warning).count(), 1, "{old_err}");
    assert!(!new_err.contains("deprecated"), "{new_err}");
    // Same command, same refusal, same exit code (2: the signing key is missing).
    assert_eq!(old.status.code(), Some(2), "{old_err}");
    assert_eq!(new.status.code(), Some(2), "{new_err}");
    assert_eq!(old_err.replacen(&format!("{warning}\n"), "", 1), new_err);
    assert!(new_err.contains("give --key PATH"), "{new_err}");
    assert!(old.stdout.is_empty() && new.stdout.is_empty());
}
