//! Every `pg_gatekeeper.*` setting: storage, registration and typed accessors.
//!
//! Contexts follow one rule: POSTMASTER for what sizes shared memory, SIGHUP
//! for cluster policy, SUSET for what could step around the gate.
//! Out-of-range and malformed values are refused by PostgreSQL itself with
//! SQLSTATE 22023; the check hooks here add a HINT for the values that need
//! more than a range check.

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString};

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;

use gatekeeper_core::classes::{self, ClassDef};
use gatekeeper_core::{peers, text};

use crate::backend_local::BackendLocal;

/// Gate this session's transactions. SUSET: only a superuser can step around the gate.
static ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Target number of running transactions; 0 derives it from the CPUs.
static MAX_ACTIVE: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Running transactions per effective CPU, when `max_active` is 0: where the
/// automatic limit starts, and its floor.
static ACTIVE_PER_CPU: GucSetting<f64> = GucSetting::<f64>::new(DEFAULT_ACTIVE_PER_CPU);
/// How far per effective CPU the automatic limit may grow; at or below
/// `active_per_cpu`, it does not adapt.
static ACTIVE_PER_CPU_MAX: GucSetting<f64> = GucSetting::<f64>::new(DEFAULT_ACTIVE_PER_CPU_MAX);
/// Lend places only while lending raises throughput (the lending cap).
static LEND_BY_THROUGHPUT: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Lend tickets only while at least this fraction of CPU time is idle; 0 = no CPU condition.
static LEND_MIN_CPU_IDLE: GucSetting<f64> = GucSetting::<f64>::new(DEFAULT_LEND_MIN_CPU_IDLE);
/// Ceiling for admission tickets while holders wait on their clients; 0 = automatic.
static MAX_TICKETS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// The warm hand-off's bound (ms; 0 = first come, first served).
static WARM_HAND_OFF: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Longest wait in the queue, in ms; 0 waits forever.
static QUEUE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_QUEUE_TIMEOUT_MS);
/// Most sessions allowed in the queue; 0 = unlimited.
static MAX_QUEUED: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Superusers are never gated.
static EXEMPT_SUPERUSERS: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Comma-separated roles whose members are never gated.
static EXEMPT_ROLES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
/// The peers trusted with Citus's connections between nodes (`gatekeeper_core::peers`).
static CITUS_PEERS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"nodes"));
/// How often a parked session checks that its client is still there, in ms; 0 = never.
static CLIENT_CHECK_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);
/// Log every wait at least this long, in ms; -1 = off.
static LOG_MIN_WAIT: GucSetting<i32> = GucSetting::<i32>::new(-1);
/// How often the worker samples holders while sessions are queued, in ms.
static SAMPLE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_SAMPLE_INTERVAL_MS);
/// How often the worker records a history sample, in ms.
static HISTORY_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);
/// Number of history samples kept in shared memory.
static HISTORY_SIZE: GucSetting<i32> = GucSetting::<i32>::new(600);
/// A holder whose statement has run this long (lock waits included) stops
/// counting as running, in ms; 0 = never.
static STALL_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_STALL_TIMEOUT_MS);
/// While sessions are queued and no holder that counts has worked (been on
/// a CPU or done I/O) for this long, and nobody was admitted, the head of
/// the queue is admitted over the limit, in ms (docs/DESIGN.md §13).
static PROGRESS_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_PROGRESS_TIMEOUT_MS);
/// Entries of the query-shape table (docs/DESIGN.md §15); 0 = no shapes.
static MAX_SHAPES: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_SHAPES);
/// What the long lane does with long work.
static LONG_LANE: GucSetting<LongLane> = GucSetting::<LongLane>::new(LongLane::On);
/// The class definitions (see `gatekeeper_core::classes`).
static CLASSES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));
/// This session's class. SUSET: a session cannot move itself.
static CLASS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c""));

pub const DEFAULT_ACTIVE_PER_CPU: f64 = 4.0;
/// Room for transactions that wait far longer than they compute; the limit
/// only goes as high as throughput rises (the wait-bound benchmark, 5 ms
/// waits and 200 clients on 2 CPUs, levels off at about 30 per CPU).
pub const DEFAULT_ACTIVE_PER_CPU_MAX: f64 = 100.0;
pub const DEFAULT_LEND_MIN_CPU_IDLE: f64 = 0.0;
pub const DEFAULT_QUEUE_TIMEOUT_MS: i32 = 0;
pub const DEFAULT_SAMPLE_INTERVAL_MS: i32 = 5;
pub const DEFAULT_STALL_TIMEOUT_MS: i32 = 500;
/// Long enough that no work that moves, however slowly, triggers it (a
/// single admission in the scope restarts the clock), short enough that a
/// wait cycle through a client or another server costs about a second.
pub const DEFAULT_PROGRESS_TIMEOUT_MS: i32 = 1000;
/// As many shapes as pg_stat_statements keeps statements by default.
pub const DEFAULT_MAX_SHAPES: i32 = 5000;

