//! Resolving the limit: effective CPUs from affinity and cgroup quotas, and
//! `max_active` / `active_per_cpu` / `active_per_cpu_max` / `max_tickets`
//! into numbers; and applying it, with the class definitions, to the shared
//! gate. Within the automatic limit's range, the worker moves the limit
//! itself (`gatekeeper_core::adaptive`); a reload keeps where it went.
//!
//! Only reads files (`/proc/self/status`, `/proc/self/cgroup`, the cgroup
//! filesystem); the parsing rules live in `gatekeeper_core::cpus`.
//!
//! Who applies, always through [`apply`]: the postmaster, each time it lays
//! out shared memory (at start and after a crash restart), before any
//! backend can be admitted; the worker (at its start, on reload, every few
//! seconds); and every backend that reloaded a changed setting, at its next
//! admission, so that a reload takes effect even while the worker is away.

use std::cell::RefCell;
use std::fs;

use gatekeeper_core::adaptive::{self, Bounds};
use gatekeeper_core::classes::{ClassParams, LONG_CLASS};
use gatekeeper_core::controller::{self, Window};
use gatekeeper_core::cpus;
use pgrx::pg_sys;

use crate::backend_local::BackendLocal;
use crate::{gucs, shmem};

/// The limit's settings resolved into numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// `max_active`, when set by hand.
    pub manual: Option<u32>,
    /// The automatic limit's range: `active_per_cpu` to `active_per_cpu_max`
    /// per CPU (the manual value at both ends when set by hand).
    pub bounds: Bounds,
    /// Upper bound for tickets: `max_tickets`, or the backends. Where it
    /// is at or below the limit in force, nothing is lent (`Gate::set_limit`
    /// and the controller keep tickets at the limit).
    pub ticket_ceiling: u32,
    pub effective_cpus: f64,
    /// Where to measure how idle those CPUs are.
    pub cpu_source: CpuSource,
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where the CPUs' idle time is read from (see [`CpuMeter`]).
#[derive(Clone, Debug, PartialEq)]
pub enum CpuSource {
    /// `/proc/stat`'s lines of these CPUs: the affinity set.
    Cpus(Vec<usize>),
    /// A cgroup v2 `cpu.stat` whose quota of this many CPUs is tighter than
    /// the affinity set: idle is the quota's unused share.
    Quota(String, f64),
    /// The same for a cgroup v1 quota, whose usage is its `cpuacct.usage`.
    QuotaV1(String, f64),
}

/// Effective CPUs (the affinity mask, capped by every cgroup quota on the
/// way from this process's cgroup to the root), and where to measure how
/// idle they are.
pub fn cpu_budget() -> (f64, CpuSource) {
    let status = fs::read_to_string("/proc/self/status").ok();
    let online = fs::read_to_string("/sys/devices/system/cpu/online").ok();
    let ids =
        status.as_deref().and_then(cpus::affinity_ids_from_status).map(|ids| cpus::online_only(ids, online.as_deref()));
    let affinity = ids
        .as_ref()
        .map(|v| v.len())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    // (CPUs, where the usage of the cgroup that sets them is read, if it can be)
    let mut quotas: Vec<(f64, Option<CpuSource>)> = vec![];
    if let Ok(text) = fs::read_to_string("/proc/self/cgroup") {
        let paths = cpus::parse_proc_cgroup(&text);
        if let Some(p) = paths.v2 {
            for dir in cpus::ancestors(&p) {
                let base = format!("{CGROUP_ROOT}{dir}");
                if let Ok(s) = fs::read_to_string(format!("{base}/cpu.max")) {
                    quotas.extend(
                        cpus::parse_cpu_max(&s).map(|q| (q, Some(CpuSource::Quota(format!("{base}/cpu.stat"), q)))),
                    );
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
                        // Its usage: cpuacct beside cpu, or in a hierarchy
                        // of its own under the same path.
                        let usage =
                            [format!("{base}/cpuacct.usage"), format!("{CGROUP_ROOT}/cpuacct{dir}/cpuacct.usage")]
                                .into_iter()
                                .find(|f| {
                                    fs::read_to_string(f).ok().and_then(|u| cpus::parse_cpuacct_usage_us(&u)).is_some()
                                });
                        quotas.extend(cpus::parse_cfs(&q, &per).map(|q| (q, usage.map(|f| CpuSource::QuotaV1(f, q)))));
                    }
                }
            }
        }
    }
    let list: Vec<f64> = quotas.iter().map(|q| q.0).collect();
    let effective = cpus::effective_cpus(affinity, &list);
    // The quota that decided, if one did and its usage can be read.
    let source = quotas
        .into_iter()
        .find(|(q, _)| *q == effective && effective < affinity as f64)
        .and_then(|(_, source)| source)
        .unwrap_or_else(|| CpuSource::Cpus(ids.unwrap_or_else(|| (0..affinity).collect())));
    (effective, source)
}

