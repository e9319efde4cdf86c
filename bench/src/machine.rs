//! Facts about the machine and processes, read from /proc: what the numbers were measured on.

use anyhow::{Context, Result};

/// Peak resident set (`VmHWM`, KiB) of process `pid`, read while it is still alive.
pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    status_field_kib(&status, "VmHWM")
        .with_context(|| format!("/proc/{pid}/status has no VmHWM line"))
}

/// CPU seconds (user + system) process `pid` has used so far, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    stat_cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / CLOCK_TICKS_PER_SECOND)
        .with_context(|| format!("/proc/{pid}/stat has no utime/stime"))
}

/// The whole machine's CPU time, from the `cpu` line of `/proc/stat` (every core summed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Seconds some core spent on work (everything but idle and I/O wait).
    pub busy_seconds: f64,
    /// Seconds of every core, busy or not.
    pub total_seconds: f64,
}

impl CpuTimes {
    /// The counters now.
    pub fn now() -> Result<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").context("read /proc/stat")?;
        machine_cpu_times(&stat).context("/proc/stat has no cpu line")
    }

    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            busy_seconds: self.busy_seconds - earlier.busy_seconds,
            total_seconds: self.total_seconds - earlier.total_seconds,
        }
    }

    /// The busy share of every core, 0 to 1.
    pub fn busy_share(&self) -> f64 {
        self.busy_seconds / self.total_seconds.max(f64::MIN_POSITIVE)
    }
}

/// The machine's CPU counters sampled over a run, each with the wall-clock time it was read.
#[derive(Debug, Clone, Default)]
pub struct CpuTrace {
    samples: Vec<(chrono::DateTime<chrono::Utc>, CpuTimes)>,
}

impl CpuTrace {
    /// Adds a sample (in time order).
    pub fn push(&mut self, at: chrono::DateTime<chrono::Utc>, times: CpuTimes) {
        self.samples.push((at, times));
    }

    /// What the machine used over at least `from`..`to`: from the last sample at or before
    /// `from` to the first at or after `to`; `None` unless samples enclose the window.
    pub fn between(
        &self,
        from: chrono::DateTime<chrono::Utc>,
        to: chrono::DateTime<chrono::Utc>,
    ) -> Option<CpuTimes> {
        let (_, start) = self.samples.iter().rev().find(|(at, _)| *at <= from)?;
        let (_, end) = self.samples.iter().find(|(at, _)| *at >= to)?;
        Some(end.since(start))
    }
}

/// Busy and total seconds of the aggregate `cpu` line (user nice system idle iowait irq softirq
/// steal …; idle and iowait are the not-busy ones).
fn machine_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some(CpuTimes {
        busy_seconds: (total - idle) as f64 / CLOCK_TICKS_PER_SECOND,
        total_seconds: total as f64 / CLOCK_TICKS_PER_SECOND,
    })
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux the project runs on.
pub(crate) const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// Every process's pid, command name and CPU ticks used so far (user + system); a process that
/// ends while /proc is read is left out.
pub fn process_cpu_ticks() -> Result<Vec<(u32, String, u64)>> {
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").context("read /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let (Some(command), Some(ticks)) = (stat_command(&stat), stat_cpu_ticks(&stat)) {
            processes.push((pid, command.to_owned(), ticks));
        }
    }
    Ok(processes)
}

/// The command name (field 2, between the first `(` and the last `)`) of a /proc stat line.
fn stat_command(stat: &str) -> Option<&str> {
    stat.get(stat.find('(')? + 1..stat.rfind(')')?)
}

/// utime + stime (fields 14 and 15) of a /proc stat line; the command name (field 2) may hold
/// spaces, so fields are counted after its closing parenthesis.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The KiB value of a `Name:   1234 kB` line of a /proc status file.
fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// CPU model, logical CPUs, memory, kernel: one line for the report.
pub fn describe() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map(str::trim)
        .unwrap_or("unknown CPU")
        .to_owned();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = status_field_kib(&meminfo, "MemTotal").unwrap_or(0) as f64 / 1_048_576.0;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!("{cpus} logical CPUs ({model}), {mem_gib:.1} GiB RAM, Linux {kernel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_measures_the_smallest_sampled_span_enclosing_the_window() {
        use chrono::TimeZone;
        let at = |s: i64| {
            chrono::Utc
                .timestamp_opt(1_000 + s, 0)
                .single()
                .unwrap_or_default()
        };
        let times = |busy: f64, total: f64| CpuTimes {
            busy_seconds: busy,
            total_seconds: total,
        };
        let mut trace = CpuTrace::default();
        trace.push(at(0), times(0.0, 0.0));
        trace.push(at(10), times(5.0, 20.0));
        trace.push(at(20), times(25.0, 40.0));
        trace.push(at(30), times(26.0, 60.0));
        let window = trace.between(at(12), at(20)).expect("enclosed");
        assert_eq!(window.busy_seconds, 20.0);
        assert_eq!(window.busy_share(), 1.0);
        assert!(
            trace.between(at(-1), at(20)).is_none(),
            "starts before the trace"
        );
        assert!(
            trace.between(at(5), at(31)).is_none(),
            "ends after the trace"
        );
    }

    #[test]
    fn the_machine_is_busy_for_everything_but_idle_and_io_wait() {
        let stat = "cpu  100 5 45 800 50 0 0 0 0 0\ncpu0 50 2 20 400 25 0 0 0 0 0\n";
        let times = machine_cpu_times(stat).expect("a cpu line");
        assert_eq!(times.total_seconds, 10.0);
        assert_eq!(times.busy_seconds, 1.5);
        let later = CpuTimes {
            busy_seconds: 3.5,
            total_seconds: 14.0,
        };
        assert_eq!(later.since(&times).busy_share(), 0.5);
    }

    #[test]
    fn the_command_name_may_hold_spaces_and_parentheses() {
        let stat = "42 (tokio (rt) w) S 1 2 3";
        assert_eq!(stat_command(stat), Some("tokio (rt) w"));
    }

    #[test]
    fn cpu_ticks_are_user_plus_system_after_a_name_with_spaces() {
        let stat = "42 (buzz worker) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(stat_cpu_ticks(stat), Some(325));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn the_peak_resident_set_is_read_from_the_vmhwm_line() {
        let status = "Name:\tbuzz-deletion-w\nVmPeak:\t  900000 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   49000 kB\n";
        assert_eq!(status_field_kib(status, "VmHWM"), Some(51_234));
        assert_eq!(status_field_kib(status, "VmRSS"), Some(49_000));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
    }

    #[test]
    fn our_own_peak_resident_set_is_readable() {
        assert!(peak_rss_kib(std::process::id()).unwrap_or(0) > 0);
    }
}
