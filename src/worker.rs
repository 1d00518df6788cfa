//! The background worker ("pg_gatekeeper worker" in ps and the logs).
//!
//! - Applies the limit: on start, on every reload (SIGHUP) and every few
//!   seconds (a cgroup quota can change underneath us).
//! - While sessions are queued (or holders are stalled), samples the
//!   holders every `sample_interval`: a holder waiting on its client
//!   outside a statement (idle in transaction, `procs::holder_wait`) is not
//!   running; anything else, lock waits and waits on other servers
//!   included, is, unless it is stalled: its run has lasted
//!   `stall_timeout`. Stalled holders give their place to the queue. With
//!   the CPUs' idle fraction (`limit::CpuMeter`), the controller then moves
//!   the ticket count, and at the end of each throughput window an automatic
//!   limit adapts (`gatekeeper_core::adaptive`).
//! - Breaks deadlocks between holders and parked sessions (`deadlock`).
//! - Keeps the queue moving: a scope where nobody was admitted and no
//!   holder worked for `progress_timeout` has its head admitted over the
//!   limit (`liveness`).
//! - Records a history sample every `history_interval`.
//!
//! When nothing is queued it sleeps until the next history sample, so an
//! idle server costs it one wake-up per `history_interval`. The first
//! session to park sets the worker's latch, so sampling starts at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use gatekeeper_core::adaptive;
use gatekeeper_core::admission::LONG;
use gatekeeper_core::controller::{self, Window};
use gatekeeper_core::histogram::Histogram;
use gatekeeper_core::history::HistorySample;
use gatekeeper_core::lending;
use gatekeeper_core::working;
use gatekeeper_core::SlotState;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::{deadlock, gucs, limit, liveness, procs, shmem};

/// How often the limit is re-resolved without a reload (cgroup changes).
const RESOLVE_EVERY_US: i64 = 10_000_000;
/// How often the deadlock breaker looks, at most, while it has work.
const DEADLOCK_CHECK_EVERY_US: i64 = 100_000;
/// How often a limit that does not bind is checked for an overload.
const UNBOUND_EVERY_US: i64 = 1_000_000;

pub fn register() {
    BackgroundWorkerBuilder::new("pg_gatekeeper worker")
        .set_type("pg_gatekeeper worker")
        .set_function("pg_gatekeeper_worker_main")
        .set_library("pg_gatekeeper")
        .enable_shmem_access(None)
        // A connection to shared catalogs only, so that the worker shows in
        // pg_stat_activity; consistent state, so that it runs on standbys.
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::ConsistentState)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// The adaptive limit's and the lending cap's state between samples: the
/// probes under way and the current throughput window.
#[derive(Default)]
struct Adapt {
    climber: adaptive::Climber,
    lend: lending::LendClimber,
    /// The controller would have lent past the cap during this window.
    pressed: bool,
    /// The CPUs' idle share summed over this window's samples, and their
    /// number.
    idle: (f64, u32),
    /// The same, iowait left out.
    spare: f64,
    /// When the window began, and the admissions and ended transactions
    /// (admissions less holders) then.
    window: Option<(i64, u64, u64)>,
    /// When the limit was last checked for an overload with nobody queued,
    /// or last seen binding (someone queued), and the checks in a row.
    unbound_at: i64,
    unbound: adaptive::UnboundCheck,
}

impl Adapt {
    /// At the end of each window, the transactions ended per second over it
    /// (`controller::window`: a window that ran long starts afresh).
    fn tput(&mut self, now: i64, admitted: u64, holders: u32) -> Option<f64> {
        let ended = admitted.saturating_sub(holders as u64);
        let start = self.window.map(|w| w.0);
        let tput = match controller::window(start, now, adaptive::WINDOW_US, gucs::sample_interval_us()) {
            Window::Open => return None,
            // Counters that went back were reset (`gatekeeper.reset()`): the
            // window measured nothing.
            Window::Ended(us) => self
                .window
                .filter(|&(_, a, e)| admitted >= a && ended >= e)
                .map(|(_, _, e)| (ended - e) as f64 * 1e6 / us as f64),
            Window::Restart => {
                // Both sums restart with their count: a spare sum carried
                // over a restart once averaged 2-5 over a quiet spell.
                self.idle = (0.0, 0);
                self.spare = 0.0;
                None
            }
        };
        self.window = Some((now, admitted, ended));
        tput
    }
}

