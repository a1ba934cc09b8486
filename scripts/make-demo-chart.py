#!/usr/bin/env python3
"""Makes the karaoke demo's chart and its singer: an UltraStar chart (karaoke-chart.txt) of a melody over the
accompaniment's chords (C – Am – F – G, 2 s each, 16 s; scripts/make-demo-karaoke.sh makes that file), and a voice
singing it (karaoke-singer.wav): a harmonic tone with a vowel's formants, a 5.5 Hz vibrato and breath noise,
on time — karaoke's virtual microphone starts with the song (--input-start song), its frame 0 sung to the song's. Standard
library only. 48 kHz 16-bit mono.

Usage: scripts/make-demo-chart.py [DIR]   (default Examples/graphs/)
"""
import math
import os
import random
import struct
import sys
import wave

d = sys.argv[1] if len(sys.argv) > 1 else "Examples/graphs"
rate = 48000
bpm = 240                      # a beat is 60 / (240 × 4) s = 62.5 ms; a note 8 beats (half a second)
chords = [(0, 4, 7, 4), (-3, 0, 4, 0), (-7, -3, 0, -3), (-5, -1, 2, -1)]   # C, Am, F, G arpeggios from C4
words = ["La ", "la ", "la, ", "sing ", "a", "long ", "with ", "me, ", "Live ", "Au", "di", "o ", "in ", "the ", "night, ",
         "la ", "la ", "la, ", "hear ", "the ", "voice ", "and ", "song ", "in ", "time, ", "all ", "a", "long, ",
         "la ", "la ", "la. ", "la."]
lines = []
beat = 0
for bar in range(2):
    for c, chord in enumerate(chords):
        notes = []
        for k, pitch in enumerate(chord):
            kind = "*" if (c == 3 and k == 3) else ":"
            notes.append((kind, beat, 7, pitch + (12 if bar == 1 and k == 2 else 0)))
            beat += 8
        lines.append(notes)
chart = ["#VERSION:1.1.0", "#TITLE:Sing Along", "#ARTIST:LiveAudio", "#MP3:karaoke-accompaniment.wav",
         "#BPM:%d" % bpm, "#GAP:0"]
w = 0
for i, notes in enumerate(lines):
    for kind, start, length, pitch in notes:
        chart.append("%s %d %d %d %s" % (kind, start, length, pitch, words[w % len(words)].rstrip("\n")))
        w += 1
    if i + 1 < len(lines):
        chart.append("- %d" % (notes[-1][1] + notes[-1][2]))
chart.append("E")
with open(os.path.join(d, "karaoke-chart.txt"), "w") as f:
    f.write("\n".join(chart) + "\n")

# The singer: each note from its start to its end (a beat is 1/16 s), on time, 19 s in all.
late = 0.0
beat_seconds = 60 / (bpm * 4)
total = int(19 * rate)
samples = [0.0] * total
random.seed(7)
formants = [(700, 110, 1.0), (1220, 120, 0.45), (2600, 160, 0.15)]


def gain(f):
    return 0.05 + sum(g / math.sqrt(1 + ((f - c) / (b / 2)) ** 2) for c, b, g in formants)


phase = 0.0
for notes in lines:
    for kind, start, length, pitch in notes:
        base = 261.6256 * 2 ** (pitch / 12)
        first = int((start * beat_seconds + late) * rate)
        count = int(length * beat_seconds * rate)
        harmonics = [gain(k * base) / k ** 1.5 for k in range(1, int(6000 / base) + 1)]
        for i in range(count):
            t = (first + i) / rate
            f = base * 2 ** (25 / 1200 * math.sin(2 * math.pi * 5.5 * t))
            phase += f / rate
            env = min(1.0, i / (0.03 * rate), (count - i) / (0.03 * rate))
            v = sum(h * math.sin(2 * math.pi * (k + 1) * phase) for k, h in enumerate(harmonics))
            samples[first + i] = env * (v + 0.03 * random.uniform(-1, 1))
peak = max(abs(x) for x in samples) or 1
with wave.open(os.path.join(d, "karaoke-singer.wav"), "wb") as out:
    out.setnchannels(1)
    out.setsampwidth(2)
    out.setframerate(rate)
    out.writeframes(b"".join(struct.pack("<h", int(x / peak * 0.4 * 32767)) for x in samples))
print("made %s/karaoke-chart.txt and %s/karaoke-singer.wav" % (d, d))
