//! Recognising the canonical-pubkey guarantee from the catalog's facts, without a server. The
//! definitions are what `pg_get_constraintdef` prints for the constraints written in the comments
//! (checked against PostgreSQL 15).

use super::*;

/// A validated, enforced, self-contained single-column CHECK on `pubkey` of relation 1.
fn check(definition: &str) -> ColumnCheck {
    ColumnCheck {
        relation: 1,
        column: "pubkey".into(),
        quoted_column: "pubkey".into(),
        name: "t_pubkey_check".into(),
        definition: definition.into(),
        validated: true,
        enforced: true,
        self_contained: true,
    }
}

/// `CHECK (pubkey ~ '^[0-9a-f]{64}$')`, as deparsed.
const CANONICAL: &str = "CHECK ((pubkey ~ '^[0-9a-f]{64}$'::text))";

fn missing(checks: &[ColumnCheck]) -> Option<String> {
    missing_guarantee("buzz.t", "\"buzz\".\"t\"", "pubkey", true, checks)
}

#[test]
fn the_shipped_spelling_and_its_obvious_equivalents_are_the_guarantee() {
    for definition in [
        CANONICAL,
        // The class written the other way round.
        "CHECK ((pubkey ~ '^[a-f0-9]{64}$'::text))",
        // A varchar column: compared as text.
        "CHECK (((pubkey)::text ~ '^[0-9a-f]{64}$'::text))",
        // Deparsed under a search path that puts another schema first.
        "CHECK ((pubkey OPERATOR(pg_catalog.~) '^[0-9a-f]{64}$'::text))",
    ] {
        assert!(
            is_canonical_definition("pubkey", definition),
            "{definition}"
        );
        assert_eq!(missing(&[check(definition)]), None, "{definition}");
    }
    // A column that needs quoting, as quote_ident spells it.
    assert!(is_canonical_definition(
        "\"User\"",
        "CHECK ((\"User\" ~ '^[0-9a-f]{64}$'::text))"
    ));
}

#[test]
fn anything_else_is_not_the_guarantee() {
    for definition in [
        // Case-insensitive: lets upper case through.
        "CHECK ((pubkey ~* '^[0-9a-f]{64}$'::text))",
        // Upper case allowed, unanchored, wrong length, another class.
        "CHECK ((pubkey ~ '^[0-9a-fA-F]{64}$'::text))",
        "CHECK ((pubkey ~ '[0-9a-f]{64}'::text))",
        "CHECK ((pubkey ~ '^[0-9a-f]{32}$'::text))",
        "CHECK ((pubkey ~ '^[0-9a-f]+$'::text))",
        "CHECK ((pubkey ~ '^[[:xdigit:]]{64}$'::text))",
        // Only the length, or lower case without the shape.
        "CHECK ((length(pubkey) = 64))",
        "CHECK ((pubkey = lower(pubkey)))",
        // The comparison inside something larger: deny by default.
        "CHECK (((pubkey ~ '^[0-9a-f]{64}$'::text) OR (pubkey = ''::text)))",
        "CHECK (((pubkey ~ '^[0-9a-f]{64}$'::text) AND (pubkey IS NOT NULL)))",
        // The operands swapped: the column would be the pattern.
        "CHECK (('^[0-9a-f]{64}$'::text ~ pubkey))",
        // A collation, another operator's schema, trailing clauses.
        "CHECK ((pubkey ~ ('^[0-9a-f]{64}$'::text COLLATE \"C\")))",
        "CHECK ((pubkey OPERATOR(public.~) '^[0-9a-f]{64}$'::text))",
        "CHECK ((pubkey ~ '^[0-9a-f]{64}$'::text)) NO INHERIT",
        "CHECK ((pubkey ~ '^[0-9a-f]{64}$'::text)) NOT VALID",
        "CHECK ((pubkey ~ '^[0-9a-f]{64}$'::text)) NOT ENFORCED",
        // Another column.
        "CHECK ((other ~ '^[0-9a-f]{64}$'::text))",
    ] {
        assert!(
            !is_canonical_definition("pubkey", definition),
            "{definition}"
        );
        let problem = missing(&[check(definition)]).unwrap_or_default();
        assert!(
            problem.contains("its CHECK constraint(s) \"t_pubkey_check\" are not exactly"),
            "{definition}: {problem}"
        );
    }
}

#[test]
fn a_missing_guarantee_is_named_with_the_table_the_column_and_the_remedy() {
    let problem = missing(&[]).unwrap_or_default();
    assert!(
        problem.starts_with("buzz.t: declared user column \"pubkey\""),
        "{problem}"
    );
    assert!(problem.contains("it has no CHECK constraint"), "{problem}");
    assert!(
        problem.contains("ALTER TABLE \"buzz\".\"t\" ADD CHECK (\"pubkey\" ~ '^[0-9a-f]{64}$')"),
        "{problem}"
    );
}

#[test]
fn the_canonical_comparison_guarantees_nothing_unless_validated_enforced_and_self_contained() {
    // As deparsed: the suffix and the flag agree.
    let not_valid = ColumnCheck {
        validated: false,
        ..check(&format!("{CANONICAL} NOT VALID"))
    };
    let problem = missing(std::slice::from_ref(&not_valid)).unwrap_or_default();
    assert!(problem.contains("is NOT VALID"), "{problem}");
    assert!(
        problem.contains("VALIDATE CONSTRAINT \"t_pubkey_check\""),
        "{problem}"
    );

    let not_enforced = ColumnCheck {
        enforced: false,
        validated: false,
        ..check(&format!("{CANONICAL} NOT ENFORCED"))
    };
    let problem = missing(&[not_enforced]).unwrap_or_default();
    assert!(problem.contains("is NOT ENFORCED"), "{problem}");

    // A look-alike `~` of another schema, deparsed bare under a search path that finds it
    // first: its dependency on the operator gives it away.
    let look_alike = ColumnCheck {
        self_contained: false,
        ..check(CANONICAL)
    };
    let problem = missing(&[look_alike]).unwrap_or_default();
    assert!(problem.contains("that is not built in"), "{problem}");

    // One sound constraint among unsound ones is enough.
    let sound = ColumnCheck {
        name: "t_pubkey_canonical".into(),
        ..check(CANONICAL)
    };
    assert_eq!(
        missing(&[not_valid, check("CHECK ((length(pubkey) = 64))"), sound]),
        None
    );
}

#[test]
fn a_foreign_tables_checks_are_not_enforced_so_they_guarantee_nothing() {
    let problem = missing_guarantee(
        "buzz.t",
        "\"buzz\".\"t\"",
        "pubkey",
        false,
        &[check(CANONICAL)],
    )
    .unwrap_or_default();
    assert!(problem.contains("foreign table"), "{problem}");
}
