//! What Postgres holds about one user-deletion request, as every `user` command reports it: the
//! request, its approval, its progress and its stage rows in chain order.

use anyhow::Context;
use serde::Serialize;
use uuid::Uuid;

use activities::user::{StageRowView, UserRequestView, UserStore, UserStoreError};
use workflows::user::policy::{Position, reconstruct};
use workflows::user::{UserApprovalRecord, UserInventory};

use crate::error::CliError;
use crate::output::{current_names_at, encoding_error};
use crate::render;

/// A snapshot document: the request object carries `request_id` next to its deprecated `id`.
pub(super) fn request_named(document: serde_json::Value) -> serde_json::Value {
    current_names_at(document, "request")
}

/// Everything Postgres holds about one request, with the stage rows in chain order.
#[derive(Debug, Serialize)]
pub(super) struct RequestSnapshot {
    request: Option<UserRequestView>,
    approval: Option<UserApprovalRecord>,
    pub(super) progress: ProgressView,
    stages: Vec<StageRowView>,
    /// The operator signatures recorded for the request (submit, approve): statement, SSHSIG
    /// signature and registered key, for `deploy/local/verify-signatures` or `ssh-keygen`.
    signatures: Vec<activities::identity::StoredSignature>,
}

/// Progress as reconstructed from the predecessor chain.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(super) enum ProgressView {
    /// No stage row yet.
    NotStarted,
    /// The chain ends in a current row.
    Current {
        current_stage_id: Uuid,
        covered_communities: Vec<Uuid>,
    },
    /// The chain ends with a decision without successor.
    Finished { covered_communities: Vec<Uuid> },
    /// The history cannot be read as progress.
    Unreadable { error: String },
}

impl RequestSnapshot {
    pub(super) async fn read(store: &UserStore, id: Uuid) -> anyhow::Result<Self> {
        let request = store.request_view(id).await?;
        let approval = store.approval(id).await?;
        // A history longer than the read bound is shown as unreadable, not as an empty request.
        let (mut stages, too_long) = match store.stage_rows(id).await {
            Ok(stages) => (stages, None),
            Err(refusal @ UserStoreError::TooManyStages { .. }) => {
                (Vec::new(), Some(refusal.to_string()))
            }
            Err(other) => return Err(other.into()),
        };
        let inventory: Option<UserInventory> = request
            .as_ref()
            .and_then(|r| r.inventory.clone())
            .map(serde_json::from_value)
            .transpose()
            .context("the saved inventory is unreadable")?;
        let progress = match (inventory, too_long) {
            (_, Some(error)) => ProgressView::Unreadable { error },
            (None, None) => ProgressView::Unreadable {
                error: "the request has no saved inventory".into(),
            },
            (Some(inventory), None) => progress_of(&inventory, &mut stages),
        };
        let signatures = activities::identity::signatures_of_request(store.pool(), id).await?;
        Ok(RequestSnapshot {
            request,
            approval,
            progress,
            stages,
            signatures,
        })
    }

    /// As `--output table` shows it.
    pub(super) fn text(&self) -> String {
        let unreadable = match &self.progress {
            ProgressView::Unreadable { error } => Some(error.as_str()),
            _ => None,
        };
        render::user::snapshot_text(
            self.request.as_ref(),
            self.approval.as_ref(),
            &self.stages,
            unreadable,
        )
    }

    /// A command's `answer` (at `key`) next to the request it left and the snapshot's `fields`
    /// among `approval`, `progress` and `stages`; the request carries `request_id` next to its
    /// deprecated `id`.
    pub(super) fn document(
        &self,
        key: &str,
        answer: &impl Serialize,
        fields: &[&str],
    ) -> Result<serde_json::Value, CliError> {
        let snapshot = serde_json::to_value(self).map_err(encoding_error)?;
        let mut document = serde_json::Map::new();
        document.insert("request".to_owned(), snapshot["request"].clone());
        for field in fields {
            document.insert((*field).to_owned(), snapshot[*field].clone());
        }
        document.insert(
            key.to_owned(),
            serde_json::to_value(answer).map_err(encoding_error)?,
        );
        Ok(request_named(serde_json::Value::Object(document)))
    }
}

/// Reconstructs progress and, when the chain is readable, reorders `stages` along it.
fn progress_of(inventory: &UserInventory, stages: &mut [StageRowView]) -> ProgressView {
    let records: Result<Vec<_>, _> = stages.iter().map(StageRowView::to_record).collect();
    let progress = match records {
        Ok(records) => reconstruct(inventory, &records),
        Err(e) => {
            return ProgressView::Unreadable {
                error: e.to_string(),
            };
        }
    };
    match progress {
        Err(e) => ProgressView::Unreadable {
            error: e.to_string(),
        },
        Ok(progress) => {
            let order: Vec<Uuid> = progress.chain.iter().map(|r| r.id).collect();
            stages.sort_by_key(|row| order.iter().position(|id| *id == row.id));
            let covered_communities = progress.covered.clone();
            match (progress.position, progress.current()) {
                (Position::NotStarted, _) => ProgressView::NotStarted,
                (Position::Current, Some(current)) => ProgressView::Current {
                    current_stage_id: current.id,
                    covered_communities,
                },
                (Position::Current, None) | (Position::Finished, _) => ProgressView::Finished {
                    covered_communities,
                },
            }
        }
    }
}
