#!/usr/bin/env bash
# The karaoke run: the virtual device plays examples/karaoke-voice.wav as the microphone against
# examples/karaoke-accompaniment.wav, through examples/voice-chain.json; the headphones' mix, the song (WAV and M4A)
# and the stems land in OUT_DIR. The virtual device is used on any machine: nobody is there to sing.
# Usage: scripts/demo-karaoke.sh OUT_DIR
set -euo pipefail
out=${1:-out}
bin=.build/release/liveaudio
mkdir -p "$out/karaoke"
test -f examples/karaoke-accompaniment.wav -a -f examples/karaoke-voice.wav || scripts/make-demo-karaoke.sh examples
echo "demo: karaoke — the virtual device sings examples/karaoke-voice.wav to examples/karaoke-accompaniment.wav"
# The take was made against the song from its first frame: no round trip to take back out.
"$bin" karaoke examples/karaoke-accompaniment.wav --graph examples/voice-chain.json --backend virtual \
  --input examples/karaoke-voice.wav --output "$out/karaoke/headphones.wav" --stems "$out/karaoke" \
  --record "$out/karaoke/song.m4a" --latency-ms 0 --accompaniment-volume -3
"$bin" probe "$out/karaoke/song.m4a"
echo "demo: the song is $out/karaoke/song.m4a (and song.wav); the stems accompaniment.wav, voice-dry.wav, voice-wet.wav;"
echo "      what the singer heard is $out/karaoke/headphones.wav. Play them with ffplay or any player."
