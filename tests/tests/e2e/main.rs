//! Every end-to-end test in one test binary (one link instead of four), by module below. Filter by
//! module path, e.g. `cargo test -p e2e --test e2e community::happy_path` or `-- user::erasure::`;
//! the harness they share is the `testkit` crate (`testkit/src/`).

// Whole-community deletion: one operator story per file.
mod community;
// The worker, the CLI and the stack around both deletions (start-up, TLS, metrics, outages,
// Redis Cluster, the sweep).
mod platform;
// The `#[ignore]`d recordings of the histories `workflows/tests/` replays.
mod record_histories;
// User deletion: reference 003's tables on `demo:` targets, and real erasure of `user:` targets.
mod user;
