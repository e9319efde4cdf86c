//! `buzz-deletion user abort` and `user unblock`: an operator's signed action on a request, with
//! its reason, sent to the request's workflow.

use serde::Serialize;
use temporalio_common::data_converters::TemporalDeserializable;
use temporalio_common::{HasWorkflowDefinition, UpdateDefinition};

use workflows::operator::{Action, Kind, SignedAction};
use workflows::user::{UserDeletion, UserOperatorRequest};

use super::{RequestSnapshot, UserCliEnv, execute, refuse, request_target};
use crate::cli::UserActionArgs;
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::signing::SigningKey;

/// Signs `action` on request `id` with the operator's key; returns the key's registered name
/// (checked against `--requested-by` when given) and the signed statement.
async fn sign_user_action(
    env: &UserCliEnv,
    args: &UserActionArgs,
    action: Action,
) -> Result<(String, SignedAction), CliError> {
    let signer = SigningKey::from_args(&args.key)?;
    let id = args.id;
    let target = request_target(env, id)
        .await?
        .ok_or_else(|| refuse(1, &format!("no user-deletion request {id}")))?;
    let name = signer
        .operator_name(
            env.store.pool(),
            "--requested-by",
            args.requested_by.as_deref(),
        )
        .await?;
    let signed = signer.sign(
        action,
        Kind::User,
        id,
        &target,
        None,
        args.key.signed_at.as_deref(),
    )?;
    Ok((name, signed))
}

/// `user abort` and `user unblock`: the operator's signed `action` with its reason, sent as
/// `update`; answered with the workflow's record (at the action's name) next to the request.
pub(super) async fn reasoned_action<U>(
    env: &UserCliEnv,
    args: UserActionArgs,
    action: Action,
    update: U,
) -> CliResult
where
    U: UpdateDefinition<
            Workflow = <UserDeletion as HasWorkflowDefinition>::Run,
            Input = UserOperatorRequest,
        >,
    U::Output: TemporalDeserializable + Serialize + 'static,
{
    let what = action.as_str();
    let (requested_by, signed) = sign_user_action(env, &args, action).await?;
    let input = UserOperatorRequest {
        requested_by,
        reason: args.reason,
        signed: Some(signed),
    };
    let record = execute(env, args.id, what, update, input).await?;
    let snapshot = RequestSnapshot::read(&env.store, args.id).await?;
    Report::new(&snapshot.document(what, &record, &[])?, snapshot.text())
}
