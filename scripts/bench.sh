#!/usr/bin/env bash
# LiveAudio benchmarks: the engine (ordo-one/benchmark), `liveaudio render` side by side with sox and ffmpeg on the
# same input, and the monitor voice chain on the JACK dummy driver beside JACK's own clients, in the same run.
# Results go to stdout; docs/benchmarks.md records them with this command. BENCH_DEVICE_SECONDS and
# BENCH_DEVICE_PERIODS shorten the device part; BENCH_PARTS picks parts (default: engine render chain encode
# rates pitch loudness voice devices pipewire karaoke phones rtmp library). BENCH_LIBRARY_SONGS sizes the library part. BENCH_RTMP_SECONDS, BENCH_RTMP_STREAMS and BENCH_RTMP_SESSIONS size the RTMP part.
# BENCH_PHONE_SECONDS sizes the phones part; BENCH_PHONE_DRIFT_SECONDS adds a browser run of a phone 200 ppm fast over
# that long a take (default 0: `make test` runs the five minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"

parts=" ${BENCH_PARTS:-engine render chain encode rates pitch loudness voice devices pipewire karaoke phones rtmp library} "
want() { [[ "$parts" == *" $1 "* ]]; }

# The tool as `make demo` builds it: release, Swift runtime linked statically.
swift build -c release --static-swift-stdlib --product liveaudio >/dev/null

if want engine; then
echo "== engine (ordo-one/benchmark, release)"
(cd Benchmarks && swift package --disable-sandbox benchmark --format markdown --no-progress) || echo "benchmark package failed"
fi

if want render; then
echo "== liveaudio render vs sox and ffmpeg: 60 s, 48 kHz stereo float, voice + tone mixed, -6 dB"
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
cat > "$work/pass.json" <<JSON
{"sampleRate": 48000, "channels": 2, "nodes": [{"id": "voice", "type": "file", "path": "voice.wav"}],
 "connections": [{"from": "voice", "to": "output"}]}
JSON
# The commands take turns (scripts/interleaved_timing.py): wall, user and system time, peak resident memory.
scripts/interleaved_timing.py 10 \
  "liveaudio mix=.build/release/liveaudio render $work/mix.json -o $work/la.wav" \
  "sox mix=sox -V1 -m -v 1 $work/voice.wav -v 0.5 $work/tone.wav -e floating-point -b 32 $work/sox.wav vol -6dB" \
  "ffmpeg mix=ffmpeg -hide_banner -loglevel error -y -threads 1 -filter_threads 1 -i $work/voice.wav -i $work/tone.wav -filter_complex '[1]volume=0.5[b];[0][b]amix=inputs=2:normalize=0,volume=-6dB' -c:a pcm_f32le $work/ff.wav" \
  "liveaudio pass-through=.build/release/liveaudio render $work/pass.json -o $work/la-pass.wav" \
  "sox copy=sox -V1 $work/voice.wav -e floating-point -b 32 $work/sox-pass.wav"
fi

if want render; then
echo "== peak resident memory (GNU time %M) of a render and an encode of 1 minute and of 60 minutes, 48 kHz stereo 16-bit"
for minutes in 1 60; do
  ffmpeg -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=220:sample_rate=48000:duration=$((minutes * 60))" \
    -ac 2 -c:a pcm_s16le "$work/long-$minutes.wav"
  printf '{"sampleRate": 48000, "channels": 2, "nodes": [{"id": "f", "type": "file", "path": "long-%s.wav"}],\n "connections": [{"from": "f", "to": "output"}]}\n' \
    "$minutes" > "$work/long-$minutes.json"
done
# A run that fails shows as "failed (status N)", not as the memory it reached before failing.
peak() {
  if /usr/bin/time -f %M -o "$work/peak.txt" "$@" >/dev/null 2>&1; then awk 'END {printf "%.1f MB", $1 / 1024}' "$work/peak.txt"
  else printf 'failed (%s)' "$(head -1 "$work/peak.txt")"; fi
}
echo "| job | 1 minute | 60 minutes |"
echo "|---|---|---|"
echo "| liveaudio render (file → 16-bit WAV) | $(peak .build/release/liveaudio render "$work/long-1.json" -o "$work/long-out.wav" --sample-format s16) | $(peak .build/release/liveaudio render "$work/long-60.json" -o "$work/long-out.wav" --sample-format s16) |"
echo "| sox copy | $(peak sox -V1 "$work/long-1.wav" "$work/long-out.wav") | $(peak sox -V1 "$work/long-60.wav" "$work/long-out.wav") |"
echo "| liveaudio encode (AAC-LC 128k, M4A) | $(peak .build/release/liveaudio encode "$work/long-1.wav" -o "$work/long-out.m4a") | $(peak .build/release/liveaudio encode "$work/long-60.wav" -o "$work/long-out.m4a") |"
echo "| ffmpeg -c:a aac | $(peak ffmpeg -hide_banner -loglevel error -y -i "$work/long-1.wav" -c:a aac -b:a 128k "$work/long-out.m4a") | $(peak ffmpeg -hide_banner -loglevel error -y -i "$work/long-60.wav" -c:a aac -b:a 128k "$work/long-out.m4a") |"
rm -f "$work"/long-*
fi

if want chain; then
echo "== voice chains (Examples/graphs/voice-file-chain.json, Examples/graphs/vocal-file-chain.json) vs ffmpeg and sox chains: 60 s, 48 kHz stereo float"
# Music-like input: pink noise with a slow tremolo plus two tones.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=60:amplitude=0.3:seed=7" \
  -f lavfi -i "sine=frequency=220:sample_rate=48000:duration=60" \
  -filter_complex "[0]tremolo=f=1.3:d=0.5[n];[1]volume=0.2[t];[n][t]amix=inputs=2:normalize=0" \
  -ac 2 -c:a pcm_f32le "$work/chain-in.wav"
