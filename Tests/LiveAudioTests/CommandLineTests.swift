import Foundation
import LiveAudio
import Testing
import TestSupport

/// `liveaudio` run as a user runs it; its files checked by FFmpeg.
@Suite struct CommandLineTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    func mixGraph(in dir: TemporaryDirectory, voiceSeconds: Double = 2) throws -> String {
        try writeWAV(
            dir.file("voice.wav"),
            channels: [(0..<Int(voiceSeconds * 48_000)).map { 0.5 * Float(sin(2 * Double.pi * 220 * Double($0) / 48_000)) }],
            sampleType: .int16)
        let json = """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "voice", "type": "file", "path": "voice.wav"},
                       {"id": "beep", "type": "tone", "frequency": 440, "amplitude": 0.25},
                       {"id": "hiss", "type": "noise", "amplitude": 0.1, "seed": 7},
                       {"id": "mix", "type": "mixer", "inputs": 3, "volume": [1.0, 0.5, 0.2], "pan": [0, 0, 0], "masterVolume": 1.0},
                       {"id": "trim", "type": "gain", "gain": -6}],
             "connections": [{"from": "voice", "to": "mix", "bus": 0}, {"from": "beep", "to": "mix", "bus": 1},
                             {"from": "hiss", "to": "mix", "bus": 2}, {"from": "mix", "to": "trim"},
                             {"from": "trim", "to": "output"}]}
            """
        try json.write(toFile: dir.file("mix.json"), atomically: true, encoding: .utf8)
        return dir.file("mix.json")
    }

    @Test func renderUntilFilesEndThenCheckWithFFmpeg() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let graph = try mixGraph(in: dir)
        let r = try runProcess(liveaudio, ["render", graph, "-o", dir.file("out.wav")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("96000 frames"))
        let probe = try FFmpeg.probe(dir.file("out.wav"))
        #expect(probe["codec_name"] == "pcm_f32le" && probe["sample_rate"] == "48000" && probe["channels"] == "2")
        #expect(probe["duration_ts"] == "96000")
        // The mix against a reference computed here: voice + 0.5·tone + 0.2·noise, then −6 dB. The noise is
        // bounded by 0.1, so the difference from the deterministic part stays within 0.2 · 0.1 · g.
        let decoded = try FFmpeg.decode(dir.file("out.wav"), channels: 2)
        let g = Float(pow(10, -6.0 / 20))
        var worst: Float = 0
        for n in 0..<96_000 {
            let voice = Float(0.5 * sin(2 * Double.pi * 220 * Double(n) / 48_000))
            let quantized = Float((Double(voice) * 32768).rounded()) / 32768
            let tone = Float(0.25 * sin(2 * Double.pi * 440 * Double(n) / 48_000))
            worst = max(worst, abs(decoded[0][n] - g * (quantized + 0.5 * tone)))
        }
        #expect(worst <= 0.2 * 0.1 * g + 1e-5)
        #expect(worst > 0.001, "the noise is there")
    }

    @Test func durationBlockSizeAndInt16Output() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let graph = try mixGraph(in: dir)
        let a = try runProcess(liveaudio, ["render", graph, "-o", dir.file("a.wav"), "--duration", "0.5", "--sample-format", "s16", "--block-frames", "1"])
        let b = try runProcess(liveaudio, ["render", graph, "-o", dir.file("b.wav"), "--duration", "0.5", "--sample-format", "s16", "--block-frames", "4096"])
        #expect(a.status == 0 && b.status == 0, "\(a.stderr) \(b.stderr)")
        #expect(try FFmpeg.probe(dir.file("a.wav"))["codec_name"] == "pcm_s16le")
        #expect(try FFmpeg.probe(dir.file("a.wav"))["duration_ts"] == "24000")
        let da = try Data(contentsOf: URL(fileURLWithPath: dir.file("a.wav")))
        let db = try Data(contentsOf: URL(fileURLWithPath: dir.file("b.wav")))
        #expect(da == db, "the block size does not change the output")
    }

    @Test func infoPrintsFormatAndDuration() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=sample_rate=44100:duration=2.5", "-ac", "2", "-c:a", "pcm_s24le", dir.file("x.wav")])
        let r = try runProcess(liveaudio, ["info", dir.file("x.wav")])
        #expect(r.status == 0)
        #expect(r.stdout.contains("WAV, 44.1 kHz, 2 channels, 24-bit integer"))
        #expect(r.stdout.contains("frames: 110250") && r.stdout.contains("duration: 2.500 s"))
        let bad = try runProcess(liveaudio, ["info", dir.file("missing.wav")])
        #expect(bad.status != 0 && bad.stderr.contains("missing.wav") && bad.stderr.contains("['fil!']"))
    }

    @Test func failuresLeaveNoPartialOutput() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let graph = try mixGraph(in: dir)
        func expectFailure(_ args: [String], _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let r = try runProcess(liveaudio, args)
            #expect(r.status != 0, sourceLocation: sourceLocation)
            #expect(r.stderr.contains(fragment), "\(r.stderr)", sourceLocation: sourceLocation)
            let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { !["voice.wav", "mix.json", "bad.json"].contains($0) }
            #expect(left.isEmpty, "left behind: \(left)", sourceLocation: sourceLocation)
        }
        try expectFailure(["render", graph, "-o", dir.file("o.wav"), "--sample-format", "u8"], "f32 or s16")
        try expectFailure(["render", graph, "-o", dir.file("o.wav"), "--block-frames", "0"], "--block-frames")
        try expectFailure(["render", graph, "-o", dir.file("o.wav"), "--duration", "-1"], "--duration")
        try expectFailure(["render", dir.file("none.json"), "-o", dir.file("o.wav")], "none.json")
        try expectFailure(["render", graph, "-o", dir.file("nofolder/o.wav")], "does not exist")
        try #"{"nodes": [{"id": "beep", "type": "tone", "amplitude": 3}]}"#.write(toFile: dir.file("bad.json"), atomically: true, encoding: .utf8)
        try expectFailure(["render", dir.file("bad.json"), "-o", dir.file("o.wav"), "--duration", "1"], "node 'beep' (tone): field 'amplitude'")
        try #"{"nodes": [{"id": "beep", "type": "tone"}], "connections": [{"from": "beep", "to": "output"}]}"#.write(
            toFile: dir.file("bad.json"), atomically: true, encoding: .utf8)
        try expectFailure(["render", dir.file("bad.json"), "-o", dir.file("o.wav")], "--duration")
    }
}
