//! A database of a test's own next to the shared one, for stories that must commit something
//! that would disturb every other test (a cascading key, a rewritten transparency log): worker
//! and CLI get its URLs; objects and Redis keys are per community and stay on the shared stack.

use activities::store::{DEFAULT_MAX_CONNECTIONS, Store};
use sqlx::Connection;
use stack_config::env as stack_env;
use uuid::Uuid;

use crate::env::required;
use crate::stack::Stack;

/// A private database, reachable as each of the three roles.
pub struct PrivateDatabase {
    /// Its name.
    pub name: String,
    /// The schema owner: creates, migrates and tampers.
    pub owner: String,
    /// The worker role: what the worker and the CLI run as.
    pub worker: String,
    /// The serving role: what seeds tenant data, as the relay would.
    pub serving: String,
}

/// `url` with its database name replaced by `name`.
fn on_database(url: &str, name: &str) -> String {
    let slash = url.rfind('/').unwrap_or(url.len());
    format!("{}/{name}", &url[..slash])
}

/// Creates a database of the test's own (as the owner, who may create databases).
pub async fn private_database(tag: &str) -> PrivateDatabase {
    let owner = required(stack_env::OWNER_DATABASE_URL);
    let slash = owner.rfind('/').unwrap_or(owner.len());
    let shared_name = owner
        .get(slash + 1..)
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_owned();
    let name = format!(
        "{shared_name}_{tag}_{}",
        &Uuid::new_v4().simple().to_string()[..10]
    );
    let mut admin = sqlx::PgConnection::connect(&owner)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let _ = admin.close().await;
    PrivateDatabase {
        owner: on_database(&owner, &name),
        worker: on_database(&required(stack_env::DATABASE_URL), &name),
        serving: on_database(&required(stack_env::SERVING_DATABASE_URL), &name),
        name,
    }
}

impl PrivateDatabase {
    /// Migrates it and returns a stack over it (owner and serving stores), sharing `shared`'s
    /// objects and cache.
    pub async fn migrated_stack(&self, shared: Stack) -> Stack {
        Stack {
            store: self.migrated_owner_store(DEFAULT_MAX_CONNECTIONS).await,
            serving: self.serving_store(DEFAULT_MAX_CONNECTIONS).await,
            objects: shared.objects,
            cache: shared.cache,
        }
    }
}

/// Closes `stack`'s connections to private database `name` and drops it. Stop (crash) the
/// worker processes on it first: `WITH (FORCE)` may only end the owner's own backends, so the
/// worker and serving roles' connections must be gone.
pub async fn drop_private_stack(name: &str, stack: Stack) {
    stack.serving.pool().close().await;
    stack.store.pool().close().await;
    drop_database(name).await;
}

/// Drops database `name`, waiting for a killed worker's backends to go.
pub async fn drop_database(name: &str) {
    let owner = required(stack_env::OWNER_DATABASE_URL);
    let mut admin = sqlx::PgConnection::connect(&owner)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable: {e}"));
    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    // A killed worker's backends end a moment after its sockets close; until then the drop is
    // refused (they belong to the worker role).
    let mut attempts = 0;
    loop {
        match sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
        {
            Ok(_) => return,
            Err(_) if attempts < 40 => {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => panic!("drop database {name}: {e}"),
        }
    }
}

/// The usual setting of a story on a private database: the database migrated, the stack on it,
/// a worker on a task queue of its own and a CLI, both given the database's URLs. Take the
/// stack's outage lock before starting one; [`PrivateStory::end`] crashes the worker and drops
/// the database.
pub struct PrivateStory {
    /// The database and its role URLs.
    pub db: PrivateDatabase,
    /// The shared stack with Postgres replaced by the private database.
    pub stack: Stack,
    /// The task queue of the worker and the CLI.
    pub queue: String,
    /// The worker running on the database.
    pub worker: crate::workers::WorkerProcess,
    /// The CLI, as the worker role (the owner's URL given for operator keys).
    pub cli: crate::cli::Cli,
}

impl PrivateStory {
    /// Creates and migrates a database tagged `tag`, starts a worker on it with `worker_env`
    /// added (its `DATABASE_URL` is the database's worker role) and a CLI pointed at it.
    pub async fn start(tag: &str, worker_env: &[(&str, &str)]) -> PrivateStory {
        let shared = crate::stack::stack().await;
        let db = private_database(tag).await;
        let stack = db.migrated_stack(shared).await;
        let queue = crate::workers::unique_queue(tag);
        let mut env = vec![("DATABASE_URL", db.worker.as_str())];
        env.extend_from_slice(worker_env);
        let worker = crate::workers::WorkerProcess::start(&queue, &env).await;
        let cli = crate::cli::Cli::new(&queue)
            .with_env("DATABASE_URL", &db.worker)
            .with_env("BUZZ_OWNER_DATABASE_URL", &db.owner);
        PrivateStory {
            db,
            stack,
            queue,
            worker,
            cli,
        }
    }

    /// Crashes the worker and drops the database.
    pub async fn end(self) {
        self.worker.crash().await;
        drop_private_stack(&self.db.name, self.stack).await;
    }
}

/// Runs `sql` on `store` (the owner's, of a private database), panicking with the statement: a
/// shape, a remedy or a trigger a story commits.
pub async fn exec(store: &Store, sql: &str) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// [`exec`] of each of `statements`, in order.
pub async fn exec_all(store: &Store, statements: &[&str]) {
    for sql in statements {
        exec(store, sql).await;
    }
}

/// `sql` with every `{target}` and `{neighbour}` replaced by the communities' ids.
pub fn for_communities(sql: &str, target: Uuid, neighbour: Uuid) -> String {
    sql.replace("{target}", &target.to_string())
        .replace("{neighbour}", &neighbour.to_string())
}

/// [`exec`] of each of `statements` [`for_communities`] `target` and `neighbour`, in order.
pub async fn exec_for(store: &Store, statements: &[&str], target: Uuid, neighbour: Uuid) {
    for sql in statements {
        exec(store, &for_communities(sql, target, neighbour)).await;
    }
}
