#!/usr/bin/env python3
"""An RTMP server that departs from the spec the way servers in the field do, one quirk per mode, and records
what is published, so the tests can show that the publisher copes with each and that the audio arrives whole.

    python3 quirky-rtmp-server.py --port PORT --mode MODE --record OUT.flv

Listens on 127.0.0.1 only, prints "listening 127.0.0.1:PORT" once ready, serves one publisher in MODE, writes its
audio messages to OUT.flv as they come (an FLV file FFmpeg reads), prints "audio messages N" when the publisher
has gone, and exits. Modes:
  plain                 the spec as nginx-rtmp speaks it (the control case)
  onfcpublish           answers FCPublish with an onFCPublish that carries its name and nothing else (FFmpeg)
  no-transaction        commands with a name and no transaction id (onBWDone, and releaseStream's answer)
  bandwidth-check       onBWDone with arguments, and a _checkbw call, after connect
  status-variants       onStatus with its info object where the command object goes, extra arguments, an
                        onStatus of another code first; createStream's _result without the null command object
  error-replies         releaseStream and FCPublish answered with _error, one without a description object
  amf3                  every answer as an AMF3 command message (type 17): the info objects as AMF3 objects, an
                        onBWDone in AMF3 throughout; and AMF3 and AMF0 data messages (types 15 and 18)
  fmt-first             the first message on chunk streams 2 and 3 starts with a fmt 1 header (pyrtmp), and an
                        empty message on a new chunk stream with a fmt 2 header
  chunk-size-anywhere   Set Chunk Size in the middle of another chunk stream's message, several times over
  s2-no-echo            an S2 of its own random bytes
  handshake-pieces      S0, S1 and S2 in pieces of a few hundred bytes, a few milliseconds apart
  handshake-one-write   S0+S1+S2 and the first protocol control messages in one write
  s2-after-c2           S0+S1 at once, S2 only once C2 has arrived
  no-onstatus           never sends onStatus: createStream's _result is all a publisher gets
"""
import argparse
import os
import socket
import struct
import sys
import time

HANDSHAKE = 1536


# AMF0 and AMF3 encoding (just what the answers need).

def amf0(v):
    if v is None:
        return b"\x05"
    if v is Undefined:
        return b"\x06"
    if isinstance(v, bool):
        return b"\x01" + bytes([v])
    if isinstance(v, (int, float)):
        return b"\x00" + struct.pack(">d", float(v))
    if isinstance(v, str):
        b = v.encode()
        return b"\x02" + struct.pack(">H", len(b)) + b
    if isinstance(v, AMF3):
        return b"\x11" + amf3(v.value)
    if isinstance(v, dict):
        out = b"\x03"
        for k, x in v.items():
            kb = k.encode()
            out += struct.pack(">H", len(kb)) + kb + amf0(x)
        return out + b"\x00\x00\x09"
    raise TypeError(v)


class _Undefined:
    pass


Undefined = _Undefined()


class AMF3:
    """A value to write as AMF3 after the AMF0 switch marker."""
    def __init__(self, value):
        self.value = value


def u29(n):
    if n < 0x80:
        return bytes([n])
    if n < 0x4000:
        return bytes([n >> 7 | 0x80, n & 0x7F])
    if n < 0x200000:
        return bytes([n >> 14 | 0x80, n >> 7 & 0x7F | 0x80, n & 0x7F])
    return bytes([n >> 22 | 0x80, n >> 15 & 0x7F | 0x80, n >> 8 & 0x7F | 0x80, n & 0xFF])


def amf3_string(s):
    b = s.encode()
    return u29(len(b) << 1 | 1) + b


