#!/usr/bin/env python3
"""Tests of deploy/migrations/check.py: every destructive statement planted in a migration fails
the check until it carries a reviewed allowance for its rule; additive statements, protective
triggers, grants and function bodies pass; the repository's own migrations pass.

Usage: python3 -m unittest discover -s deploy/migrations -p '*_test.py'
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check  # noqa: E402


def broken(sql: str) -> list[str]:
    """The rules broken by each statement of `sql`, flattened."""
    found: list[str] = []
    for statement in check.statements(check.lex(textwrap.dedent(sql))):
        if statement.code:
            found += check.rules_broken(statement)
    return found


class Migrations:
    """A directory of migrations (and an allowances file) for one test."""

    def __init__(self, files: dict[str, str], allowances: str = "") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="migrations-check-"))
        for name, sql in files.items():
            (self.dir / name).write_text(textwrap.dedent(sql))
        self.allowances = self.dir / "allowances"
        self.allowances.write_text(allowances)

    def check(self) -> check.Report:
        return check.check(self.dir, self.allowances)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class DestructiveStatementsAreFound(unittest.TestCase):
    def test_each_rule_is_broken_by_its_planted_statement(self) -> None:
        planted = {
            "drop": "DROP TABLE deletion.audit_events",
            "truncate": "TRUNCATE deletion.checkpoints",
            "delete": "DELETE FROM deletion.approvals WHERE true",
            "update": "UPDATE deletion.requests SET stage = 'aborted'",
            "alter-type": "ALTER TABLE deletion.requests ALTER COLUMN host TYPE varchar(10)",
            "set-not-null": "ALTER TABLE deletion.requests ALTER COLUMN reason SET NOT NULL",
            "not-null-without-default": "ALTER TABLE deletion.requests ADD COLUMN n int NOT NULL",
            "rename": "ALTER TABLE deletion.requests RENAME COLUMN host TO hostname",
            "disable-trigger": "ALTER TABLE deletion.audit_events DISABLE TRIGGER ALL",
        }
        self.assertEqual(set(planted), set(check.RULES))
        for rule, sql in planted.items():
            with self.subTest(rule=rule):
                self.assertEqual(broken(sql + ";"), [rule])

    def test_every_form_of_taking_something_away_is_found(self) -> None:
        for sql, rule in [
            ("drop table if exists x", "drop"),
            ("DROP SCHEMA deletion CASCADE", "drop"),
            ("DROP TRIGGER audit_events_append_only ON deletion.audit_events", "drop"),
            ("DROP FUNCTION deletion.refuse_mutation()", "drop"),
            ("DROP INDEX deletion.x", "drop"),
            ("ALTER TABLE ONLY deletion.requests DROP COLUMN reason", "drop"),
            ("ALTER TABLE deletion.requests DROP CONSTRAINT requests_signed_by", "drop"),
            ("ALTER TABLE deletion.requests ALTER reason DROP DEFAULT", "drop"),
            ("ALTER TABLE buzz.parted DETACH PARTITION buzz.parted_a", "drop"),
            ("ALTER TYPE deletion.kind DROP ATTRIBUTE a", "drop"),
            ("ALTER TABLE deletion.requests ALTER host SET DATA TYPE text", "alter-type"),
            ("ALTER TABLE deletion.requests ALTER COLUMN host TYPE text USING host::text", "alter-type"),
            ("ALTER TYPE t ALTER ATTRIBUTE a TYPE int", "alter-type"),
            ("ALTER TABLE deletion.requests ADD id2 uuid PRIMARY KEY", "not-null-without-default"),
            ("ALTER TABLE deletion.requests RENAME TO reqs", "rename"),
            ("ALTER TABLE deletion.requests SET SCHEMA public", "rename"),
            ("ALTER SCHEMA deletion RENAME TO old_deletion", "rename"),
            ("ALTER TABLE deletion.audit_events ENABLE REPLICA TRIGGER audit_events_append_only", "disable-trigger"),
            ("truncate table deletion.manifest_chunks", "truncate"),
            ("WITH gone AS (DELETE FROM deletion.checkpoints RETURNING 1) SELECT count(*) FROM gone", "delete"),
            ('UPDATE "deletion"."requests" SET stage = stage', "update"),
        ]:
            with self.subTest(sql=sql):
                self.assertIn(rule, broken(sql + ";"))

    def test_statements_a_do_block_runs_are_checked_like_the_migrations_own(self) -> None:
        self.assertEqual(
            broken(
                """
                DO $$
                DECLARE t text;
                BEGIN
                    FOREACH t IN ARRAY ARRAY['a', 'b'] LOOP
                        EXECUTE format('DROP TABLE buzz.%I', t);
                    END LOOP;
                END
                $$;
                """
            ),
            ["drop"],
        )
        self.assertEqual(
            broken(
                """
                DO $body$
                BEGIN
                    IF EXISTS (SELECT 1 FROM deletion.checkpoints) THEN
                        DELETE FROM deletion.checkpoints;
                    END IF;
                    EXECUTE 'TRUNCATE deletion.approvals';
                END
                $body$;
                """
            ),
            ["delete", "truncate"],
        )

    def test_a_multi_action_alter_table_reports_each_rule_once(self) -> None:
        self.assertEqual(
            broken(
                "ALTER TABLE t ADD COLUMN a int, DROP COLUMN b, DROP COLUMN c, "
                "ALTER COLUMN d TYPE bigint;"
            ),
            ["drop", "alter-type"],
        )


class AdditiveStatementsPass(unittest.TestCase):
    def test_additions_protections_grants_and_function_bodies_break_nothing(self) -> None:
        sql = """
            CREATE TABLE deletion.t (id uuid PRIMARY KEY, n int NOT NULL, note text);
            ALTER TABLE deletion.t ADD COLUMN a text;
            ALTER TABLE deletion.t ADD COLUMN b int NOT NULL DEFAULT 0;
            ALTER TABLE deletion.t ADD COLUMN c text CHECK (c IS NOT NULL OR a IS NULL);
            ALTER TABLE deletion.t ADD COLUMN d bigint GENERATED ALWAYS AS IDENTITY;
            ALTER TABLE deletion.t ADD CONSTRAINT t_c CHECK (a IS NOT NULL);
            ALTER TABLE deletion.t ADD PRIMARY KEY (id), ADD UNIQUE (note);
            ALTER TABLE deletion.t ENABLE ALWAYS TRIGGER t_fence;
            ALTER DEFAULT PRIVILEGES IN SCHEMA deletion REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
            CREATE TRIGGER t_append_only BEFORE UPDATE OR DELETE ON deletion.t
                FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
            CREATE TRIGGER t_no_truncate BEFORE TRUNCATE ON deletion.t
                FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
            GRANT SELECT, INSERT, UPDATE, DELETE ON deletion.t TO buzz_deletion_serving;
            REVOKE UPDATE, DELETE, TRUNCATE ON deletion.t FROM buzz_deletion_worker;
            CREATE EVENT TRIGGER audit ON sql_drop EXECUTE FUNCTION deletion.audit_ddl();
            COMMENT ON TABLE deletion.t IS 'never drop or truncate; rows are deleted by the reaper';
            CREATE OR REPLACE FUNCTION deletion.reap() RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM deletion.t WHERE note IS NULL;
                UPDATE deletion.t SET a = 'x';
                DROP TABLE IF EXISTS pg_temp.scratch;
            END
            $$;
            INSERT INTO deletion.t (id, n) VALUES (gen_random_uuid(), 1);
            DO $$
            DECLARE t text;
            BEGIN
                FOREACH t IN ARRAY ARRAY['channels', 'events'] LOOP
                    EXECUTE format('CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.%I
                                    FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()', t);
                    EXECUTE format('ALTER TABLE buzz.%I ENABLE ALWAYS TRIGGER buzz_write_fence', t);
                END LOOP;
                RAISE NOTICE 'delete nothing: drop the idea';
            END
            $$;
        """
        self.assertEqual(broken(sql), [])

    def test_the_repositorys_migrations_pass_with_their_reviewed_allowances(self) -> None:
        report = check.check(check.DEFAULT_MIGRATIONS, check.DEFAULT_ALLOWANCES)
        self.assertEqual(report.errors, [])
        self.assertGreaterEqual(report.files, 15)
        self.assertTrue(
            any(line.startswith("0002_user_deletion.sql:11: drop") for line in report.allowed),
            report.allowed,
        )


class Allowances(unittest.TestCase):
    def test_an_inline_allowance_for_the_rule_lets_the_statement_pass(self) -> None:
        migrations = Migrations(
            {
                "0001_x.sql": """
                    -- migration-check: allow drop, reviewed by alice: the table never held rows
                    DROP TABLE deletion.scratch;
                """
            }
        )
        try:
            report = migrations.check()
            self.assertEqual(report.errors, [])
            self.assertEqual(len(report.allowed), 1)
            self.assertIn("reviewed by alice", report.allowed[0])
        finally:
            migrations.remove()

    def test_an_allowance_for_another_rule_or_without_a_reviewer_does_not(self) -> None:
        migrations = Migrations(
            {
                "0001_x.sql": """
                    -- migration-check: allow truncate, reviewed by alice: wrong rule
                    DROP TABLE deletion.a;
                    -- migration-check: allow drop: nobody reviewed this
                    DROP TABLE deletion.b;
                """
            }
        )
        try:
            errors = migrations.check().errors
            self.assertTrue(any("0001_x.sql:3: drop:" in e for e in errors), errors)
            self.assertTrue(any("allowance for truncate" in e for e in errors), errors)
            self.assertTrue(any("0001_x.sql:4: not an allowance" in e for e in errors), errors)
            self.assertTrue(any("0001_x.sql:5: drop:" in e for e in errors), errors)
        finally:
            migrations.remove()

    def test_an_external_allowance_is_bound_to_the_statements_text(self) -> None:
        sql = "DROP TABLE IF EXISTS deletion.scratch;\n"
        fingerprint = check.statements(check.lex(sql))[0].fingerprint()
        allowance = f"0001_x.sql drop {fingerprint} reviewed by bob: never held rows\n"
        migrations = Migrations({"0001_x.sql": sql}, allowance)
        try:
            self.assertEqual(migrations.check().errors, [])
            (migrations.dir / "0001_x.sql").write_text("DROP TABLE deletion.scratch;\n")
            errors = migrations.check().errors
            self.assertTrue(any("0001_x.sql:1: drop:" in e for e in errors), errors)
            self.assertTrue(any("matches no statement" in e for e in errors), errors)
        finally:
            migrations.remove()


def run_check(migrations: Path) -> subprocess.CompletedProcess[str]:
    """The check's command line over `migrations` with the repository's allowances."""
    return subprocess.run(
        [sys.executable, str(Path(check.__file__)), str(migrations), str(check.DEFAULT_ALLOWANCES)],
        capture_output=True,
        text=True,
        check=False,
    )


class TheCommandLine(unittest.TestCase):
    def test_a_planted_destructive_statement_fails_the_check_naming_file_line_and_rule(self) -> None:
        planted = Path(tempfile.mkdtemp(prefix="migrations-planted-"))
        try:
            for path in check.DEFAULT_MIGRATIONS.glob("*.sql"):
                shutil.copy(path, planted / path.name)
            (planted / "9999_planted.sql").write_text(
                "-- A careless cleanup.\nTRUNCATE deletion.audit_events;\n"
            )
            run = run_check(planted)
            self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
            self.assertIn("9999_planted.sql:2: truncate: TRUNCATE deletion.audit_events", run.stderr)
            self.assertIn("migration-check: allow truncate, reviewed by", run.stderr)
            (planted / "9999_planted.sql").unlink()
            run = run_check(planted)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        finally:
            shutil.rmtree(planted, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
