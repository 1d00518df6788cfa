//! The admission state machine: one [`Slot`] per backend, a FIFO queue
//! threaded through the slots, and a ticket count.
//!
//! Rules (DESIGN §2-§5):
//! - A transaction needs admission. It is admitted at once when a ticket is
//!   free **and nobody is queued** (no barging); otherwise it joins the tail
//!   of the queue, unless the queue is full (`max_queued`), when it is
//!   rejected.
//! - When a holder releases, its ticket goes straight to the head of the
//!   queue (direct hand-off): the waiter is marked admitted under the same
//!   lock, so nobody can take the ticket in between and nobody stampedes.
//! - `tickets` may change at any time (reload, the worker's controller);
//!   raising it admits as many waiters as now fit, lowering it simply stops
//!   re-issuing tickets at release until `holders` falls below it.
//! - The deadlock breaker may admit a specific waiter over the limit
//!   ([`Gate::overflow_admit`]).
//!
//! All operations are O(1) except [`Gate::queue_position`] and
//! [`Gate::check`], which walk the queue and are only used for reporting and
//! tests. The caller serialises every call (the extension holds its LWLock
//! in exclusive mode); this module itself has no locking.

use crate::histogram::Histogram;

/// "No slot": the end of a queue link.
pub const NIL: u32 = u32::MAX;

/// What a backend's slot says about it.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlotState {
    /// No backend attached (never used, or the backend exited).
    #[default]
    Free = 0,
    /// Attached and gated, holding no admission.
    Idle = 1,
    /// Parked in the FIFO queue.
    Queued = 2,
    /// Holding an admission (a ticket, or an overflow admission).
    Admitted = 3,
    /// Attached but never gated (exempt role or `enabled = off`).
    Exempt = 4,
}

/// Why a waiter left the queue without being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// `queue_timeout` expired.
    Timeout,
    /// An error interrupted the wait: cancel, statement_timeout.
    Cancel,
    /// The backend exited while parked (terminate, postmaster shutdown).
    Exit,
    /// The client hung up while the session was parked.
    ClientLost,
}

/// The outcome of [`Gate::request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Admitted at once.
    Admitted,
    /// Parked at this 1-based queue position.
    Queued { position: u32 },
    /// Turned away: the queue already holds `max_queued` sessions.
    Rejected { queued: u32 },
}

/// Totals since the last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Every admission, immediate or after a wait, overflow included.
    pub admitted: u64,
    /// Admissions that had to wait in the queue first.
    pub waited: u64,
    /// Admissions over the limit by the deadlock breaker.
    pub overflow: u64,
    /// Waits ended by `queue_timeout`.
    pub timeouts: u64,
    /// Requests turned away because the queue was full.
    pub rejected: u64,
    /// Waits ended by an error (cancel, statement_timeout).
    pub cancels: u64,
    /// Waits ended by the backend exiting (terminate, shutdown).
    pub exits: u64,
    /// Waits ended because the client hung up.
    pub clients_lost: u64,
    /// Total time spent in the queue by waits that ended, in microseconds.
    pub wait_time_us: u64,
}

/// The gate's shared header. Lives in shared memory; plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GateHeader {
    /// Target for concurrently running holders (`max_active`, resolved).
    pub limit: u32,
    /// Admission tickets currently issued; never below `limit`.
    pub tickets: u32,
    /// Sessions holding an admission (ticketed and overflow).
    pub holders: u32,
    /// Sessions in the queue.
    pub queued: u32,
    /// Most sessions holding or waiting for an admission at once since the
    /// worker last took it ([`Gate::take_demand_peak`]).
    pub demand_peak: u32,
    head: u32,
    tail: u32,
    pub counters: Counters,
    pub waits: Histogram,
    /// When the statistics were last reset (caller's clock, microseconds).
    pub stats_reset_us: i64,
}

