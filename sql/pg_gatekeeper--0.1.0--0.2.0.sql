-- pg_gatekeeper 0.1.0 -> 0.2.0: stall relief and classes.
-- gatekeeper.status gains stalled and stalls_total, gatekeeper.sessions
-- gains class and stalled, and gatekeeper.classes is new. A set-returning
-- function's columns cannot change in place, so status() and sessions() and
-- their views are dropped and created again (without CASCADE: a view of
-- yours over them makes this fail, and nothing of yours is dropped).
\echo Use "ALTER EXTENSION pg_gatekeeper UPDATE TO '0.2.0'" to load this file. \quit

DROP VIEW gatekeeper.status;
DROP FUNCTION gatekeeper.status();
DROP VIEW gatekeeper.sessions;
DROP FUNCTION gatekeeper.sessions();

CREATE FUNCTION gatekeeper."status"() RETURNS TABLE (
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
AS 'MODULE_PATHNAME', 'status_wrapper';

CREATE FUNCTION gatekeeper."sessions"() RETURNS TABLE (
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
AS 'MODULE_PATHNAME', 'sessions_wrapper';

CREATE FUNCTION gatekeeper."classes"() RETURNS TABLE (
	"class" TEXT,  /* String */
	"defined" bool,  /* bool */
	"max_active" INT,  /* Option < i32 > */
	"reserve" INT,  /* i32 */
	"reserve_in_force" INT,  /* i32 */
	"weight" INT,  /* i32 */
	"queue_timeout_ms" bigint,  /* Option < i64 > */
	"max_queued" INT,  /* Option < i32 > */
	"admitted" INT,  /* i32 */
	"running" INT,  /* i32 */
	"stalled" INT,  /* i32 */
	"queued" INT,  /* i32 */
	"oldest_wait_ms" double precision,  /* Option < f64 > */
	"admitted_total" bigint,  /* i64 */
	"waited_total" bigint,  /* i64 */
	"overflow_total" bigint,  /* i64 */
	"queue_timeouts_total" bigint,  /* i64 */
	"rejected_total" bigint,  /* i64 */
	"stalls_total" bigint,  /* i64 */
	"wait_time_total_ms" double precision,  /* f64 */
	"wait_p50_ms" double precision,  /* Option < f64 > */
	"wait_p95_ms" double precision,  /* Option < f64 > */
	"wait_p99_ms" double precision,  /* Option < f64 > */
	"wait_max_ms" double precision  /* Option < f64 > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'classes_wrapper';

CREATE VIEW gatekeeper.status AS SELECT * FROM gatekeeper.status();
CREATE VIEW gatekeeper.sessions AS SELECT * FROM gatekeeper.sessions();
CREATE VIEW gatekeeper.classes AS SELECT * FROM gatekeeper.classes();

COMMENT ON VIEW gatekeeper.status IS 'pg_gatekeeper: the limit, session counts by state, and totals since the last reset';
COMMENT ON VIEW gatekeeper.sessions IS 'pg_gatekeeper: one row per client backend with its admission state';
COMMENT ON VIEW gatekeeper.classes IS 'pg_gatekeeper: one row per admission class with its settings, counts and totals';

GRANT SELECT ON gatekeeper.status, gatekeeper.sessions, gatekeeper.classes TO PUBLIC;