mkdir -p "$work/chain"
cp Examples/graphs/voice-file-chain.json Examples/graphs/vocal-file-chain.json "$work/chain/"
ln -sf "$work/chain-in.wav" "$work/chain/voice.wav"
ffmpeg1="-threads 1 -filter_threads 1"
# The voice chain: 3 eq bands, dynamics, reverb, delay, limiter. ffmpeg has no algorithmic reverb (its echo stands
# in for the delay); sox has no limiter or delay line with a filter in its loop (its reverb is Freeverb's).
eq3="equalizer=f=90:t=q:w=0.7:g=-6,equalizer=f=3000:t=q:w=1:g=3,equalizer=f=10000:t=q:w=0.7:g=2"
scripts/interleaved_timing.py 10 \
  "liveaudio voice chain=.build/release/liveaudio render $work/chain/voice-file-chain.json -o $work/chain-la.wav" \
  "ffmpeg eq×3,acompressor,aecho,alimiter=ffmpeg -hide_banner -loglevel error -y $ffmpeg1 -i $work/chain-in.wav -af '$eq3,acompressor=threshold=-24dB:ratio=3:attack=5:release=120:makeup=1.58:knee=2,aecho=1:0.85:250:0.25,alimiter=limit=0.89:attack=3:release=50:level=0' -c:a pcm_f32le $work/chain-ff.wav" \
  "sox equalizer×3 compand reverb=sox -V1 $work/chain-in.wav -e floating-point -b 32 $work/chain-sox.wav equalizer 90 0.7q -6 equalizer 3000 1q 3 equalizer 10000 0.7q 2 compand 0.005,0.12 6:-70,-70,-24,-24,0,-16 4 reverb 20"
# The vocal chain: high-pass, 5 eq bands, a compressor with a 2:1 expander below −50 dB, delay, reverb, limiter.
# ffmpeg: the same filters plus agate as the expander, and a second, multi-tap echo standing in for the room;
# sox: high-pass, shelves and peaks, compand with the expander in its curve, echo, reverb.
vocal="highpass=f=80,lowshelf=f=200:g=-2,equalizer=f=400:t=q:w=1.2:g=-3,equalizer=f=3000:t=q:w=1:g=3,equalizer=f=6500:t=q:w=3:g=-2,highshelf=f=10000:g=2"
vocal="$vocal,agate=threshold=0.00316:ratio=2:attack=5:release=120,acompressor=threshold=-24dB:ratio=3:attack=5:release=120:makeup=1.58:knee=2"
vocal="$vocal,aecho=1:0.85:250:0.25,aecho=0.8:0.88:29|37|44|53|61|71:0.3|0.27|0.24|0.2|0.17|0.15,alimiter=limit=0.89:attack=3:release=50:level=0"
scripts/interleaved_timing.py 10 \
  "liveaudio vocal chain=.build/release/liveaudio render $work/chain/vocal-file-chain.json -o $work/vocal-la.wav" \
  "ffmpeg vocal chain (11 filters)=ffmpeg -hide_banner -loglevel error -y $ffmpeg1 -i $work/chain-in.wav -af '$vocal' -c:a pcm_f32le $work/vocal-ff.wav" \
  "sox vocal chain (9 effects)=sox -V1 $work/chain-in.wav -e floating-point -b 32 $work/vocal-sox.wav highpass 80 bass -2 200 equalizer 400 1.2q -3 equalizer 3000 1q 3 equalizer 6500 3q -2 treble 2 10000 compand 0.005,0.12 6:-90,-130,-50,-50,-24,-24,0,-16 4 echo 0.8 0.9 250 0.25 reverb 20"
fi

if want encode; then
echo "== AAC-LC encoding vs ffmpeg -c:a aac: 60 s, 48 kHz stereo, 128k (the same libavcodec encoder)"
# Music-like input: pink noise with a tremolo plus a tone, 16-bit WAV, and an MP3 of it for the MP3 -> M4A case.
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=60:amplitude=0.3:seed=11" \
  -f lavfi -i "sine=frequency=330:sample_rate=48000:duration=60" \
  -filter_complex "[0]tremolo=f=0.7:d=0.4[n];[1]volume=0.2[t];[n][t]amix=inputs=2:normalize=0" \
  -ac 2 -c:a pcm_s16le "$work/enc-in.wav"
ffmpeg -hide_banner -loglevel error -y -i "$work/enc-in.wav" -c:a libmp3lame -b:a 192k "$work/enc-in.mp3"
# The two commands take turns, 15 rounds (scripts/interleaved_timing.py): both see the same machine noise.
scripts/interleaved_timing.py 15 \
  "liveaudio encode wav→aac=.build/release/liveaudio encode $work/enc-in.wav -o $work/enc-la.aac --bitrate 128k" \
  "ffmpeg -c:a aac wav→aac=ffmpeg -hide_banner -loglevel error -y -i $work/enc-in.wav -c:a aac -b:a 128k $work/enc-ff.aac"
scripts/interleaved_timing.py 15 \
  "liveaudio encode mp3→m4a=.build/release/liveaudio encode $work/enc-in.mp3 -o $work/enc-la.m4a --bitrate 128k" \
  "ffmpeg -c:a aac mp3→m4a=ffmpeg -hide_banner -loglevel error -y -i $work/enc-in.mp3 -c:a aac -b:a 128k $work/enc-ff.m4a"
fi

