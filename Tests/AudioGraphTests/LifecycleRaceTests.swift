import AudioCore
import AudioGraph
import Foundation
import Synchronization
import Testing
import TestSupport

/// A unit that notices when the control side touches it while it renders: its render and its reset each hold a
/// flag for a while and check the other's. It also notices a render that runs after the test declared the graph
/// torn down.
final class WatchfulUnit: RenderUnit {
    let core: UnitCore
    let rendering = Atomic<Bool>(false)
    let resetting = Atomic<Bool>(false)
    let tornDown = Atomic<Bool>(false)
    let overlaps = Atomic<Int>(0)
    let rendersAfterTeardown = Atomic<Int>(0)
    let renders = Atomic<Int>(0)

    init() { core = UnitCore(kind: "watchful", inputs: [], outputs: [stereo]) }

    /// Spins for `nanoseconds` (a render or reset that takes a while, so overlaps have room to happen).
    static func busy(_ nanoseconds: UInt64) {
        let until = monotonicNanoseconds() + nanoseconds
        while monotonicNanoseconds() < until {}
    }

    func render(_ context: RenderContext) {
        rendering.store(true, ordering: .sequentiallyConsistent)
        if tornDown.load(ordering: .sequentiallyConsistent) { rendersAfterTeardown.add(1, ordering: .relaxed) }
        Self.busy(100_000)
        if resetting.load(ordering: .sequentiallyConsistent) { overlaps.add(1, ordering: .relaxed) }
        for o in context.outputs { for c in 0..<o.channelCount { o[c].update(repeating: 0.5) } }
        if tornDown.load(ordering: .sequentiallyConsistent) { rendersAfterTeardown.add(1, ordering: .relaxed) }
        rendering.store(false, ordering: .sequentiallyConsistent)
        renders.add(1, ordering: .relaxed)
    }

    func reset() {
        resetting.store(true, ordering: .sequentiallyConsistent)
        if rendering.load(ordering: .sequentiallyConsistent) { overlaps.add(1, ordering: .relaxed) }
        Self.busy(100_000)
        if rendering.load(ordering: .sequentiallyConsistent) { overlaps.add(1, ordering: .relaxed) }
        resetting.store(false, ordering: .sequentiallyConsistent)
    }
}

/// A device thread: renders cycles back to back through the driver API (the output is read inside the cycle, as
/// an I/O unit copies it to the device) until told to stop. Counts cycles whose output was not what the unit
/// renders or silence.
final class DeviceThread: @unchecked Sendable {
    private let graph: RenderGraph
    private let stopFlag = Atomic<Bool>(false)
    let cycles = Atomic<Int>(0)
    let badOutput = Atomic<Int>(0)
    private var thread: Thread?

    init(graph: RenderGraph) { self.graph = graph }

    func start() {
        let t = Thread { [self] in
            var time: Int64 = 0
            while !stopFlag.load(ordering: .relaxed) {
                _ = graph.renderCycle(frames: 64, timeStamp: RenderTimeStamp(sampleTime: time)) { out in
                    let v = out[0][0]
                    if v != 0.5 && v != 0 { badOutput.add(1, ordering: .relaxed) }
                    for c in 0..<out.channelCount { for i in 0..<out.frameCount where out[c][i] != v { badOutput.add(1, ordering: .relaxed) } }
                }
                cycles.add(1, ordering: .relaxed)
                time += 64
            }
        }
        thread = t
        t.start()
    }

    func stop() {
        stopFlag.store(true, ordering: .relaxed)
        let deadline = Date().addingTimeInterval(10)
        while thread?.isFinished == false, Date() < deadline { usleep(1000) }
        #expect(thread?.isFinished == true, "the device thread stopped within 10 s")
    }
}

