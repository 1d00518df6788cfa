//! Effective CPUs: how many CPUs the server may really use.
//!
//! The affinity mask (`Cpus_allowed_list` in `/proc/self/status`) gives the
//! CPUs the process may run on. A cgroup CPU quota can cap that further: v2
//! `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), v1 `cpu.cfs_quota_us` and
//! `cpu.cfs_period_us` (quota -1 = unlimited). Quotas may be fractional
//! (150000/100000 = 1.5 CPUs), and every ancestor cgroup's quota applies, so
//! the tightest one wins. This module only parses text; the caller reads the
//! files.

/// The CPU numbers in a list such as `0-3,8,10-11`. `None` if malformed.
pub fn parse_cpu_ids(s: &str) -> Option<Vec<usize>> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut ids = vec![];
    for part in s.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a {
                    return None;
                }
                ids.extend(a..=b);
            }
            None => ids.push(part.parse::<usize>().ok()?),
        }
    }
    Some(ids)
}

/// The affinity CPUs from the text of `/proc/self/status`.
pub fn affinity_ids_from_status(status: &str) -> Option<Vec<usize>> {
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(parse_cpu_ids)
}

/// The CPUs of `ids` that are online, from the text of
/// `/sys/devices/system/cpu/online` (`None`: unknown, all of them). The
/// affinity mask of `/proc/self/status` is the task's own, which may name
/// CPUs that are possible but offline (hot-plug slots, `nosmt`), which
/// `sched_getaffinity` leaves out: counted, they would inflate the limit,
/// and having no `/proc/stat` line they would leave the CPUs' idle time
/// unmeasured. An intersection that is empty (a file that cannot be
/// right) keeps `ids`.
pub fn online_only(ids: Vec<usize>, online: Option<&str>) -> Vec<usize> {
    let Some(online) = online.and_then(parse_cpu_ids) else { return ids };
    let kept: Vec<usize> = ids.iter().copied().filter(|i| online.contains(i)).collect();
    if kept.is_empty() {
        ids
    } else {
        kept
    }
}

/// CPUs granted by a cgroup v2 `cpu.max` file; `None` when unlimited or malformed.
pub fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let quota = it.next()?;
    let period: f64 = it.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then(|| quota / period)
}

/// CPUs granted by cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
pub fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: i64 = period.trim().parse().ok()?;
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// Where this process sits in the cgroup hierarchies, from `/proc/self/cgroup`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CgroupPaths {
    /// Path in the unified (v2) hierarchy (`0::/path`).
    pub v2: Option<String>,
    /// Path in the v1 hierarchy that has the `cpu` controller.
    pub v1_cpu: Option<String>,
}

pub fn parse_proc_cgroup(s: &str) -> CgroupPaths {
    let mut out = CgroupPaths::default();
    for line in s.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            out.v2 = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == "cpu") {
            out.v1_cpu = Some(path.to_string());
        }
    }
    out
}

/// `path` and each of its ancestors, deepest first: `/a/b`, `/a`, `/`.
pub fn ancestors(path: &str) -> Vec<String> {
    let mut out = vec![];
    let mut p = path.trim_end_matches('/').to_string();
    while !p.is_empty() {
        out.push(p.clone());
        match p.rfind('/') {
            Some(i) => p.truncate(i),
            None => break,
        }
    }
    out.push("/".to_string());
    out
}

/// Combine the affinity count with every quota found: the smallest wins.
pub fn effective_cpus(affinity: usize, quotas: &[f64]) -> f64 {
    let mut cpus = affinity.max(1) as f64;
    for &q in quotas {
        if q > 0.0 && q < cpus {
            cpus = q;
        }
    }
    cpus
}

/// `(busy, idle, iowait)` ticks from the counters of one `/proc/stat` CPU
/// line (the fields after its name); idle includes iowait.
fn busy_idle(fields: std::str::SplitWhitespace) -> Option<(u64, u64, u64)> {
    let v: Vec<u64> = fields.map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest is within user).
    let iowait = v.get(4).copied().unwrap_or(0);
    let busy = v[0] + v[1] + v[2] + v.iter().skip(5).take(3).sum::<u64>();
    Some((busy, v[3] + iowait, iowait))
}

