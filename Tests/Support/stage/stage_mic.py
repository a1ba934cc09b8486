#!/usr/bin/env python3
"""A phone singing into the room, in headless Chromium: `liveaudio karaoke … --phones 1 --web 127.0.0.2:0` started
here (HTTPS with the certificate it makes; stopped by its PID) and the stage's page opened in Chromium, whose fake
microphone reads the singer's WAV. The page taps "Sing with this phone"; the room reads the page's clock and takes
its audio. The file has a beep 3 s before the singer (at LEAD − 3 s): when the room reports where the phone's first
sound lies on its timeline (firstSound, by the page's timestamps alone — Chromium's fake device starts reading the file
before the page sees its first frame, so the capture's start says nothing of the file's), the test sets the phone's
offset so that the singer's first frame (LEAD) lands at the second song's first frame (its start on the room's
timeline, which the stage gives once the song is scheduled), where a wired singer's voice sung to it would be; what came before the offset was set is dropped (the beep
among it). Then the run goes on to its end. What the page saw (its packets, bytes, the room's reports) goes to RESULTS as JSON for the Swift
test PhoneMicTests.

The microphone is opened when the room's first song has played CLICK_AT seconds (the page's tick), so that the phone's
capture begins about LEAD seconds before TAKE_START (about where the second song will start) and the offset left to set
is small (a phone's offset is at most ±2 s); the singer must come after the second song is scheduled.

Usage: stage_mic.py --out RESULTS.json --cwd DIR --singer WAV --lead SECONDS --take-start SECONDS --click-at SECONDS
       [--pcm] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import time

from selenium.webdriver.common.by import By

from stage_run import Liveaudio, chromium, command, wait


def mic(d):
    return d.execute_script("const m = window.phoneMic; return m ? JSON.parse(JSON.stringify(m)) : null;")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--singer", required=True)
    ap.add_argument("--lead", type=float, required=True)
    ap.add_argument("--take-start", type=float, required=True)
    ap.add_argument("--click-at", type=float, required=True)
    ap.add_argument("--pcm", action="store_true", help="hide WebCodecs from the page: 16-bit PCM")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": []}
    proc = Liveaudio(command(args), args.cwd)
    d = None
    try:
        url = proc.url()
        r["url"] = url
        d = chromium(["--ignore-certificate-errors", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                      "--use-file-for-fake-audio-capture=" + args.singer, "--autoplay-policy=no-user-gesture-required"])
        if args.pcm:
            d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.AudioEncoder;"})
        d.get(url)
        wait("the page's hello", lambda: d.execute_script("return window.stage && window.stage.hello && window.stage.hello.phones"))
        r["secure"] = d.execute_script("return window.isSecureContext")
        wait("the room's time to open the microphone at", lambda: d.execute_script(
            "const t = window.stage.tick; return t && t.position >= arguments[0];", args.click_at), timeout=60)
        d.find_element(By.ID, "mic-start").click()
        m = wait("the phone to sing", lambda: (lambda x: x if x and x["mode"] == "singing" else None)(mic(d)), timeout=20)
        r["codec"] = m["codec"]
        r["voice"] = m["voice"]
        # The file's beep, LEAD − 3 seconds in: where the room's timeline has it by the phone's timestamps.
        status = wait("the room to hear the phone's first sound", lambda: (lambda x: x["status"] if x and x.get("status") and
                      x["status"].get("firstSound") is not None else None)(mic(d)), timeout=30)
        # The second song's start on the room's timeline, exactly, once the room has scheduled it.
        take_start = wait("the second song to be scheduled", lambda: d.execute_script(
            "const s = window.stage.song; return s && s.number >= 2 && s.startsAt !== undefined ? s.startsAt : null;"), timeout=30)
        # The singer's LEAD seconds (3 s after the beep) at the second song's first frame: the offset that puts it there.
        offset = status["firstSound"] + 3 - take_start
        r["captureStart"] = status["captureStart"]
        r["firstSound"] = status["firstSound"]
        r["takeStart"] = take_start
        r["offset"] = offset
        reply = d.execute_async_script("""const [seconds, done] = arguments; const ws = window.stage.socket;
          const listen = (event) => { const m = JSON.parse(event.data);
            if (m.type === 'reply' && m.id === 'test-offset') { ws.removeEventListener('message', listen); done(m); } };
          ws.addEventListener('message', listen);
          ws.send(JSON.stringify({type: 'phone', id: 'test-offset', action: 'offset', seconds}));""", offset)
        r["offsetReply"] = reply
        started = time.time()
        first = last = mic(d)
        # Until the run ends; the page's state kept as it goes.
        while proc.proc.poll() is None and time.time() - started < 300:
            last = mic(d)
            time.sleep(0.5)
        r["seconds"] = time.time() - started
        r["mic"] = last
        r["micAtOffset"] = first
        r["console"] = [e["message"] for e in d.get_log("browser")]
    except Exception as e:  # noqa: BLE001 — reported to the Swift test, which fails on it
        r["errors"].append(repr(e))
    finally:
        if d is not None:
            try:
                r.setdefault("mic", mic(d))
            except Exception:  # noqa: BLE001
                pass
            d.quit()
        proc.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
