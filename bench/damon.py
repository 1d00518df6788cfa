"""DAMON, the kernel's data access monitor: what runs, and pausing it.

Some virtual machines run DAMON with a page-out scheme (`kdamond`
threads): it samples the accessed bits of physical pages and pages out
those not used for a while. Checking a page of shared memory walks every
mapping of it, and every backend maps the shared buffers, so its cost
grows with the server's processes: at 4000 connections it is charged
hundreds of microseconds per commit, against one or two behind a pool of
8 (`bench/results/profile-c4000-pinned-20261128/NOTE.md`). A database
server without DAMON does not pay it. Every run records what runs
(`describe`); `bench.py --damon stop` pauses it for the run and starts it
again at exit, so that a run can show the server's cost without it."""

import os

from util import log

ROOT = "/sys/kernel/mm/damon/admin/kdamonds"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _numbered(path):
    """The numbered entries of one of DAMON's sysfs directories, in order."""
    try:
        names = [n for n in os.listdir(path) if n.isdigit()]
    except OSError:
        return []
    return [os.path.join(path, n) for n in sorted(names, key=int)]


def running():
    """The kdamond directories whose thread runs."""
    return [kd for kd in _numbered(ROOT) if _read(os.path.join(kd, "state")) == "on"]


def _schemes(kd):
    """'paddr pageout' and the like: each context's operations and actions."""
    out = []
    for ctx in _numbered(os.path.join(kd, "contexts")):
        acts = [_read(os.path.join(s, "action")) for s in _numbered(os.path.join(ctx, "schemes"))]
        out.append("%s %s" % (_read(os.path.join(ctx, "operations")), "/".join(acts) or "no scheme"))
    return ", ".join(out) or "no context"


def describe():
    """One line: which kdamonds run and what they do, or that none does."""
    kds = running()
    if not kds:
        return "none running"
    return "%d kdamond(s) running (%s)" % (len(kds), "; ".join(_schemes(kd) for kd in kds))


class Pause:
    """Stops the running kdamonds and starts them again (at exit, or on
    `restore`). Only those it stopped are started again."""

    def __init__(self):
        self.stopped = []

    def stop(self):
        for kd in running():
            try:
                with open(os.path.join(kd, "state"), "w") as f:
                    f.write("off")
                self.stopped.append(kd)
            except OSError as e:
                raise SystemExit("--damon stop: cannot stop %s: %s" % (kd, e)) from e
        if self.stopped:
            log("DAMON: stopped %d kdamond(s) for the run, started again at exit" % len(self.stopped))
        else:
            log("DAMON: none running, nothing to stop")
        return bool(self.stopped)

    def restore(self):
        while self.stopped:
            kd = self.stopped.pop()
            try:
                with open(os.path.join(kd, "state"), "w") as f:
                    f.write("on")
            except OSError as e:
                log("DAMON: could not start %s again: %s (echo on > %s/state)" % (kd, e, kd))
