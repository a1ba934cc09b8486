#!/usr/bin/env bash
# Runs every test in four phases (`make test` calls this after building):
#   1. the computing tests, in parallel: DSP, codecs, graphs, parsers, the allocation probes — CPU-bound, and
#      indifferent to timing; beside them, in a process of its own, the room's take under load, whose load they are;
#      then the fuzz smoke and the fuzz targets;
#   2. the tests that run against real servers in real time — PulseAudio, JACK, nginx-rtmp, live sessions — in
#      parallel among themselves, but never beside phase 1: on a two-core machine the probes and encoders would
#      take the CPU the sound servers and pacing threads need, and the tests would measure the load, not the code;
#   3. the karaoke sessions on JACK and PulseAudio, by themselves (see below); then phones singing into a room, then
#      the evening from phones (three browsers), with a phone whose clock runs fast beside them;
#   4. a phone calibrated by the room's chirps, the soak's two-minute version and the native PipeWire backend's tests,
#      one after the other beside the rest of that take; then, once it is over, the API documentation (`make docs`)
#      and the examples (`make examples`).
# Every phase always runs; the failures of all are repeated at the end, where a CI log is read. A new suite that
# plays, records or talks to a server belongs in REALTIME.
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
REALTIME='\.(TerminalDisplayTests|PhoneClaimTests|PhoneTurnTests|KaraokeNormalizeTests|VoiceProcessingRealTimeTests|PulseAudioDeviceTests|JACKDeviceTests|DeviceCommandTests|PublisherTests|PublisherErrorTests|MisbehavingServerTests|InteroperabilityTests|LiveStreamTests|LiveStreamLifecycleTests|SessionResourceTests|StreamCommandTests|FaultInjectionTests)/'
# Suites that run by themselves, after phase 2 (phase 3).
ALONE='\.(KaraokeSessionTests|KaraokePulseAudioTests|KaraokeRoomTests|StageTests)/'
# Phones singing into the room (a Chromium each, whose fake microphone is a generated singer; their voices placed
# within ±10 ms), then the evening from phones (three headless Chromiums beside the room): after phase 3, one after the
# other. (Beside each other, the evening's three browsers took the CPU the phones' pages and rooms needed: a clean
# clone's phone voice was placed 11 ms off, and pages opened their microphones 3 s after the tap.)
PHONES='\.(PhoneMicTests|PhoneFaultTests)/'
EVENING='\.EveningStageTests/'
# The room's take under load (three minutes) beside the computing tests; a phone whose clock runs fast, beside the
# phones, the evening, the calibration, the soak and the PipeWire tests. (The allocation probes stay in the computing
# tests' process: run beside the take, their JACK servers and the take's, all at real-time priority on two cores, took
# each other's turns; run after it, beside the computing tests' end, one counted a lock wait. In that process they
# wait for its CPU-bound tests, and run last.)
LOAD='\.KaraokeLoadTests/'
DRIFT='\.PhoneDriftTests/'
# A phone that hears the room through PulseAudio and is calibrated by its chirps (a room and a browser, a minute):
# after the evening, beside the phone whose clock runs fast.
CALIBRATION='\.PhoneRoomCalibrationTests/'
# The native PipeWire backend, against a PipeWire server and WirePlumber of each test's own (about two minutes, a
# minute of it ear monitoring at 128 frames): in phase 4, beside the last minutes of the phone's take, which otherwise
# runs alone. PipeWire's data thread and our cycle on it run at real-time priority, as they would for a user.
PIPEWIRE='\.(PipeWireTests|PipeWireAllocationTests|KaraokePipeWireTests)/'
# Those run from the test binary itself, beside a `swift test` (which holds the build folder's lock while it runs).
XCTEST=$("$SWIFT" build --show-bin-path)/LiveAudioPackageTests.xctest
direct() { NO_COLOR=1 "$XCTEST" --testing-library swift-testing --filter "$1"; }
# The jobs in the background are stopped with the script, however it ends (a background job ignores Ctrl-C).
load='' drift=''
stop_jobs() { for pid in $load $drift; do pkill -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done; }
trap stop_jobs EXIT
trap 'stop_jobs; exit 130' INT TERM
mkdir -p .build
status=0
# Each phase's banner says how long the tests have run so far (the build before them not counted): where the minutes go.
started=$SECONDS
phase() { echo "== $1 == (at $(( SECONDS - started )) s)"; }
# What failed outside a log (a phase that ran no tests), repeated at the end with the logs' failures.
notes=()
note() { echo "$1"; notes+=("$1"); status=1; }
phase "phase 1: computing tests; the take under load beside them"
# The take's load is this phase's own work: no loops of its own (it checks that the CPUs were busy all the while;
# loops at nice 19, tried, were not below the tests: they run in a session, and so a scheduling group, of their own).
KARAOKE_STRESS_BUSY=0 direct "$LOAD" > .build/test-load.log 2>&1 &
load=$!
"$SWIFT" test --skip-build --skip "$REALTIME" --skip "$ALONE" --skip "$PHONES" --skip "$EVENING" --skip "$LOAD" --skip "$DRIFT" --skip "$CALIBRATION" --skip "$PIPEWIRE" 2>&1 \
    | tee .build/test-compute.log || status=1
