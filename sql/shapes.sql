-- Query shapes: what the view shows whom, and the functions' errors.
-- (How shapes enter and leave the long lane is in tests/lane.rs.)
\set VERBOSITY default
SELECT gatekeeper.reset_shapes(true);

-- Two gated roles each run the same query: one shape each, since a
-- shape is a role's (and the view query of regress_other, which is gated
-- too: it is not in pg_monitor).
\c - regress_app
SELECT 1 AS app_query;
\c - regress_other
SELECT 1 AS app_query;

-- A role sees its own query ids only; pg_read_all_stats sees them all.
SELECT count(*) AS shapes, count(queryid) AS visible FROM gatekeeper.shapes;
\c - regress_monitor
SELECT count(*) AS shapes, count(queryid) AS visible FROM gatekeeper.shapes;
\c - postgres
SELECT userid::regrole, dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AS here,
       queryid <> 0 AS has_id, lane, routed_to, runs, long_runs, routed_total, mean_time_ms >= 0 AS timed,
       last_run <= now() AS seen, entered_lane
  FROM gatekeeper.shapes ORDER BY userid::regrole::text;
SELECT count(DISTINCT queryid) AS query_ids FROM gatekeeper.shapes;

-- Routes: to a class that exists, for a while or for good. A route is a
-- row of its own, for every role: its userid and lane are NULL.
SELECT queryid AS q FROM gatekeeper.shapes WHERE userid = 'regress_app'::regrole \gset
SELECT gatekeeper.route_shape(:q, 'long');
-- A duration past the end of time is for good, as NULL is.
SELECT gatekeeper.route_shape(:q, 'long', '100000000 years');
SELECT userid, lane, routed_to, routed_until FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
SELECT gatekeeper.route_shape(:q, 'default', '1 hour');
SELECT routed_to, routed_until > now() AS for_a_while FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
SELECT gatekeeper.unroute_shape(:q);
SELECT gatekeeper.unroute_shape(:q);
SELECT count(*) FILTER (WHERE userid IS NULL) AS routes, count(*) FILTER (WHERE userid IS NOT NULL) AS shapes
  FROM gatekeeper.shapes WHERE queryid = :q;

-- A route counts where it is followed: not once its class is gone (the
-- transaction then runs in default).
ALTER SYSTEM SET pg_gatekeeper.classes = 'rep';
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 3 FROM gatekeeper.classes');
SELECT gatekeeper.route_shape(:q, 'rep');
\c - regress_app
SELECT 1 AS app_query;
\c - postgres
SELECT routed_to, routed_total FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
ALTER SYSTEM RESET pg_gatekeeper.classes;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT count(*) = 2 FROM gatekeeper.classes');
\c - regress_app
SELECT 1 AS app_query;
\c - postgres
SELECT routed_to, routed_total FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
-- A session's class that is not defined is no class: the route applies.
SELECT gatekeeper.route_shape(:q, 'long');
ALTER ROLE regress_app SET pg_gatekeeper.class = 'undefined_class';
\c - regress_app
SELECT 1 AS app_query;
\c - postgres
ALTER ROLE regress_app RESET pg_gatekeeper.class;
SELECT routed_to, routed_total FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
SELECT gatekeeper.unroute_shape(:q);
-- With no query ids computed, a route is set but matches nothing: a WARNING.
-- Read where the sessions' settings come from (here the database's), not
-- from a SET of the caller's own session.
SET compute_query_id = off;
SELECT gatekeeper.route_shape(:q, 'long');
SELECT gatekeeper.unroute_shape(:q);
SELECT current_database() AS db \gset
ALTER DATABASE :"db" SET compute_query_id = off;
\c - postgres
SELECT gatekeeper.route_shape(:q, 'long');
ALTER DATABASE :"db" RESET compute_query_id;
\c - postgres
SELECT gatekeeper.unroute_shape(:q);

