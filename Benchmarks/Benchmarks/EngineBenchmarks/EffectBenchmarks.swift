import Benchmark
import Foundation
import LiveAudio

/// 128-frame cycles at 48 kHz stereo of `player → unit → output` (or `player → output` with no unit) over a
/// looping 4-second, music-like signal (noise shaped by a moving gain, plus two tones), so detectors and filters
/// see changing material. ns per channel-sample = (cycle time − the no-unit cycle time) / 256.
func effectRenderer(_ unit: RenderUnit?) throws -> OfflineRenderer {
    let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let graph = try RenderGraph(format: format, maximumFrames: 128)
    var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
    func noise() -> Float {
        seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Float(Int32(truncatingIfNeeded: seed >> 32)) / Float(Int32.max)
    }
    let frames = 4 * 48_000
    let channels = (0..<2).map { c in
        (0..<frames).map { i -> Float in
            let t = Double(i) / 48_000
            let envelope: Double = 0.5 + 0.5 * sin(2 * Double.pi * 1.3 * t + Double(c))
            let tones: Double = 0.2 * sin(2 * Double.pi * 220 * t) + 0.1 * sin(2 * Double.pi * 1760 * t)
            return Float(0.3 * envelope) * noise() + Float(tones)
        }
    }
    let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: channels), sampleRate: 48_000, loop: true))
    if let unit {
        let node = try graph.addNode(unit)
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
    } else {
        try graph.connect(player, to: graph.output)
    }
    try graph.initialize()
    return OfflineRenderer(graph: graph)
}

func effectBenchmarks() {
    let format = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let cases: [(String, () throws -> RenderUnit?)] = [
        ("no unit (baseline)", { nil }),
        ("eq, 1 peak band", { try EQUnit(format: format, bands: [EQBand(.peak, frequency: 1000, gain: 6, q: 1)]) }),
        ("eq, 3 bands", {
            try EQUnit(format: format, bands: [
                EQBand(.highPass, frequency: 90), EQBand(.peak, frequency: 3000, gain: 3, q: 1),
                EQBand(.highShelf, frequency: 10_000, gain: 2),
            ])
        }),
        ("lowpass", { try LowPassUnit(format: format, cutoff: 5000) }),
        ("dynamics", {
            let u = try DynamicsUnit(format: format)
            try u.setParameter("threshold", -24)
            try u.setParameter("knee", 6)
            return u
        }),
        ("limiter", { let u = try LimiterUnit(format: format); try u.setParameter("ceiling", -6); return u }),
        ("reverb", { try ReverbUnit(format: format) }),
        ("delay", { let u = try DelayUnit(format: format); try u.setParameter("delayTime", 0.25); return u }),
    ]
    for (name, make) in cases {
        Benchmark("effect: \(name), 128 frames stereo") { benchmark in
            let renderer = try effectRenderer(make())
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { blackHole(try renderer.render(frames: 128)) }
        }
    }
}
