//! Resolving the limit: effective CPUs from affinity and cgroup quotas, and
//! `max_active` / `active_per_cpu` / `max_tickets` into numbers; and
//! applying it, with the class definitions, to the shared gate.
//!
//! Only reads files (`/proc/self/status`, `/proc/self/cgroup`, the cgroup
//! filesystem); the parsing rules live in `gatekeeper_core::cpus`.
//!
//! Who applies: the worker (at start, on reload, every few seconds), and
//! every backend that reloaded a changed setting, at its next admission, so
//! that a reload takes effect even while the worker is away.

use std::fs;

use gatekeeper_core::classes::ClassParams;
use gatekeeper_core::cpus;
use pgrx::pg_sys;

use crate::{gucs, shmem};

/// The limit and where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resolved {
    pub limit: u32,
    pub ceiling: u32,
    pub effective_cpus: f64,
    /// Derived from the CPUs (`max_active = 0`) rather than set by hand.
    pub auto: bool,
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// CPUs this process may use: the affinity mask, capped by every cgroup
/// quota on the way from its cgroup to the root.
pub fn effective_cpus() -> f64 {
    let affinity = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| cpus::affinity_from_status(&s))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    let mut quotas = vec![];
    if let Ok(text) = fs::read_to_string("/proc/self/cgroup") {
        let paths = cpus::parse_proc_cgroup(&text);
        if let Some(p) = paths.v2 {
            for dir in cpus::ancestors(&p) {
                if let Ok(s) = fs::read_to_string(format!("{CGROUP_ROOT}{dir}/cpu.max")) {
                    quotas.extend(cpus::parse_cpu_max(&s));
                }
            }
        }
        if let Some(p) = paths.v1_cpu {
            for mount in ["cpu,cpuacct", "cpu"] {
                for dir in cpus::ancestors(&p) {
                    let base = format!("{CGROUP_ROOT}/{mount}{dir}");
                    if let (Ok(q), Ok(per)) = (
                        fs::read_to_string(format!("{base}/cpu.cfs_quota_us")),
                        fs::read_to_string(format!("{base}/cpu.cfs_period_us")),
                    ) {
                        quotas.extend(cpus::parse_cfs(&q, &per));
                    }
                }
            }
        }
    }
    cpus::effective_cpus(affinity, &quotas)
}

/// Resolve the settings now in force into a limit and a ticket ceiling.
pub fn resolve() -> Resolved {
    let effective_cpus = effective_cpus();
    let manual = gucs::max_active();
    let (limit, auto) =
        if manual > 0 { (manual, false) } else { (cpus::auto_limit(effective_cpus, gucs::active_per_cpu()), true) };
    // 0: no cap but the backends themselves. The running-holder rule alone
    // decides how far idle holders lend (see the README's benchmark section).
    // SAFETY: MaxBackends is set by the postmaster before shared memory is
    // sized, and inherited by every process that resolves the limit.
    let backends = unsafe { pg_sys::MaxBackends }.max(1) as u32;
    let ceiling = match gucs::max_tickets() {
        0 => backends,
        n => n,
    }
    .max(limit);
    Resolved { limit, ceiling, effective_cpus, auto }
}

/// Resolve the settings now in force and apply the limit, the ticket
/// ceiling and the classes; what they newly let in is admitted at once.
pub fn apply() {
    // SAFETY: PgReloadTime is this process's own copy of when its
    // configuration was last loaded; these are the settings applied here.
    shmem::applied_reload().fetch_max(unsafe { pg_sys::PgReloadTime }, std::sync::atomic::Ordering::Relaxed);
    let r = resolve();
    let defs = gucs::classes();
    let list: Vec<(&str, ClassParams)> = defs.iter().map(|d| (d.name.as_str(), d.params)).collect();
    let now = crate::now_us();
    let no_room = shmem::with_gate_waking(|mut l, wake| {
        l.status.effective_cpus = r.effective_cpus;
        l.status.auto = r.auto;
        l.status.ceiling = r.ceiling;
        l.gate.set_limit(r.limit, r.ceiling, now, wake);
        l.gate.set_classes(&list, now, wake)
    });
    for name in no_room {
        pgrx::warning!(
            "pg_gatekeeper: class \"{name}\" has no entry free yet; its sessions are in class default until classes dropped from pg_gatekeeper.classes have no sessions left"
        );
    }
}
