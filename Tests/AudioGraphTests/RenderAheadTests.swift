import AudioCore
import AudioGraph
import Foundation
import Synchronization
import Testing

/// A graph rendered ahead on a worker and played by a source node: frame for frame, a look-ahead of its own, and
/// changes that are heard after it or, made through `perform`, at once.
@Suite struct RenderAheadTests {
    /// Plays its own sample time plus an offset: every frame says where it came from.
    final class CounterUnit: RenderUnit {
        let core: UnitCore
        let offset = Atomic<Int>(0)
        init() {
            core = UnitCore(kind: "counter", inputs: [], outputs: [try! .graph(sampleRate: 48_000, channelCount: 1)])
        }
        func render(_ context: RenderContext) {
            let out = context.output(0)[0]
            let base = Int(context.timeStamp.sampleTime) + offset.load(ordering: .relaxed)
            for i in 0..<context.frameCount { out[i] = Float(base + i) }
        }
    }

    /// A source playing a counter ahead, in a playing graph of `cycle`-frame cycles from sample time 1000.
    func make(cycle: Int) throws -> (CounterUnit, RenderAheadSource, RenderGraph) {
        let counter = CounterUnit()
        let inner = try RenderGraph(format: try .graph(sampleRate: 48_000, channelCount: 1), maximumFrames: 1024)
        try inner.connect(try inner.addNode(counter), to: inner.output)
        let source = try RenderAheadSource(graph: inner, maximumCycleFrames: 4096)
        let outer = try RenderGraph(format: try .graph(sampleRate: 48_000, channelCount: 1), maximumFrames: 4096)
        try outer.connect(try outer.addNode(source, name: "ahead"), to: outer.output)
        try outer.initialize()
        return (counter, source, outer)
    }

    /// Renders one cycle of the playing graph at `time` once the worker has the look-ahead queued (as a device
    /// would find it), and returns it.
    func cycle(_ outer: RenderGraph, _ source: RenderAheadSource, at time: Int64, frames: Int) throws -> [Float] {
        let deadline = Date().addingTimeInterval(10)
        while source.queuedFrames < source.lookAheadFrames - source.blockFrames, Date() < deadline { usleep(200) }
        let view = try #require(outer.renderCycle(frames: frames, timeStamp: RenderTimeStamp(sampleTime: time)))
        return Array(view[0])
    }

    @Test(arguments: [64, 128, 1024, 4096]) func theLookAheadIsTwentyMillisecondsOrTwoCycles(cycle: Int) throws {
        let (_, source, _) = try make(cycle: cycle)
        defer { source.stop() }
        try source.start(atSampleTime: 0, cycleFrames: cycle)
        // 20 ms (960 frames) or two cycles, in whole blocks of 256.
        let expected = (max(960, 2 * cycle) + 255) / 256 * 256
        #expect(source.lookAheadFrames == expected)
        #expect(abs(source.lookAhead - Double(expected) / 48_000) < 1e-12)
        if cycle <= 512 { #expect(source.lookAhead <= 0.05) }
    }

    @Test func frameKAfterTheStartIsFrameKOfTheInnerGraph() throws {
        let (_, source, outer) = try make(cycle: 128)
        defer { source.stop() }
        try source.start(atSampleTime: 1000, cycleFrames: 128)
        var played: [Float] = []
        var time: Int64 = 896  // the start falls inside the second cycle
        for _ in 0..<200 {
            played += try cycle(outer, source, at: time, frames: 128)
            time += 128
        }
        #expect(played.prefix(104).allSatisfy { $0 == 0 }, "silence before the start")
        let song = Array(played.dropFirst(104))
        #expect(song == (0..<song.count).map(Float.init), "frame k is the inner graph's frame k")
        #expect(source.underruns == 0 && source.failure == nil)
    }

    @Test func aDirectChangeIsHeardAfterTheLookAheadAndAPerformedOneAtOnce() throws {
        let (counter, source, outer) = try make(cycle: 128)
        defer { source.stop() }
        try source.start(atSampleTime: 0, cycleFrames: 128)
        var played: [Float] = []
        var time: Int64 = 0
        func play(_ cycles: Int) throws {
            for _ in 0..<cycles {
                played += try cycle(outer, source, at: time, frames: 128)
                time += 128
            }
        }
        try play(40)
        // Made on the inner graph directly: it reaches the output once what was queued has played.
        let changedAt = played.count
        counter.offset.store(1_000_000, ordering: .relaxed)
        try play(40)
        let heard = try #require(played.indices.first { played[$0] >= 1_000_000 })
        let delay = heard - changedAt
        #expect(delay >= source.lookAheadFrames - source.blockFrames - 128 && delay <= source.lookAheadFrames + 2 * source.blockFrames,
            "heard \(delay) frames later; the look-ahead is \(source.lookAheadFrames)")
        #expect(Array(played[changedAt..<heard]) == (changedAt..<heard).map(Float.init), "nothing lost before it")
        // Through perform(): what was queued is dropped; the next cycle plays what was rendered after the change,
        // crossfaded from the dropped frames over 5 ms.
        let performedAt = played.count
        try source.perform { counter.offset.store(2_000_000, ordering: .relaxed) }
        try play(20)
        let after = Array(played[performedAt...])
        let fade = source.flushFadeFrames
        #expect(fade == 240)
        Self.expectCrossfade(after, from: Double(played[performedAt - 1]) + 1, fade: fade, newAtLeast: 2_000_000 + Double(performedAt))
        #expect(source.underruns == 0)
    }

