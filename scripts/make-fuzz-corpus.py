#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora and dictionaries (Fuzz/corpus/TARGET/, Fuzz/dictionaries/TARGET.dict).

Every seed is built here from the formats' specifications (WAV, ADTS, AudioSpecificConfig, FLV, AMF0/AMF3, RTMP
chunks, handshake and commands) or, for the decoder, by FFmpeg from a generated tone; graph-file seeds are the
repository's examples and small graphs of every unit type. The output is deterministic: running it again rewrites
the same files, so the committed corpus can be checked against it.

Usage: scripts/make-fuzz-corpus.py [FUZZ_DIR]   (default Fuzz/)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "Fuzz")


def put(target, name, data):
    d = os.path.join(OUT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def dictionary(target, words):
    d = os.path.join(OUT, "dictionaries")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary for the %s target (scripts/make-fuzz-corpus.py)\n" % target)
        for w in words:
            if isinstance(w, str):
                w = w.encode()
            f.write('"' + "".join("\\x%02x" % b if b < 0x20 or b > 0x7E or b in b'"\\' else chr(b) for b in w) + '"\n')


# ---- WAV (RIFF/WAVE, fmt, data; PCM and IEEE float, WAVE_FORMAT_EXTENSIBLE) ----

def wav(fmt_tag, channels, rate, bits, frames, extra_chunks=b"", extensible=False, declared=None, data=None):
    block = channels * bits // 8
    if data is None:
        samples = []
        for i in range(frames):
            for c in range(channels):
                v = math.sin(2 * math.pi * 440 * i / rate + c) * 0.5
                if fmt_tag == 3:
                    samples.append(struct.pack("<f", v))
                elif bits == 16:
                    samples.append(struct.pack("<h", int(v * 32767)))
                elif bits == 24:
                    samples.append(struct.pack("<i", int(v * 8388607))[:3])
                else:
                    samples.append(struct.pack("<i", int(v * 2147483647)))
        data = b"".join(samples)
    if extensible:
        sub = struct.pack("<H", fmt_tag) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * block, block, bits) + struct.pack("<HHI", 22, bits, 0) + sub
    else:
        fmt = struct.pack("<HHIIHH", fmt_tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra_chunks
    body += b"data" + struct.pack("<I", len(data) if declared is None else declared) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


put("wav", "int16-mono", wav(1, 1, 48000, 16, 32))
put("wav", "int24-stereo", wav(1, 2, 44100, 24, 16))
put("wav", "int32-mono", wav(1, 1, 8000, 32, 16))
put("wav", "float-stereo", wav(3, 2, 48000, 32, 16))
put("wav", "extensible-float", wav(3, 2, 96000, 32, 8, extensible=True))
put("wav", "extensible-int24", wav(1, 6, 48000, 24, 4, extensible=True))
put("wav", "list-chunk-first", wav(1, 1, 22050, 16, 8, extra_chunks=b"LIST" + struct.pack("<I", 12) + b"INFOISFT\x00\x00\x00\x00"))
put("wav", "odd-chunk-padding", wav(1, 1, 16000, 16, 8, extra_chunks=b"junk" + struct.pack("<I", 3) + b"abc\x00"))
put("wav", "truncated-data", wav(1, 2, 48000, 16, 8, declared=4096))
put("wav", "streaming-size", wav(1, 1, 48000, 16, 8, declared=0xFFFFFFFF))
dictionary("wav", ["RIFF", "WAVE", "fmt ", "data", "LIST", "fact", "junk", "RF64", "ds64",
                   b"\x01\x00", b"\x03\x00", b"\xfe\xff", b"\x10\x00", b"\x18\x00", b"\x20\x00", b"\xff\xff\xff\xff"])

# ---- ADTS and AudioSpecificConfig (ISO/IEC 14496-3 1.6.2.1, 1.A.2.2) ----
RATES = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350]


