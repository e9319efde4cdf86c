//! What the schema's owner declares an unusual object to mean for deletion.
//!
//! A declaration is the object's own comment, written by its owner (`COMMENT ON …` needs
//! ownership, so the worker and serving roles cannot write one, and it is DDL, so the owner's DDL
//! audit records it). A comment that does not start with [`PREFIX`] declares nothing; one that
//! does must parse, or the object is refused naming it and the grammar:
//!
//! ```text
//! buzz-deletion: harmless                          (a trigger, or a DO ALSO rule)
//! buzz-deletion: archives into <schema>.<table>    (a trigger, or a DO ALSO rule)
//! buzz-deletion: tenant data through this key      (a foreign key of a key-only child table)
//! buzz-deletion: refreshed by the deletion         (a materialized view)
//! buzz-deletion: not tenant data                   (a table, foreign table or materialized view)
//! ```

use serde::{Deserialize, Serialize};

/// Every declaration starts with this.
pub const PREFIX: &str = "buzz-deletion:";

/// One parsed declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Declaration {
    /// The trigger or rule changes nothing deletion must know of.
    Harmless,
    /// The trigger or rule copies tenant rows into this table (`schema.table`), which is then
    /// purged of the target after its source and verified.
    ArchivesInto {
        /// The archive table's schema.
        schema: String,
        /// The archive table's name.
        table: String,
    },
    /// The foreign key makes its table tenant data: its rows belong to whoever owns the row
    /// they reference, and are deleted with it.
    TenantDataThroughKey,
    /// The deletion refreshes the materialized view after the purge and verifies it.
    RefreshedByDeletion,
    /// The relation holds no tenant's rows (the owner's word, shown in the inventory).
    NotTenantData,
}

impl Declaration {
    /// The declaration as written after the prefix (canonical form, for the inventory).
    pub fn text(&self) -> String {
        match self {
            Declaration::Harmless => "harmless".to_owned(),
            Declaration::ArchivesInto { schema, table } => {
                format!("archives into {schema}.{table}")
            }
            Declaration::TenantDataThroughKey => "tenant data through this key".to_owned(),
            Declaration::RefreshedByDeletion => "refreshed by the deletion".to_owned(),
            Declaration::NotTenantData => "not tenant data".to_owned(),
        }
    }
}

/// The grammar, for refusal messages.
pub const GRAMMAR: &str = "'buzz-deletion: harmless' | 'buzz-deletion: archives into <schema>.<table>' | \
     'buzz-deletion: tenant data through this key' | 'buzz-deletion: refreshed by the deletion' | \
     'buzz-deletion: not tenant data' (docs/data-model.md, \"Declarations\")";

/// A comment that starts with [`PREFIX`] but is not a declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "comment {comment:?} starts with {PREFIX:?} but is not a declaration; write one of {GRAMMAR}"
)]
pub struct MalformedDeclaration {
    /// The comment as stored.
    pub comment: String,
}

/// The declaration a comment makes: `Ok(None)` for no comment or an ordinary one.
pub fn parse(comment: Option<&str>) -> Result<Option<Declaration>, MalformedDeclaration> {
    let Some(comment) = comment else {
        return Ok(None);
    };
    let Some(rest) = comment.trim().strip_prefix(PREFIX) else {
        return Ok(None);
    };
    let malformed = || MalformedDeclaration {
        comment: comment.to_owned(),
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    let declaration = match words.as_slice() {
        ["harmless"] => Declaration::Harmless,
        ["tenant", "data", "through", "this", "key"] => Declaration::TenantDataThroughKey,
        ["refreshed", "by", "the", "deletion"] => Declaration::RefreshedByDeletion,
        ["not", "tenant", "data"] => Declaration::NotTenantData,
        ["archives", "into", target] => {
            let (schema, table) = target.split_once('.').ok_or_else(malformed)?;
            if schema.is_empty() || table.is_empty() || table.contains('.') {
                return Err(malformed());
            }
            Declaration::ArchivesInto {
                schema: schema.to_owned(),
                table: table.to_owned(),
            }
        }
        _ => return Err(malformed()),
    };
    Ok(Some(declaration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_comments_declare_nothing() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some("keeps history for support")), Ok(None));
    }

    #[test]
    fn every_form_parses_and_prints_back() {
        for text in [
            "harmless",
            "archives into archive.events_history",
            "tenant data through this key",
            "refreshed by the deletion",
            "not tenant data",
        ] {
            let parsed = parse(Some(&format!("{PREFIX} {text}")))
                .ok()
                .flatten()
                .map(|d| d.text());
            assert_eq!(parsed.as_deref(), Some(text));
        }
        assert_eq!(
            parse(Some("  buzz-deletion:   archives   into  a.b  ")),
            Ok(Some(Declaration::ArchivesInto {
                schema: "a".into(),
                table: "b".into()
            }))
        );
    }

    #[test]
    fn a_prefixed_comment_that_is_no_declaration_is_refused() {
        for bad in [
            "buzz-deletion:",
            "buzz-deletion: harmless please",
            "buzz-deletion: archives into events_history",
            "buzz-deletion: archives into a.b.c",
            "buzz-deletion: archives into .b",
            "buzz-deletion: safe",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
