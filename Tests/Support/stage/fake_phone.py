#!/usr/bin/env python3
"""Phones without a browser, for `make bench`: N WebSocket clients of a stage on loopback (ws://, no token) that each
take a phone voice ("sing"), answer the room's clock readings with their own clock (time.monotonic, µs), and send
20 ms packets of audio in real time, each stamped with its first frame's capture time — the stage's phone protocol
(PhoneAudioPacket), as the page speaks it.

The audio is an Ogg Opus file (ffmpeg's libopus, 20 ms frames: its packets sent as they are) or, with --pcm, a mono
48 kHz 16-bit WAV cut into 960-frame packets. Prints one JSON line: packets and bytes sent, the voices taken, and the
room's last phone-status of each.

Usage: fake_phone.py --url ws://127.0.0.1:PORT/ws --phones N --seconds S (--opus FILE.ogg | --pcm FILE.wav)
"""
import argparse
import asyncio
import json
import struct
import time
import wave

import websockets


def ogg_packets(path):
    """The packets of an Ogg Opus file's one stream, its two header packets left out."""
    data = open(path, "rb").read()
    packets, partial, at = [], b"", 0
    while at + 27 <= len(data):
        assert data[at:at + 4] == b"OggS", "not an Ogg page"
        count = data[at + 26]
        lacing = data[at + 27:at + 27 + count]
        at += 27 + count
        for size in lacing:
            partial += data[at:at + size]
            at += size
            if size < 255:
                packets.append(partial)
                partial = b""
    return packets[2:]


def pcm_packets(path):
    with wave.open(path) as w:
        assert w.getframerate() == 48000 and w.getnchannels() == 1 and w.getsampwidth() == 2, "mono 48 kHz 16-bit"
        frames = w.readframes(w.getnframes())
    return [frames[i:i + 1920] for i in range(0, len(frames) - 1919, 1920)]


def micros():
    return int(time.monotonic() * 1e6)


async def phone(url, packets, codec, seconds, report):
    async with websockets.connect(url, max_size=None) as ws:
        status = {}

        async def listen():
            async for message in ws:
                if isinstance(message, bytes):
                    continue
                m = json.loads(message)
                if m.get("type") == "clock":
                    await ws.send(json.dumps({"type": "phone", "action": "clock", "room": m["room"], "phone": micros()}))
                elif m.get("type") == "reply" and m.get("id") == "sing":
                    report["voices"].append((m.get("data") or {}).get("voice"))
                elif m.get("type") == "phone-status":
                    status.update(m)

        listener = asyncio.ensure_future(listen())
        await ws.send(json.dumps({"type": "phone", "id": "sing", "action": "sing", "offset": 0}))
        await asyncio.sleep(0.5)
        start = micros()
        sequence = 0
        while micros() - start < seconds * 1e6:
            payload = packets[sequence % len(packets)]
            stamp = start + sequence * 20_000
            header = b"LA" + struct.pack("<BBIqIBBH", 1, codec, sequence, stamp, 48000, 1, 1 if sequence == 0 else 0, 960)
            await ws.send(header + payload)
            report["packets"] += 1
            report["bytes"] += len(header) + len(payload)
            sequence += 1
            wait = (start + sequence * 20_000 - micros()) / 1e6
            if wait > 0:
                await asyncio.sleep(wait)
        listener.cancel()
        report["statuses"].append(status)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--phones", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--opus")
    ap.add_argument("--pcm")
    args = ap.parse_args()
    packets, codec = (ogg_packets(args.opus), 1) if args.opus else (pcm_packets(args.pcm), 0)
    report = {"packets": 0, "bytes": 0, "voices": [], "statuses": []}
    await asyncio.gather(*(phone(args.url, packets, codec, args.seconds, report) for _ in range(args.phones)))
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