def adts_header(profile, rate_index, channels, payload, crc=False):
    length = 7 + payload + (2 if crc else 0)
    b = [0xFF, 0xF0 | (0 if crc else 1),
         ((profile - 1) << 6) | (rate_index << 2) | (channels >> 2),
         ((channels & 3) << 6) | (length >> 11),
         (length >> 3) & 0xFF,
         ((length & 7) << 5) | 0x1F,
         0xFC]
    return bytes(b) + (b"\x00\x00" if crc else b"")


def adts_stream(frames, profile=2, rate_index=3, channels=2, payload=12):
    return b"".join(adts_header(profile, rate_index, channels, payload) + bytes((i * 7 + j) & 0xFF for j in range(payload)) for i in range(frames))


put("adts", "lc-48k-stereo", adts_stream(4))
put("adts", "lc-8k-mono", adts_stream(3, rate_index=11, channels=1, payload=5))
put("adts", "main-96k-6ch", adts_stream(2, profile=1, rate_index=0, channels=6, payload=20))
put("adts", "with-crc", adts_header(2, 4, 2, 8, crc=True) + bytes(8))
id3 = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"TIT2\x00\x00\x00\x00\x00\x00"[:10]
put("adts", "id3-tagged", id3 + adts_stream(2))
put("adts", "truncated-frame", adts_stream(2)[:-5])
dictionary("adts", [b"\xff\xf1", b"\xff\xf9", b"\xff\xf0", "ID3", b"\x1f\xfc", b"\x00\x00"])


def asc(object_type, rate_index, channels, explicit_rate=None):
    bits = ""
    if object_type >= 31:
        bits += format(31, "05b") + format(object_type - 32, "06b")
    else:
        bits += format(object_type, "05b")
    bits += format(rate_index, "04b")
    if rate_index == 15:
        bits += format(explicit_rate, "024b")
    bits += format(channels, "04b") + "000"
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


put("audioSpecificConfig", "lc-44k-stereo", asc(2, 4, 2))
put("audioSpecificConfig", "lc-48k-mono", asc(2, 3, 1))
put("audioSpecificConfig", "he-aac", asc(5, 6, 2))
put("audioSpecificConfig", "explicit-rate", asc(2, 15, 2, explicit_rate=50000))
put("audioSpecificConfig", "escaped-type", asc(42, 3, 2))
put("audioSpecificConfig", "eight-channels", asc(2, 3, 7) + b"\x56\xe5\x00")
dictionary("audioSpecificConfig", [b"\x12\x10", b"\x11\x90", b"\x11\x88", b"\xf8", b"\x07\x80"])

# ---- AMF0 / AMF3 (Adobe AMF0 and AMF3 specifications) ----


def amf0(v):
    if v is None:
        return b"\x05"
    if isinstance(v, bool):
        return b"\x01" + (b"\x01" if v else b"\x00")
    if isinstance(v, (int, float)):
        return b"\x00" + struct.pack(">d", float(v))
    if isinstance(v, str):
        s = v.encode()
        return (b"\x02" + struct.pack(">H", len(s)) if len(s) < 65536 else b"\x0c" + struct.pack(">I", len(s))) + s
    if isinstance(v, list):
        return b"\x0a" + struct.pack(">I", len(v)) + b"".join(amf0(x) for x in v)
    if isinstance(v, dict):
        out = b"\x03"
        for k, x in v.items():
            kb = k.encode()
            out += struct.pack(">H", len(kb)) + kb + amf0(x)
        return out + b"\x00\x00\x09"
    raise TypeError(v)


def ecma(d):
    out = b"\x08" + struct.pack(">I", len(d))
    for k, x in d.items():
        kb = k.encode()
        out += struct.pack(">H", len(kb)) + kb + amf0(x)
    return out + b"\x00\x00\x09"


META = {"duration": 0.0, "audiodatarate": 128.0, "audiosamplerate": 48000.0, "audiosamplesize": 16.0,
        "stereo": True, "audiocodecid": 10.0, "encoder": "LiveAudio", "filesize": 0.0}
