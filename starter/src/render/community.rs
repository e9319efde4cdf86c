//! The text of the `community` commands: the submitted request and its frozen inventory, the
//! status (answered by the workflow or recorded without a worker), the awaited leases, the live
//! progress line of `watch`, the request list and the evidence `inspect` prints.

use activities::store::closed_world::summary::ClosedWorldSummary;
use activities::store::{AwaitedLease, Request, RequestInspection};
use uuid::Uuid;
use workflows::community::status::DeletionStatus;
use workflows::community::{InventorySummary, Phase};

use super::{Table, bar, key_values};
use crate::commands::community::{AWAITED_LEASES_SHOWN, PendingActivityView, RecordedStatus};

/// `community submit`: the request, its phase and digest, then the frozen inventory if any.
pub fn submitted_text(request_id: Uuid, host: &str, status: &DeletionStatus) -> String {
    let digest = status.inventory.as_ref().map(|i| i.digest.clone());
    let mut text = format!(
        "{}\n",
        key_values(
            "deletion submitted",
            &[
                ("request_id", request_id.to_string()),
                ("host", host.to_owned()),
                ("phase", status.phase.to_string()),
                ("inventory_digest", digest.unwrap_or_default()),
            ],
        )
    );
    if let Some(inventory) = &status.inventory {
        text.push_str(&inventory_text(inventory));
    }
    text
}

/// The frozen inventory an approver reviews: tenant tables, prefixes, uploads in progress and
/// the Redis key count.
pub fn inventory_text(inventory: &InventorySummary) -> String {
    let mut text = String::new();
    let mut tables = Table::new("tenant tables", &["table", "rows"]);
    for t in &inventory.tables {
        tables.row(vec![t.table.clone(), t.rows.to_string()]);
    }
    text.push_str(&format!("{}\n", tables.render()));
    let mut prefixes = Table::new(
        "tenant prefixes",
        &["prefix", "versions", "bytes", "digest"],
    );
    for p in &inventory.prefixes {
        prefixes.row(vec![
            p.prefix.clone(),
            p.versions.to_string(),
            p.bytes.to_string(),
            p.keys_digest.chars().take(16).collect(),
        ]);
    }
    text.push_str(&format!("{}\n", prefixes.render()));
    let mut uploads = Table::new(
        "multipart uploads in progress",
        &["prefix", "uploads", "digest"],
    );
    for u in &inventory.uploads {
        uploads.row(vec![
            u.prefix.clone(),
            u.uploads.to_string(),
            u.uploads_digest.chars().take(16).collect(),
        ]);
    }
    text.push_str(&format!("{}\n", uploads.render()));
    text.push_str(&format!("redis keys: {}\n", inventory.redis_keys));
    text
}

/// `community status` as the workflow answered it, with the pending activity.
pub fn status_text(status: &DeletionStatus, pending: Option<&PendingActivityView>) -> String {
    let p = &status.progress;
    format!(
        "{}\n",
        key_values(
            "deletion status",
            &[
                ("request_id", status.request_id.to_string()),
                ("host", status.host.clone()),
                ("phase", status.phase.to_string()),
                (
                    "blocked",
                    status
                        .blocked
                        .as_ref()
                        .map(|b| format!("in {} since {}: {}", b.phase, b.since, b.reason))
                        .unwrap_or_else(|| "no".to_owned()),
                ),
                ("last_error", status.last_error.clone().unwrap_or_default()),
                (
                    "approval",
                    status
                        .approval
                        .as_ref()
                        .map(|a| format!("{} at {}", a.approved_by, a.approved_at))
                        .unwrap_or_default(),
                ),
                (
                    "inventory_digest",
                    status
                        .inventory
                        .as_ref()
                        .map(|i| i.digest.clone())
                        .unwrap_or_default(),
                ),
                (
                    "objects",
                    format!(
                        "{} of {} versions deleted",
                        p.versions_deleted, p.versions_total
                    ),
                ),
                ("chunks", format!("{} of {}", p.chunks_done, p.chunks_total)),
                ("rows purged", p.rows_purged.to_string()),
                ("keys purged", p.keys_purged.to_string()),
                (
                    "pending activity",
                    pending
                        .map(|a| {
                            format!(
                                "{} attempt {}{}",
                                a.activity,
                                a.attempt,
                                a.last_failure
                                    .as_ref()
                                    .map(|f| format!(", last failure: {f}"))
                                    .unwrap_or_default()
                            )
                        })
                        .unwrap_or_default(),
                ),
            ],
        )
    )
}

