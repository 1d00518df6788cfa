//! State private to this backend, kept in plain process statics.
//!
//! A PostgreSQL backend (and the worker) runs its code on one thread, and
//! this library starts none, so a process-wide static is already the
//! backend's own. `thread_local!` would give the same meaning at a price on
//! the hot path: in a shared library every access goes through
//! `__tls_get_addr`, which a profile of TPC-B at 8 clients put at about
//! 1 µs per transaction (docs/DESIGN.md §15). [`BackendLocal::with`] keeps
//! `thread_local!`'s shape, so a use reads the same as before.

/// A value owned by this backend's one thread. Holds `Cell`s and
/// `RefCell`s, never anything shared with other processes (that is
/// `shmem`'s).
pub struct BackendLocal<T>(T);

// SAFETY: PostgreSQL runs a backend's (and a background worker's) code on
// its main thread only, pgrx refuses calls into PostgreSQL from any other,
// and this library spawns no thread: the value is never reached from two
// threads, which is what `Sync` promises to allow.
unsafe impl<T> Sync for BackendLocal<T> {}

impl<T> BackendLocal<T> {
    pub const fn new(value: T) -> Self {
        BackendLocal(value)
    }

    /// Borrow the value, as `LocalKey::with` does.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.0)
    }
}
