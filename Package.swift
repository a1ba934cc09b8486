// swift-tools-version: 6.2
// LiveAudio: a real-time audio stack for Linux — capture, a graph of effects and mixers, monitoring,
// AAC encoding and live streaming.
import PackageDescription

/// Warnings are errors in debug builds (what `make test` builds). Through the warning-control setting rather than the
/// compiler flag: SwiftPM suppresses a remote dependency's warnings, which the flag would contradict in the build of
/// a package that depends on LiveAudio by URL.
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .treatAllWarnings(as: .error, .when(configuration: .debug)),
]
/// The modules whose code runs on the device thread every cycle (buffers and vector kernels, the graph's schedule, the
/// units' DSP) are optimized in debug builds too: the tests run them against real sound servers with real deadlines,
/// and unoptimized, a karaoke cycle took thirty times the CPU (80 % of it in two SIMD kernels run through generics).
let realTime: [SwiftSetting] = strict + [.unsafeFlags(["-O"], .when(configuration: .debug))]

let package = Package(
    name: "LiveAudio",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "LiveAudio", targets: ["LiveAudio"]),
        .library(name: "AudioCore", targets: ["AudioCore"]),
        .library(name: "AudioGraph", targets: ["AudioGraph"]),
        .library(name: "AudioUnits", targets: ["AudioUnits"]),
        .library(name: "MediaContainers", targets: ["MediaContainers"]),
        .library(name: "AudioDevices", targets: ["AudioDevices"]),
        .library(name: "AudioCodecs", targets: ["AudioCodecs"]),
        .library(name: "RTMP", targets: ["RTMP"]),
        .library(name: "SingAlong", targets: ["SingAlong"]),
        .library(name: "LiveAudioStage", targets: ["LiveAudioStage"]),
        .library(name: "SongLibrary", targets: ["SongLibrary"]),
        .library(name: "StageCertificates", targets: ["StageCertificates"]),
        .executable(name: "liveaudio", targets: ["LiveAudioCLI"]),
        // Test support: preloaded by the allocation probe to count lock waits and frees on real-time threads.
        .library(name: "LiveAudioSyncProbe", type: .dynamic, targets: ["CSyncProbe"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/ordo-one/malloc-interposer", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        // The stage's own certificate for HTTPS on a local network: a P-256 key (swift-crypto), a self-signed X.509
        // certificate (swift-certificates). Only the tool links them (StageCertificates).
        .package(url: "https://github.com/apple/swift-certificates", from: "1.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        // The song library, the queue and the scores: SQLite (Debian's libsqlite3-dev) in WAL mode, FTS5 search.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // `make docs`: the DocC catalogues (docs/api.md).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // Formats, buffers, conversion, errors, parameters, ring buffers, WAV I/O.
        .target(name: "AudioCore", dependencies: ["CSystemCalls", "CSoxr"], swiftSettings: realTime),
        // libsoxr (module map + shim header): sample-rate conversion.
        .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
        // librubberband (module map + shim header): time-stretching and pitch-shifting (GPL-2+).
        .systemLibrary(name: "CRubberBand", pkgConfig: "rubberband", providers: [.apt(["librubberband-dev"])]),
        // A small extern "C" API (C++) over WebRTC's audio processing module (BSD-3, Debian
        // libwebrtc-audio-processing-dev, installed by scripts/install-deps.sh): what the voiceProcessing unit calls.
        // The module's include path is given directly rather than through its pkg-config file, whose -D flags SwiftPM
        // would drop with a warning on every build (the shim defines them itself).
        .target(
            name: "CVoiceProcessing",
            cxxSettings: [.unsafeFlags(["-I/usr/include/webrtc_audio_processing"])],
            linkerSettings: [.linkedLibrary("webrtc_audio_processing")]),
        // Container formats: WAV (read incrementally, written in a streaming way).
        .target(name: "MediaContainers", dependencies: ["AudioCore", "CSystemCalls"], swiftSettings: strict),
        // The unit model, graph topology, compiled render schedules and their exchange, offline output.
        .target(name: "AudioGraph", dependencies: ["AudioCore", "CFloatEnvironment"], swiftSettings: realTime),
        // Flush-to-zero for the render thread (C, header only).
        .target(name: "CFloatEnvironment"),
        // System calls Swift's Glibc module leaves out (C).
        .target(name: "CSystemCalls"),
        // The units: generators, mixer, gain, players, effects, converter, time-pitch, voice processing.
        .target(
            name: "AudioUnits",
            dependencies: ["AudioCore", "AudioGraph", "MediaContainers", "AudioCodecs", "CRubberBand", "CVoiceProcessing"],
            swiftSettings: realTime),
        // libasound and libjack (module map + shim header each).
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CJACK", pkgConfig: "jack", providers: [.apt(["libjack-jackd2-dev"])]),
        // libqrencode (module map + shim header): the QR code of the stage's join address.
        .systemLibrary(name: "CQRencode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        // FFmpeg's libraries: their headers (Debian's libavcodec-dev, libavformat-dev, libavutil-dev,
        // libswresample-dev), the libraries loaded with dlopen when first needed (Sources/CFFmpeg/include/CFFmpeg.h).
        .target(name: "CFFmpeg", linkerSettings: [.linkedLibrary("dl")]),
        // PipeWire's client library (libpipewire-0.3): its headers from Debian's libpipewire-0.3-dev, the library loaded
        // with dlopen when first needed, so the tool starts where PipeWire is absent (Sources/CPipeWire/include/
        // CPipeWire.h). A C target rather than a pkg-config system library: pkg-config would link the library.
        .target(
            name: "CPipeWire",
            cSettings: [.unsafeFlags(["-I/usr/include/pipewire-0.3", "-I/usr/include/spa-0.2"])],
            linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("m")]),
        // Codecs through FFmpeg: the AAC-LC encoder and its worker, decoding any audio file, the MP4 muxer.
        .target(name: "AudioCodecs", dependencies: ["AudioCore", "MediaContainers", "CFFmpeg"], swiftSettings: strict),
        // Devices: ALSA, JACK, PipeWire and virtual (WAV) backends, the I/O unit, microphone source, latency measurement.
        .target(
            name: "AudioDevices",
            dependencies: ["AudioCore", "AudioGraph", "MediaContainers", "CALSA", "CJACK", "CPipeWire", "CSystemCalls"],
            swiftSettings: strict
        ),
        // RTMP publishing: URLs, handshake, chunk streams, messages, the publisher on SwiftNIO (rtmps through
        // swift-nio-ssl), its send queue, reconnection and statistics.
        .target(
            name: "RTMP",
            dependencies: [
                "AudioCore", "MediaContainers",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        // Singing along: song charts (UltraStar TXT, LRC lyrics) and the singing score.
        .target(name: "SingAlong", dependencies: ["AudioCore"], swiftSettings: strict),
        // The evening's memory: a library of songs (UltraStar folders, audio files with or without LRC) indexed into
        // SQLite with full-text search, the queue of singers and the scores, through GRDB. Kept out of the core.
        .target(
            name: "SongLibrary",
            dependencies: ["AudioCore", "SingAlong", "CSystemCalls", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strict),
        // Umbrella module: re-exports the above, graph files, offline rendering to files.
        .target(
            name: "LiveAudio",
            dependencies: [
                "AudioCore", "AudioGraph", "AudioUnits", "MediaContainers", "AudioDevices", "AudioCodecs", "RTMP",
                "SingAlong", "CSystemCalls",
            ],
            swiftSettings: strict),
        // The web stage: a page for the room (lyrics, pitch lane, meters, controls) served over HTTP and a WebSocket
        // while a session runs, on SwiftNIO's HTTP/1 and WebSocket handlers; the page's files (Web/) are compiled in
        // (StageFiles.swift, by scripts/stage-files.py). Kept out of the core: the tool and whoever wants a stage.
        .target(
            name: "LiveAudioStage",
            dependencies: [
                "AudioCore", "LiveAudio", "SongLibrary", "CQRencode",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            exclude: ["Web"],
            swiftSettings: strict),
        // The stage's certificate, made and kept (HTTPS off 127.0.0.1): apart from the stage, so that what links the
        // stage alone (the fuzz targets, a library user with a certificate of their own) builds no second TLS library.
        .target(
            name: "StageCertificates",
            dependencies: [
                "AudioCore", .product(name: "X509", package: "swift-certificates"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict),
        // The command-line tool: the product `liveaudio`, its sources in Sources/LiveAudioCLI (a folder that differs
        // from Sources/LiveAudio by more than case).
        .executableTarget(
            name: "LiveAudioCLI",
            dependencies: [
                "LiveAudio", "LiveAudioStage", "StageCertificates", "SongLibrary", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),

        // Test support: counts allocations made on chosen threads (with the malloc interposer preloaded).
        .target(name: "CAllocationProbe", path: "Tests/Support/CAllocationProbe", linkerSettings: [.linkedLibrary("dl")]),
        // Test support: counts lock waits and frees on chosen threads (a library to preload; see sync_probe.h).
        .target(name: "CSyncProbe", path: "Tests/Support/CSyncProbe", linkerSettings: [.linkedLibrary("dl")]),
        .executableTarget(
            name: "AllocationProbe",
            dependencies: [
                "LiveAudio", "CAllocationProbe",
                .product(name: "MallocInterposerSwift", package: "malloc-interposer"),
            ],
            path: "Tests/Support/AllocationProbe",
            swiftSettings: strict
        ),

        // The docs' Swift samples, compiled (generated by scripts/doc-samples.py; a test checks it is up to date). An
        // unused value in a sample is no fault of the docs: warnings are not shown for it.
        .target(
            name: "DocSamples", dependencies: ["LiveAudio"], path: "Tests/Support/DocSamples",
            swiftSettings: [.swiftLanguageMode(.v6), .unsafeFlags(["-suppress-warnings"])]),

        // Test support: sessions in a process of their own — the threads a take runs, what a stop leaves behind.
        .executableTarget(name: "SessionProbe", dependencies: ["LiveAudio", "CAllocationProbe"], path: "Tests/Support/SessionProbe", swiftSettings: strict),

        // Benchmark: search as you type over a song library (`make bench`).
        .executableTarget(name: "LibraryLoad", dependencies: ["SongLibrary"], path: "Tests/Support/LibraryLoad", swiftSettings: strict),

        // Benchmark: N RTMP streams from one process to a local server (`make bench`).
        .executableTarget(name: "RTMPLoad", dependencies: ["LiveAudio"], path: "Tests/Support/RTMPLoad", swiftSettings: strict),

        // Fuzz targets: every parser that reads untrusted bytes, with its invariants (Tests/Support/FuzzTargets), as
        // one executable: a libFuzzer binary when built by scripts/fuzz.sh (-sanitize=fuzzer,address -D FUZZING),
        // a replayer of files otherwise. The tests replay the corpora and regressions through FuzzTargets.
        .target(name: "FuzzTargets", dependencies: ["LiveAudio", "LiveAudioStage"], path: "Tests/Support/FuzzTargets", swiftSettings: strict),
        .target(name: "CLibFuzzer", path: "Tests/Support/CLibFuzzer"),
        .executableTarget(
            name: "LiveAudioFuzz", dependencies: ["FuzzTargets", "CLibFuzzer"], path: "Tests/Support/LiveAudioFuzz", swiftSettings: strict),

        // Test helpers: processes, FFmpeg as the reference decoder, temporary folders.
        .target(name: "CTestSpawn", path: "Tests/Support/CTestSpawn"),
        .target(name: "TestSupport", dependencies: ["LiveAudio", "CTestSpawn"], path: "Tests/Support/TestSupport", swiftSettings: strict),

        .testTarget(name: "AudioCoreTests", dependencies: ["AudioCore", "MediaContainers", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "AudioGraphTests", dependencies: ["AudioGraph", "AudioUnits", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "AudioUnitsTests", dependencies: ["AudioUnits", "LiveAudio", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "AudioCodecsTests", dependencies: ["AudioCodecs", "LiveAudio", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "AudioDevicesTests", dependencies: ["AudioDevices", "CPipeWire", "LiveAudio", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "RTMPTests", dependencies: ["RTMP", "LiveAudio", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SingAlongTests", dependencies: ["SingAlong", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "SongLibraryTests", dependencies: ["SongLibrary", "TestSupport", "LiveAudioCLI"], swiftSettings: strict),
        .testTarget(
            name: "LiveAudioTests",
            dependencies: [
                "LiveAudio", "LiveAudioStage", "StageCertificates", "TestSupport", "LiveAudioCLI", "AllocationProbe", "SessionProbe", "DocSamples",
                "FuzzTargets",
            ],
            swiftSettings: strict
        ),
    ]
)
