//! Every integration test of the activities crate in one test binary (one link instead of ten),
//! one module per concern, against the real local stack. Filter by module path, e.g. `cargo test
//! -p activities --test it store::`.

mod audit_chain;
mod cache;
mod cache_cluster;
mod catalog_property;
mod catalog_shapes;
mod closed_world;
mod evidence;
mod irreversible_marker;
mod lease_reaper;
mod objects;
mod operators;
mod request_gauges;
mod roles;
mod scope_receipt;
mod serving;
mod store;
mod store_pool;
mod store_support;
mod upgrade;
mod user_data;
mod user_fence;
mod user_store;
