import AudioCore
import AudioGraph
import AudioUnits
import Foundation
import Testing
import TestSupport

@Suite struct LiveChangeTests {
    /// One thread renders without pause while another reconfigures the graph thousands of times. Every cycle's
    /// output must be one of the mixes the topology can produce, constant within the cycle (changes land between
    /// cycles, never inside one). The connection of b, and its absence, are each held for two cycles now and then,
    /// so both states are rendered however the two threads are scheduled.
    @Test func renderingWhileReconfiguring() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        let mixer = try MixerUnit(format: stereo, inputs: 3)
        let m = try graph.addNode(mixer)
        let a = try graph.addNode(ConstantUnit(0.125))
        let b = try graph.addNode(ConstantUnit(0.25))
        try graph.connect(a, to: m, inputBus: 0)
        try graph.connect(m, to: graph.output)
        try graph.initialize()
        try graph.start()

        let stop = LockedFlag()
        let changes = LockedCounter()
        let rendered = LockedCounter()
        let control = Thread {
            var k = 0
            while !stop.isSet {
                do {
                    switch k % 4 {
                    case 0:
                        try graph.connect(b, to: m, inputBus: 1)
                        // Every 64th time, held until two cycles have begun since (a cycle under way when the
                        // schedule changed renders the old one).
                        if k % 256 == 0 {
                            let from = rendered.value
                            while rendered.value < from + 2, !stop.isSet { usleep(100) }
                        }
                    case 1:
                        try graph.disconnect(m, inputBus: 1)
                        // Likewise for the state without b: on a loaded machine the control thread can otherwise
                        // go round its four changes between two cycles every time.
                        if k % 256 == 1 {
                            let from = rendered.value
                            while rendered.value < from + 2, !stop.isSet { usleep(100) }
                        }
                    case 2:
                        let c = try graph.addNode(ConstantUnit(0.5))
                        try graph.connect(c, to: m, inputBus: 2)
                        try graph.removeNode(c)
                    default: graph.collectGarbage()
                    }
                } catch {
                    Issue.record("control thread: \(error)")
                    return
                }
                k += 1
                changes.increment()
            }
        }
        let renderer = OfflineRenderer(graph: graph)
        let allowed: Set<Float> = [0.125, 0.375, 0.625, 0.875]
        var seen: [Float: Int] = [:]
        var bad = 0
        var cycles = 0
        control.start()
        while changes.value < 4000 || cycles < 20_000 {
            let n = [64, 128, 31, 256][cycles % 4]
            let out = try renderer.render(frames: n)
            let first = out[0][0]
            for c in 0..<2 {
                for i in 0..<n where out[c][i] != first { bad += 1 }
            }
            if !allowed.contains(first) { bad += 1 }
            seen[first, default: 0] += 1
            cycles += 1
            rendered.increment()
        }
        stop.set()
        while !control.isFinished { usleep(1000) }
        #expect(bad == 0)
        #expect(changes.value >= 4000)
        #expect((seen[0.125] ?? 0) > 0 && (seen[0.375] ?? 0) > 0, "both states were rendered: \(seen)")
        // After the storm the graph takes a known state and renders it.
        try graph.disconnect(m, inputBus: 1)
        try graph.connect(b, to: m, inputBus: 1)
        #expect(try renderer.render(frames: 8)[0][0] == 0.375)
    }

    @Test func parametersChangeSmoothlyWhileRunning() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 128)
        let source = try graph.addNode(ConstantUnit(1))
        let gain = try GainUnit(format: stereo, gain: 0)
        let g = try graph.addNode(gain)
        try graph.connect(source, to: g)
        try graph.connect(g, to: graph.output)
        let before = try renderOffline(graph, frames: 1280, blockSizes: [128])
        #expect(before[0].allSatisfy { $0 == 1 })
        try gain.setParameter("gain", -20)
        let renderer = OfflineRenderer(graph: graph)
        var after: [Float] = []
        for _ in 0..<20 { after += try renderer.render(frames: 128)[0] }
        // 20 ms ramp at 48 kHz = 960 samples, linear from 1 to 0.1.
        let step = (1 - Float(0.1)) / 960
        for i in 1..<after.count { #expect(after[i - 1] - after[i] <= step * 1.001) }
        #expect(abs(after[959] - 0.1) < 1e-6 && abs(after.last! - 0.1) < 1e-6)
        #expect(abs(after[479] - (1 - step * 480)) < 1e-4)
    }

    @Test func outputDoesNotDependOnBlockSize() throws {
        func build() throws -> RenderGraph {
            let graph = try RenderGraph(format: stereo, maximumFrames: 1024)
            let mixer = try MixerUnit(format: stereo, inputs: 4)
            try mixer.setPan(-0.5, bus: 0)
            try mixer.setVolume(0.7, bus: 1)
            let m = try graph.addNode(mixer)
            let t = try graph.addNode(ToneUnit(format: mono, frequency: 997, amplitude: 0.3))
            let n = try graph.addNode(NoiseUnit(format: stereo, amplitude: 0.1, seed: 42))
            let p = try graph.addNode(
                BufferPlayerUnit(buffer: PCMBuffer(channels: [(0..<333).map { Float($0) / 333 }]), sampleRate: 48_000, loop: true))
            let g = try graph.addNode(GainUnit(format: stereo, gain: -3))
            try graph.connect(t, to: m, inputBus: 0)
            try graph.connect(n, to: m, inputBus: 1)
            try graph.connect(p, to: m, inputBus: 2)
            try graph.connect(m, to: g)
            try graph.connect(g, to: graph.output)
            return graph
        }
        let reference = try renderOffline(build(), frames: 20_000, blockSizes: [1024])
        let odd = try renderOffline(build(), frames: 20_000, blockSizes: [1, 0, 17, 1023, 0, 512, 3, 999])
        #expect(reference == odd, "bit-identical whatever the block sizes")
        #expect(reference[0] != reference[1])
    }

    @Test func removingANodeWhileRunningKeepsTheRest() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let mixer = try MixerUnit(format: stereo, inputs: 2)
        let m = try graph.addNode(mixer)
        let a = try graph.addNode(ConstantUnit(0.5))
        let b = try graph.addNode(ConstantUnit(0.25))
        try graph.connect(a, to: m, inputBus: 0)
        try graph.connect(b, to: m, inputBus: 1)
        try graph.connect(m, to: graph.output)
        try graph.initialize()
        try graph.start()
        let renderer = OfflineRenderer(graph: graph)
        #expect(try renderer.render(frames: 64)[0][0] == 0.75)
        try graph.removeNode(b)
        #expect(try renderer.render(frames: 64)[1][63] == 0.5)
        let late = try graph.addNode(ConstantUnit(0.125))
        try graph.connect(late, to: m, inputBus: 1)
        #expect(try renderer.render(frames: 64)[1][63] == 0.625)
        #expect(throws: AudioError.self) { try graph.removeNode(b) }
    }
}

