//! The pool settings the worker configures (`BUZZ_PG_POOL_SIZE`, `BUZZ_PG_*_TIMEOUT_MS`) are
//! honoured by PostgreSQL: the pool never opens more connections than its size, every session
//! carries the configured timeouts, and settings left unset keep the server's.

use crate::store_support;

use std::time::{Duration, Instant};

use activities::store::{PoolSettings, Store};
use sqlx::Connection;
use stack_config::env as stack_env;

async fn show(conn: &mut sqlx::PgConnection, setting: &str) -> String {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
        .fetch_one(conn)
        .await
        .unwrap_or_else(|e| panic!("SHOW {setting}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_never_opens_more_connections_than_its_size_and_each_carries_the_timeouts() {
    store_support::worker_store().await;
    let url = testkit::env::required(stack_env::DATABASE_URL);
    let settings = PoolSettings {
        max_connections: 3,
        min_connections: 0,
        lock_timeout_ms: Some(1_500),
        statement_timeout_ms: Some(2_500),
        idle_in_transaction_timeout_ms: 30_000,
    };
    let store = Store::connect_with(&url, &settings)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let pool = store.pool();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.acquire().await.unwrap_or_else(|e| panic!("{e}")));
    }
    assert_eq!(pool.size(), 3);
    // A fourth caller waits for one of the three (it would fail after the ten-second acquire
    // timeout); half a second shows it waits rather than opening a fourth connection.
    let fourth = tokio::time::timeout(Duration::from_millis(500), pool.acquire()).await;
    assert!(fourth.is_err(), "a fourth connection was opened");
    assert_eq!(pool.size(), 3);
    for conn in &mut held {
        assert_eq!(show(conn, "lock_timeout").await, "1500ms");
        assert_eq!(show(conn, "statement_timeout").await, "2500ms");
        assert_eq!(
            show(conn, "idle_in_transaction_session_timeout").await,
            "30s"
        );
    }
    // The statement timeout ends a statement that runs longer (SQLSTATE 57014, which the store
    // classifies as transient).
    let started = Instant::now();
    let slow = sqlx::query("SELECT pg_sleep(10)")
        .execute(&mut *held[0])
        .await
        .expect_err("the statement timeout must end a ten-second statement");
    assert!(started.elapsed() < Duration::from_secs(8), "{slow}");
    assert_eq!(
        slow.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("57014"),
        "{slow}"
    );
    held.clear();
    let again = tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await;
    assert!(again.is_ok(), "a released connection is handed out again");
    drop(again);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unset_timeouts_keep_the_servers_settings_and_idle_transactions_end_after_a_minute() {
    store_support::worker_store().await;
    let url = testkit::env::required(stack_env::DATABASE_URL);
    let store = Store::connect_with(&url, &PoolSettings::with_max_connections(1))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let mut pooled = store
        .pool()
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut plain = sqlx::PgConnection::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for setting in ["lock_timeout", "statement_timeout"] {
        assert_eq!(
            show(&mut pooled, setting).await,
            show(&mut plain, setting).await,
            "{setting} is the server's"
        );
    }
    assert_eq!(
        show(&mut pooled, "idle_in_transaction_session_timeout").await,
        "1min"
    );
    let _ = plain.close().await;
    drop(pooled);
    store.pool().close().await;
}
