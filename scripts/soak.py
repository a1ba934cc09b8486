#!/usr/bin/env python3
"""The soak: `liveaudio monitor` with the voice chain and `liveaudio stream` to nginx-rtmp, both on a JACK server
(dummy driver, 256 frames at 48 kHz) for SOAK_SECONDS, beside the peer `jack_simple_client` on a second JACK server
of the same settings, in the same run: two of them, one for each client of ours, so that both servers run
two clients and their xruns compare like with like.

    python3 scripts/soak.py --binary .build/release/liveaudio [--seconds 3600] [--out DIR] [--plot docs/soak.png]

The dummy driver captures silence; so that the voice chain and the encoder work on a signal, both commands run the
voice chain with a tone node (the "singer") mixed into the microphone — a copy of the chain the run writes into
DIR, with no client added to the server. Every 10 s a row goes into DIR/soak.csv: resident
memory of each process, xruns (liveaudio's own count and each server's log), encoder and RTMP drops, reconnects,
the monitor's round trip and the stream's latency (capture to socket, p50/p99).

Goals, checked at the end (exit status 1 when one is missed; the last line says which):
  - memory flat after warm-up: each liveaudio process's resident memory moves within 1 MiB from the end of the
    warm-up (the first quarter of the run, at most 120 s) to the end;
  - 0 drops: no frame dropped by the encoder, no packet dropped by the RTMP queue, no reconnect;
  - xruns no more than the peer's: after the warm-up, the cycles our clients did not finish while our server's own
    thread was on time and the peer's server had no xrun at the same moment are no more than the peer's clients'
    counted the same way (`--xrun-allowance N` allows N more; `make test`'s two-minute run prints the comparison
    without judging it, `--xruns-reported-only`, see scripts/run-tests.sh). A server shows every client on it an
    xrun for each cycle its graph did not finish in ("ProcessGraphAsyncMaster: Process error") and each time the
    dummy driver's own thread woke late ("JackTimedDriver::Process XRun"); those totals are counted from each
    server's log and shown. Each log line is stamped with the time this script read it. Not judged, as the
    machine's:
      - a late wake of the server's thread: the CPU it slept on was idle and its timer interrupt came milliseconds
        late (traced, docs/reliability.md); which server such a wake hits depends on the phase of its cycle, not
        on its clients;
      - the first unfinished cycle after a late wake, when it comes within 100 ms of it: it comes at once, and the
        clients it signalled may not have run yet;
      - an unfinished cycle within 10 ms of an xrun of the other server: a stall that hit both servers at once.
    (CSVs from before the stamps judge without the last rule; from before the split, the totals; from before the
    per-server counts, the clients rank for rank.) Both servers run two clients, so the counts compare like with
    like.
    Shown beside it, not judged: which clients each server named late ("client = X was not finished, state = …"),
    ranked, and how many of those were late while running their callback (state Running: a callback that overran)
    rather than not yet woken (Triggered: in a stall that held every thread back, the client woken last is named,
    and that is an order, not a cost). Each server's xruns are also split by 10 s row: rows where both servers had
    xruns (the machine stalled for both) and rows where only one did.

Both servers run on one CPU (`--server-cpu`, default 0; their clients are left to the scheduler). On this virtual
machine the xruns come in stalls where a CPU's timer interrupt arrives milliseconds late, while that CPU is idle: a
server's thread sleeping on that CPU wakes a period late, the other server's on the other CPU does not (traced with
the kernel's sched events, see docs/reliability.md). Left to the scheduler, each server's thread stays on the CPU it
started on for the whole run, so one server would take the late timers of one CPU and the other none. On one CPU,
both are exposed to the same interrupts; the phase of each server's cycle still decides which of them a given late
interrupt makes late by a whole period.

Every process is started here and stopped by its PID; the servers listen on loopback (nginx) or local sockets (JACK).
"""
import argparse
import bisect
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jackd_log  # noqa: E402 - beside this script
import tempfile
import threading
import time

INTERVAL = 10.0


def die_with_parent():
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    # SIGINT stops our commands at the end: a script started in the background (`&`) has it ignored, and
    # liveaudio, like any command, keeps a SIGINT it was started ignoring ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def last_match(path, pattern):
    """The last line of `path` that matches `pattern` (a compiled regex), as its match."""
    found = None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = pattern.search(line)
                if m:
                    found = m
    except OSError:
        pass
    return found


# An unfinished cycle is a late wake's when its first line comes within this many seconds of the wake's: the cycle
# after a late wake comes at once (the driver does not sleep after it), so its lines follow within a period or two;
# the rest is room for jackd's logger thread (an ordinary thread, which writes what the real-time threads queue) and
# for the reader here, which stamps lines as they arrive (about 19 periods at 256 frames).
STALL_WINDOW = 0.1


