import Benchmark
import LiveAudio

/// A chain of `count` gain units (0 dB, not ramping) from a constant source to the output.
func gainChain(count: Int, frames: Int) throws -> OfflineRenderer {
    let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let graph = try RenderGraph(format: format, maximumFrames: frames)
    let source = PCMBuffer(channels: [Array(repeating: 0.25, count: 4096), Array(repeating: 0.25, count: 4096)])
    var previous = try graph.addNode(BufferPlayerUnit(buffer: source, sampleRate: 48_000, loop: true))
    for _ in 0..<count {
        let g = try graph.addNode(GainUnit(format: format, gain: 0))
        try graph.connect(previous, to: g)
        previous = g
    }
    try graph.connect(previous, to: graph.output)
    try graph.initialize()
    return OfflineRenderer(graph: graph)
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal], warmupIterations: 100, scalingFactor: .kilo,
        maxDuration: .seconds(3))

    // The engine's own cost per node per cycle: a 64-node gain chain minus 64 gain kernels run back to back
    // (the 1-node chain's cost per node includes the same per-cycle overheads once).
    for frames in [128, 1024] {
        for nodes in [1, 64] {
            Benchmark("gain chain, \(nodes) node(s), \(frames) frames, stereo") { benchmark in
                let renderer = try gainChain(count: nodes, frames: frames)
                benchmark.startMeasurement()
                for _ in benchmark.scaledIterations { blackHole(try renderer.render(frames: frames)) }
            }
        }
    }

    // The DSP alone: the same 64 gain kernels called directly on one buffer, no graph.
    for frames in [128, 1024] {
        Benchmark("64 gain kernels called directly, \(frames) frames, stereo") { benchmark in
            let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
            let units = try (0..<64).map { _ in try GainUnit(format: format, gain: 0) }
            for u in units { try u.prepare(RenderSpec(sampleRate: 48_000, maximumFrames: frames)) }
            let a = PCMBuffer(channels: [Array(repeating: 0.25, count: frames), Array(repeating: 0.25, count: frames)])
            let b = PCMBuffer(channelCount: 2, capacity: frames)
            var inputs = [a.view(frames: frames)]
            var outputs = [b.view(frames: frames)]
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                inputs.withUnsafeBufferPointer { i in
                    outputs.withUnsafeBufferPointer { o in
                        let context = RenderContext(
                            frameCount: frames, timeStamp: RenderTimeStamp(sampleTime: 0), inputs: i, outputs: o)
                        for u in units { u.render(context) }
                    }
                }
                blackHole(b)
            }
            inputs.removeAll()
            outputs.removeAll()
        }
    }

    effectBenchmarks()

    Benchmark("mixer 8 inputs + tone + noise, 128 frames") { benchmark in
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let graph = try RenderGraph(format: format, maximumFrames: 128)
        let mixer = try graph.addNode(MixerUnit(format: format, inputs: 8))
        for bus in 0..<8 {
            let source: RenderUnit =
                bus % 2 == 0
                ? try ToneUnit(format: format, frequency: Float(220 * (bus + 1)), amplitude: 0.1)
                : try NoiseUnit(format: format, amplitude: 0.05, seed: UInt64(bus))
            try graph.connect(try graph.addNode(source), to: mixer, inputBus: bus)
        }
        try graph.connect(mixer, to: graph.output)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { blackHole(try renderer.render(frames: 128)) }
    }
}
