//! `buzz-deletion user list [--state open|blocked|completed|all] [--limit N]`: the user-deletion
//! requests Postgres holds, newest first, with the same flags, formats and order as
//! `community list`. A read of Postgres only: it needs no worker and no Temporal.

use activities::store::RequestFilter;
use activities::user::UserRequestSummary;

use super::UserCliEnv;
use crate::cli::{ListArgs, ListState};
use crate::error::{CliError, CliResult};
use crate::output::{Report, Table, current_names_each};

/// The requests matching `args`; each carries `request_id` next to its deprecated `id`.
pub async fn list(env: &UserCliEnv, args: ListArgs) -> CliResult {
    let filter = match args.state {
        ListState::Open => RequestFilter::Open,
        ListState::Blocked => RequestFilter::Blocked,
        ListState::Completed => RequestFilter::Completed,
        ListState::All => RequestFilter::All,
    };
    let requests = env
        .store
        .list_requests(filter, u32::from(args.limit))
        .await?;
    let document = serde_json::to_value(&requests)
        .map(current_names_each)
        .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the result: {e}")))?;
    Report::new(&document, table(&requests).render())
}

fn table(requests: &[UserRequestSummary]) -> Table {
    let mut table = Table::new(
        "user deletion requests",
        &[
            "request_id",
            "target",
            "stage",
            "current stage",
            "rows",
            "requested_by",
            "approved_by",
            "next_attempt_at",
            "blocked",
            "created_at",
        ],
    );
    for r in requests {
        let current = match (&r.current_stage, r.current_community) {
            (Some(stage), Some(community)) => format!("{stage} in {community}"),
            (Some(stage), None) => stage.clone(),
            (None, _) => String::new(),
        };
        table.row(vec![
            r.id.to_string(),
            r.target.clone().unwrap_or_default(),
            r.stage.clone(),
            current,
            r.stage_rows.to_string(),
            r.requested_by.clone(),
            r.approved_by.clone().unwrap_or_default(),
            r.next_attempt_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            r.blocked_reason.clone().unwrap_or_default(),
            r.created_at.to_rfc3339(),
        ]);
    }
    table
}
