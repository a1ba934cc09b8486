#!/usr/bin/env python3
"""A karaoke evening's phone voices pass from singer to singer: `liveaudio karaoke --library … --phones N --web
127.0.0.1:0` (started here, stopped by its PID) and WebSocket clients that speak the stage's protocol as the pages
do (no browser, no audio: a voice is taken by `sing` alone; what is tested is the room's bookkeeping). A guest's page
may sing only while its singer's song is on or next; the room looks about once a second and ends a guest's voice
whose singer is no longer either (`{"type":"phone","ended":…}`, the page's connection left open), and forgets a
voice kept for a dropped guest's page the same way. In order:

  1. the host's page (the stage's address) and three guests' pages (the join address): Ana, Ben and Cy join by
     name; Ana queues a song, then Ben: Ana's is sung at once (after --gap), Ben's is next;
  2. once Ana's song is on: Ana and Ben sing (each with a claim) and get a voice; with more than two phone voices
     the host's page takes one too (a host's is never ended); Cy, with no song, is refused;
  3. the host skips Ana's song (the `skip` control): Ben's is on, nothing next. Ana's page is told its voice ended
     (the seconds after the skip are kept), its connection still open; Ben's is not (watched until 3 s after
     Ana's came); Ana asks to sing again and is refused;
  4. Ben's connection drops (closed): his voice is kept for his claim. Dee joins; Cy queues the duet with Dee as
     partner (so both may sing: theirs is next) and sings: the voice Ana's end freed. Four seconds after Ben's drop
     (the room has looked several times, Ben's song still on) Dee sings and is refused: every voice taken, one kept
     for a page whose connection dropped. (A library without a duet: Cy queues a song alone, and a second host
     page, which may always sing, is the one refused.)
  5. the host skips Ben's song: Cy's is next, Ben neither on nor next. Dee asks again every half second: the voice
     kept for Ben is hers within seconds (the seconds after the skip are kept), long before the 30 s a kept voice
     waits for its claim;
  6. Cy, singing, sets its phone's offset 40 times at once: a guest's phone asks count against its requests.

Writes each step's replies, the `phone` messages every page got and a timeline as JSON for the Swift test
(PhoneTurnTests): `errors` lists what went wrong in this driver (empty when it ran through), and liveaudio's exit
status, standard output and error are there as in the other stage scripts.

Usage: stage_turns.py --out RESULTS.json --cwd DIR -- LIVEAUDIO karaoke --library … --phones N --web 127.0.0.1:0 …
"""
import argparse
import asyncio
import itertools
import json
import time
import urllib.parse

import websockets

from stage_run import Evening, command

# Each page's claim for its singing (16 … 64 letters, digits, - or _) and each guest's phone secret for `join`.
CLAIMS = {name: "claim-%s-0123456789abcdef" % name.lower() for name in ("host", "host2", "Ana", "Ben", "Cy", "Dee")}
PHONES = {name: "phone-%s-0123456789abcdef" % name.lower() for name in ("Ana", "Ben", "Cy", "Dee")}
# How long the room may take to end a voice whose singer's turn is over (it looks once a second and waits for a few
# looks in a row), and how long a page that must not be ended is watched after another's end came.
ENDS_WITHIN = 10
QUIET_FOR = 3


def socket_url(page_url):
    """The WebSocket of a page's address, its token kept: `http://H:P/?token=T` → `ws://H:P/ws?token=T` (the host),
    `http://H:P/join?guest=G` → `ws://H:P/ws?guest=G` (a guest)."""
    u = urllib.parse.urlsplit(page_url)
    return urllib.parse.urlunsplit(("wss" if u.scheme == "https" else "ws", u.netloc, "/ws", u.query, ""))


