#!/usr/bin/env python3
"""A karaoke room's stage in headless Chromium: a running `liveaudio karaoke SONG… --web 127.0.0.1:0` that this
script starts (and stops by its PID). It follows the page through the evening — the title shown, the next song's
countdown — presses "Next song" once the first take has played `--skip-at` seconds, and writes what it saw as JSON
for the Swift test KaraokeRoomTests.

Usage: stage_room.py --out RESULTS.json --cwd DIR [--skip-at S] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import time

from selenium.webdriver.common.by import By

from stage_run import Liveaudio, chromium, command


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--skip-at", type=float, default=1.5)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"titles": [], "countdowns": [], "errors": []}
    proc = Liveaudio(command(args), args.cwd)
    d = None
    try:
        r["url"] = proc.url()
        d = chromium()
        d.get(r["url"])
        skipped = False
        end = time.time() + 90
        while proc.proc.poll() is None and time.time() < end:
            s = d.execute_script("""const s = window.stage;
              return {title: document.getElementById('title').textContent,
                next: document.getElementById('next-song').textContent,
                position: s && s.tick ? s.tick.position : null, state: s && s.tick ? s.tick.state : null,
                song: s && s.song ? s.song.number : null}""")
            if s["title"] and (not r["titles"] or r["titles"][-1] != s["title"]):
                r["titles"].append(s["title"])
            if s["next"] and (not r["countdowns"] or r["countdowns"][-1] != s["next"]):
                r["countdowns"].append(s["next"])
            if not skipped and s["song"] == 1 and s["position"] is not None and s["position"] >= args.skip_at:
                d.find_element(By.ID, "skip").click()
                r["skippedAt"] = s["position"]
                skipped = True
            time.sleep(0.05)
        r["endWallMs"] = time.time() * 1000
        if proc.proc.poll() is None:
            r["errors"].append("liveaudio did not end within 90 s")
        r["console"] = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        if d is not None:
            d.quit()
        proc.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
