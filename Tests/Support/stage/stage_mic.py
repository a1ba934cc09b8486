#!/usr/bin/env python3
"""Phones singing into the room, in headless Chromium: `liveaudio karaoke … --phones N --web 127.0.0.2:0` started
here (HTTPS with the certificate it makes; stopped by its PID) and the stage's page opened in one Chromium a singer,
whose fake microphone reads that singer's WAV. The pages tap "Sing with this phone" together, and take their voices
one after the other (a later page's request held until the one before it sings: the first singer is the first phone
voice); the room reads the pages' clocks and takes their audio. Each file has a beep 3 s before its singer (at
LEAD − 3 s): when the room reports where a phone's first sound lies on its timeline (firstSound, by the page's
timestamps alone — Chromium's fake device starts reading the file before the page sees its first frame, so the
capture's start says nothing of the file's), the test sets that phone's offset so that the singer's first frame
(LEAD) lands at the second song's first frame (its start on the room's timeline, which the stage gives once the song
is scheduled), where a wired singer's voice sung to it would be; what came before the offset was set is dropped (the
beep among it). Then the run goes on to its end. What the pages saw (their packets, bytes, the
room's reports, their connections' closes) goes to RESULTS as JSON for the Swift tests (PhoneMicTests,
PhoneFaultTests); the first page's also at the top level.

The microphones are opened when the room's first song has played CLICK_AT seconds (the first page's tick), so that a
capture begins a little less than LEAD seconds before TAKE_START (where the second song will start) and the offset
left to set is within a phone's ±2 s however long the browser takes to start its file (the tests tap 1.8 s early: see
PhoneMicTests.tapAhead); the singers must come after the second song is scheduled.

Faults, on the first page unless said: --lossy DELAY,JITTER,LOSS puts it behind a bad link (stage_link.py: each read
DELAY ± JITTER ms late, a share LOSS held a retransmission timeout more); --cut-at S cuts its link for --cut-for
seconds (default 2) when the second song has played S seconds; --clock-ppm P makes its clock run P ppm fast
(performance.now and the times the audio context pairs with it); --denied opens one more page, in a browser that
denies it the microphone, taps it, and keeps what it says; --abuse I has page I, once singing and placed, send
300 packets of PCM at once (6 s of audio, faster than real time) when the second song has played --abuse-at seconds,
and — dropped, told why, and tapped to sing again — three messages of random bytes once it sings again.

Usage: stage_mic.py --out RESULTS.json --cwd DIR --singer WAV [--singer WAV …] --lead SECONDS --take-start SECONDS
       --click-at SECONDS [--pcm] [--lossy D,J,L] [--cut-at S [--cut-for S]] [--abuse I --abuse-at S]
       -- LIVEAUDIO ARGS…
"""
import argparse
import json
import time

from selenium.webdriver.common.by import By

from stage_link import Link
from stage_run import Liveaudio, chromium, command, wait

LINK_ADDRESS = "127.0.0.3"


# The phone's own pitch lane, and whether its canvas is shown.
LANE = """const m = window.phoneMic; const c = document.getElementById('mic-lane');
return m && m.mode === 'singing' ? {lane: JSON.parse(JSON.stringify(m.lane)), shown: Boolean(c && !c.hidden && c.offsetWidth > 0),
  voice: m.voice} : null;"""


def mic(d):
    return d.execute_script("const m = window.phoneMic; return m ? JSON.parse(JSON.stringify(m)) : null;")


def song_position(d):
    """The second song's position in seconds (None before it)."""
    return d.execute_script(
        "const s = window.stage.song, t = window.stage.tick;"
        "return s && s.number >= 2 && t ? t.position : null;")


FLOOD = """const socket = window.stage.socket; const n = arguments[0];
  const frames = 960, bytes = new Uint8Array(24 + 2 * frames), view = new DataView(bytes.buffer);
  bytes[0] = 0x4c; bytes[1] = 0x41; bytes[2] = 1; bytes[3] = 0;
  view.setUint32(16, 48000, true); bytes[20] = 1; view.setUint16(22, frames, true);
  const start = BigInt(Math.round(performance.now() * 1000));
  for (let i = 0; i < n; i++) {
    view.setUint32(4, 900000 + i, true);
    view.setBigInt64(8, start + BigInt(i * 20000), true);
    bytes[21] = i === 0 ? 1 : 0;
    socket.send(bytes);
  }
  return socket.readyState;"""

GARBAGE = """const socket = window.stage.socket;
  for (let i = 0; i < 3; i++) {
    const bytes = new Uint8Array(200 + 50 * i);
    for (let j = 0; j < bytes.length; j++) bytes[j] = (j * 7919 + i * 104729) & 0xff;
    socket.send(bytes);
  }
  return socket.readyState;"""


