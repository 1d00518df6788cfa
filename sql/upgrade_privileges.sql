-- A DBA's privileges on the views and functions survive ALTER EXTENSION
-- UPDATE from every released version to this one (an update only as far as
-- 0.2.0 or 0.3.0 runs those releases' scripts, which re-create views with
-- their grant to PUBLIC): what was revoked from PUBLIC stays
-- revoked, what was granted stays granted (grant options and column
-- privileges included). On the objects an update keeps, pg_init_privs (the
-- extension's own privileges, which pg_dump leaves out) stays as it was;
-- on those it re-creates, the privileges put back count as initial ones.
CREATE ROLE regress_reader;
CREATE ROLE regress_relay;

-- Privileges on the extension's views (and their columns) and functions,
-- one row per grantee and privilege; owners' own are left out, as \dp and
-- \df+ show them.
CREATE FUNCTION regress.privileges(from_init boolean DEFAULT false)
RETURNS TABLE (object text, grantee text, privilege text, grantable boolean)
LANGUAGE sql AS $$
  WITH acls(object, acl, owner) AS (
    SELECT c.relname::text,
           CASE WHEN from_init THEN ip.initprivs ELSE coalesce(c.relacl, acldefault('r', c.relowner)) END,
           c.relowner
      FROM pg_class c
      LEFT JOIN pg_init_privs ip ON ip.objoid = c.oid AND ip.classoid = 'pg_class'::regclass AND ip.objsubid = 0
     WHERE c.relnamespace = 'gatekeeper'::regnamespace
    UNION ALL
    SELECT c.relname || '.' || a.attname, CASE WHEN from_init THEN ip.initprivs ELSE a.attacl END, c.relowner
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
      LEFT JOIN pg_init_privs ip ON ip.objoid = c.oid AND ip.classoid = 'pg_class'::regclass
                                AND ip.objsubid = a.attnum
     WHERE c.relnamespace = 'gatekeeper'::regnamespace
    UNION ALL
    SELECT p.proname || '()',
           CASE WHEN from_init THEN ip.initprivs ELSE coalesce(p.proacl, acldefault('f', p.proowner)) END,
           p.proowner
      FROM pg_proc p
      LEFT JOIN pg_init_privs ip ON ip.objoid = p.oid AND ip.classoid = 'pg_proc'::regclass AND ip.objsubid = 0
     WHERE p.pronamespace = 'gatekeeper'::regnamespace
  )
  SELECT DISTINCT a.object, CASE e.grantee WHEN 0 THEN 'PUBLIC' ELSE e.grantee::regrole::text END,
         e.privilege_type, e.is_grantable
    FROM acls a, aclexplode(a.acl) e
   WHERE e.grantee <> a.owner
   ORDER BY 1, 2, 3
$$;

-- What a DBA does: no reading by PUBLIC, one reader, a relay that may
-- pass history on, part of sessions, and no direct calls of the functions.
CREATE FUNCTION regress.restrict() RETURNS void LANGUAGE sql AS $$
  REVOKE SELECT ON gatekeeper.status, gatekeeper.sessions, gatekeeper.history FROM PUBLIC;
  GRANT SELECT ON gatekeeper.status TO regress_reader;
  GRANT SELECT ON gatekeeper.history TO regress_relay WITH GRANT OPTION;
  GRANT SELECT (pid, state, queue_position) ON gatekeeper.sessions TO regress_reader;
  REVOKE EXECUTE ON FUNCTION gatekeeper.status(), gatekeeper.sessions(), gatekeeper.history() FROM PUBLIC;
  GRANT EXECUTE ON FUNCTION gatekeeper.history() TO regress_reader;
$$;

-- The update scripts run as the superuser with the extension's schema in
-- their search path: an operator defined there for (oid, regclass),
-- (oid, regprocedure) or (oid, integer), which pg_catalog lacks, would be
-- picked over pg_catalog's (oid, oid) one and run as that superuser. The
-- scripts compare plain oids, so these traps never run.
CREATE FUNCTION regress.set_traps() RETURNS void LANGUAGE sql AS $$
  CREATE FUNCTION gatekeeper.trap_c(oid, regclass) RETURNS boolean LANGUAGE plpgsql
    AS 'BEGIN RAISE EXCEPTION ''a trap operator in the schema ran''; END';
  CREATE FUNCTION gatekeeper.trap_p(oid, regprocedure) RETURNS boolean LANGUAGE plpgsql
    AS 'BEGIN RAISE EXCEPTION ''a trap operator in the schema ran''; END';
  CREATE FUNCTION gatekeeper.trap_i(oid, integer) RETURNS boolean LANGUAGE plpgsql
    AS 'BEGIN RAISE EXCEPTION ''a trap operator in the schema ran''; END';
  CREATE OPERATOR gatekeeper.= (FUNCTION = gatekeeper.trap_c, LEFTARG = oid, RIGHTARG = regclass);
  CREATE OPERATOR gatekeeper.= (FUNCTION = gatekeeper.trap_p, LEFTARG = oid, RIGHTARG = regprocedure);
  CREATE OPERATOR gatekeeper.= (FUNCTION = gatekeeper.trap_i, LEFTARG = oid, RIGHTARG = integer);
$$;
CREATE FUNCTION regress.clear_traps() RETURNS void LANGUAGE sql AS $$
  DROP OPERATOR gatekeeper.= (oid, regclass), gatekeeper.= (oid, regprocedure), gatekeeper.= (oid, integer);
  DROP FUNCTION gatekeeper.trap_c(oid, regclass), gatekeeper.trap_p(oid, regprocedure),
                gatekeeper.trap_i(oid, integer);
$$;

-- From 0.1.0.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.1.0';
SELECT regress.restrict();
CREATE TEMP TABLE before AS SELECT * FROM regress.privileges();
CREATE TEMP TABLE before_init AS SELECT * FROM regress.privileges(true);
SELECT * FROM before;
SELECT regress.set_traps();
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT regress.clear_traps();
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
-- Nothing lost; what is new is the new objects' (classes, limit_state).
SELECT * FROM before EXCEPT SELECT * FROM regress.privileges() ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges() EXCEPT SELECT * FROM before ORDER BY 1, 2, 3;
SELECT has_table_privilege('regress_reader', 'gatekeeper.status', 'SELECT') AS reader_status,
       has_table_privilege('regress_app', 'gatekeeper.status', 'SELECT') AS public_status,
       has_column_privilege('regress_reader', 'gatekeeper.sessions', 'queue_position', 'SELECT') AS reader_position,
       has_column_privilege('regress_reader', 'gatekeeper.sessions', 'usename', 'SELECT') AS reader_usename,
       has_table_privilege('regress_relay', 'gatekeeper.history', 'SELECT WITH GRANT OPTION') AS relay_history,
       has_function_privilege('regress_app', 'gatekeeper.status()', 'EXECUTE') AS public_status_fn,
       has_function_privilege('regress_reader', 'gatekeeper.history()', 'EXECUTE') AS reader_history_fn;
-- The view history is kept; status and sessions and the three functions
-- are re-created, and what was put back on them counts as initial.
SELECT * FROM before_init EXCEPT SELECT * FROM regress.privileges(true) ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges(true) EXCEPT SELECT * FROM before_init ORDER BY 1, 2, 3;
DROP TABLE before, before_init;

-- From 0.2.0; a view of the DBA's over status and history stays.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.2.0';
SELECT regress.restrict();
CREATE VIEW public.my_gate AS
  SELECT s.max_active, s.queued, (SELECT count(*) FROM gatekeeper.history) AS samples FROM gatekeeper.status s;
CREATE TEMP TABLE before AS SELECT * FROM regress.privileges();
CREATE TEMP TABLE before_init AS SELECT * FROM regress.privileges(true);
SELECT regress.set_traps();
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT regress.clear_traps();
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM before EXCEPT SELECT * FROM regress.privileges() ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges() EXCEPT SELECT * FROM before ORDER BY 1, 2, 3;
-- Both views are kept: their initial privileges are still the extension's
-- own, so that pg_dump dumps the DBA's changes; history() is re-created.
SELECT * FROM before_init EXCEPT SELECT * FROM regress.privileges(true) ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges(true) EXCEPT SELECT * FROM before_init ORDER BY 1, 2, 3;
SELECT max_active > 0 AS has_limit FROM public.my_gate;
DROP VIEW public.my_gate;
DROP TABLE before, before_init;

-- From 0.3.0: nothing is re-created.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.3.0';
SELECT regress.restrict();
CREATE VIEW public.my_gate AS
  SELECT s.max_active, s.limit_reason, x.class FROM gatekeeper.status s, gatekeeper.sessions x;
CREATE TEMP TABLE before AS SELECT * FROM regress.privileges();
CREATE TEMP TABLE before_init AS SELECT * FROM regress.privileges(true);
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM before EXCEPT SELECT * FROM regress.privileges() ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges() EXCEPT SELECT * FROM before ORDER BY 1, 2, 3;
SELECT * FROM before_init EXCEPT SELECT * FROM regress.privileges(true) ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges(true) EXCEPT SELECT * FROM before_init ORDER BY 1, 2, 3;
SELECT count(*) > 0 AS readable FROM public.my_gate;
DROP VIEW public.my_gate;
DROP TABLE before, before_init;

-- From 0.4.0: status gains columns in place (CREATE OR REPLACE VIEW), so its
-- grants and a view of the DBA's over it stay; the new objects are the
-- new release's own.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.4.0';
SELECT regress.restrict();
CREATE VIEW public.my_gate AS
  SELECT s.max_active, s.limit_reason, s.queued, x.class FROM gatekeeper.status s, gatekeeper.sessions x;
CREATE TEMP TABLE before AS SELECT * FROM regress.privileges();
CREATE TEMP TABLE before_init AS SELECT * FROM regress.privileges(true);
SELECT regress.set_traps();
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT regress.clear_traps();
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM before EXCEPT SELECT * FROM regress.privileges() ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges() EXCEPT SELECT * FROM before ORDER BY 1, 2, 3;
SELECT * FROM before_init EXCEPT SELECT * FROM regress.privileges(true) ORDER BY 1, 2, 3;
SELECT * FROM regress.privileges(true) EXCEPT SELECT * FROM before_init ORDER BY 1, 2, 3;
SELECT has_table_privilege('regress_reader', 'gatekeeper.status', 'SELECT') AS reader_status,
       has_table_privilege('regress_app', 'gatekeeper.status', 'SELECT') AS public_status,
       has_column_privilege('regress_reader', 'gatekeeper.sessions', 'queue_position', 'SELECT') AS reader_position;
SELECT count(*) > 0 AS readable FROM public.my_gate;
DROP VIEW public.my_gate;
DROP TABLE before, before_init;

-- Back to a fresh install.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper;
DROP FUNCTION regress.privileges(boolean), regress.restrict(), regress.set_traps(), regress.clear_traps();
DROP ROLE regress_reader, regress_relay;
