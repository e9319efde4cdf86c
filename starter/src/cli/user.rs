//! `user …`: the grammar of user deletion.

use clap::{Args, Subcommand, ValueEnum};
use uuid::Uuid;
use workflows::user::StageKind;

use super::KeyArgs;

/// How long `user run` waits for its run to acknowledge a stop after SIGINT or SIGTERM, and
/// `user stop` for the acknowledgement, unless told otherwise.
pub const DEFAULT_STOP_WAIT_SECS: u64 = 30;

/// `user …` subcommands.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Submit a user deletion: records the request with its frozen inventory and prints its id,
    /// inventory and digest. `user:<64-hex pubkey>` erases a real user: the inventory lists every
    /// community holding their data, with their rows per declared table, media objects, agents
    /// and Redis keys. `demo:<name>` runs the orchestration on dummy handlers over an artificial
    /// inventory (B, then C).
    Submit {
        /// The user: `user:<64 lowercase hex>` (the pubkey the relay's rows carry) or
        /// `demo:<name>`.
        #[arg(long)]
        target: String,
        /// Operator asking for the deletion: optional; if given it must be the registered name
        /// of the signing key (which is what is recorded).
        #[arg(long)]
        requested_by: Option<String>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// Freeze a demo inventory of N communities (B, C, then generated ones; 1 to 1000)
        /// instead of B and C, to exercise the bounds. The digest covers every community.
        #[arg(long)]
        demo_communities: Option<u32>,
        /// The requester's SSH key, which signs the submission.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Approve the frozen inventory digest (a second operator; two-person rule). Creates no
    /// stage rows.
    Approve {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
        /// Approving operator: optional; if given it must be the registered name of the
        /// signing key, which must not be the requester's (two-person rule on keys).
        #[arg(long)]
        approved_by: Option<String>,
        /// The frozen inventory digest printed by `submit` / `status`.
        #[arg(long)]
        inventory_digest: String,
        /// Note kept with the approval evidence.
        #[arg(long)]
        note: Option<String>,
        /// Delete this community (its host, as the inventory lists it) as a child community
        /// deletion: only one the user owns alone. Repeatable. The approver's key signs the
        /// child's submission; the child has its own inventory and digest and needs its own
        /// approval by another operator (`community approve`).
        #[arg(long = "delete-owned-community", value_name = "HOST")]
        delete_owned_communities: Vec<String>,
        /// The approver's SSH key, which signs the approval of this digest.
        #[command(flatten)]
        key: KeyArgs,
    },
    /// Abort the request before its irreversible point (no purge started yet): the request
    /// ends `aborted` and, for a `user:` target, the user's write fence is lifted so they can
    /// write again. Refused once a purge started, or while a run is in progress (stop it first).
    Abort(UserActionArgs),
    /// Unblock a blocked request once its reason was remedied (for example ownership of an
    /// owned community transferred): clears the reason and the retry deadline; the next `user
    /// run` re-checks what blocked it.
    Unblock(UserActionArgs),
    /// Let the workflow execute stages, wait until it pauses, and print the stage rows. Exit 1
    /// when a handler failed (with the saved retry deadline) or the run was refused.
    Run {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
        /// Execute one handler and its transition, then pause.
        #[arg(long)]
        next_step: bool,
        /// Make this stage's dummy handler fail.
        #[arg(long, value_enum)]
        fail_stage: Option<StageArg>,
        /// Community whose purge_db observes no agents (repeatable).
        #[arg(long = "demo-no-agents-in")]
        demo_no_agents_in: Vec<Uuid>,
        /// Time each handler takes, heartbeating meanwhile.
        #[arg(long, default_value_t = 0)]
        stage_delay_ms: u64,
        /// Label saved on the stage rows this run starts.
        #[arg(long)]
        executor_id: Option<String>,
        /// After Ctrl-C or SIGTERM, how long to wait for the run to acknowledge its stop.
        #[arg(long, default_value_t = DEFAULT_STOP_WAIT_SECS)]
        stop_wait_secs: u64,
    },
    /// Stop the request's run in progress: no further handler starts and no further transition
    /// commits; a handler in flight is cancelled and its row stays current. The next `user run`
    /// continues from that row. Does nothing when no run is in progress.
    Stop {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
        /// How long to wait for the run to acknowledge the stop (the same flag as `user run`'s;
        /// `--wait-secs` is the deprecated spelling).
        #[arg(long, alias = "wait-secs", default_value_t = DEFAULT_STOP_WAIT_SECS)]
        stop_wait_secs: u64,
    },
    /// Start a new workflow for a request whose workflow is gone (terminated, or lost with its
    /// namespace), from what Postgres holds. Refused while a workflow for it is running.
    Resume {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
        /// Runs the new workflow serves before it continues as new (0: the default). For tests.
        #[arg(long, default_value_t = 0, hide = true)]
        runs_per_execution: u64,
    },
    /// Print the request, its approval and its stage rows in predecessor-chain order.
    Status {
        /// Request id.
        #[arg(value_name = "REQUEST_ID")]
        id: Uuid,
    },
    /// User-deletion requests from Postgres, newest first, filtered by state.
    List(super::ListArgs),
    /// Export a completed user deletion's certificate (the target appears only as a salted
    /// hash; `certificate verify --target` confirms it).
    Certificate(super::ExportArgs),
}