/// `community status` without a worker: what Postgres and Temporal's own records know.
pub(crate) fn recorded_status_text(recorded: &RecordedStatus) -> String {
    let mut pairs: Vec<(&str, String)> = vec![
        ("source", recorded.source.to_owned()),
        ("task queue", recorded.task_queue.clone()),
        (
            "worker",
            serde_json::to_string(&recorded.worker).unwrap_or_default(),
        ),
    ];
    if let Some(p) = &recorded.postgres {
        pairs.push(("postgres stage", p.stage.clone()));
        pairs.push((
            "postgres blocked",
            p.blocked_reason.clone().unwrap_or_else(|| "no".to_owned()),
        ));
        pairs.push((
            "postgres approval",
            p.approved_by.clone().unwrap_or_default(),
        ));
        pairs.push((
            "postgres chunks",
            format!("{} of {} stamped", p.chunks_stamped, p.chunks_total),
        ));
    }
    if let Some(t) = &recorded.temporal {
        pairs.push(("temporal execution", t.execution_status.clone()));
        pairs.push(("temporal stage", t.stage.clone().unwrap_or_default()));
        pairs.push((
            "temporal blocked",
            t.blocked.map(|b| b.to_string()).unwrap_or_default(),
        ));
        pairs.push((
            "pending activity",
            t.pending_activity
                .as_ref()
                .map(|a| {
                    format!(
                        "{} attempt {}, last heartbeat {}",
                        a.activity,
                        a.attempt,
                        a.last_heartbeat_at
                            .clone()
                            .unwrap_or_else(|| "none".to_owned())
                    )
                })
                .unwrap_or_default(),
        ));
    }
    key_values("deletion status (recorded, no worker answered)", &pairs)
}

/// The awaited leases as a table an operator can act on: which writer, which operation, until
/// when (unless renewed).
pub fn awaited_leases_text(phase: Phase, leases: &[AwaitedLease]) -> String {
    if leases.is_empty() {
        return format!("\nawaited leases: none ({phase} waits for no serving write)\n");
    }
    let mut table = Table::new(
        format!(
            "awaited leases: {phase} waits for {} serving write(s){}",
            leases.len(),
            if leases.len() >= AWAITED_LEASES_SHOWN as usize {
                " (the first shown)"
            } else {
                ""
            }
        ),
        &[
            "lease",
            "holds",
            "operation",
            "owner",
            "user",
            "expires_at",
            "until",
        ],
    );
    for lease in leases {
        table.row(vec![
            lease.id.to_string(),
            lease.holds.clone(),
            lease.operation.clone(),
            lease.owner.clone(),
            lease.user_pubkey.clone().unwrap_or_default(),
            lease.expires_at.to_rfc3339(),
            lease.until.to_rfc3339(),
        ]);
    }
    format!("\n{}", table.render())
}

/// One line describing where a deletion stands, for `watch`.
pub fn progress_line(status: &DeletionStatus, pending: Option<&PendingActivityView>) -> String {
    let p = &status.progress;
    let mut line = format!(
        "{:<18} objects {}/{}  chunks {}/{}  rows {}  keys {}",
        status.phase.as_str(),
        p.versions_deleted,
        p.versions_total,
        p.chunks_done,
        p.chunks_total,
        p.rows_purged,
        p.keys_purged
    );
    if let Some(blocked) = status.blocked.as_ref().filter(|b| b.unblocking) {
        line.push_str(&format!(
            "  UNBLOCKING (recording the unblock): {}",
            blocked.reason
        ));
    } else if let Some(blocked) = &status.blocked {
        line.push_str(&format!("  BLOCKED: {}", blocked.reason));
    } else if let Some(activity) = pending {
        if let Some(step) = activity.heartbeat.as_ref().and_then(|h| h["step"].as_str()) {
            line.push_str(&format!("  {step}"));
        }
        if let Some(failure) = &activity.last_failure {
            line.push_str(&format!(
                "  retrying {} (attempt {}): {failure}",
                activity.activity, activity.attempt
            ));
        }
    }
    line
}

/// `line` on a terminal: the progress bar of the deleted object versions in front, redrawn in
/// place of the previous line.
pub fn progress_redraw(status: &DeletionStatus, line: &str) -> String {
    let p = &status.progress;
    format!(
        "\r\x1b[2K{} {}",
        bar(p.versions_deleted, p.versions_total, 30),
        line
    )
}

