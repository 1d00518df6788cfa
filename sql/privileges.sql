-- What an ordinary role may and may not do.
\set VERBOSITY default
SET ROLE regress_app;
SET pg_gatekeeper.enabled = off;
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.queue_timeout = 10;
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.max_active = 100;
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.exempt_roles = 'regress_app';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.max_active = 100;
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.reset();
\echo :LAST_ERROR_SQLSTATE
-- Reading the views is allowed.
SELECT count(*) >= 1 AS can_read FROM gatekeeper.status;
RESET ROLE;

SELECT has_function_privilege('regress_app', 'gatekeeper.reset()', 'EXECUTE') AS app_can_reset,
       has_function_privilege('regress_app', 'gatekeeper.status()', 'EXECUTE') AS app_can_status,
       has_table_privilege('regress_app', 'gatekeeper.sessions', 'SELECT') AS app_can_sessions;

-- Without pg_read_all_stats, another user's session shows its pid alone:
-- neither who it is nor what it does (as pg_stat_activity hides its
-- activity).
SELECT dblink_connect('other', regress.conninfo('regress_other'));
SELECT pid AS other_pid FROM dblink('other', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SET ROLE regress_app;
SELECT datname, usename, application_name, state, class, transactions_admitted, times_parked, wait_total_ms
  FROM gatekeeper.sessions WHERE pid = :other_pid;
RESET ROLE;
GRANT pg_read_all_stats TO regress_app;
SET ROLE regress_app;
SELECT datname = current_database() AS db, usename, application_name, state,
       transactions_admitted >= 0 AS counted, times_parked >= 0 AS parked, wait_total_ms >= 0 AS waited
  FROM gatekeeper.sessions WHERE pid = :other_pid;
RESET ROLE;
REVOKE pg_read_all_stats FROM regress_app;

-- A role is exempt only through the superuser's configuration.
SELECT dblink_connect('member', regress.conninfo('regress_member'));
SELECT pid AS member_pid FROM dblink('member', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT state FROM gatekeeper.sessions WHERE pid IN (:member_pid, :other_pid) ORDER BY pid = :member_pid;
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = 'regress_exempt_group';
SELECT pg_reload_conf();
-- The member's session re-decides at its next statement, after its reload.
SELECT regress.wait_for(format(
  $$SELECT x = 'regress_exempt_group' FROM dblink('member', 'SHOW pg_gatekeeper.exempt_roles') AS t(x text)$$));
SELECT * FROM dblink('member', 'SELECT 1') AS t(x int);
SELECT * FROM dblink('other', 'SELECT 1') AS t(x int);
SELECT pid = :member_pid AS is_member, state
  FROM gatekeeper.sessions WHERE pid IN (:member_pid, :other_pid) ORDER BY 1;
ALTER SYSTEM RESET pg_gatekeeper.exempt_roles;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_roles') = ''$$);
-- ... and is gated again at its next statement after the reload.
SELECT regress.wait_for(format(
  $$SELECT x = '' FROM dblink('member', 'SHOW pg_gatekeeper.exempt_roles') AS t(x text)$$));
SELECT * FROM dblink('member', 'SELECT 1') AS t(x int);
SELECT state FROM gatekeeper.sessions WHERE pid = :member_pid;
SELECT dblink_disconnect('member'), dblink_disconnect('other');

-- A role with CREATEROLE that creates a listed role is not exempt through it:
-- from PostgreSQL 16 it holds that role WITH ADMIN OPTION alone, no INHERIT
-- and no SET (on 15 it is no member at all).
CREATE ROLE regress_creator LOGIN CREATEROLE;
SET ROLE regress_creator;
CREATE ROLE regress_created;
RESET ROLE;
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = 'regress_created';
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_roles') = 'regress_created'$$);
SELECT dblink_connect('creator', regress.conninfo('regress_creator'));
SELECT pid AS creator_pid FROM dblink('creator', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT state FROM gatekeeper.sessions WHERE pid = :creator_pid;
-- ... while a member that may SET ROLE to it, without its privileges
-- (NOINHERIT), is.
CREATE ROLE regress_setter LOGIN NOINHERIT IN ROLE regress_created;
SELECT dblink_connect('setter', regress.conninfo('regress_setter'));
SELECT pid AS setter_pid FROM dblink('setter', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT state FROM gatekeeper.sessions WHERE pid = :setter_pid;
SELECT dblink_disconnect('creator'), dblink_disconnect('setter');
ALTER SYSTEM RESET pg_gatekeeper.exempt_roles;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_roles') = ''$$);
DROP ROLE regress_setter, regress_created, regress_creator;

-- A superuser is exempt through exempt_superusers only, not as an implicit
-- member of the roles in exempt_roles.
ALTER SYSTEM SET pg_gatekeeper.exempt_superusers = off;
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = 'regress_exempt_group';
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_superusers') = 'off'
                             AND current_setting('pg_gatekeeper.exempt_roles') = 'regress_exempt_group'$$);
-- This session has the reload by now; a gated statement re-decides.
SELECT 1 AS gated;
SELECT state FROM gatekeeper.sessions WHERE pid = pg_backend_pid();
ALTER SYSTEM RESET pg_gatekeeper.exempt_superusers;
ALTER SYSTEM RESET pg_gatekeeper.exempt_roles;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_superusers') = 'on'
                             AND current_setting('pg_gatekeeper.exempt_roles') = ''$$);
SELECT 1 AS gated;
SELECT state FROM gatekeeper.sessions WHERE pid = pg_backend_pid();

-- A hostile search_path cannot redirect the views.
CREATE SCHEMA evil;
CREATE FUNCTION evil.status() RETURNS int LANGUAGE sql AS 'SELECT 1/0';
SET search_path = evil, public;
SELECT max_active >= 1 AS still_ours FROM gatekeeper.status;
RESET search_path;
DROP SCHEMA evil CASCADE;
SELECT regress.quiet();
