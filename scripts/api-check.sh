#!/usr/bin/env bash
# `make api-check [BASE=<tag or commit>]`: the public API of every library module against a base, through
# `swift package diagnose-api-breaking-changes` (swift-api-digester): a removed or renamed symbol, a changed
# signature or type, a new protocol requirement without a default is a breaking change, and fails the check.
# The base: BASE (a commit, a tag, or a release's version, which CHANGELOG.md's heading for it ties to a commit when
# the clone has no tags), else the newest release tag (X.Y.Z), else the commit CHANGELOG.md's newest release names (a
# clone without tags still has it). README.md, "Versions", says what a breaking change means for the version number.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
base=${1:-}
if [[ -z "$base" ]]; then
    base=$(git tag --list '[0-9]*.[0-9]*.[0-9]*' --sort=-v:refname | head -1)
fi
if [[ -z "$base" ]]; then
    # "## 0.1.0 — 2026-11-27 (3a921f4…)": the commit in parentheses on the newest release's heading.
    base=$(sed -nE 's/^## [0-9]+\.[0-9]+\.[0-9]+ .*\(([0-9a-f]{7,40})\).*/\1/p' CHANGELOG.md | head -1)
fi
if [[ "$base" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && ! git rev-parse --verify --quiet "$base^{commit}" > /dev/null; then
    # A release by its version, in a clone without tags: the commit its CHANGELOG.md heading names.
    named=$(sed -nE "s/^## ${base//./\\.} .*\(([0-9a-f]{7,40})\).*/\1/p" CHANGELOG.md | head -1)
    if [[ -n "$named" ]]; then base=$named; fi
fi
if [[ -z "$base" ]]; then
    echo "api-check: no base: no release tag, and CHANGELOG.md names no release commit; give one: make api-check BASE=<commit>"
    exit 2
fi
if ! git rev-parse --verify --quiet "$base^{commit}" > /dev/null; then
    echo "api-check: '$base' is not a commit of this repository (a shallow clone? fetch the tags and history)"
    exit 2
fi
products=(LiveAudio AudioCore AudioGraph AudioUnits MediaContainers AudioDevices AudioCodecs RTMP SingAlong LiveAudioStage)
echo "api-check: the public API of ${products[*]} against $base ($(git rev-parse --short "$base^{commit}"))"
"$SWIFT" package diagnose-api-breaking-changes "$base" --products "${products[@]}"
