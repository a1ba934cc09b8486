# LiveAudio — the two commands: `make demo` and `make test`. Each installs what is missing first.
SHELL := /bin/bash
export PATH := /opt/swift/usr/bin:$(PATH)
SWIFT ?= swift
OUT ?= out
# Release builds link the Swift runtime and Foundation statically: the tool starts in 6 ms instead of 13.
RELEASE := -c release --static-swift-stdlib

.PHONY: demo test bench soak fuzz fuzz-corpus fuzz-smoke sanitize docs examples api-check build release deps-demo deps-test deps-bench deps-soak clean

demo: deps-demo
	$(SWIFT) build $(RELEASE) --product liveaudio
	@mkdir -p $(OUT)
	@test -f Examples/graphs/voice.wav || scripts/make-demo-voice.sh Examples/graphs/voice.wav
	.build/release/liveaudio render Examples/graphs/mix.json -o $(OUT)/mix.wav
	.build/release/liveaudio info $(OUT)/mix.wav
	.build/release/liveaudio render Examples/graphs/voice-file-chain.json -o $(OUT)/voice-chain.wav
	scripts/demo-stream.sh $(OUT)
	scripts/demo-karaoke.sh $(OUT)

test: deps-test
	$(SWIFT) build --build-tests
	SWIFT=$(SWIFT) scripts/run-tests.sh

bench: deps-bench
	scripts/bench.sh

# The soak (docs/reliability.md): monitor with the voice chain and stream to nginx-rtmp on a JACK dummy server at 256
# frames for SOAK_SECONDS (default 3600) beside two peer jack_simple_clients on a second server; logs in $(OUT)/soak,
# the CSV and plot in docs/soak.csv and docs/soak.png. Fails when memory moves more than 1 MiB after warm-up, anything
# drops, or our server shows its clients more xruns than the peer's server shows its two.
# Debian's python3, which has the python3-matplotlib that deps-soak installs (a python3 earlier in PATH may not).
SOAK_PYTHON ?= $(if $(wildcard /usr/bin/python3),/usr/bin/python3,python3)
soak: deps-soak
	$(SWIFT) build $(RELEASE) --product liveaudio
	$(SOAK_PYTHON) scripts/soak.py --binary .build/release/liveaudio --seconds $${SOAK_SECONDS:-3600} --out $(OUT)/soak \
	    --plot docs/soak.png; status=$$?; cp $(OUT)/soak/soak.csv docs/soak.csv 2>/dev/null; exit $$status

# Coverage-guided fuzzing (libFuzzer + AddressSanitizer) of every parser of untrusted bytes, FUZZ_SECONDS per target
# (default 60); results in .build-fuzz/results.tsv, failing inputs in .build-fuzz/crashes/. See docs/reliability.md.
fuzz: deps-test
	SWIFT=$(SWIFT) FUZZ_SECONDS=$${FUZZ_SECONDS:-60} scripts/fuzz.sh

# The concurrency-heavy suites under ThreadSanitizer, the parsers and codecs under AddressSanitizer (docs/reliability.md).
sanitize: deps-test
	SWIFT=$(SWIFT) scripts/sanitize.sh

# Rewrites the fuzz targets' seed corpora and dictionaries (Fuzz/) from the formats' specifications and FFmpeg.
fuzz-corpus: deps-test
	python3 scripts/make-fuzz-corpus.py

# Mutation run over every input kind through probe, encode and render: 10,000 inputs, 0 crashes, 0 hangs.
fuzz-smoke: deps-test
	$(SWIFT) build $(RELEASE) --product liveaudio
	python3 scripts/fuzz-smoke.py --binary .build/release/liveaudio --inputs $${FUZZ_INPUTS:-10000} --seed $${FUZZ_SEED:-1}

# The API documentation (DocC, through swift-docc-plugin) of every library module into .build/docs, for static
# hosting, with warnings as errors and every public symbol documented (docs/api.md). `make test` runs it.
docs: deps-test
	SWIFT=$(SWIFT) scripts/docs.sh

# Builds the Examples/ package and runs its offline example (Examples/README.md). `make test` runs it.
examples: deps-test
	SWIFT=$(SWIFT) scripts/examples.sh

# The public API against a base: BASE=<tag or commit>, by default the last release tag, else the commit of the last
# release in CHANGELOG.md. Fails on a breaking change (README: versions).
api-check: deps-test
	SWIFT=$(SWIFT) scripts/api-check.sh $(BASE)

build:
	$(SWIFT) build

deps-demo:
	@scripts/install-deps.sh demo
deps-test:
	@scripts/install-deps.sh test
deps-bench:
	@scripts/install-deps.sh bench
deps-soak:
	@scripts/install-deps.sh soak

clean:
	rm -rf .build $(OUT) Benchmarks/.build Examples/.build
