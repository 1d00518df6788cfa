-- pg_gatekeeper 0.2.0 -> 0.3.0: the adaptive limit.
-- gatekeeper.status gains limit_min, limit_max, limit_reason and
-- limit_changed_at, from a new function limit_state() that the view joins
-- to status(); gatekeeper.history gains limit_reason. A set-returning
-- function's columns cannot change in place, so history() is dropped and
-- created again, and so are both views (without CASCADE: a view of yours
-- over them makes this fail, and nothing of yours is dropped).
\echo Use "ALTER EXTENSION pg_gatekeeper UPDATE TO '0.3.0'" to load this file. \quit

DROP VIEW gatekeeper.status;
DROP VIEW gatekeeper.history;
DROP FUNCTION gatekeeper.history();

CREATE FUNCTION gatekeeper."limit_state"() RETURNS TABLE (
	"limit_min" INT,  /* i32 */
	"limit_max" INT,  /* i32 */
	"limit_reason" TEXT,  /* & '_ str */
	"limit_changed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'limit_state_wrapper';

CREATE FUNCTION gatekeeper."history"() RETURNS TABLE (
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
AS 'MODULE_PATHNAME', 'history_wrapper';

CREATE VIEW gatekeeper.status AS SELECT * FROM gatekeeper.status() CROSS JOIN gatekeeper.limit_state();
CREATE VIEW gatekeeper.history AS SELECT * FROM gatekeeper.history();

COMMENT ON VIEW gatekeeper.status IS 'pg_gatekeeper: the limit, session counts by state, and totals since the last reset';
COMMENT ON VIEW gatekeeper.history IS 'pg_gatekeeper: periodic samples taken by the worker';

GRANT SELECT ON gatekeeper.status, gatekeeper.history TO PUBLIC;
