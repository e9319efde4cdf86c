//! Must-show 4 of issue 17: a tenant table added without a user-data declaration blocks the
//! user inventory, naming it; once declared, its rows of the user are inventoried and purged and
//! everyone else's are kept. And issue 29's must-show 3: a declared column that is not guaranteed
//! to hold pubkeys in canonical form (64 lowercase hex) blocks it too, naming the column, and
//! once guaranteed, an upper-case pubkey cannot be written to it.
//!
//! The table would block every other user deletion of the shared database, so the story runs on
//! a database of its own (worker and CLI get its URLs); objects and keys stay on the shared stack.

use activities::store::Store;
use testkit::prelude::*;
use testkit::private_db::{PrivateStory, exec};
use testkit::records::as_serving;

use super::{fresh_pubkey, member_with_events, seed_footprint, submit_user};

async fn reactions_of(store: &Store, pubkey: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM buzz.reactions WHERE pubkey = $1")
        .bind(pubkey)
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("reactions: {e}"))
}

/// `user submit --target TARGET` is refused, its message naming every one of `named`.
async fn submit_refused_naming(cli: &Cli, target: &str, named: &[&str]) {
    let refused = cli.user_submit_run(target, "alice").await;
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    for named in named {
        assert!(
            refused.stderr.contains(named),
            "the refusal must name {named}: {}",
            refused.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_without_a_declaration_blocks_the_inventory_naming_it() {
    let _shared = outage_lock().read().await;
    let story = PrivateStory::start("undeclared", &[]).await;
    let (stack, cli) = (&story.stack, &story.cli);
    let user = fresh_pubkey();
    let other = fresh_pubkey();
    let community = seed(stack, &unique_host("reactions"), small_plan())
        .await
        .community_id;
    seed_footprint(stack, community, &user, &member_with_events(2)).await;

    // A relay migration adds a tenant table, fenced like every tenant table, but forgets to say
    // where its user data is.
    exec(
        &stack.store,
        "CREATE TABLE buzz.reactions (community_id uuid NOT NULL REFERENCES buzz.communities (id), \
         pubkey text NOT NULL, emoji text NOT NULL)",
    )
    .await;
    exec(
        &stack.store,
        "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.reactions \
         FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()",
    )
    .await;
    exec(
        &stack.store,
        "ALTER TABLE buzz.reactions ENABLE ALWAYS TRIGGER buzz_write_fence",
    )
    .await;
    let sql = "INSERT INTO buzz.reactions (community_id, pubkey, emoji) VALUES ($1, $2, $3)";
    for (pubkey, emoji) in [(&user, "+"), (&user, "!"), (&other, "+")] {
        let reaction = sqlx::query(sql).bind(community).bind(pubkey).bind(emoji);
        as_serving(stack, reaction, "reaction").await;
    }

    let target = format!("user:{user}");
    submit_refused_naming(
        cli,
        &target,
        &[
            "buzz.reactions",
            "buzz.user_data",
            "ENABLE ALWAYS TRIGGER buzz_user_data",
        ],
    )
    .await;
    assert_eq!(
        reactions_of(&stack.store, &user).await,
        2,
        "nothing was deleted"
    );

    // Declared, but nothing keeps an upper-case spelling of a key out of the column: a row
    // written so would be missed by every comparison with the target. Refused, naming it.
    exec(
        &stack.store,
        "CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.reactions \
         FOR EACH ROW EXECUTE FUNCTION buzz.user_data('pubkey')",
    )
    .await;
    exec(
        &stack.store,
        "ALTER TABLE buzz.reactions ENABLE ALWAYS TRIGGER buzz_user_data",
    )
    .await;
    submit_refused_naming(
        cli,
        &target,
        &[
            "buzz.reactions: declared user column \"pubkey\" is not guaranteed",
            "ADD CHECK (\"pubkey\" ~ '^[0-9a-f]{64}$')",
        ],
    )
    .await;

    // Guaranteed: an upper-case key can no longer be written, and the next submission
    // inventories and purges the table.
    exec(
        &stack.store,
        "ALTER TABLE buzz.reactions ADD CHECK (pubkey ~ '^[0-9a-f]{64}$')",
    )
    .await;
    let upper = sqlx::query(
        "INSERT INTO buzz.reactions (community_id, pubkey, emoji) VALUES ($1, $2, '+')",
    )
    .bind(community)
    .bind(user.to_uppercase())
    .execute(stack.serving.pool())
    .await;
    assert!(upper.is_err(), "an upper-case pubkey was written");
    let submitted = submit_user(cli, &user).await;
    assert_eq!(
        submitted.footprint(community)["rows"]["buzz.reactions"],
        2,
        "{}",
        submitted.json
    );
    let (id, digest) = (submitted.id, submitted.digest);
    cli.user_approve(&id, "bob", &digest).await.expect_code(0);
    cli.user_run(&id).await.expect_exit(0);
    assert_eq!(reactions_of(&stack.store, &user).await, 0);
    assert_eq!(
        reactions_of(&stack.store, &other).await,
        1,
        "another user's reaction is kept"
    );

    story.end().await;
}
