//! Facts about the machine and processes, read from /proc: what the numbers were measured on.

use anyhow::{Context, Result};

/// Peak resident set (`VmHWM`, KiB) of process `pid`, read while it is still alive.
pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    status_field_kib(&status, "VmHWM")
        .with_context(|| format!("/proc/{pid}/status has no VmHWM line"))
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
