#!/usr/bin/env python3
"""What held a JACK server back when it logged an xrun: the kernel's scheduler events around each one.

    sudo python3 scripts/xrun-trace.py record --watch SOAK_DIR --out TRACE_DIR [--dumps 40]
    python3 scripts/xrun-trace.py report TRACE_DIR

`record` keeps the last seconds of the scheduler's events (sched_switch, sched_waking, sched_wakeup,
sched_migrate_task) in the kernel's trace buffer while a soak runs (`scripts/soak.py --out SOAK_DIR`). Each time a
jackd log in SOAK_DIR grows an xrun line, it stops the buffer, saves it with the list of threads (`ps -eL`), clears
it and starts it again. The logs are `*jackd-*.log`: the soak's, or, with `--watch $TMPDIR`, the tests'
`liveaudio-jackd-*.log`. It does this up to `--dumps` times. It needs root and tracefs (mounted at
/sys/kernel/tracing if it is not). Saving a dump takes about a second of one CPU, after the xrun it was taken for; the buffer is 16 MiB a CPU.

`report` reads the dumps. For each one: the xrun lines that set it off; each server's real-time thread (the dummy
driver's) waking more than 1.5 periods after its previous wake, and whether the CPU it was to wake on logged
anything meanwhile (nothing: the CPU was idle and its timer interrupt came late; something: which threads ran
there); each real-time client thread that ran more than 1 ms after it was woken, and what the CPU it was woken
onto did meanwhile; and each real-time thread's longest wait from being woken to running (the servers' and the clients'), in the
last LOOK seconds before the dump. Only the span that every CPU's buffer still holds is read.
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jackd_log  # noqa: E402 - beside this script

TRACING = "/sys/kernel/tracing"
EVENTS = ["sched/sched_switch", "sched/sched_waking", "sched/sched_wakeup", "sched/sched_migrate_task"]
LOOK = 0.6
SLOW = 0.001  # a client's wait from wake to run worth a line of its own
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\(\s*([\d-]+)\)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")


def write(name, value):
    with open(os.path.join(TRACING, name), "w") as f:
        f.write(value)


def record(args):
    if os.geteuid() != 0:
        sys.exit("xrun-trace: record needs root (the kernel's trace buffer)")
    if not os.path.exists(os.path.join(TRACING, "trace")):
        r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"xrun-trace: tracefs is not mounted at {TRACING} and mounting it failed: {r.stderr.strip()}")
    if not os.path.isdir(args.watch):
        sys.exit(f"xrun-trace: no folder {args.watch} to watch (the soak's --out)")
    os.makedirs(args.out, exist_ok=True)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(0))
    saved = {name: read_setting(name) for name in ["buffer_size_kb", "trace_clock", "options/record-tgid"]}
    try:
        write("tracing_on", "0")
        write("trace", "")
        write("buffer_size_kb", str(args.buffer_kib))
        write("trace_clock", "mono")
        write("options/record-tgid", "1")
        for e in EVENTS:
            write(f"events/{e}/enable", "1")
        write("tracing_on", "1")
        watch(args)
    finally:
        write("tracing_on", "0")
        for e in EVENTS:
            write(f"events/{e}/enable", "0")
        write("trace", "")
        for name, value in saved.items():
            write(name, value)


def read_setting(name):
    """A tracefs setting as it can be written back (trace_clock lists every clock, the current one in brackets)."""
    with open(os.path.join(TRACING, name)) as f:
        text = f.read().strip()
    current = re.search(r"\[(\S+)\]", text)
    return current.group(1) if current else text.split()[0]


def watch(args):
    sizes, dumps = {}, 0
    print(f"xrun-trace: watching {args.watch}, dumps into {args.out}", flush=True)
    while dumps < args.dumps:
        time.sleep(0.1)
        for log in glob.glob(os.path.join(args.watch, "*jackd-*.log")):
            size = os.path.getsize(log)
            old = sizes.get(log, size)
            sizes[log] = size
            if size <= old:
                continue
            with open(log, errors="replace") as f:
                f.seek(old)
                new = f.read()
            if not jackd_log.mentions_xrun(new):
                continue
            time.sleep(0.05)  # the stall's last cycles into the buffer too
            write("tracing_on", "0")
            name = os.path.join(args.out, f"dump{dumps:03d}")
            with open(name + ".info", "w") as f:
                f.write(f"{os.path.basename(log)}\n{new}\n")
                f.write(subprocess.run(["ps", "-eLo", "pid,tid,cls,rtprio,comm,args"], capture_output=True,
                                       text=True).stdout)
            with open(os.path.join(TRACING, "trace")) as src, open(name + ".trace", "w") as dst:
                for chunk in iter(lambda: src.read(1 << 20), ""):
                    dst.write(chunk)
            write("trace", "")
            write("tracing_on", "1")
            dumps += 1
            print(f"xrun-trace: {name} ({os.path.basename(log)})", flush=True)
            for other in glob.glob(os.path.join(args.watch, "*jackd-*.log")):
                # what they logged during the dump is in this dump's window, not a new xrun
                sizes[other] = os.path.getsize(other)
            break


def threads(info_lines):
    """The real-time threads in a dump's `ps` list: {tid: (kind, label, period seconds)}."""
    found = {}
    for line in info_lines:
        p = line.split(None, 5)
        if len(p) < 6 or not p[1].isdigit() or p[2] not in ("FF", "RR"):
            continue
        args = p[5]
        if args.startswith("["):
            continue  # a kernel thread
        if "jackd" in args.split()[0]:
            name = re.search(r"-n (\S+)", args)
            frames = re.search(r"-p (\d+)", args)
            rate = re.search(r"-r (\d+)", args)
            period = int(frames.group(1)) / int(rate.group(1)) if frames and rate else 1024 / 48000
            found[int(p[1])] = ("driver", f"jackd {name.group(1) if name else p[0]}", period)
        else:
            words = args.split()
            label = " ".join(w for w in words[:2] if not w.startswith("-"))
            found[int(p[1])] = ("client", f"{os.path.basename(label)} ({p[1]})", 0)
    return found


