//! `buzz-deletion user status`: the request, its approval and its stage rows, read from
//! Postgres.

use uuid::Uuid;

use super::snapshot::{ProgressView, request_named};
use super::{RequestSnapshot, UserCliEnv, existing_request};
use crate::error::CliResult;
use crate::output::{Report, encoding_error};

/// `user status ID`: exits 1 when the stage history cannot be read as progress.
pub(super) async fn status(env: &UserCliEnv, id: Uuid) -> CliResult {
    existing_request(env, id).await?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = serde_json::to_value(&snapshot)
        .map(request_named)
        .map_err(encoding_error)?;
    let report = Report::new(&document, snapshot.text())?;
    if let ProgressView::Unreadable { error } = &snapshot.progress {
        return Ok(report.failing(
            1,
            format!("stage history of request {id} cannot be reconstructed: {error}"),
        ));
    }
    Ok(report)
}
