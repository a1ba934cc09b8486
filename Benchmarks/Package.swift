// swift-tools-version: 6.1
// LiveAudio's benchmarks (ordo-one/benchmark), a package of their own so the main build stays lean.
// Run with `make bench` from the repository root, or `swift package benchmark` here.
import PackageDescription

let package = Package(
    name: "LiveAudioBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "EngineBenchmarks",
            dependencies: [
                .product(name: "LiveAudio", package: "main"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/EngineBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
