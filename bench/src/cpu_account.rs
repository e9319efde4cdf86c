//! Where a measured run's CPU went: the machine's busy and idle core-seconds over the run, split
//! by the processes that share its cores (the client doing the deletion, PostgreSQL, the
//! Temporal server, the S3 double, everything else), read from /proc before and after.
//!
//! On a machine whose cores every process shares, a variant that is slower than another either
//! burned more CPU somewhere or left cores idle while it waited; this says which, and where.

use std::collections::HashMap;

use anyhow::Result;

use crate::machine::{CpuTimes, process_cpu_ticks};

/// Command name (`/proc/<pid>/stat` field 2) of PostgreSQL's server and backend processes.
const POSTGRES_COMMAND: &str = "postgres";
/// Command name of the Temporal dev server (`temporal server start-dev`).
const TEMPORAL_COMMAND: &str = "temporal";
/// Command name of the S3 double (`buzz-s3-double`, cut to the kernel's 15 bytes).
const DOUBLE_COMMAND: &str = "buzz-s3-double";

/// Who a process's CPU is booked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    /// The process doing the deletion: the floor's own benchmark process, or the worker.
    Client,
    Postgres,
    Temporal,
    Double,
}

/// The counters at one moment: the machine's, and each role's processes' CPU ticks by pid.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    machine: CpuTimes,
    ticks: HashMap<(Role, u32), u64>,
}

/// Core-seconds spent over a window, by role; `other_busy` is the machine's busy time no named
/// process accounts for (processes that ended inside the window, such as the CLI that
/// approves; the kernel's own threads; Redis).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuAccount {
    /// The process doing the deletion (the floor's benchmark process, or the worker).
    pub client: f64,
    /// Every PostgreSQL process.
    pub postgres: f64,
    /// The Temporal dev server.
    pub temporal: f64,
    /// The S3 double.
    pub double: f64,
    /// Busy time of everything else.
    pub other_busy: f64,
    /// Core-seconds no process used (idle and I/O wait of every core).
    pub idle: f64,
}

impl CpuAccount {
    /// Core-seconds some process used.
    pub fn busy(&self) -> f64 {
        self.client + self.postgres + self.temporal + self.double + self.other_busy
    }

    /// The mean of several accounts (zero for none).
    pub fn mean<'a>(accounts: impl Iterator<Item = &'a CpuAccount>) -> Option<CpuAccount> {
        let mut sum = CpuAccount::default();
        let mut n = 0.0;
        for a in accounts {
            sum.client += a.client;
            sum.postgres += a.postgres;
            sum.temporal += a.temporal;
            sum.double += a.double;
            sum.other_busy += a.other_busy;
            sum.idle += a.idle;
            n += 1.0;
        }
        (n > 0.0).then(|| CpuAccount {
            client: sum.client / n,
            postgres: sum.postgres / n,
            temporal: sum.temporal / n,
            double: sum.double / n,
            other_busy: sum.other_busy / n,
            idle: sum.idle / n,
        })
    }
}

impl CpuSnapshot {
    /// The counters now, `client` being the process that does the deletion.
    pub fn take(client: u32) -> Result<CpuSnapshot> {
        let machine = CpuTimes::now()?;
        let mut ticks = HashMap::new();
        for (pid, command, used) in process_cpu_ticks()? {
            let role = if pid == client {
                Role::Client
            } else {
                match command.as_str() {
                    POSTGRES_COMMAND => Role::Postgres,
                    TEMPORAL_COMMAND => Role::Temporal,
                    DOUBLE_COMMAND => Role::Double,
                    _ => continue,
                }
            };
            ticks.insert((role, pid), used);
        }
        Ok(CpuSnapshot { machine, ticks })
    }

    /// What was spent from `earlier` to `self`. A process's counters start at its birth and
    /// vanish at its end: one alive at both moments is booked the difference, one born in
    /// between (a PostgreSQL backend for a connection opened on the way) everything it used;
    /// one that ended in between cannot be booked, and its time falls to `other_busy`, the rest
    /// of the machine's busy time.
    pub fn since(&self, earlier: &CpuSnapshot) -> CpuAccount {
        let machine = self.machine.since(&earlier.machine);
        let mut account = CpuAccount::default();
        for (key, now) in &self.ticks {
            let before = earlier.ticks.get(key).copied().unwrap_or(0);
            let seconds =
                now.saturating_sub(before) as f64 / crate::machine::CLOCK_TICKS_PER_SECOND;
            match key.0 {
                Role::Client => account.client += seconds,
                Role::Postgres => account.postgres += seconds,
                Role::Temporal => account.temporal += seconds,
                Role::Double => account.double += seconds,
            }
        }
        let named = account.client + account.postgres + account.temporal + account.double;
        account.other_busy = (machine.busy_seconds - named).max(0.0);
        account.idle = (machine.total_seconds - machine.busy_seconds).max(0.0);
        account
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(busy: f64, total: f64, ticks: &[(Role, u32, u64)]) -> CpuSnapshot {
        CpuSnapshot {
            machine: CpuTimes {
                busy_seconds: busy,
                total_seconds: total,
            },
            ticks: ticks
                .iter()
                .map(|&(role, pid, used)| ((role, pid), used))
                .collect(),
        }
    }

    #[test]
    fn each_role_is_booked_its_processes_and_the_rest_of_the_busy_time_is_other() {
        let before = snapshot(
            10.0,
            20.0,
            &[
                (Role::Client, 1, 100),
                (Role::Postgres, 2, 50),
                (Role::Postgres, 3, 10),
                (Role::Temporal, 4, 0),
            ],
        );
        let after = snapshot(
            14.0,
            26.0,
            &[
                (Role::Client, 1, 250),
                (Role::Postgres, 2, 80),
                (Role::Postgres, 3, 20),
                (Role::Temporal, 4, 30),
                // Born inside the window: every tick it used is the window's.
                (Role::Postgres, 9, 50),
            ],
        );
        let account = after.since(&before);
        assert!((account.client - 1.5).abs() < 1e-9);
        assert!((account.postgres - 0.9).abs() < 1e-9);
        assert!((account.temporal - 0.3).abs() < 1e-9);
        assert_eq!(account.double, 0.0);
        assert!((account.other_busy - 1.3).abs() < 1e-9);
        assert!((account.idle - 2.0).abs() < 1e-9);
        assert!((account.busy() - 4.0).abs() < 1e-9);
    }

    #[test]
    fn the_mean_of_accounts_is_taken_role_by_role() {
        let a = CpuAccount {
            client: 1.0,
            idle: 2.0,
            ..CpuAccount::default()
        };
        let b = CpuAccount {
            client: 3.0,
            postgres: 1.0,
            ..CpuAccount::default()
        };
        let mean = CpuAccount::mean([a, b].iter()).unwrap_or_default();
        assert_eq!(mean.client, 2.0);
        assert_eq!(mean.postgres, 0.5);
        assert_eq!(mean.idle, 1.0);
        assert_eq!(CpuAccount::mean([].iter()), None);
    }

    #[test]
    fn our_own_process_is_the_client_of_a_snapshot() {
        let snapshot = CpuSnapshot::take(std::process::id()).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            snapshot
                .ticks
                .contains_key(&(Role::Client, std::process::id()))
        );
    }
}
