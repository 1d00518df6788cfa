-- Databases whose encoding is not UTF-8: text there is held as bytes of
-- that encoding, which the functions take and the views show as they are
-- (pg_stat_activity's way), with no internal error and nothing garbled.
\set VERBOSITY default
CREATE DATABASE regress_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE regress_utf8 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c regress_latin1
CREATE EXTENSION pg_gatekeeper;
CREATE EXTENSION dblink;

-- Class names are ASCII: a name with another byte names no class. The
-- error quotes it with that byte escaped, since the message is in the
-- server's encoding. The other arguments are checked first, as for any
-- name.
SELECT gatekeeper.route_shape(1, 'rep' || chr(233));
SELECT gatekeeper.route_shape(0, 'rep' || chr(233));
SELECT gatekeeper.route_shape(1, NULL);
-- (PostgreSQL's own message quotes the value as it is: only ours here.)
DO $$
DECLARE detail text;
BEGIN
  PERFORM set_config('pg_gatekeeper.class', 'rep' || chr(233), false);
EXCEPTION WHEN invalid_parameter_value THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RAISE NOTICE '%', detail;
END $$;

-- A role and a database named in this encoding (their names' last byte is
-- not UTF-8): gatekeeper.sessions shows their names as pg_stat_activity
-- does.
DO $$ BEGIN EXECUTE format('CREATE ROLE %I LOGIN', 'regress_r' || chr(233)); END $$;
-- (\gexec would echo the name's byte as it is.)
\set ECHO none
SELECT format('CREATE DATABASE %I ENCODING ''LATIN1'' LC_COLLATE ''C'' LC_CTYPE ''C'' TEMPLATE template0',
              'regress_d' || chr(233)) \gexec
\set ECHO all
SELECT dblink_connect('l', format('host=%s port=%s dbname=%s user=%s',
         split_part(current_setting('unix_socket_directories'), ',', 1),
         current_setting('port'), 'regress_d' || chr(233), 'regress_r' || chr(233)));
SELECT s.usename = 'regress_r' || chr(233) AS usename_as_held,
       s.datname = 'regress_d' || chr(233) AS datname_as_held,
       s.usename = a.usename::text AND s.datname = a.datname::text AS as_pg_stat_activity
  FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid)
 WHERE pid = (SELECT p FROM dblink('l', 'SELECT pg_backend_pid()') AS t(p int));
SELECT dblink_disconnect('l');
\set ECHO none
SELECT format('DROP DATABASE %I WITH (FORCE)', 'regress_d' || chr(233)) \gexec
\set ECHO all
DO $$ BEGIN EXECUTE format('DROP ROLE %I', 'regress_r' || chr(233)); END $$;

-- In a UTF-8 database, the same name is quoted as it is.
\c regress_utf8
CREATE EXTENSION pg_gatekeeper;
SELECT gatekeeper.route_shape(1, 'rep' || chr(233));
SELECT set_config('pg_gatekeeper.class', 'rep' || chr(233), false);

\c regression
DROP DATABASE regress_latin1 WITH (FORCE);
DROP DATABASE regress_utf8 WITH (FORCE);
