import AudioCore
import Foundation
@testable import MediaContainers
import Testing
import TestSupport

@Suite struct WAVTests {
    let signal: [[Float]] = [
        (0..<48_000).map { 0.5 * Float(sin(2 * Double.pi * 1000 * Double($0) / 48_000)) },
        (0..<48_000).map { Float($0 % 200) / 100 - 1 },
    ]

    @Test(arguments: [
        (SampleType.int16, "pcm_s16le", Float(1) / 32768), (.int24, "pcm_s24le", Float(1) / 8_388_608),
        (.int32, "pcm_s32le", Float(1) / 2_147_483_648), (.float32, "pcm_f32le", 0),
    ])
    func writtenFilesDecodeInFFmpeg(type: SampleType, codec: String, lsb: Float) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("out.wav")
        try writeWAV(path, channels: signal, sampleType: type)
        let probe = try FFmpeg.probe(path)
        #expect(probe["codec_name"] == codec)
        #expect(probe["sample_rate"] == "48000")
        #expect(probe["channels"] == "2")
        #expect(probe["duration_ts"] == "48000")
        let decoded = try FFmpeg.decode(path, channels: 2)
        for c in 0..<2 {
            // Quantization error is at most half an LSB; FFmpeg's decoder is the reference.
            #expect(maxAbsDifference(decoded[c], signal[c]) <= lsb / 2 + 1e-9)
        }
        // And our reader reads back what FFmpeg reads.
        let reader = try WAVFileReader(path: path)
        #expect(reader.format.sampleType == type && reader.frameCount == 48_000 && !reader.info.isTruncated)
        let buffer = PCMBuffer(channelCount: 2, capacity: 48_000)
        #expect(try reader.read(into: buffer.view(frames: 48_000)) == 48_000)
        for c in 0..<2 { #expect(maxAbsDifference(buffer.channelArray(c).prefix(0) + Array(buffer.view(frames: 48_000)[c]), decoded[c]) == 0) }
        #expect(try reader.read(into: buffer.view(frames: 10)) == 0, "nothing after the end")
    }

    @Test(arguments: ["pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le"])
    func readsWhatFFmpegWrites(codec: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("ff.wav")
        // 3 channels make FFmpeg write WAVE_FORMAT_EXTENSIBLE headers; a LIST chunk precedes the data.
        try FFmpeg.run([
            "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=1.5", "-af", "pan=3c|c0=c0|c1=0.5*c0|c2=-0.25*c0",
            "-c:a", codec, path,
        ])
        let reader = try WAVFileReader(path: path, chunkFrames: 1000)
        #expect(reader.format.channelCount == 3 && reader.format.sampleRate == 44_100)
        #expect(reader.frameCount == 66_150)
        let reference = try FFmpeg.decode(path, channels: 3)
        let buffer = PCMBuffer(channelCount: 3, capacity: 66_150)
        // Read in uneven pieces: incremental reading must give the same samples.
        var done = 0
        var pieces = 0
        while done < 66_150 {
            let n = min(777 + pieces * 13, 66_150 - done)
            done += try reader.read(into: buffer.view(frames: 66_150).slice(from: done, frames: n))
            pieces += 1
        }
        for c in 0..<3 { #expect(maxAbsDifference(Array(buffer.view(frames: 66_150)[c]), reference[c]) == 0) }
    }

    @Test func rejectsBadFilesWithClearErrors() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        func expectError(_ path: String, _ code: AudioError.Code, _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation) {
            do {
                _ = try WAVFileReader(path: path)
                Issue.record("accepted \(path)", sourceLocation: sourceLocation)
            } catch {
                #expect(error.code == code, sourceLocation: sourceLocation)
                #expect(error.message.contains(fragment), "\(error.message)", sourceLocation: sourceLocation)
            }
        }
        expectError(dir.file("missing.wav"), .fileIO, "No such file")
        expectError(dir.path, .fileIO, "directory")
        try Data("hello, not audio".utf8).write(to: URL(fileURLWithPath: dir.file("text.wav")))
        expectError(dir.file("text.wav"), .unsupportedFile, "not a WAV file")
        try Data("RIFF".utf8).write(to: URL(fileURLWithPath: dir.file("short.wav")))
        expectError(dir.file("short.wav"), .unsupportedFile, "not a WAV file")
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=duration=0.1", "-c:a", "pcm_u8", dir.file("u8.wav")])
        expectError(dir.file("u8.wav"), .unsupportedFile, "8-bit")
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=duration=0.1", "-c:a", "pcm_f64le", dir.file("f64.wav")])
        expectError(dir.file("f64.wav"), .unsupportedFile, "64-bit float")
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=duration=0.1", "-c:a", "adpcm_ms", dir.file("adpcm.wav")])
        expectError(dir.file("adpcm.wav"), .unsupportedFile, "not PCM")

        // A header whose block align disagrees with channels × bits.
        try writeWAV(dir.file("good.wav"), channels: [[0.1, 0.2]], sampleType: .int16)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: dir.file("good.wav")))
        bytes[32] = 7
        try bytes.write(to: URL(fileURLWithPath: dir.file("align.wav")))
        expectError(dir.file("align.wav"), .corruptFile, "bytesPerFrame")
        // No data chunk at all.
        try bytes.prefix(36).write(to: URL(fileURLWithPath: dir.file("nodata.wav")))
        expectError(dir.file("nodata.wav"), .corruptFile, "no 'data' chunk")
    }

    /// The reader's chunk is no larger than the file: it was 4096 frames whatever the file held (1 MiB zeroed to open
    /// a 44-byte file of 64 channels of 32 bits; each fuzz input opens one).
    @Test func theReadChunkIsNoLargerThanTheFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        func header(channels: Int, frames: Int) -> [UInt8] {
            func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
            func le32(_ v: Int) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xFF) } }
            let block = channels * 4, data = frames * block
            return Array("RIFF".utf8) + le32(36 + data) + Array("WAVEfmt ".utf8) + le32(16) + le16(1) + le16(channels)
                + le32(48_000) + le32(48_000 * block) + le16(block) + le16(32) + Array("data".utf8) + le32(data)
                + [UInt8](repeating: 0, count: data)
        }
        try Data(header(channels: 64, frames: 0)).write(to: URL(fileURLWithPath: dir.file("wide.wav")))
        let wide = try WAVFileReader(path: dir.file("wide.wav"))
        #expect(wide.format.channelCount == 64 && wide.frameCount == 0 && wide.chunkCapacity == 1)
        try Data(header(channels: 2, frames: 10)).write(to: URL(fileURLWithPath: dir.file("short.wav")))
        let short = try WAVFileReader(path: dir.file("short.wav"))
        #expect(short.frameCount == 10 && short.chunkCapacity == 10)
        let buffer = PCMBuffer(channelCount: 2, capacity: 64)
        #expect(try short.read(into: buffer.view(frames: 64)) == 10)
    }

    @Test func truncatedFilesKeepTheFramesThatExist() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("full.wav"), channels: [(0..<1000).map { Float($0) / 1000 }], sampleType: .int16)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: dir.file("full.wav")))
        try bytes.prefix(44 + 2 * 600 + 1).write(to: URL(fileURLWithPath: dir.file("cut.wav")))
        let reader = try WAVFileReader(path: dir.file("cut.wav"))
        #expect(reader.info.isTruncated)
        #expect(reader.frameCount == 600)
        let buffer = PCMBuffer(channelCount: 1, capacity: 1000)
        #expect(try reader.read(into: buffer.view(frames: 1000)) == 600)
        #expect(abs(buffer.view(frames: 600)[0][599] - 0.599) < 1e-4)
    }
}