/// Shortest window over which the CPUs' idle fraction is measured:
/// /proc/stat counts in 10 ms ticks, so shorter windows are too coarse.
const CPU_WINDOW_US: i64 = 200_000;

/// The idle fraction of the CPUs the server may use, per window of
/// [`CPU_WINDOW_US`]: from `/proc/stat` over the affinity set, or from
/// the cgroup's usage against its quota when that is tighter.
pub struct CpuMeter {
    source: CpuSource,
    /// When the window started, and the counters then: `(busy, idle,
    /// iowait)` ticks, or `(used µs, 0, 0)` for a quota.
    last: Option<(i64, (u64, u64, u64))>,
    /// The last window's idle fraction; 1.0 until first measured.
    pub idle: f64,
    /// The part of `idle` that was iowait (0 under a quota, which does not
    /// tell).
    pub iowait: f64,
    /// What `gatekeeper.status.cpu_idle` shows: `idle`, or, after a quiet
    /// spell the decisions do not measure (see [`Window::Restart`]), the
    /// idle fraction over that spell, so the gauge never goes stale.
    pub shown: f64,
}

impl CpuMeter {
    pub fn new() -> CpuMeter {
        CpuMeter { source: cpu_budget().1, last: None, idle: 1.0, iowait: 0.0, shown: 1.0 }
    }

    /// Read from `source` from now on (the affinity or a quota changed).
    pub fn set_source(&mut self, source: CpuSource) {
        if source != self.source {
            self.source = source;
            self.last = None;
        }
    }

    fn read(&self) -> Option<(u64, u64, u64)> {
        match &self.source {
            CpuSource::Cpus(ids) => {
                fs::read_to_string("/proc/stat").ok().and_then(|s| cpus::parse_proc_stat_cpus(&s, ids))
            }
            CpuSource::Quota(file, _) => {
                fs::read_to_string(file).ok().and_then(|s| cpus::parse_cgroup_usage_us(&s)).map(|u| (u, 0, 0))
            }
            CpuSource::QuotaV1(file, _) => {
                fs::read_to_string(file).ok().and_then(|s| cpus::parse_cpuacct_usage_us(&s)).map(|u| (u, 0, 0))
            }
        }
    }

    /// At the end of each window, measure its idle fraction into `idle`.
    pub fn tick(&mut self, now: i64) {
        let (start, before) = self.last.unzip();
        let ended = match controller::window(start, now, CPU_WINDOW_US, gucs::sample_interval_us()) {
            Window::Open => return,
            Window::Ended(us) => Some(us),
            Window::Restart => None,
        };
        let Some(cur) = self.read() else { return };
        // A window that ran long (the worker slept while nothing was queued)
        // is no measure for the decisions, but it is one for the gauge.
        let span = ended.or_else(|| start.map(|at| now - at).filter(|&us| us > 0));
        let measured = span.zip(before).and_then(|(us, prev)| match &self.source {
            CpuSource::Cpus(_) => cpus::idle_fraction(prev, cur),
            CpuSource::Quota(_, q) | CpuSource::QuotaV1(_, q) => {
                cpus::quota_idle_fraction(cur.0.saturating_sub(prev.0), us as u64, *q).map(|f| (f, 0.0))
            }
        });
        self.last = Some((now, cur));
        if let Some((idle, iowait)) = measured {
            self.shown = idle;
            if ended.is_some() {
                self.idle = idle;
                self.iowait = iowait;
            }
        }
    }
}

/// Resolve the settings now in force into the limit's range and a ticket
/// ceiling.
pub fn resolve() -> Resolved {
    let (effective_cpus, cpu_source) = cpu_budget();
    let manual = Some(gucs::max_active()).filter(|&n| n > 0);
    let bounds = match manual {
        Some(n) => Bounds { floor: n, ceiling: n },
        None => {
            let floor = cpus::auto_limit(effective_cpus, gucs::active_per_cpu());
            let top = cpus::auto_limit(effective_cpus, gucs::active_per_cpu_max());
            Bounds { floor, ceiling: top.max(floor) }
        }
    };
    // 0: no cap but the backends themselves. The running-holder rule alone
    // decides how far idle holders lend (bench/README.md, "Choosing the defaults").
    // SAFETY: MaxBackends is set by the postmaster before shared memory is
    // sized, and inherited by every process that resolves the limit.
    let backends = unsafe { pg_sys::MaxBackends }.max(1) as u32;
    let max_tickets = gucs::max_tickets();
    let ticket_ceiling = match max_tickets {
        0 => backends,
        n => n,
    }
    .max(bounds.floor);
    // Tickets never fall below the limit, so a limit that climbed past
    // max_tickets would take the admissions past it too: the setting caps
    // the adaptive limit's climb as well (never below its floor).
    let bounds = match max_tickets {
        0 => bounds,
        _ => Bounds { ceiling: bounds.ceiling.min(ticket_ceiling), ..bounds },
    };
    Resolved { manual, bounds, ticket_ceiling, effective_cpus, cpu_source }
}

