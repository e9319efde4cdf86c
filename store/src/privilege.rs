//! Which PostgreSQL role a process is connected as, and whether that role is more powerful than
//! the job needs.
//!
//! The worker and the CLI's ordinary commands must connect as the worker role (a member of
//! `buzz_deletion_worker`, migration 0007). A superuser, or the owner of the `buzz` or
//! `deletion` schema (or a member of it), can disable the triggers that keep the evidence
//! append-only, alter the tables, or truncate them: a bug or a compromised process running with
//! such a role could rewrite the exclusion proof. Binaries therefore refuse such a role unless
//! [`ALLOW_PRIVILEGED_ROLE_ENV`] says this is a throwaway local stack.

use super::Store;
use super::error::StoreResult;

/// Environment variable that lets a binary run as a privileged role anyway.
pub const ALLOW_PRIVILEGED_ROLE_ENV: &str = "BUZZ_ALLOW_PRIVILEGED_DB_ROLE";

/// The only value of [`ALLOW_PRIVILEGED_ROLE_ENV`] that allows it: it has to be spelled out.
pub const ALLOW_PRIVILEGED_ROLE_VALUE: &str = "throwaway-local-stack";

/// The group role (migration 0007) the worker's login role is a member of.
pub const WORKER_GROUP: &str = "buzz_deletion_worker";

/// The group role (migration 0007) the serving side's login role is a member of.
pub const SERVING_GROUP: &str = "buzz_deletion_serving";

/// The schemas whose owner may not run the worker.
const GUARDED_SCHEMAS: [&str; 2] = ["buzz", "deletion"];

/// A connected role that can change the schema or bypass its triggers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivilegedRole {
    /// `rolsuper`: can do anything, including `SET session_replication_role = replica`.
    Superuser {
        /// The connected role.
        role: String,
    },
    /// Owns (or is a member of the owner of) a guarded schema.
    SchemaOwner {
        /// The connected role.
        role: String,
        /// `schema (owner role)` for each guarded schema it owns.
        schemas: Vec<String>,
    },
}

impl PrivilegedRole {
    /// The connected role's name.
    pub fn role(&self) -> &str {
        match self {
            PrivilegedRole::Superuser { role } | PrivilegedRole::SchemaOwner { role, .. } => role,
        }
    }

    /// Why running as this role is refused and what to do instead; `variable` names the
    /// connection-string variable the role came from, `group` the group role its login role
    /// should be a member of instead (`buzz_deletion_worker` or `buzz_deletion_serving`).
    pub fn refusal(&self, variable: &str, group: &str) -> String {
        let what = match self {
            PrivilegedRole::Superuser { role } => format!("PostgreSQL role {role} is a superuser"),
            PrivilegedRole::SchemaOwner { role, schemas } => format!(
                "PostgreSQL role {role} owns schema {}",
                schemas.join(" and schema ")
            ),
        };
        format!(
            "refusing to run as a privileged database role: {what}, so it could disable the \
             triggers that keep approvals, checkpoints, stamped manifest chunks and the audit \
             trail append-only, and rewrite the deletion proof. Set {variable} to a login role \
             that is a member of {group} (the owner is for `buzz-deletion migrate` \
             only, through BUZZ_OWNER_DATABASE_URL; see docs/production.md, \"Database roles\"). \
             On a throwaway local stack only, set {ALLOW_PRIVILEGED_ROLE_ENV}=\
             {ALLOW_PRIVILEGED_ROLE_VALUE} to run anyway."
        )
    }
}

/// Whether `value` (of [`ALLOW_PRIVILEGED_ROLE_ENV`]) allows a privileged role: only the exact
/// word does, so a stray `1` or `true` copied into a production manifest does not.
pub fn privileged_role_allowed(value: Option<&str>) -> bool {
    value.map(str::trim) == Some(ALLOW_PRIVILEGED_ROLE_VALUE)
}

impl Store {
    /// The connected role if it is a superuser or owns a guarded schema (directly or through
    /// membership); `None` for a least-privilege role.
    pub async fn privileged_role(&self) -> StoreResult<Option<PrivilegedRole>> {
        let (role, superuser, schemas): (String, bool, Vec<String>) = sqlx::query_as(
            "SELECT current_user::text, r.rolsuper, \
                    coalesce((SELECT array_agg(n.nspname || ' (owner ' || \
                                               pg_catalog.pg_get_userbyid(n.nspowner) || ')' \
                                               ORDER BY n.nspname) \
                                FROM pg_catalog.pg_namespace n \
                               WHERE n.nspname = ANY($1) \
                                 AND pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER')), \
                             '{}') \
             FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
        )
        .bind(&GUARDED_SCHEMAS[..])
        .fetch_one(&self.pool)
        .await?;
        Ok(if superuser {
            Some(PrivilegedRole::Superuser { role })
        } else if !schemas.is_empty() {
            Some(PrivilegedRole::SchemaOwner { role, schemas })
        } else {
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_spelled_out_value_allows_a_privileged_role() {
        assert!(privileged_role_allowed(Some("throwaway-local-stack")));
        assert!(privileged_role_allowed(Some(" throwaway-local-stack\n")));
        for value in [None, Some(""), Some("1"), Some("true"), Some("yes")] {
            assert!(!privileged_role_allowed(value), "{value:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_role_the_variable_and_the_way_out() {
        let owner = PrivilegedRole::SchemaOwner {
            role: "buzz".to_owned(),
            schemas: vec![
                "buzz (owner buzz)".to_owned(),
                "deletion (owner buzz)".to_owned(),
            ],
        };
        let message = owner.refusal("DATABASE_URL", WORKER_GROUP);
        for part in [
            "role buzz owns schema buzz (owner buzz) and schema deletion (owner buzz)",
            "Set DATABASE_URL",
            "buzz_deletion_worker",
            "BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack",
        ] {
            assert!(message.contains(part), "{part:?} missing from {message}");
        }
        let superuser = PrivilegedRole::Superuser {
            role: "postgres".to_owned(),
        };
        let message = superuser.refusal("BUZZ_SERVING_DATABASE_URL", SERVING_GROUP);
        assert!(message.contains("postgres is a superuser"), "{message}");
        assert!(
            message.contains("member of buzz_deletion_serving"),
            "{message}"
        );
    }
}