@Suite struct LifecycleRaceTests {
    /// A device thread keeps rendering while another thread resets the graph again and again: no reset may
    /// overlap a render (the unit would see its state cleared in the middle of a cycle).
    @Test func resetNeverOverlapsARender() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        let unit = WatchfulUnit()
        try graph.connect(try graph.addNode(unit), to: graph.output)
        try graph.initialize()
        try graph.start()
        let device = DeviceThread(graph: graph)
        device.start()
        let started = Date()
        var resets = 0
        while resets < 1000 || unit.renders.load(ordering: .relaxed) < 1000 {
            graph.reset()
            resets += 1
            WatchfulUnit.busy(100_000)  // room for the device thread to render between resets
            if Date().timeIntervalSince(started) > 90 { break }
        }
        device.stop()
        // What is asserted is that no reset overlapped a render; the counts only show the race was run. Both
        // threads spin, so on a loaded machine (phase 1 runs every suite at once on two cores) they reach the
        // targets slowly: 200 of each is ample exercise, 1000 the aim on an idle machine.
        #expect(unit.renders.load(ordering: .relaxed) >= 200, "the device thread rendered")
        #expect(resets >= 200)
        #expect(unit.overlaps.load(ordering: .relaxed) == 0, "a reset ran while a cycle was rendering")
        #expect(device.badOutput.load(ordering: .relaxed) == 0, "cycles during a reset are silence, never garbage")
    }

    /// A device thread keeps rendering while another thread stops, uninitializes, re-initializes and starts the
    /// graph: once `uninitialize()` has returned, no cycle is still inside the graph (its schedule is freed), and
    /// none starts until the graph is initialized again.
    @Test func uninitializeWaitsForTheCycleInProgress() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        let unit = WatchfulUnit()
        try graph.connect(try graph.addNode(unit), to: graph.output)
        let device = DeviceThread(graph: graph)
        device.start()
        var rounds = 0
        let started = Date()
        while rounds < 300, Date().timeIntervalSince(started) < 90 {
            unit.tornDown.store(false, ordering: .sequentiallyConsistent)
            try graph.initialize()
            try graph.start()
            let before = unit.renders.load(ordering: .relaxed)
            // Let a few cycles run (bounded: the device thread may be descheduled).
            let until = Date().addingTimeInterval(1)
            while unit.renders.load(ordering: .relaxed) < before + 3, Date() < until { sched_yield() }
            try graph.stop()
            try graph.uninitialize()
            unit.tornDown.store(true, ordering: .sequentiallyConsistent)
            WatchfulUnit.busy(300_000)
            rounds += 1
        }
        device.stop()
        // As above, the counts show the race was run (each round renders up to 3 cycles, waiting at most 1 s for
        // them): 300 rounds on an idle machine, at least 50 under load.
        #expect(rounds >= 50)
        #expect(unit.renders.load(ordering: .relaxed) >= rounds, "the device thread rendered in most rounds")
        #expect(unit.rendersAfterTeardown.load(ordering: .relaxed) == 0, "a cycle ran after uninitialize() returned")
        #expect(device.badOutput.load(ordering: .relaxed) == 0)
    }

    /// Several control threads collect garbage while another publishes changes and a device thread renders: the
    /// retired schedules have one consumer at a time, so none is released twice (which would crash the process)
    /// and the graph keeps rendering.
    @Test func concurrentGarbageCollection() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        // A unit that renders at once, so the device thread retires schedules as fast as they are published.
        let u = try graph.addNode(ConstantUnit(0.5))
        try graph.connect(u, to: graph.output)
        try graph.initialize()
        try graph.start()
        let device = DeviceThread(graph: graph)
        device.start()
        let stop = Atomic<Bool>(false)
        let collections = Atomic<Int>(0)
        let collectors = (0..<3).map { _ in
            Thread {
                while !stop.load(ordering: .relaxed) {
                    graph.collectGarbage()
                    collections.add(1, ordering: .relaxed)
                }
            }
        }
        collectors.forEach { $0.start() }
        for _ in 0..<20_000 {
            try graph.disconnect(graph.output)
            try graph.connect(u, to: graph.output)
        }
        stop.store(true, ordering: .relaxed)
        let deadline = Date().addingTimeInterval(10)
        while collectors.contains(where: { !$0.isFinished }), Date() < deadline { usleep(1000) }
        device.stop()
        #expect(collections.load(ordering: .relaxed) > 0)
        #expect(device.cycles.load(ordering: .relaxed) > 0)
        #expect(graph.scheduleGeneration >= 40_000)
    }
}

/// A unit with a fixed latency and any number of inputs (it sums them).
final class LaggingUnit: RenderUnit {
    let core: UnitCore
    let lag: Double
    init(lag: Double, inputs: Int = 1) {
        self.lag = lag
        core = UnitCore(kind: "lagging", inputs: Array(repeating: stereo, count: inputs), outputs: [stereo])
    }
    var latency: Double { lag }
    func render(_ context: RenderContext) {
        for o in context.outputs { for c in 0..<o.channelCount { o[c].update(repeating: 0) } }
    }
}

@Suite struct GraphLatencyTests {
    /// The graph's latency is what its units add along the slowest path to the output: here 2 ms + 5 ms through
    /// one branch against 3 ms through the other, then 1 ms after the mix. Units not connected to the output do
    /// not count, and an empty graph has none.
    @Test func longestPathToTheOutput() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        #expect(graph.latency == 0)
        let a = try graph.addNode(LaggingUnit(lag: 0.002, inputs: 0))
        let b = try graph.addNode(LaggingUnit(lag: 0.005))
        let c = try graph.addNode(LaggingUnit(lag: 0.003, inputs: 0))
        let mix = try graph.addNode(LaggingUnit(lag: 0.001, inputs: 2))
        let idle = try graph.addNode(LaggingUnit(lag: 1, inputs: 0))
        try graph.connect(a, to: b)
        try graph.connect(b, to: mix, inputBus: 0)
        try graph.connect(c, to: mix, inputBus: 1)
        try graph.connect(mix, to: graph.output)
        _ = idle
        #expect(abs(graph.latency - 0.008) < 1e-12)
        try graph.disconnect(mix, inputBus: 0)
        #expect(abs(graph.latency - 0.004) < 1e-12)
    }
}
