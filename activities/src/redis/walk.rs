//! What one complete SCAN pass does with the pages it reads, independent of whether the pass
//! covers one server or every primary of a cluster: the backends read pages and unlink what a
//! visitor asks; the visitors count, collect, judge or purge.

use super::error::CacheError;

/// One SCAN page: the next cursor (0 when the pass is over) and the keys.
pub(super) type Page = (u64, Vec<String>);

/// The UNLINK of a page's doomed keys (when there are any) and the SCAN of the next page (when
/// the pass goes on), sent together so a purge costs one round trip per page, not two. SCAN's
/// guarantee does not depend on the order: keys present for the whole pass are returned
/// whatever else is deleted meanwhile.
pub(super) async fn unlink_beside_scan(
    unlink: Option<impl Future<Output = Result<u64, CacheError>>>,
    scan: Option<impl Future<Output = Result<Page, CacheError>>>,
) -> Result<(Option<u64>, Option<Page>), CacheError> {
    let unlinking = async {
        match unlink {
            Some(unlink) => unlink.await.map(Some),
            None => Ok(None),
        }
    };
    let scanning = async {
        match scan {
            Some(scan) => scan.await.map(Some),
            None => Ok(None),
        }
    };
    tokio::try_join!(unlinking, scanning)
}

/// What to do after a page.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Read the next page.
    Next,
    /// Unlink these keys (of the page just read), then read the next page.
    Unlink(Vec<String>),
    /// The pass has seen enough: end it now.
    Stop,
}

/// The consumer of one complete SCAN pass.
pub(super) trait Visitor {
    /// The pass starts over (a cluster's topology changed under it): forget what the abandoned
    /// attempt counted. Keys it unlinked stay unlinked.
    fn restart(&mut self) {}

    /// One SCAN page (possibly empty; a key may appear on more than one page).
    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError>;

    /// `removed` keys of the last [`Step::Unlink`] existed and were unlinked.
    fn unlinked(&mut self, _removed: u64) {}
}

/// Unlinks every key; reports the running total after each page that removed keys.
pub(super) struct Purge<F, D> {
    /// Keys the purge may delete; the first other key stops it (see [`CacheError::UndeclaredKey`]).
    pub declared: D,
    /// The SCAN pattern, named in an undeclared-key error.
    pub pattern: String,
    /// Receives the running total.
    pub on_progress: F,
    /// Keys unlinked so far, across restarts (each UNLINK counts only keys it removed).
    pub total: u64,
}

impl<F: FnMut(u64), D: Fn(&str) -> bool> Visitor for Purge<F, D> {
    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError> {
        if let Some(key) = keys.iter().find(|key| !(self.declared)(key)) {
            return Err(CacheError::UndeclaredKey {
                key: key.clone(),
                pattern: self.pattern.clone(),
            });
        }
        Ok(if keys.is_empty() {
            Step::Next
        } else {
            Step::Unlink(keys)
        })
    }

    fn unlinked(&mut self, removed: u64) {
        self.total = self.total.saturating_add(removed);
        (self.on_progress)(self.total);
    }
}

/// Counts the keys of one complete pass.
#[derive(Default)]
pub(super) struct Count(pub u64);

impl Visitor for Count {
    fn restart(&mut self) {
        self.0 = 0;
    }

    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError> {
        self.0 = self.0.saturating_add(keys.len() as u64);
        Ok(Step::Next)
    }
}

/// Hands every key to a callback (a key may be handed more than once).
pub(super) struct EachKey<F>(pub F);

impl<F: FnMut(&str)> Visitor for EachKey<F> {
    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError> {
        keys.iter().for_each(|key| (self.0)(key));
        Ok(Step::Next)
    }
}

/// Collects every key of one complete pass.
#[derive(Default)]
pub(super) struct Collect(pub Vec<String>);

impl Visitor for Collect {
    fn restart(&mut self) {
        self.0.clear();
    }

    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError> {
        self.0.extend(keys);
        Ok(Step::Next)
    }
}

/// Stops at the first key: a pass that ends without one proves the pattern matched nothing.
#[derive(Default)]
pub(super) struct FirstKey(pub Option<String>);

impl Visitor for FirstKey {
    fn restart(&mut self) {
        self.0 = None;
    }

    fn page(&mut self, keys: Vec<String>) -> Result<Step, CacheError> {
        match keys.into_iter().next() {
            Some(key) => {
                self.0 = Some(key);
                Ok(Step::Stop)
            }
            None => Ok(Step::Next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|k| (*k).to_owned()).collect()
    }

    #[test]
    fn a_purge_unlinks_non_empty_pages_and_reports_a_running_total_across_restarts() {
        let mut reports = Vec::new();
        let mut purge = Purge {
            declared: |_: &str| true,
            pattern: "buzz:c:*".into(),
            on_progress: |total| reports.push(total),
            total: 0,
        };
        assert_eq!(purge.page(vec![]).unwrap(), Step::Next);
        assert_eq!(
            purge.page(keys(&["a", "b"])).unwrap(),
            Step::Unlink(keys(&["a", "b"]))
        );
        purge.unlinked(2);
        purge.restart();
        purge.unlinked(1);
        assert_eq!(purge.total, 3);
        drop(purge);
        assert_eq!(reports, [2, 3]);
    }

    #[test]
    fn a_purge_of_declared_shapes_stops_at_an_undeclared_key_before_unlinking_its_page() {
        let mut purge = Purge {
            declared: |key: &str| key.starts_with("ok:"),
            pattern: "p*".into(),
            on_progress: |_| {},
            total: 0,
        };
        let error = purge.page(keys(&["ok:1", "stray"])).unwrap_err();
        assert!(
            matches!(&error, CacheError::UndeclaredKey { key, pattern } if key == "stray" && pattern == "p*"),
            "{error:?}"
        );
    }

    #[test]
    fn counts_and_collections_restart_from_nothing_and_a_first_key_stops_the_pass() {
        let mut count = Count::default();
        count.page(keys(&["a", "b"])).unwrap();
        count.restart();
        count.page(keys(&["c"])).unwrap();
        assert_eq!(count.0, 1);

        let mut collect = Collect::default();
        collect.page(keys(&["a"])).unwrap();
        collect.restart();
        collect.page(keys(&["b"])).unwrap();
        assert_eq!(collect.0, keys(&["b"]));

        let mut first = FirstKey::default();
        assert_eq!(first.page(vec![]).unwrap(), Step::Next);
        assert_eq!(first.page(keys(&["x", "y"])).unwrap(), Step::Stop);
        assert_eq!(first.0.as_deref(), Some("x"));
        first.restart();
        assert_eq!(first.0, None);
    }
}