/// `community list`: one row a request, with the phase Temporal knows for a running one
/// (`live_phase` of its workflow id; empty when unknown).
pub fn requests_text(requests: &[Request], live_phase: impl Fn(&str) -> String) -> String {
    let mut table = Table::new(
        "deletion requests",
        &[
            "request_id",
            "kind",
            "target",
            "stage",
            "live phase",
            "requested_by",
            "blocked",
            "created_at",
        ],
    );
    for r in requests {
        let phase = live_phase(&r.workflow_id);
        table.row(vec![
            r.id.to_string(),
            r.kind.clone(),
            r.host
                .clone()
                .or_else(|| r.target.clone())
                .unwrap_or_default(),
            r.stage.clone(),
            phase,
            r.requested_by.clone(),
            r.blocked_reason.clone().unwrap_or_default(),
            r.created_at.to_rfc3339(),
        ]);
    }
    table.render()
}

/// `community inspect`: the request, its checkpoints, the closed world it covers, the audit
/// trail with the state of its hash chain, and the receipt once there is one.
pub fn inspection_text(inspection: &RequestInspection) -> String {
    let r = &inspection.request;
    let mut text = format!(
        "{}\n",
        key_values(
            "request",
            &[
                ("request_id", r.id.to_string()),
                ("host", r.host.clone().unwrap_or_default()),
                ("stage", r.stage.clone()),
                ("requested_by", r.requested_by.clone()),
                (
                    "inventory_digest",
                    r.inventory_digest.clone().unwrap_or_default()
                ),
                ("blocked", r.blocked_reason.clone().unwrap_or_default()),
                (
                    "irreversible",
                    match (r.irreversible_at, r.irreversible_pending_at) {
                        (Some(at), _) => format!("since {at} (S3 acknowledged a deletion)"),
                        (None, Some(pending)) => format!(
                            "pending since {pending}: a destructive S3 call was sent and not yet \
                             acknowledged; abort is held until the next attempt settles it"
                        ),
                        (None, None) => "no: S3 acknowledged no deletion".to_owned(),
                    },
                ),
                (
                    "approval",
                    inspection
                        .approval
                        .as_ref()
                        .map(|a| format!("{} at {} ({})", a.approved_by, a.approved_at, a.digest))
                        .unwrap_or_default(),
                ),
                (
                    "chunks",
                    format!(
                        "{} of {} stamped, {} of {} versions",
                        inspection.chunks.chunks_stamped,
                        inspection.chunks.chunks_total,
                        inspection.chunks.versions_stamped,
                        inspection.chunks.versions_total
                    ),
                ),
            ],
        )
    );
    let mut checkpoints = Table::new("checkpoints", &["stage", "reached_at", "detail"]);
    for c in &inspection.checkpoints {
        checkpoints.row(vec![
            c.stage.clone(),
            c.reached_at.to_rfc3339(),
            c.detail.to_string(),
        ]);
    }
    text.push_str(&format!("{}\n", checkpoints.render()));
    if let Some(world) = &inspection.closed_world {
        text.push_str(&closed_world_text(world));
    }
    let mut audit = Table::new("audit trail", &["at", "actor", "event", "detail"]);
    for e in &inspection.audit {
        audit.row(vec![
            e.at.to_rfc3339(),
            e.actor.clone(),
            e.event.clone(),
            e.detail.to_string(),
        ]);
    }
    text.push_str(&audit.render());
    let chain = &inspection.audit_chain;
    text.push_str(&match &chain.first_bad_row {
        None => format!(
            "\naudit chain: intact, {} event(s), head {}\n",
            chain.length, chain.head_hash
        ),
        Some(first_bad) => format!("\naudit chain: BROKEN at {first_bad}\n"),
    });
    if let Some(receipt) = &inspection.receipt {
        text.push_str(&format!(
            "receipt: signed by {} at {}, log leaf {}, digest {} \
             (`buzz-deletion community certificate {}`)\n",
            receipt.key_id,
            receipt.signed_at.to_rfc3339(),
            receipt
                .leaf_index
                .map_or_else(|| "MISSING".to_owned(), |i| i.to_string()),
            receipt.receipt_digest,
            inspection.request.id
        ));
    }
    text
}

/// The closed world the approval covers, as `community inspect` prints it: every purge-set
/// relation with its role, and every declaration the inventory relied on.
pub fn closed_world_text(world: &ClosedWorldSummary) -> String {
    let mut relations = Table::new(
        "relations the deletion purges (frozen inventory)",
        &["relation", "role", "tenant column"],
    );
    for r in &world.relations {
        relations.row(vec![
            r.relation.clone(),
            r.role.clone(),
            r.tenant_column.clone().unwrap_or_default(),
        ]);
    }
    let mut declarations = Table::new(
        "declarations relied on (buzz-deletion: comments)",
        &["object", "declared"],
    );
    for d in &world.declarations {
        declarations.row(vec![d.object.clone(), d.declaration.clone()]);
    }
    format!("{}\n{}\n", relations.render(), declarations.render())
}
