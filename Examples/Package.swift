// swift-tools-version: 6.2
// Small programs built on LiveAudio, one executable each, to copy into a package of your own. Build them all with
// `swift build` here; each one's source says what it does and how to run it (see README.md).
import PackageDescription

let package = Package(
    name: "LiveAudioExamples",
    platforms: [.macOS(.v15)],
    dependencies: [
        // In a package of your own: .package(url: "<where LiveAudio is published>", from: "0.1.0")
        .package(name: "LiveAudio", path: ".."),
    ],
    targets: [
        .executableTarget(
            name: "offline-render", dependencies: [.product(name: "LiveAudio", package: "LiveAudio")],
            path: "Sources/OfflineRender", swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "ear-monitor", dependencies: [.product(name: "LiveAudio", package: "LiveAudio")],
            path: "Sources/EarMonitor", swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "live-stream", dependencies: [.product(name: "LiveAudio", package: "LiveAudio")],
            path: "Sources/LiveStream", swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "karaoke-volume", dependencies: [.product(name: "LiveAudio", package: "LiveAudio")],
            path: "Sources/KaraokeVolume", swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
