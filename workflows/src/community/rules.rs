//! The rules operator messages (approve, abort, unblock) must pass, as pure functions.
//!
//! The workflow runs them in update validators (a refused update changes nothing and leaves no
//! history event) and again when a handler starts, because another message may have changed the
//! state between validation and execution. Each refusal says which rule failed and what to do.

use thiserror::Error;
use uuid::Uuid;

use super::contracts::{AbortRequest, ApprovalRecord, ApproveRequest, UnblockRequest};
use super::phase::Phase;
use crate::approval::{self, DigestRefusal, Operator, TwoPersonRefusal};
use crate::operator::{Action, Expected, Kind, SignatureRefusal, check_binding};

/// Why an approval was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApprovalRefusal {
    /// An approval is already recorded.
    #[error("request already approved by {approved_by} at {approved_at}; nothing to do")]
    AlreadyApproved {
        /// Who approved.
        approved_by: String,
        /// When.
        approved_at: String,
    },
    /// Another approval is being recorded right now.
    #[error("an approval is already being recorded; query status to see it")]
    InProgress,
    /// The request is not waiting for an approval.
    #[error(
        "request is in phase {phase}, not awaiting_approval; approve only once the inventory is frozen and before anything else happened"
    )]
    WrongPhase {
        /// The current phase.
        phase: Phase,
    },
    /// No approver named.
    #[error("approved_by is empty; name the approving operator")]
    MissingApprover,
    /// The approval's signature is missing, malformed, bound to something else, or made with
    /// the requester's key (two-person rule).
    #[error(transparent)]
    Signature(#[from] SignatureRefusal),
    /// The approver gives the requester's name (another key of the requester, or a run started
    /// before signatures, see [`Subject::signed`]).
    #[error(
        "approver {approver:?} is the requester; a second operator must approve (two-person rule)"
    )]
    SelfApproval {
        /// The approver as given.
        approver: String,
    },
    /// The digest is not the frozen one.
    #[error(
        "digest {given:?} does not match the frozen inventory digest {frozen:?}; review the inventory (status) and approve its digest"
    )]
    DigestMismatch {
        /// The digest the approver sent.
        given: String,
        /// The frozen digest.
        frozen: String,
    },
}

/// Why an abort was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AbortRefusal {
    /// No actor named.
    #[error("actor is empty; name the operator aborting")]
    MissingActor,
    /// No reason given.
    #[error("reason is empty; say why the deletion is aborted")]
    MissingReason,
    /// The request has ended.
    #[error("request already ended (phase {phase}); nothing to abort")]
    Ended {
        /// The terminal phase.
        phase: Phase,
    },
    /// The request row does not exist yet.
    #[error("request is still being registered; retry the abort in a moment")]
    NotRegistered,
    /// An abort is already accepted.
    #[error("an abort by {actor} is already in progress; query status to follow it")]
    AlreadyAborting {
        /// Who aborted first.
        actor: String,
    },
    /// Object versions were deleted: there is nothing to go back to.
    #[error(
        "deletion passed the irreversible point (phase {phase}: object versions were deleted); abort refused, the deletion runs to completion"
    )]
    PastIrreversiblePoint {
        /// The current phase.
        phase: Phase,
    },
    /// The abort's signature is missing, malformed or bound to something else.
    #[error(transparent)]
    Signature(#[from] SignatureRefusal),
    /// Another abort's signature is being verified.
    #[error("an abort is being recorded; query status to follow it")]
    InProgress,
    /// The database recorded the irreversible point before this abort reached it (the refusal is
    /// in the audit trail).
    #[error(
        "deletion passed the irreversible point: the database recorded it before this abort; abort refused, the deletion runs to completion ({reason})"
    )]
    RefusedByDatabase {
        /// The store's refusal.
        reason: String,
    },
}

/// Why an unblock was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnblockRefusal {
    /// No actor named.
    #[error("actor is empty; name the operator unblocking")]
    MissingActor,
    /// No remediation given.
    #[error("reason is empty; say what was remediated")]
    MissingReason,
    /// Nothing waits for an unblock.
    #[error("request is not blocked (phase {phase}); nothing to unblock")]
    NotBlocked {
        /// The current phase.
        phase: Phase,
    },
    /// Another unblock is being recorded.
    #[error("an unblock is already being recorded; query status to follow it")]
    InProgress,
    /// The unblock's signature is missing, malformed or bound to something else.
    #[error(transparent)]
    Signature(#[from] SignatureRefusal),
}

