-- The monitoring free path (docs/DESIGN.md §4, §12) trusts the extension's
-- own objects only, found by extension membership rather than by a schema's
-- name, and lets through only reads that call allowed built-ins: a built-in
-- that reaches a domain's CHECK (json_populate_record into a record type)
-- is gated like any other query.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');

-- Evidence that something ran: the sequence moves, whether or not its
-- transaction commits; a function that has started holds a lock on the
-- table it reads (its query parks only once analysed).
CREATE SEQUENCE regress.free_seq;
GRANT USAGE ON SEQUENCE regress.free_seq TO PUBLIC;
CREATE TABLE regress.free_tab (x int);
GRANT SELECT ON regress.free_tab TO PUBLIC;
-- In the extension's schema, but not the extension's.
CREATE FUNCTION gatekeeper.impostor() RETURNS SETOF bigint LANGUAGE plpgsql
  AS $$ BEGIN RETURN QUERY SELECT count(*) FROM regress.free_tab; END $$;
-- A record type with a domain column whose CHECK calls nextval.
CREATE DOMAIN regress.dcount AS int CHECK (VALUE > 0 AND nextval('regress.free_seq') > 0);
CREATE TYPE regress.rcount AS (n regress.dcount);
-- A database without the extension, with a schema named gatekeeper.
CREATE DATABASE regression_noext;
SELECT dblink_exec(regress.conninfo(current_user, 'regression_noext'), $$
  CREATE SCHEMA gatekeeper;
  GRANT USAGE ON SCHEMA gatekeeper TO PUBLIC;
  CREATE TABLE gatekeeper.calls (x int);
  GRANT SELECT ON gatekeeper.calls TO PUBLIC;
  CREATE FUNCTION gatekeeper.status() RETURNS SETOF bigint LANGUAGE plpgsql
    AS 'BEGIN RETURN QUERY SELECT count(*) FROM gatekeeper.calls; END'$$);

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('m', regress.conninfo('regress_monitor'));
SELECT dblink_connect('n', regress.conninfo('regress_monitor', 'regression_noext'));
SELECT dblink_connect('j', regress.conninfo('regress_monitor'));
SELECT pid AS m_pid FROM dblink('m', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT pid AS n_pid FROM dblink('n', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);

-- The gate is full. What a monitoring tool reads still takes the free path
-- (the queries of docs/prometheus/pg_gatekeeper.yaml among them).
SELECT * FROM dblink('m', 'SELECT queued FROM gatekeeper.status') AS t(queued int);
SELECT * FROM dblink('m', $$
  SELECT count(*) FROM (
    SELECT max_active, tickets, admitted, coalesce(oldest_wait_ms, 0) / 1000.0 AS oldest_wait_seconds,
           wait_time_total_ms / 1000.0 AS wait_seconds_total
      FROM gatekeeper.status) q$$) AS t(n bigint);
SELECT * FROM dblink('m', $$
  SELECT count(*) FROM (
    SELECT array_agg(h.upper_ms / 1000.0 ORDER BY h.bucket) FILTER (WHERE h.upper_ms IS NOT NULL) AS seconds,
           array_agg(h.cumulative ORDER BY h.bucket) FILTER (WHERE h.upper_ms IS NOT NULL) AS seconds_bucket,
           max(s.wait_time_total_ms) / 1000.0 AS seconds_sum,
           sum(h.waits) AS seconds_count
      FROM (SELECT bucket, upper_ms, waits, sum(waits) OVER (ORDER BY bucket) AS cumulative
              FROM gatekeeper.wait_histogram) h,
           gatekeeper.status s) q$$) AS t(n bigint);
SELECT * FROM dblink('m', $$
  SELECT count(*) > 0 FROM (
    SELECT class, coalesce(max_active, 0) AS max_active, admitted, queued,
           coalesce(oldest_wait_ms, 0) / 1000.0 AS oldest_wait_seconds
      FROM gatekeeper.classes) q$$) AS t(free boolean);
SELECT * FROM dblink('m', $$
  SELECT count(*) FILTER (WHERE state = 'queued'), max(extract(epoch FROM now() - wait_start))
    FROM gatekeeper.sessions WHERE pid <> pg_backend_pid()$$) AS t(n bigint, w numeric);
SELECT * FROM dblink('m', $$
  SELECT count(*) > 0 FROM (
    SELECT state, count(*), max(wait_ms) FROM gatekeeper.sessions GROUP BY state ORDER BY 2 DESC) q$$)
  AS t(free boolean);

-- A set-returning function in schema gatekeeper that is not a member of
-- the extension waits.
SELECT dblink_send_query('m', 'SELECT * FROM gatekeeper.impostor()');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
-- So does a read, in a database without the extension, of a schema that
-- is merely named gatekeeper.
SELECT dblink_send_query('n', 'SELECT * FROM gatekeeper.status()');
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');
-- And a built-in that reaches a domain's CHECK.
SELECT dblink_send_query('j', $$SELECT json_populate_record(NULL::regress.rcount, '{"n": 1}') FROM gatekeeper.status$$);
SELECT regress.wait_for('SELECT queued = 3 FROM gatekeeper.status');
-- Nothing of them ran: no CHECK, and neither function has started.
SELECT last_value, is_called FROM regress.free_seq;
SELECT count(*) AS tables_locked FROM pg_locks
 WHERE locktype = 'relation' AND pid IN (:m_pid, :n_pid);

SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('m') AS t(x bigint);
SELECT * FROM dblink_get_result('m') AS t(x bigint);
SELECT * FROM dblink_get_result('n') AS t(x bigint);
SELECT * FROM dblink_get_result('n') AS t(x bigint);
SELECT * FROM dblink_get_result('j') AS t(r text);
SELECT * FROM dblink_get_result('j') AS t(r text);
SELECT last_value, is_called FROM regress.free_seq;

-- The same through a prepared statement's cached generic plan, which
-- later executions reach only through ExecutorStart: the plan is tested too.
SELECT dblink_exec('j', 'SET plan_cache_mode = force_generic_plan');
SELECT dblink_exec('j', $$PREPARE jp AS
  SELECT json_populate_record(NULL::regress.rcount, '{"n": 1}') FROM gatekeeper.status$$);
SELECT * FROM dblink('j', 'EXECUTE jp') AS t(r text);
SELECT last_value FROM regress.free_seq;
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('j', 'EXECUTE jp');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT last_value FROM regress.free_seq;
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('j') AS t(r text);
SELECT * FROM dblink_get_result('j') AS t(r text);
SELECT last_value FROM regress.free_seq;

SELECT dblink_disconnect('a'), dblink_disconnect('m'), dblink_disconnect('n'), dblink_disconnect('j');
SELECT regress.quiet();
DROP DATABASE regression_noext WITH (FORCE);
DROP FUNCTION gatekeeper.impostor();
DROP TABLE regress.free_tab;
DROP TYPE regress.rcount;
DROP DOMAIN regress.dcount;
DROP SEQUENCE regress.free_seq;
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