/// CPU time counters of `/proc/stat` in ticks, `(busy, idle, iowait)` with
/// idle including iowait, summed over the CPUs in `ids` (the `cpuN` lines),
/// so that a server pinned to some CPUs measures those alone. `None` if a
/// CPU of `ids` has no line, or a line is malformed.
pub fn parse_proc_stat_cpus(s: &str, ids: &[usize]) -> Option<(u64, u64, u64)> {
    let (mut busy, mut idle, mut iowait, mut found) = (0, 0, 0, 0);
    for line in s.lines() {
        let mut it = line.split_whitespace();
        let Some(n) = it.next().and_then(|name| name.strip_prefix("cpu")).and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        if ids.contains(&n) {
            let (b, i, w) = busy_idle(it)?;
            busy += b;
            idle += i;
            iowait += w;
            found += 1;
        }
    }
    (found == ids.len() && found > 0).then_some((busy, idle, iowait))
}

/// CPU time used by a cgroup, in microseconds: `usage_usec` of a v2
/// `cpu.stat` file.
pub fn parse_cgroup_usage_us(cpu_stat: &str) -> Option<u64> {
    cpu_stat.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

/// CPU time used by a cgroup, in microseconds: a v1 `cpuacct.usage` file
/// (nanoseconds).
pub fn parse_cpuacct_usage_us(usage: &str) -> Option<u64> {
    usage.trim().parse::<u64>().ok().map(|ns| ns / 1000)
}

/// Idle fraction of a CPU quota of `cpus` over `wall_us`, of which the
/// cgroup used `used_us`; `None` if no time passed.
pub fn quota_idle_fraction(used_us: u64, wall_us: u64, cpus: f64) -> Option<f64> {
    (wall_us > 0 && cpus > 0.0).then(|| (1.0 - used_us as f64 / (wall_us as f64 * cpus)).clamp(0.0, 1.0))
}

/// Idle fraction between two `/proc/stat` readings, and the share of it
/// that was iowait (both of all the time); `None` if no time passed.
pub fn idle_fraction(before: (u64, u64, u64), after: (u64, u64, u64)) -> Option<(f64, f64)> {
    let busy = after.0.saturating_sub(before.0);
    let idle = after.1.saturating_sub(before.1);
    let iowait = after.2.saturating_sub(before.2).min(idle);
    let total = busy + idle;
    (total > 0).then(|| (idle as f64 / total as f64, iowait as f64 / total as f64))
}

/// The automatic limit: `ceil(effective_cpus × per_cpu)`, at least 1.
pub fn auto_limit(effective_cpus: f64, per_cpu: f64) -> u32 {
    let v = (effective_cpus * per_cpu).ceil();
    if v.is_finite() && v >= 1.0 {
        v.min(u32::MAX as f64) as u32
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1_cpuacct_usage_in_microseconds() {
        assert_eq!(parse_cpuacct_usage_us("123456789\n"), Some(123_456));
        assert_eq!(parse_cpuacct_usage_us(""), None);
        assert_eq!(parse_cpuacct_usage_us("max"), None);
    }

    #[test]
    fn offline_cpus_in_the_affinity_mask_do_not_count() {
        // A VM with hot-plug slots: the mask names 0-7, two are online.
        let mask = affinity_ids_from_status("Name:\tpostgres\nCpus_allowed_list:\t0-7\n").unwrap();
        assert_eq!(online_only(mask.clone(), Some("0-1\n")), vec![0, 1]);
        // Pinned to 1 and 3 with 0-3 online, nosmt style gaps elsewhere.
        assert_eq!(online_only(vec![1, 3], Some("0-3")), vec![1, 3]);
        assert_eq!(online_only(vec![0, 2, 4, 6], Some("0,2,4")), vec![0, 2, 4]);
        // Unknown or implausible: the mask as it is.
        assert_eq!(online_only(mask.clone(), None), mask);
        assert_eq!(online_only(mask.clone(), Some("")), mask);
        assert_eq!(online_only(vec![4, 5], Some("0-1")), vec![4, 5]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_ids("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_ids("0-3,8,10-11\n").map(|v| v.len()), Some(7));
        assert_eq!(parse_cpu_ids("5"), Some(vec![5]));
        assert_eq!(parse_cpu_ids(""), None);
        assert_eq!(parse_cpu_ids("3-1"), None);
        assert_eq!(parse_cpu_ids("a-b"), None);
        let status = "Name:\tpostgres\nCpus_allowed:\tff\nCpus_allowed_list:\t0-7\nMems_allowed:\t1\n";
        assert_eq!(affinity_ids_from_status(status).map(|v| v.len()), Some(8));
    }

    #[test]
    fn cgroup_v2_cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("150000 100000"), Some(1.5));
        assert_eq!(parse_cpu_max("50000"), Some(0.5), "period defaults to 100000");
        assert_eq!(parse_cpu_max("garbage 100000"), None);
        assert_eq!(parse_cpu_max(""), None);
    }

    #[test]
    fn cgroup_v1_cfs() {
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("250000", "100000"), Some(2.5));
        assert_eq!(parse_cfs("x", "100000"), None);
        assert_eq!(parse_cfs("100000", "0"), None);
    }

    #[test]
    fn proc_cgroup_lines() {
        let v2 = "0::/system.slice/postgresql.service\n";
        assert_eq!(
            parse_proc_cgroup(v2),
            CgroupPaths { v2: Some("/system.slice/postgresql.service".into()), v1_cpu: None }
        );
        let v1 = "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n0::/\n";
        let p = parse_proc_cgroup(v1);
        assert_eq!(p.v1_cpu.as_deref(), Some("/docker/abc"));
        assert_eq!(p.v2.as_deref(), Some("/"));
    }

    #[test]
    fn ancestors_deepest_first() {
        assert_eq!(ancestors("/a/b"), vec!["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/"), vec!["/"]);
    }

    #[test]
    fn tightest_quota_wins() {
        assert_eq!(effective_cpus(16, &[]), 16.0);
        assert_eq!(effective_cpus(16, &[2.5, 4.0]), 2.5);
        assert_eq!(effective_cpus(2, &[4.0]), 2.0);
        assert_eq!(effective_cpus(0, &[]), 1.0);
    }

    #[test]
    fn proc_stat_idle_fraction() {
        let a = parse_proc_stat_cpus("cpu  1 2 3 4\ncpu0 100 0 50 800 50 0 0 0 0 0\n", &[0]).unwrap();
        assert_eq!(a, (150, 850, 50));
        let b = parse_proc_stat_cpus("cpu0 160 0 70 820 56 0 10 0 0 0\n", &[0]).unwrap();
        assert_eq!(b, (240, 876, 56));
        assert_eq!(idle_fraction(a, b), Some((26.0 / 116.0, 6.0 / 116.0)));
        assert_eq!(idle_fraction(a, a), None);
        assert_eq!(parse_proc_stat_cpus("intr 1 2 3", &[0]), None);
        assert_eq!(parse_proc_stat_cpus("cpu0 1 2", &[0]), None, "too few fields");
        assert_eq!(parse_proc_stat_cpus("", &[0]), None);
    }

    #[test]
    fn per_cpu_counters_over_the_affinity_set() {
        let stat = "cpu  300 0 0 700 0\ncpu0 100 0 0 400 0\ncpu1 200 0 0 300 0 0 0 0\ncpu10 5 0 0 5 0\nintr 1\n";
        assert_eq!(parse_proc_stat_cpus(stat, &[1]), Some((200, 300, 0)));
        assert_eq!(parse_proc_stat_cpus(stat, &[0, 1]), Some((300, 700, 0)));
        assert_eq!(parse_proc_stat_cpus(stat, &[10]), Some((5, 5, 0)), "cpu10 is not cpu1");
        assert_eq!(parse_proc_stat_cpus(stat, &[2]), None, "no such CPU");
        assert_eq!(parse_proc_stat_cpus(stat, &[]), None);
        assert_eq!(parse_cpu_ids("0-2,5"), Some(vec![0, 1, 2, 5]));
        let status = "Cpus_allowed_list:\t1\n";
        assert_eq!(affinity_ids_from_status(status), Some(vec![1]));
    }

    #[test]
    fn idle_under_a_quota() {
        assert_eq!(parse_cgroup_usage_us("usage_usec 1234\nuser_usec 1000\n"), Some(1234));
        assert_eq!(parse_cgroup_usage_us("user_usec 1000\n"), None);
        // 1.5 CPUs for 200 ms is 300 ms of CPU; 240 ms used leaves 20 %.
        assert!((quota_idle_fraction(240_000, 200_000, 1.5).unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(quota_idle_fraction(500_000, 200_000, 1.5), Some(0.0), "bursts past the quota clamp");
        assert_eq!(quota_idle_fraction(0, 0, 1.5), None);
    }

    #[test]
    fn auto_limit_rounds_up() {
        assert_eq!(auto_limit(2.0, 4.0), 8);
        assert_eq!(auto_limit(1.5, 1.0), 2);
        assert_eq!(auto_limit(0.5, 1.0), 1);
        assert_eq!(auto_limit(0.1, 0.1), 1);
        assert_eq!(auto_limit(f64::NAN, 1.0), 1);
    }
}
