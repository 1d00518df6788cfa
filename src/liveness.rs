//! The progress guarantee, run by the worker (docs/DESIGN.md §13; the rule
//! itself is `gatekeeper_core::progress`).
//!
//! Each sample while sessions are queued, the worker's scan hands every
//! holder to a [`Scan`], which sorts it into its scopes: the whole gate (if
//! the holder counts against the tickets) and its class (which counts every
//! holder against the cap). A holder's wait event tells most of the story:
//! I/O and LWLock waits (WAL writes, buffers) are work; lock, client, sleep,
//! extension (dblink and postgres_fdw on PostgreSQL 17 and later) and IPC
//! waits are not. An IPC wait is a wait on other processes: a parallel
//! leader whose workers are blocked on locks (PostgreSQL's deadlock-parallel
//! isolation test hung at max_active = 1 without lending while it counted as
//! work), or a synchronous standby; a leader that computes shows no wait
//! event, and is probed like anyone. A holder with no wait event may be on a CPU, or blocked in a system
//! call that reports none (dblink on PostgreSQL 15 and 16 waits in libpq's
//! `poll()`), or asleep in a poll loop that reports none (Citus's
//! `run_command_on_*`), so once its scope has been quiet for a moment it is
//! probed: its `/proc/PID/stat` scheduler state and CPU time, which must
//! show a share of a CPU, not a poller's moments awake. Probes cost a file
//! read each, and happen only in a scope where nothing has moved for
//! `progress::PROBE_AFTER_US`, never on a server whose queues all move.

use std::collections::HashMap;

use gatekeeper_core::classes::MAX_CLASSES;
use gatekeeper_core::progress::{self, ScopeSample, Verdict, Watch};
use gatekeeper_core::GateHeader;
use pgrx::pg_sys;

use crate::shmem;

/// Scope index of the whole gate; classes are `0..MAX_CLASSES`.
const GATE: usize = MAX_CLASSES;
const SCOPES: usize = MAX_CLASSES + 1;
/// Shortest time between two readings of a process's CPU time that can
/// tell it used none (the kernel counts in ticks of 10 ms).
const PROBE_WINDOW_US: i64 = 100_000;

/// What a holder's wait event says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shows {
    Work,
    NoWaitEvent,
    Waiting,
}

/// What a holder whose wait event class (`procs::holder_wait`) is `wait` shows.
fn shows(wait: u32) -> Shows {
    match wait {
        0 => Shows::NoWaitEvent,
        c if c == pg_sys::PG_WAIT_IO || c == pg_sys::PG_WAIT_LWLOCK => Shows::Work,
        _ => Shows::Waiting,
    }
}

/// One process's last CPU-time reading.
struct Probe {
    ticks: u64,
    at_us: i64,
    /// The answer of the last comparison, if one was made.
    works: Option<bool>,
}

/// The worker's state for the guarantee between samples.
#[derive(Default)]
pub struct Liveness {
    watches: [Watch; SCOPES],
    probing: [bool; SCOPES],
    probes: HashMap<i32, Probe>,
}

/// One sample's view of the scopes, filled by the worker's scan under the
/// shared lock.
pub struct Scan {
    probing: [bool; SCOPES],
    working: [bool; SCOPES],
    /// PIDs showing no wait event in a probing scope, with their scopes.
    to_probe: Vec<(i32, usize, bool)>,
    /// Some holder showing no wait event was not probed.
    unprobed: [bool; SCOPES],
    /// Whether a probe reading is kept, and so `holders` collected.
    keeps_probes: bool,
    /// Every holder's PID, while some probe reading is kept.
    holders: Vec<i32>,
}

impl Liveness {
    pub fn scan(&self) -> Scan {
        Scan {
            probing: self.probing,
            working: [false; SCOPES],
            to_probe: vec![],
            unprobed: [false; SCOPES],
            keeps_probes: !self.probes.is_empty(),
            holders: vec![],
        }
    }

