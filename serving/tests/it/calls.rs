//! The handle's calls as the serving role makes them: a lease acquired, verified, renewed and
//! released by its owner only; refusals of an unknown community and of unusable arguments.

use std::time::Duration;

use serving::ServingError;
use uuid::Uuid;

use crate::support::*;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_lease_is_verified_renewed_and_released_by_its_owner_only() {
    let store = owner().await;
    let db = serving_db().await;
    let community = community(&store).await;
    let lease = db
        .acquire_serving_write_lease(community.id, "s3_put", "relay-a", TTL)
        .await
        .expect("acquire");
    assert_eq!(
        (lease.community_id, lease.user_pubkey.as_deref()),
        (community.id, None)
    );
    db.verify_serving_write_lease(&lease).await.expect("verify");
    let renewed = db
        .renew_serving_write_lease(&lease, TTL)
        .await
        .expect("renew");
    assert!(renewed >= lease.expires_at);
    assert_eq!(live_count(&db, community.id).await, 1);

    let mut impostor = lease.clone();
    impostor.owner = "relay-b".to_owned();
    assert!(
        !db.release_serving_write_lease(&impostor)
            .await
            .expect("release")
    );
    assert!(matches!(
        db.verify_serving_write_lease(&impostor).await,
        Err(ServingError::LeaseLost { .. })
    ));

    assert!(
        db.release_serving_write_lease(&lease)
            .await
            .expect("release")
    );
    assert!(!db.release_serving_write_lease(&lease).await.expect("again"));
    assert!(matches!(
        db.renew_serving_write_lease(&lease, TTL).await,
        Err(ServingError::LeaseLost { .. })
    ));
    assert_eq!(live_count(&db, community.id).await, 0);
}

#[tokio::test]
async fn a_user_lease_names_its_user_and_is_a_lease_of_the_community() {
    let store = owner().await;
    let db = serving_db().await;
    let community = community(&store).await;
    let pubkey = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let lease = db
        .acquire_user_serving_write_lease(community.id, &pubkey, "media_put", "relay-a", TTL)
        .await
        .expect("acquire");
    assert_eq!(lease.user_pubkey.as_deref(), Some(pubkey.as_str()));
    assert_eq!(live_count(&db, community.id).await, 1);
    assert!(
        db.release_serving_write_lease(&lease)
            .await
            .expect("release")
    );
}

#[tokio::test]
async fn an_unknown_community_and_unusable_arguments_are_refused() {
    let store = owner().await;
    let db = serving_db().await;
    let community = community(&store).await;
    let unknown = Uuid::new_v4();
    assert!(matches!(
        db.acquire_serving_write_lease(unknown, "s3_put", "relay-a", TTL).await,
        Err(ServingError::UnknownCommunity { community_id }) if community_id == unknown
    ));
    assert!(matches!(
        db.acquire_serving_write_lease(community.id, " ", "relay-a", TTL)
            .await,
        Err(ServingError::InvalidInput {
            field: "operation",
            ..
        })
    ));
    assert!(matches!(
        db.acquire_serving_write_lease(community.id, "s3_put", "", TTL)
            .await,
        Err(ServingError::InvalidInput { field: "owner", .. })
    ));
    assert!(matches!(
        db.acquire_serving_write_lease(community.id, "s3_put", "relay-a", Duration::ZERO)
            .await,
        Err(ServingError::InvalidInput { field: "ttl", .. })
    ));
    assert!(matches!(
        db.acquire_user_serving_write_lease(community.id, &"AB".repeat(32), "s3_put", "r", TTL)
            .await,
        Err(ServingError::InvalidInput {
            field: "pubkey",
            ..
        })
    ));
    assert_eq!(live_count(&db, community.id).await, 0);
}
