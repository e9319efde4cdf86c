//! Command-line grammar of `buzz-deletion`.

use clap::{Args, Parser, Subcommand};
use uuid::Uuid;

use crate::output::OutputFormat;
use crate::signing::KeyArgs;

/// Operator CLI for buzz-deletion: erase a community or a user, with proof.
///
/// Exit codes: 0 ok, 1 failed, refused or blocked, 2 usage error.
#[derive(Debug, Parser)]
#[command(name = "buzz-deletion", version, about)]
pub struct Cli {
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json, global = true)]
    pub output: OutputFormat,
    /// Seconds a command that needs a worker (submit, approve, abort, unblock, status, watch,
    /// the `user` commands) waits for one to answer before saying that none does.
    #[arg(long, global = true, value_name = "SECS",
          default_value_t = crate::worker_wait::DEFAULT_WORKER_WAIT_SECS)]
    pub worker_wait: u64,
    /// Run even if the database role is a superuser or owns the schemas. Only for a throwaway
    /// local stack (same as BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack); `migrate`
    /// always connects as the owner and needs no flag.
    #[arg(long, global = true)]
    pub allow_privileged_db_role: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (idempotent).
    Migrate,
    /// Run a StackCheck workflow: one activity touching Postgres, Redis and S3, then a timer.
    StackCheck {
        /// Durable timer after the activity, in seconds.
        #[arg(long, default_value_t = 1)]
        sleep_secs: u64,
    },
    /// Whole-community deletion.
    #[command(subcommand)]
    Community(CommunityCommand),
    /// User deletion (demo targets only; reference 003 on Temporal).
    #[command(subcommand)]
    User(crate::user_cmd::UserCommand),
    /// Demo data and the serving simulator.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Bucket-wide taxonomy sweep: run once, schedule, unschedule, list records.
    #[command(subcommand)]
    Sweep(crate::commands::sweep::SweepCommand),
    /// The operator registry: SSH public keys allowed to sign operator actions (owner only,
    /// BUZZ_OWNER_DATABASE_URL).
    #[command(subcommand)]
    Operators(crate::commands::operators::OperatorsCommand),
}

