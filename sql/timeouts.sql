-- queue_timeout ends a wait with an error and leaves the session usable;
-- max_queued turns newcomers away at once.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
ALTER SYSTEM SET pg_gatekeeper.max_queued = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');
SELECT regress.wait_reload($$current_setting('pg_gatekeeper.max_queued') = '1'$$);
ALTER ROLE regress_app SET pg_gatekeeper.queue_timeout = '300ms';
SELECT gatekeeper.reset();
SET client_min_messages = warning;

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);

-- An implicit statement times out; the session still works afterwards.
SELECT dblink_exec('b', 'SELECT 1', false) AS result;
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT queue_timeouts_total, queued FROM gatekeeper.status;
-- The timed-out wait is in the wait statistics, though nobody was admitted.
SELECT waited_total, (SELECT sum(waits) FROM gatekeeper.wait_histogram) AS histogram_waits,
       wait_max_ms > 250 AS max_is_the_timed_out_wait, wait_p99_ms > 250 AS p99_too
  FROM gatekeeper.status;

-- BEGIN never waits; the block's first statement that needs an admission
-- does, and its timeout aborts the block: what follows fails, and ROLLBACK
-- works.
SELECT dblink_exec('b', 'BEGIN', false) AS result;
SELECT dblink_exec('b', 'SELECT 1', false) AS result;
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT dblink_exec('b', 'SELECT 2', false) AS result;
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT dblink_exec('b', 'ROLLBACK');
-- A block with no statement that needs one waits for nothing.
SELECT dblink_exec('b', 'BEGIN', false) AS result;
SELECT dblink_exec('b', 'COMMIT');
SELECT queue_timeouts_total, queued FROM gatekeeper.status;

-- The queue holds one: B parks, C is turned away at once. B waits long
-- enough for C's three tries on a slow machine: it connects again with a
-- longer timeout.
ALTER ROLE regress_app SET pg_gatekeeper.queue_timeout = '1min';
SELECT dblink_disconnect('b');
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_send_query('b', 'SELECT ''b ran''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('c', 'SELECT 1', false) AS result;
SELECT split_part(dblink_error_message('c'), E'\n', 1) AS error;
-- Turned away at a block's first statement, which reports it and aborts the block.
SELECT dblink_exec('c', 'BEGIN', false) AS result;
SELECT dblink_exec('c', 'SELECT 1', false) AS result;
SELECT split_part(dblink_error_message('c'), E'\n', 1) AS error;
SELECT dblink_exec('c', 'SELECT 2', false) AS result;
SELECT split_part(dblink_error_message('c'), E'\n', 1) AS error;
SELECT dblink_exec('c', 'ROLLBACK');
SELECT rejected_total, queue_timeouts_total FROM gatekeeper.status;
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);

-- Both sessions work once the gate is free.
SELECT * FROM dblink('b', 'SELECT 2') AS t(x int);
SELECT * FROM dblink('c', 'SELECT 3') AS t(x int);

-- Cancel and terminate while parked leave the counts exact.
ALTER ROLE regress_app RESET pg_gatekeeper.queue_timeout;
SELECT dblink_disconnect('b');
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT pid AS b_pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('b', 'SELECT ''never''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT pg_cancel_backend(:b_pid);
SELECT regress.wait_for('SELECT queued = 0 FROM gatekeeper.status');
SELECT * FROM dblink_get_result('b', false) AS t(x text);
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT * FROM dblink_get_result('b', false) AS t(x text);
SELECT dblink_send_query('b', 'SELECT ''never either''');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT pg_terminate_backend(:b_pid);
SELECT regress.wait_for('SELECT queued = 0 FROM gatekeeper.status');
SELECT queue_cancels_total, queue_exits_total, admitted, queued FROM gatekeeper.status;
-- Every wait that ended is in the histogram once, however it ended.
SELECT (SELECT sum(waits) FROM gatekeeper.wait_histogram)
       = waited_total + queue_timeouts_total + queue_cancels_total + queue_exits_total + clients_lost_total
       AS every_wait_counted
  FROM gatekeeper.status;
SELECT dblink_exec('a', 'COMMIT');
-- A cancel while a block's first statement waits aborts the block, as a
-- timeout does: the statement reports the cancel, what follows fails.
SELECT dblink_disconnect('b');
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT pid AS b_pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_exec('b', 'BEGIN');
SELECT dblink_send_query('b', 'SELECT 1');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT pg_cancel_backend(:b_pid);
SELECT regress.wait_for('SELECT queued = 0 FROM gatekeeper.status');
SELECT * FROM dblink_get_result('b', false) AS t(x int);
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT * FROM dblink_get_result('b', false) AS t(x int);
SELECT dblink_exec('b', 'SELECT 2', false) AS result;
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT dblink_exec('b', 'ROLLBACK');
SELECT queue_cancels_total, admitted, queued FROM gatekeeper.status;
SELECT dblink_exec('a', 'COMMIT');

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c');
RESET client_min_messages;
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
