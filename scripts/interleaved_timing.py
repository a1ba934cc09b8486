#!/usr/bin/env python3
"""Times commands in alternation: round after round, every command once, in an order that changes each round.

A noisy machine (a busy neighbour, a frequency change) then slows every command alike instead of whichever
hyperfine happened to be running. Prints a markdown table of medians, min and max, and each command's time
relative to the first one. Usage: interleaved_timing.py ROUNDS NAME=COMMAND NAME=COMMAND ...
"""
import statistics
import subprocess
import sys
import time

rounds = int(sys.argv[1])
commands = [a.split("=", 1) for a in sys.argv[2:]]
times = {name: [] for name, _ in commands}
for r in range(rounds + 1):  # round 0 warms the page cache and is not counted
    order = commands[r % len(commands):] + commands[:r % len(commands)]
    for name, cmd in order:
        start = time.perf_counter()
        subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
        if r > 0:
            times[name].append(time.perf_counter() - start)
first = statistics.median(times[commands[0][0]])
print(f"| command | median | min … max | relative to {commands[0][0]} |")
print("|---|---|---|---|")
for name, _ in commands:
    t = times[name]
    m = statistics.median(t)
    print(f"| {name} | {m * 1000:.1f} ms | {min(t) * 1000:.1f} … {max(t) * 1000:.1f} ms | {m / first:.2f} |")
