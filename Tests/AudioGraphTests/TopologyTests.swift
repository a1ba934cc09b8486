import AudioCore
import AudioGraph
import AudioUnits
import Testing
import TestSupport

@Suite struct TopologyTests {
    func expectError(
        _ code: AudioError.Code, _ fragments: [String], sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        do {
            try body()
            Issue.record("no error", sourceLocation: sourceLocation)
        } catch let error as AudioError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
            for f in fragments { #expect(error.message.contains(f), "\(error.message)", sourceLocation: sourceLocation) }
        } catch {
            Issue.record("not an AudioError: \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func connectionErrors() throws {
        let graph = try RenderGraph(format: stereo)
        let log = RenderLog()
        let a = try graph.addNode(SumUnit("a", inputs: 1, log: log), name: "a")
        let b = try graph.addNode(SumUnit("b", inputs: 1, log: log), name: "b")
        let c = try graph.addNode(SumUnit("c", inputs: 2, log: log), name: "c")
        let quad = try graph.addNode(
            ConstantUnit(1, format: StreamFormat.graph(sampleRate: 48_000, channelCount: 4)), name: "quad")
        try graph.connect(a, to: b)
        try graph.connect(b, to: c)
        expectError(.cycle, ["connecting 'c' to 'a' would create a cycle: c → a → b → c"]) { try graph.connect(c, to: a) }
        expectError(.cycle, ["a → a"]) { try graph.connect(a, to: a, inputBus: 0) }
        expectError(.formatMismatch, ["quad", "48 kHz 4 ch 32-bit float", "48 kHz stereo 32-bit float", "channel counts differ"]) {
            try graph.connect(quad, to: c, inputBus: 1)
        }
        expectError(.invalidBus, ["'c' has no input bus 5"]) { try graph.connect(a, to: c, inputBus: 5) }
        expectError(.invalidBus, ["'a' has no output bus 2"]) { try graph.connect(a, outputBus: 2, to: c, inputBus: 1) }
        let k = try graph.addNode(ConstantUnit(2), name: "k")
        expectError(.invalidState, ["already fed by 'a' output bus 0"]) { try graph.connect(k, to: b) }
        expectError(.invalidNode, ["belongs to another graph"]) {
            let other = try RenderGraph(format: stereo)
            let x = try other.addNode(ConstantUnit(0))
            try graph.connect(x, to: graph.output)
        }
        expectError(.invalidBus, ["output has one input bus"]) { try graph.connect(c, to: graph.output, inputBus: 1) }
        let shared = ConstantUnit(1)
        _ = try graph.addNode(shared)
        expectError(.invalidNode, ["already belongs to a graph"]) { _ = try graph.addNode(shared) }
        // A node may run at another rate, but only a converter joins two rates.
        let cd = try graph.addNode(ConstantUnit(1, format: StreamFormat.graph(sampleRate: 44_100, channelCount: 2)), name: "cd")
        expectError(.unsupportedSampleRate, ["'cd' (44.1 kHz)", "'b' input bus 0 (48 kHz)", "converter"]) { try graph.connect(cd, to: b) }
        // After a disconnect the input can be fed by another node.
        try graph.disconnect(b)
        try graph.connect(k, to: b)
    }

    @Test func lifecycleMisuseIsReported() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        expectError(.invalidState, ["initialize it first"]) { try graph.start() }
        expectError(.invalidState, ["not running"]) { try graph.stop() }
        expectError(.invalidState, ["not initialized"]) { try graph.uninitialize() }
        expectError(.invalidState, ["initialize the graph first"]) { _ = try OfflineRenderer(graph: graph).render(frames: 16) }
        try graph.initialize()
        expectError(.invalidState, ["already initialized"]) { try graph.initialize() }
        try graph.start()
        expectError(.invalidState, ["stop it first"]) { try graph.uninitialize() }
        expectError(.tooManyFrames, ["257"]) { _ = try OfflineRenderer(graph: graph).render(frames: 257) }
        try graph.stop()
        try graph.uninitialize()
        #expect(graph.state == .uninitialized)
        #expect(graph.renderCycle(frames: 16, timeStamp: RenderTimeStamp(sampleTime: 0)) == nil)
        #expect(throws: AudioError.self) { try RenderGraph(format: .stereo44kInt16) }
        #expect(throws: AudioError.self) { try RenderGraph(format: stereo, maximumFrames: 0) }
    }

    @Test func pullOrderRendersEachReachableNodeOnceAfterItsInputs() throws {
        let log = RenderLog()
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let src1 = try graph.addNode(SumUnit("src1", inputs: 0, log: log, offset: 1), name: "src1")
        let src2 = try graph.addNode(SumUnit("src2", inputs: 0, log: log, offset: 10), name: "src2")
        let mid = try graph.addNode(SumUnit("mid", inputs: 1, log: log), name: "mid")
        let top = try graph.addNode(SumUnit("top", inputs: 2, log: log), name: "top")
        _ = try graph.addNode(SumUnit("orphan", inputs: 0, log: log), name: "orphan")
        try graph.connect(src2, to: mid)
        try graph.connect(src1, to: top, inputBus: 0)
        try graph.connect(mid, to: top, inputBus: 1)
        try graph.connect(top, to: graph.output)
        #expect(graph.renderOrder == ["src1", "src2", "mid", "top"])
        let out = try renderOffline(graph, frames: 64, blockSizes: [32])
        #expect(log.all == ["src1", "src2", "mid", "top", "src1", "src2", "mid", "top"], "the orphan is never rendered")
        #expect(out[0].allSatisfy { $0 == 11 } && out[1].allSatisfy { $0 == 11 })
    }

    @Test func fanOutIsRenderedOncePerCycle() throws {
        let log = RenderLog()
        let graph = try RenderGraph(format: stereo, maximumFrames: 128)
        let source = try graph.addNode(SumUnit("source", inputs: 0, log: log, offset: 0.25), name: "source")
        let left = try graph.addNode(SumUnit("left", inputs: 1, log: log), name: "left")
        let right = try graph.addNode(SumUnit("right", inputs: 1, log: log), name: "right")
        let join = try graph.addNode(SumUnit("join", inputs: 3, log: log), name: "join")
        try graph.connect(source, to: left)
        try graph.connect(source, to: right)
        try graph.connect(left, to: join, inputBus: 0)
        try graph.connect(right, to: join, inputBus: 1)
        try graph.connect(source, to: join, inputBus: 2)
        try graph.connect(join, to: graph.output)
        let out = try renderOffline(graph, frames: 300, blockSizes: [100])
        #expect(log.all.filter { $0 == "source" }.count == 3, "one render of the source per cycle")
        #expect(out[0].allSatisfy { $0 == 0.75 })
    }

    @Test func renderCallbacksFeedInputs() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let mixer = try MixerUnit(format: stereo, inputs: 2)
        let m = try graph.addNode(mixer)
        let stamps = RenderLog()
        try graph.setInputCallback(m, inputBus: 0) { view, time in
            stamps.append("\(time.sampleTime):\(view.frameCount)")
            for c in 0..<view.channelCount {
                for i in 0..<view.frameCount { view[c][i] = Float(time.sampleTime + Int64(i)) / 1000 }
            }
        }
        // A client callback in Int16 interleaved; the graph converts exactly (value / 32768).
        let client = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
        try graph.setInputCallback(m, inputBus: 1, format: client) { raw, _ in
            let p = raw.base.assumingMemoryBound(to: Int16.self)
            for i in 0..<raw.frameCount {
                p[2 * i] = 1024
                p[2 * i + 1] = -2048
            }
        }
        #expect(throws: AudioError.self) {
            try graph.setInputCallback(m, inputBus: 1) { _, _ in }
        }
        #expect(throws: AudioError.self) {
            try graph.setInputCallback(m, inputBus: 0, format: .stereo44kInt16) { _, _ in }
        }
        try graph.connect(m, to: graph.output)
        let out = try renderOffline(graph, frames: 100, blockSizes: [64, 36])
        #expect(stamps.all == ["0:64", "64:36"])
        for i in 0..<100 {
            #expect(abs(out[0][i] - (Float(i) / 1000 + 1024.0 / 32768)) < 1e-6)
            #expect(abs(out[1][i] - (Float(i) / 1000 - 2048.0 / 32768)) < 1e-6)
        }
    }

    @Test func monoSourceIsCopiedToBothChannels() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let tone = try graph.addNode(ToneUnit(format: mono, frequency: 1000, amplitude: 0.5))
        let gain = try graph.addNode(GainUnit(format: stereo, gain: 0))
        try graph.connect(tone, to: gain)
        try graph.connect(gain, to: graph.output)
        let out = try renderOffline(graph, frames: 480, blockSizes: [64])
        #expect(out[0] == out[1])
        #expect(out[0].map(abs).max()! > 0.49)
    }

    @Test func unconnectedOutputIsSilence() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        _ = try graph.addNode(ConstantUnit(1))
        let out = try renderOffline(graph, frames: 64)
        #expect(out[0].allSatisfy { $0 == 0 } && out[1].allSatisfy { $0 == 0 })
    }

    @Test func bypassPassesInputThrough() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let source = try graph.addNode(ConstantUnit(0.5))
        let gainUnit = try GainUnit(format: stereo, gain: -20)
        let gain = try graph.addNode(gainUnit)
        try graph.connect(source, to: gain)
        try graph.connect(gain, to: graph.output)
        gainUnit.isBypassed = true
        #expect(try gainUnit.property("bypass") == .bool(true))
        let out = try renderOffline(graph, frames: 64)
        #expect(out[0].allSatisfy { $0 == 0.5 })
    }
}