/// One backend's entry. Lives in shared memory; plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot {
    /// PID of the attached backend, 0 when free.
    pub pid: i32,
    pub state: SlotState,
    /// The current admission was granted over the limit.
    pub overflow: bool,
    prev: u32,
    next: u32,
    /// When the current or last wait began.
    pub wait_start_us: i64,
    /// Length of the last completed wait (admitted or abandoned).
    pub last_wait_us: u64,
    /// Transactions admitted for this session.
    pub xacts_admitted: u64,
    /// Times this session was parked.
    pub times_parked: u64,
    /// Total time this session spent parked, in microseconds.
    pub wait_total_us: u64,
}

/// A view of the header and the slot array, borrowed under the caller's lock.
pub struct Gate<'a> {
    h: &'a mut GateHeader,
    slots: &'a mut [Slot],
}

impl<'a> Gate<'a> {
    pub fn new(h: &'a mut GateHeader, slots: &'a mut [Slot]) -> Self {
        Gate { h, slots }
    }

    /// Reset everything to an empty gate with this limit.
    pub fn init(&mut self, limit: u32, now_us: i64) {
        *self.h =
            GateHeader { limit, tickets: limit, head: NIL, tail: NIL, stats_reset_us: now_us, ..GateHeader::default() };
        for s in self.slots.iter_mut() {
            *s = Slot::default();
        }
    }

    pub fn header(&self) -> &GateHeader {
        self.h
    }

    pub fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    pub fn slots(&self) -> &[Slot] {
        self.slots
    }

    /// Give slot `i` to a new backend. Whatever a previous owner left there
    /// must already have been detached.
    pub fn attach(&mut self, i: usize, pid: i32, exempt: bool) {
        debug_assert!(!matches!(self.slots[i].state, SlotState::Queued | SlotState::Admitted));
        self.slots[i] = Slot {
            pid,
            state: if exempt { SlotState::Exempt } else { SlotState::Idle },
            prev: NIL,
            next: NIL,
            ..Slot::default()
        };
    }

    /// Switch an attached slot between gated and exempt. Only takes effect
    /// between transactions: a queued or admitted slot keeps its state.
    pub fn set_exempt(&mut self, i: usize, exempt: bool) {
        let s = &mut self.slots[i];
        match (s.state, exempt) {
            (SlotState::Idle, true) => s.state = SlotState::Exempt,
            (SlotState::Exempt, false) => s.state = SlotState::Idle,
            _ => {}
        }
    }

    /// Ask for admission for slot `i`. `max_queued == 0` means the queue is
    /// unbounded. A slot that already holds an admission or waits for one
    /// gets that answer again, changing nothing (the glue only asks for idle
    /// slots; this keeps a mistake from linking a slot into the queue twice).
    pub fn request(&mut self, i: usize, now_us: i64, max_queued: u32) -> Request {
        match self.slots[i].state {
            SlotState::Admitted => return Request::Admitted,
            SlotState::Queued => {
                return Request::Queued { position: self.queue_position(i).unwrap_or(self.h.queued) };
            }
            _ => {}
        }
        if self.h.queued == 0 && self.h.holders < self.h.tickets {
            self.grant(i, now_us, false);
            return Request::Admitted;
        }
        if max_queued != 0 && self.h.queued >= max_queued {
            self.h.counters.rejected += 1;
            return Request::Rejected { queued: self.h.queued };
        }
        self.push_tail(i);
        let s = &mut self.slots[i];
        s.state = SlotState::Queued;
        s.wait_start_us = now_us;
        s.times_parked += 1;
        Request::Queued { position: self.h.queued }
    }

    /// Whether slot `i` holds an admission (after a wait: it was handed one).
    pub fn is_admitted(&self, i: usize) -> bool {
        self.slots[i].state == SlotState::Admitted
    }

