//! A database of its own for a test that must commit tenant tables of its own shape.
//!
//! Every catalog scan discovers every tenant table in schema `buzz`, so a committed test table
//! (or a foreign key into one) would be inventoried, purged and judged by every test running
//! concurrently in the shared database. A test that needs committed tables therefore creates a
//! fresh database on the same server (named after the shared one), migrates it, and drops it at
//! the end.

use activities::store::Store;
use sqlx::Connection;
use uuid::Uuid;

/// The shared test database's URL as the schema owner (who may create databases).
fn shared_url() -> String {
    activities::stack_env::StackEnv::process()
        .owner_database_url()
        .unwrap_or_else(|e| panic!("{e} (PostgreSQL on 127.0.0.1:55432) before `cargo test`"))
}

/// `url` with its database name replaced by `database`, and the shared database's name.
fn with_database(url: &str, database: &str) -> (String, String) {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let slash = base.rfind('/').unwrap_or(base.len());
    let shared = base.get(slash + 1..).unwrap_or_default().to_owned();
    let mut out = format!("{}/{database}", &base[..slash]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    (out, shared)
}

/// A migrated database of the test's own; call [`PrivateDb::drop_database`] at the end.
pub struct PrivateDb {
    /// A store on it.
    pub store: Store,
    /// Its URL (for processes that must use it too).
    pub url: String,
    name: String,
}

/// Creates and migrates `<shared database>_<tag>_<random>`.
pub async fn private_db(tag: &str) -> PrivateDb {
    let shared = shared_url();
    let (_, shared_name) = with_database(&shared, "");
    let suffix = Uuid::new_v4().simple().to_string();
    let name = format!("{shared_name}_{tag}_{}", &suffix[..10]);
    let mut admin = sqlx::PgConnection::connect(&shared)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let _ = admin.close().await;
    let (url, _) = with_database(&shared, &name);
    let store = Store::connect_with_pool_size(&url, 4)
        .await
        .unwrap_or_else(|e| panic!("connect to {name}: {e}"));
    store
        .migrate()
        .await
        .unwrap_or_else(|e| panic!("migrate {name}: {e}"));
    PrivateDb { store, url, name }
}

impl PrivateDb {
    /// Closes the pool and drops the database.
    pub async fn drop_database(self) {
        self.store.pool().close().await;
        let mut admin = sqlx::PgConnection::connect(&shared_url())
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL not reachable: {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("drop database {}: {e}", self.name));
        let _ = admin.close().await;
    }
}
