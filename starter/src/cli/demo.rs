//! `demo …`: the grammar of demo data and the serving simulator.

use clap::{Args, Subcommand};

/// `demo …` subcommands.
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// Create a community (if needed) and write demo data through the serving API.
    Seed(SeedArgs),
    /// Write one user's footprint in a community (created if needed) the way the relay does:
    /// membership, events, allow-list entry, agents with keys, media uploads (row first, then
    /// the content-addressed object) and per-user keys, for a `user:` deletion to erase.
    SeedUser(SeedUserArgs),
    /// Simulate live serving traffic to communities until SIGINT/SIGTERM or the duration ends,
    /// then print per-community counts (attempted, admitted, refused, failed) as JSON.
    Serve(ServeArgs),
}

/// Knobs of `demo serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Community hosts to serve, comma-separated (each must exist).
    #[arg(long, value_delimiter = ',', required = true)]
    pub hosts: Vec<String>,
    /// Writes started per second per host.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate: u32,
    /// Stop after this many seconds (0: run until SIGINT/SIGTERM).
    #[arg(long, default_value_t = 0)]
    pub duration: u64,
    /// Writes in flight at once per host.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub in_flight: u16,
    /// Also print up to this many admitted writes per community (0: counts only); with
    /// `--author`, also up to this many writes per community with their author and outcome.
    #[arg(long, default_value_t = 0)]
    pub record_admitted: usize,
    /// Write as this user (64-hex pubkey; repeatable): the n-th write of a host is authored by
    /// the authors in turn (events, media uploads, per-user cache keys, under per-user leases),
    /// and the report counts each author's writes.
    #[arg(long = "author", value_name = "PUBKEY")]
    pub authors: Vec<String>,
}

/// Knobs of `demo seed`.
#[derive(Debug, Clone, Args)]
pub struct SeedArgs {
    /// Community host name (created if missing).
    #[arg(long)]
    pub host: String,
    /// Distinct object keys per tenant prefix family (media, thumbs, meta).
    #[arg(long, default_value_t = 10)]
    pub objects: u32,
    /// Versions written per object key.
    #[arg(long, default_value_t = 2)]
    pub versions: u32,
    /// Keys that get a delete marker on top of their versions.
    #[arg(long, default_value_t = 2)]
    pub delete_markers: u32,
    /// Rows per tenant table.
    #[arg(long, default_value_t = 10)]
    pub rows: u32,
    /// Redis keys in the community namespace.
    #[arg(long, default_value_t = 10)]
    pub redis_keys: u32,
    /// S3 writes in flight at once.
    #[arg(long, default_value_t = 16)]
    pub parallelism: usize,
}

/// Knobs of `demo seed-user`.
#[derive(Debug, Clone, Args)]
pub struct SeedUserArgs {
    /// Community host name (created if missing).
    #[arg(long)]
    pub host: String,
    /// The user's 64-hex pubkey.
    #[arg(long)]
    pub pubkey: String,
    /// Membership role (`member`, `owner`, …); without it the user is a former participant
    /// (no membership row).
    #[arg(long)]
    pub role: Option<String>,
    /// Events authored.
    #[arg(long, default_value_t = 5)]
    pub events: u32,
    /// Also an allow-list entry.
    #[arg(long)]
    pub allowlisted: bool,
    /// Agents acting for the user (two keys each).
    #[arg(long, default_value_t = 0)]
    pub agents: u32,
    /// Uploads: the content of each (the same text twice, or the same text as another user's,
    /// shares one object). Repeatable.
    #[arg(long = "upload", value_name = "TEXT")]
    pub uploads: Vec<String>,
    /// Keys in the user's namespace `buzz:{community}:user:{pubkey}:*`.
    #[arg(long, default_value_t = 2)]
    pub keys: u32,
}