/// `community …` subcommands.
#[derive(Debug, Subcommand)]
pub enum CommunityCommand {
    /// Start a deletion: records the request, freezes the inventory, prints id and digest.
    Submit {
        /// Community host name. Defaults to the authority of RELAY_URL.
        #[arg(long)]
        host: Option<String>,
        /// Operator asking for the deletion: optional; if given it must be the registered name
        /// of the signing key (which is what is recorded).
        #[arg(long)]
        requested_by: Option<String>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// The requester's SSH key, which signs the submission.
        #[command(flatten)]
        key: KeyArgs,
        /// How long to wait for the inventory to be frozen.
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
        /// Workflow tuning (retry backoff, heartbeat timeout, parallelism).
        #[command(flatten)]
        tuning: TuningArgs,
    },
    /// Approve the exact frozen inventory digest (a second operator; two-person rule).
    Approve {
        /// Request id.
        id: Uuid,
        /// Approving operator: optional; if given it must be the registered name of the
        /// signing key, which must not be the requester's (two-person rule on keys).
        #[arg(long)]
        approved_by: Option<String>,
        /// The frozen inventory digest printed by `submit` / `status`.
        #[arg(long)]
        digest: String,
        /// Note kept with the approval evidence.
        #[arg(long)]
        note: Option<String>,
        /// The approver's SSH key, which signs the approval of this digest.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// End the request before the irreversible point; the community is served again.
    Abort {
        /// Request id.
        id: Uuid,
        /// Operator aborting: optional; if given it must be the signing key's registered name.
        #[arg(long)]
        aborted_by: Option<String>,
        /// Why (kept in the audit trail).
        #[arg(long)]
        reason: String,
        /// The operator's SSH key, which signs the abort.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Resume a blocked request after remediating its recorded failure.
    Unblock {
        /// Request id.
        id: Uuid,
        /// Operator unblocking: optional; if given it must be the signing key's registered
        /// name.
        #[arg(long)]
        unblocked_by: Option<String>,
        /// The remediation done (kept in the audit trail).
        #[arg(long)]
        reason: String,
        /// The operator's SSH key, which signs the unblock.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Print the signed JSON payload of an approve, abort or unblock, to paste into the Web
    /// UI's "Send a Signal" dialog (signal name = the action).
    #[command(subcommand)]
    Sign(SignCommand),
    /// Current phase, progress, blocked reason and approval of one request.
    Status {
        /// Request id.
        id: Uuid,
    },
    /// Follow a request live until it completes (exit 0), blocks or aborts (exit 1).
    Watch {
        /// Request id.
        id: Uuid,
        /// Polling interval in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Give up after this many seconds (0 = never).
        #[arg(long, default_value_t = 0)]
        timeout_secs: u64,
    },
    /// List requests.
    List(ListArgs),
    /// Everything recorded about one request: approval, checkpoints, chunks, audit trail.
    Inspect {
        /// Request id.
        id: Uuid,
    },
}

/// `community sign …`: one signed signal payload.
#[derive(Debug, Subcommand)]
pub enum SignCommand {
    /// The payload of signal `approve`.
    Approve {
        /// Request id.
        id: Uuid,
        /// The frozen inventory digest you approve.
        #[arg(long)]
        digest: String,
        /// Your registered name (optional; must match the key).
        #[arg(long)]
        approved_by: Option<String>,
        /// Note kept with the approval evidence.
        #[arg(long)]
        note: Option<String>,
        /// Your SSH key.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// The payload of signal `abort`.
    Abort {
        /// Request id.
        id: Uuid,
        /// Why.
        #[arg(long)]
        reason: String,
        /// Your registered name (optional; must match the key).
        #[arg(long)]
        aborted_by: Option<String>,
        /// Your SSH key.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// The payload of signal `unblock`.
    Unblock {
        /// Request id.
        id: Uuid,
        /// The remediation done.
        #[arg(long)]
        reason: String,
        /// Your registered name (optional; must match the key).
        #[arg(long)]
        unblocked_by: Option<String>,
        /// Your SSH key.
        #[command(flatten)]
        key: KeyArgs,
    },
}

/// Workflow tuning knobs; the defaults suit production.
#[derive(Debug, Clone, Args)]
pub struct TuningArgs {
    /// First retry delay of a failed activity, in seconds (doubles up to --retry-max-secs).
    #[arg(long, default_value_t = 30)]
    pub retry_initial_secs: u64,
    /// Longest retry delay of a failed activity, in seconds: after an outage, how long a
    /// deletion may still wait before its next attempt.
    #[arg(long, default_value_t = 600)]
    pub retry_max_secs: u64,
    /// Heartbeat timeout of long activities, in seconds (how fast a dead worker is noticed).
    #[arg(long, default_value_t = 30)]
    pub heartbeat_timeout_secs: u64,
    /// DeleteObjects calls in flight at once.
    #[arg(long, default_value_t = 8)]
    pub delete_parallelism: u32,
    /// Manifest chunks deleted per activity call.
    #[arg(long, default_value_t = 100)]
    pub chunks_per_call: u64,
    /// delete_chunks calls per workflow run before continue-as-new.
    #[arg(long, default_value_t = 40)]
    pub delete_rounds_per_run: u32,
}

/// Filters for `community list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Which requests.
    #[arg(long, value_enum, default_value_t = ListState::All)]
    pub state: ListState,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
}

/// Request states `list` can filter on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListState {
    /// Not yet terminal.
    Open,
    /// Waiting for an operator's unblock.
    Blocked,
    /// Deleted and verified (retention pending).
    Completed,
    /// Everything.
    All,
}

/// `demo …` subcommands.
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// Create a community (if needed) and write demo data through the serving API.
    Seed(SeedArgs),
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
    /// Also print up to this many admitted writes per community (0: counts only).
    #[arg(long, default_value_t = 0)]
    pub record_admitted: usize,
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
