-- Nothing a statement runs happens before its admission: not EXECUTE's
-- parameters, plain or under EXPLAIN ANALYZE.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');

-- Evidence that something ran: the sequence moves, whether or not its
-- transaction commits.
CREATE SEQUENCE regress.early_seq;
GRANT USAGE ON SEQUENCE regress.early_seq TO PUBLIC;

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
-- Prepared while the gate is open.
SELECT dblink_exec('b', 'PREPARE p(int) AS SELECT $1');
SELECT dblink_exec('c', 'PREPARE p(int) AS SELECT $1');
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);

SELECT dblink_send_query('b', $$EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c',
  $$EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');
-- Nothing of them ran.
SELECT last_value, is_called FROM regress.early_seq;

SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT count(*) AS plan_lines FROM dblink_get_result('c') AS t(line text);
SELECT * FROM dblink_get_result('c') AS t(line text);
SELECT last_value, is_called FROM regress.early_seq;

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c');
SELECT regress.quiet();
DROP SEQUENCE regress.early_seq;
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