/// Why an operator message (update or signal) did not take effect.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MessageError {
    /// The approval broke a rule.
    #[error(transparent)]
    Approval(#[from] ApprovalRefusal),
    /// The abort broke a rule.
    #[error(transparent)]
    Abort(#[from] AbortRefusal),
    /// The unblock broke a rule.
    #[error(transparent)]
    Unblock(#[from] UnblockRefusal),
    /// The message was valid but its evidence could not be persisted; nothing changed.
    #[error("{what} could not be recorded, nothing changed: {reason}")]
    NotRecorded {
        /// Which message.
        what: &'static str,
        /// The activity's failure.
        reason: String,
    },
    /// The message's signed statement was delivered before (an update's statement sent again
    /// as a signal): this copy changes nothing.
    #[error("{0}")]
    Repeat(String),
    /// The abort was accepted, but lifting the fence failed permanently.
    #[error("abort accepted, but it is blocked: {reason}; remediate and unblock to retry it")]
    AbortBlocked {
        /// The blocking failure.
        reason: String,
    },
}

/// The request an operator message is about, as its signature must name it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The request.
    pub request_id: Uuid,
    /// The community host.
    pub host: &'a str,
    /// Whether messages must be signed: true for every run started since operator identity;
    /// false only while replaying a history recorded before it (a patch marker decides), so
    /// such a history replays command for command.
    pub signed: bool,
}

impl<'a> Subject<'a> {
    fn expects(&self, action: Action, digest: Option<&'a str>) -> Expected<'a> {
        Expected {
            action,
            kind: Kind::Community,
            request_id: self.request_id,
            target: self.host,
            digest,
        }
    }
}

/// What an approval is checked against.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalGate<'a> {
    /// The current phase.
    pub phase: Phase,
    /// The request and host the approval's signature must name.
    pub subject: Subject<'a>,
    /// The fingerprint of the requester's key, which may not approve.
    pub requester: Option<&'a str>,
    /// The requester's name (the two-person rule of unsigned runs).
    pub requested_by: &'a str,
    /// The frozen inventory digest, once frozen.
    pub frozen_digest: Option<&'a str>,
    /// The recorded approval, if any.
    pub approval: Option<&'a ApprovalRecord>,
    /// Whether an approval is being recorded right now.
    pub approval_in_flight: bool,
}

/// Checks an approval: not yet approved, awaiting approval, a named approver, exactly the frozen
/// digest, signed for this request and digest, and by a second person: the one approval rule of
/// [`crate::approval`] (another key than the requester's and another name; runs made before
/// signatures compare names only). The registry and the signature itself are checked by the
/// activity that records the approval.
pub fn check_approval(
    gate: &ApprovalGate<'_>,
    request: &ApproveRequest,
) -> Result<(), ApprovalRefusal> {
    if let Some(record) = gate.approval {
        return Err(ApprovalRefusal::AlreadyApproved {
            approved_by: record.approved_by.clone(),
            approved_at: record.approved_at.clone(),
        });
    }
    if gate.approval_in_flight {
        return Err(ApprovalRefusal::InProgress);
    }
    if gate.phase != Phase::AwaitingApproval {
        return Err(ApprovalRefusal::WrongPhase { phase: gate.phase });
    }
    let approver = request.approved_by.trim();
    if approver.is_empty() {
        return Err(ApprovalRefusal::MissingApprover);
    }
    let frozen =
        approval::check_digest(gate.frozen_digest, &request.digest).map_err(|refusal| {
            let frozen = match refusal {
                DigestRefusal::Mismatch { frozen, .. } => frozen,
                DigestRefusal::NotFrozen { .. } => String::new(),
            };
            ApprovalRefusal::DigestMismatch {
                given: request.digest.clone(),
                frozen,
            }
        })?;
    let requester = Operator {
        fingerprint: gate.requester,
        name: gate.requested_by,
    };
    let approver = Operator {
        fingerprint: None,
        name: approver,
    };
    if !gate.subject.signed {
        return check_two_person(requester, approver, request);
    }
    let expected = gate.subject.expects(Action::Approve, Some(frozen));
    let signed = check_binding(request.signed.as_ref(), &expected)?;
    let approver = Operator {
        fingerprint: Some(signed.operator.as_str()),
        ..approver
    };
    check_two_person(requester, approver, request)
}

/// The two-person rule, with its refusals in this workflow's words.
fn check_two_person(
    requester: Operator<'_>,
    approver: Operator<'_>,
    request: &ApproveRequest,
) -> Result<(), ApprovalRefusal> {
    approval::check_two_person(requester, approver).map_err(|refusal| match refusal {
        TwoPersonRefusal::SameKey { fingerprint } => {
            ApprovalRefusal::Signature(SignatureRefusal::SameOperator { fingerprint })
        }
        TwoPersonRefusal::SameName { .. } => ApprovalRefusal::SelfApproval {
            approver: request.approved_by.clone(),
        },
    })
}

/// What an abort is checked against.
#[derive(Debug, Clone, Copy)]
pub struct AbortGate<'a> {
    /// The current phase.
    pub phase: Phase,
    /// The request and host the abort's signature must name.
    pub subject: Subject<'a>,
    /// Whether the request row exists.
    pub registered: bool,
    /// The abort already accepted, if any.
    pub accepted: Option<&'a AbortRequest>,
    /// Whether another abort's signature is being recorded.
    pub in_flight: bool,
}

