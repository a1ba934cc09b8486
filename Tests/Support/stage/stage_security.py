#!/usr/bin/env python3
"""The web stage's defences, from outside: a running `liveaudio … --web HOST:0` that this script starts (and stops by
its PID), probed over HTTPS (off 127.0.0.1 the stage serves nothing else: its own certificate, not checked here),
with the `websockets` client and raw TLS sockets, and with plain HTTP, which must get a redirect and never the page.
Writes what it saw as JSON; the Swift test StageTests judges it.

  - Host header: another name (DNS rebinding) gets 421, the server's own address the page;
  - without the token: the page and its state, but every control refused, the state unchanged;
  - a WebSocket whose Origin is another site's is refused at the upgrade;
  - with the token: malformed, oversized, unknown and out-of-range messages each get an error reply and change
    nothing; a good one changes the volume;
  - 100 clients that never read (receive buffers of 4 KiB, never drained) for --flood-seconds: the server's resident
    memory before, during and after, and a reading client's tick rate meanwhile; then the stop, whose summary line
    gives the xruns and drops.

Usage: stage_security.py --out RESULTS.json --cwd DIR [--flood-seconds S] -- LIVEAUDIO ARGS…
"""
import argparse
import base64
import json
import os
import socket
import ssl
import time
from urllib.parse import urlparse

from websockets.sync.client import connect
from websockets.exceptions import InvalidStatus

from stage_run import Liveaudio, command


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


# The stage's certificate is its own (self-signed): taken unchecked, as a browser told to go on does.
TLS = ssl.create_default_context()
TLS.check_hostname = False
TLS.verify_mode = ssl.CERT_NONE


def tls_socket(host, port, timeout=5, rcvbuf=None):
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(timeout)
    raw.connect((host, port))
    return TLS.wrap_socket(raw)


def http_get(host, port, path, host_header, plain=False):
    s = socket.create_connection((host, port), timeout=5) if plain else tls_socket(host, port)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host_header)).encode())
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
    s.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else None
    return status, data


def control(ws, message):
    """Sends `message` (a dict, or raw text/bytes) and returns the first reply that follows."""
    ws.send(json.dumps(message) if isinstance(message, dict) else message)
    end = time.time() + 5
    while time.time() < end:
        m = json.loads(ws.recv(timeout=5))
        if m["type"] == "reply":
            return m
    return None


def newest(ws, kind, seconds=1.0):
    """The newest message of `kind` seen within `seconds`."""
    found = None
    end = time.time() + seconds
    while time.time() < end:
        try:
            m = json.loads(ws.recv(timeout=max(0.01, end - time.time())))
        except TimeoutError:
            break
        if m["type"] == kind:
            found = m
    return found


def upgrade_status(host, port, host_header, token, origin):
    """The HTTP status of a WebSocket upgrade request (101 when taken)."""
    s = tls_socket(host, port)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /ws?token=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
               % (token, host_header, key, "Origin: %s\r\n" % origin if origin else "")).encode())
    data = s.recv(4096)
    s.close()
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else None


def current_status(authority, token):
    """The session's status as a page that joins now gets it (events are sent to others only when they change)."""
    with connect("wss://%s/ws?token=%s" % (authority, token), open_timeout=5, ssl=TLS) as ws:
        return newest(ws, "status", 0.5)


