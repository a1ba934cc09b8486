import AudioCodecs
import Foundation
import LiveAudio
import Synchronization
import Testing
import TestSupport

/// Reads everything `reader` has.
func readAll(_ reader: any AudioFileReader) throws -> [[Float]] {
    let chunk = PCMBuffer(channelCount: reader.channelCount, capacity: 3000)
    var out = [[Float]](repeating: [], count: reader.channelCount)
    while true {
        let got = try reader.read(into: chunk.view(frames: chunk.capacity))
        if got == 0 { break }
        for c in 0..<reader.channelCount { out[c] += chunk.view(frames: got)[c] }
    }
    return out
}

@Suite struct DecoderTests {
    /// Files FFmpeg made — MP3, FLAC, Ogg Vorbis, Opus, M4A, ADTS, WAV — decode to what FFmpeg's own command line
    /// decodes them to (the same decoders, so within float rounding), with the file's rate and channel count, and
    /// the exact length where the container states one.
    @Test(arguments: [
        ("mp3", ["-c:a", "libmp3lame", "-b:a", "192k"]), ("flac", []), ("ogg", ["-c:a", "libvorbis"]),
        ("opus", ["-c:a", "libopus"]), ("m4a", ["-c:a", "aac"]), ("aac", ["-c:a", "aac"]), ("wav", ["-c:a", "pcm_s24le"]),
    ])
    func decodesWhatFFmpegDecodes(ext: String, codec: [String]) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("src.wav"), channels: SignalCheck.testSignal(seconds: 2, sampleRate: 44_100), sampleRate: 44_100)
        let path = dir.file("in.\(ext)")
        // Opus runs at 48 kHz only.
        try FFmpeg.run(["-i", dir.file("src.wav")] + codec + (ext == "opus" ? ["-ar", "48000"] : []) + [path])
        let reader = try AudioFile.open(path: path)
        let rate = ext == "opus" ? 48_000.0 : 44_100
        #expect(reader.sampleRate == rate && reader.channelCount == 2)
        let ours = try readAll(reader)
        let reference = try FFmpeg.decode(path, channels: 2)
        if ["flac", "wav", "ogg"].contains(ext) {
            #expect(reader.isFrameCountExact && reader.frameCount == 88_200 && ours[0].count == 88_200)
        }
        if ext == "m4a" {
            #expect(ours[0].count == 88_200, "the edit list's end applied")
        } else {
            #expect(ours[0].count == reference[0].count)
        }
        let n = min(ours[0].count, reference[0].count)
        for c in 0..<2 {
            let worst = (0..<n).map { abs(ours[c][$0] - reference[c][$0]) }.max() ?? 1
            #expect(worst < 1e-4, "\(ext) channel \(c): \(worst)")
        }
    }

    /// Asking for another rate resamples: 2 s at 44.1 kHz becomes 96000 frames at 48 kHz, the 523.25 Hz sine keeps
    /// its frequency and level (a single-bin DFT at 48 kHz), and mono asked of stereo is the file's downmix.
    @Test func resamplesAndRemixes() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = SignalCheck.testSignal(seconds: 2, sampleRate: 44_100)
        try writeWAV(dir.file("in.wav"), channels: source, sampleRate: 44_100)
        try FFmpeg.run(["-i", dir.file("in.wav"), "-c:a", "flac", dir.file("in.flac")])
        let reader = try AudioFile.open(path: dir.file("in.flac"), sampleRate: 48_000)
        #expect(reader.frameCount == 96_000)
        let out = try readAll(reader)
        #expect(out[0].count == 96_000)
        let level = SignalCheck.toneAmplitude(out[1][24_000..<72_000], frequency: 523.25)
        #expect(abs(20 * log10(level / 0.25)) < 0.1, "\(level)")
        let off = SignalCheck.toneAmplitude(out[1][24_000..<72_000], frequency: 523.25 * 44_100 / 48_000)
        #expect(off < 0.01)
        // Mono from a mono file copied to two channels.
        try writeWAV(dir.file("mono.wav"), channels: [source[1]], sampleRate: 44_100)
        let up = try readAll(try AudioFile.open(path: dir.file("mono.wav"), sampleRate: 48_000, channelCount: 2))
        #expect(up.count == 2 && up[0] == up[1] && up[0].count == 96_000)
        // WAV at its own rate is read by LiveAudio's own reader.
        #expect(try AudioFile.open(path: dir.file("in.wav")) is WAVFileReader)
    }

    /// A graph file's `file` node plays an MP3 at 44.1 kHz in a 48 kHz graph: the render has the sine at 48 kHz.
    @Test func graphFileNodePlaysCompressedFilesAtTheGraphsRate() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let source = SignalCheck.testSignal(seconds: 2, sampleRate: 44_100)
        try writeWAV(dir.file("in.wav"), channels: source, sampleRate: 44_100)
        try FFmpeg.run(["-i", dir.file("in.wav"), "-c:a", "libmp3lame", "-b:a", "192k", dir.file("song.mp3")])
        let graph = dir.file("g.json")
        try """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "song", "type": "file", "path": "song.mp3"}],
             "connections": [{"from": "song", "to": "output"}]}
            """.write(toFile: graph, atomically: true, encoding: .utf8)
        let loaded = try GraphFile.load(path: graph, maximumFrames: 1024)
        let result = try FileRenderer(loaded: loaded).render(to: dir.file("out.wav"))
        #expect(abs(Int(result.frames) - 96_000) < 2400, "\(result.frames)")
        let out = try FFmpeg.decode(dir.file("out.wav"), channels: 2)
        let level = SignalCheck.toneAmplitude(out[1][24_000..<72_000], frequency: 523.25)
        #expect(abs(20 * log10(level / 0.25)) < 0.3, "\(level)")
    }

    /// Bad files: a clear, typed error naming the file and what is wrong — never a crash, never a half decode.
    @Test func badFilesAreTypedErrors() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(FileManager.default.createFile(atPath: dir.file("empty.mp3"), contents: Data()))
        expectError(.corruptFile, containing: "is empty") { _ = try AudioFile.open(path: dir.file("empty.mp3")) }
        expectError(.fileIO, containing: "No such file") { _ = try AudioFile.open(path: dir.file("missing.flac")) }
        expectError(.fileIO, containing: "directory") { _ = try AudioFile.open(path: dir.path) }
        try "just some text, not audio\n".write(toFile: dir.file("notes.txt"), atomically: true, encoding: .utf8)
        expectError(.unsupportedFile, containing: "notes.txt") { _ = try AudioFile.open(path: dir.file("notes.txt")) }
        // A WAV whose header is damaged is reported by LiveAudio's WAV reader, not guessed at by FFmpeg.
        try writeWAV(dir.file("good.wav"), channels: SignalCheck.testSignal(seconds: 0.5))
        var wav = Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("good.wav"))))
        wav[22] = 0  // 0 channels
        try Data(wav).write(to: URL(fileURLWithPath: dir.file("bad.wav")))
        expectError(.corruptFile, containing: "0 channels") { _ = try AudioFile.open(path: dir.file("bad.wav")) }
        // FLV and ADTS: damage in the middle is found before decoding starts.
        let encoded = dir.file("x.flv")
        _ = try encodeFile(SignalCheck.testSignal(seconds: 1), to: encoded)
        var flv = Array(try Data(contentsOf: URL(fileURLWithPath: encoded)))
        // The size field of the tenth tag: the tag no longer ends where its PreviousTagSize says.
        var offset = 13
        for _ in 0..<10 { offset = try FLVTag.parse(flv, at: offset).next }
        flv[offset + 2] ^= 0x01
        try Data(flv).write(to: URL(fileURLWithPath: dir.file("bad.flv")))
        expectError(.corruptFile, containing: "bad.flv") { _ = try AudioFile.open(path: dir.file("bad.flv")) }
        _ = try encodeFile(SignalCheck.testSignal(seconds: 1), to: dir.file("x.aac"))
        var adts = Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("x.aac"))))
        adts.removeSubrange(adts.count / 2..<adts.count / 2 + 3)
        try Data(adts).write(to: URL(fileURLWithPath: dir.file("bad.aac")))
        expectError(.corruptFile, containing: "ADTS frame") { _ = try AudioFile.open(path: dir.file("bad.aac")) }
        expectError(.unsupportedSampleRate, containing: "1000…768000") {
            _ = try AudioFileDecoder(path: encoded, sampleRate: 10)
        }
    }

    /// Seeking is exact: reading from frame 30000 gives what reading from the start gives there. A seek that
    /// cannot reopen the file is an error, and so is every read after it.
    @Test func seekIsExact() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: SignalCheck.testSignal(seconds: 1))
        try FFmpeg.run(["-i", dir.file("in.wav"), "-c:a", "libmp3lame", dir.file("in.mp3")])
        let decoder = try AudioFileDecoder(path: dir.file("in.mp3"))
        let all = try readAll(decoder)
        try decoder.seek(toFrame: 30_000)
        let chunk = PCMBuffer(channelCount: 2, capacity: 1000)
        #expect(try decoder.read(into: chunk.view(frames: 1000)) == 1000)
        #expect(Array(chunk.view(frames: 1000)[0]) == Array(all[0][30_000..<31_000]))
        try decoder.seek(toFrame: 0)
        #expect(try readAll(decoder) == all)
        // The file gone: the seek fails, and so do reads after it, instead of going on from the old place.
        try FileManager.default.removeItem(atPath: dir.file("in.mp3"))
        expectError(.fileIO, containing: "in.mp3") { try decoder.seek(toFrame: 0) }
        expectError(.fileIO, containing: "in.mp3") { _ = try decoder.read(into: chunk.view(frames: 10)) }
    }
}

