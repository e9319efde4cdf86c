//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! `migrations/` directory at compile time, and on stable Rust cargo does not otherwise notice a
//! new file there (a build would ship the old set of migrations).

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
