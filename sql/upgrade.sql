-- The upgrade path: install each release, update it to the current one,
-- and compare every object of the extension with a fresh install (as
-- pg_stat_statements' oldextversions test does). old_versions reads each
-- release's views before the update, upgrade_privileges checks that a
-- DBA's privileges survive it.

-- Every member of the extension, with its definition, privileges, initial
-- privileges (what pg_dump takes as the extension's own) and comment.
CREATE FUNCTION regress.gatekeeper_objects() RETURNS TABLE (object text, definition text)
LANGUAGE sql AS $$
  SELECT pg_describe_object(d.classid, d.objid, d.objsubid),
         CASE d.classid
           WHEN 'pg_class'::regclass THEN
             (SELECT coalesce(pg_get_viewdef(c.oid), '') || ' acl=' || coalesce(c.relacl::text, '')
                     || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
                FROM pg_class c WHERE c.oid = d.objid)
           WHEN 'pg_proc'::regclass THEN
             (SELECT pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
                FROM pg_proc p WHERE p.oid = d.objid)
           WHEN 'pg_namespace'::regclass THEN
             (SELECT ' acl=' || coalesce(n.nspacl::text, '') FROM pg_namespace n WHERE n.oid = d.objid)
           ELSE ''
         END
         || coalesce(' init=' || (SELECT ip.initprivs::text FROM pg_init_privs ip
                                   WHERE ip.classoid = d.classid AND ip.objoid = d.objid AND ip.objsubid = 0), '')
    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
   WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'pg_gatekeeper'
$$;

SELECT name, version FROM pg_available_extension_versions WHERE name = 'pg_gatekeeper' ORDER BY version;
CREATE TEMP TABLE fresh AS SELECT * FROM regress.gatekeeper_objects();
SELECT count(*) > 0 AS has_objects FROM fresh;

DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT viewname FROM pg_views WHERE schemaname = 'gatekeeper' ORDER BY viewname;
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';

-- Nothing missing, nothing extra, nothing different.
SELECT * FROM fresh EXCEPT SELECT * FROM regress.gatekeeper_objects();
SELECT * FROM regress.gatekeeper_objects() EXCEPT SELECT * FROM fresh;

-- From the later releases too.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.2.0';
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM fresh EXCEPT SELECT * FROM regress.gatekeeper_objects();
SELECT * FROM regress.gatekeeper_objects() EXCEPT SELECT * FROM fresh;

DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.3.0';
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM fresh EXCEPT SELECT * FROM regress.gatekeeper_objects();
SELECT * FROM regress.gatekeeper_objects() EXCEPT SELECT * FROM fresh;
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.4.0';
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
SELECT * FROM fresh EXCEPT SELECT * FROM regress.gatekeeper_objects();
SELECT * FROM regress.gatekeeper_objects() EXCEPT SELECT * FROM fresh;

-- And it works.
SELECT max_active > 0 AS has_limit, stalled >= 0 AS has_stalled, limit_reason IS NOT NULL AS has_reason
  FROM gatekeeper.status;
SELECT regress.wait_for('SELECT count(*) >= 1 FROM gatekeeper.history');
SELECT bool_and(limit_reason IN ('manual', 'fixed', 'start', 'grow', 'shrink', 'reload')) AS reasons_known
  FROM gatekeeper.history;
SELECT class FROM gatekeeper.classes;
SELECT count(*) >= 1 AS has_sessions FROM gatekeeper.sessions WHERE class IS NULL OR class = 'default';
DROP FUNCTION regress.gatekeeper_objects();

-- A schema gatekeeper that another role created beforehand is refused:
-- its owner could rename or drop the objects of the extension.
DROP EXTENSION pg_gatekeeper;
DROP SCHEMA gatekeeper;
CREATE ROLE regress_squatter;
CREATE SCHEMA gatekeeper AUTHORIZATION regress_squatter;
-- (Its context lines differ between versions.)
\set SHOW_CONTEXT never
CREATE EXTENSION pg_gatekeeper;
\set SHOW_CONTEXT errors
SELECT count(*) AS installed FROM pg_extension WHERE extname = 'pg_gatekeeper';
ALTER SCHEMA gatekeeper OWNER TO CURRENT_USER;
CREATE EXTENSION pg_gatekeeper;
SELECT extversion = default_version AS current FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'pg_gatekeeper';
-- An earlier version installed in such a schema is refused at its update
-- to this one, before anything changes.
DROP EXTENSION pg_gatekeeper;
ALTER SCHEMA gatekeeper OWNER TO regress_squatter;
CREATE EXTENSION pg_gatekeeper VERSION '0.4.0';
\set SHOW_CONTEXT never
ALTER EXTENSION pg_gatekeeper UPDATE;
\set SHOW_CONTEXT errors
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';
ALTER SCHEMA gatekeeper OWNER TO CURRENT_USER;
ALTER EXTENSION pg_gatekeeper UPDATE;
SELECT extversion = default_version AS current FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'pg_gatekeeper';
-- The schema's initial privileges still name the role that owned it when
-- the extension was created (PostgreSQL 17 and later track them): made
-- anew, as the other tests found it.
DROP EXTENSION pg_gatekeeper;
DROP SCHEMA gatekeeper;
CREATE EXTENSION pg_gatekeeper;
DROP ROLE regress_squatter;
