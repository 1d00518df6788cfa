//! The deadlock breaker (docs/DESIGN.md §6).
//!
//! A parked session can hold heavyweight locks: relation locks taken by
//! parse analysis before it parked, or session-level advisory locks. If a
//! running backend then waits for one of those locks, it waits for a
//! session that waits for a ticket, and PostgreSQL's deadlock detector
//! cannot see our queue. So whenever sessions are queued and some backend
//! waits on a lock, the worker asks the lock manager who blocks each lock
//! waiter (`pg_blocking_pids`) and admits every parked blocker at once,
//! over the limit, counted in `overflow_total`. This depends on neither
//! `lock_timeout` nor `queue_timeout`.
//!
//! `pg_blocking_pids` holds every lock-manager partition lock while it
//! looks, stalling every backend's lock acquisitions, and busy servers
//! have many short row-lock waits that cannot involve the queue. So only
//! a backend seen waiting on a lock at two consecutive checks is examined:
//! a deadlock with the queue persists, an ordinary lock wait mostly does not.
//!
//! Only one waiter per lock and mode is asked about
//! (`gatekeeper_core::breaker`): a parked session blocks every waiter that
//! asks for the same lock in the same mode, or none of them.
//!
//! A parked blocker is admitted only while its class's queue has stopped:
//! nobody of its class was admitted since the previous check. While the
//! queue moves, the blocker reaches its head in its turn, and admitting it
//! early would only let it jump the queue: sessions that hold a
//! session-level lock someone waits for, and loop short statements, would
//! otherwise be admitted over the limit every time they park. A blocker
//! admitted again within 10 s needs the queue to have stood still longer
//! each time (`gatekeeper_core::breaker::Repeats`): 200 ms, doubling, at
//! most 1.6 s. Looping statements longer than the check's interval then
//! gets each such session over the limit once or twice per 10 s, or once
//! per statement past 1.6 s.

use std::collections::{HashMap, HashSet};

use gatekeeper_core::breaker::{self, Motion, Repeats};
use gatekeeper_core::classes::MAX_CLASSES;
use gatekeeper_core::SlotState;
use pgrx::pg_sys;

use crate::{procs, shmem};

