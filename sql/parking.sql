-- Sessions beyond the limit park in FIFO order and are handed the slot
-- on COMMIT; monitoring queries never wait. Lending is switched off
-- (max_tickets = max_active), so an idle holder keeps its place.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 AND ticket_ceiling = 1 FROM gatekeeper.status');
SELECT gatekeeper.reset();

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
CREATE TEMP TABLE pids AS
SELECT 'a' AS conn, pid FROM dblink('a', 'SELECT pg_backend_pid()') AS t(pid int)
UNION ALL SELECT 'b', pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int)
UNION ALL SELECT 'c', pid FROM dblink('c', 'SELECT pg_backend_pid()') AS t(pid int);

-- The order in which the parked sessions get in: each draws a number.
CREATE SEQUENCE public.handoff;
GRANT USAGE ON SEQUENCE public.handoff TO PUBLIC;

-- A holds the only slot with an open transaction.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
-- B then C park.
SELECT dblink_send_query('b', 'SELECT nextval(''public.handoff'')');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c', 'SELECT nextval(''public.handoff'')');
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');

SELECT p.conn, s.state, s.queue_position, s.wait_ms >= 0 AS waiting
  FROM pids p JOIN gatekeeper.sessions s USING (pid) ORDER BY p.conn;
SELECT p.conn, a.wait_event_type, a.wait_event
  FROM pids p JOIN pg_stat_activity a USING (pid) WHERE p.conn <> 'a' ORDER BY p.conn;
SELECT admitted, queued, idle_in_transaction, oldest_wait_ms > 0 AS has_oldest FROM gatekeeper.status;

-- A member of pg_monitor (neither superuser nor exempt) can always look at
-- the gate, even when it is full.
SELECT dblink_connect('d', regress.conninfo('regress_monitor'));
SELECT * FROM dblink('d', 'SELECT queued FROM gatekeeper.status') AS t(queued int);
SELECT * FROM dblink('d', 'SELECT count(*) FROM gatekeeper.sessions WHERE state = ''queued''') AS t(n bigint);
SELECT * FROM dblink('d', 'SHOW pg_gatekeeper.max_active') AS t(v text);
SELECT dblink_exec('d', 'SET application_name = ''still free''');
-- ... but not a query that does other work through the views.
SELECT dblink_send_query('d', 'SELECT nextval(''public.handoff'') FROM gatekeeper.status');
SELECT regress.wait_for('SELECT queued = 3 FROM gatekeeper.status');
SELECT s.queue_position FROM gatekeeper.sessions s
  JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'still free';
-- A role without pg_monitor has no free path: its plain read of a view
-- waits like any other query.
SELECT dblink_connect('g', regress.conninfo('regress_app'));
SELECT dblink_send_query('g', 'SELECT queued FROM gatekeeper.status');
SELECT regress.wait_for('SELECT queued = 4 FROM gatekeeper.status');

-- COMMIT hands the slot to the head of the queue: B, then C, then D (they
-- draw 1, 2 and 3), then G, which sees nobody queued any more.
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(b bigint);
SELECT * FROM dblink_get_result('b') AS t(b bigint);
SELECT * FROM dblink_get_result('c') AS t(c bigint);
SELECT * FROM dblink_get_result('c') AS t(c bigint);
SELECT * FROM dblink_get_result('d') AS t(d bigint);
SELECT * FROM dblink_get_result('d') AS t(d bigint);
SELECT * FROM dblink_get_result('g') AS t(queued_then int);
SELECT * FROM dblink_get_result('g') AS t(queued_then int);
DROP SEQUENCE public.handoff;
SELECT regress.quiet();
SELECT admitted_total, waited_total, overflow_total, queue_timeouts_total, rejected_total,
       wait_time_total_ms > 0 AS waited, wait_p50_ms > 0 AS has_p50, wait_max_ms >= wait_p50_ms AS max_ok
  FROM gatekeeper.status;
SELECT sum(waits) AS histogram_waits FROM gatekeeper.wait_histogram;
SELECT p.conn, s.transactions_admitted, s.times_parked, s.last_wait_ms > 0 AS waited
  FROM pids p JOIN gatekeeper.sessions s USING (pid) ORDER BY p.conn;

-- Volatile work elsewhere in a query over the views is gated too: in a
-- JOIN ... ON, in LIMIT, or gatekeeper.reset(), and so is a user-defined
-- function, volatile or not; a join of two views is not.
CREATE FUNCTION public.stable_one() RETURNS int STABLE LANGUAGE plpgsql AS 'BEGIN RETURN 1; END';
SELECT dblink_connect('f', regress.conninfo('regress_monitor'));
-- Prepared statements show the same from their plans, which later
-- executions reach only through ExecutorStart.
SELECT dblink_connect('e', regress.conninfo('regress_monitor'));
SELECT dblink_exec('e', 'PREPARE m AS SELECT count(*) > 0 FROM gatekeeper.status s JOIN gatekeeper.sessions x ON x.pid > 0');
SELECT dblink_exec('e', 'PREPARE v AS SELECT 3 FROM gatekeeper.status s JOIN gatekeeper.status t ON pg_sleep(0) IS NOT NULL');
SELECT * FROM dblink('e', 'EXECUTE v') AS t(x int);
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT * FROM dblink('d', 'SELECT count(*) > 0 FROM gatekeeper.status s JOIN gatekeeper.sessions x ON x.pid > 0')
  AS t(free boolean);