def amf3(v):
    if v is None:
        return b"\x01"
    if v is Undefined:
        return b"\x00"
    if v is False:
        return b"\x02"
    if v is True:
        return b"\x03"
    if isinstance(v, int) and 0 <= v < 1 << 28:
        return b"\x04" + u29(v)
    if isinstance(v, (int, float)):
        return b"\x05" + struct.pack(">d", float(v))
    if isinstance(v, str):
        return b"\x06" + amf3_string(v)
    if isinstance(v, dict):
        # An anonymous dynamic object: traits inline (0b1011), no sealed members.
        out = b"\x0a\x0b" + amf3_string("")
        for k, x in v.items():
            out += amf3_string(k) + amf3(x)
        return out + amf3_string("")
    raise TypeError(v)


# Chunks.

def basic_header(fmt, csid):
    if csid < 64:
        return bytes([fmt << 6 | csid])
    if csid < 320:
        return bytes([fmt << 6, csid - 64])
    return bytes([fmt << 6 | 1]) + struct.pack("<H", csid - 64)


class Writer:
    def __init__(self, conn):
        self.conn = conn
        self.chunk = 128

    def message(self, csid, mtype, payload, stream=0, fmt=0, split_with=None):
        """A whole message: a fmt 0 header (or `fmt` 1 or 2, as a server that compresses against another chunk
        stream's header sends), then fmt 3 continuations. `split_with(writer)` is called after the first chunk."""
        if fmt == 0:
            head = basic_header(0, csid) + bytes(3) + len(payload).to_bytes(3, "big") + bytes([mtype]) + struct.pack("<I", stream)
        elif fmt == 1:
            head = basic_header(1, csid) + bytes(3) + len(payload).to_bytes(3, "big") + bytes([mtype])
        else:
            head = basic_header(2, csid) + bytes(3)
        out = bytearray(head)
        first = True
        i = 0
        while True:
            if not first:
                out += basic_header(3, csid)
            out += payload[i:i + self.chunk]
            i += self.chunk
            if first and split_with is not None:
                self.conn.sendall(bytes(out))
                out = bytearray()
                split_with(self)
            first = False
            if i >= len(payload):
                break
        self.conn.sendall(bytes(out))

    def set_chunk_size(self, size):
        self.message(2, 1, struct.pack(">I", size))
        self.chunk = size

    def command(self, values, stream=0, csid=3, amf3_message=False, fmt=0):
        payload = b"".join(amf0(v) for v in values)
        if amf3_message:
            self.message(csid, 17, b"\x00" + payload, stream, fmt)
        else:
            self.message(csid, 20, payload, stream, fmt)


class Reader:
    """The publisher's chunk stream, message by message."""
    def __init__(self, conn):
        self.conn = conn
        self.buffer = b""
        self.chunk = 128
        self.streams = {}

    def read(self, n):
        while len(self.buffer) < n:
            piece = self.conn.recv(65536)
            if not piece:
                raise ConnectionError("closed")
            self.buffer += piece
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def next(self):
        while True:
            b0 = self.read(1)[0]
            fmt, csid = b0 >> 6, b0 & 0x3F
            if csid == 0:
                csid = self.read(1)[0] + 64
            elif csid == 1:
                lo, hi = self.read(2)
                csid = lo + (hi << 8) + 64
            s = self.streams.setdefault(csid, {"ts": 0, "delta": 0, "len": 0, "type": 0, "stream": 0, "data": b""})
            if fmt <= 2:
                field = int.from_bytes(self.read(3), "big")
                if fmt <= 1:
                    s["len"] = int.from_bytes(self.read(3), "big")
                    s["type"] = self.read(1)[0]
                    if fmt == 0:
                        s["stream"] = struct.unpack("<I", self.read(4))[0]
                if field == 0xFFFFFF:
                    field = int.from_bytes(self.read(4), "big")
                if not s["data"]:
                    if fmt == 0:
                        s["ts"] = field
                    else:
                        s["ts"] += field
                    s["delta"] = field
            elif not s["data"]:
                s["ts"] += s["delta"]
            n = min(self.chunk, s["len"] - len(s["data"]))
            s["data"] += self.read(n)
            if len(s["data"]) == s["len"]:
                payload, s["data"] = s["data"], b""
                if s["type"] == 1:
                    self.chunk = struct.unpack(">I", payload[:4])[0]
                return s["type"], s["stream"], s["ts"], payload


