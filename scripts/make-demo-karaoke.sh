#!/usr/bin/env bash
# Makes the karaoke demo's material: an accompaniment (16 s, C – Am – F – G, a pad pulsing on the beat and a bass)
# from ffmpeg's expression source, and a voice take (espeak-ng, after 1 s of count-in, padded to 19 s so the
# microphone outlasts the song and its tail). Both 48 kHz 16-bit WAV.
# Usage: scripts/make-demo-karaoke.sh [DIR]   (default Examples/graphs/)
set -euo pipefail
dir=${1:-Examples/graphs}
k='mod(floor(t/2),4)'
root="(130.81*eq($k,0)+110*eq($k,1)+87.31*eq($k,2)+98*eq($k,3))"
third="(1.2599+(1.1892-1.2599)*eq($k,1))"  # major third, minor on A
beat='(0.35+0.65*exp(-6*mod(t,0.5)))'
fade='min(1,t/0.05)*min(1,(16-t)/0.5)'
pad="($beat*(0.10*sin(2*PI*2*$root*t)+0.08*sin(2*PI*2*$root*$third*t)+0.08*sin(2*PI*3*$root*t)))"
bass="(0.18*exp(-3*mod(t,1))*sin(2*PI*$root*t))"
ffmpeg -hide_banner -loglevel error -y -f lavfi \
  -i "aevalsrc=exprs='$fade*($pad+$bass)|$fade*($pad*0.9+$bass)':s=48000:d=16" -c:a pcm_s16le "$dir/karaoke-accompaniment.wav"
tmp=$(mktemp --suffix .wav)
trap 'rm -f "$tmp"' EXIT
espeak-ng -s 120 -p 60 -w "$tmp" "La la la, sing along with Live Audio. The song, my voice, and the reverb I hear, all in time. La la la, la la la."
ffmpeg -hide_banner -loglevel error -y -i "$tmp" -af "adelay=1000,apad=whole_dur=19" -ar 48000 -ac 1 -c:a pcm_s16le "$dir/karaoke-voice.wav"
echo "made $dir/karaoke-accompaniment.wav and $dir/karaoke-voice.wav"
