#!/usr/bin/env bash
# LiveAudio benchmarks: the engine (ordo-one/benchmark) and `liveaudio render` side by side with sox and ffmpeg
# on the same input, in the same run. Results go to stdout; docs/benchmarks.md records them with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"

echo "== engine (ordo-one/benchmark, release)"
(cd Benchmarks && swift package --disable-sandbox benchmark --format markdown --no-progress) || echo "benchmark package failed"

echo "== liveaudio render vs sox and ffmpeg: 60 s, 48 kHz stereo float, voice + tone mixed, -6 dB"
swift build -c release --product liveaudio >/dev/null
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=220:sample_rate=48000:duration=60" \
  -af "volume=0.5" -ac 2 -c:a pcm_f32le "$work/voice.wav"
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=60" \
  -af "volume=0.25" -ac 2 -c:a pcm_f32le "$work/tone.wav"
cat > "$work/mix.json" <<JSON
{"sampleRate": 48000, "channels": 2,
 "nodes": [{"id": "voice", "type": "file", "path": "voice.wav"},
           {"id": "beep", "type": "file", "path": "tone.wav"},
           {"id": "mix", "type": "mixer", "inputs": 2, "volume": [1.0, 0.5]},
           {"id": "trim", "type": "gain", "gain": -6}],
 "connections": [{"from": "voice", "to": "mix", "bus": 0}, {"from": "beep", "to": "mix", "bus": 1},
                 {"from": "mix", "to": "trim"}, {"from": "trim", "to": "output"}]}
JSON
hyperfine --warmup 2 --runs 10 --export-markdown "$work/render.md" \
  -n liveaudio ".build/release/liveaudio render $work/mix.json -o $work/la.wav" \
  -n sox "sox -m -v 1 $work/voice.wav -v 0.5 $work/tone.wav -e floating-point -b 32 $work/sox.wav vol -6dB" \
  -n ffmpeg "ffmpeg -hide_banner -loglevel error -y -threads 1 -filter_threads 1 -i $work/voice.wav -i $work/tone.wav -filter_complex '[1]volume=0.5[b];[0][b]amix=inputs=2:normalize=0,volume=-6dB' -c:a pcm_f32le $work/ff.wav"
cat "$work/render.md"