    /// Finish a sample: probe, judge each scope, and admit the head of any
    /// stuck one over the limit. `h` is the header as the scan saw it.
    /// `now` is the gate's wall clock, for what the batches change in it;
    /// `mono` the monotonic clock (`crate::mono_us`), which times the quiet
    /// spells and the probes' windows: a step of the wall clock must neither
    /// end a quiet spell early (a batch over the limit before a whole
    /// timeout of quiet) nor stretch a probe's window (a holder that
    /// computes taken for idle).
    pub fn finish(&mut self, mut scan: Scan, h: &GateHeader, now: i64, mono: i64, timeout_us: i64) {
        let mut unverified = scan.unprobed;
        self.probe(&mut scan, &mut unverified, mono);
        let mut stuck = vec![];
        for (k, (watch, probing)) in self.watches.iter_mut().zip(self.probing.iter_mut()).enumerate() {
            // The gate holds back sessions of classes below their cap; a
            // class's cap holds back the rest. A class's own scope also
            // watches its queue while the gate holds it back: other
            // classes' admissions move the gate's scope, and fair sharing
            // counts the class's idle places as its share, so a class whose
            // holders wait on its own queue (a client's second connection)
            // would wait as long as the others keep the gate busy.
            // Admissions over the limit (this guarantee's batches, the
            // deadlock breaker's) do not count as the scope moving: a
            // stream of them would hide a queue that does not move.
            let (blocked, admitted) = h.scope_watch((k != GATE).then_some(k));
            let sample = ScopeSample { blocked, admitted, working: scan.working[k], unverified: unverified[k] };
            let verdict = watch.observe(mono, sample, timeout_us, h.limit);
            *probing = matches!(verdict, Verdict::Quiet { probe: true });
            if let Verdict::Stuck { batch } = verdict {
                stuck.push((k, batch, admitted));
            }
        }
        // A class held back by the gate is owed a place. When the gate is
        // stuck in the same sample, its batch is what moves the queue, and
        // it goes by fair share, which may pass the class over as long as
        // another class has a backlog: owed first (the gate comes last in
        // `stuck`), the class gets the batch's first admission.
        for (k, batch, admitted) in stuck {
            if k == GATE || h.held_at_cap(k) {
                self.admit_batch(k, batch, admitted, now, timeout_us);
            } else {
                owe(k, now, timeout_us);
            }
        }
    }

    /// Read the CPU state of the holders to probe. A holder in disk I/O,
    /// or that used a fifth of a CPU since its last reading (or is on one
    /// and used some), works (`progress::probe_works`); one whose last
    /// reading is too recent to tell keeps its last answer, or is
    /// unverified.
    fn probe(&mut self, scan: &mut Scan, unverified: &mut [bool; SCOPES], mono: i64) {
        // A reading is kept while its process holds an admission, whatever
        // it shows now: a holder that shows a wait event at some samples
        // and none at others would otherwise start afresh at each, and
        // stay unverified (no verdict of stuck) for as long as it does so.
        let seen: std::collections::HashSet<i32> = scan.holders.iter().copied().collect();
        self.probes.retain(|pid, _| seen.contains(pid));
        for &(pid, class, counts) in &scan.to_probe {
            let Some((state, ticks)) = read_stat(pid) else { continue };
            let works = match self.probes.get_mut(&pid) {
                Some(p) if mono - p.at_us >= PROBE_WINDOW_US || mono < p.at_us => {
                    p.works = Some(progress::probe_works(state, ticks, p.ticks, mono - p.at_us));
                    p.ticks = ticks;
                    p.at_us = mono;
                    p.works
                }
                Some(p) => p.works.or(progress::probe_works_now(state)),
                None => {
                    self.probes.insert(pid, Probe { ticks, at_us: mono, works: None });
                    progress::probe_works_now(state)
                }
            };
            for k in [class, GATE] {
                if k == GATE && !counts {
                    continue;
                }
                match works {
                    Some(true) => scan.working[k] = true,
                    Some(false) => {}
                    None => unverified[k] = true,
                }
            }
        }
    }

