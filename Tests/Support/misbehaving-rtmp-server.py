#!/usr/bin/env python3
"""A misbehaving RTMP server for the publisher's tests: each mode breaks the protocol (or the peer's patience) in
one way, so the tests can show that the publisher ends every such connection with a clear error, within its
timeouts, in bounded memory.

    python3 misbehaving-rtmp-server.py --port PORT --mode MODE

Listens on 127.0.0.1 only, prints "listening 127.0.0.1:PORT" once ready and "connection at T" (T the wall-clock
time in seconds since the epoch) for each connection it accepts, serves every connection in MODE until killed. Modes:
  garbage          answers C0+C1 with random bytes, as fast as the socket takes them
  flood            completes the handshake, then sends Acknowledgement messages as fast as it can
  huge-chunks      handshake, Set Chunk Size 0x7FFFFFFF, then a 16 MiB command message that never ends
  chunk-size-zero  handshake, then Set Chunk Size 0
  huge-message     handshake, then a 16 MiB message in 128-byte chunks, sent for ever
  many-partial     handshake, then an unfinished 64 KiB message on each of thousands of chunk streams
  stall            handshake, then reads and never answers
  stall-handshake  reads C0+C1 and never answers
  reset            handshake, reads the connect command, then resets the connection
  slow             a correct handshake, one byte a second
  bad-amf          handshake, then a _result whose AMF0 is nested 100000 objects deep
"""
import argparse
import os
import signal
import socket
import struct
import sys
import threading
import time

HANDSHAKE = 1536


def basic_header(fmt, csid):
    if csid < 64:
        return bytes([fmt << 6 | csid])
    if csid < 320:
        return bytes([fmt << 6, csid - 64])
    return bytes([fmt << 6 | 1]) + struct.pack("<H", csid - 64)


def header0(csid, length, mtype, timestamp=0, stream=0):
    return (basic_header(0, csid) + timestamp.to_bytes(3, "big") + length.to_bytes(3, "big") + bytes([mtype])
            + struct.pack("<I", stream))


def message(csid, mtype, payload, chunk=128, stream=0):
    """A whole message as chunks: a type-0 header, then type-3 continuations."""
    out = bytearray(header0(csid, len(payload), mtype, stream=stream))
    for i in range(0, len(payload), chunk):
        if i:
            out += basic_header(3, csid)
        out += payload[i:i + chunk]
    return bytes(out)


def read_exactly(conn, n):
    data = bytearray()
    while len(data) < n:
        piece = conn.recv(n - len(data))
        if not piece:
            raise ConnectionError("closed")
        data += piece
    return bytes(data)


def drain(conn):
    """Reads and drops whatever the client sends, so it is never blocked writing."""
    def run():
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
    threading.Thread(target=run, daemon=True).start()


def handshake(conn):
    c0c1 = read_exactly(conn, 1 + HANDSHAKE)
    s1 = struct.pack(">II", 0, 0) + os.urandom(HANDSHAKE - 8)
    conn.sendall(bytes([3]) + s1 + c0c1[1:])
    read_exactly(conn, HANDSHAKE)  # C2


def serve(conn, mode):
    if mode == "stall-handshake":
        read_exactly(conn, 1 + HANDSHAKE)
        drain(conn)
        while True:
            time.sleep(3600)
    if mode == "garbage":
        read_exactly(conn, 1 + HANDSHAKE)
        drain(conn)
        conn.sendall(bytes([0x7F]))
        while True:
            conn.sendall(os.urandom(65536))
    if mode == "slow":
        c0c1 = read_exactly(conn, 1 + HANDSHAKE)
        drain(conn)
        for b in bytes([3]) + os.urandom(HANDSHAKE) + c0c1[1:]:
            conn.sendall(bytes([b]))
            time.sleep(1)
        while True:
            time.sleep(3600)
    handshake(conn)
    if mode == "reset":
        conn.recv(4096)  # the connect command
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        return
    drain(conn)
    if mode == "stall":
        while True:
            time.sleep(3600)
    if mode == "flood":
        ack = message(2, 3, struct.pack(">I", 1))
        block = ack * 4096
        while True:
            conn.sendall(block)
    if mode == "chunk-size-zero":
        conn.sendall(message(2, 1, struct.pack(">I", 0)))
        while True:
            time.sleep(3600)
    if mode == "huge-chunks":
        conn.sendall(message(2, 1, struct.pack(">I", 0x7FFFFFFF)))
        conn.sendall(header0(3, 0xFFFFFF, 20))
        while True:
            conn.sendall(os.urandom(65536))
            time.sleep(0.01)
    if mode == "huge-message":
        conn.sendall(header0(3, 0xFFFFFF, 20))
        chunk = bytes(128) + basic_header(3, 3)
        block = chunk * 512
        while True:
            conn.sendall(block)
    if mode == "many-partial":
        for csid in range(3, 65600):
            conn.sendall(header0(csid, 65536, 20) + bytes(128))
        while True:
            time.sleep(3600)
    if mode == "bad-amf":
        payload = b"\x02\x00\x07_result" + b"\x00" + struct.pack(">d", 1.0) + b"\x03" * 100000
        conn.sendall(message(3, 20, payload, chunk=128))
        while True:
            time.sleep(3600)
    raise SystemExit(f"unknown mode {mode}")


def handle(conn, mode):
    try:
        serve(conn, mode)
    except OSError:
        pass  # the client went away: what every mode expects sooner or later
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(16)
    print(f"listening 127.0.0.1:{args.port}", flush=True)
    while True:
        conn, _ = listener.accept()
        print(f"connection at {time.time():.3f}", flush=True)
        threading.Thread(target=handle, args=(conn, args.mode), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
