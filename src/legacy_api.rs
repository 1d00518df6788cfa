//! The entry points that released install scripts name, each returning the
//! row its script declares.
//!
//! A C function's declaration names its symbol (`AS 'MODULE_PATHNAME',
//! 'status_wrapper'`), and a released script keeps the names it shipped
//! with. Between installing a new library and `ALTER EXTENSION pg_gatekeeper
//! UPDATE`, an older version's views call this library by those names, so
//! each name must keep returning the row its scripts declare. As
//! pg_stat_statements keeps `pg_stat_statements_1_2` to `_1_11` (and its
//! legacy `pg_stat_statements`, which tells 1.0 from 1.1 by the number of
//! columns), every row that a released script declares keeps an entry point:
//!
//! | symbol             | declared by  | row                                  |
//! |--------------------|--------------|--------------------------------------|
//! | `status_wrapper`   | 0.1.0        | 29 columns: 0.2.0's without `stalled` and `stalls_total` |
//! |                    | 0.2.0, 0.3.0 | 31 columns: [`api::status_0_2`]      |
//! | `sessions_wrapper` | 0.1.0        | 14 columns: 0.2.0's without `class` and `stalled` |
//! |                    | 0.2.0, 0.3.0 | 16 columns: [`api::sessions_0_2`]    |
//! | `history_wrapper`  | 0.1.0, 0.2.0 | 12 columns: 0.3.0's without `limit_reason` |
//! |                    | 0.3.0        | 13 columns: [`api::history_0_3`]     |
//!
//! Each of these names serves two rows, told apart by the number of
//! columns the caller's declaration has; any other number is an error, not
//! a row read with the wrong types. They return their rows in materialize
//! mode (a tuplestore), as pg_stat_statements does. From 0.4.0 on the
//! install script names one entry point per row (`status_0_2_wrapper`,
//! `sessions_0_2_wrapper`, `history_0_3_wrapper`, see `api`). The other
//! functions (`classes`, `limit_state`, `wait_histogram`, `reset`) have
//! kept their row, and their one entry point, since they came.

use pgrx::prelude::*;
use pgrx::{pg_sys, IntoHeapTuple};

use crate::{api, errors};

/// The caller's tuplestore, set up in materialize mode.
struct Rows {
    rsinfo: *mut pg_sys::ReturnSetInfo,
}

impl Rows {
    /// # Safety
    /// `fcinfo` is PostgreSQL's, for a call of a function declared with a
    /// row type (`RETURNS TABLE`).
    unsafe fn init(fcinfo: pg_sys::FunctionCallInfo) -> Rows {
        // SAFETY: InitMaterializedSRF checks that the caller accepts a
        // tuplestore (or raises an ERROR), then sets resultinfo's setResult
        // and setDesc, the declared row type, in the query's memory.
        unsafe {
            pg_sys::InitMaterializedSRF(fcinfo, 0);
            Rows { rsinfo: (*fcinfo).resultinfo.cast() }
        }
    }

    /// The number of columns the caller's declaration has.
    fn columns(&self) -> i32 {
        // SAFETY: set by InitMaterializedSRF in `init`.
        unsafe { (*(*self.rsinfo).setDesc).natts }
    }

    /// Store `rows`.
    ///
    /// # Safety
    /// `R` has the declared columns, in their order, with their types.
    unsafe fn put<R: IntoHeapTuple>(self, rows: impl Iterator<Item = R>) -> pg_sys::Datum {
        for row in rows {
            // SAFETY: setDesc is the declared row type, which R matches (the
            // caller's contract); tuplestore_puttuple copies the tuple.
            unsafe {
                let tuple = row.into_heap_tuple((*self.rsinfo).setDesc);
                pg_sys::tuplestore_puttuple((*self.rsinfo).setResult, tuple);
            }
        }
        pg_sys::Datum::from(0)
    }
}

/// `pg_finfo_<symbol>`: the version-1 calling convention
/// (PG_FUNCTION_INFO_V1), which PostgreSQL looks up next to each symbol.
macro_rules! finfo_v1 {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

finfo_v1!(pg_finfo_status_wrapper);
finfo_v1!(pg_finfo_sessions_wrapper);
finfo_v1!(pg_finfo_history_wrapper);

/// `gatekeeper.status()` of 0.1.0, 0.2.0 and 0.3.0.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn status_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this for `gatekeeper.status()`, declared
    // RETURNS TABLE; each arm's row is the one its scripts declare (the
    // install scripts in sql/, as released).
    unsafe {
        let rows = Rows::init(fcinfo);
        match rows.columns() {
            29 => rows.put(status_0_1()),
            31 => rows.put(api::status_0_2()),
            n => errors::row_mismatch("status_wrapper", "status", n, "29 columns (0.1.0) or 31 (0.2.0, 0.3.0)"),
        }
    }
}