/// Checks an abort message and the request's state, except the irreversible point: an abort past
/// it is accepted by the validator so the refusal can be recorded (see [`check_reversible`]).
pub fn check_abort(gate: &AbortGate<'_>, request: &AbortRequest) -> Result<(), AbortRefusal> {
    if request.actor.trim().is_empty() {
        return Err(AbortRefusal::MissingActor);
    }
    if request.reason.trim().is_empty() {
        return Err(AbortRefusal::MissingReason);
    }
    if gate.phase.is_terminal() {
        return Err(AbortRefusal::Ended { phase: gate.phase });
    }
    if !gate.registered {
        return Err(AbortRefusal::NotRegistered);
    }
    if let Some(first) = gate.accepted {
        return Err(AbortRefusal::AlreadyAborting {
            actor: first.actor.clone(),
        });
    }
    if gate.in_flight {
        return Err(AbortRefusal::InProgress);
    }
    if !gate.subject.signed {
        return Ok(());
    }
    let expected = gate.subject.expects(Action::Abort, None);
    check_binding(request.signed.as_ref(), &expected)?;
    Ok(())
}

/// Refuses an abort the workflow knows comes too late: after object deletion, or during it once
/// the database refused an abort because its irreversible marker was set. During object deletion
/// otherwise the abort passes tentatively and the abort activity decides under the request lock.
pub fn check_reversible(phase: Phase, irreversible_seen: bool) -> Result<(), AbortRefusal> {
    if phase.abort_allowed() || (phase.abort_undecided() && !irreversible_seen) {
        Ok(())
    } else {
        Err(AbortRefusal::PastIrreversiblePoint { phase })
    }
}

