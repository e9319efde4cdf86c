//! `community inspect`: the evidence Postgres keeps for one request.

use super::*;

pub(super) async fn inspect(id: Uuid) -> CliResult {
    let store = connect::store().await?;
    let inspection = match store.inspect(id).await {
        Ok(i) => i,
        Err(StoreError::NotFound { .. }) => {
            return Err(CliError::Refused(format!(
                "no deletion request has id {id}: list requests with `buzz-deletion community list`"
            )));
        }
        Err(e) => return Err(store_failure(e)),
    };
    let document = inspection_document(&inspection)?;
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
    Report::new(&document, text)
}

/// The closed world the approval covers, as `community inspect` prints it: every purge-set
/// relation with its role, and every declaration the inventory relied on.
pub(super) fn closed_world_text(
    world: &activities::store::closed_world::summary::ClosedWorldSummary,
) -> String {
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

/// The JSON answer of `community inspect`: the request carries `request_id` next to its
/// deprecated `id`, the approval `inventory_digest` next to its deprecated `digest`.
pub(crate) fn inspection_document(
    inspection: &activities::store::RequestInspection,
) -> Result<serde_json::Value, CliError> {
    let value = serde_json::to_value(inspection).map_err(encoding)?;
    Ok(current_names_at(
        current_names_at(value, "request"),
        "approval",
    ))
}