if want rates; then
echo "== converter 44.1 → 48 kHz vs sox rate, timePitch +200 cents vs the rubberband tool: 60 s stereo"
# Music-like input: pink noise with a tremolo plus two tones, at 44.1 kHz (converter) and 48 kHz (timePitch).
for rate in 44100 48000; do
  ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=$rate:duration=60:amplitude=0.3:seed=5" \
    -f lavfi -i "sine=frequency=262:sample_rate=$rate:duration=60" -f lavfi -i "sine=frequency=392:sample_rate=$rate:duration=60" \
    -filter_complex "[0]tremolo=f=1.1:d=0.5[n];[1]volume=0.2[a];[2]volume=0.15[b];[n][a][b]amix=inputs=3:normalize=0" \
    -ac 2 -c:a pcm_f32le "$work/rates-$rate.wav"
done
for q in high veryHigh; do
cat > "$work/convert-$q.json" <<JSON
{"sampleRate": 48000, "channels": 2,
 "nodes": [{"id": "song", "type": "file", "path": "rates-44100.wav", "resample": false, "sampleRate": 44100},
           {"id": "to48", "type": "converter", "inputRate": 44100, "quality": "$q"}],
 "connections": [{"from": "song", "to": "to48"}, {"from": "to48", "to": "output"}]}
JSON
done
# sox's -h and -v are libsoxr's high and very high qualities (sox links libsoxr): equal quality, pair by pair.
scripts/interleaved_timing.py 10 \
  "liveaudio converter high=.build/release/liveaudio render $work/convert-high.json -o $work/conv-la-h.wav" \
  "sox rate -h=sox -V1 $work/rates-44100.wav -e floating-point -b 32 $work/conv-sox-h.wav rate -h 48000" \
  "liveaudio converter veryHigh=.build/release/liveaudio render $work/convert-veryHigh.json -o $work/conv-la-v.wav" \
  "sox rate -v=sox -V1 $work/rates-44100.wav -e floating-point -b 32 $work/conv-sox-v.wav rate -v 48000"
# The system calls of the converter's render: the futex waits of threads waking each other.
strace -f -c -o "$work/convert-strace.txt" .build/release/liveaudio render "$work/convert-veryHigh.json" -o "$work/conv-la-v.wav" >/dev/null
echo "liveaudio converter veryHigh, system calls: $(awk '/futex/ {print $4 " futex"} /total/ {print $4 " in all"}' "$work/convert-strace.txt" | paste -sd, -)"
for e in finer faster; do
cat > "$work/pitch-$e.json" <<JSON
{"sampleRate": 48000, "channels": 2,
 "nodes": [{"id": "song", "type": "file", "path": "rates-48000.wav"},
           {"id": "key", "type": "timePitch", "pitch": 200, "quality": "$e"}],
 "connections": [{"from": "song", "to": "key"}, {"from": "key", "to": "output"}]}
JSON
done
# The rubberband tool with the same engine (-3: R3, -2: R2): in its own offline mode, in real-time mode (-R), and
# with the unit's own options — real time, high-consistency pitch shifting (which a pitch map turns on; the map
# here changes nothing) and channels together (--centre-focus).
printf '0 0\n' > "$work/flat.pitchmap"
scripts/interleaved_timing.py 5 \
  "liveaudio timePitch finer=.build/release/liveaudio render $work/pitch-finer.json -o $work/pitch-la-3.wav" \
  "rubberband -3 -p 2=rubberband -q -3 -p 2 $work/rates-48000.wav $work/pitch-rb-3.wav" \
  "rubberband -3 -R -p 2=rubberband -q -3 -R -p 2 $work/rates-48000.wav $work/pitch-rb-3r.wav" \
  "rubberband -3 (unit's options)=rubberband -q -3 --centre-focus --pitchmap $work/flat.pitchmap -p 2 $work/rates-48000.wav $work/pitch-rb-3u.wav" \
  "liveaudio timePitch faster=.build/release/liveaudio render $work/pitch-faster.json -o $work/pitch-la-2.wav" \
  "rubberband -2 -p 2=rubberband -q -2 -p 2 $work/rates-48000.wav $work/pitch-rb-2.wav" \
  "rubberband -2 -R -p 2=rubberband -q -2 -R -p 2 $work/rates-48000.wav $work/pitch-rb-2r.wav" \
  "rubberband -2 (unit's options)=rubberband -q -2 --centre-focus --pitchmap $work/flat.pitchmap -p 2 $work/rates-48000.wav $work/pitch-rb-2u.wav"
fi

if want loudness; then
echo "== loudness (EBU R128) of 10 minutes of 48 kHz stereo: liveaudio loudness against FFmpeg's ebur128 filter"
# Music-like: decaying notes, a swelling chord, noise hits on the beat, a level that moves every 20 s. 16-bit WAV,
# so decoding costs next to nothing; FFmpeg's decode-only run shows how little. Both meters measure the true peak.
ffmpeg -hide_banner -loglevel error -y \
  -f lavfi -i "aevalsrc=exprs='0.25*sin(2*PI*220*t)*exp(-4*mod(t,0.5))+0.15*sin(2*PI*330*t)*(0.6+0.4*sin(2*PI*0.25*t))|0.25*sin(2*PI*220*t+0.5)*exp(-4*mod(t,0.5))+0.12*sin(2*PI*495*t)':s=48000:d=600" \
  -f lavfi -i "anoisesrc=color=pink:amplitude=0.4:r=48000:d=600:seed=3" \
  -filter_complex "[1]aformat=channel_layouts=stereo,volume='0.05+0.6*lt(mod(t,0.25),0.04)':eval=frame[n];[0][n]amix=inputs=2:normalize=0,volume='0.3+0.7*mod(floor(t/20),2)':eval=frame" \
  -c:a pcm_s16le "$work/programme.wav"
scripts/interleaved_timing.py 10 \
  "liveaudio loudness=.build/release/liveaudio loudness $work/programme.wav" \
  "ffmpeg ebur128=ffmpeg -hide_banner -nostats -loglevel error -threads 1 -filter_threads 1 -i $work/programme.wav -af ebur128=peak=true -f null -" \
  "ffmpeg ebur128, no true peak=ffmpeg -hide_banner -nostats -loglevel error -threads 1 -filter_threads 1 -i $work/programme.wav -af ebur128 -f null -" \
  "ffmpeg decode only=ffmpeg -hide_banner -nostats -loglevel error -threads 1 -i $work/programme.wav -f null -"
