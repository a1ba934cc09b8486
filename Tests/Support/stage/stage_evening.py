#!/usr/bin/env python3
"""A karaoke evening from phones, in headless Chromium: `liveaudio karaoke --library … --web 127.0.0.1:PORT` started
here (and stopped by its PID), the big screen (the host's address) and two phone-sized pages (the join address).

The phones join (one with a hostile name), search as they type and queue four songs; every page's first sight of a
new entry is timed against the moment the phone sent it; a phone's attempts to remove another's song and to skip are
refused; the big screen's QR code is read back by zbarimg; the host, who paused the queue while it was filled and
nothing started, resumes it and skips the first song; the next is sung; then the
process is killed (SIGKILL) and started again with the same command, and the pages, the queue and the scores are
looked at again; the last two songs are sung. What each page saw goes to RESULTS as JSON for the Swift test
EveningStageTests.

Usage: stage_evening.py --out RESULTS.json --cwd DIR [--screenshots DIR] -- LIVEAUDIO ARGS…
"""
import argparse
import json
import os
import signal
import subprocess
import time

from selenium.webdriver.common.by import By

from stage_run import Evening, chromium, command, wait


def phone_state(d):
    return d.execute_script("""const p = window.phone; return {connected: p.connected, me: p.me,
      queue: p.queue ? p.queue.entries.map((e) => e.id) : null,
      mine: Array.from(document.querySelectorAll('#mine li')).map((li) => Number(li.dataset.entry)),
      results: p.results.map((s) => s.title), searches: p.searches}""")


def big_state(d):
    return d.execute_script("""const s = window.stage; return {connected: s.connected,
      role: s.hello ? s.hello.role : null, queue: s.queue ? s.queue.entries.map((e) => e.id) : null,
      states: s.queue ? s.queue.entries.map((e) => e.state) : null,
      scores: s.scores, song: s.song ? {number: s.song.number, title: s.song.title, startsIn: s.song.startsIn} : null,
      position: s.tick ? s.tick.position : null, state: s.tick ? s.tick.state : null, join: s.join ? s.join.url : null}""")


def evening_request(d, action, fields):
    """Sends an evening request from a page (its own socket) and returns the reply."""
    return d.execute_async_script("""const [action, fields, done] = arguments;
      const p = window.phone || window.stage; const ws = p.socket; const id = 'test-' + Math.random();
      const listen = (event) => { const m = JSON.parse(event.data);
        if (m.type === 'reply' && m.id === id) { ws.removeEventListener('message', listen); done(m); } };
      ws.addEventListener('message', listen);
      ws.send(JSON.stringify(Object.assign({type: fields.type || 'evening', id, action}, fields)));""", action, fields)


def join(d, name):
    d.find_element(By.ID, "name").send_keys(name)
    d.find_element(By.ID, "join").click()
    return wait("the phone to join as " + name, lambda: phone_state(d)["me"])


def search(d, text):
    box = d.find_element(By.ID, "search")
    box.clear()
    for ch in text:
        box.send_keys(ch)
        time.sleep(0.03)
    return wait("results for " + text, lambda: phone_state(d)["results"])