/// `pg_gatekeeper.long_lane`: what the gate does with long work
/// (docs/DESIGN.md §15).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum LongLane {
    /// Shapes that ran long are admitted in the lane `long`, and holders
    /// of class `default` seen computing past `stall_timeout` move into it
    /// (unless a route or their session's own class chose `default`);
    /// computing holders are never relieved.
    #[name = c"on"]
    On,
    /// Shapes are learnt, and what `on` would route is counted and logged;
    /// admission and stall relief are as with `off`.
    #[name = c"dry_run"]
    DryRun,
    /// No automatic routing: every stalled holder is relieved, as before
    /// the lane existed. Routes set by hand still apply.
    #[name = c"off"]
    Off,
}
/// Upper bound of counts that size or index per-backend state (PostgreSQL's MAX_BACKENDS).
const MAX_BACKENDS: i32 = 0x3FFFF;

/// Bumped by the assign hooks of settings that decide exemption, so that
/// each backend re-decides after a reload.
static EXEMPTION_GENERATION: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));
/// Bumped when `citus_peers` changes in this process.
static CITUS_PEERS_GENERATION: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));
/// The value of `citus_peers` last assigned in this process.
static CITUS_PEERS_ASSIGNED: BackendLocal<RefCell<Option<Vec<u8>>>> = BackendLocal::new(RefCell::new(None));
/// Bumped by the assign hooks of the settings that make the limit and the
/// classes, so that a process that reloaded applies them.
static LIMIT_GENERATION: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));
/// This session's `pg_gatekeeper.class`, kept by its assign hook so that
/// reading it at each admission allocates nothing.
static CLASS_NAME: BackendLocal<RefCell<String>> = BackendLocal::new(RefCell::new(String::new()));

