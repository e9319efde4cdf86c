//! OpenSSH public keys and SSHSIG verification (RustCrypto `ssh-key`).

use ssh_key::rand_core::{OsRng, RngCore};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, PublicKey, SshSig};
use workflows::operator::{SIGNATURE_NAMESPACE, SignedAction};

use super::error::{IdentityError, IdentityResult};

/// A parsed operator public key.
#[derive(Debug, Clone)]
pub struct OperatorKey {
    /// The key.
    pub key: PublicKey,
    /// The OpenSSH line as registered (`type base64 [comment]`).
    pub line: String,
    /// `SHA256:…`.
    pub fingerprint: String,
    /// The algorithm name, e.g. `ssh-ed25519`.
    pub algorithm: String,
}

/// Parses one OpenSSH public key line; refuses algorithms we do not verify (RSA, DSA, P-521).
pub fn parse_public_key(text: &str) -> IdentityResult<OperatorKey> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| IdentityError::InvalidKey {
            reason: "the file holds no public key line".into(),
        })?;
    let key = PublicKey::from_openssh(line).map_err(|e| IdentityError::InvalidKey {
        reason: format!("not an OpenSSH public key ({e}); give the .pub file"),
    })?;
    let algorithm = key.algorithm();
    let accepted = matches!(
        algorithm,
        Algorithm::Ed25519
            | Algorithm::SkEd25519
            | Algorithm::SkEcdsaSha2NistP256
            | Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP256 | EcdsaCurve::NistP384
            }
    );
    if !accepted {
        return Err(IdentityError::UnsupportedAlgorithm {
            algorithm: algorithm.as_str().to_owned(),
        });
    }
    Ok(OperatorKey {
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
        algorithm: algorithm.as_str().to_owned(),
        line: line.to_owned(),
        key,
    })
}

/// Verifies `signed.signature` over `signed.statement()` under our namespace with the registered
/// key line, which must be the key the statement names.
pub fn verify_signature(registered_key: &str, signed: &SignedAction) -> IdentityResult<()> {
    let bad = |reason: String| IdentityError::BadSignature {
        fingerprint: signed.operator.clone(),
        reason,
    };
    let key = parse_public_key(registered_key)?;
    if key.fingerprint != signed.operator {
        return Err(bad(format!(
            "the registered key has fingerprint {}",
            key.fingerprint
        )));
    }
    let signature = SshSig::from_pem(signed.signature.trim().as_bytes())
        .map_err(|e| bad(format!("the SSHSIG text does not decode ({e})")))?;
    key.key
        .verify(
            SIGNATURE_NAMESPACE,
            signed.statement().as_bytes(),
            &signature,
        )
        .map_err(|e| bad(format!("{e} (namespace {SIGNATURE_NAMESPACE})")))
}

/// 128 random bits as 32 lowercase hex digits, from the operating system's generator.
pub fn fresh_nonce() -> String {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use ssh_key::{LineEnding, PrivateKey};
    use uuid::Uuid;
    use workflows::operator::{Action, Kind, statement_text};

    use super::*;

    fn signed_with(key: &PrivateKey, digest: Option<&str>) -> SignedAction {
        let operator = key.public_key().fingerprint(HashAlg::Sha256).to_string();
        let mut signed = SignedAction {
            action: Action::Approve,
            kind: Kind::Community,
            request_id: Uuid::from_u128(3),
            target: "a.example".into(),
            digest: digest.map(str::to_owned),
            operator,
            signed_at: "2026-11-30T12:00:00Z".into(),
            nonce: fresh_nonce(),
            signature: String::new(),
        };
        let text = statement_text(
            signed.action,
            signed.kind,
            signed.request_id,
            &signed.target,
            signed.digest.as_deref(),
            &signed.operator,
            &signed.signed_at,
            &signed.nonce,
        );
        let sig = key
            .sign(SIGNATURE_NAMESPACE, HashAlg::Sha512, text.as_bytes())
            .unwrap();
        signed.signature = sig.to_pem(LineEnding::LF).unwrap();
        signed
    }

    #[test]
    fn a_signature_verifies_with_its_key_and_fails_when_any_field_changes() {
        let key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).unwrap();
        let line = key.public_key().to_openssh().unwrap();
        let signed = signed_with(&key, Some("d1"));
        verify_signature(&line, &signed).unwrap();
        let mut other = signed.clone();
        other.digest = Some("d2".into());
        assert!(matches!(
            verify_signature(&line, &other),
            Err(IdentityError::BadSignature { .. })
        ));
        let stranger = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).unwrap();
        let stranger_line = stranger.public_key().to_openssh().unwrap();
        assert!(verify_signature(&stranger_line, &signed).is_err());
    }

    #[test]
    fn keys_are_parsed_with_their_fingerprint_and_rsa_is_refused() {
        let key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).unwrap();
        let line = key.public_key().to_openssh().unwrap();
        let parsed = parse_public_key(&format!("# comment\n{line}\n")).unwrap();
        assert!(parsed.fingerprint.starts_with("SHA256:"));
        assert_eq!(parsed.algorithm, "ssh-ed25519");
        assert!(parse_public_key("ssh-ed25519 notbase64").is_err());
        let rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDL test";
        assert!(parse_public_key(rsa).is_err());
        assert!(fresh_nonce().len() == 32);
    }
}
