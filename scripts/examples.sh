#!/usr/bin/env bash
# Builds the Examples/ package (its own package, depending on LiveAudio by path, as a user's would by URL), runs
# `offline-render` and checks with FFmpeg's own reader that it wrote the 4 s, 48 kHz, 16-bit stereo WAV it says, and
# that it is not silent. `make test` runs this; `make examples` too.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
"$SWIFT" build --package-path Examples
bin=$("$SWIFT" build --package-path Examples --show-bin-path)
out=.build/examples
mkdir -p "$out"
rm -f "$out/offline-render.wav"
"$bin/offline-render" "$out/offline-render.wav" 4
fields=$(ffprobe -v error -select_streams a:0 -show_entries stream=codec_name,sample_rate,channels,duration \
    -of default=noprint_wrappers=1 "$out/offline-render.wav")
echo "$fields"
expect() { grep -qx "$1" <<<"$fields" || { echo "examples: FAILED: ffprobe does not say $1"; exit 1; }; }
expect codec_name=pcm_s16le
expect sample_rate=48000
expect channels=2
expect duration=4.000000
max=$(ffmpeg -hide_banner -nostats -i "$out/offline-render.wav" -af volumedetect -f null - 2>&1 \
    | sed -n 's/.*max_volume: \(-\?[0-9.]*\) dB/\1/p')
echo "max_volume=$max dB"
# Two tones at 0.3 and 0.2 through a reverb and a limiter at -1 dBFS: loud, and never over the ceiling.
python3 -c "import sys; m = float('$max'); sys.exit(0 if -20 < m <= -0.9 else 1)" \
    || { echo "examples: FAILED: offline-render's peak $max dB is not between -20 and -1 dBFS"; exit 1; }
echo "examples: every example built; offline-render wrote a WAV that ffprobe reads"