put("amf0", "onmetadata", amf0("onMetaData") + ecma(META))
put("amf0", "connect", amf0("connect") + amf0(1) + amf0({"app": "live", "tcUrl": "rtmp://127.0.0.1/live", "flashVer": "FMLE/3.0"}))
put("amf0", "scalars", amf0(1.5) + amf0(True) + amf0(None) + b"\x06" + amf0("x" * 300) + amf0([1, "a", None]))
put("amf0", "date-and-typed", b"\x0b" + struct.pack(">d", 1.7e12) + b"\x00\x00" + b"\x10\x00\x03Foo" + b"\x00\x01a" + amf0(2) + b"\x00\x00\x09")
put("amf0", "nested", amf0({"a": {"b": {"c": [1, 2, {"d": "e"}]}}}))
put("amf0", "reference", amf0({"x": 1}) + b"\x07\x00\x00")
put("amf0", "long-string", b"\x0c" + struct.pack(">I", 5) + b"hello")
dictionary("amf0", [b"\x00", b"\x01", b"\x02", b"\x03", b"\x05", b"\x06", b"\x07", b"\x08", b"\x0a", b"\x0b", b"\x0c",
                    b"\x10", b"\x00\x00\x09", "onMetaData", "duration", "code", "level", "description"])


def u29(n):
    if n < 0x80:
        return bytes([n])
    if n < 0x4000:
        return bytes([(n >> 7) | 0x80, n & 0x7F])
    if n < 0x200000:
        return bytes([(n >> 14) | 0x80, ((n >> 7) & 0x7F) | 0x80, n & 0x7F])
    return bytes([(n >> 22) | 0x80, ((n >> 15) & 0x7F) | 0x80, ((n >> 8) & 0x7F) | 0x80, n & 0xFF])


def amf3_string(s, marker=True):
    b = s.encode()
    return (b"\x06" if marker else b"") + u29((len(b) << 1) | 1) + b


put("amf3", "scalars", b"\x00\x01\x02\x03" + b"\x04" + u29(300) + b"\x05" + struct.pack(">d", 2.5) + amf3_string("hello"))
put("amf3", "string-reference", amf3_string("abc") + b"\x06" + u29(0 << 1))
put("amf3", "dense-array", b"\x09" + u29((3 << 1) | 1) + b"\x01" + b"\x04\x01" + b"\x04\x02" + amf3_string("x"))
put("amf3", "assoc-array", b"\x09" + u29((0 << 1) | 1) + amf3_string("k", marker=False) + b"\x04\x07" + b"\x01")
put("amf3", "dynamic-object", b"\x0a" + u29(0x0B) + b"\x01" + amf3_string("a", marker=False) + b"\x04\x05" + b"\x01")
put("amf3", "sealed-object", b"\x0a" + u29((2 << 4) | 0x03) + amf3_string("Pt", marker=False) + amf3_string("x", marker=False)
    + amf3_string("y", marker=False) + b"\x04\x01\x04\x02" + b"\x0a" + u29(0x01))
put("amf3", "date-bytearray", b"\x08\x01" + struct.pack(">d", 1.7e12) + b"\x0c" + u29((3 << 1) | 1) + b"xyz")
put("amf3", "big-integer", b"\x04" + u29(0x0FFFFFFF))
dictionary("amf3", [b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06", b"\x07", b"\x08", b"\x09", b"\x0a", b"\x0b",
                    b"\x0c", b"\x01", b"\xff\xff\xff\xff"])

# ---- RTMP chunks, handshake, commands (RTMP specification 5.3, 7) ----


def basic_header(fmt, csid):
    if csid < 64:
        return bytes([(fmt << 6) | csid])
    if csid < 320:
        return bytes([fmt << 6, csid - 64])
    return bytes([(fmt << 6) | 1]) + struct.pack("<H", csid - 64)