def amf0_values(payload):
    """Decodes the AMF0 strings, numbers and nulls a command starts with (enough to route it)."""
    out = []
    i = 0
    while i < len(payload):
        m = payload[i]
        if m == 0x02:
            n = struct.unpack(">H", payload[i + 1:i + 3])[0]
            out.append(payload[i + 3:i + 3 + n].decode())
            i += 3 + n
        elif m == 0x00:
            out.append(struct.unpack(">d", payload[i + 1:i + 9])[0])
            i += 9
        elif m == 0x05:
            out.append(None)
            i += 1
        else:
            break
    return out


# The handshake, by mode.

def handshake(conn, mode):
    c0c1 = b""
    while len(c0c1) < 1 + HANDSHAKE:
        piece = conn.recv(1 + HANDSHAKE - len(c0c1))
        if not piece:
            raise ConnectionError("closed in the handshake")
        c0c1 += piece
    s0s1 = bytes([3]) + struct.pack(">II", 0, 0) + os.urandom(HANDSHAKE - 8)
    s2 = os.urandom(HANDSHAKE) if mode == "s2-no-echo" else c0c1[1:]
    pending = b""  # what the publisher sent after C2 (it may come with C2)

    def read_c2():
        nonlocal pending
        data = b""
        while len(data) < HANDSHAKE:
            piece = conn.recv(65536)
            if not piece:
                raise ConnectionError("closed in the handshake")
            data += piece
        pending = data[HANDSHAKE:]

    if mode == "handshake-pieces":
        everything = s0s1 + s2
        for i in range(0, len(everything), 300):
            conn.sendall(everything[i:i + 300])
            time.sleep(0.005)
        read_c2()
    elif mode == "handshake-one-write":
        control = (basic_header(0, 2) + bytes(3) + (4).to_bytes(3, "big") + b"\x05" + bytes(4) + struct.pack(">I", 5000000)
                   + basic_header(0, 2) + bytes(3) + (5).to_bytes(3, "big") + b"\x06" + bytes(4) + struct.pack(">IB", 5000000, 2))
        conn.sendall(s0s1 + s2 + control)
        read_c2()
    elif mode == "s2-after-c2":
        conn.sendall(s0s1)
        read_c2()
        conn.sendall(s2)
    else:
        conn.sendall(s0s1 + s2)
        read_c2()
    return pending


def serve(conn, mode, record):
    pending = handshake(conn, mode)
    w = Writer(conn)
    r = Reader(conn)
    r.buffer = pending
    flv = open(record, "wb")
    flv.write(b"FLV\x01\x04" + struct.pack(">I", 9) + bytes(4))
    audio = 0
    try:
        while True:
            mtype, stream, ts, payload = r.next()
            if mtype == 8:
                flv.write(bytes([8]) + len(payload).to_bytes(3, "big") + (ts & 0xFFFFFF).to_bytes(3, "big")
                          + bytes([ts >> 24 & 0xFF]) + bytes(3) + payload + struct.pack(">I", 11 + len(payload)))
                flv.flush()
                audio += 1
                continue
            if mtype != 20:
                continue
            values = amf0_values(payload)
            name = values[0] if values else ""
            txn = values[1] if len(values) > 1 else 0
            print("command", name, flush=True)
            answer(w, mode, name, txn, stream, values)
            if name == "deleteStream":
                break
    except ConnectionError:
        pass
    flv.close()
    print("audio messages", audio, flush=True)


