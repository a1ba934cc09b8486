#!/usr/bin/env bash
# The main job: capture → Examples/graphs/voice-chain.json → AAC → demo.flv and demo.m4a (or an RTMP server).
# Usage: scripts/demo-stream.sh OUT_DIR   (LIVEAUDIO_RTMP_URL=rtmp://host/app/key publishes there instead)
# Input: the default capture device when a sound server or a capture card is there; otherwise the virtual
# device, which plays Examples/graphs/voice.wav as the microphone, in real time.
set -euo pipefail
out=${1:-out}
bin=.build/release/liveaudio
mkdir -p "$out"

if [ -n "${LIVEAUDIO_RTMP_URL:-}" ]; then
  # From the environment, not the command line: other local users can read a process's arguments.
  to=(--to-env LIVEAUDIO_RTMP_URL)
else
  to=(--to "$out/demo.flv" --to "$out/demo.m4a")
fi

if { command -v pactl >/dev/null && pactl info >/dev/null 2>&1; } || arecord -l 2>/dev/null | grep -q '^card'; then
  echo "demo: streaming 10 s from the default input device through Examples/graphs/voice-chain.json"
  input=(--duration "${LIVEAUDIO_DEMO_SECONDS:-10}")
else
  echo "demo: no sound server or capture card here; the virtual device plays Examples/graphs/voice.wav as the microphone"
  input=(--backend virtual --input Examples/graphs/voice.wav)
fi
"$bin" stream "${input[@]}" --graph Examples/graphs/voice-chain.json --bitrate 128k "${to[@]}"

if [ -z "${LIVEAUDIO_RTMP_URL:-}" ]; then
  for f in "$out/demo.flv" "$out/demo.m4a"; do "$bin" probe "$f"; done
  echo "demo: play them with: ffplay $out/demo.m4a   (or any player; both are AAC-LC 48 kHz stereo)"
fi
