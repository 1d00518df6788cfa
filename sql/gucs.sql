-- Pin every setting: name, type, context, unit, bounds, default.
SELECT name, vartype, context, unit, min_val, max_val, boot_val
  FROM pg_settings WHERE name LIKE 'pg_gatekeeper.%' ORDER BY name;

-- Units: milliseconds accept and show time units.
SET pg_gatekeeper.queue_timeout = '2s';
SHOW pg_gatekeeper.queue_timeout;
SELECT setting, unit FROM pg_settings WHERE name = 'pg_gatekeeper.queue_timeout';
RESET pg_gatekeeper.queue_timeout;

-- A superuser may step around the gate for their own session only.
SET pg_gatekeeper.enabled = off;
SHOW pg_gatekeeper.enabled;
RESET pg_gatekeeper.enabled;

-- The prefix is reserved: a typo is an error, not a silent placeholder.
SET pg_gatekeeper.max_activ = 3;
\echo :LAST_ERROR_SQLSTATE

-- Pin every description too: a setting whose behaviour changes must have
-- its description read again.
\pset format unaligned
\pset tuples_only on
SELECT name, short_desc, extra_desc
  FROM pg_settings WHERE name LIKE 'pg_gatekeeper.%' ORDER BY name;
\pset tuples_only off
\pset format aligned
