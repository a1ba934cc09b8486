#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser that reads untrusted bytes (Tests/Support/FuzzTargets): builds the
# LiveAudioFuzz executable with libFuzzer and AddressSanitizer (`-sanitize=fuzzer,address`, in .build-fuzz/), then
# runs each target for FUZZ_SECONDS (default 60) from its seed corpus (Fuzz/corpus/TARGET, made by
# scripts/make-fuzz-corpus.py) and its regression inputs (Fuzz/regressions/TARGET), with its dictionary.
#
# New inputs that reach new code go to .build-fuzz/corpus/TARGET (kept between runs; the seeds are not touched). A crash,
# a broken invariant, a leak, a timeout (10 s) or 2 GiB of memory is a failure: its input is written to
# .build-fuzz/crashes/ and the command that replays it is printed; copy it into Fuzz/regressions/TARGET/ with the fix,
# and `make test` replays it from then on. Results (executions, coverage, crashes) go to .build-fuzz/results.tsv.
#
# Usage: scripts/fuzz.sh [TARGET...]
#   FUZZ_SECONDS=N   seconds per target (default 60)
#   FUZZ_RUNS=N      stop a target after N executions instead, FUZZ_SECONDS still the limit (the long run:
#                    FUZZ_RUNS=1000000 FUZZ_SECONDS=7200)
#   FUZZ_JOBS=N      targets run side by side (default 1; CI runs 2, one a core)
#   FUZZ_BUILD=0     use the binary already built (two runs side by side on two cores)
#   FUZZ_CONFIG=C    release (the default: about three times the executions a second) or debug (built in two thirds of
#                    the time: `make test`'s ten seconds a target are a smoke test, the long runs `make fuzz`'s)
#   FUZZ_RESULTS=F   where the table goes (default .build-fuzz/results.tsv)
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
config=${FUZZ_CONFIG:-release}
scratch=.build-fuzz
if [ "${FUZZ_BUILD:-1}" != 0 ] && ! $SWIFT build -c "$config" --product LiveAudioFuzz --scratch-path "$scratch" \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 | tail -3; then
    echo "fuzz: the fuzz build failed"
    exit 1
fi
bin=$scratch/$config/LiveAudioFuzz
test -x "$bin" || { echo "fuzz: no $bin after the build"; exit 1; }
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(ls Fuzz/corpus)
fi
mkdir -p "$scratch/crashes"
results=${FUZZ_RESULTS:-$scratch/results.tsv}
runs_flag=()
[ -n "${FUZZ_RUNS:-}" ] && runs_flag=(-runs="$FUZZ_RUNS")
printf "target\tseconds\texecutions\texec_per_s\tcoverage\tfeatures\tcorpus\tresult\n" > "$results"
# One target: its run, its row of the table (in $scratch/rows/TARGET), and what failed.
fuzz_target() {
    local t=$1 work=$scratch/corpus/$1 log=$scratch/$1.log
    mkdir -p "$work" "Fuzz/regressions/$t"
    # Leaks are checked (libFuzzer's -detect_leaks, on by default): a parser that loses memory on bad input loses it
    # on every bad file a user opens.
    # Swift's own crash reporter is off: ASan takes its reads of the crashed stack for an error of their own.
    # Deterministic hashing: dictionary order (graph files' error messages) is the same for every run of an input.
    FUZZ_TARGET=$t ASAN_OPTIONS=allocator_may_return_null=1 SWIFT_BACKTRACE=enable=no SWIFT_DETERMINISTIC_HASHING=1 "$bin" \
        -max_total_time="$seconds" "${runs_flag[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -dict="Fuzz/dictionaries/$t.dict" -artifact_prefix="$scratch/crashes/$t-" \
        "$work" "Fuzz/corpus/$t" "Fuzz/regressions/$t" > "$log" 2>&1
    local rc=$? runs cov ft corp took rate result artifact
    runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
    cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+")
    ft=$(grep -oE "ft: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+")
    corp=$(grep -oE "corp: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+")
    took=$(grep -oE "Done [0-9]+ runs in [0-9]+ second" "$log" | grep -oE "in [0-9]+" | grep -oE "[0-9]+" | tail -1)
    took=${took:-$seconds}
    rate=$(( ${runs:-0} / (took > 0 ? took : 1) ))
    if [ $rc -eq 0 ]; then
        result=ok
    else
        result=FAILED
        artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //')
        {
            echo "fuzz: $t FAILED (exit $rc); the log is $log"
            grep -E "Fatal error|fuzz invariant|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|SUMMARY" "$log" | head -5
            if [ -n "$artifact" ]; then
                echo "fuzz: replay with: FUZZ_TARGET=$t $bin $artifact   (then keep it: cp $artifact Fuzz/regressions/$t/)"
            fi
        } > "$scratch/rows/$t.failure"
        cat "$scratch/rows/$t.failure"
    fi
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$t" "$took" "${runs:-0}" "$rate" "${cov:-0}" "${ft:-0}" "${corp:-0}" "$result" > "$scratch/rows/$t"
    echo "fuzz: $t: ${runs:-0} executions in ${took} s, coverage ${cov:-0} edges, ${ft:-0} features, corpus ${corp:-0}: $result"
}
# FUZZ_JOBS targets at a time (each a process on a core of its own: every target still gets FUZZ_SECONDS).
rm -rf "$scratch/rows"
mkdir -p "$scratch/rows"
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    fuzz_target "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
    # A target with no row (its job died) fails like one that found something.
    [ -f "$scratch/rows/$t" ] || printf "%s\t0\t0\t0\t0\t0\t0\tFAILED\n" "$t" > "$scratch/rows/$t"
    cat "$scratch/rows/$t" >> "$results"
    grep -q "FAILED" "$scratch/rows/$t" && status=1
done
if command -v column > /dev/null; then column -t -s $'\t' "$results"; else cat "$results"; fi
exit $status
