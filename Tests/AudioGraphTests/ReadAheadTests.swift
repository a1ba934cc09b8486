import AudioCore
import AudioGraph
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Reads ahead like a file source: each fill makes 8192 frames ready; fill number `failingFill` fails.
final class ScriptedReader: RenderUnit {
    let core: UnitCore
    let ready = Atomic<Int>(0)
    let fills = Atomic<Int>(0)
    let failingFill: Int

    init(failingFill: Int = .max) {
        self.failingFill = failingFill
        core = UnitCore(kind: "scripted", inputs: [], outputs: [stereo])
    }

    var prefetchesAhead: Bool { true }

    func prefetch(frames: Int) throws(AudioError) {
        let fill = fills.add(1, ordering: .relaxed).newValue
        if fill == failingFill { throw AudioError(.fileIO, "cannot read 'scripted': the disk is gone") }
        ready.store(8192, ordering: .releasing)
    }

    func isReadyAhead(frames: Int) -> Bool { ready.load(ordering: .acquiring) >= frames }
    var wantsReadAhead: Bool { ready.load(ordering: .relaxed) <= 4096 }

    func render(_ context: RenderContext) {
        ready.subtract(context.frameCount, ordering: .relaxed)
        let out = context.output(0)
        for c in 0..<out.channelCount { out[c].update(repeating: 0.5) }
    }
}

@Suite struct ReadAheadTests {
    func graph(_ unit: RenderUnit) throws -> RenderGraph {
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        try graph.connect(graph.addNode(unit), to: graph.output)
        try graph.initialize()
        return graph
    }

    @Test func theRendererWaitsForTheWorkerAndGetsEveryFrame() throws {
        let reader = ScriptedReader()
        let g = try graph(reader)
        #expect(g.readingAheadUnits.count == 1)
        let worker = try ReadAheadWorker(units: g.readingAheadUnits)
        let renderer = OfflineRenderer(graph: g, readAhead: worker)
        for _ in 0..<200 {
            let out = try renderer.render(frames: 1000)
            #expect(out[0][999] == 0.5)
        }
        // 200 000 frames at 8192 per fill: at least 25 fills, each asked for only once half was used.
        let fills = reader.fills.load(ordering: .relaxed)
        #expect(fills >= 25 && fills <= 60)
        worker.stop()
    }

    @Test func aReadErrorReachesTheRendererAsAnError() throws {
        let reader = ScriptedReader(failingFill: 4)
        let g = try graph(reader)
        let worker = try ReadAheadWorker(units: g.readingAheadUnits)
        let renderer = OfflineRenderer(graph: g, readAhead: worker)
        var rendered = 0
        do {
            for _ in 0..<1000 {
                _ = try renderer.render(frames: 1024)
                rendered += 1024
            }
            Issue.record("the read error was not reported")
        } catch {
            #expect(error.code == .fileIO)
            #expect(error.message.contains("the disk is gone"))
        }
        // Fills 2 and 3 come once at most 4096 frames are left (each reset to 8192 ready), and all of fill 3 is
        // rendered before the failed fill 4 is met: at least 8192 + 2 × 4096 frames, at most four fills' worth.
        #expect(rendered >= 8192 + 2 * 4096 && rendered <= 4 * 8192)
        #expect(worker.failure?.code == .fileIO)
    }

    @Test func aStoppedWorkerIsAnErrorNotAHang() throws {
        let reader = ScriptedReader()
        let g = try graph(reader)
        let worker = try ReadAheadWorker(units: g.readingAheadUnits)
        let renderer = OfflineRenderer(graph: g, readAhead: worker)
        _ = try renderer.render(frames: 4096)
        worker.stop()
        var failed: AudioError?
        for _ in 0..<10 {
            do { _ = try renderer.render(frames: 4096) } catch {
                failed = error
                break
            }
        }
        #expect(failed?.code == .invalidState)
    }
}

/// Reads ahead slowly (3 ms a fill) into a buffer of 8192 frames; counts renders that find too few frames.
final class SlowReader: RenderUnit {
    let core: UnitCore
    let ready = Atomic<Int>(0)
    let underruns = Atomic<Int>(0)
    init() { core = UnitCore(kind: "slow", inputs: [], outputs: [stereo]) }
    var prefetchesAhead: Bool { true }
    func prefetch(frames: Int) throws(AudioError) {
        usleep(3_000)
        ready.store(8192, ordering: .releasing)
    }
    func isReadyAhead(frames: Int) -> Bool {
        let n = ready.load(ordering: .acquiring)
        return n >= frames || n == 8192
    }
    var wantsReadAhead: Bool { ready.load(ordering: .relaxed) <= 4096 }
    func render(_ context: RenderContext) {
        let n = ready.load(ordering: .acquiring)
        if n < context.frameCount { underruns.add(1, ordering: .relaxed) }
        ready.subtract(min(n, context.frameCount), ordering: .relaxed)
        let out = context.output(0)
        for c in 0..<out.channelCount { out[c].update(repeating: 0.5) }
    }
}

/// Pulls six input frames for each output frame (as a time-pitch at rate 6 does), in pulls of a cycle’s size.
final class SixfoldPuller: RenderUnit {
    let core: UnitCore
    init() { core = UnitCore(kind: "sixfold", inputs: [stereo], outputs: [stereo]) }
    var pullsInput: Bool { true }
    func render(_ context: RenderContext) {
        for _ in 0..<6 { _ = context.pull(frames: context.frameCount) }
        context.output(0).clear()
    }
}

@Suite struct PulledReadAheadTests {
    /// A reader feeding a unit that takes six times a cycle's frames: the renderer waits until the worker has
    /// filled it (not merely a cycle's worth), so no cycle finds it short.
    @Test func aReaderInAPulledChainIsKeptFull() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let reader = SlowReader()
        let r = try graph.addNode(reader)
        let p = try graph.addNode(SixfoldPuller())
        try graph.connect(r, to: p)
        try graph.connect(p, to: graph.output)
        try graph.initialize()
        #expect(reader.isReadInPulledChain)
        let worker = try ReadAheadWorker(units: graph.readingAheadUnits)
        let renderer = OfflineRenderer(graph: graph, readAhead: worker)
        for _ in 0..<100 { _ = try renderer.render(frames: 1000) }
        worker.stop()
        #expect(reader.underruns.load(ordering: .relaxed) == 0)
    }
}