unsafe extern "C-unwind" {
    /// The built-in behind SQL `pg_blocking_pids(int)` (utils/adt/lockfuncs.c),
    /// declared here as the raw PGFunction that DirectFunctionCall expects.
    #[link_name = "pg_blocking_pids"]
    fn pg_blocking_pids_fn(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// The PIDs that block `pid`, as `pg_blocking_pids()` reports them.
fn blocking_pids(pid: i32) -> Vec<i32> {
    // SAFETY: pg_blocking_pids is a built-in SQL function taking an int4 and
    // returning an int4[] without nulls; DirectFunctionCall1Coll calls it with
    // a valid fcinfo. deconstruct_array is given int4's layout (4 bytes, by
    // value, int alignment) so that it needs no catalog lookup: the worker
    // runs outside any transaction. Everything is palloc'd in the caller's
    // scratch memory context.
    unsafe {
        let d =
            pg_sys::DirectFunctionCall1Coll(Some(pg_blocking_pids_fn), pg_sys::InvalidOid, pg_sys::Datum::from(pid));
        let arr = d.cast_mut_ptr::<pg_sys::ArrayType>();
        if arr.is_null() || (*arr).ndim == 0 {
            return vec![];
        }
        let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut n: i32 = 0;
        pg_sys::deconstruct_array(
            arr,
            pg_sys::INT4OID,
            4,
            true,
            pg_sys::TYPALIGN_INT as std::ffi::c_char,
            &mut elems,
            std::ptr::null_mut(),
            &mut n,
        );
        (0..n as usize).map(|k| (*elems.add(k)).value() as i32).collect()
    }
}

/// Backends seen waiting on a lock at the previous check, each class's
/// admissions, and how often each blocker was admitted recently. The
/// standstills and repeats are timed on `crate::mono_us`, which never
/// steps back: the wall clock's steps must not turn the breaker off, or on.
#[derive(Default)]
pub struct Breaker {
    seen: HashSet<i32>,
    motion: Motion<MAX_CLASSES>,
    repeats: Repeats,
}

impl Breaker {
    /// Look for lock waiters blocked by parked sessions and admit those
    /// sessions. Returns whether there was anything to examine.
    pub fn run(&mut self, now: i64) -> bool {
        let mono = crate::mono_us();
        self.repeats.expire(mono);
        let waiting = procs::lock_waiters();
        let persistent =
            breaker::one_per_lock(waiting.iter().filter(|w| self.seen.contains(&w.pid)).map(|w| (w.pid, w.on)));
        self.seen = waiting.iter().map(|w| w.pid).collect();
        let admitted: [u64; MAX_CLASSES] =
            shmem::with_gate_shared(|l| std::array::from_fn(|k| l.gate.header().classes[k].counters.admitted));
        let still = self.motion.observe(admitted, mono);
        if self.seen.is_empty() {
            return false;
        }
        if let Some(still) = still.filter(|_| !persistent.is_empty()) {
            self.break_deadlocks(persistent, &still, now, mono);
        }
        true
    }

    /// `still`: how long each class's queue has stood still (0: it moved
    /// since the previous check); `now` is the wall clock, `mono` the
    /// monotonic clock (`crate::mono_us`).
    fn break_deadlocks(&mut self, waiters: Vec<i32>, still: &[i64; MAX_CLASSES], now: i64, mono: i64) {
        // Each parked session's slot, how long its class stood still, and
        // when it parked (which tells this wait from a later one).
        let queued: HashMap<i32, (usize, i64, i64)> = shmem::with_gate_shared(|l| {
            l.gate
                .queue()
                .map(|i| {
                    let s = l.gate.slot(i);
                    (s.pid, (i, still[s.class as usize % MAX_CLASSES], s.wait_start_us))
                })
                // Only a queue standing still can hold a blocker that
                // matters; the rest is Repeats::may_admit's.
                .filter(|&(_, (_, still, _))| still > 0)
                .collect()
        });
        if queued.is_empty() {
            return;
        }
        let mut blocks: Vec<(i32, i32)> = vec![];
        in_scratch_context(|| {
            for w in waiters {
                blocks.extend(blocking_pids(w).into_iter().map(|b| (b, w)));
            }
        });
        let to_admit: Vec<(usize, i32, i64, i32)> = blocks
            .into_iter()
            .filter_map(|(b, w)| {
                let &(slot, still, parked) = queued.get(&b)?;
                self.repeats.may_admit(b, still).then_some((slot, b, parked, w))
            })
            .collect();
        for (slot, pid, parked, waiter) in to_admit {
            let admitted = shmem::with_gate_waking(|mut l, wake| {
                // The slot may have been admitted, or reused, since we looked,
                // or admitted and parked again: the blockers were found for
                // the wait we saw, which has then ended.
                let s = l.gate.slot(slot);
                s.state == SlotState::Queued
                    && s.pid == pid
                    && s.wait_start_us == parked
                    && l.gate.overflow_admit(slot, now, wake)
            });
            if admitted {
                shmem::wake(slot);
                match self.repeats.admitted(pid, mono) {
                    1 => crate::log_held!(
                        "pg_gatekeeper: admitted process {pid} over the limit because process {waiter} waits for a lock it holds"
                    ),
                    n => crate::log_held!(
                        "pg_gatekeeper: admitted process {pid} over the limit because process {waiter} waits for a lock it holds ({n} times, each within {} s of the one before)",
                        breaker::REPEAT_FORGET_US / 1_000_000
                    ),
                }
            }
        }
    }
}

/// Run `f` in a memory context that is deleted afterwards, so that the
/// arrays built by the lock manager do not accumulate in the worker.
fn in_scratch_context(f: impl FnOnce()) {
    /// Switches back and deletes the context when dropped: also when an
    /// ERROR in `f` comes back as a panic and unwinds through here.
    struct Scratch {
        cx: pg_sys::MemoryContext,
        old: pg_sys::MemoryContext,
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            // SAFETY: `old` was current when `cx` was made current, and
            // `cx` is ours: nothing allocated in it escapes (`f` copies what
            // it keeps into Rust-owned memory).
            unsafe {
                pg_sys::MemoryContextSwitchTo(self.old);
                pg_sys::MemoryContextDelete(self.cx);
            }
        }
    }
    // SAFETY: creates a child of the current context and makes it current;
    // the guard puts the old one back and deletes it.
    let _scratch = unsafe {
        let cx = pg_sys::AllocSetContextCreateInternal(
            pg_sys::CurrentMemoryContext,
            c"pg_gatekeeper deadlock check".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        Scratch { cx, old: pg_sys::MemoryContextSwitchTo(cx) }
    };
    f();
}
