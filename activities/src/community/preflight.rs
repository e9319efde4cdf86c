//! Preflight: every S3 permission the destructive phase needs proven on every prefix, and the
//! catalog unchanged since the inventory, before the fence.

use workflows::community::RequestRef;

use crate::s3::{ObjectStoreError, S3Permission};
use crate::store::Stage;
use crate::taxonomy::tenant_prefixes;

use super::claim::{Claim, claimed};
use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::ProgressCell;
use super::{Attempt, CommunityActivities};

/// Proves, on every tenant prefix and without deleting anything, each S3 permission the
/// destructive phase needs ([`S3Permission::ALL`]: list versions, list uploads, delete versions,
/// abort uploads; see `s3::probe`), and that the catalog has not drifted since the
/// inventory (a drift is permanent: the approval no longer describes what would be deleted).
/// Every missing permission is collected and the request blocks naming them all
/// ([`PhaseError::PermissionsMissing`]), before the fence and the irreversible marker.
pub async fn preflight((acts, ctx): Attempt<'_>, input: RequestRef) -> PhaseResult<()> {
    let claim = Claim::at(input.request_id, &[Stage::Approved]);
    claimed((acts, ctx), claim, async |token, progress| {
        acts.store.load_frozen_inventory(input.request_id).await?;
        let prefixes = tenant_prefixes(token.community_id);
        prove_s3_permissions(acts, &prefixes, progress).await?;
        acts.store.check_catalog_unchanged(&token).await?;
        let proven: Vec<&str> = S3Permission::ALL.iter().map(|p| p.action()).collect();
        acts.store
            .record_milestone(
                &token,
                Stage::Approved,
                "preflight",
                serde_json::json!({
                    "prefixes_listable": prefixes.len(),
                    "s3_permissions_proven": proven,
                    "catalog_unchanged": true,
                }),
            )
            .await?;
        Ok(())
    })
    .await
}

/// Proves every permission of [`S3Permission::ALL`] on every prefix; a denial is collected, any
/// other failure returned at once (a transient one is retried by Temporal).
async fn prove_s3_permissions(
    acts: &CommunityActivities,
    prefixes: &[String],
    progress: &ProgressCell,
) -> PhaseResult<()> {
    let mut missing = Vec::new();
    for prefix in prefixes {
        for permission in S3Permission::ALL {
            progress.update(|p| p.step = format!("proving {permission} on {prefix}"));
            match acts.objects.prove_permission(permission, prefix).await {
                Ok(()) => {}
                Err(ObjectStoreError::PermissionMissing(denied)) => missing.push(*denied),
                Err(other) => return Err(other.into()),
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PhaseError::PermissionsMissing { missing })
    }
}
