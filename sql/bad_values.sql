-- Bad values are refused with 22023, in SET and in ALTER SYSTEM, and the
-- old value stays.
\set VERBOSITY default
SET pg_gatekeeper.queue_timeout = -1;
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.queue_timeout = 'soon';
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.queue_timeout = '';
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.queue_timeout = '99999999999';
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.queue_timeout = '5 parsecs';
\echo :LAST_ERROR_SQLSTATE
SHOW pg_gatekeeper.queue_timeout;

ALTER SYSTEM SET pg_gatekeeper.max_active = -1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.max_active = 100000000;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.max_active = 'many';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.active_per_cpu = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.active_per_cpu = 'NaN';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.active_per_cpu_max = -1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.active_per_cpu_max = 1e9;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.lend_min_cpu_idle = -0.1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.lend_min_cpu_idle = 1.5;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.lend_min_cpu_idle = 'half';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.max_queued = -5;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.client_check_interval = '-1s';
\echo :LAST_ERROR_SQLSTATE
-- The progress guarantee cannot be turned off, nor put out of reach.
ALTER SYSTEM SET pg_gatekeeper.progress_timeout = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.progress_timeout = '2h';
\echo :LAST_ERROR_SQLSTATE
-- The warm hand-off's bound: at most an hour, never negative.
ALTER SYSTEM SET pg_gatekeeper.warm_hand_off = '-1s';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.warm_hand_off = '2h';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.log_min_wait = -2;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.sample_interval = 0;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.history_size = -1;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.enabled = 'perhaps';
\echo :LAST_ERROR_SQLSTATE

-- exempt_roles: a malformed list gets a hint; unknown roles and odd but
-- well-quoted names are accepted (unknown roles are ignored).
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = '"unterminated';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = 'a,,b';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.exempt_roles = 'no_such_role, "Odd, Name", "x y"';
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_roles') <> ''$$);
SELECT setting FROM pg_file_settings WHERE name = 'pg_gatekeeper.exempt_roles';
-- A very long list is fine too.
SELECT format('ALTER SYSTEM SET pg_gatekeeper.exempt_roles = %L',
              string_agg('role_' || g, ', ')) AS stmt
  FROM generate_series(1, 2000) g \gset
:stmt;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$length(current_setting('pg_gatekeeper.exempt_roles')) > 10000$$);
-- Unknown roles exempt nobody: this session is still what it was.
SELECT state FROM gatekeeper.sessions WHERE pid = pg_backend_pid();

ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.exempt_roles') = ''$$);

-- citus_peers: an entry that is not an address, a range or a keyword, and
-- a prefix too long for its family, are refused with what is wrong; a
-- good list is accepted as written.
ALTER SYSTEM SET pg_gatekeeper.citus_peers = 'nodes, db1.example.com';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.citus_peers = 'nodes, 10.0.0.0/33';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.citus_peers = 'nodes,,local';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.citus_peers = 'Nodes, local, 10.0.0.0/8, fd00::/8';
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.citus_peers') <> 'nodes'$$);
SHOW pg_gatekeeper.citus_peers;
ALTER SYSTEM RESET pg_gatekeeper.citus_peers;
SELECT pg_reload_conf();
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.citus_peers') = 'nodes'$$);
