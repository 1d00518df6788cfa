-- pg_gatekeeper 0.2.0 -> 0.4.0, taken instead of 0.2.0 -> 0.3.0 -> 0.4.0
-- (ALTER EXTENSION UPDATE takes the shortest path): 0.3.0's adaptive limit
-- (gatekeeper.status gains limit_min, limit_max, limit_reason and
-- limit_changed_at from a new function limit_state(); gatekeeper.history
-- gains limit_reason) and 0.4.0's entry points (pg_gatekeeper--0.3.0--0.4.0.sql).
-- Unlike 0.2.0 -> 0.3.0, no view is re-created: both views gain columns at
-- their end only, which CREATE OR REPLACE VIEW allows, so that they keep
-- their privileges, what pg_dump takes as the extension's own privileges,
-- and views of yours over them. history() itself needs a new function for
-- its new column: the old one is renamed, the view moves to the new one,
-- and the old one's privileges are put on the new one before it goes.
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

CREATE FUNCTION gatekeeper."limit_state"() RETURNS TABLE (
	"limit_min" INT,  /* i32 */
	"limit_max" INT,  /* i32 */
	"limit_reason" TEXT,  /* & '_ str */
	"limit_changed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'limit_state_wrapper';

CREATE OR REPLACE VIEW gatekeeper.status AS SELECT * FROM gatekeeper.status() CROSS JOIN gatekeeper.limit_state();

ALTER FUNCTION gatekeeper.history() RENAME TO history_0_2;

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
AS 'MODULE_PATHNAME', 'history_0_3_wrapper';

CREATE OR REPLACE VIEW gatekeeper.history AS SELECT * FROM gatekeeper.history();

-- Put the privileges that the old objects had on the new ones: what the
-- old ones granted that the new ones lack is granted, what the new ones
-- grant that the old ones did not is revoked (owners' own privileges
-- aside). Each is granted by the new object's owner, a privilege that a
-- grantee had passed on (WITH GRANT OPTION) included.
-- Every comparison below is between plain oids, so that only
-- pg_catalog's exact operator matches: an operator that someone able to
-- create objects in the schema had defined there for (oid, regclass)
-- would otherwise be chosen, and run as the superuser who updates.
DO $$
DECLARE
  d record;
BEGIN
  FOR d IN
    -- One row per object, or per column ('' for the whole object).
    WITH objects(kind, name, col, old_acl, old_owner, new_acl, new_owner) AS (
      SELECT 'FUNCTION', 'gatekeeper.history()', '',
             coalesce(o.proacl, pg_catalog.acldefault('f', o.proowner)), o.proowner,
             coalesce(n.proacl, pg_catalog.acldefault('f', n.proowner)), n.proowner
        FROM pg_catalog.pg_proc o, pg_catalog.pg_proc n
       WHERE o.oid = 'gatekeeper.history_0_2()'::pg_catalog.regprocedure::pg_catalog.oid AND n.oid = 'gatekeeper.history()'::pg_catalog.regprocedure::pg_catalog.oid
    ),
    old_privs AS (
      SELECT kind, name, col, e.grantee, e.privilege_type, bool_or(e.is_grantable) AS grantable
        FROM objects, pg_catalog.aclexplode(old_acl) e
       WHERE e.grantee <> old_owner
       GROUP BY 1, 2, 3, 4, 5
    ),
    new_privs AS (
      SELECT kind, name, col, e.grantee, e.privilege_type, bool_or(e.is_grantable) AS grantable
        FROM objects, pg_catalog.aclexplode(new_acl) e
       WHERE e.grantee <> new_owner
       GROUP BY 1, 2, 3, 4, 5
    )
    SELECT kind, name,
           privilege_type || CASE col WHEN '' THEN '' ELSE ' (' || pg_catalog.quote_ident(col) || ')' END AS privilege,
           CASE grantee WHEN 0::pg_catalog.oid THEN 'PUBLIC'
                ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(grantee)) END AS grantee,
           o.grantable AS old_grantable, n.grantable AS new_grantable
      FROM old_privs o FULL JOIN new_privs n USING (kind, name, col, grantee, privilege_type)
     WHERE o.grantable IS DISTINCT FROM n.grantable
  LOOP
    IF d.new_grantable IS NULL OR d.old_grantable THEN
      EXECUTE pg_catalog.format('GRANT %s ON %s %s TO %s%s', d.privilege, d.kind, d.name, d.grantee,
                                CASE WHEN d.old_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    ELSIF d.old_grantable IS NULL THEN
      EXECUTE pg_catalog.format('REVOKE %s ON %s %s FROM %s', d.privilege, d.kind, d.name, d.grantee);
    ELSE
      EXECUTE pg_catalog.format('REVOKE GRANT OPTION FOR %s ON %s %s FROM %s',
                                d.privilege, d.kind, d.name, d.grantee);
    END IF;
  END LOOP;
END
$$;

DROP FUNCTION gatekeeper.history_0_2();