/// Resolve the settings now in force and apply the limit, the ticket
/// ceiling, the classes and the hand-off order; what they newly let in is
/// admitted at once. The worker's and the postmaster's call.
/// Returns where to measure the CPUs' idle time (for the worker).
pub fn apply() -> CpuSource {
    apply_from(false)
}

/// A backend's call, for a reload the worker may not have applied
/// (`session::apply_reloaded_limit`). A backend reads a reload at its next
/// command, and may reach its next admission long after (a lock wait in
/// parse analysis, before the gate): by then a newer reload may be in
/// force, which its settings must not overwrite. A configuration loaded
/// earlier than the one applied is older or the same, and is skipped. The
/// worker's calls never skip, so a wall clock stepped back delays nothing
/// beyond its next pass.
pub fn apply_unless_superseded() {
    apply_from(true);
}

fn apply_from(unless_superseded: bool) -> CpuSource {
    // SAFETY: PgReloadTime is this process's own copy of when its
    // configuration was last loaded; these are the settings applied here.
    let loaded = unsafe { pg_sys::PgReloadTime };
    let r = resolve();
    let defs = gucs::classes();
    // The long lane's cap, unless the setting gives one: half the
    // effective CPUs, rounded up, so that while short work waits, long work
    // keeps at most half the CPUs busy (docs/DESIGN.md §15). An entry for
    // `long` that sets only its other keys keeps this cap.
    let lane_cap = (r.effective_cpus / 2.0).ceil().max(1.0) as u32;
    let mut list: Vec<(&str, ClassParams)> = defs
        .iter()
        .map(|d| {
            let mut params = d.params;
            if d.name == LONG_CLASS && !d.max_active_given {
                params.max_active = lane_cap;
            }
            (d.name.as_str(), params)
        })
        .collect();
    if !list.iter().any(|&(name, _)| name == LONG_CLASS) {
        list.push((LONG_CLASS, ClassParams { max_active: lane_cap, ..ClassParams::default() }));
    }
    let now = crate::now_us();
    let no_room = shmem::with_gate_waking(|mut l, wake| {
        // Read under the lock, where every apply records it.
        if unless_superseded && loaded < shmem::applied_reload().load(std::sync::atomic::Ordering::Relaxed) {
            return vec![];
        }
        let (limit, reason) = adaptive::on_reload(r.manual, r.bounds, l.gate.header().limit, l.status.reason());
        l.status.effective_cpus = r.effective_cpus;
        l.status.ceiling = r.ticket_ceiling;
        l.status.bounds = r.bounds;
        if (limit, reason) != (l.gate.header().limit, l.status.reason()) {
            l.status.reason = reason as u8;
            l.status.changed_at_us = now;
        }
        l.gate.set_warm_hand_off(gucs::warm_hand_off_ms() as i64 * 1000);
        let no_room = l.gate.configure(limit, r.ticket_ceiling, &list, now, wake);
        // Recorded under the lock, once the gate has these settings: a
        // backend that reads it and so skips applying takes the lock for its
        // admission after this.
        shmem::applied_reload().fetch_max(loaded, std::sync::atomic::Ordering::Relaxed);
        no_room
    });
    log_no_room(no_room);
    r.cpu_source
}

/// The classes that found no entry free at this process's last apply.
static NO_ROOM: BackendLocal<RefCell<Vec<String>>> = BackendLocal::new(RefCell::new(Vec::new()));

/// Say in the server log which classes found no entry free: once per
/// process while the list stays the same (the worker applies every 10 s),
/// at LOG, which no client sees (the backend that applies a reload does so
/// in a client's statement).
fn log_no_room(no_room: Vec<String>) {
    let same = NO_ROOM.with(|n| std::mem::replace(&mut *n.borrow_mut(), no_room.clone()) == no_room);
    if same {
        return;
    }
    for name in no_room {
        crate::log_held!(
            "pg_gatekeeper: class \"{name}\" has no entry free yet; its sessions are admitted as with no class until classes dropped from pg_gatekeeper.classes have no sessions left"
        );
    }
}
