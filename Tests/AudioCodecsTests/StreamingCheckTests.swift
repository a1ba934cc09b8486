import Foundation
import LiveAudio
import Testing
import TestSupport

/// The streaming checks (`FLVContents.check(path:)`, `ADTSStream.check(path:)`) walk a file through a fixed window
/// instead of reading it whole: they must judge every file exactly as the in-memory parsers do, and keep memory
/// flat however large the file.
@Suite struct StreamingCheckTests {
    /// Outcome of a check: the counts it found, or the error's code and message.
    enum Outcome: Equatable {
        case ok(Int, Int)
        case failed(AudioError.Code, String)
    }

    static func memoryFLV(_ bytes: [UInt8]) -> Outcome {
        do throws(AudioError) {
            let c = try FLVContents(parsing: bytes)
            return .ok(c.tags.count, c.tags.filter { $0.type == .audio }.count)
        } catch { return .failed(error.code, error.message) }
    }

    static func streamedFLV(_ path: String) -> Outcome {
        do throws(AudioError) {
            let c = try FLVContents.check(path: path)
            return .ok(c.tagCount, c.audioTagCount)
        } catch { return .failed(error.code, error.message) }
    }

    /// Every truncation, every corrupt fixture and 1000 seeded random damages of a small FLV: the same verdict and
    /// the same message both ways.
    @Test func flvCheckAgreesWithTheParser() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let good = try smallFLV(in: dir)
        var cases: [[UInt8]] = (1...good.count).map { Array(good.prefix($0)) }
        for (index, value) in [(0, 0x47), (3, 2), (8, 3), (8, 0xFF), (12, 1), (13, 7), (13, 0x28), (22, 1), (14, 0x7F), (24, 0x42)] {
            var b = good
            b[index] = UInt8(value)
            cases.append(b)
        }
        var random = SplitMix64(seed: 15)
        for _ in 0..<1000 {
            var b = good
            for _ in 0..<3 { b[Int(random.next() % UInt64(b.count))] = UInt8(truncatingIfNeeded: random.next()) }
            cases.append(b)
        }
        var failures = 0
        for (n, bytes) in cases.enumerated() {
            let path = dir.file("case.flv")
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let (memory, streamed) = (Self.memoryFLV(bytes), Self.streamedFLV(path))
            #expect(memory == streamed, "case \(n): in memory \(memory), streamed \(streamed)")
            if case .failed = memory { failures += 1 }
        }
        #expect(failures > 100 && failures < cases.count, "both kinds of verdict were exercised: \(failures) failures")
    }

    /// The same for ADTS: truncations, a lost sync, a changed layout and seeded random damage.
    @Test func adtsCheckAgreesWithTheParser() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var good: [UInt8] = []
        for n in 0..<6 {
            good += try ADTSHeader(sampleRate: 48_000, channelConfiguration: 2, payloadLength: 20 + n).encoded()
            good += [UInt8](repeating: 0x55, count: 20 + n)
        }
        let id3: [UInt8] = [0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0, 2, 0xAA, 0xBB]
        var cases: [[UInt8]] = (1...good.count).map { Array(good.prefix($0)) } + [id3 + good, Array(id3.prefix(11))]
        var random = SplitMix64(seed: 16)
        for _ in 0..<1000 {
            var b = good
            for _ in 0..<2 { b[Int(random.next() % UInt64(b.count))] = UInt8(truncatingIfNeeded: random.next()) }
            cases.append(b)
        }
        for (n, bytes) in cases.enumerated() {
            let path = dir.file("case.aac")
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            var memory: Outcome
            do throws(AudioError) {
                let frames = try ADTSStream.frames(in: bytes)
                memory = .ok(frames.count, frames.first?.payloadLength ?? -1)
            } catch { memory = .failed(error.code, "'\(path)': \(error.message)") }
            var streamed: Outcome
            do throws(AudioError) {
                let s = try ADTSStream.check(path: path)
                streamed = .ok(s.frameCount, s.first.payloadLength)
            } catch { streamed = .failed(error.code, error.message) }
            #expect(memory == streamed, "case \(n): in memory \(memory), streamed \(streamed)")
        }
    }

    /// A 1 GiB FLV (real AAC packets, repeated): `probe` reads every packet and `encode` gets past the check into
    /// encoding, each with a peak resident set far below the file's size (reading it whole took 684 MiB for a
    /// 300 MB file). `probe --no-loudness`: the loudness line decodes the whole file (7.6 hours here) through
    /// FFmpeg, whose FLV demuxer keeps a 24-byte index entry for every audio packet it reads (31 MB for this file);
    /// that is FFmpeg's, and `encode` below decodes through it too.
    @Test func aGigabyteFLVInFlatMemory() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=f=440:d=2", "-ar", "48000", "-ac", "2", "-c:a", "aac", "-b:a", "320k", dir.file("tone.aac")])
        let frames = try ADTSStream.frames(in: Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("tone.aac")))))
        let raw = try Array(Data(contentsOf: URL(fileURLWithPath: dir.file("tone.aac"))))
        var payloads: [[UInt8]] = []
        var offset = 0
        for f in frames {
            payloads.append(Array(raw[(offset + 7)..<(offset + f.frameLength)]))
            offset += f.frameLength
        }
        let big = dir.file("big.flv")
        let writer = try FLVFileWriter(
            path: big, sampleRate: 48_000, channelCount: 2, bitRate: 320_000, audioSpecificConfig: [0x11, 0x90])
        var n = 0
        while writer.bytesWritten < 1 << 30 {
            try writer.writeAAC(payloads[10 + n % (payloads.count - 20)], milliseconds: Int64(n) * 1024 * 1000 / 48_000)
            n += 1
        }
        try writer.finish(duration: Double(n) * 1024 / 48_000)

        let liveaudio = productsDirectory + "/liveaudio"
        let probe = try await runTool("/usr/bin/time", ["-f", "maxrss_kb=%M", liveaudio, "probe", "--no-loudness", big])
        #expect(probe.status == 0, "\(probe.stderr)")
        #expect(probe.stdout.contains("\(n)"), "every packet counted: \(probe.stdout)")
        let probePeak = Int(probe.stderr.split(separator: "\n").last { $0.hasPrefix("maxrss_kb=") }?.dropFirst(10) ?? "") ?? .max
        #expect(probePeak < 100 * 1024, "probe's peak: \(probePeak / 1024) MB")

        // encode: past the check (the output grows), then stopped; the peak so far is read from /proc.
        let out = dir.file("out.m4a")
        let (status, peak) = try await offPool { () -> (Int32, Int) in
            let child = try ChildProcess(liveaudio, ["encode", big, "-o", out], log: dir.file("encode.log"))
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, child.isRunning,
                (try? FileManager.default.attributesOfItem(atPath: out)[.size] as? Int) ?? 0 < 100_000
            {
                usleep(20_000)
            }
            let status = (try? String(contentsOfFile: "/proc/\(child.pid)/status", encoding: .utf8)) ?? ""
            let hwm = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
            let kb = hwm.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? .max
            kill(child.pid, SIGINT)
            return (child.wait(timeout: 20), kb)
        }
        #expect(status == 0, "the encode was stopped and finished its file")
        #expect(peak < 100 * 1024, "encode's peak: \(peak / 1024) MB")
    }
}