@Suite struct EncodingWorkerTests {
    /// Int16 interleaved pushed from another thread in uneven chunks comes out as the same packets as encoding
    /// the whole input directly.
    @Test func pushedAudioEncodesLikeDirectInput() throws {
        let signal = SignalCheck.testSignal(seconds: 3)
        let samples = int16Interleaved(signal)
        let (_, direct) = try encodeInt16(samples, channels: 2, chunk: 144_000)
        let format = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
        let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 2, bitRate: 128_000), inputFormat: format)
        let collected = Mutex<[AACPacket]>([])
        let pool = WorkerPool(name: "la-enc-test")
        let worker = AACEncodingWorker(encoder: encoder, bufferedSeconds: 5, slotFrames: 512, pool: pool) { packets in
            collected.withLock { $0 += packets }
        }
        try worker.start()
        // It encodes as a job of the pool it was given: on that pool's thread.
        #expect(pool.jobCount == 1)
        #expect(threadNames().contains("la-enc-test"), "\(threadNames())")
        var copy = samples
        var time: Int64 = 0
        copy.withUnsafeMutableBytes { raw in
            var done = 0
            var sizes = [1, 441, 1024, 2000, 64].makeIterator()
            while done < signal[0].count {
                let size = sizes.next() ?? 777
                let n = min(size, signal[0].count - done)
                let view = RawBufferView(
                    format: format, base: raw.baseAddress! + done * 4, planeStride: 0, frameCount: n)
                #expect(worker.push(view, sampleTime: time))
                time += Int64(n)
                done += n
            }
        }
        try worker.finish()
        #expect(pool.jobCount == 0)
        #expect(worker.overflows == 0 && worker.droppedFrames == 0)
        let packets = collected.withLock { $0 }
        #expect(packets == direct)
        #expect(worker.packetsEncoded == direct.count)
    }

    /// A ring too small for a slow consumer: pushes are dropped and counted, never waited on, and the encoder
    /// fills each hole with silence so every packet keeps its place on the input's clock.
    @Test func fullRingDropsAndCountsButKeepsTheClock() throws {
        let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 2, bitRate: 128_000))
        let collected = Mutex<[AACPacket]>([])
        let worker = AACEncodingWorker(encoder: encoder, bufferedSeconds: 0.05, slotFrames: 1024) { packets in
            collected.withLock { $0 += packets }
            usleep(20_000)
        }
        #expect(worker.slotCount == 3)
        try worker.start()
        let buffer = PCMBuffer(channelCount: 2, capacity: 512)
        buffer.view(frames: 512)[0].update(repeating: 0.1)
        buffer.view(frames: 512)[1].update(repeating: -0.1)
        let start: Int64 = 5_000
        var time = start
        var refused = 0
        for _ in 0..<400 {
            if !worker.push(buffer.view(frames: 512), sampleTime: time) { refused += 1 }
            time += 512
        }
        // Let the worker catch up (the first three slots always land: 3072 frames, enough for a packet), then end
        // with a push that fits. A deadline, so that a stuck worker fails the test instead of hanging it.
        let deadline = Date().addingTimeInterval(10)
        while worker.packetsEncoded == 0, Date() < deadline { usleep(10_000) }
        #expect(worker.packetsEncoded > 0, "the worker encoded what landed")
        usleep(300_000)
        #expect(worker.push(buffer.view(frames: 512), sampleTime: time))
        time += 512
        try worker.finish()
        #expect(refused > 0 && worker.overflows >= refused && worker.droppedFrames > 0)
        #expect(worker.framesPushed + worker.droppedFrames == time - start)
        #expect(encoder.inputFrames == time - start, "holes are filled")
        #expect(encoder.gapFrames == worker.droppedFrames)
        let packets = collected.withLock { $0 }
        for (n, p) in packets.enumerated() {
            #expect(p.index == n && p.sampleTime == start + Int64(n) * 1024 - 1024)
        }
    }

    /// An error from the handler (a full disk, say) stops the worker; finish() reports it.
    @Test func handlerErrorsReachFinish() throws {
        let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 1, bitRate: 64_000))
        let worker = AACEncodingWorker(encoder: encoder) { _ in
            throw AudioError(.fileIO, "disk full (test)")
        }
        try worker.start()
        let buffer = PCMBuffer(channelCount: 1, capacity: 4096)
        worker.push(buffer.view(frames: 4096), sampleTime: 0)
        expectError(.fileIO, containing: "disk full") { try worker.finish() }
        #expect(worker.failure?.message == "disk full (test)")
        expectError(.invalidState, containing: "already run") { try worker.start() }
    }
}

@Suite struct WorkerToFileTests {
    /// The documented pattern: render-side pushes of Float32 planar into a worker whose handler writes an M4A.
    /// ffprobe reads the file as AAC-LC with exactly the frames pushed.
    @Test func workerWritesAnM4A() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let encoder = try AACEncoder(settings: AACEncoderSettings(sampleRate: 48_000, channelCount: 2))
        let file = try AACFileWriter(path: dir.file("take.m4a"), encoder: encoder)
        let worker = AACEncodingWorker(encoder: encoder, bufferedSeconds: 4) { packets in try file.write(packets) }
        try worker.start()
        let signal = PCMBuffer(channels: SignalCheck.testSignal(seconds: 2))
        var time: Int64 = 0
        while time < 96_000 {
            let n = Int(min(256, 96_000 - time))
            #expect(worker.push(signal.view(frames: 96_000).slice(from: Int(time), frames: n), sampleTime: time))
            time += Int64(n)
        }
        try worker.finish()
        try file.finish(inputFrames: encoder.inputFrames)
        let info = try FFmpeg.probe(dir.file("take.m4a"))
        #expect(info["profile"] == "LC" && info["duration_ts"] == "96000", "\(info)")
    }
}
