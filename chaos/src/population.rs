//! The communities of the run: each deletion's target and its neighbour, seeded through the
//! serving API with the shape the schedule drew (versions, delete markers, an empty object, a
//! multi-MiB object, unfinished multipart uploads, rows in every tenant table, Redis keys), and
//! snapshots of everything a community holds in the three stores (the test kit's `Snapshot`).

use activities::serving::acquire_serving_write;
use activities::taxonomy::PrefixRoot;
use anyhow::{Context, Result};
use demo::{SeedPlan, seed_community, writer_key};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::schedule::Shape;
use crate::stack::Stores;

/// One seeded community.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// Its host.
    pub host: String,
    /// Its id.
    pub community_id: Uuid,
}

/// A 64-hex name of the exact writer shape, unique to `community` and `label`.
fn object_name(community: Uuid, label: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(community.as_bytes());
    hasher.update(label.as_bytes());
    hex::encode(hasher.finalize())
}

/// Seeds `host` with `shape`.
pub async fn seed(stores: &Stores, host: &str, shape: Shape) -> Result<Seeded> {
    let plan = SeedPlan {
        objects: shape.objects,
        versions: shape.versions,
        delete_markers: shape.delete_markers,
        rows: shape.rows,
        redis_keys: shape.redis_keys,
        parallelism: 8,
    };
    let report = seed_community(&stores.serving, &stores.objects, &stores.cache, host, plan)
        .await
        .with_context(|| format!("seeding {host}"))?;
    let community = report.community_id;

    let mut extras: Vec<(String, Vec<u8>)> = Vec::new();
    if shape.empty_object {
        extras.push((
            writer_key(
                PrefixRoot::Media,
                community,
                &object_name(community, "empty"),
            ),
            Vec::new(),
        ));
    }
    if shape.large_object_mib > 0 {
        let size = shape.large_object_mib as usize * 1024 * 1024;
        let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        extras.push((
            writer_key(
                PrefixRoot::Media,
                community,
                &object_name(community, "large"),
            ),
            body,
        ));
    }
    if !extras.is_empty() || shape.unfinished_uploads > 0 {
        let guard = acquire_serving_write(&stores.serving, community, "chaos_seed_extras").await?;
        let written = guard
            .protect(async {
                for (key, body) in extras {
                    stores.objects.put_object(&key, body).await?;
                }
                for n in 0..shape.unfinished_uploads {
                    let key = writer_key(
                        PrefixRoot::Media,
                        community,
                        &object_name(community, &format!("upload-{n}")),
                    );
                    let upload = stores.objects.start_upload(&key).await?;
                    // One part of 5 MiB: the minimum a real client sends before the last part.
                    stores
                        .objects
                        .upload_part(&upload, 1, vec![7u8; 5 * 1024 * 1024])
                        .await?;
                }
                Ok::<(), activities::s3::ObjectStoreError>(())
            })
            .await?;
        written.with_context(|| format!("extra objects of {host}"))?;
        guard.finish().await?;
    }
    Ok(Seeded {
        host: report.host,
        community_id: community,
    })
}

/// Everything a community holds in the three stores: the test kit's snapshot (rows, every
/// version with the bytes of every data version, unfinished uploads, Redis keys with values).
pub use testkit::snapshot::Snapshot;

/// Snapshots `community` in all three stores (rows as the owner sees them).
pub async fn snapshot(stores: &Stores, community: Uuid) -> Result<Snapshot> {
    Snapshot::capture(&stores.store, &stores.objects, &stores.cache, community).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use activities::taxonomy::is_tenant_owned_key;

    #[test]
    fn extra_objects_have_the_exact_writer_shape_of_their_community_only() {
        let community = Uuid::new_v4();
        for label in ["empty", "large", "upload-0"] {
            let key = writer_key(PrefixRoot::Media, community, &object_name(community, label));
            assert!(is_tenant_owned_key(community, &key), "{key}");
            assert!(!is_tenant_owned_key(Uuid::new_v4(), &key), "{key}");
        }
        assert_ne!(object_name(community, "a"), object_name(community, "b"));
    }
}
