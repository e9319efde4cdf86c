//! `community list`: requests from Postgres, merged with the live phase Temporal knows.

use super::*;

/// What Temporal's visibility says about a running deletion (its search attributes).
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct LivePhase {
    phase: Option<String>,
    blocked: Option<bool>,
}

/// Running community deletions by workflow id, from Temporal visibility. A list is a read, so
/// an unreachable Temporal is a warning, not a failure: Postgres still answers.
pub(super) async fn live_phases() -> std::collections::HashMap<String, LivePhase> {
    use futures::StreamExt;
    let mut live = std::collections::HashMap::new();
    let target = TemporalTarget::from_env();
    let connected = match &target {
        Ok(target) => connect::temporal(target).await,
        Err(e) => Err(CliError::Usage(e.to_string())),
    };
    let client = match connected {
        Ok(client) => client,
        Err(e) => {
            eprintln!("warning: live phases unavailable ({e}); showing Postgres only");
            return live;
        }
    };
    let query = "BuzzDeletionKind = 'community' AND ExecutionStatus = 'Running'";
    let mut stream = client.list_workflows(
        query,
        temporalio_client::WorkflowListOptions::builder()
            .limit(1000)
            .build(),
    );
    while let Some(entry) = stream.next().await {
        match entry {
            Ok(execution) => {
                let attributes = execution.search_attributes();
                live.insert(
                    execution.id().to_owned(),
                    LivePhase {
                        phase: attributes.get(&search::STAGE),
                        blocked: attributes.get(&search::BLOCKED),
                    },
                );
            }
            Err(e) => {
                eprintln!("warning: Temporal visibility query failed: {e}");
                break;
            }
        }
    }
    live
}

pub(super) async fn list(args: ListArgs) -> CliResult {
    let store = connect::store().await?;
    let requests = store
        .list_requests(args.state.filter(), u32::from(args.limit))
        .await
        .map_err(store_failure)?;
    let live = if requests.iter().any(|r| r.is_open()) {
        live_phases().await
    } else {
        Default::default()
    };
    let rows: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let mut row = serde_json::to_value(r).unwrap_or_default();
            if let serde_json::Value::Object(map) = &mut row {
                map.insert(
                    "live".to_owned(),
                    serde_json::to_value(live.get(&r.workflow_id)).unwrap_or_default(),
                );
            }
            current_names(row)
        })
        .collect();
    let text = render::community::requests_text(&requests, |workflow_id| {
        live.get(workflow_id)
            .and_then(|l| l.phase.clone())
            .unwrap_or_default()
    });
    Report::new(&rows, text)
}
