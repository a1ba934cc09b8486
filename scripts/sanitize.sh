#!/usr/bin/env bash
# `make sanitize`: the concurrency-heavy suites under ThreadSanitizer and the parser and codec suites under
# AddressSanitizer, each from a build of its own (.build-tsan, .build-asan). Any sanitizer report fails the run; the
# reports are in .build-tsan/sanitize.log and .build-asan/sanitize.log.
#
# Not run: the suites that bound the process's resident memory, which the sanitizers' shadow memory adds to (the
# misbehaving RTMP servers; the file checks of StreamingCheckTests, whose parsers the fuzz targets run under
# AddressSanitizer), the allocation probes (they preload an allocator and lock counters of their own, which the sanitizers'
# interceptors would fight) and the sessions on JACK and PulseAudio (ThreadSanitizer slows the device threads into
# xruns; their concurrency is the graph's, the ring buffers' and the workers', which run here).
#
# No suppressions. Locks are `Locked` (AudioCore), whose critical sections ThreadSanitizer sees; the standard Mutex's
# contended path is not instrumented, and reported races that were none.
#
# Usage: scripts/sanitize.sh [thread|address]...   (default: both)
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(thread address)

THREAD_SUITES='AudioGraphTests\.(LiveChangeTests|ScheduleLifetimeTests|LifecycleRaceTests|ReadAheadTests|PulledReadAheadTests)/|AudioCoreTests\.RingBufferTests/|AudioCodecsTests\.(EncodingWorkerTests|WorkerToFileTests)/|RTMPTests\.(PublisherTests|PublisherErrorTests)/|LiveAudioTests\.LiveStreamTests/|AudioDevicesTests\.VirtualDeviceTests/|AudioUnitsTests\.(FilePlayerTests|RecorderTests|VoiceProcessingTests)/'
ADDRESS_SUITES='AudioCoreTests\.(WAVTests|ConversionTests)/|AudioCodecsTests\.(ContainerParserTests|AMF0Tests|AMFReferenceTests|FLVTests|DamagedMetadataTests|DecoderTests|AACEncoderTests|AACFileTests)/|RTMPTests\.(AMF3Tests|ChunkRoundTripTests|ChunkSplitTests|ChunkErrorTests|ChunkFuzzTests|ChunkQuirkTests|CommandQuirkTests|RTMPCommandTests|ProtocolControlTests|RTMPHandshakeTests|RTMPURLTests)/|LiveAudioTests\.(FuzzRegressionTests|GraphFileTests)/'

status=0
for kind in "${kinds[@]}"; do
    case $kind in
        thread) scratch=.build-tsan; suites=$THREAD_SUITES; marker="WARNING: ThreadSanitizer"; runtime=__tsan_init ;;
        address) scratch=.build-asan; suites=$ADDRESS_SUITES; marker="ERROR: (AddressSanitizer|LeakSanitizer)"; runtime=__asan_init ;;
        *) echo "sanitize: unknown kind '$kind' (thread or address)"; exit 2 ;;
    esac
    echo "== sanitize: $kind =="
    if ! $SWIFT build --build-tests --sanitize="$kind" --scratch-path "$scratch" 2>&1 | tail -2; then
        echo "sanitize: the $kind build failed"
        status=1
        continue
    fi
    bundle=$(ls -d "$scratch"/debug/*.xctest | head -1)
    # The sanitizer is in the test bundle, or the run proves nothing.
    if ! nm "$bundle" 2>/dev/null | grep "$runtime" > /dev/null; then  # not -q: nm must not die of SIGPIPE under pipefail
        echo "sanitize: $bundle has no $runtime: the $kind sanitizer is not linked"
        status=1
        continue
    fi
    log=$scratch/sanitize.log
    # Leaks are checked by the fuzz targets (make fuzz), where every input is one allocation scope; here LeakSanitizer
    # would report the Swift runtime's own caches at exit.
    TSAN_OPTIONS="halt_on_error=0 history_size=4" ASAN_OPTIONS="detect_leaks=0" SWIFT_BACKTRACE=enable=no \
        $SWIFT test --skip-build --scratch-path "$scratch" --filter "$suites" > "$log" 2>&1
    rc=$?
    reports=$(grep -cE "$marker" "$log")
    tests=$(grep -oE "Test run with [0-9]+ tests" "$log" | tail -1)
    echo "sanitize: $kind: ${tests:-no test run}, exit $rc, $reports sanitizer reports (log: $log)"
    if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ] || [ -z "$tests" ]; then
        status=1
        grep -E "$marker|✘" "$log" | sort | uniq -c | head -20
    fi
done
exit $status
