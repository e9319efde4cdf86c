//! Issue 29, parts 1 and 2: a user's per-user Redis keys are matched by the declared shapes
//! (`activities::taxonomy::user_keys`), the bare profile key included, and a key under the
//! user's prefix of no declared shape blocks, naming it, before anything is deleted: at the
//! inventory, and at the gate when it appears after the approval. With it removed, the erasure
//! deletes every declared key of the user, and the thumbnail and metadata document of each media
//! object only the user uploaded; nobody else's keys or objects change.

use std::collections::BTreeSet;

use activities::taxonomy::derived_keys;
use activities::taxonomy::user_keys::{USER_KEY_SHAPES, user_key_prefix};
use demo::user::{UserSeed, media_key, user_key};
use testkit::prelude::*;

use super::{
    fresh_pubkey, member, run_until_blocked, seed_footprint, submit_user, unblock_and_run_to_end,
    user_submit, without_user,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_declared_key_shape_goes_and_an_undeclared_key_blocks_naming_it() {
    let (stack, cli, _worker) = with_worker("user-keys", &[]).await;
    let user = fresh_pubkey();
    let other = fresh_pubkey();
    let community = small_community(&stack, "user-keys").await;
    // Two photos only the user uploaded, each uploaded twice (two versions of the photo, its
    // thumbnail and its metadata), and one the user shares with another user.
    let own = b"only the user uploaded this".to_vec();
    let own_too = b"only the user uploaded this one too".to_vec();
    let shared = b"both uploaded this".to_vec();
    let keys = u32::try_from(USER_KEY_SHAPES.len()).unwrap_or(4);
    let mine = UserSeed {
        uploads: vec![
            own.clone(),
            own_too.clone(),
            own.clone(),
            own_too.clone(),
            shared.clone(),
        ],
        ..member(1, 0, keys)
    };
    seed_footprint(&stack, community, &user, &mine).await;
    let theirs = UserSeed {
        uploads: vec![shared.clone()],
        ..member(0, 0, keys)
    };
    seed_footprint(&stack, community, &other, &theirs).await;
    let bare = user_key(community, &user, 0);
    assert_eq!(
        bare,
        user_key_prefix(community, &user),
        "the bare key is seeded"
    );

    // A key under the user's prefix that no writer of the platform makes.
    let stray = format!("{}:k0", user_key_prefix(community, &user));
    stack
        .cache
        .set(&stray, b"stray")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = snapshot(&stack, community).await;
    let refused = user_submit(&cli, &user).await;
    assert_eq!(refused.code, 2, "{}\n{}", refused.stdout, refused.stderr);
    for named in [
        stray.as_str(),
        "declared per-user key shape",
        "user_keys.rs",
    ] {
        assert!(
            refused.stderr.contains(named),
            "the refusal must name {named}: {}",
            refused.stderr
        );
    }
    assert_unchanged(&stack, community, &before, "refused").await;

    // Removed, the inventory counts every declared key, the bare one included, and what derives
    // from the user's uploads.
    stack
        .cache
        .purge_matching(&stray, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = snapshot(&stack, community).await;
    let submitted = submit_user(&cli, &user).await;
    let footprint = submitted.footprint(community);
    assert_eq!(footprint["user_keys"], u64::from(keys), "{footprint}");
    assert_eq!(footprint["derived_objects"], 6, "{footprint}");
    cli.user_approve(&submitted.id, "bob", &submitted.digest)
        .await
        .expect_code(0);

    // After the approval a stray key appears: the gate blocks naming it, nothing deleted.
    stack
        .cache
        .set(&stray, b"stray again")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let reason = run_until_blocked(&stack, &cli, &submitted.id).await;
    assert!(reason.contains(&stray), "{reason}");
    assert!(reason.contains("user unblock"), "{reason}");
    let mut with_stray = snapshot(&stack, community).await;
    with_stray.keys.retain(|(key, _)| key != &stray);
    assert_identical(&before, &with_stray, "blocked at the gate");

    stack
        .cache
        .purge_matching(&stray, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    unblock_and_run_to_end(&cli, &submitted.id, "removed the stray key").await;

    let (own_key, _) = media_key(community, &own);
    let (own_too_key, _) = media_key(community, &own_too);
    let (shared_key, _) = media_key(community, &shared);
    let expected = without_user(
        &before,
        community,
        &user,
        &BTreeSet::from([own_key.clone(), own_too_key.clone()]),
        &[],
    );
    let after = snapshot(&stack, community).await;
    assert_identical(&expected, &after, "after the erasure");
    let left: Vec<&String> = after
        .keys
        .iter()
        .map(|(key, _)| key)
        .filter(|key| key.starts_with(&user_key_prefix(community, &user)))
        .collect();
    assert!(left.is_empty(), "keys of the user left: {left:?}");
    let others: usize = after
        .keys
        .iter()
        .filter(|(key, _)| key.starts_with(&user_key_prefix(community, &other)))
        .count();
    assert_eq!(others, USER_KEY_SHAPES.len(), "the other user's keys stay");
    let objects: BTreeSet<&str> = after.versions.iter().map(|v| v.key.as_str()).collect();
    for own in [&own_key, &own_too_key] {
        for key in std::iter::once(own.clone()).chain(derived_keys(own).into_iter().flatten()) {
            assert!(!objects.contains(key.as_str()), "{key} must be gone");
        }
    }
    for key in
        std::iter::once(shared_key.clone()).chain(derived_keys(&shared_key).into_iter().flatten())
    {
        assert!(objects.contains(key.as_str()), "{key} must be kept");
    }

    // The receipt names each decision: the two photos deleted with every version of what
    // derives from them, the shared one kept.
    let out = std::env::temp_dir().join(format!("user-keys-{}.json", submitted.id));
    cli.run(&[
        "user",
        "certificate",
        &submitted.id,
        "--out",
        &out.display().to_string(),
    ])
    .await
    .expect_code(0);
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(&out);
    let certificate: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let decisions = certificate["receipt"]["verification"]["media_decisions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let decision_of = |key: &str| {
        decisions
            .iter()
            .find(|d| d["object_key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("the receipt names the decision on {key}: {decisions:?}"))
    };
    for own in [&own_key, &own_too_key] {
        let decision = decision_of(own);
        assert_eq!(decision["decision"], "delete", "{decision}");
        for key in std::iter::once(own.clone()).chain(derived_keys(own).into_iter().flatten()) {
            assert_eq!(decision["versions_by_key"][&key], 2, "{key}: {decision}");
        }
    }
    let kept = decision_of(&shared_key);
    assert_eq!(kept["decision"], "keep_shared", "{kept}");
    assert_eq!(decisions.len(), 3, "{decisions:?}");
}