def chunked(messages, chunk_size=128):
    """messages: (csid, type, stream_id, timestamp, payload). Type 0 first, then type 1/2/3 as the spec allows."""
    out = b""
    last = {}
    for csid, mtype, sid, ts, payload in messages:
        prev = last.get(csid)
        ext = ts >= 0xFFFFFF
        tsf = 0xFFFFFF if ext else ts
        if prev is None or prev[2] != sid or ts < prev[3]:
            header = basic_header(0, csid) + struct.pack(">I", tsf)[1:] + struct.pack(">I", len(payload))[1:] + bytes([mtype]) + struct.pack("<I", sid)
            delta_ext = ext
            ext_value = ts
        elif prev[1] != mtype or prev[4] != len(payload):
            d = ts - prev[3]
            header = basic_header(1, csid) + struct.pack(">I", min(d, 0xFFFFFF))[1:] + struct.pack(">I", len(payload))[1:] + bytes([mtype])
            delta_ext = d >= 0xFFFFFF
            ext_value = d
        else:
            d = ts - prev[3]
            header = basic_header(2, csid) + struct.pack(">I", min(d, 0xFFFFFF))[1:]
            delta_ext = d >= 0xFFFFFF
            ext_value = d
        if delta_ext:
            header += struct.pack(">I", ext_value)
        out += header
        for i in range(0, max(len(payload), 1), chunk_size):
            if i > 0:
                out += basic_header(3, csid) + (struct.pack(">I", ext_value) if delta_ext else b"")
            out += payload[i:i + chunk_size]
        last[csid] = (csid, mtype, sid, ts, len(payload))
    return out


def command(name, txn, obj, *args):
    return amf0(name) + amf0(txn) + amf0(obj) + b"".join(amf0(a) for a in args)


server_hello = chunked([
    (2, 5, 0, 0, struct.pack(">I", 2500000)),
    (2, 6, 0, 0, struct.pack(">I", 2500000) + b"\x02"),
    (2, 1, 0, 0, struct.pack(">I", 4096)),
])
connect_result = command("_result", 1, {"fmsVer": "FMS/3,0,1,123", "capabilities": 31},
                         {"level": "status", "code": "NetConnection.Connect.Success", "description": "Connection succeeded.", "objectEncoding": 0})
publish_start = command("onStatus", 0, None, {"level": "status", "code": "NetStream.Publish.Start", "description": "Start publishing"})
replies = server_hello + chunked([
    (3, 20, 0, 0, connect_result),
    (3, 20, 0, 0, command("_result", 4, None, 1)),
    (2, 4, 0, 0, b"\x00\x00\x00\x00\x00\x01"),
    (5, 20, 1, 0, publish_start),
], chunk_size=4096)
put("commands", "publish-replies", replies)
put("commands", "error-reply", chunked([(3, 20, 0, 0, command("_error", 1, None, {"level": "error", "code": "NetConnection.Connect.Rejected", "description": "[ AccessManager.Reject ] : [ code=403 need auth; authmod=adobe ] : "}))]))
put("commands", "bad-name", chunked([(3, 20, 1, 0, command("onStatus", 0, None, {"level": "error", "code": "NetStream.Publish.BadName", "description": "Stream already publishing"}))]))
put("commands", "amf3-command", chunked([(3, 17, 0, 0, b"\x00" + connect_result)]))
put("commands", "ping-and-ack", chunked([(2, 4, 0, 0, b"\x00\x06\x00\x00\x12\x34"), (2, 3, 0, 0, struct.pack(">I", 5000))]))

