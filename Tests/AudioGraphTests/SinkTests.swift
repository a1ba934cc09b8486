import AudioCore
import AudioGraph
import AudioUnits
import Foundation
import Testing
import TestSupport

/// Sinks: nodes the schedule renders every cycle whether or not they lead to the output.
@Suite struct SinkTests {
    /// source → output, and source → meter, where the meter leads nowhere.
    func graphWithMeter(_ log: RenderLog) throws -> (RenderGraph, source: NodeID, meter: NodeID) {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let source = try graph.addNode(SumUnit("source", inputs: 0, log: log, offset: 0.5), name: "source")
        let meter = try graph.addNode(SumUnit("meter", inputs: 1, log: log), name: "meter")
        try graph.connect(source, to: graph.output)
        try graph.connect(source, to: meter)
        return (graph, source, meter)
    }

    @Test func aSinkRendersEveryCycleAfterItsInputsWithoutChangingTheOutput() throws {
        let log = RenderLog()
        let (graph, _, meter) = try graphWithMeter(log)
        let before = try renderOffline(graph, frames: 64, blockSizes: [32])
        #expect(log.all == ["source", "source"], "a node that leads nowhere is not rendered")
        log.clear()
        try graph.uninitialize()
        try graph.addSink(meter)
        #expect(graph.sinks == [meter])
        #expect(graph.renderOrder == ["source", "meter"])
        let after = try renderOffline(graph, frames: 96, blockSizes: [32])
        #expect(log.all == ["source", "meter", "source", "meter", "source", "meter"])
        #expect(after[0].allSatisfy { $0 == 0.5 } && before[0].allSatisfy { $0 == 0.5 })
    }

    @Test func aSinkThatAlsoReachesTheOutputRendersOnceACycle() throws {
        let log = RenderLog()
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let source = try graph.addNode(SumUnit("source", inputs: 0, log: log, offset: 1), name: "source")
        let gain = try graph.addNode(SumUnit("pass", inputs: 1, log: log), name: "pass")
        try graph.connect(source, to: gain)
        try graph.connect(gain, to: graph.output)
        try graph.addSink(gain)
        try graph.addSink(gain)  // a second time: nothing changes
        #expect(graph.sinks == [gain])
        _ = try renderOffline(graph, frames: 64, blockSizes: [64])
        #expect(log.all == ["source", "pass"])
    }

    @Test func aSinkWithNoOutputConnectionRendersItsWholeUpstream() throws {
        let log = RenderLog()
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let silentOutput = try graph.addNode(SumUnit("main", inputs: 0, log: log), name: "main")
        try graph.connect(silentOutput, to: graph.output)
        let a = try graph.addNode(SumUnit("a", inputs: 0, log: log, offset: 1), name: "a")
        let b = try graph.addNode(SumUnit("b", inputs: 1, log: log), name: "b")
        let recorder = try graph.addNode(SumUnit("recorder", inputs: 1, log: log), name: "recorder")
        try graph.connect(a, to: b)
        try graph.connect(b, to: recorder)
        try graph.addSink(recorder)
        _ = try renderOffline(graph, frames: 32, blockSizes: [32])
        #expect(log.all == ["main", "a", "b", "recorder"])
    }

    @Test func removingASinkOrItsNodeStopsItsRendering() throws {
        let log = RenderLog()
        let (graph, _, meter) = try graphWithMeter(log)
        try graph.addSink(meter)
        try graph.initialize()
        try graph.start()
        let renderer = OfflineRenderer(graph: graph)
        _ = try renderer.render(frames: 32)
        #expect(log.all == ["source", "meter"])
        // While running: the next schedule leaves it out.
        try graph.removeSink(meter)
        try graph.removeSink(meter)  // not a sink any more: nothing happens
        log.clear()
        _ = try renderer.render(frames: 32)
        #expect(log.all == ["source"])
        try graph.addSink(meter)
        log.clear()
        _ = try renderer.render(frames: 32)
        #expect(log.all == ["source", "meter"])
        try graph.removeNode(meter)
        #expect(graph.sinks.isEmpty)
        log.clear()
        _ = try renderer.render(frames: 32)
        #expect(log.all == ["source"])
        try graph.stop()
    }

    @Test func whatAPullingUnitPullsCannotBeASink() throws {
        let log = RenderLog()
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let source = try graph.addNode(SumUnit("song", inputs: 0, log: log), name: "song")
        let puller = try graph.addNode(SixfoldPuller(), name: "stretch")
        try graph.connect(source, to: puller)
        try graph.connect(puller, to: graph.output)
        #expect {
            try graph.addSink(source)
        } throws: { error in
            let e = error as? AudioError
            return e?.code == .invalidNode && e!.message.contains("'song'") && e!.message.contains("'stretch'")
        }
        #expect(graph.sinks.isEmpty)
        // The other way round: a sink first, then a connection that would make a puller pull it.
        let meter = try graph.addNode(SumUnit("meter", inputs: 0, log: log), name: "meter")
        try graph.addSink(meter)
        try graph.disconnect(puller)
        #expect(throws: AudioError.self) { try graph.connect(meter, to: puller) }
    }

    @Test func unknownNodesAreRefused() throws {
        let graph = try RenderGraph(format: stereo)
        let other = try RenderGraph(format: stereo)
        let foreign = try other.addNode(ConstantUnit(0))
        #expect(throws: AudioError.self) { try graph.addSink(foreign) }
        #expect(throws: AudioError.self) { try graph.removeSink(foreign) }
        #expect(throws: AudioError.self) { try graph.addSink(graph.output) }
    }
}

/// A node's tail time: the units' tail times summed along the paths into it, the longest path's.
@Suite struct TailTimeTests {
    @Test func theLongestPathsTailsAddUp() throws {
        let graph = try RenderGraph(format: stereo)
        let reverb = try ReverbUnit(format: stereo)
        let echo = try DelayUnit(format: stereo)
        let source = try graph.addNode(ConstantUnit(0.1), name: "voice")
        let r = try graph.addNode(reverb, name: "room")
        let d = try graph.addNode(echo, name: "echo")
        let mix = try graph.addNode(MixerUnit(format: stereo, inputs: 2), name: "mix")
        try graph.connect(source, to: r)
        try graph.connect(r, to: d)
        try graph.connect(d, to: mix, inputBus: 0)
        try graph.connect(source, to: mix, inputBus: 1)  // a dry path, with no tail, beside it
        try graph.connect(mix, to: graph.output)
        // Reverb at its defaults: 1 s decay + 50 ms delay; the echo: 1 s at 50 % feedback, until 60 dB down.
        #expect(abs(reverb.tailTime - 1.05) < 1e-6)
        #expect(abs(echo.tailTime - (1 + 3 / -log10(0.5))) < 1e-6)
        #expect(graph.tailTime(of: source) == 0)
        #expect(graph.tailTime(of: r) == reverb.tailTime)
        #expect(graph.tailTime(of: mix) == reverb.tailTime + echo.tailTime, "the longer of the two paths")
        // At the settings now: a shorter decay shortens it.
        try reverb.parameter("decayTimeAt0Hz").set(0.2)
        #expect(abs(graph.tailTime(of: mix) - (0.55 + echo.tailTime)) < 1e-6, "max(0.2, 0.5 at Nyquist) + 0.05")
        #expect(graph.tailTime(of: graph.output) == 0)
        // A bypassed unit adds none.
        echo.isBypassed = true
        #expect(abs(graph.tailTime(of: mix) - 0.55) < 1e-6)
    }
}
