-- A database whose encoding is not UTF-8: text there is held as bytes of
-- that encoding, which the functions take and the views show as they are
-- (pg_stat_activity's way), with no internal error and nothing garbled.
\set VERBOSITY default
CREATE DATABASE regress_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c regress_latin1
CREATE EXTENSION pg_gatekeeper;
CREATE EXTENSION dblink;

-- Class names are ASCII: a name with another byte names no class, and the
-- error shows it escaped.
SELECT gatekeeper.route_shape(1, 'rep' || chr(233));
SELECT gatekeeper.route_shape(1, NULL);

-- A role named in this encoding (its name's last byte is not UTF-8):
-- gatekeeper.sessions shows its name and the database's as
-- pg_stat_activity does.
DO $$ BEGIN EXECUTE format('CREATE ROLE %I LOGIN', 'regress_r' || chr(233)); END $$;
SELECT dblink_connect('l', format('host=%s port=%s dbname=regress_latin1 user=%s',
         split_part(current_setting('unix_socket_directories'), ',', 1),
         current_setting('port'), 'regress_r' || chr(233)));
SELECT s.usename = 'regress_r' || chr(233) AS usename_as_held,
       s.usename = a.usename::text AS usename_as_pg_stat_activity,
       s.datname = a.datname::text AS datname_as_pg_stat_activity
  FROM gatekeeper.sessions s JOIN pg_stat_activity a USING (pid)
 WHERE pid = (SELECT p FROM dblink('l', 'SELECT pg_backend_pid()') AS t(p int));
SELECT dblink_disconnect('l');
DO $$ BEGIN EXECUTE format('DROP ROLE %I', 'regress_r' || chr(233)); END $$;
\c regression
DROP DATABASE regress_latin1 WITH (FORCE);