put("chunkStream", "control-and-command", server_hello + chunked([(3, 20, 0, 0, connect_result)], chunk_size=4096))
put("chunkStream", "default-chunk-size", chunked([(3, 20, 0, 0, connect_result)]))
put("chunkStream", "audio-sequence", chunked([(4, 8, 1, t * 21, b"\xaf\x01" + bytes(range(40))) for t in range(4)]))
put("chunkStream", "extended-timestamp", chunked([(4, 8, 1, 0x1000000 + t, b"\xaf\x01" + bytes(10)) for t in range(3)]))
put("chunkStream", "two-byte-csid", chunked([(100, 18, 1, 0, amf0("@setDataFrame") + amf0("onMetaData") + ecma(META))]))
put("chunkStream", "three-byte-csid", chunked([(1000, 8, 1, 5, bytes(300))]))
put("chunkStream", "interleaved", chunked([(4, 8, 1, 0, bytes(200))])[:140] + chunked([(5, 18, 1, 0, amf0("x"))]) + chunked([(4, 8, 1, 0, bytes(200))])[140:])
put("chunkStream", "abort", chunked([(2, 2, 0, 0, struct.pack(">I", 4))]))
dictionary("chunkStream", [b"\x02", b"\x03", b"\x04", b"\x42", b"\x82", b"\xc2", b"\xc3", b"\x00\x00\x00", b"\xff\xff\xff",
                           b"\x14", b"\x12", b"\x08", b"\x01\x00\x00\x00"])
dictionary("commands", ["_result", "_error", "onStatus", "onBWDone", "NetConnection.Connect.Success", "NetStream.Publish.Start",
                        "NetStream.Publish.BadName", "level", "code", "description", "status", "error", b"\x02\x00", b"\x00\x00\x09"])

s1 = struct.pack(">II", 0, 0) + bytes((i * 31 + 7) & 0xFF for i in range(1528))
put("handshake", "simple", b"\x03" + s1 + s1 + replies)
put("handshake", "complex-digest", b"\x03" + struct.pack(">II", 1000, 0x04050001) + bytes((i * 13) & 0xFF for i in range(1528)) + bytes(1536))
put("handshake", "tls-answer", b"\x16\x03\x01" + bytes(1534))
dictionary("handshake", [b"\x03", b"\x06", b"\x16\x03\x01", "HTTP/1.1", b"\x00\x00\x00\x00"])

# ---- RTMP URLs ----
for i, u in enumerate([
    "rtmp://127.0.0.1/live/stream",
    "rtmp://127.0.0.1:1935/live/stream?key=abc",
    "rtmps://live.example.com:443/app/instance/key-123",
    "rtmp://[::1]:19350/live/k",
    "rtmp://user:pass@host/app/key",
    "RTMP://Host.Example/app",
    "rtmp://host/app/key?x=1&y=%20",
]):
    put("rtmpURL", "url-%d" % i, u)
dictionary("rtmpURL", ["rtmp://", "rtmps://", "[", "]", ":", "/", "?", "@", "%", "::1", "1935", "443", "65536"])

# ---- Graph files (docs/graph-files.md): the examples and one small graph per unit type ----
ex = os.path.join(ROOT, "Examples", "graphs")
for name in sorted(os.listdir(ex)):
    if name.endswith(".json"):
        with open(os.path.join(ex, name)) as f:
            text = f.read()
        put("graphFile", name[:-5], text.replace("/", ""))


def graph(node, channels=2):
    return json.dumps({"sampleRate": 48000, "channels": channels,
                       "nodes": [{"id": "src", "type": "tone", "frequency": 440, "amplitude": 0.25}, dict(node, id="n")],
                       "connections": [{"from": "src", "to": "n"}, {"from": "n", "to": "output"}]})


for node in [
    {"type": "gain", "gain": -6}, {"type": "eq", "bands": [{"type": "peak", "frequency": 1000, "gain": 3, "q": 1}]},
    {"type": "dynamics", "threshold": -20, "ratio": 4}, {"type": "limiter"}, {"type": "reverb"},
    {"type": "delay", "delayTime": 0.25}, {"type": "highPass", "frequency": 80}, {"type": "converter", "rate": 44100},
    {"type": "timePitch", "pitch": 200}, {"type": "mixer", "inputs": 1}, {"type": "voiceProcessing"},
]:
    put("graphFile", "unit-" + node["type"], graph(node))
