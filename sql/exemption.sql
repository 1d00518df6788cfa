-- Exemption follows the session user. An exempt superuser's session that
-- has decided its exemption, then runs SET SESSION AUTHORIZATION, is gated
-- as the new session user; RESET SESSION AUTHORIZATION makes it exempt
-- again. SET ROLE changes the current user only: the session user, and so
-- the exemption, stay (docs/REFERENCE.md, "Who is gated").
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');

SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('s', regress.conninfo(current_user));
SELECT pid AS s_pid FROM dblink('s', 'SELECT pg_backend_pid()') AS t(pid int) \gset
-- The superuser's session has decided its exemption.
SELECT * FROM dblink('s', 'SELECT 1') AS t(x int);
SELECT state FROM gatekeeper.sessions WHERE pid = :s_pid;

-- A holds the only place.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
-- As regress_app, the same session parks.
SELECT dblink_exec('s', 'SET SESSION AUTHORIZATION regress_app');
SELECT dblink_send_query('s', 'SELECT session_user::text');
SELECT regress.wait_for('SELECT queued = 1 FROM gatekeeper.status');
SELECT state, queue_position FROM gatekeeper.sessions WHERE pid = :s_pid;
SELECT dblink_exec('a', 'COMMIT');
SELECT * FROM dblink_get_result('s') AS t(u text);
SELECT * FROM dblink_get_result('s') AS t(u text);

-- Back to the superuser: exempt again, it walks past a full gate.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', 'SELECT 1') AS t(x int);
SELECT dblink_exec('s', 'RESET SESSION AUTHORIZATION');
SELECT * FROM dblink('s', 'SELECT session_user = current_user AS back') AS t(back boolean);
SELECT state FROM gatekeeper.sessions WHERE pid = :s_pid;
-- SET ROLE keeps the session user, and its exemption.
SELECT dblink_exec('s', 'SET ROLE regress_app');
SELECT * FROM dblink('s', 'SELECT current_user::text') AS t(u text);
SELECT state FROM gatekeeper.sessions WHERE pid = :s_pid;
SELECT dblink_exec('s', 'RESET ROLE');
SELECT admitted, queued FROM gatekeeper.status;
SELECT dblink_exec('a', 'COMMIT');

SELECT dblink_disconnect('a'), dblink_disconnect('s');
SELECT regress.quiet();
ALTER SYSTEM RESET ALL;
SELECT pg_reload_conf();