.build/release/liveaudio loudness "$work/programme.wav"
ffmpeg -hide_banner -nostats -i "$work/programme.wav" -af ebur128=peak=true:framelog=verbose -f null - 2>&1 | grep -A12 Summary | grep -E "I:|LRA:|Peak:"
fi

if want pitch; then
echo "== pitch tracking: LiveAudio against aubio yinfft and librosa pyin, generated singing and espeak-ng speech"
# scripts/pitch-accuracy.py makes the material and the ground truth and runs the three trackers; the venv holds
# librosa (scripts/install-deps.sh bench).
.build/bench-venv/bin/python3 scripts/pitch-accuracy.py --liveaudio .build/release/liveaudio || true
fi

if want voice; then
echo "== voiceProcessing vs speexdsp (echo canceller + preprocessor): 30 s at 48 kHz mono, echo through a generated room"
# The material, made here: the far end is music-like (pink noise with a tremolo, stepping tones) with espeak-ng's
# speech over it from 4 s; the room delays it 60 ms, convolves it with 300 ms of exponentially decaying noise
# (−60 dB at the end), takes it 6 dB down, clips it softly (a small loudspeaker) and adds −65 dBFS of noise.
# Single talk: nothing else reaches the microphone, so what comes out is what was not cancelled.
v="$work/voice"
mkdir -p "$v"
espeak-ng -v en-gb+m3 -s 150 -w "$v/far-speech.wav" "Welcome to the karaoke night. Tonight we sing the songs you \
love, with the band behind you and the crowd in front of you. Take the microphone and sing along with the music. \
The next song is an old favourite, so everybody join in on the chorus, and do not forget to smile."
ffmpeg -hide_banner -loglevel error -y -i "$v/far-speech.wav" \
  -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=30:amplitude=0.25:seed=5" \
  -f lavfi -i "aevalsrc='0.15*sin(2*PI*(220+110*floor(mod(t*3,4)))*t)+0.08*sin(2*PI*(330+55*floor(mod(t*2,5)))*t)':d=30:s=48000" \
  -filter_complex "[0]aresample=48000,adelay=4000,apad[s];[1]tremolo=f=2.1:d=0.7[n];[n][2][s]amix=inputs=3:normalize=0:duration=shortest,atrim=duration=30,volume=0.8" \
  -ac 1 -ar 48000 -c:a pcm_s16le "$v/accompaniment.wav"
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "aevalsrc='(random(0)*2-1)*exp(-t*23)':d=0.3:s=48000" -c:a pcm_f32le "$v/room.wav"
ffmpeg -hide_banner -loglevel error -y -i "$v/accompaniment.wav" -i "$v/room.wav" \
  -f lavfi -i "anoisesrc=color=white:sample_rate=48000:duration=30.5:amplitude=0.0006:seed=9" \
  -filter_complex "[0]adelay=60,apad=pad_dur=0.5[d];[d][1]afir=gtype=none:irgain=0.025[e];[e]volume=-6dB,asoftclip=type=tanh[c];[c][2]amix=inputs=2:normalize=0:duration=first,atrim=duration=30" \
  -ac 1 -c:a pcm_s16le "$v/take.wav"
for f in take accompaniment; do ffmpeg -hide_banner -loglevel error -y -i "$v/$f.wav" -f s16le "$v/$f.raw"; done
# LiveAudio: Examples/graphs/clean-take.json's graph with every feature on, and with the echo canceller alone.
graph() {
  cat <<JSON
{"sampleRate": 48000, "channels": 1,
 "nodes": [{"id": "take", "type": "file", "path": "take.wav"},
           {"id": "accompaniment", "type": "file", "path": "accompaniment.wav"},
           {"id": "clean", "type": "voiceProcessing", "noiseSuppression": "$1", "gainControl": "$2", "highPassFilter": $3}],
 "connections": [{"from": "take", "to": "clean"}, {"from": "accompaniment", "to": "clean", "bus": 1},
                 {"from": "clean", "to": "output"}]}
JSON
}
graph moderate adaptiveDigital true > "$v/all.json"
graph off off false > "$v/aec.json"
# The peer: speexdsp through scripts/bench/speex-voice.c, every feature on (denoise, AGC, residual echo
# suppression) and the echo canceller alone. It does not find the delay: its filter must span the delay and the
# tail; 200 ms was its best of 100–800 ms on this material (ERLE 13.2 dB; 100: 7.8, 400: 11.7, 800: 10.1), 400 ms
# spans the whole echo.
cc=${CC:-$(command -v cc || command -v clang)}
"$cc" -O2 -o "$v/speex-voice" scripts/bench/speex-voice.c $(pkg-config --cflags --libs speexdsp)
scripts/interleaved_timing.py 10 \
  "liveaudio, all on=.build/release/liveaudio render $v/all.json -o $v/la-all.wav" \
  "speexdsp 200 ms, all on=$v/speex-voice 48000 200 $v/take.raw $v/accompaniment.raw $v/sp-all-200.raw" \
  "speexdsp 400 ms, all on=$v/speex-voice 48000 400 $v/take.raw $v/accompaniment.raw $v/sp-all-400.raw" \
  "liveaudio, canceller only=.build/release/liveaudio render $v/aec.json -o $v/la-aec.wav" \
  "speexdsp 200 ms, canceller only=$v/speex-voice 48000 200 $v/take.raw $v/accompaniment.raw $v/sp-aec-200.raw aec-only"
