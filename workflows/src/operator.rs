//! Operator identity: the statement an operator signs with an SSH key for every action, and the
//! pure checks that bind a signed statement to what the workflow expects.
//!
//! An operator action (submit, approve, abort, unblock; community or user deletion) carries a
//! [`SignedAction`]: the statement's fields plus an armored SSHSIG signature made under the
//! namespace [`SIGNATURE_NAMESPACE`] over exactly [`SignedAction::statement`]. The canonical text
//! is what `ssh-keygen -Y sign` signed and what an outside verifier feeds to `ssh-keygen -Y
//! verify`:
//!
//! ```text
//! buzz-deletion signed action v1
//! action: approve
//! kind: community
//! request_id: 6f0c…
//! target: chat.example.org
//! digest: 3b9a…            (`-` when the action names no digest)
//! operator: SHA256:…       (fingerprint of the signing key)
//! signed_at: 2026-11-30T12:00:00Z
//! nonce: 32 lowercase hex digits
//! ```
//!
//! Every line ends with `\n`, fields come in this order, and no value may contain a line break or
//! be empty, so no two different statements share a text.
//!
//! What this module checks is pure (no clock, no registry): the workflow's update validators use
//! it to refuse early. Whether the key is registered and unrevoked, whether the signature
//! verifies, whether the time is inside the window and whether the nonce is fresh is decided by
//! the activity that records the action, in the same database transaction.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use uuid::Uuid;

/// The SSHSIG namespace every operator signature is made under (`ssh-keygen -Y sign -n`).
pub const SIGNATURE_NAMESPACE: &str = "action@buzz-deletion";
/// First line of the canonical statement; names the encoding's version.
pub const STATEMENT_HEADER: &str = "buzz-deletion signed action v1";
/// Written for a field that holds no value (the digest of anything but an approval).
pub const NO_VALUE: &str = "-";

/// What an operator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Asks for a deletion.
    Submit,
    /// Approves the frozen inventory digest (the second person).
    Approve,
    /// Ends the request before the irreversible point.
    Abort,
    /// Resumes a blocked request after remediation.
    Unblock,
}

impl Action {
    /// The name used in the statement and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Submit => "submit",
            Action::Approve => "approve",
            Action::Abort => "abort",
            Action::Unblock => "unblock",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which kind of deletion the action concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A whole community.
    Community,
    /// One user.
    User,
}

impl Kind {
    /// The name used in the statement and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Community => "community",
            Kind::User => "user",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A signed operator statement, as it travels in every operator message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedAction {
    /// What the operator does.
    pub action: Action,
    /// Community or user deletion.
    pub kind: Kind,
    /// The request acted on.
    pub request_id: Uuid,
    /// The community host or the user target of the request.
    pub target: String,
    /// The frozen inventory digest (approvals only).
    #[serde(default)]
    pub digest: Option<String>,
    /// SHA-256 fingerprint of the signing key, `SHA256:…` as `ssh-keygen -l` prints it.
    pub operator: String,
    /// When it was signed: RFC 3339 UTC, whole seconds (`2026-11-30T12:00:00Z`).
    pub signed_at: String,
    /// 128 random bits as 32 lowercase hex digits; a signature is used once.
    pub nonce: String,
    /// The armored SSHSIG signature (`-----BEGIN SSH SIGNATURE-----` …) over [`Self::statement`].
    pub signature: String,
}

impl SignedAction {
    /// The canonical text that was signed (see the module documentation).
    pub fn statement(&self) -> String {
        statement_text(
            self.action,
            self.kind,
            self.request_id,
            &self.target,
            self.digest.as_deref(),
            &self.operator,
            &self.signed_at,
            &self.nonce,
        )
    }