pub fn init() {
    GucRegistry::define_bool_guc(
        c"pg_gatekeeper.enabled",
        c"Gate this session's transactions through the admission queue.",
        c"Only superusers may change it: for their own session, or per role or database with ALTER ROLE/DATABASE ... SET.",
        &ENABLED,
        GucContext::Suset,
        GucFlags::default(),
    );
    // SAFETY: the assign hooks are #[pg_guard] extern fns that only touch a thread-local.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            c"pg_gatekeeper.max_active",
            c"Target number of concurrently running gated transactions (0 = automatic and adaptive).",
            c"With 0, the limit starts at ceil(effective CPUs x pg_gatekeeper.active_per_cpu), its floor, \
              and adapts to the gate's throughput, up to pg_gatekeeper.active_per_cpu_max per CPU. \
              A value above 0 is the limit, and turns adaptation off.",
            &MAX_ACTIVE,
            0,
            MAX_BACKENDS,
            GucContext::Sighup,
            GucFlags::default(),
            None,
            Some(assign_limit_int),
            None,
        );
        GucRegistry::define_float_guc_with_hooks(
            c"pg_gatekeeper.active_per_cpu",
            c"Running transactions per effective CPU when pg_gatekeeper.max_active is 0.",
            c"Where the automatic limit starts, and its floor.",
            &ACTIVE_PER_CPU,
            0.1,
            1000.0,
            GucContext::Sighup,
            GucFlags::default(),
            None,
            Some(assign_limit_real),
            None,
        );
        GucRegistry::define_float_guc_with_hooks(
            c"pg_gatekeeper.active_per_cpu_max",
            c"How far per effective CPU the automatic limit may grow while a larger limit raises throughput.",
            c"The automatic limit starts at, and never goes below, pg_gatekeeper.active_per_cpu per CPU. \
              At or below pg_gatekeeper.active_per_cpu (0 included), it does not adapt.",
            &ACTIVE_PER_CPU_MAX,
            0.0,
            1000.0,
            GucContext::Sighup,
            GucFlags::default(),
            None,
            Some(assign_limit_real),
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"pg_gatekeeper.max_tickets",
            c"Most admissions at once, counting holders that wait on their client (0 = no cap).",
            c"Holders that are idle in transaction lend their place; this caps how far, and caps the automatic limit's climb too \
              (never below its floor). 0 means no cap beyond the number of backends; a value at or below the limit disables lending.",
            &MAX_TICKETS,
            0,
            MAX_BACKENDS,
            GucContext::Sighup,
            GucFlags::default(),
            None,
            Some(assign_limit_int),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"pg_gatekeeper.classes",
            c"Admission classes, each with its own cap, reserve, weight, queue_timeout and max_queued.",
            c"A comma-separated list of name (key = value, ...); see the README.",
            &CLASSES,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_classes),
            Some(assign_classes),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"pg_gatekeeper.class",
            c"This session's admission class (empty or undefined: none, and the query's shape decides: default, the long lane or a route).",
            c"Set it per role or database with ALTER ROLE/DATABASE ... SET; only superusers can change it.",
            &CLASS,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_class),
            Some(assign_class),
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.stall_timeout",
        c"A holder whose statement has run this long and is waiting (on a lock, I/O, a sleep, another server) stops counting as running (0 = never).",
        c"Its place goes to the queue; it keeps its admission. At most max_active stalled holders stop counting at once. With long_lane on, one that computed this long is not relieved: it ran long (the long lane).",
        &STALL_TIMEOUT,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.progress_timeout",
        c"While sessions are queued and no holder has worked for this long, admit the queue's head over the limit.",
        c"The progress guarantee: a wait cycle through the queue (a client, dblink, another server) lasts about this long. Working means on a CPU or doing I/O; waiting on a lock, a client, a sleep or another server is not. One batch per timeout while nothing works, 1, 2, 4... at most max_active; a class at its cap is watched the same way.",
        &PROGRESS_TIMEOUT,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.queue_timeout",
        c"Longest time a transaction waits in the admission queue (0 = forever).",
        c"The wait ends with an ERROR (SQLSTATE 53000); the session stays usable.",
        &QUEUE_TIMEOUT,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.max_queued",
        c"Most sessions allowed to wait in the admission queue (0 = unlimited).",
        c"Requests beyond it are refused at once with SQLSTATE 53400.",
        &MAX_QUEUED,
        0,
        MAX_BACKENDS,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // SAFETY: the assign hook is a #[pg_guard] extern fn that only touches a thread-local.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            c"pg_gatekeeper.warm_hand_off",
            c"Hand a freed place to the newest waiter while the oldest has waited less than this (0 = first come, first served).",
            c"Newest first keeps a few backends busy and their caches warm, for more throughput and a lower median wait; \
              the sessions it passes over wait up to about this long, so the slowest percent of waits grows toward it.",
            &WARM_HAND_OFF,
            0,
            3_600_000,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            None,
            Some(assign_limit_int),
            None,
        );
    }
    // SAFETY: the assign hook is a #[pg_guard] extern fn that only touches a thread-local.
    unsafe {
        GucRegistry::define_bool_guc_with_hooks(
            c"pg_gatekeeper.exempt_superusers",
            c"Never gate sessions whose session user is a superuser.",
            c"",
            &EXEMPT_SUPERUSERS,
            GucContext::Sighup,
            GucFlags::default(),
            None,
            Some(assign_exempt_superusers),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"pg_gatekeeper.exempt_roles",
            c"Comma-separated roles whose members are never gated.",
            c"A member counts when it has the role's privileges or may SET ROLE to it. Roles that do not exist are ignored.",
            &EXEMPT_ROLES,
            GucContext::Sighup,
            GucFlags::from_bits_retain(pg_sys::GUC_LIST_INPUT as i32),
            Some(check_exempt_roles),
            Some(assign_exempt_roles),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"pg_gatekeeper.citus_peers",
            c"Peers whose connections named as Citus's (citus_internal gpid=N) ride without the gate.",
            c"A comma-separated list of nodes (the addresses in pg_dist_node), local (Unix-domain sockets), * (any peer), \
              IP addresses and CIDR ranges. Other connections that look like Citus's are gated like any client's.",
            &CITUS_PEERS,
            GucContext::Sighup,
            GucFlags::from_bits_retain(pg_sys::GUC_LIST_INPUT as i32),
            Some(check_citus_peers),
            Some(assign_citus_peers),
            None,
        );
    }
    GucRegistry::define_bool_guc(
        c"pg_gatekeeper.lend_by_throughput",
        c"Lend the places of holders that wait on their client only as far as lending raises throughput.",
        c"The worker caps the tickets and moves the cap by measuring transactions ended per second; off lends every such place, up to max_tickets.",
        &LEND_BY_THROUGHPUT,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_gatekeeper.lend_min_cpu_idle",
        c"Lend tickets to waiting sessions only while at least this fraction of CPU time is idle (0 = always).",
        c"",
        &LEND_MIN_CPU_IDLE,
        0.0,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.client_check_interval",
        c"How often a parked session checks that its client is still connected (0 = never).",
        c"",
        &CLIENT_CHECK_INTERVAL,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.log_min_wait",
        c"Log each admission wait at least this long (-1 = off).",
        c"",
        &LOG_MIN_WAIT,
        -1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.sample_interval",
        c"How often the worker samples admitted sessions while others are queued or holders are stalled.",
        c"",
        &SAMPLE_INTERVAL,
        1,
        10_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.history_interval",
        c"How often the worker records a sample into gatekeeper.history.",
        c"",
        &HISTORY_INTERVAL,
        10,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_enum_guc(
        c"pg_gatekeeper.long_lane",
        c"What the gate does with long work: on, dry_run or off.",
        c"on: transactions whose first query ran long recently are admitted in the class long, capped while other work waits, and computing holders are never relieved. dry_run: only count and log what on would route. off: relieve every stalled holder, as before.",
        &LONG_LANE,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.max_shapes",
        c"Number of query shapes the gate remembers (0 = none).",
        c"A shape is a role, a database and the query id of a transaction's first gated statement (a route by hand takes one too); the least recently seen are evicted.",
        &MAX_SHAPES,
        0,
        gatekeeper_core::route_file::MAX_ROUTES as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_gatekeeper.history_size",
        c"Number of samples kept in gatekeeper.history (0 = none).",
        c"",
        &HISTORY_SIZE,
        0,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: called once from _PG_init with a static, NUL-terminated prefix.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"pg_gatekeeper".as_ptr()) };
}

