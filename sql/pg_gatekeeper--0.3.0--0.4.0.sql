-- pg_gatekeeper 0.3.0 -> 0.4.0: status(), sessions() and history() call
-- entry points of their own, named after the version whose row each
-- returns (status_0_2_wrapper, sessions_0_2_wrapper, history_0_3_wrapper),
-- so that the names that 0.1.0 to 0.3.0 call keep the rows those versions
-- declare. No row changes: CREATE OR REPLACE keeps the functions, the views
-- over them, views of yours over those, and every privilege on them.
\echo Use "ALTER EXTENSION pg_gatekeeper UPDATE TO '0.4.0'" to load this file. \quit

CREATE OR REPLACE FUNCTION gatekeeper."status"() RETURNS TABLE (
	"max_active" INT,  /* i32 */
	"limit_source" TEXT,  /* & '_ str */
	"effective_cpus" double precision,  /* f64 */
	"tickets" INT,  /* i32 */
	"ticket_ceiling" INT,  /* i32 */
	"admitted" INT,  /* i32 */
	"active" INT,  /* i32 */
	"running" INT,  /* i32 */
	"stalled" INT,  /* i32 */
	"cpu_idle" double precision,  /* f64 */
	"idle_in_transaction" INT,  /* i32 */
	"queued" INT,  /* i32 */
	"idle" INT,  /* i32 */
	"exempt" INT,  /* i32 */
	"total_sessions" INT,  /* i32 */
	"admitted_total" bigint,  /* i64 */
	"waited_total" bigint,  /* i64 */
	"overflow_total" bigint,  /* i64 */
	"queue_timeouts_total" bigint,  /* i64 */
	"rejected_total" bigint,  /* i64 */
	"queue_cancels_total" bigint,  /* i64 */
	"queue_exits_total" bigint,  /* i64 */
	"clients_lost_total" bigint,  /* i64 */
	"stalls_total" bigint,  /* i64 */
	"wait_time_total_ms" double precision,  /* f64 */
	"oldest_wait_ms" double precision,  /* Option < f64 > */
	"wait_p50_ms" double precision,  /* Option < f64 > */
	"wait_p95_ms" double precision,  /* Option < f64 > */
	"wait_p99_ms" double precision,  /* Option < f64 > */
	"wait_max_ms" double precision,  /* Option < f64 > */
	"stats_reset" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'status_0_2_wrapper';

CREATE OR REPLACE FUNCTION gatekeeper."sessions"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"datname" TEXT,  /* Option < String > */
	"usename" TEXT,  /* Option < String > */
	"application_name" TEXT,  /* Option < String > */
	"class" TEXT,  /* Option < String > */
	"state" TEXT,  /* & '_ str */
	"queue_position" INT,  /* Option < i32 > */
	"wait_start" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"wait_ms" double precision,  /* Option < f64 > */
	"counts_as_running" bool,  /* Option < bool > */
	"stalled" bool,  /* Option < bool > */
	"overflow" bool,  /* Option < bool > */
	"transactions_admitted" bigint,  /* Option < i64 > */
	"times_parked" bigint,  /* Option < i64 > */
	"wait_total_ms" double precision,  /* Option < f64 > */
	"last_wait_ms" double precision  /* Option < f64 > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'sessions_0_2_wrapper';

CREATE OR REPLACE FUNCTION gatekeeper."history"() RETURNS TABLE (
	"sample_time" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"max_active" INT,  /* i32 */
	"tickets" INT,  /* i32 */
	"admitted" INT,  /* i32 */
	"running" INT,  /* i32 */
	"idle_in_transaction" INT,  /* i32 */
	"queued" INT,  /* i32 */
	"idle" INT,  /* i32 */
	"admissions_per_sec" double precision,  /* f64 */
	"queue_timeouts" bigint,  /* i64 */
	"wait_p50_ms" double precision,  /* Option < f64 > */
	"wait_p99_ms" double precision,  /* Option < f64 > */
	"limit_reason" TEXT  /* & '_ str */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'history_0_3_wrapper';
