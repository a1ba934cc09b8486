#!/usr/bin/env python3
"""`make bench`'s phones part: the room's CPU per phone voice. `liveaudio karaoke --phones 4 --web 127.0.0.1:0
--timing` on a fresh JACK dummy server at 128 frames (our outputs looped to our inputs, the default voice chain), for
SECONDS, with 0, 1, 2 and 4 phones singing into it (Tests/Support/stage/fake_phone.py: WebSocket clients sending
20 ms Opus packets in real time, their clocks read by the room), and once with --phones 0 (no phone voice at all).
Each run prints the process's CPU time (user + system, from /proc) as a share of one core, and the device thread's
per-cycle CPU time (the timing line); the cost of a phone is the difference over the runs with none singing.

Usage: bench-phones.py BINARY PYTHON WORKDIR [SECONDS]
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

binary, python, work = sys.argv[1], sys.argv[2], sys.argv[3]
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 40
here = os.path.dirname(os.path.abspath(__file__))
fake = os.path.join(here, "..", "Tests", "Support", "stage", "fake_phone.py")
tick = os.sysconf("SC_CLK_TCK")

song, singer, opus = (os.path.join(work, n) for n in ("phones-song.wav", "phones-singer.wav", "phones-singer.ogg"))
subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                "anoisesrc=color=pink:sample_rate=48000:duration=%d:amplitude=0.2:seed=3" % (seconds + 20), "-ac", "2", song], check=True)
# A singer: a tone gliding over an octave and back, with vibrato and breaths, mono 48 kHz.
subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                "aevalsrc='0.3*sin(2*PI*220*t+40*sin(2*PI*0.05*t)+0.5*sin(2*PI*5.5*t))*gt(mod(t,4),0.4)':s=48000:d=30",
                "-ac", "1", "-c:a", "pcm_s16le", singer], check=True)
subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", singer, "-c:a", "libopus", "-b:a", "48k",
                "-frame_duration", "20", "-application", "voip", opus], check=True)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def run(phones, singing):
    name = "labenchph%d" % os.getpid()
    jack = subprocess.Popen(["jackd", "-n", name, "-d", "dummy", "-r", "48000", "-p", "128", "-C", "2", "-P", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["jack_wait", "-w", "-t", "10"], env=dict(os.environ, JACK_DEFAULT_SERVER=name), stdout=subprocess.DEVNULL)
    proc = subprocess.Popen(
        [binary, "karaoke", song, "--backend", "jack", "--jack-server", name, "--period", "128", "--input", "self", "--output",
         "self", "--latency-ms", "10", "--duration", str(seconds), "--timing", "--no-screen", "--phones", str(phones),
         "--web", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, JACK_NO_START_SERVER="1"))
    out, err, url = [], [], threading.Event()
    found = {}

    def read_err():
        for line in proc.stderr:
            err.append(line)
            m = re.search(r"the stage is at (https?://\S+)", line)
            if m:
                found["url"] = m.group(1)
                url.set()

    def read_out():
        for line in proc.stdout:
            out.append(line)

    threading.Thread(target=read_err, daemon=True).start()
    threading.Thread(target=read_out, daemon=True).start()
    report = None
    try:
        if not url.wait(30):
            raise RuntimeError("no stage address: " + "".join(err[-5:]))
        time.sleep(2)
        start_cpu, start = cpu_seconds(proc.pid), time.time()
        window = seconds - 8
        if singing:
            address = re.sub(r"^http", "ws", found["url"].split("?")[0].rstrip("/")) + "/ws"
            r = subprocess.run([python, fake, "--url", address, "--phones", str(singing), "--seconds", str(window), "--opus", opus],
                               capture_output=True, text=True)
            report = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-500:]}
        else:
            time.sleep(window)
        cpu = (cpu_seconds(proc.pid) - start_cpu) / (time.time() - start)
        proc.wait(timeout=seconds + 30)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=20)
        jack.send_signal(signal.SIGTERM)
        jack.wait(timeout=10)
    timing = next((l.strip() for l in reversed(out) if l.startswith("cycle timing")), "no timing line")
    return cpu, timing, report


print("room CPU per phone voice: %g s of karaoke at 128 frames on the JACK dummy driver, %s" % (seconds, binary))
base = None
for phones, singing in [(0, 0), (4, 0), (4, 1), (4, 2), (4, 4)]:
    cpu, timing, report = run(phones, singing)
    if (phones, singing) == (4, 0):
        base = cpu
    extra = ""
    if singing and base is not None:
        extra = "; %.2f %% of a core a singing phone over none" % ((cpu - base) * 100 / singing)
    if report:
        statuses = report.get("statuses", [])
        taken = sum((s.get("packets") or 0) for s in statuses)
        late = sum((s.get("late") or 0) for s in statuses)
        extra += "; %s packets sent, %s taken by the room, %s late; voices %s" % (report.get("packets"), taken, late, report.get("voices"))
    print("--phones %d, %d singing: process CPU %.2f %% of a core%s" % (phones, singing, cpu * 100, extra))
    print("    " + timing)
