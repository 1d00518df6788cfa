-- The SQL surface: objects, columns, function properties, sane values.
SELECT extversion FROM pg_extension WHERE extname = 'pg_gatekeeper';

SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_gatekeeper')
   AND deptype = 'e'
 ORDER BY 1;

SELECT table_name, column_name, data_type
  FROM information_schema.columns
 WHERE table_schema = 'gatekeeper'
 ORDER BY table_name, ordinal_position;

SELECT proname, provolatile, proparallel, proretset, prosecdef
  FROM pg_proc WHERE pronamespace = 'gatekeeper'::regnamespace ORDER BY 1;

-- Values that do not depend on the machine.
SELECT max_active >= 1 AS has_limit, limit_source, effective_cpus > 0 AS has_cpus,
       tickets >= max_active AS tickets_ok, ticket_ceiling >= max_active AS ceiling_ok,
       admitted, queued, stats_reset IS NOT NULL AS has_reset
  FROM gatekeeper.status;

-- The lending cap (lend_by_throughput is on by default): within the limit
-- and the ceiling, and a probe is up, down or none.
SELECT lend_cap BETWEEN max_active AND ticket_ceiling AS lend_cap_ok,
       coalesce(lend_probe IN ('up', 'down'), true) AS lend_probe_ok
  FROM gatekeeper.status;

-- Reading the status view costs next to nothing to plan and run: its
-- functions return one row each. At the default estimate of 1000 rows a
-- function, its cross join was costed past jit_above_cost, and every read
-- was JIT-compiled (140-260 ms of CPU).
CREATE FUNCTION pg_temp.plan_cost(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    j json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO j;
    RETURN (j -> 0 -> 'Plan' ->> 'Total Cost')::float8;
END $$;
SELECT cost < 1000 AS status_plan_cheap,
       cost < current_setting('jit_above_cost')::float8 AS status_plan_below_jit
  FROM pg_temp.plan_cost('SELECT * FROM gatekeeper.status') AS cost;

-- The limit is derived from the CPUs: ceil(effective_cpus * active_per_cpu),
-- its floor, and may adapt up to ceil(effective_cpus * active_per_cpu_max).
SELECT max_active = ceil(effective_cpus * current_setting('pg_gatekeeper.active_per_cpu')::float8)
       AS auto_limit_matches,
       limit_min = max_active AS at_floor,
       limit_max = ceil(effective_cpus * current_setting('pg_gatekeeper.active_per_cpu_max')::float8)
       AS ceiling_matches,
       limit_reason, limit_changed_at <= now() AS changed_before
  FROM gatekeeper.status;

-- This superuser session is exempt by default, and so shown.
SELECT state, queue_position, usename IS NOT NULL AS sees_itself
  FROM gatekeeper.sessions WHERE pid = pg_backend_pid();

SELECT count(*) AS buckets, bool_and(lower_ms < coalesce(upper_ms, 'infinity')) AS ordered,
       count(*) FILTER (WHERE upper_ms IS NULL) AS open_buckets
  FROM gatekeeper.wait_histogram;

-- The worker samples history (every 100 ms in this instance).
SELECT regress.wait_for('SELECT count(*) >= 2 FROM gatekeeper.history');
SELECT bool_and(sample_time IS NOT NULL AND max_active >= 1) AS history_ok FROM gatekeeper.history;

-- The worker runs and is recognisable.
SELECT backend_type FROM pg_stat_activity WHERE backend_type LIKE 'pg_gatekeeper%';
