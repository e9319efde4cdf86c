-- User deletion: which operator run executed a stage row's handler.
--
-- `handler_run_token` is the token of the workflow run (execution run id and the run's sequence
-- number, deterministic workflow state) whose attempt last started the row's handler. A handler
-- attempt that Temporal retries after a crash that followed the saved result finds the row
-- completed; it tells "this run already executed the handler" from "an earlier run did" by this
-- column, not by what the lost attempt would have returned. Step mode (`user run --next-step`)
-- therefore runs exactly one handler per invocation whatever crashes in between.
--
-- Nullable: rows started before this migration carry none, and they are treated as started by
-- an earlier run. The worker role's table-level UPDATE grant (0007) covers the new column; the
-- completed-row guard of 0007 keeps it unchanged once the row is completed.
ALTER TABLE deletion.user_stage_history ADD COLUMN handler_run_token text;

-- The `UserDeletion` execution (Temporal run id) that took a user request up last, by
-- `user resume` or by continue-as-new; NULL while the registering execution still drives it. A
-- handler start on behalf of any other execution is refused, so an attempt of a terminated or
-- superseded execution that was already dispatched cannot start a handler after the resume (the
-- generation bump of the resume fences its saves; this fences its starts).
ALTER TABLE deletion.requests ADD COLUMN owner_run_id text;