pub fn enabled() -> bool {
    ENABLED.get()
}
pub fn max_active() -> u32 {
    MAX_ACTIVE.get() as u32
}
pub fn active_per_cpu() -> f64 {
    ACTIVE_PER_CPU.get()
}
pub fn active_per_cpu_max() -> f64 {
    ACTIVE_PER_CPU_MAX.get()
}
pub fn lend_by_throughput() -> bool {
    LEND_BY_THROUGHPUT.get()
}
pub fn lend_min_cpu_idle() -> f64 {
    LEND_MIN_CPU_IDLE.get()
}
pub fn max_tickets() -> u32 {
    MAX_TICKETS.get() as u32
}
pub fn queue_timeout_ms() -> u32 {
    QUEUE_TIMEOUT.get() as u32
}
pub fn warm_hand_off_ms() -> u32 {
    WARM_HAND_OFF.get() as u32
}
pub fn max_queued() -> u32 {
    MAX_QUEUED.get() as u32
}
pub fn exempt_superusers() -> bool {
    EXEMPT_SUPERUSERS.get()
}
pub fn client_check_interval_ms() -> u32 {
    CLIENT_CHECK_INTERVAL.get() as u32
}
pub fn log_min_wait_ms() -> i32 {
    LOG_MIN_WAIT.get()
}
/// `sample_interval` in microseconds.
pub fn sample_interval_us() -> i64 {
    SAMPLE_INTERVAL.get() as i64 * 1000
}
pub fn history_interval_ms() -> u32 {
    HISTORY_INTERVAL.get() as u32
}
/// `history_interval` in microseconds.
pub fn history_interval_us() -> i64 {
    HISTORY_INTERVAL.get() as i64 * 1000
}
pub fn history_size() -> usize {
    HISTORY_SIZE.get() as usize
}
pub fn max_shapes() -> usize {
    MAX_SHAPES.get() as usize
}
pub fn long_lane() -> LongLane {
    LONG_LANE.get()
}
/// `progress_timeout` in microseconds.
pub fn progress_timeout_us() -> i64 {
    PROGRESS_TIMEOUT.get() as i64 * 1000
}
/// `stall_timeout` in microseconds; 0 = stall relief off.
pub fn stall_timeout_us() -> i64 {
    STALL_TIMEOUT.get() as i64 * 1000
}

