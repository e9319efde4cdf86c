//! Deletion certificates on the command line: `community certificate` / `user certificate`
//! (export), `certificate verify` (offline: no network, no database), `certificate audit`,
//! `certificate checkpoint` and `keys generate`.

use std::path::{Path, PathBuf};

use activities::store::StoreError;
use activities::store::certificates::CertificateStoreError;
use certificate::checkpoint::Checkpoint;
use certificate::keys::{KeyRing, ReceiptPublicKey};
use certificate::receipt::{Subject, target_commitment};
use serde::Serialize;

use crate::cli::{CertificateCommand, ExportArgs, KeysCommand, OutArgs};
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::render::key_values;

/// Runs one `certificate` subcommand.
pub async fn run(command: CertificateCommand) -> CliResult {
    match command {
        CertificateCommand::Verify {
            file,
            public_keys,
            checkpoint,
            target,
        } => verify(
            &file,
            &public_keys,
            checkpoint.as_deref(),
            target.as_deref(),
        ),
        CertificateCommand::Audit { id, public_keys } => audit(id, &public_keys).await,
        CertificateCommand::Checkpoint(out) => latest_checkpoint(out).await,
    }
}

/// Runs one `keys` subcommand (no server involved).
pub fn run_keys(command: KeysCommand) -> CliResult {
    match command {
        KeysCommand::Generate { dir, name } => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| CliError::Usage(format!("--dir {}: {e}", dir.display())))?;
            let (private, public, key_id) = certificate::keys::write_key_pair(&dir, &name)
                .map_err(|e| CliError::Refused(e.to_string()))?;
            let document = GeneratedKeys {
                key_id: key_id.clone(),
                private_key: private.clone(),
                public_key: public.clone(),
            };
            let text = key_values(
                "receipt signing key pair",
                &[
                    ("key_id", key_id),
                    ("private_key", private.display().to_string()),
                    ("public_key", public.display().to_string()),
                    (
                        "next",
                        format!(
                            "set {}={} for the worker; keep {} for `certificate verify`",
                            activities::certificates::SIGNING_KEY_FILE_ENV,
                            private.display(),
                            public.display()
                        ),
                    ),
                ],
            );
            Report::new(&document, text)
        }
    }
}

#[derive(Serialize)]
struct GeneratedKeys {
    key_id: String,
    private_key: PathBuf,
    public_key: PathBuf,
}

/// `community certificate` (`kind` "community") and `user certificate` (`kind` "user").
pub async fn export(args: ExportArgs, kind: &str) -> CliResult {
    let older = args
        .checkpoint
        .as_deref()
        .map(read_checkpoint)
        .transpose()?;
    let store = connect::store().await?;
    let certificate = store
        .certificate(args.id, older.as_ref())
        .await
        .map_err(certificate_failure)?;
    let actual = match certificate.receipt.subject {
        Subject::Community { .. } => "community",
        Subject::User { .. } => "user",
    };
    if actual != kind {
        return Err(CliError::Refused(format!(
            "request {} is a {actual} deletion: use `buzz-deletion {actual} certificate {}`",
            args.id, args.id
        )));
    }
    let json = serde_json::to_string_pretty(&certificate)
        .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the certificate: {e}")))?;
    let Some(path) = args.out else {
        let value = serde_json::to_value(&certificate)
            .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the certificate: {e}")))?;
        return Report::new(&value, format!("{json}\n"));
    };
    write_file(&path, &json)?;
    let exported = Exported {
        request_id: args.id.to_string(),
        kind: actual.to_owned(),
        file: path.clone(),
        leaf_index: certificate.log.leaf_index,
        tree_size: certificate.log.checkpoint.tree_size,
        key_id: certificate.signature.key_id.clone(),
        verify_command: format!(
            "buzz-deletion certificate verify {} --public-key {}",
            path.display(),
            public_key_hint(&certificate.signature.key_id)
        ),
    };
    let text = key_values(
        "certificate written",
        &[
            ("request_id", exported.request_id.clone()),
            ("file", path.display().to_string()),
            ("key_id", exported.key_id.clone()),
            (
                "log",
                format!("leaf {} of {}", exported.leaf_index, exported.tree_size),
            ),
            ("verify", exported.verify_command.clone()),
        ],
    );
    Report::new(&exported, text)
}