# ERLE as FFmpeg measures it: the microphone's RMS level over the output's, after the first 2 s.
rms() { ffmpeg -hide_banner "${@:2}" -i "$1" -af "atrim=start=2,astats=metadata=0:measure_overall=RMS_level" -f null - 2>&1 \
  | awk '/RMS level dB/ {v = $NF} END {print v}'; }
mic=$(rms "$v/take.wav")
for out in la-all.wav la-aec.wav sp-all-200.raw sp-all-400.raw sp-aec-200.raw; do
  if [[ $out == *.raw ]]; then level=$(rms "$v/$out" -f s16le -ar 48000 -ac 1); else level=$(rms "$v/$out"); fi
  awk -v m="$mic" -v o="$level" -v n="$out" 'BEGIN {printf "ERLE %-16s %5.1f dB (microphone %.1f dBFS, output %.1f dBFS)\n", n, m - o, m, o}'
done
fi

if want devices; then
echo "== devices: the monitor voice chain on the JACK dummy driver, 48 kHz (Examples/graphs/voice-chain.json)"
# One jackd per period (dummy driver, realtime where permitted), stopped by PID. A `liveaudio play` client feeds
# music-like audio (pink noise with a tremolo, plus a tone) into the monitor's input, so the chain works on signal,
# not on the dummy driver's silence; `liveaudio monitor --timing` runs the chain in JACK's process callback for
# BENCH_DEVICE_SECONDS (default 60) and prints render time per cycle, callback jitter and load percentiles, and
# the xruns JACK reported. The peer: two of JACK's own `jack_simple_client` (a C sine player each, the smallest
# client there is) for the same time on a fresh server at the same period — the xruns the machine itself causes,
# counted from jackd's log, as are ours for comparison.
export JACK_NO_START_SERVER=1  # a client must never start a default jackd behind the benchmark's back
seconds=${BENCH_DEVICE_SECONDS:-60}
periods=${BENCH_DEVICE_PERIODS:-"1024 512 256 128 64 32 16"}
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=$((seconds + 20)):amplitude=0.3:seed=3" \
  -f lavfi -i "sine=frequency=196:sample_rate=48000:duration=$((seconds + 20))" \
  -filter_complex "[0]tremolo=f=1.7:d=0.6[n];[1]volume=0.2[t];[n][t]amix=inputs=2:normalize=0" \
  -ac 2 -c:a pcm_f32le "$work/monitor-in.wav"
# JACK's registry (/dev/shm/jack-shm-registry) keeps 8 server slots, and a server that was killed keeps its slot:
# with no jackd running, stale slots are cleared so that the servers below can start.
if ! pgrep -x jackd >/dev/null; then rm -rf /dev/shm/jack-shm-registry /dev/shm/jack_sem.* /dev/shm/jack_db-* /dev/shm/jack-[0-9]*; fi
jack_pid=""
player_pid=""
stop_jack() {
  for pid in $player_pid $jack_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  player_pid=""
  jack_pid=""
}
trap stop_jack EXIT
start_jack() {  # $1: period in frames; sets jack_name, jack_pid and player_pid
  jack_name="labench$$p$1"
  jackd -n "$jack_name" -d dummy -r 48000 -p "$1" -C 2 -P 2 >"$work/jackd-$1.log" 2>&1 &
  jack_pid=$!
  JACK_DEFAULT_SERVER="$jack_name" jack_wait -w -t 10 >/dev/null 2>&1
  .build/release/liveaudio play "$work/monitor-in.wav" --backend jack --jack-server "$jack_name" --device none \
    >"$work/player-$1.log" 2>&1 &
  player_pid=$!
  for _ in $(seq 100); do
    JACK_DEFAULT_SERVER="$jack_name" jack_lsp 2>/dev/null | grep -q '^liveaudio:out_1$' && break
    sleep 0.1
  done
}
lowest=""
printf '| period | xruns in %s s (jackd log) | peer xruns (jackd log) | render p50 / p99 / p99.99 / max (µs) | jitter p50 / p99 / p99.99 / max (µs) | load p99 |\n' "$seconds" >"$work/devices.md"
printf '|---|---|---|---|---|---|\n' >>"$work/devices.md"
for p in $periods; do
  start_jack "$p"
  out=$(.build/release/liveaudio monitor --backend jack --jack-server "$jack_name" --input liveaudio \
    --graph Examples/graphs/voice-chain.json --duration "$seconds" --timing 2>"$work/monitor-$p.err") || true
  stop_jack
  echo "$out"
  logged=$(python3 scripts/jackd_log.py notifications "$work/jackd-$p.log")
  # The peer on a fresh server at the same period.
  jack_name="labench$$peer$p"
  jackd -n "$jack_name" -d dummy -r 48000 -p "$p" -C 2 -P 2 >"$work/jackd-peer-$p.log" 2>&1 &
  jack_pid=$!
  JACK_DEFAULT_SERVER="$jack_name" jack_wait -w -t 10 >/dev/null 2>&1
  JACK_DEFAULT_SERVER="$jack_name" jack_simple_client peer1 "$jack_name" >/dev/null 2>&1 &
  peer1=$!
  JACK_DEFAULT_SERVER="$jack_name" jack_simple_client peer2 "$jack_name" >/dev/null 2>&1 &
  peer2=$!
  sleep "$seconds"
  # Counted before anything stops. The server stops first: jack_simple_client exits on its shutdown notice (it can
  # hang in its own SIGTERM handler), and a server whose clients were killed leaves its slot in JACK's registry.
  peer=$(python3 scripts/jackd_log.py notifications "$work/jackd-peer-$p.log")
  stop_jack
  sleep 1
  kill -9 "$peer1" "$peer2" 2>/dev/null || true
  wait "$peer1" "$peer2" 2>/dev/null || true
  echo "peer (2 × jack_simple_client, $seconds s at $p frames): $peer xruns in jackd's log"
  xruns=$(echo "$out" | sed -n 's/.*xruns \([0-9]*\),.*/\1/p')
  timing=$(echo "$out" | grep '^cycle timing:' || true)
  # "render p50 A, p99 B, p99.99 C, max D µs; callback jitter p50 E, …; load p99 F %"
  render=$(echo "$timing" | sed -n 's/.*render p50 \([0-9.]*\), p99 \([0-9.]*\), p99.99 \([0-9.]*\), max \([0-9.]*\) µs; callback.*/\1 \/ \2 \/ \3 \/ \4/p')
  jitter=$(echo "$timing" | sed -n 's/.*jitter p50 \([0-9.]*\), p99 \([0-9.]*\), p99.99 \([0-9.]*\), max \([0-9.]*\) µs;.*/\1 \/ \2 \/ \3 \/ \4/p')
  load=$(echo "$timing" | sed -n 's/.*load p99 \([0-9.]*\) %.*/\1 %/p')
  printf '| %s | %s (%s) | %s | %s | %s | %s |\n' "$p" "${xruns:-failed}" "$logged" "$peer" "$render" "$jitter" "$load" >>"$work/devices.md"
  if [ "${xruns:-1}" = 0 ]; then lowest=$p; fi