    /// Reads a stored canonical statement back, with its signature; `None` unless the text is
    /// exactly what [`Self::statement`] renders for the fields it names.
    pub fn from_statement(text: &str, signature: &str) -> Option<SignedAction> {
        let mut lines = text.strip_suffix('\n')?.split('\n');
        if lines.next()? != STATEMENT_HEADER {
            return None;
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|line| line.strip_prefix(name))
                .and_then(|rest| rest.strip_prefix(": "))
                .map(str::to_owned)
        };
        let action = match field("action")?.as_str() {
            "submit" => Action::Submit,
            "approve" => Action::Approve,
            "abort" => Action::Abort,
            "unblock" => Action::Unblock,
            _ => return None,
        };
        let kind = match field("kind")?.as_str() {
            "community" => Kind::Community,
            "user" => Kind::User,
            _ => return None,
        };
        let request_id = field("request_id")?.parse().ok()?;
        let target = field("target")?;
        let digest = field("digest")?;
        let signed = SignedAction {
            action,
            kind,
            request_id,
            target,
            digest: (digest != NO_VALUE).then_some(digest),
            operator: field("operator")?,
            signed_at: field("signed_at")?,
            nonce: field("nonce")?,
            signature: signature.to_owned(),
        };
        (signed.statement() == text).then_some(signed)
    }

    /// Refuses a statement whose fields cannot be encoded unambiguously or are not of their
    /// documented shape. Says nothing about the signature itself.
    pub fn check_well_formed(&self) -> Result<(), SignatureRefusal> {
        let malformed = |field: &'static str, reason: &str| SignatureRefusal::Malformed {
            field,
            reason: reason.to_owned(),
        };
        let text_fields: [(&'static str, &str); 4] = [
            ("target", &self.target),
            ("operator", &self.operator),
            ("signed_at", &self.signed_at),
            ("nonce", &self.nonce),
        ];
        for (field, value) in text_fields {
            if value.trim().is_empty() || value == NO_VALUE {
                return Err(malformed(field, "is empty"));
            }
            if value.contains(['\n', '\r']) || value.trim() != value {
                return Err(malformed(field, "holds a line break or surrounding spaces"));
            }
        }
        if let Some(digest) = &self.digest
            && (digest.is_empty()
                || digest == NO_VALUE
                || digest.contains(['\n', '\r'])
                || digest.trim() != digest)
        {
            return Err(malformed("digest", "is empty or holds a line break"));
        }
        if !self.operator.starts_with("SHA256:") {
            return Err(malformed(
                "operator",
                "is not a SHA256:… key fingerprint (ssh-keygen -l -E sha256)",
            ));
        }
        if self.nonce.len() != 32
            || !self
                .nonce
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(malformed("nonce", "is not 32 lowercase hex digits"));
        }
        if !is_rfc3339_utc_seconds(&self.signed_at) {
            return Err(malformed(
                "signed_at",
                "is not RFC 3339 UTC with whole seconds (YYYY-MM-DDTHH:MM:SSZ)",
            ));
        }
        if !self.signature.contains("BEGIN SSH SIGNATURE") {
            return Err(malformed("signature", "is not an armored SSH signature"));
        }
        Ok(())
    }
}

