-- pg_gatekeeper 0.4.0 -> 0.5.0: query shapes and the long lane. New: the
-- view gatekeeper.shapes and its function, route_shape(), unroute_shape()
-- and reset_shapes() (revoked from PUBLIC, as reset() is); the view
-- gatekeeper.status gains two last columns, lend_cap and lend_probe, from a
-- new function lending_state() that it joins; status(), limit_state() and
-- lending_state() are declared to return one row (ROWS 1), so that the
-- view is not JIT-compiled. Nothing else existing changes; the class long
-- appears in gatekeeper.classes because the library defines it, not
-- because of this script.
\echo Use "ALTER EXTENSION pg_gatekeeper UPDATE TO '0.5.0'" to load this file. \quit

-- Every object of the extension is in schema gatekeeper, and the schema's
-- owner could rename it or drop it with all of them. CREATE EXTENSION
-- refuses a schema of that name owned by a role that is not a superuser
-- since 0.5.0; an install of an earlier version in such a schema is
-- refused here too, before anything changes.
DO $gatekeeper$
DECLARE
    owner name;
BEGIN
    SELECT r.rolname INTO owner
      FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
     WHERE n.nspname = 'gatekeeper' AND NOT r.rolsuper;
    IF FOUND THEN
        RAISE EXCEPTION 'schema "gatekeeper" is owned by role "%", which is not a superuser', owner
            USING ERRCODE = '42501',
                  DETAIL = 'Its owner could rename or drop the objects of the extension.',
                  HINT = 'Make a superuser its owner (ALTER SCHEMA gatekeeper OWNER TO ...), then update the extension again.';
    END IF;
END
$gatekeeper$;

CREATE FUNCTION gatekeeper."shapes"() RETURNS TABLE (
	"userid" oid,  /* pg_sys :: Oid */
	"dbid" oid,  /* pg_sys :: Oid */
	"queryid" bigint,  /* Option < i64 > */
	"lane" TEXT,  /* & '_ str */
	"routed_to" TEXT,  /* Option < String > */
	"routed_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"runs" bigint,  /* i64 */
	"long_runs" bigint,  /* i64 */
	"routed_total" bigint,  /* i64 */
	"mean_time_ms" double precision,  /* Option < f64 > */
	"last_run" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"entered_lane" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shapes_wrapper';

CREATE FUNCTION gatekeeper."route_shape"(
	"queryid" bigint, /* Option < i64 > */
	"class" TEXT, /* Option < & str > */
	"duration" interval DEFAULT NULL /* Option < Interval > */
) RETURNS void
PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'route_shape_wrapper';

CREATE FUNCTION gatekeeper."unroute_shape"(
	"queryid" bigint /* i64 */
) RETURNS bool /* bool */
STRICT PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'unroute_shape_wrapper';

CREATE FUNCTION gatekeeper."reset_shapes"(
	"routes" bool DEFAULT false /* bool */
) RETURNS void
STRICT PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'reset_shapes_wrapper';

CREATE VIEW gatekeeper.shapes AS SELECT * FROM gatekeeper.shapes();
COMMENT ON VIEW gatekeeper.shapes IS 'pg_gatekeeper: one row per query shape (role, database and query id of a transaction''s first statement) with its lane, and one per route in force';
GRANT SELECT ON gatekeeper.shapes TO PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.route_shape(bigint, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.unroute_shape(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatekeeper.reset_shapes(boolean) FROM PUBLIC;

CREATE FUNCTION gatekeeper."lending_state"() RETURNS TABLE (
	"lend_cap" INT,  /* Option < i32 > */
	"lend_probe" TEXT  /* Option < & '_ str > */
)
STRICT PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lending_state_wrapper';

-- Each returns one row: at the default estimate of 1000 rows a function,
-- the view's cross join of three is costed past jit_above_cost, and every
-- read of it would be JIT-compiled (140-260 ms of CPU).
ALTER FUNCTION gatekeeper.status() ROWS 1;
ALTER FUNCTION gatekeeper.limit_state() ROWS 1;
ALTER FUNCTION gatekeeper.lending_state() ROWS 1;

-- New columns at the end: the view keeps its grants and what depends on it.
CREATE OR REPLACE VIEW gatekeeper.status AS
    SELECT * FROM gatekeeper.status() CROSS JOIN gatekeeper.limit_state() CROSS JOIN gatekeeper.lending_state();
