//! How a parked backend sleeps.
//!
//! It sleeps on its latch, which the backend that hands it a ticket sets
//! (as do cancel, terminate and timeouts). It must also notice a client
//! that hangs up while it waits, since nothing else reads its socket then.
//!
//! Where the platform can report a closed socket (`WL_SOCKET_CLOSED`: epoll
//! on Linux), the backend sleeps on PostgreSQL's own `FeBeWaitSet` (its
//! client socket, its latch and the postmaster), watching the socket only
//! for the peer hanging up. A lost client is then noticed at once, and a
//! parked session costs nothing while it waits: polling instead would wake
//! every parked backend once per interval, 1,000 wake-ups a second for
//! 1,000 parked sessions at the default of one second.
//!
//! Elsewhere (or with no client socket) it sleeps on its latch alone and
//! polls the client with `pq_check_connection` every
//! `client_check_interval`. `pq_check_connection` may reset the latch, so
//! the caller polls *before* it checks whether it was admitted, never
//! between that check and the sleep.

use pgrx::pg_sys;

unsafe extern "C-unwind" {
    /// libpq/libpq.h (PostgreSQL 14+): false when the client has gone away.
    fn pq_check_connection() -> bool;
    /// libpq/libpq.h: the client socket, MyLatch and postmaster death.
    static mut FeBeWaitSet: *mut pg_sys::WaitEventSet;
}

/// libpq/libpq.h `FeBeWaitSetSocketPos`.
const FEBE_SOCKET_POS: i32 = 0;
/// libpq/libpq.h `FeBeWaitSetNEvents`.
const FEBE_NEVENTS: usize = 3;

/// Why a sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// The latch was set, or the time was up: look at the state again.
    Latch,
    /// The client hung up.
    ClientGone,
}

/// One wait in the queue.
pub struct Sleeper {
    /// Sleep on the client socket too (it reports a hang-up by itself).
    watch_socket: bool,
    /// Poll the client this often (when not watching the socket; 0 = never).
    poll_ms: u32,
    next_poll_us: i64,
}

impl Sleeper {
    /// `check_ms` is `client_check_interval`: 0 never looks at the client.
    /// Times here are on the monotonic clock (`crate::mono_us`).
    pub fn new(check_ms: u32, mono_us: i64) -> Sleeper {
        // A backend with no client socket (single-user mode) has nothing to
        // watch or poll: pq_check_connection would use the null wait set.
        // SAFETY: reads of globals set at backend start.
        let remote = unsafe { !FeBeWaitSet.is_null() && pg_sys::whereToSendOutput == pg_sys::CommandDest::DestRemote };
        // SAFETY: WaitEventSetCanReportClosed only reports how latch.c was built.
        let watch_socket = check_ms > 0 && remote && unsafe { pg_sys::WaitEventSetCanReportClosed() };
        Sleeper {
            watch_socket,
            poll_ms: if watch_socket || !remote { 0 } else { check_ms },
            next_poll_us: mono_us + check_ms as i64 * 1000,
        }
    }

    /// Poll the client when a poll is due. Call it before looking at the
    /// admission: a poll may reset the latch.
    pub fn client_gone(&mut self, mono_us: i64) -> bool {
        if self.poll_ms == 0 || mono_us < self.next_poll_us {
            return false;
        }
        self.next_poll_us = mono_us + self.poll_ms as i64 * 1000;
        // SAFETY: pq_check_connection polls this backend's own client socket.
        // It can elog(ERROR) (a failed epoll call): the guarded boundary
        // turns that into an unwind, so the caller's `Parked` guard still
        // leaves the queue, instead of a longjmp over the Rust frames.
        #[allow(ffi_unwind_calls)] // inside pgrx's guard
        let connected = unsafe { pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| pq_check_connection()) };
        !connected
    }

    /// Sleep until the latch is set, the client hangs up, or `max_ms` pass.
    pub fn sleep(&mut self, mono_us: i64, max_ms: i64) -> Woke {
        let mut ms = max_ms;
        if self.poll_ms > 0 {
            ms = ms.min((self.next_poll_us - mono_us) / 1000);
        }
        let ms = ms.max(1);
        if self.watch_socket {
            self.sleep_on_socket(ms)
        } else {
            // SAFETY: waiting on our own latch, as every PostgreSQL wait loop does.
            let rc = unsafe {
                let rc = pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_POSTMASTER_DEATH) as i32,
                    ms as _,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
                rc
            };
            if rc as u32 & pg_sys::WL_POSTMASTER_DEATH != 0 {
                postmaster_died();
            }
            Woke::Latch
        }
    }

    fn sleep_on_socket(&mut self, ms: i64) -> Woke {
        // SAFETY: FeBeWaitSet is this backend's own wait set (checked non-null
        // in new). Every PostgreSQL wait on it sets the socket filter it needs
        // first (secure_read, secure_write, pq_check_connection), so leaving it
        // at WL_SOCKET_CLOSED is what pq_check_connection does too. WaitEvent
        // is plain data, for which all zeroes is a valid value.
        let (n, events) = unsafe {
            pg_sys::ModifyWaitEvent(FeBeWaitSet, FEBE_SOCKET_POS, pg_sys::WL_SOCKET_CLOSED, std::ptr::null_mut());
            let mut events: [pg_sys::WaitEvent; FEBE_NEVENTS] = std::mem::zeroed();
            let n = pg_sys::WaitEventSetWait(
                FeBeWaitSet,
                ms as _,
                events.as_mut_ptr(),
                FEBE_NEVENTS as i32,
                pg_sys::PG_WAIT_EXTENSION,
            );
            (n.max(0) as usize, events)
        };
        let mut woke = Woke::Latch;
        for e in &events[..n.min(FEBE_NEVENTS)] {
            if e.events & pg_sys::WL_POSTMASTER_DEATH != 0 {
                postmaster_died();
            }
            if e.events & pg_sys::WL_LATCH_SET != 0 {
                // SAFETY: resetting our own latch before the caller re-checks
                // its state is the standard latch protocol.
                unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
            }
            if e.events & pg_sys::WL_SOCKET_CLOSED != 0 {
                woke = Woke::ClientGone;
            }
        }
        woke
    }
}

/// End the session as `secure_read` does when the postmaster dies while it
/// waits for the client: FATAL, SQLSTATE 57P01. The same on both sleeps, so
/// that the client of a parked session gets the same message whichever one
/// it was in.
fn postmaster_died() -> ! {
    pgrx::ereport!(
        pgrx::PgLogLevel::FATAL,
        pgrx::PgSqlErrorCode::ERRCODE_ADMIN_SHUTDOWN,
        "terminating connection due to unexpected postmaster exit"
    );
    unreachable!("a FATAL report does not return")
}