/// Records the thread its deinit runs on.
final class DeinitWitness: RenderUnit {
    let core: UnitCore
    let record: ThreadRecord
    init(record: ThreadRecord) {
        self.record = record
        core = UnitCore(kind: "witness", inputs: [], outputs: [stereo])
    }
    deinit { record.note(pthread_self()) }
}

final class ThreadRecord: @unchecked Sendable {
    private let lock = NSLock()
    private var threads: [pthread_t] = []
    func note(_ t: pthread_t) { lock.withLock { threads.append(t) } }
    var all: [pthread_t] { lock.withLock { threads } }
}

@Suite struct ScheduleLifetimeTests {
    /// A unit removed while another thread renders it is freed on a control thread, after the render thread has
    /// moved to a schedule without it, never on the render thread.
    @Test func removedUnitsAreFreedOffTheRenderThread() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 64)
        let mixer = try graph.addNode(MixerUnit(format: stereo, inputs: 1))
        try graph.connect(mixer, to: graph.output)
        try graph.initialize()
        let record = ThreadRecord()
        let renderThread = LockedValue<pthread_t?>(nil)
        let stop = LockedFlag()
        let renderer = OfflineRenderer(graph: graph)
        let render = Thread {
            renderThread.set(pthread_self())
            while !stop.isSet { _ = try? renderer.render(frames: 64) }
        }
        render.start()
        for _ in 0..<200 {
            let witness = try graph.addNode(DeinitWitness(record: record))
            try graph.connect(witness, to: mixer)
            usleep(200)
            try graph.removeNode(witness)
        }
        usleep(5000)
        stop.set()
        while !render.isFinished { usleep(1000) }
        graph.collectGarbage()
        try graph.uninitialize()
        let renderID = try #require(renderThread.get())
        #expect(record.all.count == 200, "every removed unit was freed")
        #expect(record.all.allSatisfy { pthread_equal($0, renderID) == 0 }, "none on the render thread")
    }
}

final class LockedValue<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ v: T) { value = v }
    func set(_ v: T) { lock.withLock { value = v } }
    func get() -> T { lock.withLock { value } }
}
