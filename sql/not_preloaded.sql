-- Without shared_preload_libraries, loading the library fails with 55000.
\set SHOW_CONTEXT never
\set VERBOSITY default
CREATE EXTENSION pg_gatekeeper;
\echo :LAST_ERROR_SQLSTATE
LOAD 'pg_gatekeeper';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM pg_extension WHERE extname = 'pg_gatekeeper';
