//! Scope can never shrink after approval: every relation the receipt states as inventoried
//! ([`super::InventoryFacts::relations`]) must appear in what the purge and the verification
//! recorded. One rule each; a receipt that states no relations (signed before receipts stated
//! them, a user receipt, an inventory without a closed world) has nothing to check.
//!
//! "Appears" means:
//! - in the purge facts: `/purge/tables` holds a count (zero included) for the relation's
//!   `root` — the purge deletes a tenant table's rows heap by heap and counts them under the
//!   table's root, so a partition or inheritance child is covered by its root's count; a tenant
//!   table, the community row, a key child and an archive table are their own root;
//! - in the verification facts: `/verification/relations`, the names of the relations the
//!   verification re-found under their inventoried name and counted with no row of the
//!   community, holds the relation's own name (partitions included, one by one).

use std::collections::BTreeSet;

use super::{InventoriedRelation, Receipt, problem};
use crate::verify::CertificateProblem;

/// The member of the recorded verification report naming the relations it verified.
const VERIFIED: &str = "relations";

/// The coverage rules alone (also part of [`super::check_counts`]): what the store checks
/// before issuing a receipt, so that no receipt is signed with fewer relations covered than
/// its inventory states.
pub fn coverage_problems(receipt: &Receipt) -> Vec<CertificateProblem> {
    [inventoried_relations_purged, inventoried_relations_verified]
        .iter()
        .flat_map(|rule| rule(receipt))
        .collect()
}

/// Every inventoried relation's root has a count in `/purge/tables`.
pub(super) fn inventoried_relations_purged(receipt: &Receipt) -> Vec<CertificateProblem> {
    let purged: BTreeSet<&str> = receipt
        .purge
        .tables
        .iter()
        .map(|t| t.table.as_str())
        .collect();
    uncovered(
        &receipt.inventory.relations,
        |r| !purged.contains(r.root.as_str()),
        |r| {
            format!(
                "{} ({}) was inventoried, but /purge/tables has no count for {}, which \
                 covers it: the purge facts cover fewer relations than the inventory",
                r.relation, r.role, r.root
            )
        },
    )
    .collect()
}

/// A problem at every inventoried relation `missing` finds uncovered, saying `why`.
fn uncovered<'a>(
    relations: &'a [InventoriedRelation],
    missing: impl Fn(&InventoriedRelation) -> bool + 'a,
    why: impl Fn(&InventoriedRelation) -> String + 'a,
) -> impl Iterator<Item = CertificateProblem> + 'a {
    relations
        .iter()
        .enumerate()
        .filter(move |(_, r)| missing(r))
        .map(move |(i, r)| problem(format!("/inventory/relations/{i}"), why(r)))
}

/// Every inventoried relation is named in `/verification/relations`.
pub(super) fn inventoried_relations_verified(receipt: &Receipt) -> Vec<CertificateProblem> {
    let relations = &receipt.inventory.relations;
    if relations.is_empty() {
        return Vec::new();
    }
    let pointer = format!("/verification/{VERIFIED}");
    let Some(listed) = receipt
        .verification
        .get(VERIFIED)
        .and_then(|v| v.as_array())
    else {
        return vec![problem(
            pointer,
            format!(
                "is missing or not an array of relation names, but the receipt states {} \
                 inventoried relation(s): the verification facts name none of them",
                relations.len()
            ),
        )];
    };
    let mut problems: Vec<CertificateProblem> = listed
        .iter()
        .enumerate()
        .filter(|(_, name)| !name.is_string())
        .map(|(j, _)| {
            problem(
                format!("{pointer}/{j}"),
                "is not a relation name (a string)",
            )
        })
        .collect();
    let verified: BTreeSet<&str> = listed.iter().filter_map(|v| v.as_str()).collect();
    problems.extend(uncovered(
        relations,
        |r| !verified.contains(r.relation.as_str()),
        |r| {
            format!(
                "{} ({}) was inventoried, but {pointer} does not name it: the verification \
                 facts cover fewer relations than the inventory",
                r.relation, r.role
            )
        },
    ));
    problems
}
