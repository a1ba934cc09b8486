#!/usr/bin/env bash
# Installs the Debian packages LiveAudio's build, tests and benchmarks need, if they are missing.
# Usage: scripts/install-deps.sh [test|bench|soak|demo]   (default: test)
set -euo pipefail
profile=${1:-test}

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# ffprobe/ffmpeg check what the renderer writes (tests) and make the demo's voice file.
# libasound and libjack are linked by the device layer, FFmpeg's libraries by the codecs, libsoxr by the sample-rate
# converter, librubberband by the time-pitch unit, WebRTC's audio processing module by the voice-processing unit,
# SQLite by the song library (through GRDB), libqrencode by the stage's join code (build); pkg-config finds them.
pkgs=(ffmpeg pkg-config libasound2-dev libjack-jackd2-dev libavcodec-dev libavformat-dev libavutil-dev libswresample-dev
  libsoxr-dev librubberband-dev libwebrtc-audio-processing-dev libsqlite3-dev libqrencode-dev)
# The sound servers the device tests start themselves: PulseAudio (null sinks, reached through ALSA's pulse
# plugin), JACK (dummy driver) and PipeWire (null-audio-sink nodes).
# PipeWire (the native backend's tests start their own, with WirePlumber under dbus-run-session); its -dev package
# gives the headers the backend is compiled against (the library itself is loaded at run time). Never
# pipewire-pulse or pipewire-alsa: the first removes pulseaudio, the second takes ALSA's default.
servers=(pulseaudio pulseaudio-utils alsa-utils libasound2-plugins jackd2 pipewire pipewire-bin wireplumber dbus-daemon
  libpipewire-0.3-dev)
# The RTMP tests start their own nginx with the RTMP module (and the stream module for TLS in front of it);
# openssl makes their self-signed certificate.
rtmp=(nginx libnginx-mod-rtmp libnginx-mod-stream openssl)
# strace shows the tests the system calls a command makes (fsync before rename) as an outsider sees them; GNU
# time its peak memory; python3 runs the misbehaving and quirky RTMP servers, and python3-venv holds pyrtmp.
# espeak-ng speaks the voice-processing tests' near and far ends; tmux is the terminal the karaoke screen is tested on;
# Chromium (headless, driven by Selenium through chromedriver) is the browser the web stage is tested in; zbarimg
# (zbar-tools) reads the stage's QR code back as a phone's camera would.
tools=(strace time python3 python3-venv espeak-ng tmux chromium chromium-driver zbar-tools)
case "$profile" in
  bench) pkgs+=(sox rubberband-cli strace time espeak-ng libspeexdsp-dev aubio-tools python3-venv pipewire-jack "${servers[@]}" "${rtmp[@]}") ;;
  demo) pkgs+=(espeak-ng) ;;
  test) pkgs+=("${servers[@]}" "${rtmp[@]}" "${tools[@]}") ;;
  # The soak: the test servers, jack_simple_client (jackd2's example clients) as the peer, matplotlib for its plot.
  soak) pkgs+=("${servers[@]}" "${rtmp[@]}" python3 python3-matplotlib) ;;
  *) echo "install-deps: unknown profile '$profile' (use test, bench, soak or demo)" >&2; exit 2 ;;
esac
for p in "${pkgs[@]}"; do have "$p" || need+=("$p"); done

if ! command -v swift >/dev/null 2>&1 && [ -x /opt/swift/usr/bin/swift ]; then
  echo "install-deps: swift is at /opt/swift/usr/bin; add it to PATH" >&2
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# A virtual environment of the project's own under .build/NAME with PyPI packages, made when IMPORTS fail to import.
# Usage: venv NAME "IMPORTS" PACKAGE...
venv() {
  local dir imports=$2
  dir="$(cd "$(dirname "$0")/.." && pwd)/.build/$1"
  shift 2
  if ! "$dir/bin/python3" -c "import $imports" >/dev/null 2>&1; then
    echo "install-deps: installing $* into $dir"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}

# librosa (pYIN, a peer of the pitch tracker in `make bench`), for the benchmarks.
if [ "$profile" = bench ]; then venv bench-venv "librosa, soundfile" "librosa==0.11.0" soundfile; fi

# pyrtmp, a third RTMP server for the interoperability tests (pinned: the tests know how this version speaks);
# Selenium, which drives Chromium through the web stage, and websockets, the stage tests' own WebSocket client.
# pyloudnorm (with soundfile to read WAV), a loudness meter written apart from LiveAudio's, for the loudness tests.
if [ "$profile" = test ]; then
  venv test-venv "pyrtmp, selenium, websockets, pyloudnorm, soundfile" "pyrtmp==0.3.1" "selenium==4.48.0" "websockets==17.4" \
    "pyloudnorm==0.2.0" "soundfile==0.14.0"
fi
