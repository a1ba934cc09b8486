#!/usr/bin/env bash
# Makes the demo's voice track: espeak-ng speaks, ffmpeg converts to 48 kHz mono 16-bit WAV.
set -euo pipefail
out=${1:-Examples/graphs/voice.wav}
tmp=$(mktemp --suffix .wav)
trap 'rm -f "$tmp"' EXIT
espeak-ng -s 150 -w "$tmp" "Welcome to LiveAudio. This voice, a tone and some noise are mixed by the render graph, then written to a file."
ffmpeg -hide_banner -loglevel error -y -i "$tmp" -ar 48000 -ac 1 -c:a pcm_s16le "$out"
echo "made $out"
