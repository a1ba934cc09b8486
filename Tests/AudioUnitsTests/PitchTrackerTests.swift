import AudioCore
import AudioGraph
import AudioUnits
import Foundation
import LiveAudio
import Synchronization
import TestSupport
import Testing

@Suite("pitchTracker unit")
struct PitchTrackerTests {
    static let rate = 48_000.0

    /// source → pitchTracker → output, stereo (the singer in both channels at 0.8 and 0.4: the mean is tracked).
    static func graph(_ singer: GeneratedSinger, pool: WorkerPool = .shared) throws -> (RenderGraph, PitchTrackerUnit) {
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: 2)
        let graph = try RenderGraph(format: format, maximumFrames: 1024)
        let source = try BufferPlayerUnit(
            buffer: PCMBuffer(channels: [singer.samples.map { $0 * 0.8 }, singer.samples.map { $0 * 0.4 }]), sampleRate: rate)
        let tracker = try PitchTrackerUnit(format: format, pool: pool)
        let s = try graph.addNode(source, name: "voice")
        let t = try graph.addNode(tracker, name: "pitch")
        try graph.connect(s, to: t)
        try graph.connect(t, to: graph.output)
        try graph.initialize()
        return (graph, tracker)
    }

    /// What the estimator alone makes of the mean of the two channels, its times moved by `start` seconds.
    static func reference(_ singer: GeneratedSinger, start: Double) throws -> [PitchEstimate] {
        let estimator = try PitchEstimator(sampleRate: rate)
        var out: [PitchEstimate] = []
        let mean = singer.samples.map { ($0 * 0.8) * 0.5 + ($0 * 0.4) * 0.5 }
        mean.withUnsafeBufferPointer { p in
            estimator.process(p.baseAddress!, count: p.count) { e in
                var e = e
                e.time += start
                out.append(e)
            }
        }
        return out
    }

    @Test("Offline: the estimates are the estimator's on the channels' mean, in the graph's time; the audio passes unchanged")
    func offline() throws {
        let singer = GeneratedSinger(notes: [57, 60, 64], noteLength: 0.4, gap: 0.1, snr: 30)
        let (graph, tracker) = try Self.graph(singer)
        let renderer = OfflineRenderer(graph: graph)
        var estimates: [PitchEstimate] = []
        var left: [Float] = []
        // A quarter of a second rendered, then the tracker reset: its clock counts from the graph's 0.25 s.
        for _ in 0..<25 { left += try renderer.render(frames: 480)[0] }
        tracker.reset()
        tracker.readEstimates { _ in }
        while left.count < singer.samples.count {
            let out = try renderer.render(frames: 480)
            left += out[0]
            tracker.readEstimates { estimates.append($0) }
        }
        #expect(zip(left, singer.samples).allSatisfy { abs($0 - $1 * 0.8) < 1e-6 }, "passes its input")
        let reference = try Self.reference(GeneratedSinger.tail(of: singer, from: 12_000), start: 0.25)
        #expect(estimates.count == reference.count && estimates.count > 100)
        #expect(zip(estimates, reference).allSatisfy { abs($0.time - $1.time) < 1e-9 && abs($0.frequency - $1.frequency) < 1e-6 && $0.voiced == $1.voiced })
        #expect(tracker.latest == estimates.last)
        #expect(tracker.droppedFrames == 0 && tracker.droppedEstimates == 0)
    }

    @Test("Real time: the render thread only queues the voice; the worker's estimates are the same, a reset starts the time again")
    func realTime() throws {
        let singer = GeneratedSinger(notes: [55, 62], noteLength: 0.5, gap: 0.1, snr: 30)
        let (graph, tracker) = try Self.graph(singer)
        let renderer = OfflineRenderer(graph: graph)
        graph.willRender(.realTime(maximumCycleFrames: 1024))
        var estimates: [PitchEstimate] = []
        var done = 0
        // Paced as a device would: a 256-frame cycle every 5.3 ms.
        while done < singer.samples.count {
            _ = try renderer.render(frames: 256)
            done += 256
            tracker.readEstimates { estimates.append($0) }
            usleep(5_333)
        }
        let reference = try Self.reference(singer, start: 0)
        let deadline = Date().addingTimeInterval(5)
        while estimates.count < reference.count, Date() < deadline {
            usleep(2_000)
            tracker.readEstimates { estimates.append($0) }
        }
        #expect(estimates.count == reference.count && tracker.droppedFrames == 0)
        #expect(zip(estimates, reference).allSatisfy { abs($0.time - $1.time) < 1e-9 && abs($0.frequency - $1.frequency) < 1e-6 })
        graph.reset()
        #expect(tracker.latest == nil)
    }

    /// Rendered faster than the worker reads (1.5 s at once against a 65,536-frame ring, then the rest paced): frames
    /// are dropped and counted, what came before is analysed, and the estimates after the break still carry the
    /// times of the voice they describe — each voiced estimate is the note the singer sang at its time.
    @Test("Frames dropped in real time: the estimator starts again where the voice resumes; every estimate keeps its time")
    func breaks() throws {
        let notes: [Double] = [48, 52, 55, 59, 62, 65, 69, 72, 67, 64, 60, 57, 53, 50, 47, 45]
        let singer = GeneratedSinger(notes: notes, noteLength: 0.22, gap: 0.03, vibrato: 0, snr: 40)
        // The worker held back for the burst: its pool's one thread kept busy by a job of the test's until the burst
        // is rendered (on a loaded machine the worker, left free, kept up with a starved renderer and dropped nothing).
        final class Hold: Sendable {
            let held = Atomic<Bool>(true), holding = Atomic<Bool>(false)
        }
        let hold = Hold()
        let pool = WorkerPool(name: "pitch-test", threads: 1)
        let holder = try pool.add("hold") { last in
            hold.holding.store(true, ordering: .releasing)
            let deadline = Date().addingTimeInterval(30)
            while !last, hold.held.load(ordering: .acquiring), Date() < deadline { usleep(1_000) }
            return .idle
        }
        defer { holder.finish() }
        let (graph, tracker) = try Self.graph(singer, pool: pool)
        let renderer = OfflineRenderer(graph: graph)
        graph.willRender(.realTime(maximumCycleFrames: 1024))
        var estimates: [PitchEstimate] = []
        var done = 0
        while !hold.holding.load(ordering: .acquiring) { usleep(1_000) }
        // 1.5 s at once (the ring holds 1.37 s), a pause for the worker, then the rest at ten times real time.
        while done < 72_000 {
            _ = try renderer.render(frames: 1024)
            done += 1024
        }
        hold.held.store(false, ordering: .releasing)
        usleep(300_000)
        while done < singer.samples.count {
            _ = try renderer.render(frames: 1024)
            done += 1024
            usleep(2_000)
        }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            usleep(20_000)
            let before = estimates.count
            tracker.readEstimates { estimates.append($0) }
            if estimates.count == before, !estimates.isEmpty { break }
        }
        #expect(tracker.droppedFrames > 0, "the ring overflowed")
        let voiced = estimates.filter(\.voiced)
        #expect(voiced.filter { $0.time < 1.3 }.count > 50 && voiced.filter { $0.time > 1.6 }.count > 100, "before and after the break")
        // None for the voice that was dropped: the estimates skip its time.
        let gaps = zip(estimates, estimates.dropFirst()).map { $1.time - $0.time }
        #expect(gaps.allSatisfy { $0 > 0 } && (gaps.max() ?? 0) >= Double(tracker.droppedFrames) / Self.rate, "\(gaps.max() ?? 0) s, \(tracker.droppedFrames) frames dropped")
        let accuracy = PitchAccuracy(estimates: estimates, truth: singer.truth)
        #expect(accuracy.voicedFrames > 50 && accuracy.rawPitchAccuracy > 0.97, "\(accuracy)")
    }

    @Test("Graph files: pitchTracker with its range and hop; bad values are errors naming the field")
    func graphFile() throws {
        func load(_ fields: String) throws(AudioError) -> LoadedGraph {
            try GraphFile.load(json: """
                {"sampleRate": 48000, "channels": 1,
                 "nodes": [{"id": "tone", "type": "tone", "frequency": 220}, {"id": "pitch", "type": "pitchTracker"\(fields)}],
                 "connections": [{"from": "tone", "to": "pitch"}, {"from": "pitch", "to": "output"}]}
                """)
        }
        let loaded = try load(#", "minimumFrequency": 80, "maximumFrequency": 800, "hop": 0.005"#)
        let tracker = try #require(loaded.units["pitch"] as? PitchTrackerUnit)
        #expect(tracker.configuration.minimumFrequency == 80 && tracker.estimateInterval == 0.005)
        try loaded.graph.initialize()
        let renderer = OfflineRenderer(graph: loaded.graph)
        for _ in 0..<20 { _ = try renderer.render(frames: 480) }
        let latest = try #require(tracker.latest)
        #expect(latest.voiced && abs(latest.frequency - 220) < 0.5, "\(latest)")
        for (fields, message) in [
            (#", "hop": 0.5"#, "hop"), (#", "minimumFrequency": 500, "maximumFrequency": 700"#, "maximumFrequency"),
            (#", "maximumFrequency": "high""#, "maximumFrequency"),
        ] {
            #expect(throws: AudioError.self, "\(message)") { try load(fields) }
            do { _ = try load(fields) } catch { #expect(error.message.contains("'\(message)'") || error.message.contains(message), "\(error.message)") }
        }
    }
}