def jack_events(log):
    """The late wakes and unfinished cycles of a stamped jackd log (scripts/jackd_log.py's events; see Processes.start
    for the stamps), a late wake's cycle within STALL_WINDOW of it."""
    try:
        with open(log, errors="replace") as f:
            return jackd_log.events(f, STALL_WINDOW)
    except OSError:
        return []


def jack_xruns(events):
    """From jack_events: the timer xruns, the unfinished cycles, those of them that were a late wake's, each
    client's late cycles, and how many of those it was late for while running its callback."""
    cycles = [e for e in events if e[0] == "cycle"]
    clients = {}
    for _, _, _, named in cycles:
        for name, _ in named:
            clients[name] = clients.get(name, 0) + 1
    return (len(events) - len(cycles), len(cycles), sum(1 for e in cycles if e[2]), clients,
            sum(running for e in cycles for _, running in e[3]))


# An xrun of one server within this many seconds of an xrun of the other is the same stall of the machine: both
# servers hit at once. In the stamped hour, such pairs came 0.02-1.8 ms apart (one 5.5 ms: the next cycle of the
# same stall), and the next nearest 245 ms; at 256 frames a cycle is 5.3 ms.
COINCIDENT = 0.01


def coincident(events):
    """Per server ("ours", "peer" in `events`, each from jack_events), of its unfinished cycles that were not a late
    wake's, those within COINCIDENT of an xrun (a late wake or an unfinished cycle) of the other server; and of its
    late wakes, those within COINCIDENT of one of the other's xruns."""
    found = {}
    for who, other in [("ours", "peer"), ("peer", "ours")]:
        times = sorted(e[1] for e in events[other])

        def near(t):
            i = bisect.bisect_left(times, t - COINCIDENT)
            return i < len(times) and times[i] <= t + COINCIDENT

        found[who] = (sum(1 for kind, t, after, _ in events[who] if kind == "cycle" and not after and near(t)),
                      sum(1 for kind, t, _, _ in events[who] if kind == "wake" and near(t)))
    return found


class Processes:
    """Every process this run starts, stopped by PID at the end (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.started = []
        self.copiers = []

    def start(self, name, args, log, env=None, stamped=False):
        """Starts `args` with its output in `log`; `stamped`: each line as read, after the time it was read
        (time.monotonic(), in seconds with 6 decimals), so that the log tells how far apart two lines came."""
        out = open(log, "wb" if stamped else "w")
        # Each child dies with this script (PR_SET_PDEATHSIG), even when the script is killed outright: servers left
        # behind would fill JACK's list of eight servers.
        p = subprocess.Popen(args, stdout=subprocess.PIPE if stamped else out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True, preexec_fn=die_with_parent)
        if stamped:
            def copy(source=p.stdout, sink=out):
                with source, sink:
                    for line in iter(source.readline, b""):
                        sink.write(b"%.6f " % time.monotonic() + line)
                        sink.flush()
            copier = threading.Thread(target=copy, name=f"log {name}", daemon=True)
            copier.start()
            self.copiers.append(copier)
        else:
            out.close()
        self.started.append((name, p))
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p.poll() is not None:
            return p.returncode
        try:
            p.send_signal(sig)
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def stop_all(self):
        # A second SIGTERM while stopping does not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _, p in reversed(self.started):
            self.stop(p)
        for copier in self.copiers:  # the stopped servers' last lines into their logs
            copier.join(timeout=5)


def wait_for(what, condition, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise RuntimeError(f"soak: {what} did not happen within {seconds} s")


def cpu_argument(value):
    """--server-cpu: a CPU this machine has, or "none"."""
    if value == "none":
        return None
    if not value.isdigit() or int(value) not in os.sched_getaffinity(0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a CPU this process may run on "
                                         f"({sorted(os.sched_getaffinity(0))}) nor 'none'")
    return int(value)


def start_jack(procs, name, out, env, cpu=None):
    log = os.path.join(out, f"jackd-{name}.log")
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    p = procs.start(f"jackd {name}", pin + ["jackd", "-n", name, "-d", "dummy", "-r", "48000", "-p", "256", "-C", "2", "-P", "2"],
                    log, env, stamped=True)
    e = dict(env, JACK_DEFAULT_SERVER=name)
    r = subprocess.run(["jack_wait", "-w", "-t", "10"], env=e, capture_output=True, text=True)
    if r.returncode != 0 or p.poll() is not None:
        raise RuntimeError(f"soak: jackd '{name}' did not start: {r.stdout}{r.stderr} (log {log})")
    return p, log, e


def start_nginx(procs, out):
    port = free_port()
    root = os.path.join(out, "nginx")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "nginx.conf"), "w") as f:
        f.write(f"""load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