dictionary("graphFile", ["nodes", "connections", "sampleRate", "channels", "id", "type", "from", "to", "bus", "output",
                         "input", "gain", "eq", "bands", "dynamics", "limiter", "reverb", "delay", "highPass", "converter",
                         "timePitch", "mixer", "voiceProcessing", "tone", "noise", "file", "filePlayer", "player", "bypass",
                         "frequency", "amplitude", "volume", "pan", "inputs", "{", "}", "[", "]", ":", ",", "null", "true",
                         "1e308", "-0"])

# ---- Song charts: UltraStar TXT (the format's v1 specification and its unversioned predecessor) and LRC ----
put("chart", "v1", "#VERSION:1.1.0\n#TITLE:Song Title\n#ARTIST:Artist\n#MP3:Artist - Title.mp3\n#BPM:400\n#GAP:12345\n"
    ": 0 4 0 Hello\n: 8 4 0  World\n- 14\n* 16 4 5 gold\nF 22 2 0  free\nR 26 2 0  rap\nG 30 2 0  gap\nE\n")
put("chart", "duet", "#TITLE:Duet\n#ARTIST:Two\n#BPM:300,5\n#P1:Alice\n#P2:Bob\nP1\n: 0 4 0 One\n- 5\nP2\n: 2 4 -3 Two\nE\n")
put("chart", "relative", "#TITLE:R\n#ARTIST:A\n#BPM:300\n#RELATIVE:yes\n: 0 4 0 a\n- 6 8\n: 0 4 0 b\nB 4 200\nE\n")
put("chart", "cp1252", b"#ENCODING:CP1252\r\n#TITLE:Caf\xe9\x92s\r\n#ARTIST:A\r\n#BPM:300\r\n: 0 2 0 Caf\xe9\r\n")
put("chart", "lrc", "[ti:Song]\n[ar:Singer]\n[offset:+500]\n[00:12.00]First line\n[00:05.50][01:00.25]Chorus\n"
    "[00:20.00]<00:20.00>Word <00:20.50>by <00:21.25>word\n[00:25.00]\n[00:30.000]Last\n")
dictionary("chart", ["#VERSION:", "#TITLE:", "#ARTIST:", "#MP3:", "#AUDIO:", "#BPM:", "#GAP:", "#START:", "#END:",
                     "#RELATIVE:yes", "#ENCODING:CP1252", "#ENCODING:CP1250", "#P1:", "#P2:", "#INSTRUMENTAL:", "\n: ",
                     "\n* ", "\nF ", "\nR ", "\nG ", "\n- ", "\nP1\n", "\nP2\n", "\nE\n", "\nB ", "[00:00.00]", "<00:00.00>",
                     "[offset:", "[ti:", "]", b"\xef\xbb\xbf", "\r\n", "-2147483648", "99999999999"])

# ---- The stage's controls: what a page sends over the WebSocket (StageMessages) ----
for name, message in [
    ("volume", {"type": "control", "id": "1", "action": "volume", "part": "accompaniment", "db": -6}),
    ("volume-off", {"type": "control", "id": 2, "action": "volume", "part": "monitorVoice", "db": "-inf"}),
    ("mute", {"type": "control", "action": "mute", "part": "voice", "on": True}),
    ("key-step", {"type": "control", "action": "key", "step": -1}),
    ("key-cents", {"type": "control", "action": "key", "cents": 250}),
    ("seek", {"type": "control", "action": "seek", "seconds": 12.5}),
    ("pause", {"type": "control", "action": "pause"}),
    ("stop", {"type": "control", "action": "stop"}),
    ("stream-volume", {"type": "control", "action": "volume", "db": 3}),
]:
    put("stageControl", name, json.dumps(message, separators=(",", ":")))
dictionary("stageControl", ['"type"', '"control"', '"action"', '"id"', '"part"', '"db"', '"on"', '"step"', '"cents"',
                            '"seconds"', '"volume"', '"mute"', '"key"', '"pause"', '"resume"', '"seek"', '"stop"',
                            '"accompaniment"', '"voice"', '"monitorVoice"', '"-inf"', "null", "true", "false", "1e308",
                            "-0", "\\u0000", "{", "}", "[", "]", ":", ","])