    /// Leave the queue without admission. Returns false, changing nothing,
    /// when the slot is no longer queued (it was admitted in the meantime:
    /// the caller then holds an admission and must release it).
    pub fn abandon(&mut self, i: usize, now_us: i64, why: Abandon) -> bool {
        if self.slots[i].state != SlotState::Queued {
            return false;
        }
        self.unlink(i);
        let waited = self.end_wait(i, now_us);
        self.slots[i].state = SlotState::Idle;
        // Every wait that ended is in the histogram, however it ended: the
        // percentiles must not leave out the waits that timed out.
        self.h.waits.record(waited);
        let c = &mut self.h.counters;
        c.wait_time_us += waited;
        match why {
            Abandon::Timeout => c.timeouts += 1,
            Abandon::Cancel => c.cancels += 1,
            Abandon::Exit => c.exits += 1,
            Abandon::ClientLost => c.clients_lost += 1,
        }
        // No pump: while anyone is queued every ticket is held, so the new
        // head cannot be admitted by our leaving.
        true
    }

    /// End slot `i`'s admission, handing the ticket to the queue's head.
    /// `wake` is called with the index of every slot admitted as a result.
    /// Returns false when the slot held no admission.
    pub fn release(&mut self, i: usize, now_us: i64, wake: &mut dyn FnMut(usize)) -> bool {
        if self.slots[i].state != SlotState::Admitted {
            return false;
        }
        self.h.holders -= 1;
        let s = &mut self.slots[i];
        s.state = SlotState::Idle;
        s.overflow = false;
        self.pump(now_us, wake);
        true
    }

    /// The backend in slot `i` is exiting: leave the queue or release, then
    /// free the slot.
    pub fn detach(&mut self, i: usize, now_us: i64, wake: &mut dyn FnMut(usize)) {
        match self.slots[i].state {
            SlotState::Queued => {
                self.abandon(i, now_us, Abandon::Exit);
            }
            SlotState::Admitted => {
                self.release(i, now_us, wake);
            }
            _ => {}
        }
        self.slots[i] = Slot { prev: NIL, next: NIL, ..Slot::default() };
    }

    /// Set the limit and the ticket count. Tickets are kept within
    /// `[limit, max(ceiling, limit)]`; raising them admits waiters at once.
    pub fn set_limit(&mut self, limit: u32, ceiling: u32, now_us: i64, wake: &mut dyn FnMut(usize)) {
        self.h.limit = limit;
        let t = self.h.tickets.clamp(limit, ceiling.max(limit));
        self.set_tickets(t, now_us, wake);
    }

    /// Set the ticket count (never below the limit) and admit what now fits.
    pub fn set_tickets(&mut self, tickets: u32, now_us: i64, wake: &mut dyn FnMut(usize)) {
        self.h.tickets = tickets.max(self.h.limit);
        self.pump(now_us, wake);
    }

    /// Admit queued slot `i` at once, over the limit (deadlock breaker).
    /// Returns false when the slot is not queued.
    pub fn overflow_admit(&mut self, i: usize, now_us: i64) -> bool {
        if self.slots[i].state != SlotState::Queued {
            return false;
        }
        self.unlink(i);
        self.grant(i, now_us, true);
        true
    }

    /// Zero the totals and the histogram; per-session totals are zeroed too.
    pub fn reset_stats(&mut self, now_us: i64) {
        self.h.counters = Counters::default();
        self.h.waits = Histogram::default();
        self.h.stats_reset_us = now_us;
        for s in self.slots.iter_mut() {
            s.xacts_admitted = 0;
            s.times_parked = 0;
            s.wait_total_us = 0;
        }
    }

    /// 1-based position of slot `i` in the queue. O(queue length).
    pub fn queue_position(&self, i: usize) -> Option<u32> {
        if self.slots[i].state != SlotState::Queued {
            return None;
        }
        let mut pos = 1;
        let mut cur = self.h.head;
        while cur != NIL {
            if cur as usize == i {
                return Some(pos);
            }
            pos += 1;
            cur = self.slots[cur as usize].next;
        }
        None
    }

    /// How long the head of the queue has been waiting.
    pub fn oldest_wait_us(&self, now_us: i64) -> Option<u64> {
        (self.h.head != NIL).then(|| (now_us - self.slots[self.h.head as usize].wait_start_us).max(0) as u64)
    }

    /// Index of the queue's head, if any.
    pub fn head(&self) -> Option<usize> {
        (self.h.head != NIL).then_some(self.h.head as usize)
    }

