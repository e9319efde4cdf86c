//! What PostgreSQL records of a deletion, read as the schema owner the same way by every test:
//! the request's stage, its manifest's progress, a community's fence and row, the rows a request
//! left in a table; and the statements a test runs itself, as the owner (tampering) or as the
//! serving role (a write as the relay makes it). Every one panics naming what it read or wrote
//! when that fails.

use std::fmt::Display;

use activities::store::{ChunkProgress, FenceState};
use sqlx::query::Query;
use sqlx::{IntoArguments, Postgres};
use uuid::Uuid;

use crate::stack::Stack;

/// What `answer` answers, or a panic naming `what` and the error.
pub async fn read<T, E: Display>(
    what: impl Display,
    answer: impl Future<Output = Result<T, E>>,
) -> T {
    answer.await.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The request's stage.
pub async fn stage_of(stack: &Stack, request: Uuid) -> String {
    crate::refusal::request_row(stack, request).await.stage
}

/// How far the request's manifest is stamped.
pub async fn chunk_progress(stack: &Stack, request: Uuid) -> ChunkProgress {
    let progress = stack.store.chunk_progress(request);
    read(format_args!("chunk progress of {request}"), progress).await
}

/// The state of the community's fence (`None`: it never had one).
pub async fn fence_state(stack: &Stack, community: Uuid) -> Option<FenceState> {
    let status = read("fence status", stack.store.fence_status(community)).await;
    status.map(|f| f.state)
}

/// Whether the community's row is still there.
pub async fn community_exists(stack: &Stack, community: Uuid) -> bool {
    let row = read("community row", stack.store.community_by_id(community)).await;
    row.is_some()
}

/// How many rows of `table` belong to the request (`request_id = REQUEST`).
pub async fn request_rows(stack: &Stack, table: &str, request: Uuid) -> i64 {
    let sql = format!("SELECT count(*) FROM {table} WHERE request_id = $1");
    let count = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(request);
    read(table, count.fetch_one(stack.store.pool())).await
}

/// Runs `statement` as the schema owner (a row tampered with, a test's own setting); the rows it
/// affected. Panics naming `what` when it fails.
pub async fn as_owner<'q, A>(stack: &Stack, statement: Query<'q, Postgres, A>, what: &str) -> u64
where
    A: 'q + IntoArguments<Postgres> + Send,
{
    let done = read(what, statement.execute(stack.store.pool())).await;
    done.rows_affected()
}

/// Runs `statement` as the serving role (a write as the relay makes it); the rows it affected.
/// Panics naming `what` when it fails.
pub async fn as_serving<'q, A>(stack: &Stack, statement: Query<'q, Postgres, A>, what: &str) -> u64
where
    A: 'q + IntoArguments<Postgres> + Send,
{
    let done = read(what, statement.execute(stack.serving.pool())).await;
    done.rows_affected()
}
