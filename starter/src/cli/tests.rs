//! The grammar's deprecated spellings: the old flag parses to the same command as the new one
//! and earns exactly one warning naming the new spelling; the new flag earns none.

use super::*;

const ID: &str = "5d0c6f5e-8a0e-4d5c-9a43-2f3b9c1e7a10";
const DIGEST: &str = "sha256:0123abcd";

fn parsed(args: &[&str]) -> Parsed {
    let mut argv = vec!["buzz-deletion"];
    argv.extend_from_slice(args);
    match parse(argv) {
        Ok(parsed) => parsed,
        Err(e) => panic!("{args:?} does not parse: {e}"),
    }
}

/// The old and the new spelling give the same command; only the old one warns, once, naming
/// the new flag and the release it goes away in.
fn assert_deprecated_alias(before: &[&str], old: &str, new: &str, value: &str, after: &[&str]) {
    let with = |flag: &str| {
        let mut args = before.to_vec();
        args.extend([flag, value]);
        args.extend_from_slice(after);
        parsed(&args)
    };
    let old_parsed = with(old);
    let new_parsed = with(new);
    assert_eq!(
        format!("{:?}", old_parsed.cli),
        format!("{:?}", new_parsed.cli),
        "{old} and {new} must give the same command"
    );
    assert!(new_parsed.warnings.is_empty(), "{:?}", new_parsed.warnings);
    assert_eq!(old_parsed.warnings.len(), 1, "{:?}", old_parsed.warnings);
    let warning = &old_parsed.warnings[0];
    assert!(warning.starts_with("warning: "), "{warning}");
    assert!(
        warning.contains(&format!("{old} is deprecated")),
        "{warning}"
    );
    assert!(warning.contains(&format!("use {new}")), "{warning}");
    assert!(
        warning.contains(DEPRECATED_SPELLINGS_REMOVED_IN),
        "{warning}"
    );
    assert!(!warning.contains('\n'), "one line: {warning}");

    // `--flag=value` is the same flag.
    let mut joined = before.to_vec();
    let old_joined = format!("{old}={value}");
    joined.push(&old_joined);
    joined.extend_from_slice(after);
    let joined = parsed(&joined);
    assert_eq!(format!("{:?}", joined.cli), format!("{:?}", new_parsed.cli));
    assert_eq!(joined.warnings, old_parsed.warnings);
}

#[test]
fn community_approve_accepts_digest_as_inventory_digest_with_a_warning() {
    assert_deprecated_alias(
        &["community", "approve", ID, "--key", "/k.pub"],
        "--digest",
        "--inventory-digest",
        DIGEST,
        &["--note", "ok"],
    );
    let parsed = parsed(&[
        "community",
        "approve",
        ID,
        "--digest",
        DIGEST,
        "--key",
        "/k.pub",
    ]);
    match parsed.cli.command {
        Command::Community(CommunityCommand::Approve(args)) => {
            assert_eq!(args.inventory_digest, DIGEST)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn community_sign_approve_accepts_digest_as_inventory_digest_with_a_warning() {
    assert_deprecated_alias(
        &["community", "sign", "approve", ID],
        "--digest",
        "--inventory-digest",
        DIGEST,
        &["--key", "/k.pub"],
    );
}

#[test]
fn user_approve_uses_the_same_digest_flag_as_community_approve() {
    let user = parsed(&[
        "user",
        "approve",
        ID,
        "--inventory-digest",
        DIGEST,
        "--key",
        "/k.pub",
    ]);
    assert!(user.warnings.is_empty());
    match user.cli.command {
        Command::User(UserCommand::Approve {
            inventory_digest, ..
        }) => assert_eq!(inventory_digest, DIGEST),
        other => panic!("{other:?}"),
    }
    // `--digest` was never a user flag: it is not silently accepted there.
    let mut argv = vec!["buzz-deletion", "user", "approve", ID, "--digest", DIGEST];
    argv.extend(["--key", "/k.pub"]);
    assert!(parse(argv).is_err());
}

#[test]
fn sweep_schedule_and_unschedule_accept_id_as_schedule_id_with_a_warning() {
    assert_deprecated_alias(
        &["sweep", "schedule", "--every", "24h"],
        "--id",
        "--schedule-id",
        "nightly",
        &[],
    );
    assert_deprecated_alias(
        &["sweep", "unschedule"],
        "--id",
        "--schedule-id",
        "nightly",
        &[],
    );
}

#[test]
fn user_stop_accepts_wait_secs_as_stop_wait_secs_like_user_run_with_a_warning() {
    assert_deprecated_alias(
        &["user", "stop", ID],
        "--wait-secs",
        "--stop-wait-secs",
        "5",
        &[],
    );
}

#[test]
fn global_flags_and_values_that_look_like_old_flags_do_not_warn() {
    let parsed = parsed(&[
        "--output",
        "table",
        "community",
        "approve",
        ID,
        "--inventory-digest",
        DIGEST,
        "--note=--digest",
        "--key",
        "/k.pub",
    ]);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    assert_eq!(parsed.cli.output, OutputFormat::Table);
}

#[test]
fn every_hidden_alias_in_the_grammar_is_a_documented_deprecated_spelling() {
    // A hidden alias warns as deprecated, so a new one must be a deliberate rename.
    fn aliases(command: &clap::Command, path: String, found: &mut Vec<String>) {
        for arg in command.get_arguments() {
            for alias in arg.get_aliases().unwrap_or_default() {
                found.push(format!("{path}: --{alias}"));
            }
        }
        for sub in command.get_subcommands() {
            aliases(sub, format!("{path} {}", sub.get_name()), found);
        }
    }
    let mut found = Vec::new();
    aliases(&Cli::command(), "buzz-deletion".into(), &mut found);
    found.sort();
    assert_eq!(
        found,
        [
            "buzz-deletion community approve: --digest",
            "buzz-deletion community sign approve: --digest",
            "buzz-deletion sweep schedule: --id",
            "buzz-deletion sweep unschedule: --id",
            "buzz-deletion user stop: --wait-secs",
        ]
    );
}

#[test]
fn the_grammar_is_consistent() {
    Cli::command().debug_assert();
}