    /// `after` is, frame i: the old frames going on from `oldStart` faded out over `fade` frames, plus the new ones
    /// — a counter from where the worker had got to (at least `newAtLeast`) — faded in over the same frames.
    static func expectCrossfade(_ after: [Float], from oldStart: Double, fade: Int, newAtLeast: Double,
                                sourceLocation: SourceLocation = #_sourceLocation) {
        let newStart = Double(after[fade]) - Double(fade)
        #expect(newStart >= newAtLeast, "the new frames come after what was dropped", sourceLocation: sourceLocation)
        for (i, value) in after.enumerated() {
            let g = i < fade ? Double(i) / Double(fade) : 1
            let expected = (newStart + Double(i)) * g + (oldStart + Double(i)) * (1 - g)
            let ok = abs(Double(value) - expected) <= 1
            #expect(ok, "frame \(i) after the change: \(value), expected \(expected)", sourceLocation: sourceLocation)
            if !ok { break }
        }
    }

    /// With long cycles (1024 frames: the look-ahead is 2048) the cycle after a change is whole: what follows the
    /// change is rendered before what it drops goes, so no silence comes between them.
    @Test func aChangeLeavesNoGapAtLongCycles() throws {
        let (counter, source, outer) = try make(cycle: 1024)
        defer { source.stop() }
        try source.start(atSampleTime: 0, cycleFrames: 1024)
        #expect(source.lookAheadFrames == 2048)
        var played: [Float] = []
        var time: Int64 = 0
        for _ in 0..<10 {
            played += try cycle(outer, source, at: time, frames: 1024)
            time += 1024
        }
        let performedAt = played.count
        try source.perform { counter.offset.store(3_000_000, ordering: .relaxed) }
        // At once, as a device would call: no waiting for the worker to top up.
        let view = try #require(outer.renderCycle(frames: 1024, timeStamp: RenderTimeStamp(sampleTime: time)))
        let after = Array(view[0])
        Self.expectCrossfade(after, from: Double(played[performedAt - 1]) + 1, fade: 240, newAtLeast: 3_000_000 + Double(performedAt))
        #expect(source.underruns == 0)
    }

    /// A change made from the worker itself (a player's end calling for the next part) is made at once, not
    /// waited for.
    @Test func aChangeFromTheWorkerItselfIsMadeAtOnce() throws {
        let (counter, source, _) = try make(cycle: 128)
        defer { source.stop() }
        try source.start(atSampleTime: 0, cycleFrames: 128)
        try source.perform { () throws(AudioError) in
            try source.perform { counter.offset.store(9, ordering: .relaxed) }
        }
        #expect(counter.offset.load(ordering: .relaxed) == 9)
    }

    @Test func aChangeBeforeTheStartAndAfterTheStopRunsOnTheCaller() throws {
        let (counter, source, _) = try make(cycle: 128)
        try source.perform { counter.offset.store(5, ordering: .relaxed) }
        #expect(counter.offset.load(ordering: .relaxed) == 5)
        try source.start(atSampleTime: 0, cycleFrames: 128)
        source.stop()
        #expect(throws: AudioError.self) { try source.perform { () throws(AudioError) in throw AudioError(.invalidParameter, "no") } }
        try source.perform { counter.offset.store(7, ordering: .relaxed) }
        #expect(counter.offset.load(ordering: .relaxed) == 7)
        // Started once.
        #expect(throws: AudioError.self) { try source.start(atSampleTime: 0, cycleFrames: 128) }
    }

    @Test func anErrorFromAPerformedChangeReachesTheCaller() throws {
        let (_, source, _) = try make(cycle: 128)
        defer { source.stop() }
        try source.start(atSampleTime: 0, cycleFrames: 128)
        do throws(AudioError) {
            try source.perform { () throws(AudioError) in throw AudioError(.invalidParameter, "frame 9 is outside the region") }
            Issue.record("no error")
        } catch {
            #expect(error.code == .invalidParameter && error.message.contains("frame 9"))
        }
    }
}
