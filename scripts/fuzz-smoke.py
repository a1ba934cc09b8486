#!/usr/bin/env python3
"""A mutation run over LiveAudio's file inputs: random truncations, bit flips, byte overwrites, size fields set to
extremes and chunks duplicated or deleted, over WAV, ADTS, FLV, M4A, MP3, FLAC, Ogg/Opus and graph files, through
`liveaudio probe`, `encode` and `render`. A run that ends by a signal (a trap, a crash) or prints "Fatal error" is a
crash; one that outlives its timeout is a hang. Any other exit, 0 or an error, is what bad input should get.

    python3 scripts/fuzz-smoke.py --binary .build/release/liveaudio [--inputs 10000] [--seed 1] [--jobs 2]

Deterministic for a seed. Failing inputs and their command lines are kept in --keep (default
/tmp/fuzz-smoke-failures). Exit status 0 only with no crash, no hang and every input run. The last line reads
`fuzz-smoke: N inputs, R runs, C crashes, H hangs`.
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

EXTREMES32 = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0xFFFFFFFE]
EXTREMES24 = [0, 1, 0xFFFFFF, 0x800000]
EXTREMES16 = [0, 1, 0xFFFF, 0x8000, 0x7FFF]


def make_seeds(work, repo):
    """Small valid files of every kind, made with ffmpeg; graph files from Examples/graphs/ and a few of our own."""
    def ff(args, name):
        path = os.path.join(work, name)
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args + [path], check=True)
        return path
    tone = ["-f", "lavfi", "-i", "sine=f=440:d=0.6:r=48000"]
    seeds = [
        ff(tone + ["-ac", "1", "-c:a", "pcm_s16le"], "mono16.wav"),
        ff(tone + ["-ac", "2", "-c:a", "pcm_f32le"], "stereo32f.wav"),
        ff(tone + ["-ac", "2", "-c:a", "pcm_s24le"], "stereo24.wav"),
        ff(tone + ["-ac", "2", "-c:a", "aac", "-b:a", "96k"], "tone.aac"),
        ff(tone + ["-ac", "2", "-c:a", "aac", "-b:a", "96k", "-f", "flv"], "tone.flv"),
        ff(tone + ["-ac", "2", "-c:a", "aac", "-b:a", "96k"], "tone.m4a"),
        ff(tone + ["-ac", "1", "-c:a", "libmp3lame", "-b:a", "64k"], "tone.mp3"),
        ff(tone + ["-ac", "2", "-c:a", "flac"], "tone.flac"),
        ff(tone + ["-ac", "2", "-c:a", "libopus", "-b:a", "48k"], "tone.opus"),
        ff(tone + ["-ac", "1", "-c:a", "libvorbis"], "tone.ogg"),
    ]
    wav = seeds[0]
    graphs = {
        "tone.json": {"sampleRate": 48000, "channels": 2,
                      "nodes": [{"id": "t", "type": "tone", "frequency": 440, "amplitude": 0.3},
                                {"id": "g", "type": "gain", "gain": -6}],
                      "connections": [{"from": "t", "to": "g"}, {"from": "g", "to": "output"}]},
        "file-mix.json": {"sampleRate": 48000, "channels": 2,
                          "nodes": [{"id": "f", "type": "file", "path": wav},
                                    {"id": "n", "type": "noise", "amplitude": 0.1, "seed": 3},
                                    {"id": "m", "type": "mixer", "inputs": 2, "volume": [1.0, 0.5]}],
                          "connections": [{"from": "f", "to": "m", "bus": 0}, {"from": "n", "to": "m", "bus": 1},
                                          {"from": "m", "to": "output"}]},
        "effects.json": {"sampleRate": 48000, "channels": 2,
                         "nodes": [{"id": "f", "type": "file", "path": wav},
                                   {"id": "eq", "type": "eq", "bands": [{"type": "peak", "frequency": 3000, "gain": 3, "q": 1.0}]},
                                   {"id": "d", "type": "dynamics", "threshold": -20, "ratio": 3},
                                   {"id": "r", "type": "reverb", "wetDryMix": 20},
                                   {"id": "e", "type": "delay", "delayTime": 0.1, "feedback": 30},
                                   {"id": "l", "type": "limiter", "ceiling": -1}],
                         "connections": [{"from": "f", "to": "eq"}, {"from": "eq", "to": "d"}, {"from": "d", "to": "r"},
                                         {"from": "r", "to": "e"}, {"from": "e", "to": "l"}, {"from": "l", "to": "output"}]},
    }
    for name, graph in graphs.items():
        path = os.path.join(work, name)
        with open(path, "w") as f:
            json.dump(graph, f)
        seeds.append(path)
    for name in sorted(os.listdir(os.path.join(repo, "Examples", "graphs"))):
        if name.endswith(".json"):
            with open(os.path.join(repo, "Examples", "graphs", name)) as f:
                text = f.read().replace("voice.wav", wav)  # the file nodes point at a seed
            path = os.path.join(work, "example-" + name)
            with open(path, "w") as f:
                f.write(text)
            seeds.append(path)
    return seeds


def size_fields(data, ext):
    """(offset, width, big_endian) of the fields a format keeps sizes and layout in."""
    fields = []
    if ext == ".wav" and data[:4] == b"RIFF":
        fields.append((4, 4, False))
        p = 12
        while p + 8 <= len(data):
            fields.append((p + 4, 4, False))
            if data[p:p + 4] == b"fmt ":
                fields += [(p + 8, 2, False), (p + 10, 2, False), (p + 12, 4, False), (p + 16, 4, False),
                           (p + 20, 2, False), (p + 22, 2, False)]
            size = struct.unpack_from("<I", data, p + 4)[0]
            p += 8 + size + (size & 1)
    elif ext == ".flv" and data[:3] == b"FLV":
        fields.append((5, 4, True))
        p = 13
        while p + 11 <= len(data):
            size = int.from_bytes(data[p + 1:p + 4], "big")
            fields += [(p + 1, 3, True), (p + 4, 3, True), (p + 11 + size, 4, True)]
            p += 11 + size + 4
    elif ext == ".aac":
        p = 0
        while p + 7 <= len(data) and data[p] == 0xFF:
            fields.append((p + 3, 2, True))  # holds frame_length's upper bits
            fields.append((p + 2, 1, True))  # sampling index, channel configuration
            length = ((data[p + 3] & 3) << 11) | (data[p + 4] << 3) | (data[p + 5] >> 5)
            if length < 7:
                break
            p += length
    elif ext == ".m4a":
        def boxes(start, end, depth):
            p = start
            while p + 8 <= end and depth < 6:
                size = struct.unpack_from(">I", data, p)[0]
                kind = data[p + 4:p + 8]
                fields.append((p, 4, True))
                if size < 8 or p + size > end:
                    break
                if kind in (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"udta"):
                    boxes(p + 8, p + size, depth + 1)
                elif kind in (b"stsz", b"stco", b"stts", b"stsc", b"elst", b"mdhd", b"mvhd", b"tkhd", b"stsd"):
                    for q in range(p + 8, min(p + size, p + 40), 4):
                        fields.append((q, 4, True))
                p += size
        boxes(0, len(data), 0)
    return fields


def put(data, offset, width, big, value):
    if offset + width > len(data):
        return
    data[offset:offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big" if big else "little")


def mutate_bytes(data, ext, rng):
    data = bytearray(data)
    kind = rng.choice(["truncate", "flip", "overwrite", "field", "field", "word", "duplicate", "delete", "multi"])
    if kind == "truncate":
        return bytes(data[:rng.randrange(len(data))])
    if kind == "flip":
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "field":
        fields = size_fields(bytes(data), ext)
        if fields:
            offset, width, big = rng.choice(fields)
            pool = {1: [0, 0xFF, 0x80], 2: EXTREMES16, 3: EXTREMES24, 4: EXTREMES32}[width]
            put(data, offset, width, big, rng.choice(pool))
        else:
            return mutate_bytes(bytes(data), ext, rng)
    elif kind == "word":
        width = rng.choice([2, 4])
        offset = rng.randrange(0, max(1, len(data) - width)) & ~(width - 1)
        put(data, offset, width, rng.random() < 0.5, rng.choice(EXTREMES32 if width == 4 else EXTREMES16))
    elif kind == "duplicate":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 4096))
        at = rng.randrange(len(data))
        data[at:at] = data[a:b]
    elif kind == "delete":
        a = rng.randrange(len(data))
        del data[a:a + rng.randint(1, 4096)]
    else:
        for _ in range(rng.randint(2, 4)):
            data = bytearray(mutate_bytes(bytes(data), ext, rng))
            if not data:
                break
    return bytes(data)


WEIRD_NUMBERS = [0, -1, -0.0, 1e308, -1e308, 1e-320, 2**63, -(2**63), 2**64, 4294967296, 65536, 0.5, 1e9, float("nan")]


def mutate_json(text, rng):
    try:
        graph = json.loads(text)
    except ValueError:
        return None

    def walk(value, depth):
        if isinstance(value, dict):
            if value and rng.random() < 0.15:
                del value[rng.choice(list(value))]
            for k in list(value):
                value[k] = walk(value[k], depth + 1)
            if rng.random() < 0.05:
                value[rng.choice(["extra", "bands", "inputs", "channels"])] = rng.choice([[], {}, "x", 1e9])
        elif isinstance(value, list):
            if value and rng.random() < 0.1:
                value.pop(rng.randrange(len(value)))
            elif value and rng.random() < 0.1:
                value.append(value[rng.randrange(len(value))])
            return [walk(v, depth + 1) for v in value]
        elif isinstance(value, bool):
            return value if rng.random() < 0.9 else rng.choice([0, "true", None])
        elif isinstance(value, (int, float)):
            if rng.random() < 0.25:
                return rng.choice(WEIRD_NUMBERS)
        elif isinstance(value, str):
            if rng.random() < 0.15:
                return rng.choice(["", "x" * 100000, "output", "nosuch", "/dev/zero", "../" * 50, "\u0000", "mixer", "file"])
        return value

    graph = walk(graph, 0)
    deep = rng.random() < 0.05 and isinstance(graph, dict)
    if deep:
        graph["nodes"] = "DEEP"
    out = json.dumps(graph, allow_nan=True)
    if deep:  # nesting written as text: too deep for Python's own encoder
        n = rng.choice([100, 10000, 200000])
        out = out.replace('"DEEP"', "[" * n + '"x"' + "]" * n)
    return out.replace("NaN", rng.choice(["NaN", "1e999", "-1e999"])).encode()


def commands(binary, path, ext, out_dir):
    if ext == ".json":
        return [[binary, "render", path, "-o", os.path.join(out_dir, "out.wav"), "--duration", "0.25"],
                [binary, "render", path, "-o", os.path.join(out_dir, "out2.wav"), "--block-frames", "333"]]
    target = {".wav": "out.aac", ".aac": "out.wav", ".flv": "out.m4a", ".m4a": "out.flv"}.get(ext, "out.wav")
    return [[binary, "probe", path], [binary, "encode", path, "-o", os.path.join(out_dir, target)]]


def run_one(job):
    index, data, ext, binary, work, timeout = job
    case_dir = os.path.join(work, f"case{index % 64}-{os.getpid()}")
    os.makedirs(case_dir, exist_ok=True)
    path = os.path.join(case_dir, "input" + ext)
    with open(path, "wb") as f:
        f.write(data)
    results = []
    for cmd in commands(binary, path, ext, case_dir):
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
            err = p.stderr.decode(errors="replace")
            if p.returncode < 0 or "Fatal error" in err:
                results.append(("crash", cmd, p.returncode, err[-2000:]))
            else:
                results.append(("ok", cmd, p.returncode, ""))
        except subprocess.TimeoutExpired as e:
            results.append(("hang", cmd, None, (e.stderr or b"").decode(errors="replace")[-2000:]))
    for name in os.listdir(case_dir):
        try:
            os.unlink(os.path.join(case_dir, name))
        except OSError:
            pass
    return index, ext, data, results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--inputs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--keep", default="/tmp/fuzz-smoke-failures")
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="liveaudio-fuzz-")
    rng = random.Random(args.seed)
    started = time.time()
    try:
        seeds = make_seeds(work, repo)
        seed_bytes = [(open(s, "rb").read(), os.path.splitext(s)[1]) for s in seeds]

        def inputs():
            for i in range(args.inputs):
                data, ext = seed_bytes[i % len(seed_bytes)]
                mutated = mutate_json(data.decode(), rng) if ext == ".json" and rng.random() < 0.7 else None
                if mutated is None:
                    mutated = mutate_bytes(data, ext, rng)
                yield (i, mutated, ext, binary, work, args.timeout)

        runs, crashes, hangs, done = 0, [], [], 0
        os.makedirs(args.keep, exist_ok=True)
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for index, ext, data, results in pool.map(run_one, inputs(), chunksize=8):
                done += 1
                for status, cmd, code, err in results:
                    runs += 1
                    if status == "ok":
                        continue
                    kept = os.path.join(args.keep, f"{status}-{index}{ext}")
                    with open(kept, "wb") as f:
                        f.write(data)
                    line = " ".join(kept if c.endswith("input" + ext) else c for c in cmd)
                    (crashes if status == "crash" else hangs).append((line, code, err))
                if done % 1000 == 0:
                    print(f"  {done} inputs, {runs} runs, {len(crashes)} crashes, {len(hangs)} hangs "
                          f"({time.time() - started:.0f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for title, found in (("crashes", crashes), ("hangs", hangs)):
        for line, code, err in found[:5]:
            print(f"{title[:-2] if title == 'crashes' else 'hang'}: {line} (status {code})")
            tail = [l for l in err.splitlines() if "Fatal error" in l or "error:" in l][:2]
            for l in tail:
                print("    " + l)
    print(f"fuzz-smoke: {done} inputs, {runs} runs, {len(crashes)} crashes, {len(hangs)} hangs "
          f"in {time.time() - started:.0f} s")
    return 0 if not crashes and not hangs and done >= args.inputs else 1


if __name__ == "__main__":
    sys.exit(main())
