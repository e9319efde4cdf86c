//! Handles on the shared local stack (PostgreSQL as the owner and the serving role, the S3
//! bucket, Redis), every one built from the stack's environment, and the lock that keeps tests
//! off a server another test has stopped.

use std::sync::OnceLock;

use activities::redis::Cache;
use activities::s3::ObjectStore;
use activities::stack_settings::StackSettings;
use activities::store::Store;
use serving::ServingDb;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use stack_config::env::{self as stack_env, StackEnv};
use tokio::sync::OnceCell;

use crate::env::{HOW_TO_START, required};

/// Tests that stop a shared server take this for writing; every other test of the shared stack
/// takes it for reading.
pub fn outage_lock() -> &'static tokio::sync::RwLock<()> {
    static LOCK: OnceLock<tokio::sync::RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// Tests that set the (one, shared) bucket policy take this, so no two policies overwrite each
/// other and each test finds the bucket without one.
pub fn bucket_policy_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Connections to the three data stores of the local stack.
///
/// Postgres is reached as two roles: `store` is the schema owner (BUZZ_OWNER_DATABASE_URL:
/// migrations, snapshots, inspection and deliberate tampering), `serving` the serving role
/// (BUZZ_SERVING_DATABASE_URL: tenant writes and leases, as the relay makes them). Workers and the
/// CLI run as the worker role (DATABASE_URL), which they inherit from this process.
pub struct Stack {
    /// Postgres as the schema owner.
    pub store: Store,
    /// Postgres as the serving role.
    pub serving: Store,
    /// S3 bucket.
    pub objects: ObjectStore,
    /// Redis.
    pub cache: Cache,
}

/// The shared side of the outage lock, and the stack: what a test of the shared stack that
/// starts no worker of its own holds for its whole run.
pub async fn shared_stack() -> (tokio::sync::RwLockReadGuard<'static, ()>, Stack) {
    let shared = outage_lock().read().await;
    (shared, stack().await)
}

/// Connects to the local stack, migrating the database; panics naming the unreachable server.
pub async fn stack() -> Stack {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Workers and CLI runs inherit DATABASE_URL: it must be the worker role.
    required(stack_env::DATABASE_URL);
    let store = Store::connect(&required(stack_env::OWNER_DATABASE_URL))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable as the owner: {e}\n{HOW_TO_START}"));
    migrate_once(store.pool()).await;
    let serving = Store::connect(&required(stack_env::SERVING_DATABASE_URL))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL not reachable as the serving role: {e}\n{HOW_TO_START}")
        });
    let s3 = StackEnv::process()
        .s3()
        .unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"));
    let objects = ObjectStore::connect(&s3).await.unwrap_or_else(|e| {
        panic!(
            "S3 (Ceph RGW) not usable at {}: {e}\n{HOW_TO_START}",
            s3.endpoint
        )
    });
    objects.check_bucket().await.unwrap_or_else(|e| {
        panic!(
            "S3 bucket not usable at {}: {e}\n{HOW_TO_START}",
            s3.endpoint
        )
    });
    let redis_url = required(stack_env::REDIS_URL);
    let cache = Cache::connect(&redis_url)
        .await
        .unwrap_or_else(|e| panic!("Redis not reachable at {redis_url}: {e}\n{HOW_TO_START}"));
    Stack {
        store,
        serving,
        objects,
        cache,
    }
}

/// Applies the migrations once per test process, through `pool` (an owner connection).
pub async fn migrate_once(pool: &PgPool) {
    static MIGRATED: OnceCell<()> = OnceCell::const_new();
    MIGRATED
        .get_or_init(|| async {
            activities::store::MIGRATOR
                .run(pool)
                .await
                .unwrap_or_else(|e| panic!("migrations failed: {e}"));
        })
        .await;
}

/// The serving crate's handle as the serving role (BUZZ_SERVING_DATABASE_URL) on a migrated
/// database, with at most `connections` connections: what a relay holds. Panics naming the
/// server and how to start it when PostgreSQL is unreachable.
pub async fn serving_db(connections: u32) -> ServingDb {
    let owner = owner_pool(1).await;
    owner.close().await;
    let url = required(stack_env::SERVING_DATABASE_URL);
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL not reachable as the serving role: {e}\n{HOW_TO_START}")
        });
    ServingDb::new(pool)
}

/// A pool of the schema owner (BUZZ_OWNER_DATABASE_URL) on a migrated database, with at most
/// `connections` connections. Each call opens its own: a pool belongs to the runtime that opened
/// it, and every test has its own.
pub async fn owner_pool(connections: u32) -> PgPool {
    let url = required(stack_env::OWNER_DATABASE_URL);
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable as the owner: {e}\n{HOW_TO_START}"));
    migrate_once(&pool).await;
    pool
}

/// A transaction on `stack.store`'s pool (the schema owner's), for tests that rewrite rows.
pub async fn store_transaction(stack: &Stack) -> sqlx::Transaction<'static, sqlx::Postgres> {
    stack
        .store
        .pool()
        .begin()
        .await
        .unwrap_or_else(|e| panic!("begin a transaction: {e}"))
}
