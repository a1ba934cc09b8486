#!/usr/bin/env python3
"""Writes a generated song library: UltraStar charts in nested folders (letter/artist/song/), each beside a stand-in
audio file, a few folders of plain audio with LRC sidecars, and (with --oddities) the kinds of files a real library
holds besides: CP1252 and UTF-16 charts, a broken chart, a chart whose audio is missing, non-chart .txt files.

The words are made up here from syllables; accents and umlauts are frequent, as in real libraries. Deterministic for
a seed. Used by the library tests (small) and by `make bench` (80,000 charts).

Usage: scripts/make-library.py OUT --songs N [--seed S] [--notes N] [--audio-bytes N] [--oddities]
"""
import argparse
import os
import random

SYLLABLES = ["ka", "ra", "mä", "dchen", "lo", "ve", "son", "ne", "the", "ken", "für", "im", "mer", "nacht", "stern",
             "co", "ra", "zón", "é", "té", "rü", "ße", "ba", "ila", "mo", "re", "do", "lé", "ña", "ja", "pa", "sö",
             "der", "lied", "we", "ho", "me", "hë", "ar", "tö", "wind", "fe", "ver", "blu", "rock", "pop"]
LANGUAGES = ["German", "English", "Spanish", "French", "Italian", "Swedish"]
GENRES = ["Pop", "Rock", "Schlager", "Ballad", "Dance", "Folk"]
EDITIONS = ["SingStar", "Party", "Classics", "[SC]-Songs", None]


def word(rng, n=None):
    n = n or rng.randint(2, 4)
    return "".join(rng.choice(SYLLABLES) for _ in range(n)).capitalize()


def phrase(rng, words):
    return " ".join(word(rng) for _ in range(words))


def chart(rng, title, artist, audio, notes, duet):
    lines = ["#VERSION:1.0.0", f"#TITLE:{title}", f"#ARTIST:{artist}", f"#AUDIO:{audio}", f"#MP3:{audio}",
             f"#LANGUAGE:{rng.choice(LANGUAGES)}", f"#GENRE:{rng.choice(GENRES)}", f"#YEAR:{rng.randint(1960, 2026)}"]
    edition = rng.choice(EDITIONS)
    if edition:
        lines.append(f"#EDITION:{edition}")
    lines += [f"#BPM:{rng.choice([240, 280, 300, 320, 356.5])}", f"#GAP:{rng.randint(0, 20000)}"]
    if duet:
        lines += [f"#P1:{word(rng)}", f"#P2:{word(rng)}"]
    parts = [1, 2] if duet else [1]
    per_part = notes // len(parts)
    for p in parts:
        if duet:
            lines.append(f"P{p}")
        beat = rng.randint(0, 8)
        for i in range(per_part):
            length = rng.randint(1, 6)
            kind = rng.choice(":::::::*F R")
            kind = ":" if kind == " " else kind
            text = rng.choice(SYLLABLES)
            lines.append(f"{kind} {beat} {length} {rng.randint(-5, 12)} {'' if i % 4 else ' '}{text}")
            beat += length + rng.randint(0, 2)
            if i % 8 == 7:
                lines.append(f"- {beat}")
                beat += rng.randint(2, 6)
    lines.append("E")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--songs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--notes", type=int, default=300, help="notes per chart (real charts: 200 … 800)")
    ap.add_argument("--audio-bytes", type=int, default=0, help="bytes of each stand-in audio file")
    ap.add_argument("--oddities", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    audio_bytes = b"\0" * args.audio_bytes
    for i in range(args.songs):
        artist = phrase(rng, rng.randint(1, 2))
        title = phrase(rng, rng.randint(1, 4))
        folder = os.path.join(args.out, artist[0], artist, f"{title} {i}")
        os.makedirs(folder, exist_ok=True)
        audio = f"{artist} - {title}.mp3"
        with open(os.path.join(folder, audio), "wb") as f:
            f.write(audio_bytes)
        text = chart(rng, title, artist, audio, args.notes, duet=(i % 20 == 0))
        with open(os.path.join(folder, f"{artist} - {title}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
    if args.oddities:
        odd = os.path.join(args.out, "_odd")
        os.makedirs(odd, exist_ok=True)
        # Plain audio with and without LRC.
        plain = os.path.join(odd, "plain")
        os.makedirs(plain, exist_ok=True)
        for name in ["Sänger - Ohne Worte.mp3", "Singer - With Words.ogg"]:
            open(os.path.join(plain, name), "wb").write(audio_bytes)
        open(os.path.join(plain, "Singer - With Words.lrc"), "w").write("[ti:With Words]\n[ar:Singer]\n[00:01.00]One\n[00:03.50]Two\n")
        # CP1252 and UTF-16 charts.
        for name, encoding in [("cp1252", "cp1252"), ("utf16", "utf-16")]:
            d = os.path.join(odd, name)
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, "song.mp3"), "wb").write(audio_bytes)
            open(os.path.join(d, "song.txt"), "wb").write(
                chart(rng, f"Thekenmädchen {name}", "Zoë", "song.mp3", 16, False).encode(encoding))
        # Broken: no #BPM; a missing audio file; a README; a 2 MB .txt.
        d = os.path.join(odd, "broken")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "nobpm.txt"), "w").write("#TITLE:No Tempo\n#ARTIST:A\n#MP3:x.mp3\n: 0 4 0 a\nE\n")
        open(os.path.join(d, "x.mp3"), "wb").write(audio_bytes)
        d = os.path.join(odd, "noaudio")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "song.txt"), "w").write(chart(rng, "Silent", "Nobody", "gone.mp3", 16, False))
        open(os.path.join(odd, "README.txt"), "w").write("These songs were generated for LiveAudio's tests.\n")
        open(os.path.join(odd, "huge.txt"), "wb").write(b"#TITLE:" + b"x" * (2 << 20))


if __name__ == "__main__":
    main()