/// The public key file to name in the printed verify command: the stack's
/// (`BUZZ_RECEIPT_PUBLIC_KEY_FILE`) when it is the key that signed, else a placeholder.
fn public_key_hint(key_id: &str) -> String {
    let stack_key = stack_config::env::StackEnv::process().optional(PUBLIC_KEY_FILE_ENV);
    match stack_key {
        Some(path)
            if ReceiptPublicKey::read_file(Path::new(&path))
                .is_ok_and(|key| key.key_id() == key_id) =>
        {
            path
        }
        _ => format!("<the public key of {key_id}>"),
    }
}

/// Names the file of the receipt public key of this stack (written by `deploy/local/up`).
const PUBLIC_KEY_FILE_ENV: &str = "BUZZ_RECEIPT_PUBLIC_KEY_FILE";

#[derive(Serialize)]
struct Exported {
    request_id: String,
    kind: String,
    file: PathBuf,
    leaf_index: u64,
    tree_size: u64,
    key_id: String,
    verify_command: String,
}

/// The public keys in `public_keys` (a usage error names a file that is not one).
fn key_ring(public_keys: &[PathBuf]) -> Result<KeyRing, CliError> {
    let mut keys = Vec::with_capacity(public_keys.len());
    for path in public_keys {
        keys.push(
            ReceiptPublicKey::read_file(path)
                .map_err(|e| CliError::Usage(format!("--public-key {}: {e}", path.display())))?,
        );
    }
    Ok(KeyRing::new(keys))
}

/// The keys an audit verifies signatures with: `--public-key` files, else the stack's
/// `BUZZ_RECEIPT_PUBLIC_KEY_FILE`; neither is a usage error saying what to give (an audit that
/// checks no signature would miss a consistently rewritten receipt).
fn audit_key_ring(public_keys: &[PathBuf]) -> Result<KeyRing, CliError> {
    if !public_keys.is_empty() {
        return key_ring(public_keys);
    }
    match stack_config::env::StackEnv::process().optional(PUBLIC_KEY_FILE_ENV) {
        Some(path) => key_ring(&[PathBuf::from(path)]),
        None => Err(CliError::Usage(format!(
            "certificate audit verifies every receipt and checkpoint signature: give the receipt \
             public key(s) with --public-key KEY (repeat for rotated-out keys) or set \
             {PUBLIC_KEY_FILE_ENV}"
        ))),
    }
}

/// `certificate verify`: everything from files, nothing from the network.
fn verify(
    file: &Path,
    public_keys: &[PathBuf],
    older: Option<&Path>,
    target: Option<&str>,
) -> CliResult {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CliError::Refused(format!(
            "{} is not a certificate: it is not JSON ({e})",
            file.display()
        ))
    })?;
    let ring = key_ring(public_keys)?;
    let older = older.map(read_checkpoint).transpose()?;
    let mut problems = match certificate::verify::verify_certificate(&json, &ring, older.as_ref()) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    };
    if let Some(target) = target {
        problems.extend(target_problem(&json, target));
    }
    let outcome = Verification {
        file: file.to_path_buf(),
        valid: problems.is_empty(),
        request_id: json["receipt"]["request_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        kind: json["receipt"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        key_id: json["signature"]["key_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        leaf_index: json["log"]["leaf_index"].as_u64(),
        tree_size: json["log"]["checkpoint"]["tree_size"].as_u64(),
        consistent_with_tree_size: older.as_ref().map(|c| c.tree_size),
        problems: problems.clone(),
    };
    let mut text = key_values(
        if outcome.valid {
            "certificate verified"
        } else {
            "certificate REFUSED"
        },
        &[
            ("file", file.display().to_string()),
            ("request_id", outcome.request_id.clone()),
            ("kind", outcome.kind.clone()),
            ("key_id", outcome.key_id.clone()),
        ],
    );
    for problem in &problems {
        text.push_str(&format!("\n  {problem}"));
    }
    text.push('\n');
    let report = Report::new(&outcome, text)?;
    if problems.is_empty() {
        Ok(report)
    } else {
        let first = problems.first().cloned().unwrap_or_default();
        Ok(report.failing(
            1,
            format!(
                "certificate {} does not verify ({} problem(s)); first: {first}",
                file.display(),
                problems.len()
            ),
        ))
    }
}

