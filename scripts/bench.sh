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
# The tool as `make demo` builds it: release, Swift runtime linked statically.
swift build -c release --static-swift-stdlib --product liveaudio >/dev/null
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

echo "== voice chain (examples/voice-chain.json) vs ffmpeg and sox chains: 60 s, 48 kHz stereo float"
# Music-like input: pink noise with a slow tremolo plus two tones.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=60:amplitude=0.3:seed=7" \
  -f lavfi -i "sine=frequency=220:sample_rate=48000:duration=60" \
  -filter_complex "[0]tremolo=f=1.3:d=0.5[n];[1]volume=0.2[t];[n][t]amix=inputs=2:normalize=0" \
  -ac 2 -c:a pcm_f32le "$work/chain-in.wav"
mkdir -p "$work/chain"
cp examples/voice-chain.json "$work/chain/voice-chain.json"
ln -sf "$work/chain-in.wav" "$work/chain/voice.wav"
eq3="equalizer=f=90:t=q:w=0.7:g=-6,equalizer=f=3000:t=q:w=1:g=3,equalizer=f=10000:t=q:w=0.7:g=2"
hyperfine --warmup 2 --runs 10 --export-markdown "$work/chain.md" \
  -n liveaudio ".build/release/liveaudio render $work/chain/voice-chain.json -o $work/chain-la.wav" \
  -n "ffmpeg eq×3,acompressor,aecho,alimiter" "ffmpeg -hide_banner -loglevel error -y -threads 1 -filter_threads 1 -i $work/chain-in.wav -af '$eq3,acompressor=threshold=-24dB:ratio=3:attack=5:release=120:makeup=1.58:knee=2,aecho=1:0.85:250:0.25,alimiter=limit=0.89:attack=3:release=50:level=0' -c:a pcm_f32le $work/chain-ff.wav" \
  -n "sox equalizer×3 compand reverb" "sox $work/chain-in.wav -e floating-point -b 32 $work/chain-sox.wav equalizer 90 0.7q -6 equalizer 3000 1q 3 equalizer 10000 0.7q 2 compand 0.005,0.12 6:-70,-70,-24,-24,0,-16 4 reverb 20"
cat "$work/chain.md"
