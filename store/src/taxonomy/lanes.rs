//! Listing lanes: each tenant prefix cut into key ranges that are listed side by side.
//!
//! S3 lists one prefix page after page, each page waiting for the previous one's last key, so a
//! prefix of millions of versions takes as long as its pages in a row. Every key the relay
//! writes under a tenant prefix is `{prefix}{h}…` with `h` a content hash (uniform lowercase hex),
//! so cutting each prefix at the hash's first hex digit gives ranges of about equal size that can
//! be listed at once.
//!
//! The cut is a pure function of the community and covers every key under the prefix, whatever
//! its shape: the first lane has no lower bound, the last no upper one, and each bound belongs to
//! exactly one lane (a lane holds the keys *after* its `after` and *up to and including* its
//! `through`). A key that is not a writer shape still falls in some lane and is refused there, as
//! it was when a prefix was listed whole.

use uuid::Uuid;

use super::tenant_prefixes;

/// Lanes each tenant prefix is listed in.
pub const LANES_PER_PREFIX: usize = 4;

/// The hex digits the lanes of a prefix are cut at: a lane ends at (and includes) `{prefix}{d}`
/// and the next one starts after it, so hashes `0…3`, `4…7`, `8…b` and `c…f` each get a lane.
const CUTS: [&str; LANES_PER_PREFIX - 1] = ["4", "8", "c"];

/// One key range of one tenant prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListingLane {
    /// The tenant prefix the range lies under.
    pub prefix: String,
    /// Keys after this one (exclusive); from the prefix's first key when `None`.
    pub after: Option<String>,
    /// Keys up to and including this one; to the prefix's last key when `None`.
    pub through: Option<String>,
}

impl ListingLane {
    /// The lane that is the whole of `prefix` (how releases before lanes listed a prefix).
    pub fn whole(prefix: String) -> Self {
        Self {
            prefix,
            after: None,
            through: None,
        }
    }

    /// Whether `key` lies in this lane's range (the prefix itself is not checked).
    pub fn holds(&self, key: &str) -> bool {
        self.after.as_deref().is_none_or(|after| key > after)
            && self.through.as_deref().is_none_or(|through| key <= through)
    }

    /// Whether a listing that has reached `key` has passed the end of this lane.
    pub fn is_past(&self, key: &str) -> bool {
        self.through.as_deref().is_some_and(|through| key > through)
    }

    /// A short label for logs and errors: `media/{c}/(4,8]`.
    pub fn label(&self) -> String {
        let bound = |key: &Option<String>| {
            key.as_deref()
                .and_then(|key| key.strip_prefix(self.prefix.as_str()))
                .unwrap_or("")
                .to_owned()
        };
        format!(
            "{}({},{}]",
            self.prefix,
            bound(&self.after),
            bound(&self.through)
        )
    }
}

/// The lanes of `community`'s three tenant prefixes: [`LANES_PER_PREFIX`] per prefix, the
/// prefixes in [`tenant_prefixes`] order and each prefix's lanes in key order.
pub fn listing_lanes(community: Uuid) -> Vec<ListingLane> {
    tenant_prefixes(community)
        .into_iter()
        .flat_map(|prefix| {
            let cuts: Vec<String> = CUTS.iter().map(|cut| format!("{prefix}{cut}")).collect();
            (0..LANES_PER_PREFIX).map(move |index| ListingLane {
                prefix: prefix.clone(),
                after: index.checked_sub(1).map(|before| cuts[before].clone()),
                through: cuts.get(index).cloned(),
            })
        })
        .collect()
}

/// One whole-prefix lane ([`ListingLane::whole`]) per tenant prefix of `community`, in
/// [`tenant_prefixes`] order.
pub fn whole_prefix_lanes(community: Uuid) -> Vec<ListingLane> {
    tenant_prefixes(community)
        .into_iter()
        .map(ListingLane::whole)
        .collect()
}

