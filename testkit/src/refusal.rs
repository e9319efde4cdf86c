//! Proofs that a refused operator action changed nothing: the request row, its approval and
//! its audit trail as Postgres holds them, read the same way by every refusal test, and the
//! reasons a refusal leaves on record.

use activities::store::{AuditEvent, Request};
use uuid::Uuid;

use crate::stack::Stack;

/// The deletion request's row as Postgres holds it.
pub async fn request_row(stack: &Stack, id: Uuid) -> Request {
    stack
        .store
        .get_request(id)
        .await
        .unwrap_or_else(|e| panic!("request {id}: {e}"))
}

/// Who approved the request, as its approval row says (`None`: not approved).
pub async fn approved_by(stack: &Stack, id: Uuid) -> Option<String> {
    stack
        .store
        .approval_of(id)
        .await
        .unwrap_or_else(|e| panic!("approval of {id}: {e}"))
        .map(|a| a.approved_by)
}

/// The request's audit trail, oldest first.
pub async fn audit_trail(stack: &Stack, id: Uuid) -> Vec<AuditEvent> {
    stack
        .store
        .audit_events(id)
        .await
        .unwrap_or_else(|e| panic!("audit trail of {id}: {e}"))
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
