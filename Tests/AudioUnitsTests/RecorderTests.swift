import Foundation
import LiveAudio
import Testing
import TestSupport

/// The recorder: a pass-through that writes what passes to a WAV file from a thread of its own. References: the
/// input itself (FFmpeg decodes the file), shifted by the skip.
@Suite("The recorder unit") struct RecorderTests {
    /// Stereo, every sample different and none zero (a dropped frame written as silence is told apart).
    static func signal(_ frames: Int) -> [[Float]] {
        [(0..<frames).map { Float($0 + 1) / 1_048_576 }, (0..<frames).map { -Float($0 + 1) / 1_048_576 }]
    }

    @Test func recordsWhatPassesAndShiftsBySkipFrames() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = Self.signal(100_000)
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: 48_000))
        let whole = try RecorderUnit(format: stereo, path: dir.file("whole.wav"))
        let shifted = try RecorderUnit(format: stereo, path: dir.file("shifted.wav"), skipFrames: 777)
        let a = try graph.addNode(whole)
        let b = try graph.addNode(shifted)
        try graph.connect(player, to: a)
        try graph.connect(a, to: b)
        try graph.connect(b, to: graph.output)
        let out = try renderOffline(graph, frames: 100_000, blockSizes: [1, 4096, 333, 1024, 97])
        #expect(out == input, "a pass-through")
        #expect(try whole.finish() == 100_000)
        #expect(try shifted.finish() == 100_000 - 777)
        #expect(try FFmpeg.decode(dir.file("whole.wav"), channels: 2) == input)
        #expect(try FFmpeg.decode(dir.file("shifted.wav"), channels: 2) == input.map { Array($0.dropFirst(777)) })
        #expect(whole.droppedFrames == 0 && shifted.droppedFrames == 0)
        // Finished: more cycles pass through and are not recorded; finishing again is harmless.
        _ = try renderOffline(graph, frames: 5000)
        #expect(try whole.finish() == 100_000)
        #expect(try FFmpeg.decode(dir.file("whole.wav"), channels: 2)[0].count == 100_000)
    }

    /// In real time (the graph told so) a writer held back while 1 s passes through a ring of 16,384 frames: the
    /// frames it had no room for are silence in the file, in their place, and counted; once it has caught up, the
    /// next second is recorded whole and in its place — after the silence, not before it.
    @Test func aWriterBehindWritesSilenceInPlace() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = Self.signal(96_000)
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: 48_000))
        let recorder = try RecorderUnit(format: stereo, path: dir.file("r.wav"), bufferedSeconds: 0.1)
        let node = try graph.addNode(recorder)
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        graph.willRender(.realTime(maximumCycleFrames: 960))
        recorder.writerDelayForTesting = 0.5
        for _ in 0..<50 { _ = try renderer.render(frames: 960) }
        recorder.writerDelayForTesting = 0
        try waitUntil("the writer caught up", seconds: 10, interval: 10_000) { recorder.framesWritten == 48_000 }
        for _ in 0..<50 {
            _ = try renderer.render(frames: 960)
            usleep(10_000)
        }
        #expect(try recorder.finish() == 96_000)
        let file = try FFmpeg.decode(dir.file("r.wav"), channels: 2)
        #expect(file[0].count == 96_000)
        #expect(recorder.droppedFrames == 48_000 - 16_384, "\(recorder.droppedFrames) dropped")
        for c in 0..<2 {
            #expect(Array(file[c][0..<16_384]) == Array(input[c][0..<16_384]), "the first ring-full, channel \(c)")
            #expect(file[c][16_384..<48_000].allSatisfy { $0 == 0 }, "the frames with no room, channel \(c)")
            #expect(Array(file[c][48_000...]) == Array(input[c][48_000...]), "after the gap, channel \(c)")
        }
    }

    /// Cycles whose sample time jumps ahead (a device away, a graph the server stopped): the frames between are
    /// silence in the file, in their place, counted as gaps and not as losses — in real time and offline, a jump
    /// inside the recording and one at its start alike; a cycle that comes back in time is no gap.
    @Test(arguments: [false, true]) func gapsInTheSampleTimeAreSilenceInPlace(realTime: Bool) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let input = Self.signal(30_000)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: 48_000))
        let recorder = try RecorderUnit(format: stereo, path: dir.file("r.wav"), waitsForStart: true)
        let node = try graph.addNode(recorder)
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        if realTime { graph.willRender(.realTime(maximumCycleFrames: 1000)) }
        recorder.startRecording(atSampleTime: 500)
        // Cycles of 1000 frames at sample times 0, 1000, 2000, then 50,000 on (a gap of 47,000 frames), then 1,000
        // frames more of a gap a few cycles later; the recording starts at 500.
        var times: [Int64] = [0, 1000, 2000]
        times += (0..<10).map { 50_000 + Int64($0) * 1000 }
        times += (0..<10).map { 61_000 + Int64($0) * 1000 }
        for t in times { _ = graph.renderCycle(frames: 1000, timeStamp: RenderTimeStamp(sampleTime: t)) }
        let frames = try recorder.finish()
        #expect(frames == 71_000 - 500, "the file keeps the timeline: \(frames) frames")
        #expect(recorder.gapFrames == 48_000 && recorder.droppedFrames == 0, "gaps \(recorder.gapFrames), dropped \(recorder.droppedFrames)")
        let file = try FFmpeg.decode(dir.file("r.wav"), channels: 2)
        // The player's frames in render order, each cycle's where its sample time says.
        var expected = [[Float]](repeating: [Float](repeating: 0, count: 71_000), count: 2)
        for (i, t) in times.enumerated() {
            for c in 0..<2 { for k in 0..<1000 { expected[c][Int(t) + k] = input[c][i * 1000 + k] } }
        }
        for c in 0..<2 { #expect(file[c] == Array(expected[c][500...]), "channel \(c)") }
    }

    /// Offline (the default) nothing is lost however far behind the writer is: the render waits for it.
    @Test func offlineTheRenderWaitsForTheWriter() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = Self.signal(60_000)
        let recorder = try RecorderUnit(format: stereo, path: dir.file("r.wav"), bufferedSeconds: 0.1)
        recorder.writerDelayForTesting = 0.05
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: 48_000))
        let node = try graph.addNode(recorder)
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
        _ = try renderOffline(graph, frames: 60_000, blockSizes: [4096])
        #expect(try recorder.finish() == 60_000 && recorder.droppedFrames == 0)
        #expect(try FFmpeg.decode(dir.file("r.wav"), channels: 2) == input)
        // Finishing a recorder that never rendered gives an empty, valid file.
        let idle = try RecorderUnit(format: stereo, path: dir.file("idle.wav"))
        #expect(try idle.finish() == 0)
        #expect(try FFmpeg.probe(dir.file("idle.wav"))["channels"] == "2")
    }

    @Test func errorsSayWhatIsWrong() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            _ = try RecorderUnit(format: stereo, path: dir.file("no/such/folder/x.wav"))
            Issue.record("a file in a missing folder accepted")
        } catch {
            #expect(error.code == .fileIO, "\(error)")
        }
        #expect(throws: AudioError.self) { try RecorderUnit(format: stereo, path: dir.file("a.wav"), skipFrames: -1) }
        #expect(throws: AudioError.self) { try RecorderUnit(format: stereo, path: dir.file("b.wav"), bufferedSeconds: 0) }
    }
}
