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
        example("offline-render", in: "OfflineRender"),
        example("ear-monitor", in: "EarMonitor"),
        example("live-stream", in: "LiveStream"),
        example("karaoke-volume", in: "KaraokeVolume"),
    ]
)

/// An executable that uses LiveAudio, its sources in Sources/`folder`.
func example(_ name: String, in folder: String) -> Target {
    .executableTarget(
        name: name, dependencies: [.product(name: "LiveAudio", package: "LiveAudio")], path: "Sources/\(folder)",
        swiftSettings: [.swiftLanguageMode(.v6)])
}
