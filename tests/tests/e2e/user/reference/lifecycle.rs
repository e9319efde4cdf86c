//! Issue 30, part 4: the workflow cross-checks the stage chain it reconstructs against the request
//! row's lifecycle. A request row changed behind its back blocks the run, naming both, before any
//! handler starts: a chain that is still going on is not reported `completed`, and a request whose
//! row claims it is running with no stage row is refused rather than gated a second time. Once the
//! row is restored, the next run continues.

use testkit::records::read;
use testkit::user::{ApprovedRequest, UserStack, submit_and_approve};
use uuid::Uuid;

use super::{assert_no_handler_ran, run, target, with_approved};

async fn set_lifecycle(stack: &UserStack, id: Uuid, stage: &str) {
    let sql = "UPDATE deletion.requests SET stage = $2 WHERE id = $1";
    let update = sqlx::query(sql)
        .bind(id)
        .bind(stage)
        .execute(stack.store.pool());
    read(
        format_args!("setting the lifecycle of {id} to {stage}"),
        update,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_row_that_disagrees_with_its_stage_chain_blocks_before_any_handler() {
    // A started chain whose row claims completion.
    with_approved("lifecycle", async |stack, id| {
        run(stack, id, &["--next-step"]).await.expect_exit(0);
        set_lifecycle(stack, id, "completed").await;
        let before = stack.snapshot(id).await;
        let named = ["lifecycle is 'completed'", "current stage row"];
        run(stack, id, &[])
            .await
            .expect_refusal_naming_all(1, &named);
        assert_no_handler_ran(stack, id, &before, "no handler ran, no row moved").await;
        set_lifecycle(stack, id, "running").await;
        run(stack, id, &[]).await.expect_exit(0);
        assert_eq!(stack.snapshot(id).await.request.stage, "completed");

        // An approved request with no stage row whose row claims it is running.
        let ApprovedRequest { id } = submit_and_approve(stack, &target("second-gate")).await;
        set_lifecycle(stack, id, "running").await;
        run(stack, id, &[])
            .await
            .expect_refusal_naming(1, "second gate");
        assert!(
            stack.snapshot(id).await.rows.is_empty(),
            "no gate was started"
        );
        set_lifecycle(stack, id, "approved").await;
        run(stack, id, &[]).await.expect_exit(0);
        assert_eq!(stack.snapshot(id).await.request.stage, "completed");
    })
    .await;
}