-- Bad input.
SELECT gatekeeper.route_shape(0, 'long');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.route_shape(:q, 'no_such_class');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.route_shape(:q, 'long', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.route_shape(:q, 'long', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.route_shape(NULL, 'long');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.route_shape(:q, NULL);
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.long_lane = 'sometimes';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET pg_gatekeeper.max_shapes = -1;
\echo :LAST_ERROR_SQLSTATE
-- A reload setting and a restart setting: not for a session.
SET pg_gatekeeper.long_lane = 'off';
\echo :LAST_ERROR_SQLSTATE
SET pg_gatekeeper.max_shapes = 10;
\echo :LAST_ERROR_SQLSTATE

-- Only a superuser (or whom one grants) may route or forget.
\c - regress_app
SELECT gatekeeper.route_shape(:q, 'long');
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.unroute_shape(:q);
\echo :LAST_ERROR_SQLSTATE
SELECT gatekeeper.reset_shapes();
\echo :LAST_ERROR_SQLSTATE
\c - postgres

-- Forgetting keeps routes unless asked.
SELECT gatekeeper.route_shape(:q, 'long');
SELECT gatekeeper.reset_shapes();
SELECT count(*) AS kept, min(routed_to) AS route, max(runs) AS runs FROM gatekeeper.shapes;
SELECT gatekeeper.reset_shapes(true);
SELECT count(*) AS left FROM gatekeeper.shapes;

-- DROP DATABASE forgets that database's shapes and routes: a route of a
-- database that is gone could not be ended, and a new database may get its
-- OID. The other databases' routes stay.
SELECT gatekeeper.route_shape(:q, 'long');
CREATE DATABASE regress_gone;
SELECT oid AS gone FROM pg_database WHERE datname = 'regress_gone' \gset
\c regress_gone
CREATE EXTENSION pg_gatekeeper;
SELECT gatekeeper.route_shape(4242, 'long');
\c :db
SELECT dbid = :gone AS there, routed_to FROM gatekeeper.shapes WHERE queryid IN (:q, 4242) ORDER BY 1;
DROP DATABASE regress_gone;
SELECT dbid = :gone AS there, routed_to FROM gatekeeper.shapes WHERE queryid IN (:q, 4242) ORDER BY 1;
-- A DROP DATABASE that never got past the queue dropped nothing: the
-- session's next utility statement forgets nothing either.
ALTER SYSTEM SET pg_gatekeeper.max_active = 1;
ALTER SYSTEM SET pg_gatekeeper.max_tickets = 1;
SELECT pg_reload_conf();
SELECT regress.wait_for('SELECT max_active = 1 AND tickets = 1 FROM gatekeeper.status');
ALTER ROLE regress_app SET pg_gatekeeper.queue_timeout = '100ms';
SET client_min_messages = warning;
SELECT dblink_connect('a', regress.conninfo('regress_app'));
SELECT dblink_connect('b', regress.conninfo('regress_app'));
SELECT dblink_exec('a', 'BEGIN');
-- Not query :q, which is routed to the lane.
SELECT * FROM dblink('a', 'SELECT 2, 3') AS t(x int, y int);
SELECT dblink_exec('b', format('DROP DATABASE %I', :'db'), false) AS result;
SELECT split_part(dblink_error_message('b'), E'\n', 1) AS error;
SELECT dblink_exec('a', 'COMMIT');
SELECT dblink_exec('b', 'SET work_mem = ''2MB''');
SELECT routed_to FROM gatekeeper.shapes WHERE queryid = :q AND userid IS NULL;
SELECT dblink_disconnect('a'), dblink_disconnect('b');
RESET client_min_messages;
ALTER ROLE regress_app RESET pg_gatekeeper.queue_timeout;
ALTER SYSTEM RESET pg_gatekeeper.max_active;
ALTER SYSTEM RESET pg_gatekeeper.max_tickets;
SELECT pg_reload_conf();
SELECT gatekeeper.reset_shapes(true);