SELECT * FROM dblink('e', 'EXECUTE m') AS t(free boolean);
SELECT dblink_send_query('b', 'SELECT 1 FROM gatekeeper.status s JOIN gatekeeper.status t ON pg_sleep(0) IS NOT NULL');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c', 'SELECT 2 FROM gatekeeper.status LIMIT (random() * 0 + 1)::int');
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');
SELECT dblink_send_query('d', 'SELECT * FROM gatekeeper.reset()');
SELECT regress.wait_for('SELECT queued = 3 FROM gatekeeper.status');
SELECT dblink_send_query('e', 'EXECUTE v');
SELECT regress.wait_for('SELECT queued = 4 FROM gatekeeper.status');
SELECT dblink_send_query('f', 'SELECT public.stable_one() + 4 FROM gatekeeper.status');
SELECT regress.wait_for('SELECT queued = 5 FROM gatekeeper.status');
-- A domain's CHECK runs functions the expression does not show: a cast to
-- a domain is gated too, even with a built-in check.
CREATE DOMAIN public.posint AS int CHECK (VALUE > 0);
SELECT dblink_connect('h', regress.conninfo('regress_monitor'));
SELECT dblink_send_query('h', 'SELECT 6::public.posint FROM gatekeeper.status');
SELECT regress.wait_for('SELECT queued = 6 FROM gatekeeper.status');
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('c') AS t(x int);
SELECT * FROM dblink_get_result('c') AS t(x int);
SELECT * FROM dblink_get_result('d', false) AS t(x text);
SELECT split_part(dblink_error_message('d'), E'\n', 1) AS error;
SELECT * FROM dblink_get_result('d', false) AS t(x text);
SELECT * FROM dblink_get_result('e') AS t(x int);
SELECT * FROM dblink_get_result('e') AS t(x int);
SELECT * FROM dblink_get_result('f') AS t(x int);
SELECT * FROM dblink_get_result('f') AS t(x int);
SELECT * FROM dblink_get_result('h') AS t(x int);
SELECT * FROM dblink_get_result('h') AS t(x int);
SELECT dblink_disconnect('e'), dblink_disconnect('f'), dblink_disconnect('g'), dblink_disconnect('h');
DROP FUNCTION public.stable_one();
DROP DOMAIN public.posint;

-- ROLLBACK and an error abort hand the slot on too.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT ''after rollback''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('a', 'ROLLBACK');
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT ''after error''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('a', 'SELECT 1/0', false);
-- B gets in while A's block is still open (aborted).
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT state FROM gatekeeper.sessions JOIN pids USING (pid) WHERE conn = 'a';
SELECT dblink_exec('a', 'ROLLBACK');

-- PREPARE TRANSACTION hands the slot on; COMMIT PREPARED needs none (it
-- finishes a transaction that may hold locks that admitted sessions wait for).
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT ''after prepare''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('a', 'PREPARE TRANSACTION ''regress_gx''');
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT dblink_exec('b', 'BEGIN');
SELECT * FROM dblink('b', 'SELECT 1') AS t(x int);
SELECT times_parked AS a_parked FROM gatekeeper.sessions JOIN pids USING (pid) WHERE conn = 'a' \gset
SELECT dblink_exec('a', 'COMMIT PREPARED ''regress_gx''');
SELECT times_parked = :a_parked AS commit_prepared_never_parked
  FROM gatekeeper.sessions JOIN pids USING (pid) WHERE conn = 'a';
SELECT dblink_exec('b', 'COMMIT');

-- A savepoint rollback keeps the slot.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_exec('a', 'SAVEPOINT s');
SELECT dblink_exec('a', 'SELECT 1/0', false);
SELECT dblink_exec('a', 'ROLLBACK TO SAVEPOINT s');
SELECT admitted FROM gatekeeper.status;
SELECT dblink_exec('a', 'COMMIT');

-- COMMIT AND CHAIN and ROLLBACK AND CHAIN start the next block at once,
-- with no point in between where it could park: it keeps the admission,
-- and B stays queued until the chain ends.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT ''after the chain''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('a', 'COMMIT AND CHAIN');
SELECT s.state, st.admitted, st.queued
  FROM gatekeeper.sessions s JOIN pids USING (pid), gatekeeper.status st WHERE conn = 'a';
SELECT * FROM dblink('a', 'SELECT 2') AS t(x int);
SELECT dblink_exec('a', 'ROLLBACK AND CHAIN');
SELECT * FROM dblink('a', 'SELECT 3') AS t(x int);
SELECT s.state, st.admitted, st.queued
  FROM gatekeeper.sessions s JOIN pids USING (pid), gatekeeper.status st WHERE conn = 'a';
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
-- A failed block has already handed its admission on: its chained block is
-- admitted at its first gated statement, like a new transaction.
SELECT dblink_exec('a', 'BEGIN');
SELECT dblink_exec('a', 'SELECT 1/0', false);
SELECT dblink_exec('a', 'ROLLBACK AND CHAIN');
SELECT s.state, st.admitted FROM gatekeeper.sessions s JOIN pids USING (pid), gatekeeper.status st WHERE conn = 'a';
SELECT * FROM dblink('a', 'SELECT 4') AS t(x int);
SELECT s.state, st.admitted FROM gatekeeper.sessions s JOIN pids USING (pid), gatekeeper.status st WHERE conn = 'a';
SELECT dblink_exec('a', 'COMMIT');
SELECT admitted, queued FROM gatekeeper.status;

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c'), dblink_disconnect('d');
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