/// A stage name on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageArg {
    /// The user gate.
    #[value(name = "gate_user")]
    GateUser,
    /// Per-community row purge.
    #[value(name = "purge_db")]
    PurgeDb,
    /// Per-community agent purge.
    #[value(name = "purge_agents")]
    PurgeAgents,
}

impl From<StageArg> for StageKind {
    fn from(arg: StageArg) -> Self {
        match arg {
            StageArg::GateUser => StageKind::GateUser,
            StageArg::PurgeDb => StageKind::PurgeDb,
            StageArg::PurgeAgents => StageKind::PurgeAgents,
        }
    }
}

/// An operator's signed action on one user-deletion request (`abort`, `unblock`).
#[derive(Debug, Clone, Args)]
pub struct UserActionArgs {
    /// Request id.
    #[arg(value_name = "REQUEST_ID")]
    pub id: Uuid,
    /// Acting operator: optional; if given it must be the registered name of the signing key.
    #[arg(long)]
    pub requested_by: Option<String>,
    /// Why (abort), or what was remedied (unblock); kept in the audit trail.
    #[arg(long)]
    pub reason: String,
    /// The operator's SSH key, which signs the action.
    #[command(flatten)]
    pub key: KeyArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Command, parse};

    const ID: &str = "5d0c6f5e-8a0e-4d5c-9a43-2f3b9c1e7a10";

    fn no_agents_in(flags: &[&str]) -> Vec<Uuid> {
        let mut argv = vec!["buzz-deletion", "user", "run", ID];
        argv.extend_from_slice(flags);
        let parsed = parse(argv).unwrap_or_else(|e| panic!("{flags:?} does not parse: {e}"));
        match parsed.cli.command {
            Command::User(UserCommand::Run {
                demo_no_agents_in, ..
            }) => demo_no_agents_in,
            other => panic!("{flags:?} parsed to {other:?}"),
        }
    }

    #[test]
    fn demo_no_agents_in_given_several_times_keeps_every_community_in_order() {
        let (b, c) = (Uuid::from_u128(0xb), Uuid::from_u128(0xc));
        let (b_arg, c_arg) = (b.to_string(), c.to_string());
        let flag = "--demo-no-agents-in";
        assert_eq!(no_agents_in(&[]), Vec::<Uuid>::new());
        assert_eq!(no_agents_in(&[flag, &b_arg]), vec![b]);
        assert_eq!(no_agents_in(&[flag, &b_arg, flag, &c_arg]), vec![b, c]);
        assert_eq!(
            no_agents_in(&[flag, &c_arg, "--next-step", flag, &b_arg]),
            vec![c, b],
            "another flag in between does not drop the earlier community"
        );
        let not_a_uuid = parse(["buzz-deletion", "user", "run", ID, flag, "b"]);
        assert!(not_a_uuid.is_err(), "a community is named by its id");
    }

    /// Reference 003 bounds a run only by its 100-handler budget, with no flag to stop sooner;
    /// neither do we: `--max-stages` and `--pause-after-handler` are usage errors (exit 2).
    #[test]
    fn user_run_has_no_max_stages_or_pause_after_handler_flag() {
        for flags in [
            &["--max-stages", "1"][..],
            &["--max-stages=1"][..],
            &["--pause-after-handler"][..],
            &["--next-step", "--pause-after-handler"][..],
        ] {
            let mut argv = vec!["buzz-deletion", "user", "run", ID];
            argv.extend_from_slice(flags);
            let refused = match parse(argv) {
                Ok(parsed) => panic!("{flags:?} parsed to {:?}", parsed.cli.command),
                Err(refused) => refused,
            };
            assert_eq!(
                refused.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{flags:?}: {refused}"
            );
            assert_eq!(refused.exit_code(), 2, "{flags:?}: a usage error");
            let flag = flags
                .iter()
                .find(|f| f.starts_with("--max") || f.starts_with("--pause"))
                .map(|f| f.split('=').next().unwrap_or(f))
                .unwrap_or_default();
            assert!(refused.to_string().contains(flag), "{flags:?}: {refused}");
        }
    }
}
