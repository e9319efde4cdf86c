//! Signing operator statements with the operator's SSH key, the way git does: the canonical
//! statement (`workflows::operator`) goes to `ssh-keygen -Y sign -n action@buzz-deletion -f KEY`
//! on stdin and the armored SSHSIG signature comes back on stdout. `KEY` is a private key file,
//! or a public key file whose private half is held by the ssh-agent at `SSH_AUTH_SOCK` (a
//! hardware-backed `sk-` key works the same way). The private key never enters this process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use activities::identity::{OperatorKey, fresh_nonce, operator_by_fingerprint, parse_public_key};
use sqlx::PgPool;
use uuid::Uuid;
use workflows::approval::same_operator_name;
use workflows::operator::{Action, Kind, SIGNATURE_NAMESPACE, SignedAction, statement_text};

use crate::error::CliError;

pub use crate::cli::{KEY_ENV, KeyArgs};

/// An operator's key, ready to sign.
#[derive(Debug, Clone)]
pub struct SigningKey {
    path: PathBuf,
    /// The public half, with its fingerprint.
    pub public: OperatorKey,
}

impl SigningKey {
    /// Loads the key named by `--key` / `BUZZ_OPERATOR_KEY`.
    pub fn from_args(args: &KeyArgs) -> Result<SigningKey, CliError> {
        let path = args.key.clone().ok_or_else(|| {
            CliError::Usage(format!(
                "every operator action is signed: give --key PATH (or set {KEY_ENV}) naming your \
                 registered SSH key (a private key file, or its .pub with the key in ssh-agent)"
            ))
        })?;
        let public_text = public_key_text(&path)?;
        let public = parse_public_key(&public_text)
            .map_err(|e| CliError::Usage(format!("--key {}: {e}", path.display())))?;
        Ok(SigningKey { path, public })
    }

    /// Signs the statement of these fields with `ssh-keygen -Y sign`.
    pub fn sign(
        &self,
        action: Action,
        kind: Kind,
        request_id: Uuid,
        target: &str,
        digest: Option<&str>,
        signed_at: Option<&str>,
    ) -> Result<SignedAction, CliError> {
        let signed_at = signed_at
            .map(str::to_owned)
            .unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
        let nonce = fresh_nonce();
        let text = statement_text(
            action,
            kind,
            request_id,
            target,
            digest,
            &self.public.fingerprint,
            &signed_at,
            &nonce,
        );
        let signature = ssh_keygen_sign(&self.path, &text)?;
        let signed = SignedAction {
            action,
            kind,
            request_id,
            target: target.to_owned(),
            digest: digest.map(str::to_owned),
            operator: self.public.fingerprint.clone(),
            signed_at,
            nonce,
            signature,
        };
        signed
            .check_well_formed()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(signed)
    }

    /// The operator name recorded for this key: its registered name. A name given on the
    /// command line (`flag`) must be that name. An unregistered or revoked key signs anyway
    /// under the given name (or its fingerprint) and the worker refuses it, so the refusal is
    /// decided, and recorded, in one place.
    pub async fn operator_name(
        &self,
        pool: &PgPool,
        flag: &str,
        given: Option<&str>,
    ) -> Result<String, CliError> {
        let given = given.map(str::trim).filter(|g| !g.is_empty());
        let registered = operator_by_fingerprint(pool, &self.public.fingerprint)
            .await
            .map_err(|e| CliError::Other(anyhow::anyhow!("reading the operator registry: {e}")))?
            .filter(|r| r.revoked_at.is_none());
        match (registered, given) {
            (Some(record), Some(given)) if !same_operator_name(&record.name, given) => {
                Err(CliError::Refused(format!(
                    "{flag} {given} does not match key {} ({}), which is registered as {}; \
                     sign with your own key or drop {flag}",
                    self.public.fingerprint,
                    self.path.display(),
                    record.name
                )))
            }
            (Some(record), _) => Ok(record.name),
            (None, Some(given)) => Ok(given.to_owned()),
            (None, None) => Ok(self.public.fingerprint.clone()),
        }
    }
}

/// The OpenSSH public key of `path`: the file itself when it is one, else `PATH.pub`, else
/// what `ssh-keygen -y` derives from the private key.
fn public_key_text(path: &Path) -> Result<String, CliError> {
    let read = |p: &Path| std::fs::read_to_string(p);
    let text = read(path)
        .map_err(|e| CliError::Usage(format!("--key {}: cannot read it: {e}", path.display())))?;
    if parse_public_key(&text).is_ok() {
        return Ok(text);
    }
    let mut with_pub = path.as_os_str().to_owned();
    with_pub.push(".pub");
    if let Ok(text) = read(Path::new(&with_pub))
        && parse_public_key(&text).is_ok()
    {
        return Ok(text);
    }
    let output = Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ssh_keygen_missing(&e))?;
    if !output.status.success() {
        return Err(CliError::Usage(format!(
            "--key {}: not an OpenSSH key file: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn ssh_keygen_missing(error: &std::io::Error) -> CliError {
    CliError::Other(anyhow::anyhow!(
        "cannot run ssh-keygen ({error}): install OpenSSH (Debian: apt-get install openssh-client)"
    ))
}

/// `ssh-keygen -Y sign -n NS -f KEY` with `text` on stdin; the armored signature from stdout.
fn ssh_keygen_sign(key: &Path, text: &str) -> Result<String, CliError> {
    let mut child = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", SIGNATURE_NAMESPACE, "-f"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ssh_keygen_missing(&e))?;
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(text.as_bytes()) {
            // ssh-keygen gave up before reading the statement (no agent, no usable key): its
            // exit status and message below say why, which is what the operator needs.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(e) => {
                return Err(CliError::Other(anyhow::anyhow!(
                    "writing the statement to ssh-keygen: {e}"
                )));
            }
            Ok(()) => {}
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|e| CliError::Other(anyhow::anyhow!("waiting for ssh-keygen: {e}")))?;
    let signature = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() || !signature.contains("BEGIN SSH SIGNATURE") {
        return Err(CliError::Refused(format!(
            "ssh-keygen could not sign with {}: {} (a .pub key needs its private key in the \
             ssh-agent at SSH_AUTH_SOCK: ssh-add it)",
            key.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ssh-keygen that exits before reading the statement (here: the key file does not exist)
    /// is reported with its own reason, never as a broken pipe. The statement is larger than a
    /// pipe buffer so the write is still under way when ssh-keygen exits.
    #[test]
    fn ssh_keygen_giving_up_early_is_reported_with_its_reason() {
        let missing = Path::new("/nonexistent/buzz-deletion-test/operator.pub");
        let refused = ssh_keygen_sign(missing, &"x".repeat(1 << 20));
        match refused {
            Err(CliError::Refused(message)) => {
                assert!(message.contains("ssh-keygen could not sign"), "{message}");
                assert!(message.contains("operator.pub"), "{message}");
            }
            other => panic!("expected a refusal naming the key, got {other:?}"),
        }
    }
}
