//! `buzz-deletion user submit`: records a user deletion request through the `registration`
//! update of a new `UserDeletion` workflow and prints its id, inventory and digest.

use anyhow::Context;
use temporalio_client::{WorkflowIdConflictPolicy, WorkflowStartOptions};
use temporalio_common::search_attributes::SearchAttributes;
use uuid::Uuid;

use workflows::operator::{Action, Kind};
use workflows::user::{
    Registration, TargetError, UserDeletion, UserDeletionInput, UserInventory, UserTarget,
    parse_target, workflow_id,
};

use super::{NOT_RUNNING, UserCliEnv, refuse};
use crate::error::{CliError, CliResult};
use crate::output::{Report, current_names, encoding_error};
use crate::render;
use crate::signing::{KeyArgs, SigningKey};
use crate::update::{self, UpdateFailure};

pub(super) async fn submit(
    env: &UserCliEnv,
    target: String,
    requested_by: Option<String>,
    reason: Option<String>,
    demo_communities: Option<u32>,
    key: &KeyArgs,
) -> CliResult {
    match parse_target(&target) {
        Err(refusal) => return Err(refuse(2, &refusal.to_string())),
        Ok(UserTarget::User { .. }) if demo_communities.is_some() => {
            return Err(refuse(2, &TargetError::SizedRealTarget.to_string()));
        }
        Ok(UserTarget::User { .. }) => {}
        Ok(UserTarget::Demo { .. }) => {
            if let Some(size) = demo_communities
                && let Err(refusal) = UserInventory::demo_sized(&target, size)
            {
                return Err(refuse(2, &format!("--demo-communities {size}: {refusal}")));
            }
        }
    }
    let signer = match SigningKey::from_args(key) {
        Ok(signer) => signer,
        Err(e) => return Err(e),
    };
    let requested_by = match signer
        .operator_name(env.store.pool(), "--requested-by", requested_by.as_deref())
        .await
    {
        Ok(name) => name,
        Err(e) => return Err(e),
    };
    // Nothing is started while no worker polls: the request would wait unregistered.
    env.waits
        .require_worker(&env.client, "user deletion request")
        .await?;
    let id = Uuid::new_v4();
    let signed = match signer.sign(
        Action::Submit,
        Kind::User,
        id,
        &target,
        None,
        key.signed_at.as_deref(),
    ) {
        Ok(signed) => signed,
        Err(e) => return Err(e),
    };
    let input = UserDeletionInput {
        request_id: id,
        target,
        requested_by,
        reason,
        demo_communities,
        start: Default::default(),
        tuning: Default::default(),
        signed: Some(signed),
    };
    let options = WorkflowStartOptions::new(env.task_queue.clone(), workflow_id(id))
        .id_conflict_policy(WorkflowIdConflictPolicy::Fail)
        .search_attributes(SearchAttributes::new([
            workflows::search::KIND.value_set("user".to_string())
        ]))
        .build();
    let handle = env
        .client
        .start_workflow(UserDeletion::run, input, options)
        .await
        .context("starting the UserDeletion workflow")?;
    let registered = update::execute(
        &env.waits,
        &handle,
        "registration",
        UserDeletion::registration,
        (),
        None,
    )
    .await;
    let registration: Registration = match registered {
        Ok(registration) => registration,
        Err(UpdateFailure::NoWorker(e)) => {
            return Err(refuse(
                1,
                &format!("user deletion {id} was started, but {e}"),
            ));
        }
        Err(failure) => {
            // A refused registration (a malformed inventory, an undeclared tenant table) ends the
            // workflow, sometimes before the update is answered: its failure is the reason.
            let ended = handle
                .describe(Default::default())
                .await
                .is_ok_and(|d| d.status() != temporalio_client::WorkflowExecutionStatus::Running);
            if ended
                && let Err(temporalio_client::errors::WorkflowGetResultError::Failed(why)) =
                    handle.get_result(Default::default()).await
            {
                return Err(refuse(2, &format!("registration refused: {why}")));
            }
            return Err(failure.into_cli("registration", NOT_RUNNING));
        }
    };
    let text = render::user::submitted_text(&registration);
    Report::new(&registration_document(&registration)?, text)
}

/// The JSON answer of `user submit`: the registration, with `request_id` next to its
/// deprecated `id`.
pub(crate) fn registration_document(
    registration: &Registration,
) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(registration)
        .map(current_names)
        .map_err(encoding_error)
}