/// The canonical statement of these fields (what [`SignedAction::statement`] returns): the
/// signer builds it before there is a signature.
#[allow(clippy::too_many_arguments)]
pub fn statement_text(
    action: Action,
    kind: Kind,
    request_id: Uuid,
    target: &str,
    digest: Option<&str>,
    operator: &str,
    signed_at: &str,
    nonce: &str,
) -> String {
    format!(
        "{STATEMENT_HEADER}\naction: {action}\nkind: {kind}\nrequest_id: {request_id}\n\
         target: {target}\ndigest: {}\noperator: {operator}\nsigned_at: {signed_at}\n\
         nonce: {nonce}\n",
        digest.unwrap_or(NO_VALUE)
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ`, digits where digits belong (the database parses the value itself).
fn is_rfc3339_utc_seconds(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 20
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            10 => *b == b'T',
            13 | 16 => *b == b':',
            19 => *b == b'Z',
            _ => b.is_ascii_digit(),
        })
}

/// What a signed statement must say to count for one message.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The action the message performs.
    pub action: Action,
    /// The kind of deletion.
    pub kind: Kind,
    /// The request the workflow drives.
    pub request_id: Uuid,
    /// The request's host or user target.
    pub target: &'a str,
    /// The frozen digest (approvals), `None` otherwise.
    pub digest: Option<&'a str>,
}

/// Why a signature does not count. Each message is one line an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureRefusal {
    /// The message carries no signature.
    #[error(
        "{action} is not signed: every operator action needs an SSH signature; use the CLI with \
         --key, or paste the JSON `buzz-deletion community sign {action} …` prints"
    )]
    Missing {
        /// The action attempted.
        action: Action,
    },
    /// A field of the statement is malformed.
    #[error("signed statement refused: {field} {reason}")]
    Malformed {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The statement signs another action.
    #[error("signature is for action {signed}, not {expected}; sign the action you send")]
    OtherAction {
        /// What was signed.
        signed: Action,
        /// What the message does.
        expected: Action,
    },
    /// The statement is about another kind of deletion.
    #[error("signature is for a {signed} deletion, not a {expected} deletion")]
    OtherKind {
        /// What was signed.
        signed: Kind,
        /// The request's kind.
        expected: Kind,
    },
    /// The statement names another request.
    #[error("signature is for request {signed}, not {expected}; sign this request's id")]
    OtherRequest {
        /// The request signed.
        signed: Uuid,
        /// This request.
        expected: Uuid,
    },
    /// The statement names another host or user.
    #[error("signature is for target {signed:?}, not {expected:?}")]
    OtherTarget {
        /// The target signed.
        signed: String,
        /// This request's target.
        expected: String,
    },
    /// The statement names another digest (or none where one is needed).
    #[error(
        "signature is for digest {signed:?}, not the frozen inventory digest {expected:?}; review \
         the inventory and sign its digest"
    )]
    OtherDigest {
        /// The digest signed (`-` for none).
        signed: String,
        /// The digest expected (`-` for none).
        expected: String,
    },
    /// The approving key is the requesting key.
    #[error(
        "key {fingerprint} requested this deletion and cannot approve it; a second operator with \
         another registered key must approve (two-person rule)"
    )]
    SameOperator {
        /// The fingerprint of both signatures.
        fingerprint: String,
    },
}

/// Checks that `signed` is present, well formed and says exactly what `expected` says; returns
/// it. The signature itself is verified by the recording activity.
pub fn check_binding<'s>(
    signed: Option<&'s SignedAction>,
    expected: &Expected<'_>,
) -> Result<&'s SignedAction, SignatureRefusal> {
    let signed = signed.ok_or(SignatureRefusal::Missing {
        action: expected.action,
    })?;
    signed.check_well_formed()?;
    if signed.action != expected.action {
        return Err(SignatureRefusal::OtherAction {
            signed: signed.action,
            expected: expected.action,
        });
    }
    if signed.kind != expected.kind {
        return Err(SignatureRefusal::OtherKind {
            signed: signed.kind,
            expected: expected.kind,
        });
    }
    if signed.request_id != expected.request_id {
        return Err(SignatureRefusal::OtherRequest {
            signed: signed.request_id,
            expected: expected.request_id,
        });
    }
    if signed.target != expected.target.trim() {
        return Err(SignatureRefusal::OtherTarget {
            signed: signed.target.clone(),
            expected: expected.target.trim().to_owned(),
        });
    }
    if signed.digest.as_deref() != expected.digest {
        return Err(SignatureRefusal::OtherDigest {
            signed: signed.digest.clone().unwrap_or_else(|| NO_VALUE.into()),
            expected: expected.digest.unwrap_or(NO_VALUE).to_owned(),
        });
    }
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(action: Action, digest: Option<&str>) -> SignedAction {
        SignedAction {
            action,
            kind: Kind::Community,
            request_id: Uuid::from_u128(7),
            target: "chat.example.org".into(),
            digest: digest.map(str::to_owned),
            operator: "SHA256:abc".into(),
            signed_at: "2026-11-30T12:00:00Z".into(),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            signature: "-----BEGIN SSH SIGNATURE-----\nx\n-----END SSH SIGNATURE-----\n".into(),
        }
    }

    fn expected(action: Action, digest: Option<&str>) -> Expected<'_> {
        Expected {
            action,
            kind: Kind::Community,
            request_id: Uuid::from_u128(7),
            target: "chat.example.org",
            digest,
        }
    }

    #[test]
    fn the_statement_is_the_documented_text() {
        assert_eq!(
            signed(Action::Approve, Some("d1")).statement(),
            "buzz-deletion signed action v1\naction: approve\nkind: community\n\
             request_id: 00000000-0000-0000-0000-000000000007\ntarget: chat.example.org\n\
             digest: d1\noperator: SHA256:abc\nsigned_at: 2026-11-30T12:00:00Z\n\
             nonce: 0123456789abcdef0123456789abcdef\n"
        );
        assert!(
            signed(Action::Submit, None)
                .statement()
                .contains("\ndigest: -\n")
        );
    }

    #[test]
    fn a_stored_statement_reads_back_exactly_and_anything_else_is_refused() {
        let approval = signed(Action::Approve, Some("d1"));
        let text = approval.statement();
        assert_eq!(
            SignedAction::from_statement(&text, &approval.signature),
            Some(approval.clone())
        );
        let submit = signed(Action::Submit, None);
        assert_eq!(
            SignedAction::from_statement(&submit.statement(), &submit.signature),
            Some(submit)
        );
        assert_eq!(
            SignedAction::from_statement(&text.replace("d1", "d 1"), "x").map(|s| s.digest),
            Some(Some("d 1".into()))
        );
        assert!(SignedAction::from_statement(&text.replace("v1", "v2"), "x").is_none());
        assert!(SignedAction::from_statement(text.trim_end(), "x").is_none());
        assert!(SignedAction::from_statement(&format!("{text}extra: 1\n"), "x").is_none());
    }

    #[test]
    fn a_statement_bound_to_the_expected_action_passes() {
        let approval = signed(Action::Approve, Some("d1"));
        assert_eq!(
            check_binding(Some(&approval), &expected(Action::Approve, Some("d1"))),
            Ok(&approval)
        );
    }

    #[test]
    fn every_mismatch_is_refused_naming_it() {
        let approval = signed(Action::Approve, Some("d1"));
        let refusal = |e: Expected<'_>| check_binding(Some(&approval), &e).unwrap_err();
        assert!(matches!(
            refusal(expected(Action::Abort, Some("d1"))),
            SignatureRefusal::OtherAction { .. }
        ));
        assert!(matches!(
            refusal(expected(Action::Approve, Some("d2"))),
            SignatureRefusal::OtherDigest { .. }
        ));
        assert!(matches!(
            refusal(Expected {
                request_id: Uuid::from_u128(8),
                ..expected(Action::Approve, Some("d1"))
            }),
            SignatureRefusal::OtherRequest { .. }
        ));
        assert!(matches!(
            refusal(Expected {
                target: "other.example.org",
                ..expected(Action::Approve, Some("d1"))
            }),
            SignatureRefusal::OtherTarget { .. }
        ));
        assert!(matches!(
            refusal(Expected {
                kind: Kind::User,
                ..expected(Action::Approve, Some("d1"))
            }),
            SignatureRefusal::OtherKind { .. }
        ));
        let missing = check_binding(None, &expected(Action::Unblock, None)).unwrap_err();
        assert!(missing.to_string().contains("unblock is not signed"));
    }

    #[test]
    fn fields_that_would_make_the_text_ambiguous_are_refused() {
        let mut bad = signed(Action::Submit, None);
        bad.target = "a.example\ndigest: x".into();
        assert!(matches!(
            bad.check_well_formed(),
            Err(SignatureRefusal::Malformed {
                field: "target",
                ..
            })
        ));
        let mut bad = signed(Action::Submit, None);
        bad.nonce = "XYZ".into();
        assert!(bad.check_well_formed().is_err());
        let mut bad = signed(Action::Submit, None);
        bad.signed_at = "2026-11-30 12:00".into();
        assert!(bad.check_well_formed().is_err());
        let mut bad = signed(Action::Submit, None);
        bad.digest = Some("-".into());
        assert!(bad.check_well_formed().is_err());
    }
}
