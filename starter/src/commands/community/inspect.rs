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
    let text = render::community::inspection_text(&inspection);
    Report::new(&document, text)
}

/// The JSON answer of `community inspect`: the request carries `request_id` next to its
/// deprecated `id`, the approval `inventory_digest` next to its deprecated `digest`.
pub(crate) fn inspection_document(
    inspection: &activities::store::RequestInspection,
) -> Result<serde_json::Value, CliError> {
    let value = serde_json::to_value(inspection).map_err(encoding_error)?;
    Ok(current_names_at(
        current_names_at(value, "request"),
        "approval",
    ))
}