def answer(w, mode, name, txn, stream, values):
    amf3_mode = mode == "amf3"

    def info(level, code, description):
        d = {"level": level, "code": code, "description": description}
        return AMF3(d) if amf3_mode else d

    if name == "connect":
        if mode == "fmt-first":
            # pyrtmp's way: each message compresses against the one before, whatever its chunk stream.
            w.message(2, 5, struct.pack(">I", 5000000), fmt=1)
            w.message(2, 6, struct.pack(">IB", 5000000, 2), fmt=1)
            w.message(7, 0, b"", fmt=2)  # an empty message: fmt 2's missing length and type are zero
        elif mode != "handshake-one-write":
            w.message(2, 5, struct.pack(">I", 5000000))
            w.message(2, 6, struct.pack(">IB", 5000000, 2))
        if mode == "chunk-size-anywhere":
            # A long _result whose chunks straddle three changes of chunk size.
            result = [("_result"), 1, {"fmsVer": "FMS/3,0,1,123", "capabilities": 31},
                      {"level": "status", "code": "NetConnection.Connect.Success", "description": "x" * 2000,
                       "objectEncoding": 0}]
            payload = b"".join(amf0(v) for v in result)

            def change(writer):
                writer.set_chunk_size(60)
            w.message(3, 20, payload, split_with=change)
            w.set_chunk_size(1)
            w.command(["onBWDone", 0, None])
            w.set_chunk_size(4096)
            return
        w.set_chunk_size(4096)
        result = ["_result", 1, {"fmsVer": "FMS/3,0,1,123", "capabilities": 31},
                  info("status", "NetConnection.Connect.Success", "Connection succeeded.")]
        if amf3_mode:
            result.append(0)
        w.command(result, amf3_message=amf3_mode, fmt=1 if mode == "fmt-first" else 0)
        if mode == "no-transaction":
            w.command(["onBWDone"])
        elif mode == "bandwidth-check":
            w.command(["onBWDone", 0, None, 8192])
            w.command(["_checkbw", 5, None])
        elif amf3_mode:
            # AMF3 throughout: a format byte, then AMF3 values.
            w.message(3, 17, b"\x00" + amf3("onBWDone") + amf3(0) + amf3(None) + amf3(8192))
            w.message(5, 15, b"\x00" + amf0("|RtmpSampleAccess") + amf0(True) + amf0(True))
            w.message(5, 18, amf0("onMetaData") + amf0({"server": "quirky"}))
    elif name == "releaseStream":
        if mode == "no-transaction":
            w.command(["releaseStream.answer"])
        elif mode == "error-replies":
            w.command(["_error", txn, None])
        else:
            w.command(["_result", txn, None, Undefined], amf3_message=amf3_mode)
    elif name == "FCPublish":
        if mode == "onfcpublish":
            w.command(["onFCPublish"])
        elif mode == "error-replies":
            w.command(["_error", txn, None, {"level": "error", "code": "NetConnection.Call.Failed", "description": "Method not found (FCPublish)."}])
        else:
            w.command(["onFCPublish", 0, None, info("status", "NetStream.Publish.Start", "FCPublish to stream.")],
                      amf3_message=amf3_mode)
    elif name == "createStream":
        if mode == "status-variants":
            w.command(["_result", txn, 1])
        else:
            w.command(["_result", txn, None, 1], amf3_message=amf3_mode)
    elif name == "publish":
        w.message(2, 4, struct.pack(">HI", 0, stream))  # Stream Begin
        if mode == "no-onstatus":
            return
        if mode == "status-variants":
            w.command(["onStatus", 0, {"level": "status", "code": "NetStream.Publish.Reset", "description": "Reset."}], stream=stream)
            w.command(["onStatus", 0, {"level": "status", "code": "NetStream.Publish.Start", "description": "Publishing."},
                       "extra", 42], stream=stream)
        else:
            w.command(["onStatus", 0, None, info("status", "NetStream.Publish.Start", "Publishing.")], stream=stream,
                      amf3_message=amf3_mode)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--record", required=True)
    a = p.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", a.port))
    s.listen(1)
    print(f"listening 127.0.0.1:{a.port}", flush=True)
    conn, _ = s.accept()
    try:
        serve(conn, a.mode, a.record)
    finally:
        conn.close()
        s.close()


if __name__ == "__main__":
    sys.exit(main())
