-- Objects shared by the other pg_regress tests.
CREATE EXTENSION pg_gatekeeper;
CREATE EXTENSION dblink;
CREATE ROLE regress_app LOGIN;
CREATE ROLE regress_other LOGIN;
CREATE ROLE regress_exempt_group;
CREATE ROLE regress_member LOGIN IN ROLE regress_exempt_group;
-- Neither superuser nor exempt: a monitoring role.
CREATE ROLE regress_monitor LOGIN IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA public TO regress_app, regress_other, regress_member, regress_monitor;
CREATE SCHEMA regress;
GRANT USAGE ON SCHEMA regress TO PUBLIC;

-- Tests wait on observable state: poll a boolean query until it holds.
CREATE FUNCTION regress.wait_for(cond text, timeout interval DEFAULT '20s')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  deadline timestamptz := clock_timestamp() + timeout;
  ok boolean;
BEGIN
  LOOP
    EXECUTE cond INTO ok;
    IF ok THEN RETURN true; END IF;
    IF clock_timestamp() > deadline THEN
      RAISE EXCEPTION 'timed out waiting for: %', cond;
    END IF;
    PERFORM pg_sleep(0.01);
    -- pg_stat_activity is read once per transaction unless told otherwise.
    PERFORM pg_stat_clear_snapshot();
  END LOOP;
END $$;

-- Wait until a reload is visible. A backend applies a reload only between
-- statements, so poll through another session, one statement per poll.
CREATE FUNCTION regress.wait_reload(cond text, timeout interval DEFAULT '20s')
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM dblink_connect('reload_probe', regress.conninfo(current_user));
  PERFORM regress.wait_for(format('SELECT x FROM dblink(%L, %L) AS t(x boolean)',
                                  'reload_probe', 'SELECT ' || cond), timeout);
  PERFORM dblink_disconnect('reload_probe');
  RETURN true;
END $$;

-- A libpq connection string to this instance as the given role.
CREATE FUNCTION regress.conninfo(role text, db text DEFAULT current_database())
RETURNS text LANGUAGE sql AS $$
  SELECT format('host=%s port=%s dbname=%s user=%s application_name=regress_%s',
                split_part(current_setting('unix_socket_directories'), ',', 1),
                current_setting('port'), db, role, role)
$$;

-- The gate at rest: nobody admitted, nobody queued, nobody parked.
CREATE FUNCTION regress.quiet() RETURNS boolean LANGUAGE sql AS $$
  SELECT regress.wait_for($q$
    SELECT s.admitted = 0 AND s.queued = 0
       AND NOT EXISTS (SELECT FROM pg_stat_activity
                       WHERE backend_type = 'client backend' AND wait_event_type = 'Extension')
      FROM gatekeeper.status s$q$)
$$;