done
cat "$work/devices.md"
if [ -n "$lowest" ]; then
  echo "lowest period with 0 xruns in $seconds s: $lowest frames; its round trip (JACK loopback, --device self):"
  start_jack "$lowest"
  .build/release/liveaudio latency --backend jack --device self --jack-server "$jack_name" --clicks 5 || true
  stop_jack
else
  echo "no period ran $seconds s without xruns"
fi

fi

if want pipewire; then
echo "== pipewire: the round trip on a loop, ours and jack_iodelay's (through pw-jack); ear monitoring per quantum"
# A PipeWire server and WirePlumber of the benchmark's own (in $work/pw, stopped by PID), as docs/devices.md runs it
# headless: a null sink whose monitor is linked into a virtual source, both the defaults. For each quantum (forced),
# `liveaudio latency --backend pipewire` prints the round trip PipeWire reports for our streams and the one it
# measures with clicks; the peer, JACK's own `jack_iodelay` run through PipeWire's JACK library (`pw-jack`), its
# ports linked to the same loop, measures it with its own tones. Then `liveaudio monitor --timing` at each quantum for
# BENCH_PIPEWIRE_SECONDS (default 60): our cycle's CPU time on PipeWire's data thread, and the graph cycles we missed.
pw_seconds=${BENCH_PIPEWIRE_SECONDS:-60}
pw_quanta=${BENCH_PIPEWIRE_QUANTA:-"64 128 256 1024"}
pw_root="$work/pw"
mkdir -p "$pw_root/run" "$pw_root/home" "$pw_root/state" "$pw_root/config"
chmod 700 "$pw_root/run"
pw_env=(env XDG_RUNTIME_DIR="$pw_root/run" PIPEWIRE_RUNTIME_DIR="$pw_root/run" PIPEWIRE_REMOTE="$pw_root/run/pipewire-0"
  HOME="$pw_root/home" XDG_STATE_HOME="$pw_root/state" XDG_CONFIG_HOME="$pw_root/config")
pw_pids=""
stop_pw() { for pid in $pw_pids; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done; pw_pids=""; }
trap 'stop_pw; stop_jack 2>/dev/null || true' EXIT
"${pw_env[@]}" pipewire >"$pw_root/pipewire.log" 2>&1 &
pw_server=$!
for _ in $(seq 100); do [ -S "$pw_root/run/pipewire-0" ] && break; sleep 0.1; done
"${pw_env[@]}" dbus-run-session -- wireplumber >"$pw_root/wireplumber.log" 2>&1 &
pw_pids="$! $pw_server"  # WirePlumber first
for _ in $(seq 150); do "${pw_env[@]}" pw-cli ls Metadata 2>/dev/null | grep -q '"default"' && break; sleep 0.2; done
"${pw_env[@]}" pw-metadata -n settings 0 clock.min-quantum 16 >/dev/null
for node in "spk Audio/Sink" "mic Audio/Source/Virtual"; do
  set -- $node
  "${pw_env[@]}" pw-cli create-node adapter "{ factory.name=support.null-audio-sink node.name=$1 media.class=$2 object.linger=1 audio.position=[FL FR] }" >/dev/null
