"""PgBouncer in transaction pooling mode in front of the benchmark's cluster."""

import os
import shutil
import signal
import socket
import subprocess
import time

from util import as_postgres, clean_env, open_files_limit, pinned

# --------------------------------------------------------------------------
# PgBouncer

class Bouncer:
    def __init__(self, args, cluster, pool, max_clients):
        self.a = args
        self.pool = pool
        self.port = args.pgbouncer_port
        d = os.path.join(args.workdir, "pgbouncer-%d" % pool)
        os.makedirs(d, exist_ok=True)
        shutil.chown(d, "postgres", "postgres")
        self.dir = d
        self.ini = os.path.join(d, "pgbouncer.ini")
        self.pidfile = os.path.join(d, "pgbouncer.pid")
        self.logfile = os.path.join(d, "pgbouncer.log")
        with open(os.path.join(d, "userlist.txt"), "w") as f:
            f.write('"bench" ""\n"postgres" ""\n')
        extra = ""
        if args.pgbouncer_prepared:
            extra = "max_prepared_statements = 200\n"
        with open(self.ini, "w") as f:
            f.write(f"""[databases]
bench = host={cluster.sock} port={cluster.port} dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {d}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = {max_clients + 100}
max_db_connections = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
logfile = {self.logfile}
pidfile = {self.pidfile}
{extra}""")
        for fn in os.listdir(d):
            shutil.chown(os.path.join(d, fn), "postgres", "postgres")
        # One descriptor per client and per server connection, and some to
        # spare (what PgBouncer logs as "max expected fd use").
        self.nofile = max_clients + 100 + pool + 100
        self.proc = None
        self.pid = None

    def start(self):
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        # runuser's PAM session sets the soft open-file limit back to 1024,
        # and PgBouncer does not raise it: with 1000 clients a pool of 32
        # then ran out of descriptors for its server connections ("sbuf_connect
        # failed: Too many open files") and worked with about 20 of them.
        # With --pin it shares the server's CPUs, as on a database host.
        self.proc = subprocess.Popen(as_postgres(pinned(self.a.server_cpus, [
                                         "prlimit", "--nofile=%d:" % self.nofile, "pgbouncer", self.ini])),
                                     env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while not self._listening():
            if self.proc.poll() is not None:
                raise RuntimeError("pgbouncer exited at start (rc %s); see %s" % (self.proc.returncode, self.logfile))
            if time.time() > deadline:
                raise RuntimeError("pgbouncer did not start listening; see %s" % self.logfile)
            time.sleep(0.05)
        soft = open_files_limit(self.pid)
        if soft is not None and soft < self.nofile:
            raise RuntimeError("pgbouncer's open-file limit is %d, below the %d it needs for "
                               "these clients" % (soft, self.nofile))

    def _listening(self):
        """Whether PgBouncer has written its pid file and accepts connections."""
        if self.pid is None and os.path.exists(self.pidfile):
            try:
                with open(self.pidfile) as f:
                    self.pid = int(f.read().strip())
            except ValueError:
                pass
        if self.pid is None:
            return False
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", self.port))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def stop(self):
        if self.proc is None:
            return
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            if self.pid:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
        self.proc = None
        self.pid = None