# ---- The evening's requests: what a phone or the host sends about the library and the queue (StageMessages.evening) ----
for name, message in [
    ("join", {"type": "evening", "id": "1", "action": "join", "name": "Ana", "phone": "0123456789abcdef0123"}),
    ("search", {"type": "evening", "id": 2, "action": "search", "text": "thek madch"}),
    ("queue", {"type": "evening", "action": "queue", "song": 12, "part": 2, "partner": "Ben", "key": -2, "difficulty": "hard"}),
    ("queue-host", {"type": "evening", "action": "queue", "song": 3, "singer": "Zoë"}),
    ("dequeue", {"type": "evening", "action": "dequeue", "entry": 7}),
    ("move", {"type": "evening", "action": "move", "entry": 7, "position": 1}),
    ("pause", {"type": "evening", "action": "pauseQueue", "on": True}),
    ("cap", {"type": "evening", "action": "cap", "songs": 3}),
]:
    put("eveningRequest", name, json.dumps(message, separators=(",", ":"), ensure_ascii=False))
dictionary("eveningRequest", ['"type"', '"evening"', '"action"', '"id"', '"join"', '"name"', '"phone"', '"search"', '"text"',
                              '"queue"', '"song"', '"part"', '"partner"', '"key"', '"difficulty"', '"singer"', '"easy"',
                              '"medium"', '"hard"', '"dequeue"', '"entry"', '"move"', '"position"', '"pauseQueue"', '"on"',
                              '"cap"', '"songs"', "9007199254740993", "-0", "1e3", "null", "true", "false", "\\u0000",
                              "\\ud800", "<script>", "{", "}", "[", "]", ":", ","])

# ---- A phone's audio: the binary messages a page sends over the stage's WebSocket (PhoneAudioPacket) ----
def phone_packet(codec, sequence, micros, rate, channels, flags, frames, payload):
    return b"LA" + struct.pack("<BBIqIBBH", 1, codec, sequence, micros, rate, channels, flags, frames) + payload


def pcm(frames, channels, rate, frequency=440.0):
    out = bytearray()
    for n in range(frames):
        v = int(12000 * math.sin(2 * math.pi * frequency * n / rate))
        out += struct.pack("<h", v) * channels
    return bytes(out)


put("phoneAudio", "pcm-mono-48k", phone_packet(0, 7, 123456789, 48000, 1, 1, 960, pcm(960, 1, 48000)))
put("phoneAudio", "pcm-stereo-16k", phone_packet(0, 0xFFFFFFFF, -5, 16000, 2, 0, 160, pcm(160, 2, 16000)))
with tempfile.TemporaryDirectory() as tmp:
    ogg = os.path.join(tmp, "voice.opus")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "sine=frequency=330:sample_rate=48000:duration=0.1", "-ac", "1", "-c:a", "libopus", "-b:a", "64k",
                    "-frame_duration", "20", "-fflags", "+bitexact", "-flags:a", "+bitexact", "-map_metadata", "-1", ogg],
                   check=True)
    data = open(ogg, "rb").read()
    packets, current, at = [], b"", 0
    while data[at:at + 4] == b"OggS":
        segments = data[at + 26]
        body = at + 27 + segments
        for lace in data[at + 27:at + 27 + segments]:
            current += data[body:body + lace]
            body += lace
            if lace < 255:
                packets.append(current)
                current = b""
        at = body
    for i, packet in enumerate(packets[2:4]):
        put("phoneAudio", "opus-%d" % i, phone_packet(1, i, 1000000 + 20000 * i, 48000, 1, 1 if i == 0 else 0, 960, packet))