/// The class definitions now in force. Allocates; for reloads only.
/// The check hook has accepted the value, so it parses.
pub fn classes() -> Vec<ClassDef> {
    CLASSES.get().and_then(|s| classes::parse(&setting_text(&s)).ok()).unwrap_or_default()
}

/// Run `f` with this session's class name (empty: none). `f` must not log
/// or otherwise serve interrupts: a cancel or terminate served inside it
/// would leave the name borrowed for good (an ERROR or FATAL unwinds no
/// Rust frame), and the next assignment of `pg_gatekeeper.class` (a SET, or
/// the abort that undoes one) would then fail.
pub fn with_class_name<R>(f: impl FnOnce(&str) -> R) -> R {
    CLASS_NAME.with(|c| f(&c.borrow()))
}

/// A counter that changes whenever a setting that makes the limit or the
/// classes changes in this process.
pub fn limit_generation() -> u64 {
    LIMIT_GENERATION.with(|g| g.get())
}

fn bump_limit_generation() {
    LIMIT_GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
}

/// The roles listed in `exempt_roles`, parsed as PostgreSQL identifiers.
/// Allocates; call it only when exemption must be decided again.
/// The role names as PostgreSQL's catalogs hold them: bytes in the
/// database's encoding, which need not be UTF-8.
pub fn exempt_roles() -> Vec<std::ffi::CString> {
    EXEMPT_ROLES.get().and_then(|s| split_identifiers(&s)).unwrap_or_default()
}

/// A counter that changes whenever a setting that decides exemption changes.
pub fn exemption_generation() -> u64 {
    EXEMPTION_GENERATION.with(|g| g.get())
}

fn bump_exemption_generation() {
    EXEMPTION_GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
}

/// The peers trusted with Citus's connections between nodes. Allocates; call it
/// only when a session's trust must be decided again.
pub fn citus_peers() -> peers::Peers {
    CITUS_PEERS.get().and_then(|s| peers::parse(&setting_text(&s)).ok()).unwrap_or_default()
}

/// A counter that changes whenever `citus_peers` changes.
pub fn citus_peers_generation() -> u64 {
    CITUS_PEERS_GENERATION.with(|g| g.get())
}

