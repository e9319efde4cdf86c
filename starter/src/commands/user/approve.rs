//! `buzz-deletion user approve`: a second operator's signed approval of the frozen inventory
//! digest, with the child community deletions it asks for.

use uuid::Uuid;

use workflows::operator::{Action, Kind};
use workflows::user::{
    ChildCommunityDeletion, UserApprovalRecord, UserApproveRequest, UserDeletion, UserInventory,
};

use super::{RequestSnapshot, UserCliEnv, execute, existing_request, refuse, request_target};
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::signing::{KeyArgs, SigningKey};

/// `user approve ID`: signs the approval of `inventory_digest` with the approver's key (named
/// `--approved-by` when given) and sends it, with the child deletions of
/// `delete_owned_communities`, to the request's workflow.
pub(super) async fn approve(
    env: &UserCliEnv,
    id: Uuid,
    approved_by: Option<String>,
    inventory_digest: String,
    note: Option<String>,
    delete_owned_communities: &[String],
    key: &KeyArgs,
) -> CliResult {
    let signed = async {
        let signer = SigningKey::from_args(key)?;
        let target = request_target(env, id).await?.unwrap_or_default();
        let name = signer
            .operator_name(env.store.pool(), "--approved-by", approved_by.as_deref())
            .await?;
        let signed = signer.sign(
            Action::Approve,
            Kind::User,
            id,
            &target,
            Some(&inventory_digest),
            key.signed_at.as_deref(),
        )?;
        Ok::<_, CliError>((name, signed))
    };
    let (approved_by, signed) = signed.await?;
    let child_deletions = child_deletions(env, id, key, delete_owned_communities).await?;
    let approval = UserApproveRequest {
        approved_by,
        inventory_digest,
        note,
        signed: Some(signed),
        child_deletions,
    };
    record_approval(env, id, approval).await
}

/// Sends the approval to request `id`'s workflow and reports its record next to the request.
async fn record_approval(env: &UserCliEnv, id: Uuid, approval: UserApproveRequest) -> CliResult {
    existing_request(env, id).await?;
    let record: UserApprovalRecord =
        execute(env, id, "approval", UserDeletion::approve, approval).await?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = snapshot.document("approval", &record, &["stages"])?;
    Report::new(&document, snapshot.text())
}

/// The child community deletions `user approve --delete-owned-community HOST` asks for: each host
/// looked up in the request's frozen inventory, with a fresh child request id and the
/// approver's signed `submit` of it. The workflow refuses any the inventory does not show the
/// user owning alone.
async fn child_deletions(
    env: &UserCliEnv,
    id: Uuid,
    key: &KeyArgs,
    hosts: &[String],
) -> Result<Vec<ChildCommunityDeletion>, CliError> {
    if hosts.is_empty() {
        return Ok(Vec::new());
    }
    let inventory: Option<UserInventory> = env
        .store
        .request_view(id)
        .await
        .map_err(|e| CliError::Other(e.into()))?
        .and_then(|r| r.inventory)
        .and_then(|v| serde_json::from_value(v).ok());
    let Some(inventory) = inventory else {
        return Err(refuse(
            1,
            &format!("request {id} has no readable inventory"),
        ));
    };
    let signer = SigningKey::from_args(key)?;
    let mut children = Vec::with_capacity(hosts.len());
    for host in hosts {
        let wanted = host.trim().trim_end_matches('.').to_lowercase();
        let community = inventory
            .communities
            .iter()
            .find(|c| c.footprint.as_ref().is_some_and(|f| f.host == wanted));
        let Some(community) = community else {
            return Err(refuse(
                2,
                &format!(
                    "--delete-owned-community {host}: the request's inventory lists no \
                     community with that host"
                ),
            ));
        };
        let request_id = Uuid::new_v4();
        let signed = signer.sign(
            Action::Submit,
            Kind::Community,
            request_id,
            &wanted,
            None,
            key.signed_at.as_deref(),
        )?;
        children.push(ChildCommunityDeletion {
            community_id: community.community_id,
            host: wanted,
            request_id,
            signed: Some(signed),
        });
    }
    Ok(children)
}
