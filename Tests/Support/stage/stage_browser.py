#!/usr/bin/env python3
"""The web stage in a real browser: headless Chromium driven by Selenium through chromedriver, against a running
`liveaudio karaoke … --web 127.0.0.1:0` that this script starts (and stops by its PID).

What it does, in order, writing what it saw as JSON (the Swift test StageTests judges it, and measures the stems):
  1. starts liveaudio with the arguments after `--`, reads the stage's address from its standard error;
  2. opens the page in two tabs (A and B), with a MutationObserver put in before the page's scripts that notes when
     the lyric line's text changes (the page's own code is not trusted to report it);
  3. samples, every 50 ms for the whole run, what tab A shows: the line, the newest tick (the server's wall clock
     and the song's position), the output meter's value, the pitch lane's points and notes;
  4. at set song positions: the accompaniment slider to -6 dB (in tab A), key up (tab A), pause then resume (tab B),
     a reload of tab A; each with the song position it was done at;
  5. at the end: stop (tab B), and waits for liveaudio to exit.
The browser's console log and every request the page made are kept for the test to judge.

Usage: stage_browser.py --out RESULTS.json --cwd DIR [--slider-at S --lane-at S --key-at S --pause-at S --reload-at S --stop-at S] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import subprocess
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from stage_run import Liveaudio, chromium, command

OBSERVER = """
window.__lineChanges = [];
document.addEventListener('DOMContentLoaded', () => {
  const line = document.getElementById('line');
  let last = null;
  const note = () => {
    const text = line.textContent;
    if (text !== last) { last = text; window.__lineChanges.push({wallMs: Date.now(), text}); }
  };
  new MutationObserver(note).observe(line, {childList: true, subtree: true, characterData: true});
  note();
});
// Every tick the page got (the server's wall clock and the song's position then), read in the page: the clock its line
// changes are timed against, with no gap where the driver was busy with the other tab.
window.__ticks = [];
setInterval(() => {
  const s = window.stage, t = s && s.tick;
  const last = window.__ticks[window.__ticks.length - 1];
  if (t && (!last || last.tickWallMs !== t.wallMs)) window.__ticks.push({tickWallMs: t.wallMs, position: t.position, state: t.state});
}, 10);
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--slider-at", type=float, default=6)
    ap.add_argument("--lane-at", type=float, default=8.9)
    ap.add_argument("--key-at", type=float, default=9.2)
    ap.add_argument("--pause-at", type=float, default=12)
    ap.add_argument("--reload-at", type=float, default=15)
    ap.add_argument("--stop-at", type=float, default=18)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    results = {"actions": {}, "samples": [], "errors": []}
    proc = Liveaudio(command(args), args.cwd)
    d = None
    try:
        url = proc.url()
        results["url"] = url
        d = chromium(["--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                      "--disable-backgrounding-occluded-windows", "--window-size=1200,1000"], logs=("browser", "performance"))
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVER})
        d.get(url)
        tab_a = d.current_window_handle
        d.switch_to.new_window("tab")
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVER})
        d.get(url)
        tab_b = d.current_window_handle
        d.switch_to.window(tab_a)

        def position():
            return d.execute_script("return window.stage && window.stage.tick ? window.stage.tick.position : null")

        def wait_position(target, limit=60):
            end = time.time() + limit
            while time.time() < end:
                p = position()
                if p is not None and p >= target:
                    return p
                sample()
                time.sleep(0.05)
            raise RuntimeError("the song did not reach %.1f s" % target)

        def sample():
            s = d.execute_script("""
              const s = window.stage; if (!s) return null;
              const bar = document.getElementById('meter-output-bar');
              return {wallMs: Date.now(), connected: s.connected, tickWallMs: s.tick ? s.tick.wallMs : null,
                      position: s.tick ? s.tick.position : null, state: s.tick ? s.tick.state : null,
                      line: document.getElementById('line').textContent, next: document.getElementById('next').textContent,
                      outputMeter: bar ? bar.value : null, ticks: s.ticks};""")
            if s:
                results["samples"].append(s)

        def click(tab, element_id):
            d.switch_to.window(tab)
            d.find_element(By.ID, element_id).click()
            p = position()
            d.switch_to.window(tab_a)
            return p

        def status(tab):
            d.switch_to.window(tab)
            s = d.execute_script("return window.stage.status")
            d.switch_to.window(tab_a)
            return s

        # The accompaniment slider to -6 dB, as a hand lets go of it.
        wait_position(args.slider_at)
        results["actions"]["slider"] = d.execute_script("""
          const i = document.getElementById('volume-accompaniment'); i.value = -6;
          i.dispatchEvent(new Event('change')); return window.stage.tick.position;""")
        time.sleep(0.5)
        results["afterSlider"] = {"a": status(tab_a), "b": status(tab_b)}
        # The lane of the line being sung, before the key change and the pause (the generated singer follows the
        # chart's time and key, not the session's).
        wait_position(args.lane_at)
        d.switch_to.window(tab_b)
        results["laneB"] = d.execute_script("return window.stage.lane")
        d.switch_to.window(tab_a)
        wait_position(args.key_at)
        results["actions"]["keyUp"] = click(tab_a, "key-up")
        time.sleep(0.5)
        results["afterKey"] = {"a": status(tab_a), "b": status(tab_b)}
        # Pause from tab B: the position seen in A holds; then resume.
        wait_position(args.pause_at)
        results["actions"]["pause"] = click(tab_b, "pause")
        held = []
        for _ in range(15):
            time.sleep(0.1)
            held.append(position())
        results["pausedPositions"] = held
        results["actions"]["resume"] = click(tab_b, "pause")
        # By keyboard alone: the headphone voice's slider focused, three steps down with the arrow key.
        d.find_element(By.ID, "volume-monitorVoice").send_keys(Keys.ARROW_LEFT, Keys.ARROW_LEFT, Keys.ARROW_LEFT)
        time.sleep(0.5)
        results["afterKeyboard"] = status(tab_a)
        # Seek: a second back within the line being sung (no line boundary crossed), from the seek slider.
        before_seek = position()
        target = before_seek - 1.0
        d.execute_script("const i = document.getElementById('seek'); i.value = arguments[0]; i.dispatchEvent(new Event('change'))", target)
        time.sleep(0.4)
        results["seek"] = {"from": before_seek, "to": target, "now": position()}
        # A reload picks up where the session is.
        wait_position(args.reload_at)
        results["actions"]["reload"] = position()
        reload_started = time.time()
        d.refresh()
        while time.time() - reload_started < 5:
            ready = d.execute_script("return !!(window.stage && window.stage.status && window.stage.tick && window.stage.hello)")
            if ready:
                break
            time.sleep(0.05)
        results["reloadSeconds"] = time.time() - reload_started
        results["afterReload"] = d.execute_script("""return {status: window.stage.status, position: window.stage.tick.position,
            line: document.getElementById('line').textContent, slider: document.getElementById('volume-accompaniment').value,
            key: document.getElementById('key').textContent}""")
        results["afterReloadB"] = status(tab_b)
        # A connection that drops: the page reconnects by itself.
        connects = d.execute_script("return window.stage.connects")
        d.execute_script("window.stage.socket.close(4000, 'test')")
        end = time.time() + 5
        while time.time() < end and not d.execute_script("return window.stage.connected && window.stage.connects > %d" % connects):
            time.sleep(0.05)
        results["reconnected"] = d.execute_script("return {connected: window.stage.connected, connects: window.stage.connects}")
        results["reconnectedAfter"] = d.execute_script("return %d" % connects)
        wait_position(args.stop_at)
        # Before the stop: the line changes tab B saw (tab A was reloaded).
        d.switch_to.window(tab_b)
        results["lineChangesB"] = d.execute_script("return window.__lineChanges")
        results["ticksB"] = d.execute_script("return window.__ticks")
        d.switch_to.window(tab_a)
        results["lineChangesA"] = d.execute_script("return window.__lineChanges")
        results["hello"] = d.execute_script("return window.stage.hello")
        # Every control is a labelled standard element (a name a screen reader reads), every reading text.
        results["unlabelled"] = d.execute_script("""
          const bad = [];
          for (const e of document.querySelectorAll('input, select, textarea')) {
            if (!(e.labels && e.labels.length) && !e.getAttribute('aria-label')) bad.push(e.id || e.outerHTML.slice(0, 60));
          }
          for (const b of document.querySelectorAll('button')) {
            if (!(b.getAttribute('aria-label') || b.textContent.trim())) bad.push(b.id || b.outerHTML.slice(0, 60));
          }
          return bad;""")
        results["ranges"] = d.execute_script("""return Array.from(document.querySelectorAll('input[type=range]'))
          .map(e => ({id: e.id, label: e.labels.length ? e.labels[0].textContent : null}))""")
        results["texts"] = d.execute_script("""return {score: document.getElementById('score').textContent,
          position: document.getElementById('position').textContent, status: document.getElementById('status-line').textContent}""")
        results["stopWallMs"] = time.time() * 1000
        results["actions"]["stop"] = click(tab_b, "stop")
        stop_clicked = time.time()
        try:
            proc.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            results["errors"].append("liveaudio did not exit within 30 s of the stop")
        results["exitSeconds"] = time.time() - stop_clicked
        time.sleep(0.5)
        results["connectedAfterStop"] = d.execute_script("return window.stage.connected")
        d.switch_to.window(tab_b)
        results["endB"] = d.execute_script("return {ended: window.stage.ended, closes: window.stage.closes, connection: document.getElementById('connection').textContent}")
        d.switch_to.window(tab_a)
        results["console"] = d.get_log("browser")
        requests = []
        for entry in d.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
            elif message.get("method") == "Network.webSocketCreated":
                requests.append(message["params"]["url"])
        results["requests"] = requests
    except Exception as e:  # noqa: BLE001 - every failure is reported to the test
        results["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        if d is not None:
            try:
                d.quit()
            except Exception:  # noqa: BLE001
                pass
        proc.stop()
        proc.report(results)
        with open(args.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