class Page:
    """One connection: answers the room's clock readings, keeps the replies by id, the `phone` messages (each with
    when it came), the latest `hello`, `queue` and `song`, and how it closed."""

    def __init__(self, url, name):
        self.url = url
        self.name = name
        self.replies = {}
        self.phone = []
        self.hello = None
        self.queue = None
        self.song = None
        self.closed = None
        self.ids = itertools.count(1)

    async def open(self):
        self.ws = await websockets.connect(self.url, max_size=None)
        self.task = asyncio.ensure_future(self.listen())
        return self

    async def listen(self):
        try:
            async for message in self.ws:
                if isinstance(message, bytes):
                    continue
                m = json.loads(message)
                kind = m.get("type")
                if kind == "clock":
                    await self.ws.send(json.dumps({"type": "phone", "action": "clock", "room": m["room"], "phone": 1e9}))
                elif kind == "reply" and m.get("id"):
                    self.replies[m["id"]] = m
                elif kind == "phone":
                    self.phone.append({"at": time.monotonic(), "message": m})
                elif kind == "hello":
                    self.hello = m
                elif kind == "queue":
                    self.queue = m
                elif kind == "song":
                    self.song = m
        except websockets.ConnectionClosed:
            pass
        self.closed = {"code": self.ws.close_code, "reason": self.ws.close_reason}

    async def send(self, kind, action, timeout=10, **fields):
        """Sends a message of `kind` (phone, evening or control) and waits for its reply; None if none came."""
        name = "%s-%s-%d" % (self.name, action, next(self.ids))
        await self.ws.send(json.dumps({"type": kind, "id": name, "action": action, **fields}))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if name in self.replies:
                return self.replies[name]
            await asyncio.sleep(0.02)
        return None

    async def need(self, kind, action, **fields):
        """`send`, for a request the driver cannot go on without: an error unless it was done."""
        reply = await self.send(kind, action, **fields)
        if reply is None or not reply.get("ok"):
            raise RuntimeError("%s: %s %s %s: %s" % (self.name, kind, action, json.dumps(fields), json.dumps(reply)))
        return reply

    async def sing(self):
        """Asks for a phone voice under this page's claim, its offset given (no calibration: no audio is sent)."""
        return await self.send("phone", "sing", offset=0, claim=CLAIMS[self.name])

    def ended(self):
        """The `ended` messages so far: (when it came, `time.monotonic()`, why)."""
        return [(p["at"], p["message"]["ended"]) for p in self.phone if "ended" in p["message"]]

    async def wait_closed(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.closed is not None:
                return self.closed
            await asyncio.sleep(0.05)
        return None


def voice(reply):
    """The voice a `sing` reply gave, or None."""
    return ((reply or {}).get("data") or {}).get("voice") if (reply or {}).get("ok") else None


async def until(what, check, timeout):
    """`check()`'s first true value, tried every 50 ms; an error naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def entries(page):
    """The queue as the page last got it: [(entry id, state)]; None before the first."""
    return None if page.queue is None else [(e["id"], e["state"]) for e in page.queue["entries"]]


async def steps(host_url, guest_url, r):
    start = time.monotonic()

    def now():
        return round(time.monotonic() - start, 3)

    def note(text):
        r["timeline"].append([now(), text])

    pages = {}

    async def page(url, name):
        p = await Page(url, name).open()
        pages[name] = p
        await until(name + "'s hello", lambda: p.hello, 10)
        r["roles"][name] = p.hello.get("role")
        return p

    # 1. The pages; the guests join; Ana and Ben queue a song each.
    host = await page(host_url, "host")
    r["phoneVoices"] = host.hello.get("phones")
    ana = await page(guest_url, "Ana")
    ben = await page(guest_url, "Ben")
    cy = await page(guest_url, "Cy")
    for p in (ana, ben, cy):
        r["joined"][p.name] = (await p.need("evening", "join", name=p.name, phone=PHONES[p.name]))["data"]
    # Every song (an empty search lists the library, by artist and title): alone, and a duet if there is one.
    songs = (await ana.need("evening", "search", text=""))["data"]
    solos = sorted((s for s in songs if not s.get("duet")), key=lambda s: s["title"])
    duets = sorted((s for s in songs if s.get("duet")), key=lambda s: s["title"])
    if len(solos) < 2 or (not duets and len(solos) < 3):
        raise RuntimeError("the library needs three songs sung alone, or two and a duet: %s" % json.dumps(songs))
    r["songs"] = {"Ana": solos[0]["title"], "Ben": solos[1]["title"], "Cy": (duets[0] if duets else solos[2])["title"]}
    a = (await ana.need("evening", "queue", song=solos[0]["id"]))["data"]["entry"]
    b = (await ben.need("evening", "queue", song=solos[1]["id"]))["data"]["entry"]
    r["entries"] = {"Ana": a, "Ben": b}
    note("Ana and Ben queued")

    # 2. Ana's song on (out of the queue: being sung), Ben's next: both sing; Cy, with no song, may not.
    await until("Ana's song to be sung and Ben's next", lambda: entries(host) == [(b, "waiting")], 60)
    r["queueWhileAna"] = host.queue["entries"]
    r["songWhileAna"] = host.song and {"title": host.song.get("title"), "startsIn": host.song.get("startsIn")}
    note("Ana's song on")
    r["anaSings"] = await ana.sing()
    r["benSings"] = await ben.sing()
    # A host's page may always sing, and is never ended: with a voice to spare it holds one all along.
    r["hostSinging"] = (r["phoneVoices"] or 0) > 2
    if r["hostSinging"]:
        r["hostSings"] = await host.sing()
    r["cySingsFirst"] = await cy.sing()
    note("sang: Ana %s, Ben %s, Cy %s" % (voice(r["anaSings"]), voice(r["benSings"]), voice(r["cySingsFirst"])))

    # 3. The host skips Ana's song: Ben's is on, nothing next; Ana's voice ends, Ben's does not.
    skipped = time.monotonic()
    r["skipAna"] = await host.need("control", "skip")
    note("skipped Ana's song")
    await until("Ben's song to be sung, nothing next", lambda: entries(host) == [], 30)
    r["queueWhileBen"] = host.queue["entries"]
    r["songWhileBen"] = host.song and {"title": host.song.get("title"), "startsIn": host.song.get("startsIn")}
    note("Ben's song on")
    try:
        await until("Ana's end", ana.ended, max(0.1, skipped + ENDS_WITHIN - time.monotonic()))
    except RuntimeError:
        pass
    ended = ana.ended()
    r["anaEnded"] = ended[0][1] if ended else None
    r["anaEndedSeconds"] = round(ended[0][0] - skipped, 3) if ended else None
    note("Ana's end: %s" % r["anaEnded"])
    # Ben's page watched until 3 s after Ana's end came (or after the 10 s it had).
    await asyncio.sleep(max(0, (ended[0][0] if ended else skipped + ENDS_WITHIN) + QUIET_FOR - time.monotonic()))
    r["benEndedWhileOn"] = [why for _, why in ben.ended()]
    r["anaOpen"] = ana.closed is None
    r["anaSingsAgain"] = await ana.sing()
    note("Ana sang again: %s" % json.dumps(r["anaSingsAgain"]))

    # 4. Ben's page drops: his voice is kept for his claim. Cy's song next (with Dee, a duet); Cy sings: Ana's old
    #    voice; Dee (or a second host page), allowed to sing, is refused: no voice free, one kept.
    await ben.ws.close()
    r["benClosed"] = await ben.wait_closed(5)
    dropped = time.monotonic()
    note("Ben's page closed")
    dee = await page(guest_url, "Dee")
    r["joined"]["Dee"] = (await dee.need("evening", "join", name="Dee", phone=PHONES["Dee"]))["data"]
    if duets:
        duet = duets[0]
        parts = duet.get("parts") or [1, 2]
        c = (await cy.need("evening", "queue", song=duet["id"], part=parts[0], partner="Dee"))["data"]["entry"]
        allowed = dee
    else:
        c = (await cy.need("evening", "queue", song=solos[2]["id"]))["data"]["entry"]
        allowed = await page(host_url, "host2")
    r["allowedPage"] = allowed.name
    r["entries"]["Cy"] = c
    await until("Cy's song next", lambda: entries(host) == [(c, "waiting")], 10)
    r["cySings"] = await cy.sing()
    note("Cy sang: %s" % voice(r["cySings"]))
    # The room has looked a few times since the drop (Ben's song still on): the voice is still kept.
    await asyncio.sleep(max(0, dropped + 4 - time.monotonic()))
    r["allowedRefused"] = await allowed.sing()
    r["allowedRefusedAfterDrop"] = round(time.monotonic() - dropped, 3)
    note("%s refused: %s" % (allowed.name, json.dumps(r["allowedRefused"])))

    # 5. The host skips Ben's song: the kept voice is forgotten, the allowed page gets it.
    skipped = time.monotonic()
    r["skipBen"] = await host.need("control", "skip")
    note("skipped Ben's song")
    attempts = []
    got = None
    while time.monotonic() < skipped + ENDS_WITHIN + 2:
        reply = await allowed.sing()
        attempts.append([round(time.monotonic() - skipped, 3), (reply or {}).get("error") if voice(reply) is None else voice(reply)])
        if voice(reply) is not None:
            got = reply
            r["allowedSingsSeconds"] = round(time.monotonic() - skipped, 3)
            break
        await asyncio.sleep(0.5)
    r["allowedSings"] = got
    r["allowedAttempts"] = attempts
    r["secondsAfterDrop"] = round(time.monotonic() - dropped, 3)
    note("%s sang: %s" % (allowed.name, voice(got)))
    r["queueAfterBen"] = host.queue["entries"] if host.queue else None
    # A moment more: Cy's (and Dee's) song is on or next, the host's page is the host's: none of them is ended.
    await asyncio.sleep(QUIET_FOR)

    # 6. A guest's phone asks count against its requests: Cy, singing, sets its offset 40 times at once (the room
    #    takes a burst of 30, then 10 a second; the guests here share one address, and so one bucket).
    # (A few milliseconds apart: a page's replies waiting to be written are capped, and 40 read at once would
    # outrun the cap, not the bucket.)
    asks = []
    sending = time.monotonic()
    for n in range(40):
        asks.append(asyncio.ensure_future(cy.send("phone", "offset", seconds=0.001 * n)))
        await asyncio.sleep(0.005)
    r["offsetBurstSeconds"] = round(time.monotonic() - sending, 3)
    burst = await asyncio.gather(*asks)
    r["offsetBurst"] = [(reply or {}).get("error") if not (reply or {}).get("ok") else "ok" for reply in burst]
    note("Cy's burst of offsets: %d refused" % sum(1 for x in r["offsetBurst"] if x != "ok"))

    r["ended"] = {name: [why for _, why in p.ended()] for name, p in pages.items()}
    r["closed"] = {name: p.closed for name, p in pages.items()}
    r["phoneMessages"] = {name: [dict(p["message"], at=round(p["at"] - start, 3)) for p in pg.phone] for name, pg in pages.items()}
    for p in pages.values():
        if p.closed is None:
            await p.ws.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": [], "timeline": [], "roles": {}, "joined": {}}
    proc = Evening(command(args), args.cwd)
    try:
        r["url"] = proc.url()
        r["joinURL"] = proc.join_url()
        asyncio.run(asyncio.wait_for(steps(socket_url(r["url"]), socket_url(r["joinURL"]), r), 180))
    except asyncio.TimeoutError:
        r["errors"].append("TimeoutError (the driver's 180 s, or a connection's) after: %s" % (r["timeline"][-1:] or "the start"))
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        proc.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
