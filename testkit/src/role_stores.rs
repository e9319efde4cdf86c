//! Stores on the local PostgreSQL as one of its three roles with a pool of a given size, for
//! tests that call the store directly, many at once (small pools keep them under the server's
//! connection limit): on the shared database, whose schema is migrated once per process, or on a
//! [`PrivateDatabase`].

use activities::store::{Store, redact_password};
use stack_config::env as stack_env;

use crate::env::{HOW_TO_START, required};
use crate::private_db::PrivateDatabase;
use crate::stack::migrate_once;

/// A store on `url` with at most `connections` pooled connections; panics naming the server
/// (password hidden) and how to start the stack when it is unreachable.
pub async fn connect(url: &str, connections: u32) -> Store {
    Store::connect_with_pool_size(url, connections)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL not reachable at {}: {e}\n{HOW_TO_START}",
                redact_password(url)
            )
        })
}

/// The shared database as the schema owner (BUZZ_OWNER_DATABASE_URL), migrated: fixtures,
/// inspection and deliberate tampering.
pub async fn owner_store(connections: u32) -> Store {
    let store = connect(&required(stack_env::OWNER_DATABASE_URL), connections).await;
    migrate_once(store.pool()).await;
    store
}

/// The shared database as the worker role (DATABASE_URL), on a migrated schema.
pub async fn worker_store(connections: u32) -> Store {
    migrated().await;
    connect(&required(stack_env::DATABASE_URL), connections).await
}

/// The shared database as the serving role (BUZZ_SERVING_DATABASE_URL), on a migrated schema:
/// what a relay's serving path connects as.
pub async fn serving_store(connections: u32) -> Store {
    migrated().await;
    connect(&required(stack_env::SERVING_DATABASE_URL), connections).await
}

/// Migrates the shared database (once per process) through a short-lived owner connection.
async fn migrated() {
    let owner = owner_store(1).await;
    owner.pool().close().await;
}

impl PrivateDatabase {
    /// A store on it as the schema owner, not migrated (a test that migrates step by step).
    pub async fn owner_store(&self, connections: u32) -> Store {
        connect(&self.owner, connections).await
    }

    /// A store on it as the schema owner, after migrating it.
    pub async fn migrated_owner_store(&self, connections: u32) -> Store {
        let store = self.owner_store(connections).await;
        store
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("migrate {}: {e}", self.name));
        store
    }

    /// A store on it as the worker role (its least-privilege login).
    pub async fn worker_store(&self, connections: u32) -> Store {
        connect(&self.worker, connections).await
    }

    /// A store on it as the serving role.
    pub async fn serving_store(&self, connections: u32) -> Store {
        connect(&self.serving, connections).await
    }
}