    /// Indices of queued slots, head first. O(queue length).
    pub fn queue(&self) -> impl Iterator<Item = usize> + '_ {
        let mut cur = self.h.head;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let i = cur as usize;
                cur = self.slots[i].next;
                i
            })
        })
    }

    /// The most sessions that held or waited for an admission at once since
    /// the last call (at least as many as do now), and start a new count.
    pub fn take_demand_peak(&mut self) -> u32 {
        let now = self.h.holders + self.h.queued;
        let peak = self.h.demand_peak.max(now);
        self.h.demand_peak = now;
        peak
    }

    /// Verify every invariant; used by tests and assertions.
    pub fn check(&self) -> Result<(), String> {
        let h = &self.h;
        let admitted = self.slots.iter().filter(|s| s.state == SlotState::Admitted).count() as u32;
        if admitted != h.holders {
            return Err(format!("holders {} but {} admitted slots", h.holders, admitted));
        }
        let queued = self.slots.iter().filter(|s| s.state == SlotState::Queued).count() as u32;
        if queued != h.queued {
            return Err(format!("queued {} but {} queued slots", h.queued, queued));
        }
        let mut n = 0u32;
        let mut prev = NIL;
        let mut last_start = i64::MIN;
        for i in self.queue() {
            let s = &self.slots[i];
            if s.state != SlotState::Queued || s.prev != prev {
                return Err(format!("broken queue link at slot {i}"));
            }
            if s.wait_start_us < last_start {
                return Err(format!("queue not in arrival order at slot {i}"));
            }
            last_start = s.wait_start_us;
            prev = i as u32;
            n += 1;
            if n > h.queued {
                return Err("queue longer than its count (cycle?)".into());
            }
        }
        if n != h.queued || prev != h.tail {
            return Err(format!("queue walk found {n}, count {}, tail mismatch", h.queued));
        }
        if h.demand_peak < h.holders + h.queued {
            return Err(format!("demand peak {} below {} holders and {} queued", h.demand_peak, h.holders, h.queued));
        }
        let c = &h.counters;
        let ended = c.waited + c.timeouts + c.cancels + c.exits + c.clients_lost;
        if h.waits.total() != ended {
            return Err(format!("histogram holds {} waits but {ended} ended", h.waits.total()));
        }
        if h.tickets < h.limit {
            return Err(format!("tickets {} below limit {}", h.tickets, h.limit));
        }
        if h.queued > 0 && h.holders < h.tickets {
            return Err(format!("{} waiting while only {} of {} tickets are held", h.queued, h.holders, h.tickets));
        }
        Ok(())
    }

    // -- internals --------------------------------------------------------

    fn note_demand(&mut self) {
        self.h.demand_peak = self.h.demand_peak.max(self.h.holders + self.h.queued);
    }

    /// Admit waiters while tickets are free.
    fn pump(&mut self, now_us: i64, wake: &mut dyn FnMut(usize)) {
        while self.h.holders < self.h.tickets && self.h.head != NIL {
            let i = self.h.head as usize;
            self.unlink(i);
            self.grant(i, now_us, false);
            wake(i);
        }
    }

    /// Mark slot `i` admitted (it is not in the queue any more).
    fn grant(&mut self, i: usize, now_us: i64, overflow: bool) {
        let was_queued = self.slots[i].state == SlotState::Queued;
        let waited = if was_queued { self.end_wait(i, now_us) } else { 0 };
        let s = &mut self.slots[i];
        s.state = SlotState::Admitted;
        s.overflow = overflow;
        s.xacts_admitted += 1;
        self.h.holders += 1;
        self.note_demand();
        let c = &mut self.h.counters;
        c.admitted += 1;
        if overflow {
            c.overflow += 1;
        }
        if was_queued {
            c.waited += 1;
            c.wait_time_us += waited;
            self.h.waits.record(waited);
        }
    }

    /// Close the current wait of slot `i`, returning its length.
    fn end_wait(&mut self, i: usize, now_us: i64) -> u64 {
        let s = &mut self.slots[i];
        let waited = (now_us - s.wait_start_us).max(0) as u64;
        s.last_wait_us = waited;
        s.wait_total_us += waited;
        waited
    }

    fn push_tail(&mut self, i: usize) {
        let tail = self.h.tail;
        {
            let s = &mut self.slots[i];
            s.prev = tail;
            s.next = NIL;
        }
        if tail == NIL {
            self.h.head = i as u32;
        } else {
            self.slots[tail as usize].next = i as u32;
        }
        self.h.tail = i as u32;
        self.h.queued += 1;
        self.note_demand();
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        if prev == NIL {
            self.h.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.h.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        self.slots[i].prev = NIL;
        self.slots[i].next = NIL;
        self.h.queued -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        h: GateHeader,
        slots: Vec<Slot>,
    }

    impl Fixture {
        fn new(n: usize, limit: u32) -> Self {
            let mut f = Fixture { h: GateHeader::default(), slots: vec![Slot::default(); n] };
            f.gate().init(limit, 0);
            for i in 0..n {
                f.gate().attach(i, 1000 + i as i32, false);
            }
            f
        }
        fn gate(&mut self) -> Gate<'_> {
            Gate::new(&mut self.h, &mut self.slots)
        }
        /// Release `i` and return who was woken.
        fn release(&mut self, i: usize, now: i64) -> Vec<usize> {
            let mut woken = vec![];
            assert!(self.gate().release(i, now, &mut |w| woken.push(w)));
            self.gate().check().unwrap();
            woken
        }
    }

    #[test]
    fn admits_up_to_the_limit_then_queues_in_order() {
        let mut f = Fixture::new(6, 2);
        let mut g = f.gate();
        assert_eq!(g.request(0, 0, 0), Request::Admitted);
        assert_eq!(g.request(1, 0, 0), Request::Admitted);
        assert_eq!(g.request(2, 10, 0), Request::Queued { position: 1 });
        assert_eq!(g.request(3, 20, 0), Request::Queued { position: 2 });
        assert_eq!(g.request(4, 30, 0), Request::Queued { position: 3 });
        g.check().unwrap();
        assert_eq!(g.queue_position(4), Some(3));
        assert_eq!(g.oldest_wait_us(50), Some(40));
        assert_eq!(g.queue().collect::<Vec<_>>(), vec![2, 3, 4]);
        // FIFO hand-off, one waiter per release.
        assert_eq!(f.release(0, 100), vec![2]);
        assert_eq!(f.release(1, 110), vec![3]);
        assert_eq!(f.release(2, 120), vec![4]);
        assert!(f.gate().is_admitted(4));
        let h = *f.gate().header();
        assert_eq!(h.counters.admitted, 5);
        assert_eq!(h.counters.waited, 3);
        assert_eq!(h.counters.wait_time_us, 90 + 90 + 90);
        assert_eq!(h.waits.total(), 3);
    }

    #[test]
    fn asking_twice_changes_nothing() {
        let mut f = Fixture::new(3, 1);
        let mut g = f.gate();
        assert_eq!(g.request(0, 0, 0), Request::Admitted);
        assert_eq!(g.request(0, 0, 0), Request::Admitted);
        assert_eq!(g.request(1, 0, 0), Request::Queued { position: 1 });
        assert_eq!(g.request(2, 0, 0), Request::Queued { position: 2 });
        assert_eq!(g.request(1, 5, 0), Request::Queued { position: 1 });
        assert_eq!(g.slot(1).times_parked, 1);
        assert_eq!((g.header().holders, g.header().queued), (1, 2));
        g.check().unwrap();
    }

    #[test]
    fn no_barging_when_someone_waits() {
        let mut f = Fixture::new(4, 1);
        let mut g = f.gate();
        assert_eq!(g.request(0, 0, 0), Request::Admitted);
        assert_eq!(g.request(1, 0, 0), Request::Queued { position: 1 });
        // The ticket goes to 1 directly: a newcomer cannot take it.
        let woken = f.release(0, 5);
        assert_eq!(woken, vec![1]);
        assert_eq!(f.gate().request(2, 6, 0), Request::Queued { position: 1 });
        f.gate().check().unwrap();
    }

    #[test]
    fn rejects_when_the_queue_is_full() {
        let mut f = Fixture::new(5, 1);
        let mut g = f.gate();
        g.request(0, 0, 2);
        g.request(1, 0, 2);
        g.request(2, 0, 2);
        assert_eq!(g.request(3, 0, 2), Request::Rejected { queued: 2 });
        assert_eq!(g.slot(3).state, SlotState::Idle);
        assert_eq!(g.header().counters.rejected, 1);
        g.check().unwrap();
    }

    #[test]
    fn abandon_from_the_middle_keeps_the_queue_whole() {
        let mut f = Fixture::new(5, 1);
        let mut g = f.gate();
        g.request(0, 0, 0);
        for i in 1..5 {
            g.request(i, i as i64, 0);
        }
        assert!(g.abandon(2, 10, Abandon::Timeout));
        assert!(g.abandon(4, 10, Abandon::Cancel)); // the tail
        assert!(g.abandon(1, 10, Abandon::ClientLost)); // the head
        assert!(!g.abandon(1, 10, Abandon::Cancel)); // not queued any more
        g.check().unwrap();
        assert_eq!(g.queue().collect::<Vec<_>>(), vec![3]);
        let c = g.header().counters;
        assert_eq!((c.timeouts, c.cancels, c.clients_lost), (1, 1, 1));
        // The abandoned waits are in the histogram too: 8, 6 and 9 µs.
        assert_eq!(g.header().waits.total(), 3);
        assert_eq!(g.header().waits.max_us, 9);
        assert_eq!(f.release(0, 20), vec![3]);
    }

    #[test]
    fn abandon_after_hand_off_reports_the_admission() {
        let mut f = Fixture::new(3, 1);
        f.gate().request(0, 0, 0);
        f.gate().request(1, 0, 0);
        f.release(0, 1);
        // Slot 1's wait was interrupted just as it was handed the ticket.
        assert!(!f.gate().abandon(1, 2, Abandon::Cancel));
        assert!(f.gate().is_admitted(1));
        assert_eq!(f.release(1, 3), Vec::<usize>::new());
        assert_eq!(f.gate().header().holders, 0);
    }

    #[test]
    fn detach_cleans_up_any_state() {
        let mut f = Fixture::new(4, 1);
        let mut g = f.gate();
        g.request(0, 0, 0);
        g.request(1, 0, 0);
        g.request(2, 0, 0);
        let mut woken = vec![];
        g.detach(1, 5, &mut |w| woken.push(w)); // parked, exits
        g.detach(0, 6, &mut |w| woken.push(w)); // holder, exits
        assert_eq!(woken, vec![2]);
        g.check().unwrap();
        assert_eq!(g.slot(0).state, SlotState::Free);
        assert_eq!(g.header().counters.exits, 1);
        g.detach(2, 7, &mut |_| {});
        let h = g.header();
        assert_eq!((h.holders, h.queued), (0, 0));
    }

    #[test]
    fn raising_the_limit_admits_as_many_as_fit() {
        let mut f = Fixture::new(6, 1);
        let mut g = f.gate();
        for i in 0..6 {
            g.request(i, 0, 0);
        }
        let mut woken = vec![];
        g.set_limit(3, 3, 1, &mut |w| woken.push(w));
        assert_eq!(woken, vec![1, 2]);
        g.check().unwrap();
        // Lowering it admits nobody until holders fall below it.
        g.set_limit(1, 1, 2, &mut |_| unreachable!());
        assert_eq!(f.release(0, 3), Vec::<usize>::new());
        assert_eq!(f.release(1, 3), Vec::<usize>::new());
        assert_eq!(f.release(2, 3), vec![3]);
    }

    #[test]
    fn tickets_stay_between_limit_and_ceiling() {
        let mut f = Fixture::new(2, 2);
        let mut g = f.gate();
        g.set_tickets(5, 0, &mut |_| {});
        assert_eq!(g.header().tickets, 5);
        g.set_limit(2, 3, 0, &mut |_| {});
        assert_eq!(g.header().tickets, 3);
        g.set_tickets(0, 0, &mut |_| {});
        assert_eq!(g.header().tickets, 2);
        g.set_limit(4, 0, 0, &mut |_| {});
        assert_eq!(g.header().tickets, 4);
    }

    #[test]
    fn overflow_admission_goes_over_the_limit_and_is_taken_back() {
        let mut f = Fixture::new(4, 1);
        let mut g = f.gate();
        g.request(0, 0, 0);
        g.request(1, 0, 0);
        g.request(2, 0, 0);
        assert!(g.overflow_admit(2, 1));
        assert!(!g.overflow_admit(2, 1));
        assert_eq!(g.header().holders, 2);
        assert_eq!(g.header().counters.overflow, 1);
        assert!(g.slot(2).overflow);
        g.check().unwrap();
        // Holders (2) exceed tickets (1): the first release re-issues nothing.
        assert_eq!(f.release(0, 2), Vec::<usize>::new());
        assert_eq!(f.release(2, 3), vec![1]);
    }

    #[test]
    fn exempt_slots_are_never_queued_and_switch_between_transactions() {
        let mut f = Fixture::new(2, 1);
        let mut g = f.gate();
        g.attach(1, 77, true);
        assert_eq!(g.slot(1).state, SlotState::Exempt);
        g.set_exempt(1, false);
        assert_eq!(g.slot(1).state, SlotState::Idle);
        g.request(1, 0, 0);
        g.set_exempt(1, true); // ignored while admitted
        assert_eq!(g.slot(1).state, SlotState::Admitted);
    }

    #[test]
    fn per_session_accounting_and_reset() {
        let mut f = Fixture::new(2, 1);
        f.gate().request(0, 0, 0);
        f.gate().request(1, 100, 0);
        f.release(0, 400);
        let s = *f.gate().slot(1);
        assert_eq!((s.xacts_admitted, s.times_parked, s.wait_total_us, s.last_wait_us), (1, 1, 300, 300));
        f.gate().reset_stats(500);
        let g = f.gate();
        assert_eq!(g.header().counters, Counters::default());
        assert_eq!(g.header().stats_reset_us, 500);
        assert_eq!(g.slot(1).xacts_admitted, 0);
        assert_eq!(g.header().holders, 1, "reset keeps the live state");
    }

    /// A deterministic random walk over every operation, checking the
    /// invariants after each step and FIFO order of admissions.
    #[test]
    fn random_walk_keeps_every_invariant() {
        let n = 40;
        let mut f = Fixture::new(n, 3);
        let mut rng = 0x9E3779B97F4A7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut order: Vec<usize> = vec![]; // expected admission order of waiters
        for step in 0..200_000i64 {
            let i = (next() % n as u64) as usize;
            let mut woken = vec![];
            let mut g = f.gate();
            match (g.slot(i).state, next() % 10) {
                (SlotState::Idle, _) => {
                    if let Request::Queued { .. } = g.request(i, step, 8) {
                        order.push(i)
                    }
                }
                (SlotState::Queued, 0) => {
                    g.abandon(i, step, Abandon::Cancel);
                    order.retain(|&x| x != i);
                }
                (SlotState::Queued, 1) => {
                    g.overflow_admit(i, step);
                    order.retain(|&x| x != i);
                }
                (SlotState::Admitted, 0..=6) => {
                    g.release(i, step, &mut |w| woken.push(w));
                }
                (SlotState::Admitted | SlotState::Queued, 7) => {
                    g.detach(i, step, &mut |w| woken.push(w));
                    order.retain(|&x| x != i);
                    g.attach(i, 1, false);
                }
                (_, 8) => {
                    let t = 1 + (next() % 6) as u32;
                    g.set_limit(t, t + 2, step, &mut |w| woken.push(w));
                }
                (_, 9) => {
                    let now = g.header().holders + g.header().queued;
                    assert!(g.take_demand_peak() >= now, "demand peak below the present demand");
                }
                _ => {}
            }
            for w in woken {
                assert_eq!(order.first(), Some(&w), "hand-off out of FIFO order");
                order.remove(0);
            }
            f.gate().check().unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
    }
}
