#!/usr/bin/env python3
"""Times commands in alternation: round after round, every command once, in an order that changes each round.

A noisy machine (a busy neighbour, a frequency change) then slows every command alike instead of whichever
hyperfine happened to be running. Prints a markdown table: for each command the median wall time (with min and
max), its median user and system CPU time and its largest peak resident memory (GNU time's %M: the largest of
the command's processes; measured through /usr/bin/time, since a child forked from this Python process would count
Python's own pages until it execs), and its wall time relative to the first command's. Usage:

    interleaved_timing.py ROUNDS NAME=COMMAND NAME=COMMAND ...
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

rounds = int(sys.argv[1])
commands = [a.split("=", 1) for a in sys.argv[2:]]
runs = {name: [] for name, _ in commands}
for r in range(rounds + 1):  # round 0 warms the page cache and is not counted
    order = commands[r % len(commands):] + commands[:r % len(commands)]
    for name, cmd in order:
        with tempfile.NamedTemporaryFile("r") as peak:
            start = time.perf_counter()
            child = subprocess.Popen(
                ["/usr/bin/time", "-f", "%M", "-o", peak.name, "sh", "-c", cmd], stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - start
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 0:
                sys.exit(f"{name}: exit status {child.returncode}: {cmd}")
            kilobytes = int(peak.read().split()[-1])
        if r > 0:
            runs[name].append((wall, usage.ru_utime, usage.ru_stime, kilobytes))
first = statistics.median(w for w, _, _, _ in runs[commands[0][0]])
print(f"| command | wall median | min … max | user | system | peak RSS | wall relative to {commands[0][0]} |")
print("|---|---|---|---|---|---|---|")
for name, _ in commands:
    walls = [w for w, _, _, _ in runs[name]]
    m = statistics.median(walls)
    user = statistics.median(u for _, u, _, _ in runs[name])
    system = statistics.median(s for _, _, s, _ in runs[name])
    rss = max(k for _, _, _, k in runs[name])
    print(f"| {name} | {m * 1000:.1f} ms | {min(walls) * 1000:.1f} … {max(walls) * 1000:.1f} ms | {user * 1000:.0f} ms | "
          f"{system * 1000:.0f} ms | {rss / 1024:.1f} MB | {m / first:.2f} |")