/// One throughput window: what the worker saw and what the limit and the
/// lending cap did.
struct WindowTrace {
    signals: adaptive::Signals,
    /// The limit after the window's decision (`signals.limit` before it).
    to: u32,
    /// The lending cap before, and where it moved (None: it did not);
    /// None while `lend_by_throughput` is off.
    cap: Option<(u32, Option<u32>)>,
    tickets: u32,
    spare: f64,
}

impl WindowTrace {
    /// One line at DEBUG1, for a DBA asking why the limit or the cap moved
    /// (or did not).
    fn log(&self) {
        let s = &self.signals;
        let cap = match self.cap {
            None => "off".to_string(),
            Some((was, None)) => format!("{was} -> ="),
            Some((was, Some(to))) => format!("{was} -> {to}"),
        };
        pgrx::debug1!(
            "pg_gatekeeper window: {:.0} tps, limit {} -> {}, lend cap {cap}, tickets {}, \
             running {:.1}, working {:.1}, queued {}, cpu idle {:.3} (spare {:.3})",
            s.tput,
            s.limit,
            self.to,
            self.tickets,
            s.running,
            s.working,
            s.queued,
            s.cpu_idle,
            self.spare,
        );
    }
}

/// What the worker remembers between history samples.
struct HistoryState {
    next_at_us: i64,
    last_at_us: i64,
    /// `stats_reset_us` at the last sample: a reset since then restarts the
    /// counts the next sample takes differences of.
    stats_reset_us: i64,
    last_admitted: u64,
    last_timeouts: u64,
    last_waits: Histogram,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_gatekeeper_worker_main(_arg: pg_sys::Datum) {
    // SIGINT too: with a database connection the worker would get
    // PostgreSQL's StatementCancelHandler, and a pg_cancel_backend() (a
    // DBA's "cancel every query" among them) would end it with an ERROR,
    // and with it the deadlock breaker's and the progress guarantee's
    // watches and the controllers' state. pgrx's handler only sets the
    // latch: the worker runs no query to cancel.
    BackgroundWorker::attach_signal_handlers(
        SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM | SignalWakeFlags::SIGINT,
    );
    BackgroundWorker::connect_worker_to_spi(None, None);
    let procno = procs::my_number() as i32;
    shmem::worker_procno().store(procno, Ordering::Relaxed);
    // SAFETY: registering a plain callback; it runs at any exit (an ERROR or
    // FATAL included), so that backends stop setting the latch of a PGPROC
    // that another process may reuse.
    unsafe { pg_sys::before_shmem_exit(Some(forget_worker), pg_sys::Datum::from(0)) };
    crate::log_held!("pg_gatekeeper worker started");

    let now = crate::now_us();
    let mut next_resolve_us = 0;
    let mut next_sample_us = 0;
    let mut next_deadlock_us = 0;
    let mut last_now = now;
    let mut steps = working::WallSteps::default();
    let mut cpu = limit::CpuMeter::new();
    // A worker started again goes on lending what its predecessor lent.
    let lend = shmem::with_gate_shared(|l| lending::LendClimber::resumed(l.status.lend_cap, l.gate.header().limit));
    let mut adapt = Adapt { lend, ..Adapt::default() };
    let mut demand = controller::DemandWindow::default();
    let mut breaker = deadlock::Breaker::default();
    let mut live = liveness::Liveness::default();
    let mut hist = shmem::with_gate_shared(|l| {
        let h = l.gate.header();
        // The first sample a full interval from now: one taken at once would
        // divide what the first pass admitted by a few microseconds.
        HistoryState {
            next_at_us: now + gucs::history_interval_us(),
            last_at_us: now,
            stats_reset_us: h.stats_reset_us,
            last_admitted: h.counters.admitted,
            last_timeouts: h.counters.timeouts,
            last_waits: h.waits,
        }
    });

    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a worker to reload its settings.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            next_resolve_us = 0;
            // A shorter interval than before takes effect now, not when the
            // old one would have ended.
            let now = crate::now_us();
            hist.next_at_us = hist.next_at_us.min(now + gucs::history_interval_us());
            next_sample_us = next_sample_us.min(now + gucs::sample_interval_us());
        }
        let now = crate::now_us();
        let mono = crate::mono_us();
        if now < last_now {
            // The wall clock stepped back (NTP, an administrator): move the
            // deadlines and the history's last sample back with it. Left
            // alone, they would hold the controller, the deadlock breaker
            // and the history back until the clock caught up; zeroed, the
            // next history sample would divide its admissions by about 0 s.
            let step = last_now - now;
            for t in [
                &mut next_resolve_us,
                &mut next_sample_us,
                &mut next_deadlock_us,
                &mut hist.next_at_us,
                &mut hist.last_at_us,
                &mut adapt.unbound_at,
            ] {
                *t -= step;
            }
        }
        last_now = now;
        if let Some(step) = steps.observe(now, mono) {
            // Statements in flight would read as running for the step's
            // length: they are timed from here (`working::run_time_us`).
            crate::log_held!(
                "pg_gatekeeper: the wall clock stepped forward by {} ms; the statements running now are timed from now",
                step / 1000
            );
        }
        if now >= next_resolve_us {
            cpu.set_source(limit::apply());
            crate::shapes_api::forget_absent_databases();
            next_resolve_us = now + RESOLVE_EVERY_US;
        }
        // Samples are paced by the clock, not by wake-ups: a burst of
        // sessions parking at once must not become a burst of samples of
        // one instant (each could move the ticket count).
        let interval_us = gucs::sample_interval_us();
        let (queued, stalled) = if now >= next_sample_us {
            next_sample_us = now + interval_us;
            cpu.tick(now);
            sample_and_steer(now, steps.floor_us, (cpu.idle, cpu.iowait, cpu.shown), &mut adapt, &mut demand, &mut live)
        } else {
            shmem::with_gate_shared(|l| (l.gate.header().queued, l.gate.header().stalled))
        };
        if queued > 0 && now >= next_deadlock_us && breaker.run(now) {
            next_deadlock_us = now + DEADLOCK_CHECK_EVERY_US;
        }
        if now >= hist.next_at_us {
            record_history(&mut hist, now);
        }
        // Sample while anyone waits, and while holders are marked stalled,
        // so that a stall ends as soon as its statement does. Otherwise wake
        // for the next history sample, but no later than the duties on a
        // clock of their own: the settings and dropped databases' routes
        // every 10 s, the check of a limit above every client every second
        // (a longer `history_interval` must not stretch them). That check
        // runs in a sample, so not before the next one is due: a longer
        // `sample_interval` would otherwise wake the worker every
        // millisecond until then.
        let wake_at = if queued > 0 || stalled > 0 {
            next_sample_us
        } else {
            let unbound_due = (adapt.unbound_at + UNBOUND_EVERY_US).max(next_sample_us);
            hist.next_at_us.min(next_resolve_us).min(unbound_due)
        };
        let sleep_ms = ((wake_at - crate::now_us()) / 1000).clamp(1, gucs::history_interval_ms() as i64);
        if !BackgroundWorker::wait_latch(Some(Duration::from_millis(sleep_ms as u64))) {
            break; // SIGTERM or postmaster death
        }
    }
    // Exit code 1 asks the postmaster to start the worker again after its
    // restart interval: a worker ended by pg_terminate_backend() or any
    // SIGTERM outside a shutdown must come back, or lending, stall relief
    // and the deadlock breaker stop until the server restarts. At
    // shutdown the postmaster restarts nobody, whatever the code.
    crate::log_held!("pg_gatekeeper worker exiting; the postmaster starts it again unless the server is shutting down");
    // SAFETY: proc_exit runs the exit callbacks (forget_worker) and ends the
    // process, as a worker's return would, with the code we choose.
    unsafe { pg_sys::proc_exit(1) };
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_worker(_code: i32, _arg: pg_sys::Datum) {
    shmem::worker_procno().store(-1, Ordering::Relaxed);
    // An ERROR inside pg_blocking_pids (out of memory while it holds
    // ProcArrayLock and every lock-manager partition lock, shared) ends the
    // worker with those still held: it runs outside any transaction, so no
    // abort releases them, and the exit's own RemoveProcFromArray would
    // then wait forever for ProcArrayLock, held by this very process, and
    // the whole server's locking with it. Nothing the worker does holds an
    // LWLock across its exit otherwise.
    // SAFETY: releasing this process's own LWLocks; called from a
    // before_shmem_exit callback, before the callbacks that take them again.
    unsafe { pg_sys::LWLockReleaseAll() };
}

