-- Nothing a statement runs happens before its admission: not EXECUTE's
-- parameters, plain or under EXPLAIN ANALYZE, and not a domain's CHECK
-- reached while parse analysis converts a literal (an array of a domain:
-- array_in runs the element's domain_in there, before any statement hook).
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');

-- Evidence that something ran: the sequence moves, whether or not its
-- transaction commits.
CREATE SEQUENCE regress.early_seq;
GRANT USAGE ON SEQUENCE regress.early_seq TO PUBLIC;
CREATE DOMAIN regress.dearly AS int CHECK (VALUE > 0 AND nextval('regress.early_seq') > 0);

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
SELECT dblink_connect('d', regress.conninfo('regress_app'));
-- Prepared while the gate is open.
SELECT dblink_exec('b', 'PREPARE p(int) AS SELECT $1');
SELECT dblink_exec('c', 'PREPARE p(int) AS SELECT $1');
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);

SELECT dblink_send_query('b', $$EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c',
  $$EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');
SELECT dblink_send_query('d', $$SELECT '{1}'::regress.dearly[]$$);
SELECT regress.wait_for('SELECT queued = 3 FROM gatekeeper.status');
-- Nothing of them ran.
SELECT last_value, is_called FROM regress.early_seq;

SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT count(*) > 0 AS explained FROM dblink_get_result('c') AS t(line text);
SELECT * FROM dblink_get_result('c') AS t(line text);
SELECT * FROM dblink_get_result('d') AS t(x text);
SELECT * FROM dblink_get_result('d') AS t(x text);
SELECT last_value, is_called FROM regress.early_seq;

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c'), dblink_disconnect('d');
SELECT regress.quiet();
DROP DOMAIN regress.dearly;
DROP SEQUENCE regress.early_seq;
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