done
sleep 1
for ch in FL FR; do "${pw_env[@]}" pw-link "spk:monitor_$ch" "mic:input_$ch"; done
printf '| quantum | reported (ours) | measured (ours) | jack_iodelay (pw-jack) |\n|---|---|---|---|\n' > "$work/pw-latency.md"
printf '| quantum | cycles | CPU per cycle p50 / p99 / max (µs) | max, share of the quantum | graph cycles missed |\n|---|---|---|---|---|\n' > "$work/pw-monitor.md"
for q in $pw_quanta; do
  "${pw_env[@]}" pw-metadata -n settings 0 clock.force-quantum "$q" >/dev/null
  sleep 0.5
  ours=$("${pw_env[@]}" .build/release/liveaudio latency --backend pipewire --period "$q" 2>&1 || true)
  reported=$(sed -n 's/.*reported_ms=\([0-9.]*\).*/\1/p' <<<"$ours" | head -1)
  measured=$(sed -n 's/.*latency_ms=\([0-9.]*\).*/\1/p' <<<"$ours" | head -1)
  # jack_iodelay prints its measurement over and over (carriage returns); its ports are linked into the loop.
  "${pw_env[@]}" PIPEWIRE_QUANTUM="$q/48000" timeout 8 pw-jack jack_iodelay >"$pw_root/iodelay-$q.log" 2>&1 &
  peer=$!
  for _ in $(seq 50); do "${pw_env[@]}" pw-link -o 2>/dev/null | grep -q '^jack_delay:out' && break; sleep 0.1; done
  "${pw_env[@]}" pw-link jack_delay:out spk:playback_FL 2>/dev/null || true
  "${pw_env[@]}" pw-link mic:capture_FL jack_delay:in 2>/dev/null || true
  wait "$peer" 2>/dev/null || true
  iodelay=$(tr '\r' '\n' <"$pw_root/iodelay-$q.log" | sed -n 's/^ *\([0-9.]*\) frames *\([0-9.]*\) ms total roundtrip latency.*/\2 ms (\1 frames)/p' | tail -1)
  echo "| $q | ${reported:-?} ms | ${measured:-?} ms | ${iodelay:-none} |" >> "$work/pw-latency.md"
  out=$("${pw_env[@]}" .build/release/liveaudio monitor --backend pipewire --period "$q" --duration "$pw_seconds" --timing 2>&1 || true)
  timing=$(grep -m1 '^cycle timing' <<<"$out" || true)
  cycles=$(sed -n 's/^cycle timing: \([0-9]*\).*/\1/p' <<<"$timing")
  cpu=$(sed -n 's/.*CPU p50 \([0-9.]*\), p99 \([0-9.]*\), max \([0-9.]*\).*/\1 \/ \2 \/ \3/p' <<<"$timing")
  max=$(sed -n 's/.*CPU p50 [0-9.]*, p99 [0-9.]*, max \([0-9.]*\).*/\1/p' <<<"$timing")
  share=$(python3 -c "print(f'{${max:-0} / ($q / 48000 * 1e6) * 100:.1f} %')")
  xruns=$(sed -n 's/.*xruns \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
  echo "| $q | ${cycles:-?} | ${cpu:-?} | $share | ${xruns:-?} |" >> "$work/pw-monitor.md"
done
cat "$work/pw-latency.md"
echo
cat "$work/pw-monitor.md"
stop_pw
fi

if want karaoke; then
echo "== karaoke: the device thread with the song two semitones up, 128 frames on the JACK dummy driver"
# `liveaudio karaoke --key 2 --timing` for BENCH_KARAOKE_SECONDS (default 60) on a fresh jackd at 128 frames, our
# outputs looped to our inputs, the default voice chain (Examples/graphs/voice-chain.json), a given round trip: the cycle
# timing line at the end has the device thread's CPU time per cycle (p50, p99, max). BENCH_KARAOKE_BINARIES runs
# other builds of the tool too, in the same run (a before and an after).
export JACK_NO_START_SERVER=1
kseconds=${BENCH_KARAOKE_SECONDS:-60}
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "anoisesrc=color=pink:sample_rate=48000:duration=$((kseconds + 20)):amplitude=0.2:seed=3" \
  -f lavfi -i "sine=frequency=220:sample_rate=48000:duration=$((kseconds + 20))" \
  -filter_complex "[0]tremolo=f=1.3:d=0.5[n];[1]volume=0.2[t];[n][t]amix=inputs=2:normalize=0" -ac 2 "$work/karaoke-song.wav"
if ! pgrep -x jackd >/dev/null; then rm -rf /dev/shm/jack-shm-registry /dev/shm/jack_sem.* /dev/shm/jack_db-* /dev/shm/jack-[0-9]*; fi
for bin in .build/release/liveaudio ${BENCH_KARAOKE_BINARIES:-}; do
  kname="labenchk$$"
  jackd -n "$kname" -d dummy -r 48000 -p 128 -C 2 -P 2 >"$work/jackd-karaoke.log" 2>&1 &
  kpid=$!
  JACK_DEFAULT_SERVER="$kname" jack_wait -w -t 10 >/dev/null 2>&1
  "$bin" karaoke "$work/karaoke-song.wav" --backend jack --jack-server "$kname" --period 128 --input self --output self \
    --key 2 --latency-ms 10 --duration "$kseconds" --timing --no-screen >"$work/karaoke.log" 2>&1 || echo "$bin failed"
  kill "$kpid" 2>/dev/null || true; wait "$kpid" 2>/dev/null || true
  echo "$bin: $(grep -E '^karaoke:' "$work/karaoke.log" | tail -1)"
  echo "$bin: $(grep -E '^cycle timing' "$work/karaoke.log" | tail -1)"
done
fi

if want phones; then
echo "== phones: the room's CPU per phone voice (and, with BENCH_PHONE_DRIFT_SECONDS, a phone's clock 200 ppm fast over a take that long in the browser)"
# scripts/bench-phones.py: `liveaudio karaoke --phones 4 --web 127.0.0.1:0 --timing` on the JACK dummy driver at 128
# frames with 0 … 4 phones singing Opus into it (Tests/Support/stage/fake_phone.py), the process's CPU and the device
# thread's per-cycle time. Then, when BENCH_PHONE_DRIFT_SECONDS is set (`make test` runs the five minutes),
# PhoneDriftTests.aFastPhoneClockIsFollowed (headless Chromium, the page's clock made 200 ppm fast) over that many
# seconds of singing, on the debug build `make test` uses.
export JACK_NO_START_SERVER=1
scripts/install-deps.sh >/dev/null
python3 scripts/bench-phones.py .build/release/liveaudio .build/test-venv/bin/python3 "$work" "${BENCH_PHONE_SECONDS:-40}"
drift=${BENCH_PHONE_DRIFT_SECONDS:-0}
if [ "$drift" != 0 ]; then
  swift build --build-tests >/dev/null
  PHONE_DRIFT_PPM=200 PHONE_DRIFT_SECONDS="$drift" swift test --skip-build --filter 'PhoneDriftTests/aFastPhoneClockIsFollowed' 2>&1 \
    | grep -E "^phone drift|✘|Test run" || true
fi
fi

if want rtmp; then
echo "== RTMP: N streams published from one process to a local nginx-rtmp in real time, beside N ffmpeg publishers"
swift build -c release --product RTMPLoad >/dev/null
seconds=${BENCH_RTMP_SECONDS:-20}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
daemon off; master_process on; worker_processes 1; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log warn;
events { worker_connections 2048; }
rtmp { server { listen 127.0.0.1:$port; chunk_size 4096;
  application live { live on; allow publish 127.0.0.1; deny publish all; } } }
CONF
nginx -p "$work/nginx/" -c nginx.conf -e "$work/nginx/error.log" &
nginx_pid=$!
trap 'kill -QUIT $nginx_pid 2>/dev/null || true' EXIT
sleep 0.5
url="rtmp://127.0.0.1:$port/live"
for n in ${BENCH_RTMP_STREAMS:-1 10 100}; do
  .build/release/RTMPLoad publish "$url/p$n-" "$n" "$seconds"
done
for n in ${BENCH_RTMP_SESSIONS:-1 10 50 100}; do
  .build/release/RTMPLoad session "$url/s$n-" "$n" "$seconds"
done
# Peers: N ffmpeg processes, one per stream, publishing the same tone in real time (-re): stream copy of a
# ready AAC file (the cost of RTMP), and encoding from WAV (the cost of a whole session).
ffmpeg -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=$seconds" -ac 2 \
  -c:a pcm_s16le "$work/rtmp-tone.wav"
ffmpeg -hide_banner -loglevel error -y -i "$work/rtmp-tone.wav" -c:a aac -b:a 128k "$work/rtmp-tone.m4a"
peer() {  # MODE N: prints N, wall seconds and CPU per stream (% of one core) of N ffmpeg publishers
  local mode=$1 n=$2 args
  if [ "$mode" = copy ]; then args=(-i "$work/rtmp-tone.m4a" -c:a copy); else args=(-i "$work/rtmp-tone.wav" -c:a aac -b:a 128k); fi
  TIMEFORMAT='%R %U %S'
  { time (for k in $(seq "$n"); do ffmpeg -hide_banner -loglevel error -re "${args[@]}" -f flv "$url/f$mode$n-$k" & done; wait); } 2>"$work/peer-time"
  read -r real user sys <"$work/peer-time"
  echo "peer=ffmpeg-$mode streams=$n seconds=$real cpuPercentPerStream=$(python3 -c "print(f'{($user + $sys) / $real * 100 / $n:.3f}')")"
}
for n in ${BENCH_RTMP_PEERS:-1 10}; do peer copy "$n"; peer encode "$n"; done
kill -QUIT $nginx_pid; wait $nginx_pid 2>/dev/null || true
trap - EXIT
fi

if want library; then
n=${BENCH_LIBRARY_SONGS:-80000}
echo "== song library: $n generated UltraStar charts in nested folders (scripts/make-library.py), the release build"
swift build -c release --product LibraryLoad >/dev/null
lib="$work/library"
rm -rf "$lib" "$work/library.sqlite"*
python3 scripts/make-library.py "$lib" --songs "$n" --oddities
echo "charts: $(find "$lib" -name '*.txt' | wc -l), on disk: $(du -sh "$lib" | cut -f1)"
# Cold: the page cache dropped before each (only as root; otherwise said so).
drop() { [ "$(id -u)" -eq 0 ] && sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; }
if drop; then cache="cold (page cache dropped)"; else cache="warm (the generator's writes in the page cache)"; fi
# The floor: reading every chart's bytes, as find and cat do, with nothing parsed or written.
TIMEFORMAT='%R'
echo "peer floor, $cache: find + cat of every .txt: $( { time (find "$lib" -name '*.txt' -print0 | xargs -0 cat >/dev/null); } 2>&1 ) s"
drop || true
/usr/bin/time -f "%e %M" -o "$work/lib-time" .build/release/liveaudio library scan "$lib" --db "$work/library.sqlite" -q
read -r secs kb <"$work/lib-time"
echo "first scan, $cache: $secs s, peak resident $((kb / 1024)) MB"
for k in 1 2 3 4 5; do
  /usr/bin/time -f "%e %M" -o "$work/lib-time" .build/release/liveaudio library scan --db "$work/library.sqlite" -q
  read -r secs kb <"$work/lib-time"
  echo "rescan, nothing changed ($k): $secs s, peak resident $((kb / 1024)) MB"
done
# 100 charts changed (a note moved), 100 song folders added (copies under new names), 100 removed.
python3 - "$lib" <<'PY'
import os, random, shutil, sys
lib = sys.argv[1]
rng = random.Random(5)
charts = sorted(os.path.join(d, f) for d, _, fs in os.walk(lib) for f in fs if f.endswith(".txt") and "/_odd" not in d)
picked = rng.sample(charts, 300)
for path in picked[:100]:
    text = open(path, encoding="utf-8").read().replace("\n: ", "\n: 1", 1)
    open(path, "w", encoding="utf-8").write(text)
for k, path in enumerate(picked[100:200]):
    shutil.copytree(os.path.dirname(path), os.path.dirname(path) + f" (copy {k})")
for path in picked[200:]:
    shutil.rmtree(os.path.dirname(path))
PY
/usr/bin/time -f "%e %M" -o "$work/lib-time" .build/release/liveaudio library scan --db "$work/library.sqlite"  -q
read -r secs kb <"$work/lib-time"
echo "rescan, 100 changed + 100 added + 100 removed: $secs s, peak resident $((kb / 1024)) MB"
.build/release/LibraryLoad "$work/library.sqlite" --songs 200
echo "for comparison, UltraStar Deluxe's own report (its issue 685): 3,000 songs loaded in about 5 s; 30,000 not finished after 3 minutes"
rm -rf "$lib" "$work/library.sqlite"*
fi
