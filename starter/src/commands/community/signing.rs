//! Signing what an operator does to a community deletion: the statement each update carries,
//! bound to the host the request was submitted for, and `community sign` for signing elsewhere.

use super::*;

/// The host every signature of the request names: the one its submit signature named.
pub(super) async fn recorded_host(store: &Store, id: Uuid) -> Result<String, CliError> {
    let request = store.find_request(id).await.map_err(store_failure)?;
    match request {
        Some(request) if request.kind == "community" => Ok(store
            .signed_target(id)
            .await
            .map_err(store_failure)?
            .or(request.host)
            .unwrap_or_default()),
        Some(request) => Err(CliError::Refused(format!(
            "request {id} is a {} deletion: use `buzz-deletion {} …`",
            request.kind, request.kind
        ))),
        None => Err(CliError::Refused(format!(
            "no deletion request has id {id}: list requests with `buzz-deletion community list`"
        ))),
    }
}

/// A community action on request `id` signed with `--key`: the operator's registered name (the
/// optional name flag `label_flag` must match it) and the signed statement.
pub(super) async fn sign_action(
    action: Action,
    id: Uuid,
    digest: Option<&str>,
    label_flag: &str,
    label: Option<&str>,
    key: &KeyArgs,
) -> Result<(String, SignedAction), CliError> {
    let signer = SigningKey::from_args(key)?;
    let store = connect::store().await?;
    let host = recorded_host(&store, id).await?;
    let name = signer
        .operator_name(store.pool(), label_flag, label)
        .await?;
    let signed = signer.sign(
        action,
        Kind::Community,
        id,
        &host,
        digest,
        key.signed_at.as_deref(),
    )?;
    Ok((name, signed))
}

/// An approval of the digest signed with `--key`, under the key's registered name.
pub(super) async fn signed_approval(args: ApproveArgs) -> Result<ApproveRequest, CliError> {
    let digest = required("--inventory-digest", args.inventory_digest)?;
    let (approved_by, signed) = sign_action(
        Action::Approve,
        args.id,
        Some(&digest),
        "--approved-by",
        args.approved_by.as_deref(),
        &args.key,
    )
    .await?;
    Ok(ApproveRequest {
        approved_by,
        digest,
        note: args.note,
        signed: Some(signed),
    })
}

/// An action that carries a reason (abort, unblock) signed with `--key`: the acting operator's
/// registered name (the optional `actor_flag` must match it), the reason and the statement.
async fn signed_with_reason(
    action: Action,
    id: Uuid,
    actor_flag: &str,
    actor: Option<String>,
    reason: String,
    key: &KeyArgs,
) -> Result<(String, String, SignedAction), CliError> {
    let reason = required("--reason", reason)?;
    let (actor, signed) = sign_action(action, id, None, actor_flag, actor.as_deref(), key).await?;
    Ok((actor, reason, signed))
}

/// An abort signed with `--key`.
pub(super) async fn signed_abort(args: AbortArgs) -> Result<AbortRequest, CliError> {
    let (actor, reason, signed) = signed_with_reason(
        Action::Abort,
        args.id,
        "--aborted-by",
        args.aborted_by,
        args.reason,
        &args.key,
    )
    .await?;
    Ok(AbortRequest {
        actor,
        reason,
        signed: Some(signed),
    })
}

/// An unblock signed with `--key`.
pub(super) async fn signed_unblock(args: UnblockArgs) -> Result<UnblockRequest, CliError> {
    let (actor, reason, signed) = signed_with_reason(
        Action::Unblock,
        args.id,
        "--unblocked-by",
        args.unblocked_by,
        args.reason,
        &args.key,
    )
    .await?;
    Ok(UnblockRequest {
        actor,
        reason,
        signed: Some(signed),
    })
}

/// `community sign …`: prints the signed payload as one JSON line, for the Web UI's "Send a
/// Signal" dialog (or `temporal workflow signal --input`).
pub(super) async fn sign(command: SignCommand) -> CliResult {
    let payload = match command {
        SignCommand::Approve(args) => Report::json_line(&signed_approval(args).await?),
        SignCommand::Abort(args) => Report::json_line(&signed_abort(args).await?),
        SignCommand::Unblock(args) => Report::json_line(&signed_unblock(args).await?),
    };
    // The payload is the workflow's signal input: its field names are the workflow's contract
    // (recorded histories replay it), so it is printed as is, in every output format.
    payload
}
