//! The platform around both deletions, end to end on the real stack: how the worker starts,
//! stops and refuses (configuration, TLS, credentials), its metrics and lease reaper, the CLI
//! without a worker, a Redis outage, the Redis Cluster topology, the taxonomy sweep, and the stack
//! round trip.
//!
//! Modules:
//! - `production_tls`: a deletion with every service over verified TLS (Temporal mTLS, TLS and
//!   API key; Postgres verify-full; rediss://; HTTPS S3), secrets from files; each TLS or
//!   credential mistake stops the worker in one line naming the fix, with no secret shown.
//! - `outage`: Redis goes down mid-deletion and comes back; the workflow retries and completes.
//! - `redis_cluster`: the worker on the local Redis Cluster: a community on every primary deleted
//!   while a primary crashes mid-purge and its replica takes over, a user with keys on every
//!   primary erased, neighbours byte-identical; a single-node setting on a cluster node refused.
//! - `stack_check`: the foundation round trip on the dev server and the time-skipping server.
//! - `sweep`: the taxonomy sweep counts and names a stray key; its schedule is created and removed.
//! - `metrics`: the worker's Prometheus endpoint reports what a deletion removed.
//! - `no_worker`: without a worker every command answers within its bound; held updates apply
//!   once a worker returns.
//! - `worker_lifecycle`: the worker refuses a missing variable, an unreachable service, an
//!   unmigrated schema or a wrong CA in one line naming the fix; secrets from files; SIGTERM
//!   drains; predecessor variables warn.
//! - `lease_reaper`: ended and abandoned serving-write leases are reaped past the stalled-writer
//!   window, a running writer's lease is kept, and the lease gauges follow.

mod lease_reaper;
mod metrics;
mod no_worker;
mod outage;
mod production_tls;
mod redis_cluster;
mod stack_check;
mod sweep;
mod worker_lifecycle;
