#!/usr/bin/env python3
"""A page's voice across its connections: `liveaudio karaoke … --phones 2 --web 127.0.0.1:0` (started here, stopped
by its PID) and WebSocket clients that speak the stage's phone protocol as the page does (no browser: what is tested
is the room's bookkeeping). In order:

  1. page A sings with claim X;
  2. A's new connection (B, claim X) sings while A's is still open: it gets A's voice, and the room closes A;
  3. another page (C, claim Y) sings: the other voice;
  4. B's connection drops; a third page (D, claim Z) is refused: the voice is kept for X;
  5. X comes back (E): its voice again;
  6. E stops singing (a stop, not a drop); D sings again: it gets that voice.

Writes each step's replies and closes as JSON for the Swift test PhoneClaimTests.

Usage: stage_claims.py --out RESULTS.json --cwd DIR -- LIVEAUDIO ARGS…
"""
import argparse
import asyncio
import json

import websockets

from stage_run import Liveaudio, command

X, Y, Z = "claim-x-0123456789abcdef", "claim-y-0123456789abcdef", "claim-z-0123456789abcdef"


class Page:
    """One connection: answers the room's clock readings, keeps the replies and how it closed."""

    def __init__(self, url):
        self.url = url
        self.replies = {}
        self.closed = None

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
                if m.get("type") == "clock":
                    await self.ws.send(json.dumps({"type": "phone", "action": "clock", "room": m["room"], "phone": 1e9}))
                elif m.get("type") == "reply" and m.get("id"):
                    self.replies[m["id"]] = m
        except websockets.ConnectionClosed:
            pass
        self.closed = {"code": self.ws.close_code, "reason": self.ws.close_reason}

    async def ask(self, action, **fields):
        """Sends a phone message and waits for its reply."""
        name = "%s-%d" % (action, len(self.replies))
        await self.ws.send(json.dumps({"type": "phone", "id": name, "action": action, **fields}))
        for _ in range(100):
            if name in self.replies:
                return self.replies[name]
            await asyncio.sleep(0.05)
        return None

    async def wait_closed(self, seconds):
        for _ in range(int(seconds * 20)):
            if self.closed is not None:
                return self.closed
            await asyncio.sleep(0.05)
        return None


async def steps(url, r):
    a = await Page(url).open()
    r["a"] = await a.ask("sing", offset=0, claim=X)
    b = await Page(url).open()
    r["b"] = await b.ask("sing", offset=0, claim=X)
    r["aClosed"] = await a.wait_closed(3)
    c = await Page(url).open()
    r["c"] = await c.ask("sing", offset=0, claim=Y)
    await b.ws.close()
    await b.wait_closed(3)
    await asyncio.sleep(0.5)
    d = await Page(url).open()
    r["d"] = await d.ask("sing", offset=0, claim=Z)
    e = await Page(url).open()
    r["e"] = await e.ask("sing", offset=0, claim=X)
    r["eStop"] = await e.ask("stop")
    r["dAgain"] = await d.ask("sing", offset=0, claim=Z)
    r["badClaim"] = await d.ask("sing", claim="no")
    for p in (c, d, e):
        await p.ws.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": []}
    proc = Liveaudio(command(args), args.cwd)
    try:
        url = proc.url()
        r["url"] = url
        ws = url.replace("http://", "ws://").split("?")[0].rstrip("/") + "/ws"
        asyncio.run(asyncio.wait_for(steps(ws, r), 60))
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        proc.stop()
        proc.report(r)
    with open(args.out, "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