# The page's clock (performance.now, and the performance times the audio context pairs with its own) made to run
# fast by a factor, from the page's start: a phone whose clock is fast against the room's.
FAST_CLOCK = """(() => { const f = %.9f, now = performance.now.bind(performance), t0 = now();
  performance.now = () => t0 + (now() - t0) * f;
  const stamp = AudioContext.prototype.getOutputTimestamp;
  AudioContext.prototype.getOutputTimestamp = function () {
    const t = stamp.call(this);
    return { contextTime: t.contextTime, performanceTime: t.performanceTime > 0 ? t0 + (t.performanceTime - t0) * f : t.performanceTime };
  };
})();"""


# A later page's "sing" request, held until the test lets it go: the pages open their microphones together (a page
# that waited for the one before it to sing started its file seconds late on a loaded machine), and still take their
# voices in order.
HOLD_SING = """(() => { const send = WebSocket.prototype.send, held = [];
  window.releaseSing = () => { window.singReleased = true; for (const [socket, m] of held.splice(0)) send.call(socket, m); };
  WebSocket.prototype.send = function (m) {
    if (!window.singReleased && typeof m === 'string' && m.includes('"action":"sing"')) { held.push([this, m]); return; }
    return send.call(this, m);
  };
})();"""


def closes(d):
    return d.execute_script("return JSON.parse(JSON.stringify(window.stage.closes));")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--singer", action="append", required=True)
    ap.add_argument("--lead", type=float, required=True)
    ap.add_argument("--take-start", type=float, required=True)
    ap.add_argument("--click-at", type=float, required=True)
    ap.add_argument("--pcm", action="store_true", help="hide WebCodecs from the pages: 16-bit PCM")
    ap.add_argument("--lossy", help="DELAY_MS,JITTER_MS,LOSS for the first page's link")
    ap.add_argument("--cut-at", type=float)
    ap.add_argument("--cut-for", type=float, default=2.0)
    ap.add_argument("--abuse", type=int)
    ap.add_argument("--abuse-at", type=float)
    ap.add_argument("--clock-ppm", type=float, help="the first page's clock runs this many ppm fast")
    ap.add_argument("--denied", action="store_true", help="one more page, whose browser denies it the microphone")
    ap.add_argument("--hear-room", action="store_true",
                    help="the pages' microphone is the system's default source (PulseAudio: one that hears the room's "
                         "output), not a file; their offset is the room's own calibration, not set by the test")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": [], "pages": []}
    proc = Liveaudio(command(args), args.cwd)
    drivers = []
    link = None
    try:
        url = proc.url()
        r["url"] = url
        if args.lossy or args.cut_at is not None:
            delay, jitter, loss = (float(x) for x in (args.lossy or "0,0,0").split(","))
            link = Link(LINK_ADDRESS, delay, jitter, loss).start()
        for i, singer in enumerate(args.singer):
            microphone = [] if args.hear_room else ["--use-fake-device-for-media-stream", "--use-file-for-fake-audio-capture=" + singer]
            d = chromium(["--ignore-certificate-errors", "--use-fake-ui-for-media-stream", "--autoplay-policy=no-user-gesture-required"]
                         + microphone + (link.chromium_arguments() if link is not None and i == 0 else []))
            drivers.append(d)
            if args.pcm:
                d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.AudioEncoder;"})
            if args.clock_ppm and i == 0:
                d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FAST_CLOCK % (1 + args.clock_ppm * 1e-6)})
            if i > 0:
                d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOLD_SING})
            d.get(url)
        for d in drivers:
            wait("a page's hello", lambda: d.execute_script("return window.stage && window.stage.hello && window.stage.hello.phones"))
        r["secure"] = all(d.execute_script("return window.isSecureContext") for d in drivers)
        if args.denied:
            # A page the browser will not give the microphone: what it says when tapped.
            d = chromium(["--ignore-certificate-errors", "--use-fake-device-for-media-stream", "--deny-permission-prompts"])
            drivers.append(d)
            d.get(url)
            wait("the denied page's hello", lambda: d.execute_script("return window.stage && window.stage.hello && window.stage.hello.phones"))
            d.find_element(By.ID, "mic-start").click()
            m = wait("the denied page to say why", lambda: (lambda x: x if x and x.get("error") else None)(mic(d)), timeout=20)
            r["deniedError"] = m["error"]
            r["deniedShown"] = d.find_element(By.ID, "mic-state").text
            d.quit()
            drivers.pop()
        first = drivers[0]
        wait("the room's time to open the microphones at", lambda: first.execute_script(
            "const t = window.stage.tick; return t && t.position >= arguments[0];", args.click_at), timeout=60)
        pages = []
        for d in drivers:
            d.find_element(By.ID, "mic-start").click()
        for i, d in enumerate(drivers):
            if i > 0:
                d.execute_script("window.releaseSing();")
            m = wait("a phone to sing", lambda: (lambda x: x if x and x["mode"] == "singing" else None)(mic(d)), timeout=20)
            pages.append({"codec": m["codec"], "voice": m["voice"]})
        if args.hear_room:
            # The room's own calibration, two seconds after a page starts singing: its chirps through the room's
            # output, heard by the page.
            for d, page in zip(drivers, pages):
                m = wait("the room to calibrate a phone", lambda: (lambda x: x if x and (x.get("offset") is not None or
                         x.get("note")) else None)(mic(d)), timeout=40)
                page.update({"offset": m.get("offset"), "calibrationNote": m.get("note"), "calibrations": m.get("calibrations")})
            pages_placed = True
        else:
            pages_placed = False
        # Each file's beep, LEAD − 3 seconds in: where the room's timeline has it by that phone's timestamps.
        statuses = [] if pages_placed else [wait("the room to hear a phone's first sound", lambda: (lambda x: x["status"] if x and x.get("status") and
                    x["status"].get("firstSound") is not None else None)(mic(d)), timeout=30) for d in drivers]
        # The second song's start on the room's timeline, exactly, once the room has scheduled it.
        take_start = wait("the second song to be scheduled", lambda: first.execute_script(
            "const s = window.stage.song; return s && s.number >= 2 && s.startsAt !== undefined ? s.startsAt : null;"), timeout=30)
        r["takeStart"] = take_start
        for d, page, status in ([] if pages_placed else zip(drivers, pages, statuses)):
            # The singer's LEAD seconds (3 s after the beep) at the second song's first frame.
            offset = status["firstSound"] + 3 - take_start
            page.update({"captureStart": status["captureStart"], "firstSound": status["firstSound"], "offset": offset})
            page["offsetReply"] = d.execute_async_script("""const [seconds, done] = arguments; const ws = window.stage.socket;
              const listen = (event) => { const m = JSON.parse(event.data);
                if (m.type === 'reply' && m.id === 'test-offset') { ws.removeEventListener('message', listen); done(m); } };
              ws.addEventListener('message', listen);
              ws.send(JSON.stringify({type: 'phone', id: 'test-offset', action: 'offset', seconds}));""", offset)
        started = time.time()
        cut_done = abuse_state = None
        # Each page's pitch lane as it drew it, the last look at each line (a look a second, page by page).
        lanes = [{} for _ in pages]
        looks = 0
        # Until the run ends (the room ends after its last song; 15 minutes at most); the faults when their time comes.
        while proc.proc.poll() is None and time.time() - started < 900:
            position = song_position(first)
            looks += 1
            if looks % 5 == 0:
                i = (looks // 5) % len(pages)
                try:
                    look = drivers[i].execute_script(LANE)
                    if look and look["lane"]["line"] >= 0:
                        lanes[i][look["lane"]["line"]] = look
                except Exception:  # noqa: BLE001 - a page closing as the run ends
                    pass
            if args.cut_at is not None and cut_done is None and position is not None and position >= args.cut_at:
                link.cut(args.cut_for)
                cut_done = position
                r["cutAt"] = position
            if args.abuse is not None and position is not None:
                d = drivers[args.abuse]
                if abuse_state is None and position >= args.abuse_at:
                    r["floodState"] = d.execute_script(FLOOD, 300)
                    r["floodAt"] = position
                    r["closesBeforeGarbage"] = None
                    abuse_state = "flooded"
                elif abuse_state == "flooded":
                    # Dropped: the page says why and stops; tapped again once it is back, it sings again.
                    m = mic(d)
                    if closes(d) and m and m["mode"] == "off" and d.execute_script("return window.stage.connected"):
                        r["floodError"] = m.get("error")
                        d.find_element(By.ID, "mic-start").click()
                        abuse_state = "again"
                elif abuse_state == "again":
                    m = mic(d)
                    if m and m["mode"] == "singing":
                        r["closesBeforeGarbage"] = closes(d)
                        r["garbageState"] = d.execute_script(GARBAGE)
                        r["garbageAt"] = position
                        abuse_state = "garbage"
                elif abuse_state == "garbage" and "garbageError" not in r:
                    m = mic(d)
                    if m and m["mode"] == "off" and m.get("error"):
                        r["garbageError"] = m.get("error")
            time.sleep(0.2)
        r["seconds"] = time.time() - started
        for d, page, lane in zip(drivers, pages, lanes):
            page["lanes"] = [lane[k] for k in sorted(lane)]
            page["mic"] = mic(d)
            page["closes"] = closes(d)
            page["console"] = [e["message"] for e in d.get_log("browser")]
        r["pages"] = pages
        r.update({k: pages[0][k] for k in ("codec", "voice", "captureStart", "firstSound", "offset", "offsetReply", "mic") if k in pages[0]})
        if link is not None:
            r["link"] = {"connections": link.connections, "held": link.held, "reads": link.reads}
    except Exception as e:  # noqa: BLE001 — reported to the Swift test, which fails on it
        r["errors"].append(repr(e))
    finally:
        for d in drivers:
            try:
                if "mic" not in r:
                    r["mic"] = mic(d)
            except Exception:  # noqa: BLE001
                pass
            d.quit()
        proc.stop()
        if link is not None:
            link.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