/// `gatekeeper.sessions()` of 0.1.0, 0.2.0 and 0.3.0.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sessions_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in status_wrapper, for `gatekeeper.sessions()`.
    unsafe {
        let rows = Rows::init(fcinfo);
        match rows.columns() {
            14 => rows.put(sessions_0_1()),
            16 => rows.put(api::sessions_0_2()),
            n => errors::row_mismatch("sessions_wrapper", "sessions", n, "14 columns (0.1.0) or 16 (0.2.0, 0.3.0)"),
        }
    }
}

/// `gatekeeper.history()` of 0.1.0, 0.2.0 and 0.3.0.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn history_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in status_wrapper, for `gatekeeper.history()`.
    unsafe {
        let rows = Rows::init(fcinfo);
        match rows.columns() {
            12 => rows.put(history_0_1()),
            13 => rows.put(api::history_0_3()),
            n => errors::row_mismatch("history_wrapper", "history", n, "12 columns (0.1.0, 0.2.0) or 13 (0.3.0)"),
        }
    }
}

/// 0.1.0's `status()`: 0.2.0's row without `stalled` and `stalls_total`.
fn status_0_1() -> impl Iterator<Item = impl IntoHeapTuple> {
    api::status_0_2().map(
        |(
            max_active,
            limit_source,
            effective_cpus,
            tickets,
            ticket_ceiling,
            admitted,
            active,
            running,
            _stalled,
            cpu_idle,
            idle_in_transaction,
            queued,
            idle,
            exempt,
            total_sessions,
            admitted_total,
            waited_total,
            overflow_total,
            queue_timeouts_total,
            rejected_total,
            queue_cancels_total,
            queue_exits_total,
            clients_lost_total,
            _stalls_total,
            wait_time_total_ms,
            oldest_wait_ms,
            wait_p50_ms,
            wait_p95_ms,
            wait_p99_ms,
            wait_max_ms,
            stats_reset,
        )| {
            (
                max_active,
                limit_source,
                effective_cpus,
                tickets,
                ticket_ceiling,
                admitted,
                active,
                running,
                cpu_idle,
                idle_in_transaction,
                queued,
                idle,
                exempt,
                total_sessions,
                admitted_total,
                waited_total,
                overflow_total,
                queue_timeouts_total,
                rejected_total,
                queue_cancels_total,
                queue_exits_total,
                clients_lost_total,
                wait_time_total_ms,
                oldest_wait_ms,
                wait_p50_ms,
                wait_p95_ms,
                wait_p99_ms,
                wait_max_ms,
                stats_reset,
            )
        },
    )
}

/// 0.1.0's `sessions()`: 0.2.0's row without `class` and `stalled`.
fn sessions_0_1() -> impl Iterator<Item = impl IntoHeapTuple> {
    api::sessions_0_2().map(
        |(
            pid,
            datname,
            usename,
            application_name,
            _class,
            state,
            queue_position,
            wait_start,
            wait_ms,
            counts_as_running,
            _stalled,
            overflow,
            transactions_admitted,
            times_parked,
            wait_total_ms,
            last_wait_ms,
        )| {
            (
                pid,
                datname,
                usename,
                application_name,
                state,
                queue_position,
                wait_start,
                wait_ms,
                counts_as_running,
                overflow,
                transactions_admitted,
                times_parked,
                wait_total_ms,
                last_wait_ms,
            )
        },
    )
}

/// 0.1.0's and 0.2.0's `history()`: 0.3.0's row without `limit_reason`.
fn history_0_1() -> impl Iterator<Item = impl IntoHeapTuple> {
    api::history_0_3().map(
        |(
            sample_time,
            max_active,
            tickets,
            admitted,
            running,
            idle_in_transaction,
            queued,
            idle,
            admissions_per_sec,
            queue_timeouts,
            wait_p50_ms,
            wait_p99_ms,
            _limit_reason,
        )| {
            (
                sample_time,
                max_active,
                tickets,
                admitted,
                running,
                idle_in_transaction,
                queued,
                idle,
                admissions_per_sec,
                queue_timeouts,
                wait_p50_ms,
                wait_p99_ms,
            )
        },
    )
}