/// Whether `lanes` cut each of `community`'s three tenant prefixes into ranges that cover all of
/// its keys, each key exactly once: per prefix, in order, the first lane from the prefix's start,
/// each next lane starting where the one before ends, the last to the prefix's end; and no lane
/// of any other prefix. A listing of `lanes` then lists every version of the tenant once.
pub fn lanes_cover_prefixes<'a>(
    community: Uuid,
    lanes: impl IntoIterator<Item = &'a ListingLane>,
) -> bool {
    let mut lanes: Vec<&ListingLane> = lanes.into_iter().collect();
    let prefixes = tenant_prefixes(community);
    if lanes.iter().any(|lane| !prefixes.contains(&lane.prefix)) {
        return false;
    }
    lanes.sort();
    prefixes.iter().all(|prefix| {
        let own: Vec<&&ListingLane> = lanes.iter().filter(|l| &l.prefix == prefix).collect();
        let (Some(first), Some(last)) = (own.first(), own.last()) else {
            return false;
        };
        first.after.is_none()
            && last.through.is_none()
            && own
                .windows(2)
                .all(|pair| pair[0].through.is_some() && pair[0].through == pair[1].after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::PrefixRoot;

    fn community() -> Uuid {
        Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)
    }

    #[test]
    fn every_key_under_a_prefix_falls_in_exactly_one_of_its_lanes() {
        let lanes = listing_lanes(community());
        assert_eq!(lanes.len(), 3 * LANES_PER_PREFIX);
        let media = PrefixRoot::Media.prefix(community());
        let mut keys: Vec<String> = "0123456789abcdef"
            .chars()
            .map(|digit| format!("{media}{digit}{}", "0".repeat(63)))
            .collect();
        // Shapes no writer makes still land in one lane (and are refused there): the cut keys
        // themselves, an empty name, upper case, a name sorting after every hex digit.
        keys.extend(
            ["", "4", "8", "c", "3", "A", "~", "ff/x", "\u{10FFFF}"]
                .iter()
                .map(|name| format!("{media}{name}")),
        );
        for key in &keys {
            let holding: Vec<String> = lanes
                .iter()
                .filter(|lane| key.starts_with(lane.prefix.as_str()) && lane.holds(key))
                .map(ListingLane::label)
                .collect();
            assert_eq!(holding.len(), 1, "{key} is held by {holding:?}");
        }
    }

    #[test]
    fn the_hash_digits_are_shared_evenly_and_a_lane_ends_where_the_next_begins() {
        let media = PrefixRoot::Media.prefix(community());
        let lanes: Vec<ListingLane> = listing_lanes(community())
            .into_iter()
            .filter(|lane| lane.prefix == media)
            .collect();
        let per_lane: Vec<usize> = lanes
            .iter()
            .map(|lane| {
                "0123456789abcdef"
                    .chars()
                    .filter(|digit| lane.holds(&format!("{media}{digit}{}", "0".repeat(63))))
                    .count()
            })
            .collect();
        assert_eq!(per_lane, vec![4; LANES_PER_PREFIX]);
        assert!(lanes[0].after.is_none());
        assert!(lanes[LANES_PER_PREFIX - 1].through.is_none());
        for pair in lanes.windows(2) {
            assert_eq!(pair[0].through, pair[1].after);
        }
        assert!(lanes[1].is_past(&format!("{media}8{}", "0".repeat(63))));
        assert!(!lanes[1].is_past(&format!("{media}8")));
        assert_eq!(lanes[1].label(), format!("{media}(4,8]"));
    }

    #[test]
    fn only_lanes_that_cut_every_prefix_without_gap_or_overlap_cover_them() {
        let lanes = listing_lanes(community());
        assert!(lanes_cover_prefixes(community(), &lanes));
        let whole = whole_prefix_lanes(community());
        assert!(lanes_cover_prefixes(community(), &whole));
        // A lane missing leaves a gap; a prefix without lanes is not listed; a lane of another
        // community is not this one's.
        let gap: Vec<ListingLane> = lanes.iter().skip(1).cloned().collect();
        assert!(!lanes_cover_prefixes(community(), &gap));
        assert!(!lanes_cover_prefixes(community(), &whole[..2]));
        let mut overlapping = lanes.clone();
        overlapping[1].after = None;
        assert!(!lanes_cover_prefixes(community(), &overlapping));
        let mut foreign = lanes.clone();
        foreign.extend(listing_lanes(Uuid::from_u128(7)));
        assert!(!lanes_cover_prefixes(community(), &foreign));
    }
}
