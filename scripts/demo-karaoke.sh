#!/usr/bin/env bash
# The karaoke runs: the virtual device plays Examples/graphs/karaoke-voice.wav as the microphone against
# Examples/graphs/karaoke-accompaniment.wav, through Examples/graphs/voice-chain.json; the headphones' mix, the song (WAV and M4A)
# and the stems land in OUT_DIR. Then a generated chart over the same accompaniment, sung by a generated voice and
# scored (OUT_DIR/karaoke-chart). The virtual device is used on any machine: nobody is there to sing.
# Usage: scripts/demo-karaoke.sh OUT_DIR
set -euo pipefail
out=${1:-out}
bin=.build/release/liveaudio
mkdir -p "$out/karaoke"
test -f Examples/graphs/karaoke-accompaniment.wav -a -f Examples/graphs/karaoke-voice.wav || scripts/make-demo-karaoke.sh Examples/graphs
echo "demo: karaoke — the virtual device sings Examples/graphs/karaoke-voice.wav to Examples/graphs/karaoke-accompaniment.wav"
# The take was made against the song from its first frame: no round trip to take back out.
"$bin" karaoke Examples/graphs/karaoke-accompaniment.wav --graph Examples/graphs/voice-chain.json --backend virtual \
  --input Examples/graphs/karaoke-voice.wav --output "$out/karaoke/headphones.wav" --stems "$out/karaoke" \
  --record "$out/karaoke/song.m4a" --latency-ms 0 --accompaniment-volume -3
"$bin" probe "$out/karaoke/song.m4a"
echo "demo: the song is $out/karaoke/song.m4a (and song.wav); the stems accompaniment.wav, voice-dry.wav, voice-wet.wav;"
echo "      what the singer heard is $out/karaoke/headphones.wav. Play them with ffplay or any player."

# Singing to a chart: a generated UltraStar chart over the same accompaniment, sung by a generated voice; each lyric
# line is printed as it starts and rated as it ends, then the score.
test -f Examples/graphs/karaoke-chart.txt -a -f Examples/graphs/karaoke-singer.wav || scripts/make-demo-chart.py Examples/graphs
mkdir -p "$out/karaoke-chart"
echo "demo: karaoke with a chart — Examples/graphs/karaoke-chart.txt sung by Examples/graphs/karaoke-singer.wav, scored on hard"
"$bin" karaoke Examples/graphs/karaoke-chart.txt --graph Examples/graphs/voice-chain.json --backend virtual \
  --input Examples/graphs/karaoke-singer.wav --output "$out/karaoke-chart/headphones.wav" --stems "$out/karaoke-chart" \
  --latency-ms 0 --difficulty hard --score-file "$out/karaoke-chart/score.json"
"$bin" score Examples/graphs/karaoke-chart.txt "$out/karaoke-chart/voice-dry.wav" --difficulty hard | head -1
echo "demo: the score is $out/karaoke-chart/score.json, the voice's pitch $out/karaoke-chart/pitch.csv."
