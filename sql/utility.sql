-- Commands that commit internally are admitted once, before they start,
-- keep that admission across their internal commits, and give it back at
-- the end: never ungated, never counted twice. CHECKPOINT needs none.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');
GRANT pg_checkpoint TO regress_app;
GRANT CREATE ON SCHEMA public TO regress_app;
CREATE TABLE public.steps (step int, during_admitted int, during_queued int);
GRANT ALL ON public.steps TO regress_app;
CREATE PROCEDURE public.commits_twice() LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.steps VALUES (1, NULL, NULL);
  COMMIT;
  -- Wait (bounded) until the test has parked a second session behind us.
  FOR i IN 1..2000 LOOP
    EXIT WHEN (SELECT queued FROM gatekeeper.status) > 0;
    PERFORM pg_sleep(0.01);
  END LOOP;
  INSERT INTO public.steps SELECT 2, admitted, queued FROM gatekeeper.status;
  COMMIT;
  INSERT INTO public.steps SELECT 3, admitted, queued FROM gatekeeper.status;
END $$;
GRANT EXECUTE ON PROCEDURE public.commits_twice() TO regress_app;

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_connect('h', regress.conninfo('regress_app'));
CREATE TEMP TABLE pids AS
SELECT 'a' AS conn, pid FROM dblink('a', 'SELECT pg_backend_pid()') AS t(pid int)
UNION ALL SELECT 'b', pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int);
SELECT pid AS a_pid FROM pids WHERE conn = 'a' \gset
SELECT dblink_exec('a', 'CREATE TABLE public.t1 (id int)');
SELECT dblink_exec('a', 'CREATE TABLE public.t2 (id int)');
SELECT gatekeeper.reset();

-- A procedure that COMMITs keeps its one admission throughout: B stays
-- parked across A's internal commits, and is let in when CALL returns.
SELECT dblink_send_query('a', 'CALL public.commits_twice()');
SELECT regress.wait_for('SELECT count(*) = 1 FROM public.steps');
SELECT dblink_send_query('b', 'SELECT ''b ran''');
SELECT * FROM dblink_get_result('a') AS t(x text);
SELECT * FROM dblink_get_result('a') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT * FROM dblink_get_result('b') AS t(x text);
SELECT step, during_admitted, during_queued FROM public.steps ORDER BY step;
SELECT transactions_admitted FROM gatekeeper.sessions WHERE pid = :a_pid;
SELECT regress.quiet();

-- VACUUM of two tables (one internal transaction each), ANALYZE, and
-- CREATE INDEX CONCURRENTLY park while the gate is full, and each is
-- admitted exactly once.
SELECT dblink_exec('h', 'BEGIN');
SELECT * FROM dblink('h', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('a', 'VACUUM public.t1, public.t2');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('h', 'COMMIT');
SELECT * FROM dblink_get_result('a') AS t(x text);
SELECT * FROM dblink_get_result('a') AS t(x text);
SELECT regress.quiet();
SELECT transactions_admitted, times_parked FROM gatekeeper.sessions WHERE pid = :a_pid;

-- CREATE INDEX CONCURRENTLY waits for every older snapshot in its
-- database, this test session's included, so it runs in a database of its own.
CREATE DATABASE regress_cic;
SELECT dblink_exec(regress.conninfo(current_user, 'regress_cic'),
                   'CREATE TABLE public.t3 (id int); ALTER TABLE public.t3 OWNER TO regress_app; GRANT CREATE ON SCHEMA public TO regress_app');
SELECT dblink_connect('cic', regress.conninfo('regress_app', 'regress_cic'));
SELECT pid AS cic_pid FROM dblink('cic', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('h', 'BEGIN');
SELECT * FROM dblink('h', 'SELECT 1') AS t(x int);
SELECT dblink_send_query('cic', 'CREATE INDEX CONCURRENTLY t3_id ON public.t3 (id)');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT dblink_exec('h', 'COMMIT');
SELECT * FROM dblink_get_result('cic') AS t(x text);
SELECT * FROM dblink_get_result('cic') AS t(x text);
SELECT regress.quiet();
SELECT transactions_admitted, times_parked FROM gatekeeper.sessions WHERE pid = :cic_pid;
SELECT dblink_disconnect('cic');
DROP DATABASE regress_cic;

SELECT dblink_exec('a', 'ANALYZE public.t1');
SELECT transactions_admitted FROM gatekeeper.sessions WHERE pid = :a_pid;

-- CHECKPOINT never waits, even with the gate full.
SELECT dblink_exec('h', 'BEGIN');
SELECT * FROM dblink('h', 'SELECT 1') AS t(x int);
SELECT times_parked AS a_parked FROM gatekeeper.sessions WHERE pid = :a_pid \gset
SELECT dblink_exec('a', 'CHECKPOINT');
SELECT times_parked = :a_parked AS checkpoint_never_parked FROM gatekeeper.sessions WHERE pid = :a_pid;
SELECT dblink_exec('h', 'COMMIT');

SELECT dblink_exec('a', 'DROP TABLE public.t1, public.t2');
SELECT dblink_disconnect('a'), dblink_disconnect('b'), dblink_disconnect('h');
DROP PROCEDURE public.commits_twice();
DROP TABLE public.steps;
REVOKE pg_checkpoint FROM regress_app;
REVOKE CREATE ON SCHEMA public FROM regress_app;
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