    /// Admit up to `batch` sessions of a stuck scope, head first, over the
    /// limit (and over the class's cap for a class's scope). `seen`: the
    /// scope's admissions within the limits that the verdict saw. The
    /// verdict was reached without the lock, after the probes: each
    /// admission first checks that it still applies (`batch_still_due`),
    /// so that a queue that moved on its own since gets no batch.
    fn admit_batch(&mut self, scope: usize, batch: u32, seen: u64, now: i64, timeout_us: i64) {
        let class = (scope != GATE).then_some(scope);
        let (admitted, owed): (Vec<(usize, i32)>, bool) = shmem::with_gate_waking(|mut l, wake| {
            let h = l.gate.header();
            // A class held at its cap when sampled, held back by the gate
            // now (its holder ended, and the place went to another class),
            // nobody of it admitted since: what it is due is an owed place.
            let owed = class.is_some_and(|k| h.class_held(k) && !h.held_at_cap(k) && h.scope_watch(class).1 == seen);
            let admitted = (0..batch)
                .map_while(|_| {
                    if !l.gate.header().batch_still_due(class, seen) {
                        return None;
                    }
                    l.gate.progress_admit(class, now, wake).map(|i| (i, l.gate.slot(i).pid))
                })
                .collect();
            (admitted, owed)
        });
        if owed {
            owe(scope, now, timeout_us);
        }
        // Every admitted session is woken before the first log line: a log
        // call serves interrupts, and a cancel there must not leave the rest
        // of the batch admitted and asleep.
        for &(slot, _) in &admitted {
            shmem::wake(slot);
        }
        let quiet_ms = timeout_us / 1000;
        for (_, pid) in admitted {
            if scope == GATE {
                crate::log_held!(
                    "pg_gatekeeper: admitted process {pid} over the limit: no holder worked and nobody was admitted for {quiet_ms} ms"
                );
            } else {
                crate::log_held!(
                    "pg_gatekeeper: admitted process {pid} over its class's cap: no holder of the class worked and nobody of it was admitted for {quiet_ms} ms"
                );
            }
        }
    }
}

/// A class held back by the gate is stuck while the gate is not: its head
/// gets the next free place (`Gate::owe`, one at a time), within the limit.
fn owe(class: usize, now: i64, timeout_us: i64) {
    let owed = shmem::with_gate_waking(|mut l, wake| {
        l.gate.owe(class, now, wake).then(|| l.gate.header().classes[class].name)
    });
    if let Some(name) = owed {
        crate::log_held!(
            "pg_gatekeeper: class {} is owed a place: the gate held its queue back, no holder of it worked and nobody of it was admitted for {} ms; its queue goes first at the next free place",
            name.as_str(),
            timeout_us / 1000
        );
    }
}

impl Scan {
    /// No holder was sorted (nobody was queued when the scan ran): every
    /// scope is unverified for this sample, so that a queue formed before
    /// the verdict's header was read gets no verdict of stuck on a scan
    /// that looked at nobody.
    pub fn without_holders(&mut self) {
        self.unprobed = [true; SCOPES];
    }

    /// Sort one holder into its scopes: `wait` is its wait event class
    /// (`procs::holder_wait`); `counts`: it counts against the tickets (it is
    /// not a relieved stalled holder).
    pub fn holder(&mut self, wait: u32, pid: i32, class: usize, counts: bool) {
        let class = class.min(MAX_CLASSES - 1);
        if self.keeps_probes {
            self.holders.push(pid);
        }
        let scopes = [Some(class), counts.then_some(GATE)];
        match shows(wait) {
            Shows::Work => scopes.into_iter().flatten().for_each(|k| self.working[k] = true),
            Shows::Waiting => {}
            Shows::NoWaitEvent => {
                if self.probing[class] || (counts && self.probing[GATE]) {
                    self.to_probe.push((pid, class, counts));
                } else {
                    scopes.into_iter().flatten().for_each(|k| self.unprobed[k] = true);
                }
            }
        }
    }
}

/// The scheduler state and CPU ticks of process `pid`, from `/proc`.
fn read_stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    progress::parse_proc_stat(&text)
}
