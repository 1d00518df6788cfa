-- Nothing a statement runs happens before its admission: not EXECUTE's
-- parameters, plain or under EXPLAIN ANALYZE, not a domain's CHECK
-- reached while parse analysis converts a literal (an array of a domain:
-- array_in runs the element's domain_in there, before any statement hook),
-- and not the initial partition pruning that EXPLAIN without ANALYZE runs
-- when it starts the executor on a cached plan (no planner hook fires):
-- it evaluates stable functions, a user's among them.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
-- The holder below idles in its transaction: the progress guarantee must
-- not admit the others while they are checked.
ALTER SYSTEM SET pg_gatekeeper.progress_timeout = '1h';
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');

-- Evidence that something ran: the sequence moves, whether or not its
-- transaction commits.
CREATE SEQUENCE regress.early_seq;
GRANT USAGE ON SEQUENCE regress.early_seq TO PUBLIC;
CREATE DOMAIN regress.dearly AS int CHECK (VALUE > 0 AND nextval('regress.early_seq') > 0);
CREATE SEQUENCE regress.prune_seq;
GRANT USAGE ON SEQUENCE regress.prune_seq TO PUBLIC;
CREATE FUNCTION regress.prune_key() RETURNS int LANGUAGE plpgsql STABLE
  AS $$BEGIN RETURN nextval('regress.prune_seq')::int % 2 + 1; END$$;
CREATE TABLE regress.early_part (k int) PARTITION BY LIST (k);
CREATE TABLE regress.early_part1 PARTITION OF regress.early_part FOR VALUES IN (1);
CREATE TABLE regress.early_part2 PARTITION OF regress.early_part FOR VALUES IN (2);
GRANT SELECT ON regress.early_part TO PUBLIC;

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('c', regress.conninfo('regress_app'));
SELECT dblink_connect('d', regress.conninfo('regress_app'));
SELECT dblink_connect('e', regress.conninfo('regress_app'));
-- Prepared while the gate is open.
SELECT dblink_exec('b', 'PREPARE p(int) AS SELECT $1');
SELECT dblink_exec('c', 'PREPARE p(int) AS SELECT $1');
-- No parameters: the generic plan, cached at its first run.
SELECT dblink_exec('e', 'PREPARE q AS SELECT k FROM regress.early_part WHERE k = regress.prune_key()');
SELECT count(*) AS rows FROM dblink('e', 'EXECUTE q') AS t(k int);
SELECT last_value AS pruned_before FROM regress.prune_seq \gset
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);

SELECT dblink_send_query('b', $$EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_send_query('c',
  $$EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) EXECUTE p(nextval('regress.early_seq')::int)$$);
SELECT regress.wait_for('SELECT queued = 2 FROM gatekeeper.status');
SELECT dblink_send_query('d', $$SELECT '{1}'::regress.dearly[]$$);
SELECT regress.wait_for('SELECT queued = 3 FROM gatekeeper.status');
SELECT dblink_send_query('e', 'EXPLAIN (COSTS OFF) EXECUTE q');
SELECT regress.wait_for('SELECT queued = 4 FROM gatekeeper.status');
-- Nothing of them ran.
SELECT last_value, is_called FROM regress.early_seq;
SELECT last_value = :pruned_before AS pruning_waited FROM regress.prune_seq;

SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT * FROM dblink_get_result('b') AS t(x int);
SELECT count(*) > 0 AS explained FROM dblink_get_result('c') AS t(line text);
SELECT * FROM dblink_get_result('c') AS t(line text);
SELECT * FROM dblink_get_result('d') AS t(x text);
SELECT * FROM dblink_get_result('d') AS t(x text);
SELECT count(*) > 0 AS explained FROM dblink_get_result('e') AS t(line text);
SELECT * FROM dblink_get_result('e') AS t(line text);
SELECT last_value, is_called FROM regress.early_seq;
-- The EXPLAIN did evaluate the function, once admitted.
SELECT last_value > :pruned_before AS pruning_ran FROM regress.prune_seq;

SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('c'), dblink_disconnect('d'), dblink_disconnect('e');
SELECT regress.quiet();
DROP DOMAIN regress.dearly;
DROP SEQUENCE regress.early_seq;
DROP TABLE regress.early_part;
DROP FUNCTION regress.prune_key();
DROP SEQUENCE regress.prune_seq;
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
