import Foundation
import LiveAudio
import Testing
import TestSupport

/// `liveaudio encode` and `liveaudio probe`, run as a user runs them; their files checked by FFmpeg.
@Suite struct EncodeCommandTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    /// An MP3 made by FFmpeg, encoded to each kind of output: ffprobe agrees on the codec, rate and channels,
    /// ffmpeg decodes it without complaint, and `probe` reports what the file holds.
    @Test(arguments: ["aac", "flv", "m4a"])
    func encodesAnyInputToEachContainer(ext: String) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("src.wav"), channels: SignalCheck.testSignal(seconds: 3, sampleRate: 44_100), sampleRate: 44_100)
        try FFmpeg.run(["-i", dir.file("src.wav"), "-c:a", "libmp3lame", "-b:a", "192k", dir.file("in.mp3")])
        let out = dir.file("out.\(ext)")
        let r = try runProcess(liveaudio, ["encode", dir.file("in.mp3"), "-o", out, "--bitrate", "96k"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("AAC-LC 44.1 kHz, 2 ch, 96k"), "\(r.stdout)")
        let info = try FFmpeg.probe(out)
        #expect(info["codec_name"] == "aac" && info["profile"] == "LC", "\(info)")
        #expect(info["sample_rate"] == "44100" && info["channels"] == "2", "\(info)")
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", out, "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
        // 3 s at 44.1 kHz plus 1024 of priming: 131 packets.
        let p = try runProcess(liveaudio, ["probe", out])
        #expect(p.status == 0, "\(p.stderr)")
        #expect(p.stdout.contains("aac (LC)") && p.stdout.contains("rate: 44.1 kHz, channels: 2"), "\(p.stdout)")
        #expect(p.stdout.contains("packets: 131"), "\(p.stdout)")
        if ext == "m4a" {
            #expect(p.stdout.contains("duration: 3.000000 s") && p.stdout.contains("priming: 1024 samples"), "\(p.stdout)")
            #expect(p.stdout.contains("first timestamp: -0.023220 s"), "\(p.stdout)")
        } else {
            #expect(p.stdout.contains("priming: not signalled"), "\(p.stdout)")
            #expect(p.stdout.contains("first timestamp: 0.000000 s"), "\(p.stdout)")
        }
        if ext == "flv" {
            // Packet 130 at round(130 × 1024 × 1000 / 44100) = 3019 ms.
            #expect(p.stdout.contains("last timestamp: 3.019000 s"), "\(p.stdout)")
        }
    }

    /// WAV output in each sample format; --channels and --sample-rate convert on the way.
    @Test func wavOutputAndConversions() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: SignalCheck.testSignal(seconds: 1))
        for (format, codec) in [("s16", "pcm_s16le"), ("s24", "pcm_s24le"), ("s32", "pcm_s32le"), ("f32", "pcm_f32le")] {
            let out = dir.file("out-\(format).wav")
            let r = try runProcess(liveaudio, ["encode", dir.file("in.wav"), "-o", out, "--sample-format", format])
            #expect(r.status == 0, "\(r.stderr)")
            let info = try FFmpeg.probe(out)
            #expect(info["codec_name"] == codec && info["duration_ts"] == "48000", "\(info)")
        }
        let r = try runProcess(
            liveaudio, ["encode", dir.file("in.wav"), "-o", dir.file("mono.m4a"), "--channels", "1", "--sample-rate", "32000"])
        #expect(r.status == 0, "\(r.stderr)")
        let info = try FFmpeg.probe(dir.file("mono.m4a"))
        #expect(info["channels"] == "1" && info["sample_rate"] == "32000" && info["duration_ts"] == "32000", "\(info)")
    }

    /// Bad input: a clear error, exit status 1, and no output file left behind.
    @Test func badInputLeavesNothingBehind() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("odd.wav"), channels: [[Float](repeating: 0.1, count: 3780)], sampleRate: 37_800)
        try writeWAV(dir.file("ok.wav"), channels: SignalCheck.testSignal(seconds: 1))
        #expect(FileManager.default.createFile(atPath: dir.file("empty.wav"), contents: Data()))
        var wav = Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("ok.wav"))))
        wav.replaceSubrange(12..<16, with: Array("junk".utf8))  // the 'fmt ' chunk is gone
        try Data(wav).write(to: URL(fileURLWithPath: dir.file("corrupt.wav")))
        _ = try runProcess(liveaudio, ["encode", dir.file("ok.wav"), "-o", dir.file("good.flv")])
        var flv = Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("good.flv"))))
        flv[flv.count - 1] ^= 0x10  // the last PreviousTagSize
        try Data(flv).write(to: URL(fileURLWithPath: dir.file("corrupt.flv")))
        _ = try runProcess(liveaudio, ["encode", dir.file("ok.wav"), "-o", dir.file("good.aac")])
        let adts = Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("good.aac"))))
        try Data(adts.dropLast(3)).write(to: URL(fileURLWithPath: dir.file("corrupt.aac")))
        let cases: [([String], String)] = [
            ([dir.file("odd.wav"), "-o", dir.file("o1.aac")], "add --sample-rate with one of"),
            ([dir.file("ok.wav"), "-o", dir.file("o2.m4a"), "--profile", "he-aac"], "AAC-LC only"),
            ([dir.file("ok.wav"), "-o", dir.file("o3.flv"), "--channels", "0"], "--channels must be 1 to 8"),
            ([dir.file("ok.wav"), "-o", dir.file("o4.aac"), "--bitrate", "lots"], "--bitrate must be"),
            ([dir.file("ok.wav"), "-o", dir.file("o5.aac"), "--bitrate", "500k"], "32k…320k"),
            ([dir.file("corrupt.wav"), "-o", dir.file("o6.aac")], "'fmt '"),
            ([dir.file("corrupt.flv"), "-o", dir.file("o7.m4a")], "PreviousTagSize"),
            ([dir.file("corrupt.aac"), "-o", dir.file("o8.flv")], "cut short"),
            ([dir.file("empty.wav"), "-o", dir.file("o9.aac")], "is empty"),
            ([dir.file("missing.mp3"), "-o", dir.file("o10.aac")], "No such file"),
            ([dir.file("ok.wav"), "-o", dir.file("o11.ogg")], "name it .aac, .flv, .m4a, .mp4 or .wav"),
            ([dir.file("ok.wav"), "-o", dir.file("no/such/dir.aac")], "does not exist"),
        ]
        for (args, message) in cases {
            let r = try runProcess(liveaudio, ["encode"] + args)
            #expect(r.status == 1, "\(args): status \(r.status)")
            #expect(r.stderr.contains("liveaudio: error:") && r.stderr.contains(message), "\(args): \(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: args[2]), "\(args[2]) was left behind")
        }
        let p = try runProcess(liveaudio, ["probe", dir.file("corrupt.flv")])
        #expect(p.status == 1 && p.stderr.contains("PreviousTagSize"), "\(p.stderr)")
    }

    /// Killed mid-way: ADTS and FLV survive even SIGKILL (every frame is on disk as it is made); M4A and WAV are
    /// finished on SIGTERM and SIGINT. Each plays with ffmpeg up to where it stopped.
    @Test(arguments: [("aac", SIGKILL), ("flv", SIGKILL), ("m4a", SIGTERM), ("m4a", SIGINT), ("wav", SIGTERM)])
    func killedMidWayLeavesAPlayableFile(ext: String, signal: Int32) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Five minutes of input: far more than the run gets through before the signal.
        let input = dir.file("long.flac")
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=f=440:r=48000:d=300", "-ac", "2", input])
        let out = dir.file("out.\(ext)")
        // Started and watched from a thread of its own: the cooperative pool may be busy with other suites for
        // seconds, and a WAV encode would finish unobserved.
        let liveaudio = self.liveaudio
        let log = dir.file("log.txt")
        let (child, status, sizeAtSignal) = try await offPool { () -> (ChildProcess, Int32, Int) in
            let child = try ChildProcess(liveaudio, ["encode", input, "-o", out], log: log)
            let deadline = Date().addingTimeInterval(30)
            func size() -> Int { (try? FileManager.default.attributesOfItem(atPath: out)[.size] as? Int) ?? 0 }
            while Date() < deadline, size() < 200_000 { usleep(2000) }
            guard child.isRunning else { return (child, -1, 0) }
            let atSignal = size()
            kill(child.pid, signal)
            return (child, child.wait(timeout: 20), atSignal)
        }
        defer { child.stop(signal: SIGKILL) }
        #expect(status != -1, "the encode finished before it could be stopped: \(child.output)")
        if signal == SIGKILL {
            #expect(status == 128 + SIGKILL)
        } else {
            #expect(status == 0, "\(child.output)")
            #expect(child.output.contains("stopped early"), "\(child.output)")
        }
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", out, "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
        let info = try FFmpeg.probe(out)
        #expect(info["codec_name"] == (ext == "wav" ? "pcm_s16le" : "aac"), "\(info)")
        let decoded = try FFmpeg.decode(out, channels: 2)
        // At least what the file held when the signal was sent (it only grows after): 4 bytes a frame for 16-bit
        // stereo WAV; for AAC the 128 kbit/s default, 16 kB a second, less 20 % for the encoder's rate control
        // (a sine takes fewer bits than the target, which only adds frames). And less than the whole input: it
        // stopped early.
        let bytesPerSecond = ext == "wav" ? 4.0 * 48_000 : 16_000 / 0.8
        let atLeast = Int(Double(sizeAtSignal - 4096) / bytesPerSecond * 48_000)
        #expect(decoded[0].count >= atLeast && decoded[0].count < 300 * 48_000, "\(decoded[0].count) frames, at least \(atLeast)")
        let level = SignalCheck.toneAmplitude(decoded[0][24_000..<48_000], frequency: 440)
        #expect(level > 0.05, "the tone is there: \(level)")
    }
}