dictionary("phoneAudio", [b"LA\x01\x00", b"LA\x01\x01", struct.pack("<I", 48000), struct.pack("<I", 44100),
                          struct.pack("<I", 8000), struct.pack("<H", 960), struct.pack("<H", 5760), struct.pack("<H", 5761),
                          struct.pack("<q", -1), b"\xff\xff\xff\xff"])

# ---- The decoder: tiny files of every format FFmpeg writes here, from a generated tone ----
with tempfile.TemporaryDirectory() as tmp:
    for name, args in [
        ("tone.wav", ["-c:a", "pcm_s16le"]), ("tone.flac", ["-c:a", "flac"]), ("tone.mp3", ["-c:a", "libmp3lame", "-b:a", "32k"]),
        ("tone.ogg", ["-c:a", "libvorbis", "-q:a", "0"]), ("tone.opus", ["-c:a", "libopus", "-b:a", "16k"]),
        ("tone.m4a", ["-c:a", "aac", "-b:a", "24k"]), ("tone.aac", ["-c:a", "aac", "-b:a", "24k", "-f", "adts"]),
        ("tone.flv", ["-c:a", "aac", "-b:a", "24k", "-f", "flv"]), ("tone.caf", ["-c:a", "pcm_s16be", "-f", "caf"]),
    ]:
        path = os.path.join(tmp, name)
        r = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                            "sine=frequency=440:sample_rate=16000:duration=0.1", "-ac", "1", "-fflags", "+bitexact",
                            "-flags:a", "+bitexact", "-map_metadata", "-1"] + args + [path])
        if r.returncode != 0:
            print("skipped %s: ffmpeg cannot write it here" % name, file=sys.stderr)
            continue
        with open(path, "rb") as f:
            put("decoder", name.replace(".", "-"), f.read())
dictionary("decoder", ["RIFF", "WAVE", "fLaC", "OggS", "OpusHead", "ID3", "ftyp", "moov", "mdat", "FLV", "caff", b"\xff\xfb",
                       b"\xff\xf1", "esds", "mp4a", "stsd"])

# ---- FLV (Adobe FLV specification, E.4): FFmpeg's writer, and files built here ----


def flv_tag(tag_type, ts, data):
    return bytes([tag_type]) + struct.pack(">I", len(data))[1:] + struct.pack(">I", ts)[1:] + bytes([(ts >> 24) & 0xFF]) + b"\x00\x00\x00" + data + struct.pack(">I", 11 + len(data))


flv_head = b"FLV\x01\x04\x00\x00\x00\x09\x00\x00\x00\x00"
meta = amf0("onMetaData") + ecma(META)
put("flv", "aac-audio", flv_head + flv_tag(18, 0, meta) + flv_tag(8, 0, b"\xaf\x00\x11\x90") + b"".join(flv_tag(8, 21 * i, b"\xaf\x01" + bytes(range(i, i + 30))) for i in range(4)))
put("flv", "video-and-audio", b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00" + flv_tag(9, 0, b"\x17\x00\x00\x00\x00") + flv_tag(8, 0, b"\xaf\x00\x12\x10"))
put("flv", "big-timestamp", flv_head + flv_tag(8, 0x12345678, b"\xaf\x01\x00"))
put("flv", "header-only", flv_head)
put("flv", "long-data-offset", b"FLV\x01\x04\x00\x00\x00\x20" + bytes(23) + b"\x00\x00\x00\x00" + flv_tag(8, 0, b"\xaf\x00\x11\x90"))
dec = os.path.join(OUT, "corpus", "decoder", "tone-flv")
if os.path.exists(dec):
    with open(dec, "rb") as f:
        put("flv", "ffmpeg-aac", f.read())
dictionary("flv", ["FLV", b"\x01", b"\x04", b"\x05", b"\x08", b"\x09", b"\x12", b"\xaf\x00", b"\xaf\x01", "onMetaData",
                   b"\x00\x00\x00\x09", b"\x00\x00\x00\x00"])

print("wrote the fuzz corpora and dictionaries under %s" % OUT)