def silent_client(host, port, authority, token):
    """A WebSocket client that upgrades and then never reads: the smallest receive buffer, kept open."""
    s = tls_socket(host, port, timeout=10, rcvbuf=1)  # the kernel's least receive buffer
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /ws?token=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (token, authority, key)).encode())
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--flood-seconds", type=float, default=15)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    r = {"errors": []}
    proc = Liveaudio(command(args), args.cwd)
    silent = []
    try:
        r["url"] = proc.url()
        u = urlparse(r["url"])
        host, port = u.hostname, u.port
        authority = "%s:%d" % (host, port)
        token = dict(p.split("=", 1) for p in u.query.split("&") if "=" in p).get("token")
        r["tokenGiven"] = token is not None
        # The Host header.
        r["ownHost"], _ = http_get(host, port, "/", authority)
        # Plain HTTP on the same port: sent on to HTTPS, never the page.
        r["plainStatus"], body = http_get(host, port, "/?token=%s" % token, authority, plain=True)
        r["plainLocation"] = next((l.split(b": ", 1)[1].decode() for l in body.split(b"\r\n") if l.lower().startswith(b"location: ")), None)
        r["plainHasPage"] = b"<html" in body
        r["otherHost"], body = http_get(host, port, "/", "rebound.example:%d" % port)
        r["otherHostBody"] = body.decode(errors="replace")[-200:]
        r["otherHostWebSocket"] = upgrade_status(host, port, "rebound.example:%d" % port, token, None)
        r["foreignOriginStatus"] = upgrade_status(host, port, authority, token, "https://evil.example")
        # The stage's own address, but plain http:// as the page's origin: not its origin any more.
        r["plainOriginStatus"] = upgrade_status(host, port, authority, token, "http://" + authority)
        # Requests sent one after another without reading the answers: one answer, then the connection closes.
        s = tls_socket(host, port, timeout=10)
        s.sendall(("GET /stage.js HTTP/1.1\r\nHost: %s\r\n\r\n" % authority).encode() * 50)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                break  # closed with the other requests unread: the kernel resets, as it should
            if not chunk:
                break
            data += chunk
        s.close()
        r["pipelinedAnswers"] = data.count(b"HTTP/1.1 ")
        # A connection that sends nothing is closed.
        s = socket.create_connection((host, port), timeout=30)  # not even a TLS handshake
        opened = time.time()
        try:
            r["idleRead"] = len(s.recv(1))
        except OSError as e:
            r["idleRead"] = str(e)
        r["idleClosedAfter"] = time.time() - opened
        s.close()
        r["ownHostWebSocket"] = upgrade_status(host, port, authority, token, None)
        # Without the token: state yes, controls no.
        with connect("wss://%s/ws" % authority, open_timeout=5, ssl=TLS) as ws:
            hello = json.loads(ws.recv(timeout=5))
            r["helloWithoutToken"] = hello
            before = newest(ws, "status")
            r["withoutTokenReply"] = control(ws, {"type": "control", "id": "1", "action": "volume", "part": "accompaniment", "db": -20})
            r["withoutTokenStop"] = control(ws, {"type": "control", "id": "2", "action": "stop"})
            after = current_status(authority, token)
            r["withoutTokenVolumes"] = [before and before["volumes"], after and after["volumes"]]
        # Another site's page.
        try:
            with connect("wss://%s/ws?token=%s" % (authority, token), origin="https://evil.example", open_timeout=5, ssl=TLS):
                r["foreignOrigin"] = "accepted"
        except InvalidStatus as e:
            r["foreignOrigin"] = e.response.status_code
        # With the token: bad messages refused, nothing changed; a good one taken.
        with connect("wss://%s/ws?token=%s" % (authority, token), origin="https://" + authority, open_timeout=5,
                     max_size=2 ** 20, ssl=TLS) as ws:
            r["helloWithToken"] = json.loads(ws.recv(timeout=5))
            before = newest(ws, "status")
            bad = {
                "notJSON": "{\"type\": \"control\", ",
                "array": "[1, 2, 3]",
                "noAction": {"type": "control", "id": "a"},
                "unknownAction": {"type": "control", "id": "b", "action": "launch"},
                "volumeTooHigh": {"type": "control", "id": "c", "action": "volume", "part": "accompaniment", "db": 99},
                "volumeNotANumber": {"type": "control", "id": "d", "action": "volume", "part": "accompaniment", "db": "loud"},
                "unknownPart": {"type": "control", "id": "e", "action": "volume", "part": "drums", "db": -3},
                "keyTooFar": {"type": "control", "id": "f", "action": "key", "cents": 9000},
                "oversized": json.dumps({"type": "control", "id": "g", "action": "volume", "part": "accompaniment",
                                         "db": -3, "padding": "x" * 6000}),
                "binary": b"\x00\x01\x02",
            }
            r["badReplies"] = {name: control(ws, m) for name, m in bad.items()}
            after = current_status(authority, token)
            r["badVolumes"] = [before and before["volumes"], after and after["volumes"]]
            r["goodReply"] = control(ws, {"type": "control", "id": "h", "action": "volume", "part": "voice", "db": -3})
            r["goodStatus"] = current_status(authority, token)
            # Clients that never read, beside one that does.
            r["rssBefore"] = rss_kib(proc.proc.pid)
            for _ in range(100):
                silent.append(silent_client(host, port, authority, token))
            ticks = 0
            start = time.time()
            samples = []
            while time.time() - start < args.flood_seconds:
                try:
                    m = json.loads(ws.recv(timeout=1))
                    if m["type"] == "tick":
                        ticks += 1
                except TimeoutError:
                    pass
                if not samples or time.time() - samples[-1][0] >= 1:
                    samples.append((time.time(), rss_kib(proc.proc.pid)))
            r["readerTicksPerSecond"] = ticks / (time.time() - start)
            r["rssDuring"] = [s[1] for s in samples]
        r["rssAfter"] = rss_kib(proc.proc.pid)
    except Exception as e:  # noqa: BLE001 - every failure goes to the test
        r["errors"].append("%s: %s" % (type(e).__name__, e))
    finally:
        for s in silent:
            s.close()
        proc.stop()
        proc.report(r)
        with open(args.out, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