phase "phase 1: the take under load"
wait "$load" || note "the take under load exited with status $? (its log: .build/test-load.log)"
load=''
cat .build/test-load.log
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-load.log || note "the take under load ran no test: LOAD in scripts/run-tests.sh"
# A short mutation run (the full 10,000 inputs: `make fuzz-smoke`): damaged files of every kind through probe, encode
# and render, with a different seed each day, so the tests keep finding new inputs; no crash, no hang.
phase "phase 1: fuzz smoke"
python3 scripts/fuzz-smoke.py --binary .build/debug/liveaudio --inputs 400 --seed "$(date +%Y%m%d)" --keep .build/fuzz-failures \
    2>&1 | tee .build/test-fuzz.log || status=1
# Every fuzz target for 5 s under libFuzzer and AddressSanitizer, a debug build (built in 3 minutes where the release
# build takes 4.5; the long runs, release, are `make fuzz`'s); a crash, a broken invariant or a leak fails the run, and
# its input is printed for Fuzz/regressions/ (which phase 1 replays).
phase "phase 1: fuzz targets"
SWIFT=$SWIFT FUZZ_SECONDS=5 FUZZ_JOBS=2 FUZZ_CONFIG=debug scripts/fuzz.sh 2>&1 | tee .build/test-libfuzzer.log || status=1
phase "phase 2: real servers, real time"
"$SWIFT" test --skip-build --filter "$REALTIME" 2>&1 | tee .build/test-realtime.log || status=1
if ! grep -qE "Test run with [1-9][0-9]* tests? " .build/test-realtime.log; then
    note "phase 2 ran no tests: REALTIME in scripts/run-tests.sh names no suite that exists"
fi
# The karaoke sessions on JACK in a process of their own: libjack's client side crashed (its stack overwritten with a
# semaphore's name) when this process opened and closed clients on one server while the suites above held clients on
# others; an application talks to one server. Runs after phase 2, alone.
phase "phase 3: karaoke sessions"
"$SWIFT" test --skip-build --filter "$ALONE" 2>&1 | tee .build/test-karaoke.log || status=1
if ! grep -qE "Test run with [1-9][0-9]* tests? " .build/test-karaoke.log; then
    note "phase 3 ran no tests"
