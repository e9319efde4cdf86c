//! The approval rule of both deletion kinds, in one pure place: the community and user workflows
//! check it when an approval arrives, and the community and user stores check it again inside the
//! transaction that records the approval.
//!
//! The rule has two parts:
//! - **Digest.** The approved digest must be exactly the frozen inventory digest: byte equality,
//!   no trimming and no case folding. A digest is a checksum of what the approver reviewed; any
//!   difference means another inventory.
//! - **Two persons.** The approver must not be the requester. An operator's identity is the
//!   fingerprint of their registered key (`SHA256:…`), compared exactly (it is base64, so case
//!   is significant). The operator name is a label, but a label that belongs to one person: a
//!   name is held by one live key at a time, and a person who rotates their key keeps it. So the
//!   approval is also refused when the names match, with [`same_operator_name`].

use thiserror::Error;

/// One side of an approval: the requester or the approver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator<'a> {
    /// The fingerprint of the key that signed (`None` for a run made before signatures).
    pub fingerprint: Option<&'a str>,
    /// The operator name the message or request gives.
    pub name: &'a str,
}

/// Why the approver does not count as a second person.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TwoPersonRefusal {
    /// The approving key is the requesting key.
    #[error(
        "key {fingerprint} requested this deletion and cannot approve it; a second operator with \
         another registered key must approve (two-person rule)"
    )]
    SameKey {
        /// The fingerprint of both signatures.
        fingerprint: String,
    },
    /// The approver's name is the requester's name (another key of the same person).
    #[error("two-person rule: {name} requested this deletion and cannot approve it")]
    SameName {
        /// The approver's name, trimmed.
        name: String,
    },
}

/// Why the approved digest is not the frozen one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DigestRefusal {
    /// The digest differs from the frozen digest.
    #[error("inventory digest {given} does not match the frozen digest {frozen}")]
    Mismatch {
        /// The digest the approver sent.
        given: String,
        /// The frozen digest.
        frozen: String,
    },
    /// No inventory is frozen yet.
    #[error("the request has no frozen inventory")]
    NotFrozen {
        /// The digest the approver sent.
        given: String,
    },
}

/// Whether two operator names are the same name: equal after trimming surrounding whitespace,
/// ignoring ASCII case. An empty name is nobody's name and equals nothing.
///
/// ASCII folding is the one comparison because registered names are ASCII only (letters,
/// digits, `._@-`, see the registry): for every name a key can hold it decides exactly what
/// Unicode folding would, it does not depend on a locale, and it agrees with the registry's
/// `lower(name)` uniqueness index on those names. A non-ASCII label never equals a registered
/// name, so the signature check refuses it anyway.
pub fn same_operator_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    !a.is_empty() && a.eq_ignore_ascii_case(b)
}

/// The two-person rule: refused when the approver signed with the requester's key, or gives the
/// requester's name. Fingerprints are compared only when both sides have one.
pub fn check_two_person(
    requester: Operator<'_>,
    approver: Operator<'_>,
) -> Result<(), TwoPersonRefusal> {
    if let (Some(requested), Some(approving)) = (requester.fingerprint, approver.fingerprint)
        && requested == approving
    {
        return Err(TwoPersonRefusal::SameKey {
            fingerprint: approving.to_owned(),
        });
    }
    if same_operator_name(requester.name, approver.name) {
        return Err(TwoPersonRefusal::SameName {
            name: approver.name.trim().to_owned(),
        });
    }
    Ok(())
}

/// The digest rule: `given` must be exactly the frozen digest; returns the frozen digest.
pub fn check_digest<'f>(frozen: Option<&'f str>, given: &str) -> Result<&'f str, DigestRefusal> {
    match frozen {
        Some(frozen) if frozen == given => Ok(frozen),
        Some(frozen) => Err(DigestRefusal::Mismatch {
            given: given.to_owned(),
            frozen: frozen.to_owned(),
        }),
        None => Err(DigestRefusal::NotFrozen {
            given: given.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op<'a>(fingerprint: Option<&'a str>, name: &'a str) -> Operator<'a> {
        Operator { fingerprint, name }
    }

    #[test]
    fn two_keys_with_two_names_are_two_persons() {
        assert_eq!(
            check_two_person(op(Some("SHA256:a"), "alice"), op(Some("SHA256:b"), "bob")),
            Ok(())
        );
    }

    #[test]
    fn names_match_ignoring_ascii_case_and_surrounding_whitespace() {
        assert!(same_operator_name("alice", " ALICE\t"));
        assert!(same_operator_name("Alice.Ops@x", "alice.ops@X"));
        assert!(!same_operator_name("alice", "alice2"));
        assert!(!same_operator_name("al ice", "alice"));
        assert!(!same_operator_name("", ""));
        assert!(!same_operator_name("  ", "  "));
        let refusal = check_two_person(op(None, "alice"), op(None, "  ALICE ")).unwrap_err();
        assert_eq!(
            refusal,
            TwoPersonRefusal::SameName {
                name: "ALICE".into()
            }
        );
    }

    #[test]
    fn the_same_key_under_another_name_is_the_same_person() {
        let refusal = check_two_person(op(Some("SHA256:a"), "alice"), op(Some("SHA256:a"), "bob"))
            .unwrap_err();
        assert_eq!(
            refusal,
            TwoPersonRefusal::SameKey {
                fingerprint: "SHA256:a".into()
            }
        );
    }

    #[test]
    fn fingerprints_compare_exactly() {
        // Base64 is case-sensitive: these are two keys.
        assert_eq!(
            check_two_person(
                op(Some("SHA256:abc"), "alice"),
                op(Some("SHA256:ABC"), "bob")
            ),
            Ok(())
        );
    }

    #[test]
    fn another_key_under_the_requesters_name_is_the_same_person() {
        // A rotated key keeps its holder's name.
        let refusal = check_two_person(
            op(Some("SHA256:old"), "alice"),
            op(Some("SHA256:new"), "Alice"),
        )
        .unwrap_err();
        assert_eq!(
            refusal,
            TwoPersonRefusal::SameName {
                name: "Alice".into()
            }
        );
    }

    #[test]
    fn a_missing_fingerprint_falls_back_to_names() {
        assert_eq!(
            check_two_person(op(None, "alice"), op(Some("SHA256:a"), "bob")),
            Ok(())
        );
        assert!(check_two_person(op(Some("SHA256:a"), "alice"), op(None, "alice")).is_err());
    }

    #[test]
    fn the_digest_must_be_exactly_the_frozen_one() {
        assert_eq!(check_digest(Some("d1"), "d1"), Ok("d1"));
        for given in ["d2", " d1", "d1 ", "D1", ""] {
            assert_eq!(
                check_digest(Some("d1"), given),
                Err(DigestRefusal::Mismatch {
                    given: given.into(),
                    frozen: "d1".into()
                }),
                "{given:?}"
            );
        }
        assert_eq!(
            check_digest(None, "d1"),
            Err(DigestRefusal::NotFrozen { given: "d1".into() })
        );
        assert_eq!(
            check_digest(Some("d1"), "d2").unwrap_err().to_string(),
            "inventory digest d2 does not match the frozen digest d1"
        );
    }
}
