-- pg_gatekeeper 0.1.0 -> 0.4.0, taken instead of the three steps through
-- 0.2.0 and 0.3.0 (ALTER EXTENSION UPDATE takes the shortest path): what
-- 0.1.0 -> 0.2.0 and 0.2.0 -> 0.3.0 add (stall relief and classes, the
-- adaptive limit) and 0.4.0's entry points (pg_gatekeeper--0.3.0--0.4.0.sql),
-- keeping the privileges that a DBA gave or took on the views and functions.
-- gatekeeper.status and gatekeeper.sessions gain columns between existing
-- ones, so they and their functions are created anew: the old ones are
-- renamed out of the way, and their privileges are put on the new ones
-- before they are dropped (without CASCADE: a view of yours over them
-- makes this fail, and nothing of yours is dropped). gatekeeper.history
-- gains a column at its end and is kept (CREATE OR REPLACE VIEW); only its
-- function, history(), is created anew like theirs.
\echo Use "ALTER EXTENSION pg_gatekeeper UPDATE TO '0.4.0'" to load this file. \quit

ALTER VIEW gatekeeper.status RENAME TO status_0_1;
ALTER FUNCTION gatekeeper.status() RENAME TO status_0_1;
ALTER VIEW gatekeeper.sessions RENAME TO sessions_0_1;
ALTER FUNCTION gatekeeper.sessions() RENAME TO sessions_0_1;
ALTER FUNCTION gatekeeper.history() RENAME TO history_0_1;

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
AS 'MODULE_PATHNAME', 'status_0_2_wrapper';

CREATE FUNCTION gatekeeper."limit_state"() RETURNS TABLE (
	"limit_min" INT,  /* i32 */
	"limit_max" INT,  /* i32 */
	"limit_reason" TEXT,  /* & '_ str */
	"limit_changed_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT PARALLEL RESTRICTED 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'limit_state_wrapper';

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
AS 'MODULE_PATHNAME', 'sessions_0_2_wrapper';

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

CREATE VIEW gatekeeper.status AS SELECT * FROM gatekeeper.status() CROSS JOIN gatekeeper.limit_state();
CREATE VIEW gatekeeper.sessions AS SELECT * FROM gatekeeper.sessions();
CREATE OR REPLACE VIEW gatekeeper.history AS SELECT * FROM gatekeeper.history();
CREATE VIEW gatekeeper.classes AS SELECT * FROM gatekeeper.classes();

COMMENT ON VIEW gatekeeper.status IS 'pg_gatekeeper: the limit, session counts by state, and totals since the last reset';
COMMENT ON VIEW gatekeeper.sessions IS 'pg_gatekeeper: one row per client backend with its admission state';
COMMENT ON VIEW gatekeeper.classes IS 'pg_gatekeeper: one row per admission class with its settings, counts and totals';

GRANT SELECT ON gatekeeper.status, gatekeeper.sessions, gatekeeper.classes TO PUBLIC;

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
      SELECT 'TABLE', 'gatekeeper.status', '',
             coalesce(o.relacl, pg_catalog.acldefault('r', o.relowner)), o.relowner,
             coalesce(n.relacl, pg_catalog.acldefault('r', n.relowner)), n.relowner
        FROM pg_catalog.pg_class o, pg_catalog.pg_class n
       WHERE o.oid = 'gatekeeper.status_0_1'::pg_catalog.regclass::pg_catalog.oid AND n.oid = 'gatekeeper.status'::pg_catalog.regclass::pg_catalog.oid
      UNION ALL
      SELECT 'TABLE', 'gatekeeper.status', oa.attname::text, oa.attacl, o.relowner, na.attacl, n.relowner
        FROM pg_catalog.pg_class o
        JOIN pg_catalog.pg_attribute oa ON oa.attrelid = o.oid AND oa.attnum > 0 AND oa.attacl IS NOT NULL
        JOIN pg_catalog.pg_class n ON n.oid = 'gatekeeper.status'::pg_catalog.regclass::pg_catalog.oid
        JOIN pg_catalog.pg_attribute na ON na.attrelid = n.oid AND na.attname = oa.attname
       WHERE o.oid = 'gatekeeper.status_0_1'::pg_catalog.regclass::pg_catalog.oid
      UNION ALL
      SELECT 'TABLE', 'gatekeeper.sessions', '',
             coalesce(o.relacl, pg_catalog.acldefault('r', o.relowner)), o.relowner,
             coalesce(n.relacl, pg_catalog.acldefault('r', n.relowner)), n.relowner
        FROM pg_catalog.pg_class o, pg_catalog.pg_class n
       WHERE o.oid = 'gatekeeper.sessions_0_1'::pg_catalog.regclass::pg_catalog.oid AND n.oid = 'gatekeeper.sessions'::pg_catalog.regclass::pg_catalog.oid
      UNION ALL
      SELECT 'TABLE', 'gatekeeper.sessions', oa.attname::text, oa.attacl, o.relowner, na.attacl, n.relowner
        FROM pg_catalog.pg_class o
        JOIN pg_catalog.pg_attribute oa ON oa.attrelid = o.oid AND oa.attnum > 0 AND oa.attacl IS NOT NULL
        JOIN pg_catalog.pg_class n ON n.oid = 'gatekeeper.sessions'::pg_catalog.regclass::pg_catalog.oid
        JOIN pg_catalog.pg_attribute na ON na.attrelid = n.oid AND na.attname = oa.attname
       WHERE o.oid = 'gatekeeper.sessions_0_1'::pg_catalog.regclass::pg_catalog.oid
      UNION ALL
      SELECT 'FUNCTION', 'gatekeeper.status()', '',
             coalesce(o.proacl, pg_catalog.acldefault('f', o.proowner)), o.proowner,
             coalesce(n.proacl, pg_catalog.acldefault('f', n.proowner)), n.proowner
        FROM pg_catalog.pg_proc o, pg_catalog.pg_proc n
       WHERE o.oid = 'gatekeeper.status_0_1()'::pg_catalog.regprocedure::pg_catalog.oid AND n.oid = 'gatekeeper.status()'::pg_catalog.regprocedure::pg_catalog.oid
      UNION ALL
      SELECT 'FUNCTION', 'gatekeeper.sessions()', '',
             coalesce(o.proacl, pg_catalog.acldefault('f', o.proowner)), o.proowner,
             coalesce(n.proacl, pg_catalog.acldefault('f', n.proowner)), n.proowner
        FROM pg_catalog.pg_proc o, pg_catalog.pg_proc n
       WHERE o.oid = 'gatekeeper.sessions_0_1()'::pg_catalog.regprocedure::pg_catalog.oid AND n.oid = 'gatekeeper.sessions()'::pg_catalog.regprocedure::pg_catalog.oid
      UNION ALL
      SELECT 'FUNCTION', 'gatekeeper.history()', '',
             coalesce(o.proacl, pg_catalog.acldefault('f', o.proowner)), o.proowner,
             coalesce(n.proacl, pg_catalog.acldefault('f', n.proowner)), n.proowner
        FROM pg_catalog.pg_proc o, pg_catalog.pg_proc n
       WHERE o.oid = 'gatekeeper.history_0_1()'::pg_catalog.regprocedure::pg_catalog.oid AND n.oid = 'gatekeeper.history()'::pg_catalog.regprocedure::pg_catalog.oid
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

DROP VIEW gatekeeper.status_0_1;
DROP VIEW gatekeeper.sessions_0_1;
DROP FUNCTION gatekeeper.status_0_1();
DROP FUNCTION gatekeeper.sessions_0_1();
DROP FUNCTION gatekeeper.history_0_1();
