//! `community …`: the grammar of whole-community deletion.

use activities::store::RequestFilter;
use clap::{Args, Subcommand};
use uuid::Uuid;

use super::KeyArgs;

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
    Approve(ApproveArgs),
    /// End the request before the irreversible point; the community is served again.
    Abort(AbortArgs),
    /// Resume a blocked request after remediating its recorded failure.
    Unblock(UnblockArgs),
    /// Print the signed JSON payload of an approve, abort or unblock, to paste into the Web
    /// UI's "Send a Signal" dialog (signal name = the action).
    #[command(subcommand)]
    Sign(SignCommand),
    /// Current phase, progress, blocked reason and approval of one request.
    Status {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
    },
    /// Follow a request live until it completes (exit 0), blocks or aborts (exit 1).
    Watch {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
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
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
    },
    /// Export a finished deletion's certificate: its signed receipt with the proof that it is
    /// in the transparency log (`certificate verify` checks it offline).
    Certificate(super::ExportArgs),
}

/// `community sign …`: one signed signal payload, from the arguments of the command it stands
/// for.
#[derive(Debug, Subcommand)]
pub enum SignCommand {
    /// The payload of signal `approve`.
    Approve(ApproveArgs),
    /// The payload of signal `abort`.
    Abort(AbortArgs),
    /// The payload of signal `unblock`.
    Unblock(UnblockArgs),
}

/// `community approve` and `community sign approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Request id.
    #[arg(value_name = "REQUEST_ID")]
    pub id: Uuid,
    /// Approving operator: optional; if given it must be the registered name of the signing
    /// key, which must not be the requester's (two-person rule on keys).
    #[arg(long)]
    pub approved_by: Option<String>,
    /// The frozen inventory digest printed by `submit` / `status` (`--digest` is the deprecated
    /// spelling).
    #[arg(long, alias = "digest")]
    pub inventory_digest: String,
    /// Note kept with the approval evidence.
    #[arg(long)]
    pub note: Option<String>,
    /// The approver's SSH key, which signs the approval of this digest.
    #[command(flatten)]
    pub key: KeyArgs,
}

/// `community abort` and `community sign abort`.
#[derive(Debug, Args)]
pub struct AbortArgs {
    /// Request id.
    #[arg(value_name = "REQUEST_ID")]
    pub id: Uuid,
    /// Operator aborting: optional; if given it must be the signing key's registered name.
    #[arg(long)]
    pub aborted_by: Option<String>,
    /// Why (kept in the audit trail).
    #[arg(long)]
    pub reason: String,
    /// The operator's SSH key, which signs the abort.
    #[command(flatten)]
    pub key: KeyArgs,
}

/// `community unblock` and `community sign unblock`.
#[derive(Debug, Args)]
pub struct UnblockArgs {
    /// Request id.
    #[arg(value_name = "REQUEST_ID")]
    pub id: Uuid,
    /// Operator unblocking: optional; if given it must be the signing key's registered name.
    #[arg(long)]
    pub unblocked_by: Option<String>,
    /// The remediation done (kept in the audit trail).
    #[arg(long)]
    pub reason: String,
    /// The operator's SSH key, which signs the unblock.
    #[command(flatten)]
    pub key: KeyArgs,
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
    /// Rows the Postgres purge deletes per batch (each batch one short transaction).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub purge_batch_rows: u32,
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

impl ListState {
    /// The requests this state selects, as both stores (community and user) filter them.
    pub fn filter(self) -> RequestFilter {
        match self {
            ListState::Open => RequestFilter::Open,
            ListState::Blocked => RequestFilter::Blocked,
            ListState::Completed => RequestFilter::Completed,
            ListState::All => RequestFilter::All,
        }
    }
}