def queue_song(d, title, pages, partner=None, part=None):
    """Picks `title` from the phone's results and queues it; returns the entry's id and, per page, ms from the
    click to that page's first sight of the entry."""
    d.execute_script("""const b = Array.from(document.querySelectorAll('#results button')).find((x) => x.textContent.includes(arguments[0]));
      b.click();""", title)
    if partner is not None:
        d.find_element(By.ID, "pick-partner").send_keys(partner)
    if part is not None:
        d.execute_script("document.getElementById('pick-part').value = String(arguments[0]);", part)
    before = set(phone_state(d)["queue"] or [])
    sent = d.execute_script("const t = Date.now(); document.getElementById('pick-queue').click(); return t;")
    entry = wait("the entry of " + title, lambda: (set(phone_state(d)["queue"] or []) - before) or None)
    entry = sorted(entry)[0]
    delays = {}
    for name, page, key in pages:
        seen = wait(name + " to show entry %d" % entry, lambda: page.execute_script(
            "const p = window.%s; return p.queueSeen ? p.queueSeen[arguments[0]] : null;" % key, entry))
        delays[name] = seen - sent
    return entry, delays


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--screenshots")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = command(args)
    r = {"errors": [], "delays": {}, "scores": [], "takes": []}
    procs = []
    drivers = []
    try:
        proc = Evening(cmd, args.cwd)
        procs.append(proc)
        r["url"] = proc.url()
        r["joinURL"] = proc.join_url()
        big = chromium(["--window-size=1280,900"])
        drivers.append(big)
        big.get(r["url"])
        ana = chromium(["--window-size=390,844"])
        ben = chromium(["--window-size=390,844"])
        drivers += [ana, ben]
        ana.get(r["joinURL"])
        ben.get(r["joinURL"])
        wait("the big screen's queue", lambda: big_state(big)["queue"] is not None)
        r["bigRole"] = big_state(big)["role"]
        r["ana"] = join(ana, "Ana")
        hostile = '<img src=x onerror="window.pwned=1">Ben'
        r["ben"] = join(ben, hostile)
        r["phoneRole"] = ana.execute_script("return window.phone.hello.role")

        # The host pauses the queue while the phones fill it and the steps below run: on a loaded machine they took
        # longer than the first song lasts, and the take the host was to skip was over before it looked.
        big.find_element(By.ID, "queue-pause").click()
        wait("the queue to pause", lambda: big.execute_script("return window.stage.queue && window.stage.queue.paused"))

        # Search as you type, then queue: Ana a song, Ben the duet with Ana, Ana another, Ben another.
        pages = [("big", big, "stage"), ("ana", ana, "phone"), ("ben", ben, "phone")]
        r["searchAna"] = search(ana, "stage o")
        a1, r["delays"]["a1"] = queue_song(ana, "Stage One", pages)
        r["searchBen"] = search(ben, "duet")
        b1, r["delays"]["b1"] = queue_song(ben, "Stage Duet", pages, partner="Ana", part=2)
        search(ana, "two")
        a2, r["delays"]["a2"] = queue_song(ana, "Stage Two", pages)
        search(ben, "thr")
        b2, r["delays"]["b2"] = queue_song(ben, "Stage Three", pages)
        r["entries"] = {"a1": a1, "b1": b1, "a2": a2, "b2": b2}
        r["queueBig"] = big_state(big)["queue"]
        r["queueAna"] = phone_state(ana)["queue"]
        r["mineBen"] = phone_state(ben)["mine"]
        # A phone reloaded keeps its name and its songs.
        ana.refresh()
        wait("Ana's phone to join again", lambda: phone_state(ana)["me"], timeout=30)
        wait("Ana's songs after the reload", lambda: phone_state(ana)["mine"], timeout=30)
        r["anaAfterReload"] = phone_state(ana)

        # A guest may touch its own entries only, and no control.
        r["benRemovesAna"] = evening_request(ben, "dequeue", {"entry": a2})
        r["benSkips"] = evening_request(ben, "skip", {"type": "control"})
        r["benMoves"] = evening_request(ben, "move", {"entry": b2, "position": 1})
        # A guest's requests are limited: 40 searches 5 ms apart, the burst's 30 (and what refills meanwhile) taken,
        # the rest refused. (A page that floods gets at most 32 replies waiting: they are sent apart.)
        r["burst"] = ben.execute_async_script("""const done = arguments[0]; const ws = window.phone.socket;
          const replies = []; const ids = new Set();
          const finish = () => { ws.removeEventListener('message', listen); done(replies); };
          const listen = (event) => { const m = JSON.parse(event.data);
            if (m.type === 'reply' && ids.has(m.id)) { replies.push(m); if (replies.length === 40) finish(); } };
          ws.addEventListener('message', listen);
          for (let i = 0; i < 40; i++) setTimeout(() => { const id = 'burst-' + i; ids.add(id);
            ws.send(JSON.stringify({type: 'evening', id, action: 'search', text: 'stage'})); }, i * 5);
          setTimeout(finish, 3000);""")

        # The hostile name is text on the big screen and on the phones.
        r["hostile"] = big.execute_script("""return {text: Array.from(document.querySelectorAll('#queue .singer')).map((e) => e.textContent),
          images: document.querySelectorAll('#queue img, #scores-box img').length, pwned: window.pwned === 1}""")
        r["hostilePhone"] = ana.execute_script("return {images: document.querySelectorAll('#queue img').length, pwned: window.pwned === 1}")

        # The QR code on the big screen, read as a phone's camera would.
        png = os.path.join(args.cwd, "qr.png")
        wait("the QR code", lambda: big.execute_script("return document.getElementById('join-qr').complete && document.getElementById('join-qr').naturalWidth > 0"))
        # Up to three looks a second apart, as a phone held up again (the code moves to a corner when a song starts,
        # and a look during the move reads nothing).
        for _ in range(3):
            big.find_element(By.ID, "join-qr").screenshot(png)
            z = subprocess.run(["zbarimg", "--quiet", "--raw", png], capture_output=True, text=True)
            r["qr"] = z.stdout.strip()
            if r["qr"]:
                break
            time.sleep(1)
        # Nothing has started while the queue was paused, and the big screen says it is; resumed, the first take.
        r["whilePaused"] = big.execute_script("""return {shown: !document.getElementById('queue-paused').classList.contains('hidden'),
          button: document.getElementById('queue-pause').textContent, states: window.stage.queue.entries.map((e) => e.state)}""")
        big.find_element(By.ID, "queue-pause").click()
        wait("the queue to resume", lambda: big.execute_script("return window.stage.queue && !window.stage.queue.paused"))
        if args.screenshots:
            os.makedirs(args.screenshots, exist_ok=True)
            big.save_screenshot(os.path.join(args.screenshots, "evening-big-screen.png"))
            ana.save_screenshot(os.path.join(args.screenshots, "evening-phone.png"))

        # The first take: the host skips it two seconds in.
        wait("the first take to play", lambda: (lambda s: s["song"] and s["song"]["startsIn"] <= 0 and s["state"] == "playing" and (s["position"] or 0) > 2)(big_state(big)), timeout=60)
        r["firstTitle"] = big_state(big)["song"]["title"]
        big.find_element(By.ID, "skip").click()
        # The duet: sung to its end, its scores shown.
        wait("the duet's scores", lambda: (big_state(big)["scores"] or {}).get("title") == "Stage Duet", timeout=60)
        r["scores"].append(big_state(big)["scores"])
        r["queueBeforeKill"] = big_state(big)["queue"]
        r["statesBeforeKill"] = big_state(big)["states"]

        # Killed: started again with the same command, the pages reconnect by themselves.
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait()
        r["killedStatus"] = proc.proc.returncode
        proc = Evening(cmd, args.cwd)
        procs.append(proc)
        r["urlAfterRestart"] = proc.url()
        r["joinAfterRestart"] = proc.join_url()
        wait("the big screen to reconnect", lambda: big.execute_script("return window.stage.connects") >= 2, timeout=60)
        # The entry that was up next when the process died comes first again.
        wait("the next song after the restart", lambda: (big_state(big)["song"] or {}).get("title") == "Stage Two", timeout=60)
        r["queueAfterRestart"] = big_state(big)["queue"]
        r["roleAfterRestart"] = big_state(big)["role"]
        # The phones reconnect and join again as who they were.
        wait("Ana's phone to reconnect", lambda: ana.execute_script("return window.phone.connected && window.phone.replies.filter((m) => m.ok && m.data && m.data.name === 'Ana').length >= 2"), timeout=30)
        r["anaAfterRestart"] = phone_state(ana)

        # Ana queues the song the host skipped again: the room plays three takes back to back, each one's scores
        # shown.
        search(ana, "one")
        a3, r["delays"]["a3"] = queue_song(ana, "Stage One", pages)
        r["entries"]["a3"] = a3
        for title in ["Stage Two", "Stage Three", "Stage One"]:
            wait(title + "'s scores", lambda: (big_state(big)["scores"] or {}).get("title") == title, timeout=90)
            r["scores"].append(big_state(big)["scores"])
        r["queueAtEnd"] = big_state(big)["queue"]
        r["console"] = [e for d in drivers for e in d.get_log("browser") if e.get("level") == "SEVERE"]
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        for d in drivers:
            d.quit()
        for p in procs:
            p.stop()
        r["runs"] = []
        for p in procs:
            run = {}
            p.report(run)
            r["runs"].append(run)
    with open(args.out, "w") as f:
        json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