def report(args):
    dumps = sorted(glob.glob(os.path.join(args.dir, "dump*.trace")))
    if not dumps:
        sys.exit(f"xrun-trace: no dumps in {args.dir}")
    for trace in dumps:
        info = open(trace[:-len(".trace")] + ".info", errors="replace").read().split("\n")
        rt = threads(info)
        events = []
        for line in open(trace, errors="replace"):
            m = LINE.match(line)
            if m:
                events.append((float(m.group(5)), int(m.group(4)), int(m.group(2)), m.group(1), m.group(6),
                               dict(FIELD.findall(m.group(7)))))
        if not events:
            print(f"== {os.path.basename(trace)}: empty")
            continue
        first = {}
        for e in events:
            first.setdefault(e[1], e[0])
        end = events[-1][0]
        begin = max(max(first.values()), end - LOOK)
        span = [e for e in events if e[0] >= begin]
        print(f"== {os.path.basename(trace)} ({info[0]}): "
              + " | ".join(l.strip() for l in info[1:10] if (jackd_log.classify(l) or ("",))[0] in ("wake", "client")))
        last_wake, woken, waits = {}, {}, {}

        def waited(tid, t, cpu):
            """A real-time thread woken at woken[tid] runs at t on cpu: its wait, and for a client that waited
            more than SLOW, what the CPU it was woken onto did meanwhile."""
            at, target = woken.pop(tid)
            waits[tid] = max(waits.get(tid, 0), t - at)
            if rt[tid][0] != "client" or t - at <= SLOW:
                return
            there = [e for e in span if at < e[0] < t and e[1] == target]
            switches = [e for e in there if e[4] == "sched_switch"]
            ran = sorted({e[5]["next_comm"] for e in switches} - {"swapper/%d" % target})
            before = [e for e in span if e[0] <= at and e[1] == target and e[4] == "sched_switch"]
            running = before[-1][5]["next_comm"] if before else "?"
            if not switches and running.startswith("swapper"):
                # An idle CPU logs the wake-ups it takes (this one, and any sent meanwhile) when it takes them.
                what = f"that CPU was idle and switched to nothing meanwhile ({len(there)} wake-ups taken late)"
            elif not switches:
                what = f"that CPU switched to nothing meanwhile, running {running} (in the kernel, or not run by the host)"
            else:
                what = f"that CPU logged {len(there)} events meanwhile, ran: {', '.join(ran) or 'nothing new'}"
            print(f"   {rt[tid][1]}: ran {1000 * (t - at):.2f} ms after it was woken, onto CPU {target}"
                  + (f", on CPU {cpu}" if cpu != target else "") + f"; {what}")
        for i, (t, cpu, ctx, comm, kind, f) in enumerate(span):
            if kind == "sched_waking":
                tid = int(f["pid"])
                if tid in rt and rt[tid][0] == "driver":
                    period = rt[tid][2]
                    if tid in last_wake and t - last_wake[tid] > 1.5 * period:
                        due = last_wake[tid] + period
                        target = int(f["target_cpu"])
                        there = [e for e in span if due <= e[0] < t and e[1] == target]
                        before = [e for e in span if e[0] < due and e[1] == target and e[4] == "sched_switch"]
                        running = before[-1][5]["next_comm"] if before else "?"
                        ran = sorted({e[5]["next_comm"] for e in there if e[4] == "sched_switch"} - {"swapper/%d" % target})
                        if there:
                            what = f"that CPU logged {len(there)} events meanwhile, ran: {', '.join(ran) or 'nothing new'}"
                        elif running.startswith("swapper"):
                            what = "that CPU was idle from before the due time and logged nothing: its timer interrupt late"
                        else:
                            what = (f"that CPU logged nothing from the due time, running {running} (without a switch, "
                                    "or not run by the host)")
                        print(f"   {rt[tid][1]}: woke {1000 * (t - last_wake[tid]):.2f} ms after its last wake "
                              f"({1000 * (t - due):.2f} ms late) on CPU {target}; {what}")
                    last_wake[tid] = t
                if tid in rt:
                    woken.setdefault(tid, (t, int(f["target_cpu"])))
            elif kind == "sched_switch":
                tid = int(f["next_pid"])
                if tid in woken:
                    waited(tid, t, cpu)
            if ctx in woken:  # already running: its switch in from idle is not always in the buffer
                waited(ctx, t, cpu)
        silent = [(span[i][0], span[i][0] - span[i - 1][0]) for i in range(1, len(span))
                  if span[i][0] - span[i - 1][0] > 0.005]
        if silent:
            print("   every CPU silent more than 5 ms: " + ", ".join(f"{1000 * g:.1f} ms ending at {t:.4f}" for t, g in silent))
        print("   longest wake-to-run of the real-time threads: "
              + ", ".join(f"{rt[tid][1]} {1000 * d:.2f} ms" for tid, d in sorted(waits.items(), key=lambda x: rt[x[0]][1])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="keep the scheduler's events and save them at each xrun")
    r.add_argument("--watch", required=True, help="the soak's --out folder, or $TMPDIR for the tests' servers (*jackd-*.log)")
    r.add_argument("--out", required=True, help="folder for the dumps")
    r.add_argument("--dumps", type=int, default=40, help="stop after this many dumps (default 40)")
    r.add_argument("--buffer-kib", type=int, default=16384, help="trace buffer per CPU (default 16384)")
    p = sub.add_parser("report", help="read the dumps")
    p.add_argument("dir")
    args = ap.parse_args()
    record(args) if args.command == "record" else report(args)


if __name__ == "__main__":
    main()
