//! One signed operator statement acts at most once, however many times it arrives.
//!
//! Temporal keeps an update that no worker has accepted yet in memory only (stage `Admitted`):
//! it is not in the workflow's history, and the server drops it when the workflow leaves its
//! cache or its update registry is cleared. A command whose update no worker answered within
//! its bound therefore sends the same signed statement again as the signal of the same name,
//! which Temporal writes to the history before it answers. When a worker returns, both copies
//! may reach the workflow: the first one acts, the second is recognised by its statement
//! (signing key and nonce) and refused as a signature already used, which changes nothing (a
//! signalled copy's refusal is recorded, as every refused signal is). A delivery that was
//! refused or failed before it acted is forgotten, so a later copy is judged on its own.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::operator::SignedAction;

/// The signed statements a workflow has taken in, by signing key and nonce.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliveries {
    taken: BTreeSet<String>,
}

impl Deliveries {
    /// The statement's identity: its signing key and its nonce.
    fn key(signed: &SignedAction) -> String {
        format!("{}/{}", signed.operator, signed.nonce)
    }

    /// Whether `signed` was taken in before. A message without a statement is never a repeat
    /// (it is refused by the rules that require one).
    pub fn is_repeat(&self, signed: Option<&SignedAction>) -> bool {
        signed.is_some_and(|s| self.taken.contains(&Self::key(s)))
    }

    /// Takes `signed` in; false when it was taken in before: the caller drops the message.
    pub fn take(&mut self, signed: Option<&SignedAction>) -> bool {
        match signed {
            Some(s) => self.taken.insert(Self::key(s)),
            None => true,
        }
    }

    /// Forgets `signed` again: its delivery was refused or failed before it acted, so a later
    /// copy is judged on its own (and gets the same refusal, with its real reason).
    pub fn release(&mut self, signed: Option<&SignedAction>) {
        if let Some(s) = signed {
            self.taken.remove(&Self::key(s));
        }
    }

    /// How many statements were taken in.
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }
}

/// Why a repeated statement is dropped, as the (usually departed) caller of its update reads it.
pub fn repeat_refusal(signed: Option<&SignedAction>) -> String {
    let nonce = signed.map_or("", |s| s.nonce.as_str());
    format!(
        "signature refused: it was already used: this signed statement (nonce {nonce}) reached \
         the workflow before and acted (or is acting), so this copy changes nothing; the first \
         delivery's outcome is in `status` and the audit trail. To act again, run the command \
         again: it signs a new statement"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Action, Kind};

    fn statement(operator: &str, nonce: &str) -> SignedAction {
        SignedAction {
            action: Action::Approve,
            kind: Kind::Community,
            request_id: uuid::Uuid::nil(),
            target: "example.test".into(),
            digest: None,
            signed_at: "2026-12-03T00:00:00Z".into(),
            nonce: nonce.into(),
            operator: operator.into(),
            signature: String::new(),
        }
    }

    #[test]
    fn a_statement_is_taken_once_and_its_copy_is_a_repeat() {
        let mut deliveries = Deliveries::default();
        let first = statement("SHA256:a", "0123456789abcdef0123456789abcdef");
        assert!(!deliveries.is_repeat(Some(&first)));
        assert!(deliveries.take(Some(&first)));
        assert!(deliveries.is_repeat(Some(&first)));
        assert!(!deliveries.take(Some(&first.clone())), "the signal's copy");
        assert_eq!(deliveries.len(), 1);
    }

    #[test]
    fn another_nonce_or_another_key_is_a_new_statement() {
        let mut deliveries = Deliveries::default();
        assert!(deliveries.take(Some(&statement("SHA256:a", "00"))));
        assert!(deliveries.take(Some(&statement("SHA256:a", "01"))));
        assert!(deliveries.take(Some(&statement("SHA256:b", "00"))));
        assert_eq!(deliveries.len(), 3);
    }

    #[test]
    fn a_released_statement_is_new_again() {
        let mut deliveries = Deliveries::default();
        let refused = statement("SHA256:a", "00");
        assert!(deliveries.take(Some(&refused)));
        deliveries.release(Some(&refused));
        assert!(!deliveries.is_repeat(Some(&refused)));
        assert!(deliveries.take(Some(&refused)), "judged again on its own");
    }

    #[test]
    fn an_unsigned_message_is_never_a_repeat_and_is_not_remembered() {
        let mut deliveries = Deliveries::default();
        assert!(deliveries.take(None));
        assert!(deliveries.take(None));
        assert!(!deliveries.is_repeat(None));
        assert!(deliveries.is_empty());
    }

    #[test]
    fn the_refusal_names_the_nonce_and_what_to_do() {
        let refusal = repeat_refusal(Some(&statement("SHA256:a", "abc")));
        assert!(refusal.contains("nonce abc"), "{refusal}");
        assert!(refusal.contains("already used"), "{refusal}");
        assert!(refusal.contains("run the command again"), "{refusal}");
    }
}
