//! `buzz-deletion user list [--state open|blocked|completed|all] [--limit N]`: the user-deletion
//! requests Postgres holds, newest first, with the same flags, formats and order as
//! `community list`. A read of Postgres only: it needs no worker and no Temporal.

use super::UserCliEnv;
use crate::cli::ListArgs;
use crate::error::CliResult;
use crate::output::{Report, current_names_each, encoding_error};
use crate::render;

/// The requests matching `args`; each carries `request_id` next to its deprecated `id`.
pub async fn list(env: &UserCliEnv, args: ListArgs) -> CliResult {
    let requests = env
        .store
        .list_requests(args.state.filter(), u32::from(args.limit))
        .await?;
    let document = serde_json::to_value(&requests)
        .map(current_names_each)
        .map_err(encoding_error)?;
    Report::new(&document, render::user::requests_text(&requests))
}
