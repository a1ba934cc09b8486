#!/usr/bin/env python3
"""A take under load: `liveaudio karaoke … --web 127.0.0.1:0 --timing` (started here, stopped by its PID) with its
stage open in headless Chromium and `--busy N` loops of CPU beside it (`yes` into /dev/null, stopped by their PIDs),
until the take ends. Writes what liveaudio printed, what Chromium's page saw and how busy the machine's CPUs were over
the take (from /proc/stat: the share of all CPU time not idle), as JSON for the Swift test KaraokeRoomTests.

Usage: stage_stress.py --out RESULTS.json --cwd DIR [--busy 2] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import os
import signal
import subprocess
import time

from stage_run import Liveaudio, chromium, command


def cpu_times():
    """The machine's CPU time so far, busy and in all, in clock ticks (the first line of /proc/stat)."""
    with open("/proc/stat") as f:
        # user nice system idle iowait irq softirq steal (guest time is counted in user already)
        fields = [int(x) for x in f.readline().split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--busy", type=int, default=2)
    # The loops' niceness: 19 for loops that take only what the machine's other work leaves.
    ap.add_argument("--busy-nice", type=int, default=0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": [], "ticks": 0}
    busy = [subprocess.Popen(["nice", "-n", str(args.busy_nice), "yes"], stdout=subprocess.DEVNULL) for _ in range(args.busy)]
    proc = Liveaudio(command(args), args.cwd)
    d = None
    try:
        r["url"] = proc.url()
        d = chromium()
        d.get(r["url"])
        busy0, all0 = cpu_times()
        while proc.proc.poll() is None:
            time.sleep(1)
            r["ticks"] = d.execute_script("return window.stage ? window.stage.ticks : 0")
        r["busyRunning"] = all(b.poll() is None for b in busy)
        busy1, all1 = cpu_times()
        r["machineBusy"] = (busy1 - busy0) / max(all1 - all0, 1)
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        for b in busy:
            os.kill(b.pid, signal.SIGKILL)
            b.wait()
        if d is not None:
            d.quit()
        proc.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
