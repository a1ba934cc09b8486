#!/usr/bin/env bash
# `make docs`: the DocC catalogues of every library module, built with swift-docc-plugin into .build/docs for static
# hosting (one site; each module at /documentation/<module>/), with every DocC warning an error — a broken link, a
# parameter documented that does not exist or left out — and then scripts/docs-check.py: every public symbol has a
# doc comment, and the LiveAudio page lists every public type with a summary. DOCS_BASE_PATH sets the site's base
# path when it is served below a host's root (e.g. /LiveAudio for https://host/LiveAudio/).
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
MODULES=(LiveAudio AudioCore AudioGraph AudioUnits MediaContainers AudioDevices AudioCodecs RTMP SingAlong LiveAudioStage SongLibrary StageCertificates)
targets=()
for m in "${MODULES[@]}"; do targets+=(--target "$m"); done
base=()
[[ -n "${DOCS_BASE_PATH:-}" ]] && base=(--hosting-base-path "$DOCS_BASE_PATH")
rm -rf .build/docs
"$SWIFT" package --allow-writing-to-directory .build/docs generate-documentation "${targets[@]}" \
    --enable-experimental-combined-documentation --transform-for-static-hosting ${base[@]+"${base[@]}"} \
    --warnings-as-errors --output-path .build/docs
# The symbol graphs the plugin extracted: .build/<triple>/extracted-symbols/<package identity>/<module>/.
graphs=$(ls -dt .build/*/extracted-symbols/*/ | head -1)
python3 scripts/docs-check.py "$graphs" .build/docs "${MODULES[@]}"
echo "docs: .build/docs (open with any static web server, e.g. python3 -m http.server -d .build/docs," \
    "then /documentation/liveaudio/)"
