-- Classes: definitions in pg_gatekeeper.classes (checked, 22023 with a
-- hint), a session's class from pg_gatekeeper.class (superuser-only, set
-- per role or database), and the gatekeeper.classes view.
\set VERBOSITY default

-- Bad definitions are refused and the old value stays.
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (max_active = 2';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (size = 2)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (max_active = 1, reserve = 2)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (weight = 0)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (queue_timeout = 5 days)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'reporting (max_active = +2)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'long (max_active = 0)';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'a, a';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.classes = 'Reporting';
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.class = 'Not A Class';
\echo :LAST_ERROR_SQLSTATE
-- The table holds default, long and 14 more.
ALTER SYSTEM SET pg_gatekeeper.classes = 'c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15';
\echo :LAST_ERROR_SQLSTATE
SHOW pg_gatekeeper.classes;

-- Only superusers set a session's class: a session cannot move itself,
-- and a non-superuser cannot set it for a role.
SET ROLE regress_app;
SET pg_gatekeeper.class = 'reporting';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_app SET pg_gatekeeper.class = 'reporting';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Two classes; a reload applies them.
ALTER SYSTEM SET pg_gatekeeper.classes =
  'reporting (max_active = 1, queue_timeout = 30s, max_queued = 5), oltp (reserve = 1, weight = 3), long (max_active = 1)';
ALTER SYSTEM SET pg_gatekeeper.max_active = 2;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 2;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 4 FROM gatekeeper.classes');
SELECT class, defined, max_active, reserve, reserve_in_force, weight, queue_timeout_ms, max_queued,
       admitted, running, stalled, queued
  FROM gatekeeper.classes ORDER BY class;
ALTER ROLE regress_other SET pg_gatekeeper.class = 'reporting';
SELECT gatekeeper.reset();

-- The class cap: two reporting sessions, one gets in, the other waits,
-- while a default-class session still gets the free place.
SELECT dblink_connect('r1', regress.conninfo('regress_other'));
SELECT dblink_connect('r2', regress.conninfo('regress_other'));
SELECT dblink_connect('app', regress.conninfo('regress_app'));
SELECT dblink_exec('r1', 'BEGIN');
SELECT * FROM dblink('r1', 'SHOW pg_gatekeeper.class') AS t(c text);
SELECT * FROM dblink('r1', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('r2', 'SELECT 2');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.classes WHERE class = ''reporting''');
SELECT * FROM dblink('app', 'SELECT 3') AS t(x int);
SELECT s.class, s.state, s.queue_position
  FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid)
 WHERE a.usename = 'regress_other' ORDER BY s.state;
SELECT class, admitted, queued, oldest_wait_ms > 0 AS waiting FROM gatekeeper.classes ORDER BY class;
SELECT dblink_exec('r1', 'COMMIT');
SELECT * FROM dblink_get_result('r2') AS t(x int);
SELECT * FROM dblink_get_result('r2') AS t(x int);
SELECT regress.quiet();
SELECT class, admitted_total, waited_total, queue_timeouts_total, rejected_total,
       wait_p50_ms > 0 AS has_p50
  FROM gatekeeper.classes ORDER BY class;

-- An unknown class never fails a session: it is admitted in default.
ALTER ROLE regress_app SET pg_gatekeeper.class = 'no_such_class';
SELECT dblink_disconnect('app');
SELECT dblink_connect('app', regress.conninfo('regress_app'));
SELECT * FROM dblink('app', 'SELECT 4') AS t(x int);
SELECT class FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'regress_app';

-- A class dropped from the setting is gone once it has no sessions.
SELECT dblink_disconnect('r1'), dblink_disconnect('r2'), dblink_disconnect('app');
ALTER ROLE regress_other RESET pg_gatekeeper.class;
ALTER ROLE regress_app RESET pg_gatekeeper.class;
ALTER SYSTEM RESET pg_gatekeeper.classes;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 2 FROM gatekeeper.classes');
SELECT class, defined FROM gatekeeper.classes;
-- 14 classes besides default and long fit; an entry for long that leaves
-- out max_active keeps the lane's default cap (half the CPUs, rounded up),
-- and a reserve given to the lane has no use.
SELECT format('ALTER SYSTEM SET pg_gatekeeper.classes = %L',
              string_agg('c' || i, ', ') || ', long (queue_timeout = 30s, reserve = 1)')
  FROM generate_series(1, 14) i \gexec
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 16 FROM gatekeeper.classes WHERE defined');
SELECT c.max_active = greatest(1, ceil(s.effective_cpus / 2)) AS default_cap,
       c.queue_timeout_ms, c.reserve_in_force
  FROM gatekeeper.classes c, gatekeeper.status s WHERE c.class = 'long';
ALTER SYSTEM RESET pg_gatekeeper.classes;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 2 FROM gatekeeper.classes');
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
