#!/usr/bin/env python3
"""jackd's log, read once for everything that needs it: the soak (scripts/soak.py), the xrun tracer
(scripts/xrun-trace.py), the device benchmark (scripts/bench.sh) and the tests' JACK server (Tests/Support).

What jackd (the dummy driver) writes when a cycle goes wrong:
- "JackTimedDriver::Process XRun = N usec": the driver's own thread woke late (a late wake); it is printed at the end of
  the cycle whose wake came late.
- "… client = NAME was not finished, state = …" and "XRun: client NAME finished after current callback": a client
  the graph waited for (running its callback when the state is Running or it finished after the callback).
- "… ProcessGraph… Process error": the end of a cycle the graph did not finish in.
Each of the first two kinds is one xrun notification to the clients: a client counts at most as many xruns as it
was sent.

Usage: scripts/jackd_log.py notifications LOG   (LOG or - for standard input: the count of xrun notifications)
"""
import re
import sys

WAKE = "JackTimedDriver::Process XRun"
STAMP = re.compile(r"^(\d+\.\d{6}) ")
CLIENT = (re.compile(r"client = (\S+) was not finished"), re.compile(r"client (\S+) finished after current callback"))


def classify(line):
    """What one log line says: ("wake",), ("client", name, running), ("cycle",), or None."""
    if WAKE in line:
        return ("wake",)
    for pattern in CLIENT:
        m = pattern.search(line)
        if m:
            return ("client", m.group(1), "state = Running" in line or "finished after current callback" in line)
    if "ProcessGraph" in line and "Process error" in line:
        return ("cycle",)
    return None


def notifications(text):
    """The xrun notifications a log records: its late wakes and the clients it named late."""
    return sum(1 for line in text.splitlines() if (classify(line) or ("",))[0] in ("wake", "client"))


def mentions_xrun(text):
    """Whether some text of a log says anything of an xrun (a late wake, a late client, an unfinished cycle)."""
    return any(classify(line) for line in text.splitlines())


def events(lines, stall_window):
    """From a log whose lines are stamped with the time they were read (a line without a stamp counts as read with the
    line before it): each late wake ("wake", its time, False, []) and each cycle the graph did not finish in ("cycle",
    the time of its first line, whether it was the late wake's, the clients it named late with whether each was
    running its callback). The first unfinished cycle after a late wake, when its first line comes within
    `stall_window` seconds of the wake's, is the wake's: the next cycle comes at once, maybe before the clients it
    signalled have run. Timed from the cycle's first line: jackd's logger can hold a line back until the next."""
    found, late_wake, begun, named, at = [], None, None, [], 0.0
    for line in lines:
        m = STAMP.match(line)
        at = float(m.group(1)) if m else at
        kind = classify(line)
        if kind is None:
            continue
        if kind[0] == "wake":
            found.append(("wake", at, False, []))
            late_wake = at
        elif kind[0] == "client":
            begun = at if begun is None else begun
            named.append((kind[1], kind[2]))
        else:
            begun = at if begun is None else begun
            found.append(("cycle", begun, late_wake is not None and begun - late_wake <= stall_window, named))
            late_wake, begun, named = None, None, []
    return found


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "notifications":
        sys.exit(__doc__.split("Usage: ")[1])
    text = sys.stdin.read() if sys.argv[2] == "-" else open(sys.argv[2], errors="replace").read()
    print(notifications(text))
