//! A Redis Cluster's topology as a SCAN pass must see it, and the rule that makes a pass
//! complete.
//!
//! SCAN covers one node. A pass over a cluster SCANs every primary that serves slots, each from
//! cursor 0 back to 0, and counts only if the topology read before the first SCAN and the one
//! read after the last are the same settled topology — one topology epoch:
//!
//! - the slot map (`CLUSTER SLOTS`, as the client routes by it) covers all 16384 slots;
//! - each primary, asked itself (`CLUSTER NODES`, its `myself` line), is a primary, has the id
//!   and the slots the map gives it, and has no slot migrating or importing;
//! - nothing of that changed between the two reads: the same primaries at the same addresses
//!   with the same ids, slots and config epochs. A failover promotes another node and bumps a
//!   config epoch; a finished slot migration moves slots and bumps the importer's epoch; one in
//!   flight shows as an open slot on its source. Any of them means keys may have moved between
//!   nodes behind the cursors (or, after an unclean failover, come back), so the pass is redone.

use std::collections::BTreeMap;
use std::fmt;

use redis::Value;

/// Slots of a Redis Cluster: 0..=16383.
const SLOTS: u32 = 16_384;

/// Where a node answers, as the cluster announces it (and the client routes to it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NodeAddr {
    /// Host or IP.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Inclusive slot ranges, sorted.
type Ranges = Vec<(u16, u16)>;

fn ranges_text(ranges: &Ranges) -> String {
    if ranges.is_empty() {
        return "none".to_owned();
    }
    ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A primary as the slot map gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapEntry {
    /// Node id.
    pub id: String,
    /// The slots the map routes to it.
    pub ranges: Ranges,
}

/// A node as it describes itself (the `myself` line of its `CLUSTER NODES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfReport {
    /// Node id.
    pub id: String,
    /// Whether it is a primary.
    pub primary: bool,
    /// Its config epoch: bumped by every failover that promotes it and every slot it imports.
    pub config_epoch: u64,
    /// The slots it serves.
    pub ranges: Ranges,
    /// Its open slots (`[slot->-target]` migrating, `[slot-<-source]` importing).
    pub open: Vec<String>,
}

/// The primaries that serve slots, each as the map gives it and as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    primaries: BTreeMap<NodeAddr, (MapEntry, SelfReport)>,
}

