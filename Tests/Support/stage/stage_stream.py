#!/usr/bin/env python3
"""The stream's stage in headless Chromium: a running `liveaudio stream … --web 127.0.0.1:0` that this script starts
(and stops by its PID). It samples what the page shows (seconds, meters, the outputs and their states), mutes and
unmutes the stream, sets its volume to -6 dB and stops it from the page, each with the stream's seconds it was done
at, and writes what it saw as JSON for the Swift test StageTests.

Usage: stage_stream.py --out RESULTS.json --cwd DIR [--mute-at S --unmute-at S --volume-at S --stop-at S] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import subprocess
import time

from selenium.webdriver.common.by import By

from stage_run import Liveaudio, chromium, command


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--mute-at", type=float, default=3)
    ap.add_argument("--unmute-at", type=float, default=4.5)
    ap.add_argument("--volume-at", type=float, default=6)
    ap.add_argument("--stop-at", type=float, default=9)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"actions": {}, "samples": [], "errors": []}
    proc = Liveaudio(command(args), args.cwd)
    d = None
    try:
        r["url"] = proc.url()
        d = chromium()
        d.get(r["url"])

        def seconds():
            return d.execute_script("return window.stage && window.stage.tick ? window.stage.tick.position : null")

        def sample():
            s = d.execute_script("""const s = window.stage; const bar = document.getElementById('meter-output-bar');
              return s && s.tick ? {position: s.tick.position, state: s.tick.state, output: bar ? bar.value : null,
                outputs: s.status ? s.status.outputs : null, muted: s.status ? s.status.mutes.stream : null,
                volume: s.status ? s.status.volumes.stream : null,
                lufsM: document.getElementById('lufs-m').textContent,
                lufsI: document.getElementById('lufs-i').textContent} : null""")
            if s:
                r["samples"].append(s)

        def wait_for(target):
            end = time.time() + 60
            while time.time() < end:
                p = seconds()
                if p is not None and p >= target:
                    return p
                sample()
                time.sleep(0.05)
            raise RuntimeError("the stream did not reach %.1f s" % target)

        wait_for(args.mute_at)
        d.find_element(By.ID, "mute-stream").click()
        r["actions"]["mute"] = seconds()
        wait_for(args.unmute_at)
        d.find_element(By.ID, "mute-stream").click()
        r["actions"]["unmute"] = seconds()
        wait_for(args.volume_at)
        r["actions"]["volume"] = d.execute_script("""const i = document.getElementById('volume-stream'); i.value = -6;
          i.dispatchEvent(new Event('change')); return window.stage.tick.position;""")
        wait_for(args.stop_at)
        r["hello"] = d.execute_script("return window.stage.hello")
        r["lyricsHidden"] = d.execute_script("return document.getElementById('lyrics').classList.contains('hidden')")
        r["stopWallMs"] = time.time() * 1000
        d.find_element(By.ID, "stop").click()
        r["actions"]["stop"] = seconds()
        try:
            proc.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            r["errors"].append("liveaudio did not exit within 30 s of the stop")
        r["console"] = d.get_log("browser")
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        if d is not None:
            try:
                d.quit()
            except Exception:  # noqa: BLE001
                pass
        proc.stop()
        proc.report(r)
        with open(args.out, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
