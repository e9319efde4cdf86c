//! The workspace's processes as the bench and chaos binaries run them, failing with an error
//! rather than a panic: where their binaries are, a command that must succeed, and the serving
//! simulator (`buzz-deletion demo serve`).

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use anyhow::{Context, Result, bail};
use tokio::process::Command;

/// The directory of the workspace's binaries: `given` (a `--bin-dir` flag), else the directory
/// of the running executable, which cargo builds beside them.
pub fn bin_dir(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(dir) => Ok(dir.to_path_buf()),
        None => std::env::current_exe()?
            .parent()
            .map(PathBuf::from)
            .context("this binary has no directory"),
    }
}

/// Runs `command` to its end and returns its output. `cannot_run` is the error when it does not
/// start; when it exits unsuccessfully the error is `{what} failed ({status}): {stderr}`.
pub async fn checked_output(command: &mut Command, what: &str, cannot_run: &str) -> Result<Output> {
    let output = command
        .output()
        .await
        .with_context(|| cannot_run.to_owned())?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

/// `cli demo serve` (`cli` is the path of `buzz-deletion`) serving `hosts` at `rate` writes per
/// second each and recording up to `record_admitted` admitted writes per community: stdin closed,
/// its report on a piped stdout, killed when dropped. The caller adds stderr and any further
/// flag or variable, then spawns it.
pub fn demo_serve(
    cli: &Path,
    hosts: &[impl AsRef<str>],
    rate: u32,
    record_admitted: u64,
) -> Command {
    let hosts: Vec<&str> = hosts.iter().map(AsRef::as_ref).collect();
    let mut command = Command::new(cli);
    command
        .args(["demo", "serve", "--hosts", &hosts.join(",")])
        .args(["--rate", &rate.to_string()])
        .args(["--record-admitted", &record_admitted.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}
