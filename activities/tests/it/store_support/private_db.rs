//! A database of its own for a test that must commit tenant tables of its own shape.
//!
//! Every catalog scan discovers every tenant table in schema `buzz`, so a committed test table
//! (or a foreign key into one) would be inventoried, purged and judged by every test running
//! concurrently in the shared database. A test that needs committed tables therefore creates a
//! fresh database on the same server (the test kit's `testkit::private_db`), migrates it, and
//! drops it at the end.

use activities::store::Store;
use testkit::private_db::{PrivateDatabase, drop_database, private_database};

/// A migrated database of the test's own; call [`PrivateDb::drop_database`] at the end.
pub struct PrivateDb {
    /// A store on it, as the schema owner.
    pub store: Store,
    /// Its URL as the schema owner (for processes that must use it too).
    pub url: String,
    name: String,
}

/// Creates `<shared database>_<tag>_<random>` and migrates it through an owner store of
/// `connections`, which it returns.
async fn created(tag: &str, connections: u32) -> (PrivateDatabase, Store) {
    let db = private_database(tag).await;
    let owner = db.migrated_owner_store(connections).await;
    (db, owner)
}

/// Creates and migrates `<shared database>_<tag>_<random>`.
pub async fn private_db(tag: &str) -> PrivateDb {
    let (db, store) = created(tag, 4).await;
    PrivateDb {
        store,
        url: db.owner,
        name: db.name,
    }
}

impl PrivateDb {
    /// Closes the pool and drops the database.
    pub async fn drop_database(self) {
        self.store.pool().close().await;
        drop_database(&self.name).await;
    }
}

/// A migrated database of the test's own with a store as the owner and one as the worker role
/// (its least-privilege login); call [`RoleStores::drop_database`] at the end.
pub struct RoleStores {
    /// As the schema owner: creates, migrates and tampers.
    pub owner: Store,
    /// As the worker role, which the code under test runs as.
    pub worker: Store,
    name: String,
}

/// Creates and migrates `<shared database>_<tag>_<random>`, connected as owner and worker.
pub async fn private_db_as_worker(tag: &str) -> RoleStores {
    let (db, owner) = created(tag, 2).await;
    let worker = db.worker_store(2).await;
    RoleStores {
        owner,
        worker,
        name: db.name,
    }
}

/// Runs `test` with the owner's and the worker role's stores on a private database of its own
/// (see [`private_db_as_worker`]), then drops the database.
pub async fn with_private_db_as_worker(tag: &str, test: impl AsyncFnOnce(Store, Store)) {
    let db = private_db_as_worker(tag).await;
    test(db.owner.clone(), db.worker.clone()).await;
    db.drop_database().await;
}

impl RoleStores {
    /// Closes both pools and drops the database.
    pub async fn drop_database(self) {
        self.owner.pool().close().await;
        self.worker.pool().close().await;
        drop_database(&self.name).await;
    }
}
