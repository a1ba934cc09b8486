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

    /// A writer held back while 4 s pass through a ring of 0.1 s: the frames it had no room for are silence in the
    /// file, in their place — the file keeps its length, every other frame is exact — and they are counted.
    @Test func aWriterBehindWritesSilenceInPlace() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = Self.signal(192_000)
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: 48_000))
        let recorder = try RecorderUnit(format: stereo, path: dir.file("r.wav"), bufferedSeconds: 0.1)
        recorder.writerDelayForTesting = 0.2
        let node = try graph.addNode(recorder)
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
        _ = try renderOffline(graph, frames: 192_000, blockSizes: [960])
        recorder.writerDelayForTesting = 0
        #expect(try recorder.finish() == 192_000)
        let file = try FFmpeg.decode(dir.file("r.wav"), channels: 2)
        #expect(file[0].count == 192_000)
        var silent = 0
        var wrong = 0
        for t in 0..<192_000 {
            if file[0][t] == 0 && file[1][t] == 0 {
                silent += 1
            } else if file[0][t] != input[0][t] || file[1][t] != input[1][t] {
                wrong += 1
            }
        }
        #expect(wrong == 0, "\(wrong) frames out of place")
        #expect(silent > 0 && Int64(silent) == recorder.droppedFrames, "\(silent) silent, \(recorder.droppedFrames) dropped")
        #expect(file[0].prefix(4800).allSatisfy { $0 != 0 }, "the first ring-full was kept")
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