fi
phase "phase 3: phones as the microphone, then the evening from phones; a phone whose clock runs fast beside them"
# The phone 200 ppm fast over a five-minute take, as the issue asks (the test's defaults): about seven minutes in all,
# beside the phones and the evening, then the calibration, the soak and the PipeWire tests. It starts 45 s in:
# started with them, its browser and room came up with the others' and the machine's two cores were so busy that the
# phone tests' pages tapped two seconds late (a clean clone's run).
(sleep 45 && direct "$DRIFT") > .build/test-drift.log 2>&1 &
drift=$!
"$SWIFT" test --skip-build --filter "$PHONES" 2>&1 | tee .build/test-phones.log || status=1
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-phones.log || note "the phones' tests ran none: PHONES in scripts/run-tests.sh"
phase "phase 3: the evening from phones"
"$SWIFT" test --skip-build --filter "$EVENING" 2>&1 | tee .build/test-evening.log || status=1
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-evening.log || note "the evening ran no tests: EVENING in scripts/run-tests.sh"
# A phone calibrated by the room's chirps (a room on PulseAudio and a browser, a minute; the voice placed within
# ±10 ms by what the room measured): beside the phone's take alone. (Beside the soak as well, its placing was 8 … 18 ms
# off in two clean clones in three.)
phase "phase 4: the calibration by the room's chirps, beside the phone's take"
direct "$CALIBRATION" 2>&1 | tee .build/test-calibration.log
[ "${PIPESTATUS[0]}" -eq 0 ] || note "the calibration by the room's chirps failed (its log: .build/test-calibration.log)"
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-calibration.log || note "the calibration ran no test: CALIBRATION in scripts/run-tests.sh"
# The soak's two-minute version (`make soak` runs it for an hour on the release build): monitor with the voice chain
# and stream to nginx-rtmp on a JACK dummy server at 256 frames beside two peer jack_simple_clients on a second server.
# It judges memory (each process's own, flat within 1 MiB after the warm-up), drops, reconnects and the exit statuses;
# the xruns against the peer are printed, not judged: two minutes on a shared machine can be decided by a single stall
# of the host, which makes both servers' timers late (`make soak` judges them over an hour, alone). It runs beside the
# phone's take (a room on the virtual device and a browser, a fraction of one core).
phase "phase 4: soak (2 minutes), beside the phone's take"
python3 scripts/soak.py --binary .build/debug/liveaudio --seconds "${TEST_SOAK_SECONDS:-120}" --xruns-reported-only --out .build/soak 2>&1 \
    | tee .build/test-soak.log
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
phase "phase 4: PipeWire, beside the phone's take"
direct "$PIPEWIRE" 2>&1 | tee .build/test-pipewire.log
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-pipewire.log || note "the PipeWire tests ran none: PIPEWIRE in scripts/run-tests.sh"
phase "phase 4: the phone whose clock runs fast"
wait "$drift" || note "the phone whose clock runs fast exited with status $? (its log: .build/test-drift.log)"
drift=''
cat .build/test-drift.log
grep -qE "Test run with [1-9][0-9]* tests? " .build/test-drift.log || note "the phone whose clock runs fast ran no test: DRIFT in scripts/run-tests.sh"
# The API documentation (DocC, every warning an error, every public symbol documented) and the Examples/ package (its
# own build of LiveAudio; the offline example's WAV read by ffprobe): builds, CPU-bound, once the phone's take is over.
# (Beside its last minutes, even at nice 19, the page's audio came seconds late in two clean clones and in CI.)
phase "phase 4: the API documentation and the examples"
SWIFT=$SWIFT scripts/docs.sh > .build/test-docs.log 2>&1; echo "docs: exit $?" >> .build/test-docs.log
SWIFT=$SWIFT scripts/examples.sh > .build/test-examples.log 2>&1; echo "examples: exit $?" >> .build/test-examples.log
cat .build/test-docs.log .build/test-examples.log
grep -q "^docs: exit 0$" .build/test-docs.log || note "the API documentation failed (its log: .build/test-docs.log)"
grep -q "^examples: exit 0$" .build/test-examples.log || note "the examples failed (their log: .build/test-examples.log)"
echo "== all phases: $(( SECONDS - started )) s =="
if [ "$status" -ne 0 ]; then
    echo
    echo "== what failed =="
    [ ${#notes[@]} -eq 0 ] || printf '%s\n' "${notes[@]}"
    grep -hE "✘|(^|: )error:|Fatal error|the fuzz build failed|crashed|^fuzz-smoke: .* ([1-9][0-9]* crashes|[0-9]+ crashes, [1-9][0-9]* hangs)|^crash:|^hang:|^fuzz: .*FAILED|fuzz invariant|^SUMMARY|^soak: FAILED|^soak: .* exited|^examples: FAILED|^docs-check: [0-9]+ problem|^ls: cannot" .build/test-compute.log .build/test-load.log .build/test-fuzz.log \
        .build/test-libfuzzer.log .build/test-docs.log .build/test-examples.log \
        .build/test-realtime.log .build/test-karaoke.log .build/test-phones.log .build/test-evening.log .build/test-soak.log .build/test-drift.log .build/test-calibration.log \
        .build/test-pipewire.log | head -80
fi
exit "$status"