/// Sample which holders are running and which are stalled; mark stalls,
/// and while sessions wait, move the ticket count. Returns the number of
/// queued sessions and of stalled holders.
///
/// A holder is stalled when it uses the server (it does not wait on its
/// client) and its run (its statement, or its admission if later) has
/// lasted `stall_timeout`: a long statement, or a lock wait, which is part
/// of one; with the long lane on, only while it waits on others (a lock, a
/// sleep, another server), not while it works. A stalled holder that waits
/// on its client again, or starts a new statement, is not stalled any more
/// and counts again.
fn sample_and_steer(
    now: i64,
    run_floor_us: i64,
    (cpu_idle, cpu_iowait, cpu_shown): (f64, f64, f64),
    adapt: &mut Adapt,
    demand: &mut controller::DemandWindow,
    live: &mut liveness::Liveness,
) -> (u32, u32) {
    let stall_us = gucs::stall_timeout_us();
    let lane_on = gucs::long_lane() == gucs::LongLane::On;
    let mut scan = live.scan();
    // Decide under the shared lock: the scan covers every holder, and
    // backends taking and giving back tickets need the lock in exclusive
    // mode. It walks the holders' list, not every connection's slot, so the
    // lock is held as long with 4,000 connections as with 40.
    // Each with the admission it was decided for (its grant time).
    let mut changes: Vec<(usize, i64, Act)> = vec![];
    let (busy, working, computing, on_cpu) = shmem::with_gate_shared(|l| {
        let (mut busy, mut computing, mut on_cpu) = (0u32, 0u32, 0u32);
        let mut seen: Vec<working::Holder> = vec![];
        let h = l.gate.header();
        // Which stalled holders are relieved is not recorded; while all of
        // them are, none counts against the tickets.
        let stalled_count = h.stalled_beyond_relief();
        // Nor which of the long lane's holders are beyond its cap; while
        // some are, the lane's holders count against the tickets.
        let lane_counts = h.lane_excess() > 0;
        for (i, s) in l.gate.holders() {
            // One reading of the wait event serves every decision below.
            let wait = procs::holder_wait(i);
            if h.queued > 0 {
                let counts = if s.class as usize == LONG { lane_counts } else { !s.stalled || stalled_count };
                scan.holder(wait, s.pid, s.class as usize, counts);
            }
            let uses_server = wait != pg_sys::PG_WAIT_CLIENT;
            // Not yet awake after its grant, or between statements: it has
            // not run (`working::run_time_us`).
            let run_start = shmem::run_start(i).load(Ordering::Relaxed);
            // A holder already found stalled was judged on stamps from one
            // clock: a step since only lengthens a run that was long anyway.
            let floor = if s.stalled { 0 } else { run_floor_us };
            let ran_us = working::run_time_us(now, run_start, s.admitted_at_us, procs::activity(i), floor);
            let long = uses_server && stall_us > 0 && ran_us >= stall_us;
            // On a CPU: no wait event, or a wait for an LWLock, which
            // computing backends contend on.
            let computes = wait == 0 || wait == pg_sys::PG_WAIT_LWLOCK;
            // Working: on a CPU or reading and writing files. A long scan
            // does both by turns, and judged on one sample's wait it would
            // be relieved and counted again from sample to sample.
            let works = computes || wait == pg_sys::PG_WAIT_IO;
            // With the lane on, working is never relieved: it moves into
            // the lane or keeps counting where it is. Relief is for waiting
            // on others: a lock, a sleep, another server.
            let stalled = long && !(lane_on && works);
            busy += uses_server as u32;
            seen.push(working::Holder {
                wait: match wait {
                    pg_sys::PG_WAIT_CLIENT => working::Wait::Client,
                    pg_sys::PG_WAIT_LOCK => match procs::awaited_xid(i) {
                        0 => working::Wait::Lock,
                        xid => working::Wait::Transaction { xid },
                    },
                    _ => working::Wait::Other,
                },
                xid: procs::xid(i),
                stalled,
            });
            // Computing past stall_timeout: what the CPU cap counts. Short
            // statements on a busy CPU show no wait event either while they
            // wait for it; the limit's throughput probes judge those.
            computing += (long && computes) as u32;
            on_cpu += computes as u32;
            if long && works && !s.long_run {
                changes.push((i, s.admitted_at_us, Act::RanLong));
            }
            if lane_on && long && works && s.movable_to_lane() {
                changes.push((i, s.admitted_at_us, Act::ToLane));
            }
            if stalled != s.stalled {
                changes.push((i, s.admitted_at_us, Act::Stall(stalled)));
            }
        }
        if h.queued == 0 {
            // The guarantee judges the queue as the next lock finds it: one
            // that forms in between finds no holder sorted, and must not
            // read as nobody working.
            scan.without_holders();
        }
        (busy, working::count(&seen), computing, on_cpu)
    });
    let lend_min_idle = gucs::lend_min_cpu_idle();
    let mut window = None;
    let mut unbound_shrink = None;
    let h = shmem::with_gate_waking(|mut l, wake| {
        for &(i, admitted_at_us, act) in &changes {
            // The slot may have released since we looked, or hold a new
            // transaction of the same backend: then nothing changes. Marked
            // as the one sampled, a short transaction would teach its shape
            // that it ran long and send it to the lane.
            let s = l.gate.slot(i);
            if s.state != SlotState::Admitted || s.admitted_at_us != admitted_at_us {
                continue;
            }
            match act {
                Act::Stall(stalled) => {
                    l.gate.set_stalled(i, stalled, now, wake);
                }
                Act::RanLong => l.gate.mark_long_run(i),
                Act::ToLane => {
                    l.gate.move_to_lane(i, now, wake);
                }
            }
        }
        let recent_demand = demand.observe(now, l.gate.take_demand_peak());
        let h = *l.gate.header();
        // Relieved stalled holders do not run as far as the gate is
        // concerned: their places are given to others.
        let running = busy.min(h.holders).saturating_sub(h.relieved());
        l.status.running = running;
        l.status.sampled_mono_us = crate::mono_us();
        l.status.workerless_bound_us =
            gatekeeper_core::progress::workerless_bound(gucs::progress_timeout_us(), gucs::sample_interval_us());
        l.status.cpu_idle = cpu_shown;
        let (avg, working_avg) = if h.queued == 0 {
            (f64::NAN, f64::NAN)
        } else {
            let prev = |v: f64| v.is_finite().then_some(v);
            (
                controller::smooth(prev(l.status.running_avg), running, h.limit),
                controller::smooth(prev(l.status.working_avg), working.min(running), h.limit),
            )
        };
        l.status.running_avg = avg;
        l.status.working_avg = working_avg;
        // Smoothed whether or not anyone is queued: the CPU cap acts either way.
        let prev_computing = l.status.computing_avg;
        l.status.computing_avg = controller::smooth(
            Some(if prev_computing.is_finite() { prev_computing } else { computing as f64 }),
            computing,
            h.limit,
        );
        let lend_on = gucs::lend_by_throughput();
        adapt.idle = (adapt.idle.0 + cpu_idle, adapt.idle.1 + 1);
        let cpu_spare = (cpu_idle - cpu_iowait).max(0.0);
        adapt.spare += cpu_spare;
        // Only an automatic limit adapts; a manual one has equal bounds.
        // The limit and the lending cap are judged on the same windows, so
        // one moves at a time: the cap only while the limit holds.
        if let Some(tput) = adapt.tput(now, h.counters.admitted, h.holders) {
            let pressed = std::mem::take(&mut adapt.pressed);
            let (idle_sum, samples) = std::mem::take(&mut adapt.idle);
            let spare_sum = std::mem::take(&mut adapt.spare);
            let avg_of = |sum: f64, now: f64| if samples > 0 { sum / samples as f64 } else { now };
            let lend_signals = lending::Signals {
                limit: h.limit,
                ceiling: l.status.ceiling,
                tickets: h.tickets,
                pressed,
                tput,
                cpu_spare: avg_of(spare_sum, cpu_spare),
            };
            let signals = adaptive::Signals {
                limit: h.limit,
                bounds: l.status.bounds,
                queued: h.queued,
                running: if avg.is_finite() { avg } else { running as f64 },
                working: if working_avg.is_finite() { working_avg } else { working as f64 },
                tput,
                cpu_idle: avg_of(idle_sum, cpu_idle),
                computing: l.status.computing_avg,
            };
            let lend_turn = lend_on && adapt.lend.probing();
            let cap_was = adapt.lend.cap(h.limit, l.status.ceiling);
            let moved = if lend_turn { None } else { adapt.climber.next_limit(signals) };
            let mut lent = None;
            if let Some((limit, reason)) = moved {
                l.status.reason = reason as u8;
                l.status.changed_at_us = now;
                l.gate.set_limit(limit, l.status.ceiling, now, wake);
            } else if lend_on && (lend_turn || !adapt.climber.probing()) {
                lent = adapt.lend.next(lend_signals);
            }
            // What the window saw and decided, copied out: it is logged once
            // the lock is released.
            window = Some(WindowTrace {
                signals,
                to: moved.map_or(h.limit, |m| m.0),
                cap: lend_on.then_some((cap_was, lent)),
                tickets: h.tickets,
                spare: lend_signals.cpu_spare,
            });
        }
        // After the window's decision, if one was taken.
        let h = *l.gate.header();
        if h.queued > 0 {
            adapt.unbound_at = now;
            adapt.unbound.reset();
        } else if now - adapt.unbound_at >= UNBOUND_EVERY_US {
            // Nobody queued since the last check, a second ago at least: no
            // window is judged and no probe runs, so a limit above every
            // client is checked for an overload here
            // (adaptive::UnboundCheck).
            adapt.unbound_at = now;
            let quiet =
                adaptive::Quiet { limit: h.limit, bounds: l.status.bounds, busy: running, on_cpu, cpu_idle: cpu_shown };
            if let Some(limit) = adapt.unbound.check(quiet) {
                adapt.climber.after_shrink();
                l.status.reason = adaptive::Reason::Shrink as u8;
                l.status.changed_at_us = now;
                l.gate.set_limit(limit, l.status.ceiling, now, wake);
                // Tickets down with it: left above every client, they would
                // queue nobody, and the next checks would cut again. The
                // running-holder rule lends again from there if holders idle.
                l.gate.set_tickets(limit, now, wake);
                unbound_shrink = Some((h.limit, limit, on_cpu, cpu_shown));
            }
        }
        let h = *l.gate.header();
        // Sessions held back by their class's cap are not sessions a ticket
        // could admit: counting them would lend without end.
        let admissible = l.gate.admissible_queued();
        let sample = controller::Sample {
            limit: h.limit,
            ceiling: l.status.ceiling,
            tickets: h.tickets,
            holders: h.counted(),
            demand: recent_demand,
            running: if avg.is_finite() { avg } else { running as f64 },
            queued: admissible,
            cpu_idle,
            lend_min_idle,
        };
        let next = if lend_on {
            let cap = adapt.lend.cap(h.limit, l.status.ceiling);
            l.status.lend_cap = cap;
            l.status.lend_probe = adapt.lend.probe();
            let capped = controller::next_tickets(controller::Sample { ceiling: cap, ..sample });
            adapt.pressed |= capped == cap && controller::next_tickets(sample) > cap;
            capped
        } else {
            controller::next_tickets(sample)
        };
        if next != h.tickets {
            l.gate.set_tickets(next, now, wake);
        }
        *l.gate.header()
    });
    if let Some(w) = window {
        w.log();
    }
    if let Some((from, to, on_cpu, idle)) = unbound_shrink {
        crate::log_held!(
            "pg_gatekeeper: limit {from} -> {to}: nobody queued, but {on_cpu} holders on the CPUs ({:.0} % idle)",
            idle * 100.0
        );
    }
    // Every sample, so that a scope whose queue empties without admissions
    // (timeouts, cancels) starts a new queue's quiet time afresh.
    live.finish(scan, &h, now, crate::mono_us(), gucs::progress_timeout_us());
    (h.queued, h.stalled)
}