/// With `--target`: the receipt must commit to it.
fn target_problem(json: &serde_json::Value, target: &str) -> Option<String> {
    let subject = &json["receipt"]["subject"];
    let (Some(hash), Some(salt)) = (
        subject["target_hash"].as_str(),
        subject["target_salt"].as_str(),
    ) else {
        return Some(
            "/receipt/subject: --target was given but this is not a user deletion's receipt"
                .to_owned(),
        );
    };
    (target_commitment(target, salt).ok().as_deref() != Some(hash)).then(|| {
        "/receipt/subject/target_hash: this receipt is not about the given --target".to_owned()
    })
}

#[derive(Serialize)]
struct Verification {
    file: PathBuf,
    valid: bool,
    request_id: String,
    kind: String,
    key_id: String,
    leaf_index: Option<u64>,
    tree_size: Option<u64>,
    consistent_with_tree_size: Option<u64>,
    problems: Vec<String>,
}

/// `certificate audit`.
async fn audit(id: uuid::Uuid, public_keys: &[PathBuf]) -> CliResult {
    let ring = audit_key_ring(public_keys)?;
    let store = connect::store().await?;
    let audit = store
        .audit_certificate(id, &ring)
        .await
        .map_err(certificate_failure)?;
    let mut text = key_values(
        if audit.problems.is_empty() {
            "audit: the database still states what was signed"
        } else {
            "audit FAILED"
        },
        &[
            ("request_id", id.to_string()),
            ("audit_rows", audit.audit_rows.to_string()),
            ("chain_length", audit.chain_length.to_string()),
            ("log_size", audit.log_size.to_string()),
        ],
    );
    for problem in &audit.problems {
        text.push_str(&format!("\n  {problem}"));
    }
    text.push('\n');
    let report = Report::new(&audit, text)?;
    match audit.problems.first() {
        None => Ok(report),
        Some(first) => Ok(report.failing(
            1,
            format!(
                "request {id}: the database no longer states what its receipt signed ({} \
                 problem(s)); first: {first}",
                audit.problems.len()
            ),
        )),
    }
}

/// `certificate checkpoint`.
async fn latest_checkpoint(out: OutArgs) -> CliResult {
    let store = connect::store().await?;
    let checkpoint = store
        .latest_checkpoint()
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("Postgres: {e}")))?
        .ok_or_else(|| {
            CliError::Refused(
                "the transparency log is empty: no deletion has finished with a receipt yet"
                    .to_owned(),
            )
        })?;
    let json = serde_json::to_string_pretty(&checkpoint)
        .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the checkpoint: {e}")))?;
    if let Some(path) = &out.out {
        write_file(path, &json)?;
    }
    let text = key_values(
        "transparency log checkpoint",
        &[
            ("tree_size", checkpoint.tree_size.to_string()),
            ("root_hash", checkpoint.root_hash.clone()),
            ("key_id", checkpoint.key_id.clone()),
            ("signed_at", checkpoint.signed_at.clone()),
        ],
    );
    Report::new(&checkpoint, text)
}

fn read_checkpoint(path: &Path) -> Result<Checkpoint, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--checkpoint {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "--checkpoint {}: not a checkpoint (`buzz-deletion certificate checkpoint --out FILE` \
             writes one): {e}",
            path.display()
        ))
    })
}

fn write_file(path: &Path, contents: &str) -> Result<(), CliError> {
    std::fs::write(path, format!("{contents}\n"))
        .map_err(|e| CliError::Usage(format!("--out {}: {e}", path.display())))
}

fn certificate_failure(error: CertificateStoreError) -> CliError {
    match error {
        CertificateStoreError::NotIssued { .. } => CliError::Refused(error.to_string()),
        CertificateStoreError::Certificate { .. } | CertificateStoreError::ChainBroken { .. } => {
            CliError::Refused(error.to_string())
        }
        other => CliError::Other(anyhow::anyhow!("Postgres: {}", StoreError::from(other))),
    }
}
