//! Proofs that a refused operator action changed nothing: the request row, its approval and
//! its audit trail as Postgres holds them, read the same way by every refusal test, and the
//! reasons a refusal leaves on record.

use activities::store::{AuditEvent, Request};
use uuid::Uuid;

use crate::records::read;
use crate::stack::Stack;

/// The deletion request's row as Postgres holds it.
pub async fn request_row(stack: &Stack, id: Uuid) -> Request {
    let request = stack.store.get_request(id);
    read(format_args!("request {id}"), request).await
}

/// Who approved the request, as its approval row says (`None`: not approved).
pub async fn approved_by(stack: &Stack, id: Uuid) -> Option<String> {
    let approval = stack.store.approval_of(id);
    let approval = read(format_args!("approval of {id}"), approval).await;
    approval.map(|a| a.approved_by)
}

/// The request's audit trail, oldest first.
pub async fn audit_trail(stack: &Stack, id: Uuid) -> Vec<AuditEvent> {
    let trail = stack.store.audit_events(id);
    read(format_args!("audit trail of {id}"), trail).await
}

/// The request's one audit event named `event`: panics unless there is exactly one, recorded
/// for `actor`, whose detail gives `value` as its `field`.
pub async fn assert_one_event(
    stack: &Stack,
    id: Uuid,
    event: &str,
    actor: &str,
    (field, value): (&str, &str),
) -> AuditEvent {
    let trail = audit_trail(stack, id).await;
    let named: Vec<&AuditEvent> = trail.iter().filter(|e| e.event == event).collect();
    let [one] = named.as_slice() else {
        panic!("one {event} event expected: {trail:?}");
    };
    assert_eq!(one.actor, actor, "{event}: {one:?}");
    assert_eq!(one.detail[field], value, "{event}: {one:?}");
    (*one).clone()
}

/// The `reason`s of the request's audit events named `event`, oldest first.
pub async fn audit_reasons(stack: &Stack, id: Uuid, event: &str) -> Vec<String> {
    audit_trail(stack, id)
        .await
        .into_iter()
        .filter(|e| e.event == event)
        .map(|e| e.detail["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The request's stage, its approver and the length of its audit trail: what a refused
/// action must leave exactly as it was.
pub async fn stage_approval_and_audit(stack: &Stack, id: Uuid) -> (String, Option<String>, usize) {
    (
        request_row(stack, id).await.stage,
        approved_by(stack, id).await,
        audit_trail(stack, id).await.len(),
    )
}

/// The request's blocked reason, community or user request alike (empty when it is not
/// blocked).
pub async fn blocked_reason(stack: &Stack, id: &str) -> String {
    let reason: Option<String> =
        sqlx::query_scalar("SELECT blocked_reason FROM deletion.requests WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("blocked reason: {e}"));
    reason.unwrap_or_default()
}
