-- Every released version's views read right with this library, before
-- ALTER EXTENSION UPDATE: each install script, as released, binds its
-- functions to the library's entry points by name, and each entry point
-- must return the row that script declares. One session holds the only
-- place in an open transaction and two are parked behind it while the
-- extension is created at 0.1.0, 0.2.0 and 0.3.0 in turn.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 AND ticket_ceiling = 1 FROM gatekeeper.status');

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
CREATE TEMP TABLE pids AS
SELECT 'a' AS conn, pid FROM dblink('a', 'SELECT pg_backend_pid()') AS t(pid int)
UNION ALL SELECT 'b', pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int)
UNION ALL SELECT 'c', pid FROM dblink('c', 'SELECT pg_backend_pid()') AS t(pid int);
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT 2');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c', 'SELECT 3');
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');

-- 0.1.0: status and sessions had fewer columns, history one fewer.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.1.0';
SELECT max_active, limit_source, tickets, ticket_ceiling, admitted, active, idle_in_transaction, queued,
       cpu_idle BETWEEN 0 AND 1 AS cpu_idle_ok, exempt >= 1 AS has_exempt, total_sessions >= 3 AS has_total,
       oldest_wait_ms >= 0 AS has_oldest, stats_reset <= now() AS reset_ok
  FROM gatekeeper.status;
SELECT p.conn, s.usename, s.state, s.queue_position, s.wait_start <= now() AS wait_start_ok,
       s.wait_ms >= 0 AS waiting, s.counts_as_running, s.overflow, s.transactions_admitted >= 1 AS admitted_before,
       s.times_parked, s.wait_total_ms >= 0 AS wait_total_ok
  FROM pids p JOIN gatekeeper.sessions s USING (pid) ORDER BY p.conn;
SELECT regress.wait_for('SELECT count(*) > 0 FROM gatekeeper.history
                          WHERE max_active = 1 AND tickets = 1 AND admitted = 1 AND queued = 2
                            AND idle_in_transaction = 1 AND sample_time <= clock_timestamp()');
SELECT count(*) AS buckets FROM gatekeeper.wait_histogram;

-- 0.2.0: classes, stalls.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.2.0';
SELECT max_active, limit_source, tickets, admitted, stalled, idle_in_transaction, queued,
       cpu_idle BETWEEN 0 AND 1 AS cpu_idle_ok, total_sessions >= 3 AS has_total, stalls_total,
       oldest_wait_ms >= 0 AS has_oldest, stats_reset <= now() AS reset_ok
  FROM gatekeeper.status;
SELECT p.conn, s.usename, s.class, s.state, s.queue_position, s.wait_ms >= 0 AS waiting,
       s.counts_as_running, s.stalled, s.overflow, s.times_parked
  FROM pids p JOIN gatekeeper.sessions s USING (pid) ORDER BY p.conn;
SELECT regress.wait_for('SELECT count(*) > 0 FROM gatekeeper.history
                          WHERE max_active = 1 AND admitted = 1 AND queued = 2 AND sample_time <= clock_timestamp()');
SELECT class, defined, admitted, stalled, queued, oldest_wait_ms >= 0 AS has_oldest FROM gatekeeper.classes;

-- 0.3.0: the adaptive limit's columns.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper VERSION '0.3.0';
SELECT max_active, limit_source, admitted, stalled, idle_in_transaction, queued, stalls_total,
       limit_min, limit_max, limit_reason, limit_changed_at <= now() AS changed_ok
  FROM gatekeeper.status;
SELECT p.conn, s.class, s.state, s.queue_position, s.wait_ms >= 0 AS waiting, s.stalled, s.times_parked
  FROM pids p JOIN gatekeeper.sessions s USING (pid) ORDER BY p.conn;
SELECT regress.wait_for('SELECT count(*) > 0 FROM gatekeeper.history
                          WHERE max_active = 1 AND admitted = 1 AND queued = 2 AND limit_reason = ''manual''');
SELECT class, admitted, queued FROM gatekeeper.classes;

-- A declaration whose row no version had is refused, not read with the
-- wrong types.
CREATE FUNCTION regress.status_of_no_version() RETURNS TABLE (max_active int, queued int)
  LANGUAGE c AS '$libdir/pg_gatekeeper', 'status_wrapper';
SELECT * FROM regress.status_of_no_version();
DROP FUNCTION regress.status_of_no_version();

-- Back to the current version; the parked sessions get in.
DROP EXTENSION pg_gatekeeper;
CREATE EXTENSION pg_gatekeeper;
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('c') AS t(x int);
SELECT * FROM dblink_get_result('c') AS t(x int);
SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c');
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
