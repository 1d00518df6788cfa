//! pg_gatekeeper's admission core.
//!
//! Everything here is plain Rust with no PostgreSQL dependency, so that the
//! rules of the gate can be unit-tested with `cargo test -p gatekeeper_core`.
//! The extension places these `#[repr(C)]` structures in shared memory and
//! calls them while holding its LWLock; nothing in this crate locks, sleeps,
//! allocates on the hot path or knows about processes.
//!
//! - [`admission`]: the per-session slots, the per-class FIFO queues,
//!   tickets, stalls and hand-off.
//! - [`breaker`]: which lock waiters the deadlock breaker asks about.
//! - [`classes`]: parsing and checking the class definitions.
//! - [`histogram`]: the fixed-bucket wait-time histogram and its percentiles.
//! - [`controller`]: how the worker moves the ticket count.
//! - [`adaptive`]: how the worker moves the automatic limit.
//! - [`lending`]: how far the worker lends, judged on throughput.
//! - [`cpu_clock`]: how long a transaction computed, with few reads of the
//!   CPU clock.
//! - [`cpus`]: parsing CPU affinity and cgroup quotas into effective CPUs.
//! - [`history`]: the fixed-size ring of periodic samples.
//! - [`peers`]: which peers' connections named as Citus's ride without
//!   the gate (`citus_peers`).
//! - [`progress`]: the progress guarantee: when a stuck queue's head is
//!   admitted over the limit.
//! - [`shapes`]: query shapes and the long lane they are routed to.
//! - [`working`]: which holders do work, for the adaptive limit.
#![forbid(unsafe_code)]

pub mod adaptive;
pub mod admission;
pub mod breaker;
pub mod classes;
pub mod controller;
pub mod copy;
pub mod cpu_clock;
pub mod cpus;
pub mod histogram;
pub mod history;
pub mod lending;
pub mod peers;
pub mod progress;
pub mod route_file;
pub mod shapes;
pub mod text;
pub mod working;

pub use admission::{Abandon, Full, Gate, GateHeader, Request, Slot, SlotState};