/// What a sample changes for one holder.
#[derive(Clone, Copy)]
enum Act {
    /// Relieved, or counted again.
    Stall(bool),
    /// Seen working past `stall_timeout`: its transaction ran long.
    RanLong,
    /// Seen computing past `stall_timeout` in class `default`, with the
    /// long lane on: into the lane, if it has room.
    ToLane,
}

fn record_history(hist: &mut HistoryState, now: i64) {
    // The holders are counted under the shared lock, as the steering sample
    // counts them: a walk over thousands of holders must not hold every
    // admission and release back.
    let (idle_in_xact, running) = shmem::with_gate_shared(|l| {
        let (mut idle_in_xact, mut running) = (0, 0);
        for (i, s) in l.gate.holders() {
            if procs::waits_on_client(i) {
                idle_in_xact += 1;
            } else if !s.stalled {
                running += 1;
            }
        }
        (idle_in_xact, running)
    });
    shmem::with_gate(|l| {
        let h = *l.gate.header();
        let idle = h.sessions.saturating_sub(h.holders + h.queued);
        if h.stats_reset_us != hist.stats_reset_us {
            // gatekeeper.reset() zeroed the totals since the last sample:
            // this one counts from the reset, not from stale totals.
            hist.stats_reset_us = h.stats_reset_us;
            hist.last_admitted = 0;
            hist.last_timeouts = 0;
            hist.last_waits = Histogram::default();
        }
        let dt_s = ((now - hist.last_at_us).max(1)) as f64 / 1e6;
        let waits = h.waits.since(&hist.last_waits);
        let sample = HistorySample {
            at_us: now,
            limit: h.limit,
            tickets: h.tickets,
            admitted: h.holders,
            running,
            idle_in_transaction: idle_in_xact,
            queued: h.queued,
            idle,
            admissions_per_s: h.counters.admitted.saturating_sub(hist.last_admitted) as f64 / dt_s,
            timeouts: h.counters.timeouts.saturating_sub(hist.last_timeouts),
            wait_p50_us: waits.quantile_us(0.5).unwrap_or(f64::NAN),
            wait_p99_us: waits.quantile_us(0.99).unwrap_or(f64::NAN),
            limit_reason: l.status.reason,
        };
        l.ring.push(l.history, sample);
        hist.last_at_us = now;
        hist.last_admitted = h.counters.admitted;
        hist.last_timeouts = h.counters.timeouts;
        hist.last_waits = h.waits;
    });
    let interval = gucs::history_interval_us();
    // Keep a steady cadence without bursting after a long stall.
    hist.next_at_us = (hist.next_at_us + interval).max(now + interval / 2);
}
