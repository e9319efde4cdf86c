//! `buzz-deletion stack-check`: the round trip through Temporal, Postgres, Redis and S3.

use workflows::stack_check::{StackCheck, StackCheckInput};

use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::Report;

/// Starts a StackCheck workflow and waits for its report (needs a running worker).
pub async fn run(sleep_secs: u64) -> CliResult {
    let nonce = uuid::Uuid::new_v4().to_string();
    let input = StackCheckInput {
        nonce: nonce.clone(),
        sleep_secs,
    };
    let workflow_id = format!("stack-check-{nonce}");
    let report = connect::run_workflow(StackCheck::run, input, &workflow_id, "StackCheck").await?;
    if report.touched.s3_echo != nonce {
        return Err(CliError::Other(anyhow::anyhow!(
            "S3 returned {:?} instead of the nonce",
            report.touched.s3_echo
        )));
    }
    let text = format!(
        "postgres schema v{} · redis keys round-tripped {} · s3 version {} · slept {} s\n",
        report.touched.postgres_schema_version,
        report.touched.redis_keys_round_tripped,
        report.touched.s3_version_id,
        report.slept_secs
    );
    Report::new(&report, text)
}