daemon off; master_process on; user root; worker_processes 1; pid {root}/nginx.pid; error_log {root}/error.log warn;
events {{ worker_connections 64; }}
rtmp {{ server {{ listen 127.0.0.1:{port}; chunk_size 4096;
  application live {{ live on; allow publish 127.0.0.1; deny publish all; allow play all; }} }} }}
""")
    p = procs.start("nginx", ["nginx", "-p", root + "/", "-c", "nginx.conf", "-e", root + "/error.log"],
                    os.path.join(root, "nginx.out"))

    def accepting():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    wait_for("nginx accepting connections", accepting)
    return p, port


def singing_chain(path, out):
    """The voice chain of `path` with a tone mixed into its input node's output, written into `out`."""
    with open(path) as f:
        chain = json.load(f)
    mic = next(n["id"] for n in chain["nodes"] if n["type"] == "input")
    chain["nodes"] += [{"id": "soak-singer", "type": "tone", "frequency": 220, "amplitude": 0.3, "channels": 1},
                       {"id": "soak-mix", "type": "mixer", "inputs": 2}]
    for c in chain["connections"]:
        if c["from"] == mic:
            c["from"] = "soak-mix"
    chain["connections"] += [{"from": mic, "to": "soak-mix", "bus": 0}, {"from": "soak-singer", "to": "soak-mix", "bus": 1}]
    target = os.path.join(out, "soak-chain.json")
    with open(target, "w") as f:
        json.dump(chain, f, indent=1)
    return target