impl Topology {
    /// Pairs the slot map with each primary's own report (`reports` keyed like `map`).
    pub fn new(
        map: BTreeMap<NodeAddr, MapEntry>,
        mut reports: BTreeMap<NodeAddr, SelfReport>,
    ) -> Result<Self, String> {
        let primaries = map
            .into_iter()
            .map(|(addr, entry)| match reports.remove(&addr) {
                Some(report) => Ok((addr, (entry, report))),
                None => Err(format!("no report of primary {addr}")),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { primaries })
    }

    /// The primaries to SCAN, in address order.
    pub fn primaries(&self) -> impl Iterator<Item = &NodeAddr> {
        self.primaries.keys()
    }

    /// Why a pass cannot be completed in this topology, if anything does.
    pub fn unsettled(&self) -> Option<String> {
        let mut ranges: Ranges = self
            .primaries
            .values()
            .flat_map(|(entry, _)| entry.ranges.iter().copied())
            .collect();
        ranges.sort_unstable();
        let mut next = 0u32;
        for (start, end) in &ranges {
            if u32::from(*start) != next {
                return Some(format!(
                    "slot {next} is served by no primary (or by two): the cluster is not whole"
                ));
            }
            next = u32::from(*end) + 1;
        }
        if next != SLOTS {
            return Some(format!(
                "slots {next}-{} are served by no primary: the cluster is not whole",
                SLOTS - 1
            ));
        }
        for (addr, (entry, report)) in &self.primaries {
            if report.id != entry.id {
                return Some(format!(
                    "{addr} is node {}, but the slot map names {}",
                    report.id, entry.id
                ));
            }
            if !report.primary {
                return Some(format!(
                    "{addr} ({}) is no longer a primary (failing over)",
                    report.id
                ));
            }
            if report.ranges != entry.ranges {
                return Some(format!(
                    "{addr} serves slots {} but the slot map gives it {}",
                    ranges_text(&report.ranges),
                    ranges_text(&entry.ranges)
                ));
            }
            if !report.open.is_empty() {
                return Some(format!(
                    "{addr} has slot(s) in migration: {}",
                    report.open.join(" ")
                ));
            }
        }
        None
    }

    /// What changed since `before`, if anything did.
    pub fn change_since(&self, before: &Topology) -> Option<String> {
        if self == before {
            return None;
        }
        let addresses = |t: &Topology| {
            t.primaries
                .keys()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        for (addr, (_, now)) in &self.primaries {
            let Some((_, then)) = before.primaries.get(addr) else {
                break;
            };
            if now.id != then.id {
                return Some(format!("{addr} became node {} (was {})", now.id, then.id));
            }
            if now.config_epoch != then.config_epoch {
                return Some(format!(
                    "the config epoch of {addr} went from {} to {} (a failover or a slot move)",
                    then.config_epoch, now.config_epoch
                ));
            }
            if now.ranges != then.ranges {
                return Some(format!(
                    "{addr} went from slots {} to {}",
                    ranges_text(&then.ranges),
                    ranges_text(&now.ranges)
                ));
            }
        }
        let (then, now) = (addresses(before), addresses(self));
        Some(if then == now {
            "the slot map changed".to_owned()
        } else {
            format!("the primaries went from [{then}] to [{now}]")
        })
    }
}

/// The primaries of a `CLUSTER SLOTS` reply, with the slots routed to each.
pub(crate) fn parse_slot_map(reply: &Value) -> Result<BTreeMap<NodeAddr, MapEntry>, String> {
    let Value::Array(entries) = reply else {
        return Err(format!("CLUSTER SLOTS replied {reply:?}"));
    };
    let mut map: BTreeMap<NodeAddr, MapEntry> = BTreeMap::new();
    for entry in entries {
        let (start, end, node) = match entry {
            Value::Array(items) if items.len() >= 3 => (&items[0], &items[1], &items[2]),
            other => return Err(format!("CLUSTER SLOTS entry {other:?}")),
        };
        let slot = |value: &Value| -> Result<u16, String> {
            redis::from_redis_value_ref::<u16>(value)
                .ok()
                .filter(|slot| u32::from(*slot) < SLOTS)
                .ok_or_else(|| format!("CLUSTER SLOTS slot {value:?}"))
        };
        let (start, end) = (slot(start)?, slot(end)?);
        let Value::Array(node) = node else {
            return Err(format!("CLUSTER SLOTS node {node:?}"));
        };
        let text = |index: usize| -> Option<String> {
            node.get(index)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
        };
        let host = text(0).unwrap_or_default();
        if host.is_empty() || host == "?" {
            return Err(format!(
                "the primary of slots {start}-{end} announces no usable endpoint (host {host:?}): \
                 set cluster-announce-ip or cluster-announce-hostname on the nodes"
            ));
        }
        let port = node
            .get(1)
            .and_then(|v| redis::from_redis_value_ref::<u16>(v).ok())
            .ok_or_else(|| format!("CLUSTER SLOTS port of slots {start}-{end}"))?;
        let id = text(2).ok_or_else(|| {
            format!("CLUSTER SLOTS gives no node id for slots {start}-{end} (Redis 4 or later)")
        })?;
        let addr = NodeAddr { host, port };
        let known = map.entry(addr.clone()).or_insert_with(|| MapEntry {
            id: id.clone(),
            ranges: Vec::new(),
        });
        if known.id != id {
            return Err(format!("{addr} is named {} and {id}", known.id));
        }
        known.ranges.push((start, end));
    }
    for entry in map.values_mut() {
        entry.ranges = merged(std::mem::take(&mut entry.ranges));
    }
    Ok(map)
}

/// The `myself` line of a `CLUSTER NODES` reply.
pub(crate) fn parse_self_report(nodes: &str) -> Result<SelfReport, String> {
    let line = nodes
        .lines()
        .find(|line| {
            line.split_whitespace()
                .nth(2)
                .is_some_and(|flags| flags.split(',').any(|flag| flag == "myself"))
        })
        .ok_or_else(|| "CLUSTER NODES has no myself line".to_owned())?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(format!("CLUSTER NODES line {line:?}"));
    }
    let config_epoch = fields[6]
        .parse::<u64>()
        .map_err(|_| format!("CLUSTER NODES config epoch in {line:?}"))?;
    let mut ranges = Vec::new();
    let mut open = Vec::new();
    for token in &fields[8..] {
        if token.starts_with('[') {
            open.push((*token).to_owned());
            continue;
        }
        let parse = |s: &str| {
            s.parse::<u16>()
                .ok()
                .filter(|slot| u32::from(*slot) < SLOTS)
                .ok_or_else(|| format!("CLUSTER NODES slot {token:?}"))
        };
        let range = match token.split_once('-') {
            Some((a, b)) => (parse(a)?, parse(b)?),
            None => (parse(token)?, parse(token)?),
        };
        ranges.push(range);
    }
    Ok(SelfReport {
        id: fields[0].to_owned(),
        primary: fields[2].split(',').any(|flag| flag == "master"),
        config_epoch,
        ranges: merged(ranges),
        open,
    })
}

/// `ranges` sorted with adjacent ranges joined.
fn merged(mut ranges: Ranges) -> Ranges {
    ranges.sort_unstable();
    let mut out: Ranges = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if u32::from(last.1) + 1 == u32::from(start) => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests;