/// Split a comma-separated identifier list the way PostgreSQL does
/// (`SplitIdentifierString`: quoting, case folding). `None` if malformed.
fn split_identifiers(s: &CStr) -> Option<Vec<std::ffi::CString>> {
    // SplitIdentifierString scribbles on its input: give it a palloc'd copy.
    // SAFETY: pstrdup copies a NUL-terminated string into the current memory
    // context; SplitIdentifierString only reads and modifies that copy and
    // returns a List of pointers into it, which we copy out before returning.
    unsafe {
        let raw = pg_sys::pstrdup(s.as_ptr());
        let mut list: *mut pg_sys::List = std::ptr::null_mut();
        let ok = pg_sys::SplitIdentifierString(raw, b',' as _, &mut list);
        let mut out = vec![];
        if ok && !list.is_null() {
            let n = (*list).length;
            for k in 0..n {
                let cell = (*list).elements.add(k as usize);
                let name = CStr::from_ptr((*cell).ptr_value as *const std::ffi::c_char);
                out.push(name.to_owned());
            }
        }
        if !list.is_null() {
            pg_sys::list_free(list);
        }
        pg_sys::pfree(raw.cast());
        ok.then_some(out)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_exempt_roles(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // Role names are any bytes of the server's encoding: checked as they are.
    // SAFETY: called as a string check hook.
    let text = unsafe { proposed_bytes(newval) };
    let Ok(c) = CString::new(text) else { return true };
    if split_identifiers(&c).is_some() {
        return true;
    }
    // SAFETY: called as a check hook, returning false.
    unsafe {
        refuse(
            "The value is not a valid list of role names.",
            c"List role names separated by commas, double-quoting names that contain commas, spaces or capitals, e.g. 'app_admin, \"Reporting\"'.",
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_exempt_roles(_newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    bump_exemption_generation();
}

#[pg_guard]
unsafe extern "C-unwind" fn check_citus_peers(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: called as a string check hook.
    let text = unsafe { proposed(newval) };
    match peers::parse(&text) {
        Ok(_) => true,
        // SAFETY: called as a check hook, returning false.
        Err(detail) => unsafe {
            refuse(
                &detail,
                c"List nodes, local, * or IP addresses and CIDR ranges separated by commas, e.g. 'nodes, 10.0.0.0/24'.",
            )
        },
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_citus_peers(newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    // A reload assigns every setting of the file again, changed or not:
    // only a new value sends the sessions back to the catalog and the
    // resolver.
    // SAFETY: called as a string assign hook: newval is NUL-terminated or NULL.
    let text = if newval.is_null() { vec![] } else { unsafe { CStr::from_ptr(newval) }.to_bytes().to_vec() };
    let changed = CITUS_PEERS_ASSIGNED.with(|v| v.replace(Some(text.clone())) != Some(text));
    if changed {
        CITUS_PEERS_GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_exempt_superusers(_newval: bool, _extra: *mut std::ffi::c_void) {
    bump_exemption_generation();
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_limit_int(_newval: i32, _extra: *mut std::ffi::c_void) {
    bump_limit_generation();
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_limit_real(_newval: f64, _extra: *mut std::ffi::c_void) {
    bump_limit_generation();
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_classes(_newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    bump_limit_generation();
}

/// Refuse a check with SQLSTATE 22023, this DETAIL and this HINT.
///
/// # Safety
/// Only from a GUC check hook, which then returns false.
unsafe fn refuse(detail: &str, hint: &CStr) -> bool {
    let detail = CString::new(detail.replace('\0', " ")).unwrap_or_default();
    // SAFETY: the GUC_check_* strings are read by the caller right after we
    // return false; pstrdup puts them in the current memory context as guc.c expects.
    unsafe {
        pg_sys::GUC_check_errcode(pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as i32);
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
        pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
    }
    false
}

/// The proposed value of a string setting, as its bytes; empty for NULL.
///
/// # Safety
/// `newval` must be the pointer a string check hook receives.
unsafe fn proposed_bytes(newval: *mut *mut std::ffi::c_char) -> Vec<u8> {
    // SAFETY: PostgreSQL passes a valid pointer to a NUL-terminated string or NULL.
    unsafe {
        let val = *newval;
        if val.is_null() {
            vec![]
        } else {
            CStr::from_ptr(val).to_bytes().to_vec()
        }
    }
}

/// The proposed value of a string setting whose values are ASCII (class
/// definitions and names, peer lists), as text to parse and to quote in the
/// refusal, read as [`setting_text`] reads the value in force.
///
/// # Safety
/// `newval` must be the pointer a string check hook receives.
unsafe fn proposed(newval: *mut *mut std::ffi::c_char) -> String {
    // SAFETY: the caller's promise.
    text::utf8_or_escaped(&unsafe { proposed_bytes(newval) }).into_owned()
}

/// A string setting's value as text: its bytes where they are UTF-8, and
/// otherwise escaped (`\xNN`, which no value of ours accepts), the same in
/// every process whatever its database's encoding, so that the value a
/// check accepted is the value every process uses.
fn setting_text(value: &CStr) -> std::borrow::Cow<'_, str> {
    text::utf8_or_escaped(value.to_bytes())
}

#[pg_guard]
unsafe extern "C-unwind" fn check_classes(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: called as a string check hook.
    let text = unsafe { proposed(newval) };
    match classes::parse(&text) {
        Ok(_) => true,
        // SAFETY: called as a check hook, returning false.
        Err(e) => unsafe {
            refuse(
                &format!("Invalid class definitions: {e}."),
                c"Write a comma-separated list of name (key = value, ...), e.g. 'reporting (max_active = 2, queue_timeout = 30s), oltp (reserve = 4, weight = 3)'. Keys: max_active, reserve, weight, queue_timeout, max_queued.",
            )
        },
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_class(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: called as a string check hook.
    let name = unsafe { proposed(newval) };
    // A name that no definition could ever carry is refused; a well-formed
    // name that is not defined (now) counts as no class at admission.
    if name.is_empty() || classes::parse(&name).is_ok_and(|d| d.len() == 1 && d[0].name == name) {
        return true;
    }
    // SAFETY: called as a check hook, returning false.
    unsafe {
        refuse(
            &format!("\"{name}\" is not a valid class name."),
            c"Class names are lower-case letters, digits and underscores, starting with a letter or an underscore, at most 63 bytes, as defined in pg_gatekeeper.classes.",
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_class(newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    // SAFETY: PostgreSQL passes the new, checked value (or NULL).
    let name =
        if newval.is_null() { String::new() } else { setting_text(unsafe { CStr::from_ptr(newval) }).into_owned() };
    CLASS_NAME.with(|c| *c.borrow_mut() = name);
}