def jack_ports(env):
    r = subprocess.run(["jack_lsp"], env=env, capture_output=True, text=True)
    return r.stdout.split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=".build/release/liveaudio")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "3600")))
    ap.add_argument("--out", default=None, help="folder for the CSV and the logs (default: a new temporary folder)")
    ap.add_argument("--graph", default="Examples/graphs/voice-chain.json")
    ap.add_argument("--plot", default=None, help="draw the CSV into this PNG (needs matplotlib)")
    ap.add_argument("--xrun-allowance", type=int, default=0,
                    help="xruns our server's clients may have beyond the peer's, as judged (default 0)")
    ap.add_argument("--xruns-reported-only", action="store_true",
                    help="print the xrun comparison without judging it (make test's two-minute run, see scripts/run-tests.sh)")
    ap.add_argument("--server-cpu", default="0", type=cpu_argument, metavar="N|none",
                    help="run both JACK servers on this CPU (default 0; 'none' leaves them to the scheduler)")
    ap.add_argument("--first", choices=["ours", "peer"], default="ours",
                    help="which JACK server starts first (default ours): the two are the same jackd, so a difference "
                         "in their late wakes that follows the order is the machine's")
    ap.add_argument("--judge", default=None, metavar="CSV", help="judge (and plot) an earlier run's CSV instead of running")
    args = ap.parse_args()
    if args.judge:
        rows = read_csv(args.judge)
        result = judge(rows, rows[-1]["seconds"], 0, 0, "-", "-", None if args.xruns_reported_only else args.xrun_allowance)
        if args.plot:
            plot(rows, args.plot, result)
        for line in result["lines"]:
            print("soak: " + line)
        print("soak: " + ("passed" if result["passed"] else "FAILED: " + "; ".join(result["failures"])))
        return 0 if result["passed"] else 1

    # SIGTERM (a CI runner's timeout, kill) ends the run through the same clean-up as Ctrl-C: every process stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Absolute: nginx takes its paths relative to its prefix (a relative --out failed to start it).
    out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="liveaudio-soak-"))
    os.makedirs(out, exist_ok=True)
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        sys.exit(f"soak: no liveaudio binary at {binary}: build it first (make soak does)")
    tag = f"lasoak{os.getpid()}"
    ours_server, peer_server = tag + "a", tag + "b"
    env = dict(os.environ)
    env.pop("JACK_DEFAULT_SERVER", None)
    procs = Processes()
    csv_path = os.path.join(out, "soak.csv")
    print(f"soak: {args.seconds:.0f} s, logs and CSV in {out}; servers on CPU {'any' if args.server_cpu is None else args.server_cpu}, "
          f"{args.first} started first", flush=True)
    try:
        if args.first == "ours":
            _, ours_log, ours_env = start_jack(procs, ours_server, out, env, args.server_cpu)
            _, peer_log, peer_env = start_jack(procs, peer_server, out, env, args.server_cpu)
        else:
            _, peer_log, peer_env = start_jack(procs, peer_server, out, env, args.server_cpu)
            _, ours_log, ours_env = start_jack(procs, ours_server, out, env, args.server_cpu)
        _, port = start_nginx(procs, out)
        graph = singing_chain(args.graph, out)
        monitor_log = os.path.join(out, "monitor.log")
        stream_log = os.path.join(out, "stream.log")
        before = set(jack_ports(ours_env))
        monitor = procs.start("monitor", [binary, "monitor", "--backend", "jack", "--jack-server", ours_server,
                                          "--graph", graph, "--status-interval", str(INTERVAL)], monitor_log, env)
        stream = procs.start("stream", [binary, "stream", "--backend", "jack", "--jack-server", ours_server,
                                        "--graph", graph, "--period", "256", "--to", f"rtmp://127.0.0.1:{port}/live/soak"],
                             stream_log, env)
        # Two peer clients, as our server runs two (jack_simple_client writes a sine to its two outputs each cycle).
        peer = procs.start("peer", ["jack_simple_client", "peer1"], os.path.join(out, "peer.log"), peer_env)
        peer2 = procs.start("peer2", ["jack_simple_client", "peer2"], os.path.join(out, "peer2.log"), peer_env)
        wait_for("our two clients on the server", lambda: sum(
            1 for p in set(jack_ports(ours_env)) - before if p.endswith(":in_1")) >= 2)
        # Which JACK client is which: the monitor's has output ports.
        ports = set(jack_ports(ours_env)) - before
        monitor_client = next(p.split(":")[0] for p in ports if p.endswith(":out_1"))
        stream_client = next(p.split(":")[0] for p in ports if p.endswith(":in_1") and not p.startswith(monitor_client + ":"))
        wait_for("the stream publishing", lambda: "publishing" in read(stream_log), 20)
        for name, p in [("monitor", monitor), ("stream", stream), ("peer", peer), ("peer2", peer2)]:
            if p.poll() is not None:
                raise RuntimeError(f"soak: {name} exited at start: {read(os.path.join(out, name + '.log'))}")

        status_re = re.compile(r"^status ([\d.]+) s: .*xruns (\d+), faults (\d+), reconnects (\d+), round trip ([\d.]+) ms")
        stats_re = re.compile(
            r"^\s*([\d.]+) s, aac (\d+) packets, encoder drops (\d+) frames, xruns (\d+).*\| rtmp://\S+: (\w+): (\d+) packets.*"
            r"dropped (\d+), reconnects (\d+)(?:, latency p50 (\d+) ms p99 (\d+) ms)?")
        fields = ["seconds", "monitor_rss_kib", "stream_rss_kib", "peer_rss_kib", "monitor_xruns", "stream_xruns",
                  "ours_server_late_cycles", "monitor_late_cycles", "stream_late_cycles", "ours_server_timer_xruns",
                  "ours_server_unfinished_cycles", "ours_late_while_running", "ours_server_cycles_after_late_wake",
                  "peer_server_late_cycles", "peer1_late_cycles", "peer2_late_cycles", "peer_server_timer_xruns",
                  "peer_server_unfinished_cycles", "peer_late_while_running", "peer_server_cycles_after_late_wake",
                  "ours_server_cycles_with_peer_xrun", "peer_server_cycles_with_ours_xrun",
                  "ours_server_late_wakes_with_peer_xrun", "peer_server_late_wakes_with_ours_xrun",
                  "encoder_dropped_frames", "rtmp_dropped_packets", "rtmp_reconnects", "rtmp_packets_sent",
                  "round_trip_ms", "stream_latency_p50_ms", "stream_latency_p99_ms"]
        rows = []
        start = time.monotonic()
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            tick = 0
            while True:
                tick += 1
                due = start + tick * INTERVAL
                while time.monotonic() < due:
                    time.sleep(min(0.5, max(0.0, due - time.monotonic())))
                    for name, p in [("monitor", monitor), ("stream", stream), ("peer", peer), ("peer2", peer2)]:
                        if p.poll() is not None:
                            raise RuntimeError(f"soak: {name} exited after {time.monotonic() - start:.0f} s "
                                               f"(status {p.returncode}); log in {out}")
                status = last_match(monitor_log, status_re)
                stats = last_match(stream_log, stats_re)
                events = {"ours": jack_events(ours_log), "peer": jack_events(peer_log)}
                timer_a, unfinished_a, after_a, late_a, running_a = jack_xruns(events["ours"])
                timer_b, unfinished_b, after_b, late_b, running_b = jack_xruns(events["peer"])
                together = coincident(events)
                row = {
                    "seconds": round(time.monotonic() - start, 1),
                    "monitor_rss_kib": rss_kib(monitor.pid), "stream_rss_kib": rss_kib(stream.pid),
                    "peer_rss_kib": rss_kib(peer.pid),
                    "monitor_xruns": int(status.group(2)) if status else "",
                    "stream_xruns": int(stats.group(4)) if stats else "",
                    "ours_server_late_cycles": sum(v for k, v in late_a.items() if k.startswith("liveaudio")),
                    "monitor_late_cycles": late_a.get(monitor_client, 0),
                    "stream_late_cycles": late_a.get(stream_client, 0),
                    "ours_server_timer_xruns": timer_a, "ours_server_unfinished_cycles": unfinished_a,
                    "ours_late_while_running": running_a, "ours_server_cycles_after_late_wake": after_a,
                    "peer_server_late_cycles": sum(v for k, v in late_b.items() if k.startswith("peer")),
                    "peer1_late_cycles": late_b.get("peer1", 0), "peer2_late_cycles": late_b.get("peer2", 0),
                    "peer_server_timer_xruns": timer_b, "peer_server_unfinished_cycles": unfinished_b,
                    "peer_late_while_running": running_b, "peer_server_cycles_after_late_wake": after_b,
                    "ours_server_cycles_with_peer_xrun": together["ours"][0],
                    "peer_server_cycles_with_ours_xrun": together["peer"][0],
                    "ours_server_late_wakes_with_peer_xrun": together["ours"][1],
                    "peer_server_late_wakes_with_ours_xrun": together["peer"][1],
                    "encoder_dropped_frames": int(stats.group(3)) if stats else "",
                    "rtmp_dropped_packets": int(stats.group(7)) if stats else "",
                    "rtmp_reconnects": int(stats.group(8)) if stats else "",
                    "rtmp_packets_sent": int(stats.group(6)) if stats else "",
                    "round_trip_ms": float(status.group(5)) if status else "",
                    "stream_latency_p50_ms": int(stats.group(9)) if stats and stats.group(9) else "",
                    "stream_latency_p99_ms": int(stats.group(10)) if stats and stats.group(10) else "",
                }
                rows.append(row)
                writer.writerow(row)
                f.flush()
                print("soak: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
                if time.monotonic() - start >= args.seconds:
                    break
        monitor_status = procs.stop(monitor, signal.SIGINT, 20)
        stream_status = procs.stop(stream, signal.SIGINT, 20)
    except RuntimeError as e:
        print(e, flush=True)
        procs.stop_all()
        print(f"soak: FAILED (logs in {out})")
        return 1
    finally:
        procs.stop_all()

    result = judge(rows, args.seconds, monitor_status, stream_status, monitor_log, stream_log,
                   None if args.xruns_reported_only else args.xrun_allowance)
    # The logs' stamps are time.monotonic(): a row's time in them is this plus its seconds.
    result["servers"] = {"cpu": args.server_cpu, "started_first": args.first, "monotonic_start": start}
    with open(os.path.join(out, "soak-summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    if args.plot:
        plot(rows, args.plot, result)
    for line in result["lines"]:
        print("soak: " + line)
    print("soak: " + ("passed" if result["passed"] else "FAILED: " + "; ".join(result["failures"])) + f" (CSV {csv_path})")
    return 0 if result["passed"] else 1


def read_csv(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            # A row cut short (the run killed while writing it) has None for its missing columns: left out.
            if None in r.values():
                continue
            rows.append({k: (None if not v and k.endswith("rss_kib") else
                             ("" if not v else float(v) if "." in v else int(v))) for k, v in r.items()})
    return rows


def judge(rows, seconds, monitor_status, stream_status, monitor_log, stream_log, allowance=0):
    failures, lines = [], []
    # Warm-up: allocations that grow to a fixed size — the RTMP latency window holds its last 4096 packets, 87 s of
    # 1024-frame packets at 48 kHz — and the allocator's arenas settling.
    warmup = min(120.0, seconds / 4)
    settled = [r for r in rows if r["seconds"] >= warmup]
    if len(settled) < 2:
        failures.append(f"too few samples after the {warmup:.0f} s warm-up ({len(settled)})")
    memory = {}
    for who in ["monitor", "stream", "peer"]:
        values = [r[f"{who}_rss_kib"] for r in settled if r[f"{who}_rss_kib"] is not None]
        if len(values) < 2:
            continue
        growth = values[-1] - values[0]
        spread = max(values) - min(values)
        # Least-squares slope over the settled samples, KiB per hour.
        xs = [r["seconds"] for r in settled if r[f"{who}_rss_kib"] is not None]
        mx, my = sum(xs) / len(xs), sum(values) / len(values)
        den = sum((x - mx) ** 2 for x in xs) or 1
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, values)) / den * 3600
        memory[who] = {"start_kib": values[0], "end_kib": values[-1], "growth_kib": growth, "spread_kib": spread,
                       "slope_kib_per_hour": round(slope, 1)}
        lines.append(f"{who} resident memory after warm-up: {values[0] / 1024:.1f} → {values[-1] / 1024:.1f} MiB "
                     f"(growth {growth} KiB, band {spread} KiB, slope {slope:.0f} KiB/h)")
        if who != "peer" and spread > 1024:
            failures.append(f"{who} memory moved {spread} KiB after warm-up (goal: within 1024)")
    last = rows[-1] if rows else {}
    drops = {k: last.get(k) for k in ["encoder_dropped_frames", "rtmp_dropped_packets", "rtmp_reconnects"]}
    lines.append("drops: encoder {encoder_dropped_frames} frames, RTMP queue {rtmp_dropped_packets} packets, "
                 "reconnects {rtmp_reconnects}".format(**drops))
    for k, v in drops.items():
        if v != 0:
            failures.append(f"{k} {v} (goal 0)")
    # Late cycles counted from the last row of the warm-up (a debug build's first cycles are not the soak's).
    base = ([r for r in rows if r["seconds"] < warmup] or [{}])[-1]

    def after(key, row=last):
        return (row.get(key) or 0) - (base.get(key) or 0)

    per_client = "monitor_late_cycles" in last
    ours = {"monitor": after("monitor_late_cycles"), "stream": after("stream_late_cycles")} if per_client else \
        {"our clients together": after("ours_server_late_cycles")}
    peer_late = after("peer_server_late_cycles")
    # Two peer clients (runs before 2026-11-26 had one, and only the server's total).
    peers = {"peer1": after("peer1_late_cycles"), "peer2": after("peer2_late_cycles")} if "peer1_late_cycles" in last \
        else {"peer": peer_late}
    # Each server's xruns (the judged count; in CSVs from before 2026-11-26, our clients' late cycles and the peer's
    # late cycles and timer xruns), split by 10 s row: rows where both servers had xruns (the machine stalled for
    # both) and rows where only one did.
    per_server = "ours_server_unfinished_cycles" in last

    def xruns(row, who):
        if per_server:
            return (row.get(f"{who}_server_unfinished_cycles") or 0) + (row.get(f"{who}_server_timer_xruns") or 0)
        keys = ["ours_server_late_cycles"] if who == "ours" else ["peer_server_late_cycles", "peer_server_timer_xruns"]
        return sum(row.get(k) or 0 for k in keys)

    split = {"both": {"ours": 0, "peer": 0}, "alone": {"ours": 0, "peer": 0}}
    counted = [base] + [r for r in rows if r["seconds"] >= warmup]  # from the same base as after()
    for previous, row in zip(counted, counted[1:]):
        step = {who: xruns(row, who) - xruns(previous, who) for who in ["ours", "peer"]}
        for who in step:
            split["both" if all(step.values()) else "alone"][who] += step[who]
    lines.append("xruns after warm-up: " + ", ".join(f"{k} late {v} cycles" for k, v in ours.items()) + "; "
                 + ", ".join(f"{k} late {v}" for k, v in peers.items()) + "; "
                 f"driver timer xruns: our server {after('ours_server_timer_xruns')}, peer's {after('peer_server_timer_xruns')}; "
                 f"liveaudio's own counts over the whole run: monitor {last.get('monitor_xruns')}, stream {last.get('stream_xruns')}")
    # Judged: the xruns each server showed its two clients — the cycles its graph did not finish in and its driver's
    # timer waking late, each of which JACK reports to every client on the server — ours against the peer's. Which
    # client a server names late in a cycle is shown, not judged: in a stall that held every thread back, it is the
    # client woken last (its state "Triggered": not yet running), and that is an order, not a cost; a callback that
    # overran its cycle shows as late "while running".
    ranked_peers = sorted(peers.items(), key=lambda kv: -kv[1])
    rank = list(zip(sorted(ours.items(), key=lambda kv: -kv[1]), ranked_peers + [ranked_peers[-1]] * len(ours)))
    lines.append("clients named late, rank for rank: " + "; ".join(f"{w} {n} against {pn} {pc}" for (w, n), (pn, pc) in rank)
                 + (f"; late while running their callback: ours {after('ours_late_while_running')}, "
                    f"the peer's {after('peer_late_while_running')}" if "ours_late_while_running" in last else ""))
    if "ours_server_unfinished_cycles" in last:
        server = {who: after(f"{who}_server_unfinished_cycles") + after(f"{who}_server_timer_xruns") for who in ["ours", "peer"]}
        lines.append(f"xruns each server showed its clients after warm-up: ours {server['ours']} "
                     f"({after('ours_server_unfinished_cycles')} cycles unfinished, {after('ours_server_timer_xruns')} timer), "
                     f"the peer's {server['peer']} ({after('peer_server_unfinished_cycles')} unfinished, "
                     f"{after('peer_server_timer_xruns')} timer); in 10 s rows where both servers had xruns: ours "
                     f"{split['both']['ours']}, the peer's {split['both']['peer']}; where only one did: ours "
                     f"{split['alone']['ours']}, the peer's {split['alone']['peer']}")
        judged = [("our server's xruns", server["ours"], "the peer's", server["peer"])]
        if "ours_server_cycles_after_late_wake" in last:
            # Judged since 2026-11-26: the cycles a server's clients did not finish while its own thread was on time.
            # A late wake of the server's thread is a timer interrupt that came late to an idle CPU (traced: no
            # thread ran there); which server it hits depends on the CPU and the phase of its cycle, not on its
            # clients, and the cycle after it comes at once, maybe before the clients it signalled have run.
            rest = {who: after(f"{who}_server_unfinished_cycles") - after(f"{who}_server_cycles_after_late_wake")
                    for who in ["ours", "peer"]}
            lines.append("of those, the server's own thread woke late (timer xruns) and the cycles right after: ours "
                         f"{after('ours_server_timer_xruns')} + {after('ours_server_cycles_after_late_wake')}, the peer's "
                         f"{after('peer_server_timer_xruns')} + {after('peer_server_cycles_after_late_wake')}; cycles "
                         f"the clients did not finish with the server on time: ours {rest['ours']}, the peer's "
                         f"{rest['peer']}")
            judged = [("our clients' xruns with their server on time", rest["ours"], "the peer's", rest["peer"])]
            if "ours_server_cycles_with_peer_xrun" in last:
                # Judged since the stamped logs (2026-11-26): of those, the cycles the other server had no xrun
                # within COINCIDENT of. A stall that hit both servers at once is the machine's.
                shared = {"ours": after("ours_server_cycles_with_peer_xrun"), "peer": after("peer_server_cycles_with_ours_xrun")}
                alone = {who: rest[who] - shared[who] for who in rest}
                lines.append("of the cycles the clients did not finish with the server on time, those with an xrun "
                             f"on the other server within {COINCIDENT * 1000:.0f} ms: ours {shared['ours']}, the "
                             f"peer's {shared['peer']}; with none (judged): ours {alone['ours']}, the peer's "
                             f"{alone['peer']}; the servers' late wakes with an xrun on the other server within "
                             f"{COINCIDENT * 1000:.0f} ms: ours {after('ours_server_late_wakes_with_peer_xrun')} of "
                             f"{after('ours_server_timer_xruns')}, the peer's {after('peer_server_late_wakes_with_ours_xrun')} "
                             f"of {after('peer_server_timer_xruns')}")
                judged = [("our clients' xruns with their server on time and the peer's server without one",
                           alone["ours"], "the peer's", alone["peer"])]
    else:  # a CSV from before 2026-11-26: client against client, rank for rank
        judged = [(f"{w} late", n, pn, pc) for (w, n), (pn, pc) in rank]
    for who, count, peer_name, peer_count in judged:
        if allowance is None:
            lines.append(f"xruns reported, not judged in this run: {who} {count}, {peer_name} {peer_count}")
        elif count > peer_count + allowance:
            failures.append(f"{who} {count}, {peer_name} {peer_count}"
                            + (f" (goal: no more than {allowance} beyond it)" if allowance else " (goal: no more)"))
    p99 = [r["stream_latency_p99_ms"] for r in rows if r["stream_latency_p99_ms"] != ""]
    if p99:
        lines.append(f"stream latency p99: median {sorted(p99)[len(p99) // 2]} ms, highest {max(p99)} ms; "
                     f"monitor round trip {last.get('round_trip_ms')} ms")
    if monitor_status != 0 or stream_status != 0:
        failures.append(f"exit status monitor {monitor_status}, stream {stream_status} (see {monitor_log}, {stream_log})")
    return {"seconds": rows[-1]["seconds"] if rows else 0, "warmup_seconds": warmup, "memory": memory, "drops": drops,
            "our_late_cycles": ours, "xruns_in_shared_and_lone_rows": split, "peer_late_cycles": peers,
            "timer_xruns": {"ours": after("ours_server_timer_xruns"), "peer": after("peer_server_timer_xruns")},
            "unfinished_cycles": {"ours": after("ours_server_unfinished_cycles"), "peer": after("peer_server_unfinished_cycles")},
            "late_while_running": {"ours": after("ours_late_while_running"), "peer": after("peer_late_while_running")},
            "monitor_xruns": last.get("monitor_xruns"), "stream_xruns": last.get("stream_xruns"),
            "passed": not failures, "failures": failures, "lines": lines}


def plot(rows, path, result):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [r["seconds"] / 60 for r in rows]
    fig, ax = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for who, colour in [("monitor", "tab:blue"), ("stream", "tab:orange"), ("peer", "tab:gray")]:
        ax[0].plot(t, [(r[f"{who}_rss_kib"] or 0) / 1024 for r in rows], label=who, color=colour)
    ax[0].axvline(result["warmup_seconds"] / 60, color="k", lw=0.5, ls=":")
    ax[0].set_ylabel("resident memory (MiB)")
    ax[0].legend(loc="center right")
    if "monitor_late_cycles" in rows[-1]:
        ax[1].step(t, [r["monitor_late_cycles"] for r in rows], where="post", label="monitor late (cycles)")
        ax[1].step(t, [r["stream_late_cycles"] for r in rows], where="post", label="stream late (cycles)")
    else:
        ax[1].step(t, [r["ours_server_late_cycles"] for r in rows], where="post", label="our clients late (cycles)")
    if "peer1_late_cycles" in rows[-1]:
        ax[1].step(t, [r["peer1_late_cycles"] for r in rows], where="post", label="peer1 late (cycles)")
        ax[1].step(t, [r["peer2_late_cycles"] for r in rows], where="post", label="peer2 late (cycles)")
    else:
        ax[1].step(t, [r["peer_server_late_cycles"] for r in rows], where="post", label="peer late (cycles)")
    split = "ours_server_cycles_after_late_wake" in rows[-1]
    if "ours_server_unfinished_cycles" in rows[-1]:
        for who, name in [("ours", "our server"), ("peer", "peer's server")]:
            ax[1].step(t, [r[f"{who}_server_unfinished_cycles"] + r[f"{who}_server_timer_xruns"] for r in rows], where="post",
                       lw=1 if split else 2.5, label=f"{name}: xruns shown to its clients" + ("" if split else " (judged)"))
    shared = "ours_server_cycles_with_peer_xrun" in rows[-1]
    if split:
        other = {"ours": "ours_server_cycles_with_peer_xrun", "peer": "peer_server_cycles_with_ours_xrun"}
        for who, name in [("ours", "our clients"), ("peer", "peer's clients")]:
            ax[1].step(t, [r[f"{who}_server_unfinished_cycles"] - r[f"{who}_server_cycles_after_late_wake"]
                           - (r[other[who]] if shared else 0) for r in rows],
                       where="post", lw=2.5, label=f"{name}: cycles unfinished, server on time"
                       + (", other server without xrun" if shared else "") + " (judged)")
    ax[1].step(t, [r["ours_server_timer_xruns"] for r in rows], where="post", ls="--", label="our server: driver timer xruns")
    ax[1].step(t, [r["peer_server_timer_xruns"] for r in rows], where="post", ls="--", label="peer's server: driver timer xruns")
    ax[1].step(t, [r["rtmp_dropped_packets"] or 0 for r in rows], where="post", label="RTMP dropped packets")
    ax[1].set_ylabel("count (cumulative)")
    ax[1].legend(loc="upper left", fontsize=8)
    ax[2].plot(t, [r["stream_latency_p50_ms"] or None for r in rows], label="stream latency p50")
    ax[2].plot(t, [r["stream_latency_p99_ms"] or None for r in rows], label="stream latency p99")
    ax[2].plot(t, [r["round_trip_ms"] or None for r in rows], label="monitor round trip (expected)")
    ax[2].set_ylabel("ms")
    ax[2].set_xlabel("minutes")
    ax[2].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"liveaudio soak: monitor (voice chain) + stream to nginx-rtmp, JACK dummy 256 frames, "
                 f"{result['seconds'] / 60:.0f} min")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"soak: plot in {path}")


if __name__ == "__main__":
    sys.exit(main())
