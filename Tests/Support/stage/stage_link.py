"""A bad network between a page and the stage, made in user space: an HTTP proxy on loopback that Chromium is told to
use (`--proxy-server`, loopback not bypassed) — it takes CONNECT to the stage's address and relays the connection
(TLS passes through untouched, and the page's Host header stays the stage's own), delaying what it relays; it can cut
it.

This machine's kernel has no netem qdisc (`tc qdisc add … netem` answers "Specified qdisc kind is unknown"), so the
link is emulated the way a WebSocket sees one: TCP delivers in order, so each read is released DELAY ± JITTER ms after
it arrived but never before the one before it; and a lost segment holds everything behind it until it is sent again —
a share LOSS of the reads is held a further retransmission timeout (200 … 400 ms, Linux's least being 200) before it
and all that follows goes on. `cut(seconds)` ends every relayed connection at once (both sides closed) and refuses
new ones for that long, as a page that walked out of the Wi-Fi sees.
"""
import asyncio
import random
import threading
import time


class Link:
    def __init__(self, listen, delay_ms=0.0, jitter_ms=0.0, loss=0.0, seed=1):
        self.listen = listen
        self.port = None
        self.delay, self.jitter, self.loss = delay_ms / 1000, jitter_ms / 1000, loss
        self.random = random.Random(seed)
        self.refuse_until = 0.0
        self.writers = set()
        self.connections = 0
        self.held = 0
        self.reads = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the link did not start")
        return self

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._accept, self.listen, 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def chromium_arguments(self):
        """What makes a Chromium use the link for every address, loopback's too."""
        return ["--proxy-server=http://%s:%d" % (self.listen, self.port), "--proxy-bypass-list=<-loopback>"]

    async def _accept(self, reader, writer):
        if time.monotonic() < self.refuse_until:
            writer.transport.abort()
            return
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
            host, port = target.rsplit(":", 1)
            if method != "CONNECT":
                raise ValueError(method)
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.transport.abort()
            return
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        except OSError:
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.connections += 1
        self.writers.update([writer, up_writer])
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            self.writers.discard(w)
            w.transport.abort()

    async def _pump(self, reader, writer):
        """Relays `reader` to `writer`, each read released at its time, in order."""
        queue = asyncio.Queue()

        async def send():
            while True:
                at, data = await queue.get()
                if data is None:
                    return
                wait = at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        last = 0.0
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                self.reads += 1
                at = time.monotonic() + max(0.0, self.delay + self.random.uniform(-self.jitter, self.jitter))
                if self.loss and self.random.random() < self.loss:
                    at += self.random.uniform(0.2, 0.4)
                    self.held += 1
                last = max(last, at)
                queue.put_nowait((last, data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((0, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass
        writer.transport.abort()

    def cut(self, seconds):
        """Ends every relayed connection now and refuses new ones for `seconds`."""
        def go():
            self.refuse_until = time.monotonic() + seconds
            for w in list(self.writers):
                w.transport.abort()
        self.loop.call_soon_threadsafe(go)

    def stop(self):
        def go():
            self.server.close()
            for w in list(self.writers):
                w.transport.abort()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.call_later(0.1, self.loop.stop)
        self.loop.call_soon_threadsafe(go)
        self.thread.join(5)
