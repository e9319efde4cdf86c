//! Every integration test of the activities crate in one test binary (one link instead of ten),
//! one module per concern, against the real local stack. Filter by module path, e.g. `cargo test
//! -p activities --test it store::`.

/// Asserts that `value` matches `pattern`, printing the value (or the message given after the
/// pattern) when it does not: the stable stand-in for `std::assert_matches!`.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {{
        let value = &$value;
        assert!(matches!(value, $pattern $(if $guard)?), "{value:?}");
    }};
    ($value:expr, $pattern:pat $(if $guard:expr)?, $($message:tt)+) => {{
        let value = &$value;
        assert!(matches!(value, $pattern $(if $guard)?), $($message)+);
    }};
}

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