/// Checks an unblock: named actor and remediation, a request that is blocked, and a signature
/// for this request.
pub fn check_unblock(
    subject: &Subject<'_>,
    phase: Phase,
    blocked: bool,
    unblock_in_flight: bool,
    request: &UnblockRequest,
) -> Result<(), UnblockRefusal> {
    if request.actor.trim().is_empty() {
        return Err(UnblockRefusal::MissingActor);
    }
    if request.reason.trim().is_empty() {
        return Err(UnblockRefusal::MissingReason);
    }
    if !blocked {
        return Err(UnblockRefusal::NotBlocked { phase });
    }
    if unblock_in_flight {
        return Err(UnblockRefusal::InProgress);
    }
    if !subject.signed {
        return Ok(());
    }
    check_binding(
        request.signed.as_ref(),
        &subject.expects(Action::Unblock, None),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::SignedAction;

    const HOST: &str = "a.example";

    fn subject() -> Subject<'static> {
        Subject {
            request_id: Uuid::from_u128(1),
            host: HOST,
            signed: true,
        }
    }

    fn signed(action: Action, operator: &str, digest: Option<&str>) -> SignedAction {
        SignedAction {
            action,
            kind: Kind::Community,
            request_id: Uuid::from_u128(1),
            target: HOST.into(),
            digest: digest.map(str::to_owned),
            operator: operator.into(),
            signed_at: "2026-11-30T12:00:00Z".into(),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            signature: "-----BEGIN SSH SIGNATURE-----\nx\n-----END SSH SIGNATURE-----\n".into(),
        }
    }

    fn awaiting<'a>(digest: &'a str) -> ApprovalGate<'a> {
        ApprovalGate {
            phase: Phase::AwaitingApproval,
            subject: subject(),
            requester: Some("SHA256:alice"),
            requested_by: "alice",
            frozen_digest: Some(digest),
            approval: None,
            approval_in_flight: false,
        }
    }

    fn approve(by: &str, digest: &str) -> ApproveRequest {
        ApproveRequest {
            approved_by: by.into(),
            digest: digest.into(),
            note: None,
            signed: Some(signed(
                Action::Approve,
                &format!("SHA256:{}", by.trim().to_lowercase()),
                Some(digest),
            )),
        }
    }

    #[test]
    fn a_second_operator_approving_the_frozen_digest_passes() {
        assert_eq!(
            check_approval(&awaiting("d1"), &approve("bob", "d1")),
            Ok(())
        );
    }

    #[test]
    fn the_requesters_key_cannot_approve_whatever_name_it_gives() {
        let mut request = approve("bob", "d1");
        request.signed = Some(signed(Action::Approve, "SHA256:alice", Some("d1")));
        let refusal = check_approval(&awaiting("d1"), &request);
        assert!(matches!(
            refusal,
            Err(ApprovalRefusal::Signature(
                SignatureRefusal::SameOperator { .. }
            ))
        ));
        assert!(refusal.unwrap_err().to_string().contains("two-person rule"));
    }

    #[test]
    fn another_key_under_the_requesters_name_cannot_approve() {
        let mut request = approve(" ALICE ", "d1");
        request.signed = Some(signed(Action::Approve, "SHA256:alice-new", Some("d1")));
        assert_eq!(
            check_approval(&awaiting("d1"), &request),
            Err(ApprovalRefusal::SelfApproval {
                approver: " ALICE ".into()
            })
        );
    }

    #[test]
    fn an_unsigned_run_compares_names() {
        let gate = ApprovalGate {
            subject: Subject {
                signed: false,
                ..subject()
            },
            requester: None,
            ..awaiting("d1")
        };
        let mut own = approve("Alice", "d1");
        own.signed = None;
        assert!(matches!(
            check_approval(&gate, &own),
            Err(ApprovalRefusal::SelfApproval { .. })
        ));
        let mut other = approve("bob", "d1");
        other.signed = None;
        assert_eq!(check_approval(&gate, &other), Ok(()));
    }

    #[test]
    fn an_unsigned_approval_or_one_signed_for_another_digest_is_refused() {
        let mut unsigned = approve("bob", "d1");
        unsigned.signed = None;
        assert!(matches!(
            check_approval(&awaiting("d1"), &unsigned),
            Err(ApprovalRefusal::Signature(SignatureRefusal::Missing { .. }))
        ));
        let mut other = approve("bob", "d1");
        other.signed = Some(signed(Action::Approve, "SHA256:bob", Some("d2")));
        assert!(matches!(
            check_approval(&awaiting("d1"), &other),
            Err(ApprovalRefusal::Signature(
                SignatureRefusal::OtherDigest { .. }
            ))
        ));
    }

    #[test]
    fn a_digest_other_than_the_frozen_one_is_refused_naming_both() {
        let refusal = check_approval(&awaiting("d1"), &approve("bob", "d2")).unwrap_err();
        let message = refusal.to_string();
        assert!(
            message.contains("\"d2\"") && message.contains("\"d1\""),
            "{message}"
        );
    }

    #[test]
    fn approval_outside_awaiting_approval_is_refused_naming_the_phase() {
        let gate = ApprovalGate {
            phase: Phase::Submitted,
            ..awaiting("d1")
        };
        let refusal = check_approval(&gate, &approve("bob", "d1")).unwrap_err();
        assert_eq!(
            refusal,
            ApprovalRefusal::WrongPhase {
                phase: Phase::Submitted
            }
        );
        assert!(refusal.to_string().contains("submitted"));
    }

    #[test]
    fn an_empty_approver_is_refused() {
        assert_eq!(
            check_approval(&awaiting("d1"), &approve("  ", "d1")),
            Err(ApprovalRefusal::MissingApprover)
        );
    }

    #[test]
    fn a_second_approval_is_refused_naming_the_first() {
        let record = ApprovalRecord {
            approved_by: "bob".into(),
            approved_at: "2024-01-01T00:00:00Z".into(),
            digest: "d1".into(),
            note: None,
            signed: None,
        };
        let gate = ApprovalGate {
            approval: Some(&record),
            ..awaiting("d1")
        };
        let refusal = check_approval(&gate, &approve("carol", "d1")).unwrap_err();
        assert!(refusal.to_string().contains("already approved by bob"));
    }

    fn abort(actor: &str, reason: &str) -> AbortRequest {
        AbortRequest {
            actor: actor.into(),
            reason: reason.into(),
            signed: Some(signed(Action::Abort, "SHA256:carol", None)),
        }
    }

    #[test]
    fn abort_needs_actor_reason_a_registered_open_request_and_no_earlier_abort() {
        let open = AbortGate {
            phase: Phase::Draining,
            subject: subject(),
            registered: true,
            accepted: None,
            in_flight: false,
        };
        assert_eq!(check_abort(&open, &abort("bob", "wrong host")), Ok(()));
        assert_eq!(
            check_abort(&open, &abort(" ", "x")),
            Err(AbortRefusal::MissingActor)
        );
        assert_eq!(
            check_abort(&open, &abort("bob", "")),
            Err(AbortRefusal::MissingReason)
        );
        let ended = AbortGate {
            phase: Phase::RetentionPending,
            ..open
        };
        assert!(matches!(
            check_abort(&ended, &abort("bob", "x")),
            Err(AbortRefusal::Ended { .. })
        ));
        let unregistered = AbortGate {
            registered: false,
            ..open
        };
        assert_eq!(
            check_abort(&unregistered, &abort("bob", "x")),
            Err(AbortRefusal::NotRegistered)
        );
        let first = abort("carol", "first");
        let aborting = AbortGate {
            accepted: Some(&first),
            ..open
        };
        assert!(matches!(
            check_abort(&aborting, &abort("bob", "x")),
            Err(AbortRefusal::AlreadyAborting { .. })
        ));
    }

    #[test]
    fn abort_is_tentative_while_deleting_objects_and_refused_once_the_marker_is_known() {
        assert_eq!(check_reversible(Phase::Draining, false), Ok(()));
        assert_eq!(check_reversible(Phase::DeletingObjects, false), Ok(()));
        assert_eq!(
            check_reversible(Phase::DeletingObjects, true),
            Err(AbortRefusal::PastIrreversiblePoint {
                phase: Phase::DeletingObjects
            })
        );
        let refusal = check_reversible(Phase::PurgingRows, false)
            .unwrap_err()
            .to_string();
        assert!(refusal.starts_with("deletion passed the irreversible point"));
        assert!(refusal.contains("abort refused"));
    }

    #[test]
    fn unblock_requires_a_blocked_request_and_names_the_phase_otherwise() {
        let request = UnblockRequest {
            actor: "bob".into(),
            reason: "removed the stray key".into(),
            signed: Some(signed(Action::Unblock, "SHA256:bob", None)),
        };
        let subject = subject();
        assert_eq!(
            check_unblock(&subject, Phase::Fencing, true, false, &request),
            Ok(())
        );
        let approval_signature = UnblockRequest {
            signed: Some(signed(Action::Approve, "SHA256:bob", None)),
            ..request.clone()
        };
        assert!(matches!(
            check_unblock(&subject, Phase::Fencing, true, false, &approval_signature),
            Err(UnblockRefusal::Signature(
                SignatureRefusal::OtherAction { .. }
            ))
        ));
        let refusal = check_unblock(&subject, Phase::Fencing, false, false, &request).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "request is not blocked (phase fencing); nothing to unblock"
        );
        assert_eq!(
            check_unblock(&subject, Phase::Fencing, true, true, &request),
            Err(UnblockRefusal::InProgress)
        );
        let anonymous = UnblockRequest {
            actor: String::new(),
            reason: "x".into(),
            signed: None,
        };
        assert_eq!(
            check_unblock(&subject, Phase::Fencing, true, false, &anonymous),
            Err(UnblockRefusal::MissingActor)
        );
    }
}
