import Foundation
import LiveAudio
import Testing
import TestSupport

/// `liveaudio loudness`, `probe`'s loudness line and `--normalize` on `encode` and `render`, run as a user runs them;
/// their figures checked against FFmpeg's `ebur128` filter and pyloudnorm (PyPI), two meters written apart from
/// LiveAudio's.
@Suite struct LoudnessCommandTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized.path
    static var python: String { repository + "/.build/test-venv/bin/python3" }

    /// Music-like material made by FFmpeg: plucked notes that decay, a chord that swells, a melody line, noise hits
    /// on the beat, different in each channel, with a quiet verse before a loud chorus. Variant 2 has a loud short
    /// strike every second over a quiet accompaniment: its peaks stand 20 dB over its loudness.
    static func music(_ path: String, rate: Int, seconds: Int, variant: Int) throws {
        let peaky = "0.12*sin(2*PI*220*t)*exp(-4*mod(t,0.5))+0.08*sin(2*PI*330*t)*(0.6+0.4*sin(2*PI*0.25*t))+0.8*exp(-80*mod(t,1))*sin(2*PI*1800*t)"
            + "|0.12*sin(2*PI*220*t+0.5)*exp(-4*mod(t,0.5))+0.06*sin(2*PI*495*t)+0.8*exp(-80*mod(t,1))*sin(2*PI*1800*t+1)"
        let tones = variant == 2 ? peaky : variant == 0
            ? "0.25*sin(2*PI*220*t)*exp(-4*mod(t,0.5))+0.15*sin(2*PI*330*t)*(0.6+0.4*sin(2*PI*0.25*t))+0.1*sin(2*PI*(440+220*gt(mod(t,2),1))*t)"
                + "|0.25*sin(2*PI*220*t+0.5)*exp(-4*mod(t,0.5))+0.12*sin(2*PI*495*t)*(0.6+0.4*cos(2*PI*0.25*t))+0.08*sin(2*PI*660*t)"
            : "0.3*sin(2*PI*(55*(1+gt(mod(t,1),0.5)))*t)*exp(-2*mod(t,0.5))+0.1*sin(2*PI*523*t)*exp(-1*mod(t,0.75))+0.05*sin(2*PI*1568*t)"
                + "|0.3*sin(2*PI*(55*(1+gt(mod(t,1),0.5)))*t)*exp(-2*mod(t,0.5))+0.1*sin(2*PI*659*t)*exp(-1*mod(t,0.75))+0.04*sin(2*PI*3136*t)"
        let noise = variant == 1 ? "white" : "pink"
        let hits = variant == 2 ? "0.02+0.2" : "0.05+0.6"
        try FFmpeg.run([
            "-f", "lavfi", "-i", "aevalsrc=exprs='\(tones)':s=\(rate):d=\(seconds)",
            "-f", "lavfi", "-i", "anoisesrc=color=\(noise):amplitude=0.4:r=\(rate):d=\(seconds):seed=\(7 + variant)",
            "-filter_complex",
            "[1]aformat=channel_layouts=stereo,volume='\(hits)*lt(mod(t,0.25),0.04)':eval=frame[n];[0][n]amix=inputs=2:normalize=0,"
                + "volume='if(lt(t,\(seconds / 3)),0.25,1)':eval=frame",
            "-c:a", "pcm_f32le", path,
        ])
    }

    /// pyloudnorm's integrated loudness of a WAV file.
    static func pyloudnorm(_ path: String) throws -> Double {
        let r = try runProcess(python, [
            "-c", "import sys, soundfile, pyloudnorm; d, r = soundfile.read(sys.argv[1]); print(pyloudnorm.Meter(r).integrated_loudness(d))",
            path,
        ])
        guard r.status == 0, let v = Double(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw FFmpegError(message: "pyloudnorm (from .build/test-venv, made by scripts/install-deps.sh) failed: \(r.stderr)")
        }
        return v
    }

    struct Measured: Decodable {
        let file: String
        let integrated: Double?
        let loudnessRange: Double?
        let truePeak: Double?
        let samplePeak: Double?
        let channels: Int?
        let weighting: String?
        let error: String?
    }

    func measure(_ files: [String]) throws -> (status: Int32, results: [Measured], stderr: String) {
        let r = try runProcess(liveaudio, ["loudness", "--json"] + files)
        let results = try JSONDecoder().decode([Measured].self, from: Data(r.stdout.utf8))
        return (r.status, results, r.stderr)
    }

    /// On music-like material at two rates, mono speech-like material, and an MP3: the integrated loudness within
    /// 0.1 LU of FFmpeg's ebur128 and of pyloudnorm, the true peak within 0.3 dB of FFmpeg's.
    @Test func agreesWithFFmpegAndPyloudnorm() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.music(dir.file("a.wav"), rate: 44_100, seconds: 24, variant: 0)
        try Self.music(dir.file("b.wav"), rate: 48_000, seconds: 30, variant: 1)
        // Mono: a gliding, tremolo'd tone with pauses (BS.1770 counts one channel once).
        try FFmpeg.run([
            "-f", "lavfi", "-i", "aevalsrc=exprs='0.4*sin(2*PI*(150+100*sin(2*PI*0.3*t))*t)*(0.5+0.5*sin(2*PI*4*t))*gt(mod(t,3),0.6)':s=32000:d=15",
            "-c:a", "pcm_s16le", dir.file("c.wav"),
        ])
        try FFmpeg.run(["-i", dir.file("a.wav"), "-c:a", "libmp3lame", "-b:a", "160k", dir.file("a.mp3")])
        let files = ["a.wav", "b.wav", "c.wav", "a.mp3"].map(dir.file)
        let (status, results, stderr) = try measure(files)
        #expect(status == 0, "\(stderr)")
        for (file, m) in zip(files, results) {
            let ours = try #require(m.integrated)
            let ff = try FFmpeg.ebur128(file)
            #expect(abs(ours - ff.integrated) <= 0.1, "\(file): LiveAudio \(ours) LUFS, FFmpeg \(ff.integrated)")
            #expect(abs(try #require(m.truePeak) - ff.truePeak) <= 0.3, "\(file): true peak \(m.truePeak ?? 0), FFmpeg \(ff.truePeak)")
            // LRA: the two meters step their short-term windows differently (FFmpeg from the first sample); within 1 LU.
            #expect(abs(try #require(m.loudnessRange) - ff.range) <= 1, "\(file): LRA \(m.loudnessRange ?? 0), FFmpeg \(ff.range)")
            if file.hasSuffix(".wav") {
                let py = try Self.pyloudnorm(file)
                #expect(abs(ours - py) <= 0.1, "\(file): LiveAudio \(ours) LUFS, pyloudnorm \(py)")
            }
        }
        // The text form says the same.
        let text = try runProcess(liveaudio, ["loudness", files[0]])
        #expect(text.status == 0 && text.stdout.contains(String(format: "integrated %.1f LUFS", results[0].integrated ?? 0)), "\(text.stdout)")
        // probe's line.
        let probe = try runProcess(liveaudio, ["probe", files[1]])
        #expect(probe.stdout.contains(String(format: "loudness: %.1f LUFS integrated", results[1].integrated ?? 0)), "\(probe.stdout)")
    }

    /// Silence has no integrated loudness and says so; a file that cannot be read is reported and the others still
    /// measured; six channels say how they were weighted.
    @Test func silenceErrorsAndSurround() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "anullsrc=r=48000:cl=stereo", "-t", "3", "-c:a", "pcm_s16le", dir.file("silent.wav")])
        try Data("RIFF\u{0}\u{0}garbage".utf8).write(to: URL(fileURLWithPath: dir.file("broken.wav")))
        try FFmpeg.run([
            "-f", "lavfi", "-i", "sine=frequency=1000:sample_rate=48000:duration=5", "-filter_complex",
            "[0]volume=-1.94dB,asplit=6[a][b][c][d][e][f];[a][b][c][d][e][f]join=inputs=6:channel_layout=5.1",
            "-c:a", "pcm_s16le", dir.file("surround.wav"),
        ])
        let (status, results, _) = try measure(["silent.wav", "broken.wav", "surround.wav"].map(dir.file))
        #expect(status == 1, "a file that failed makes the exit status 1")
        #expect(results.count == 3)
        #expect(results[0].integrated == nil && results[0].error == nil, "silence: null, not a number")
        #expect(results[1].error != nil && results[1].integrated == nil)
        // 5.1: L R C at 1, Ls Rs at 1.41, the LFE not counted: a −20 dBFS sine in each (FFmpeg's sine source is at
        // 1/8, −18.06 dBFS; 1.94 dB less makes −20) gives
        // −0.691 + 10 log10(0.5 · 10^−2 · (3 + 2 · 1.41)) + 0.691 (K-weighting at 1 kHz) = −24.36 LUFS.
        let surround = try #require(results[2].integrated)
        #expect(abs(surround - (10 * log10(0.5 * 0.01 * (3 + 2 * 1.41)))) <= 0.1, "5.1: \(surround)")
        #expect(results[2].weighting?.contains("LFE not counted") == true, "\(results[2].weighting ?? "")")
        let text = try runProcess(liveaudio, ["loudness", dir.file("silent.wav"), dir.file("surround.wav")])
        #expect(text.stdout.contains("integrated -inf LUFS (silent"), "\(text.stdout)")
        #expect(text.stdout.contains("channels: 5.1 (L R C LFE Ls Rs), weighted as BS.1770 asks"), "\(text.stdout)")
        // --normalize on silence writes the audio unchanged and says why.
        let r = try runProcess(liveaudio, ["encode", dir.file("silent.wav"), "-o", dir.file("out.wav"), "--normalize"])
        #expect(r.status == 0 && r.stdout.contains("--normalize changed nothing: the input is silent"), "\(r.stdout) \(r.stderr)")
        #expect(try FFmpeg.decode(dir.file("out.wav"), channels: 2)[0].allSatisfy { $0 == 0 })
        // The value apart, with its unit.
        let apart = try runProcess(liveaudio, ["encode", dir.file("surround.wav"), "-o", dir.file("y.wav"), "--normalize", "-20 LUFS"])
        #expect(apart.status == 0 && apart.stdout.contains("normalized to -20.0 LUFS"), "\(apart.stdout) \(apart.stderr)")
        // A target out of range, a value that is not a loudness.
        for bad in ["--normalize=5", "--normalize=loud"] {
            let e = try runProcess(liveaudio, ["encode", dir.file("surround.wav"), "-o", dir.file("x.wav"), bad])
            #expect(e.status == 1 && e.stderr.contains("LUFS") && !FileManager.default.fileExists(atPath: dir.file("x.wav")), "\(e.stderr)")
        }
    }

    /// Two files 12 dB apart come out at the target, by FFmpeg's meter, as AAC and as WAV. A third, whose peaks
    /// stand far over its loudness (decaying plucks, a quiet verse), needs a gain that would push its true peak over
    /// the ceiling: the limiter holds it there (FFmpeg's true peak of the file: the ceiling + 0.2 dB at most) and the
    /// loudness still reaches the target. A lower ceiling, and `render --normalize`, the same.
    @Test func normalizeBringsFilesToTheTarget() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.music(dir.file("loud.wav"), rate: 48_000, seconds: 20, variant: 1)
        try FFmpeg.run(["-i", dir.file("loud.wav"), "-af", "volume=-12dB", "-c:a", "pcm_f32le", dir.file("quiet.wav")])
        try Self.music(dir.file("peaky.wav"), rate: 44_100, seconds: 20, variant: 2)
        for (name, container) in [("loud", "m4a"), ("quiet", "m4a"), ("loud", "wav"), ("quiet", "aac"), ("peaky", "m4a"), ("peaky", "wav")] {
            let out = dir.file("\(name)-16.\(container)")
            let r = try runProcess(liveaudio, ["encode", dir.file("\(name).wav"), "-o", out, "--normalize=-16"])
            #expect(r.status == 0 && r.stdout.contains("normalized to -16.0 LUFS"), "\(r.stdout) \(r.stderr)")
            let ff = try FFmpeg.ebur128(out)
            #expect(abs(ff.integrated + 16) <= 0.3, "\(name).\(container): \(ff.integrated) LUFS by FFmpeg; \(r.stdout)")
            #expect(ff.truePeak <= -1 + 0.2, "\(name).\(container): true peak \(ff.truePeak) dBTP by FFmpeg")
            #expect(r.stdout.contains("a true-peak limiter held the peaks") == (name == "peaky"), "\(r.stdout)")
        }
        // A lower ceiling, the options' values given apart.
        let r = try runProcess(liveaudio, ["encode", dir.file("peaky.wav"), "-o", dir.file("low.wav"), "--normalize", "-23", "--true-peak", "-3"])
        #expect(r.status == 0 && r.stdout.contains("normalized to -23.0 LUFS"), "\(r.stdout) \(r.stderr)")
        let low = try FFmpeg.ebur128(dir.file("low.wav"))
        #expect(abs(low.integrated + 23) <= 0.3 && low.truePeak <= -3 + 0.2, "\(low)")
        // render: a graph playing the quiet file, normalised to −18 LUFS in 16-bit.
        let graph = dir.file("g.json")
        try Data("""
            {"sampleRate": 48000, "channels": 2, "nodes": [{"id": "f", "type": "file", "path": "\(dir.file("peaky.wav"))"}],
             "connections": [{"from": "f", "to": "output"}]}
            """.utf8).write(to: URL(fileURLWithPath: graph))
        let rendered = try runProcess(liveaudio, ["render", graph, "-o", dir.file("r.wav"), "--normalize=-18", "--sample-format", "s16"])
        #expect(rendered.status == 0 && rendered.stdout.contains("normalized to -18.0 LUFS"), "\(rendered.stdout) \(rendered.stderr)")
        #expect(try FFmpeg.probe(dir.file("r.wav"))["codec_name"] == "pcm_s16le")
        let rr = try FFmpeg.ebur128(dir.file("r.wav"))
        #expect(abs(rr.integrated + 18) <= 0.3 && rr.truePeak <= -1 + 0.2, "\(rr)")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix(".liveaudio") }
        #expect(leftovers.isEmpty, "\(leftovers)")
    }
}

/// `liveaudio karaoke SONG --normalize`: songs at one loudness. On the virtual device (real time: phase 2).
@Suite struct KaraokeNormalizeTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    /// Two songs 10 dB apart, each sung with `--normalize` (the voice left out of the recorded song, so the song
    /// stem is the accompaniment as the session played it): the two stems within 0.5 LU of each other and of −18
    /// LUFS by FFmpeg's meter. The second time a song is sung its loudness comes from the cache; a song changed
    /// since (a new modification time) is measured again.
    @Test func songsPlayAtOneLoudness() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try LoudnessCommandTests.music(dir.file("loud.wav"), rate: 48_000, seconds: 8, variant: 1)
        try FFmpeg.run(["-i", dir.file("loud.wav"), "-af", "volume=-10dB", "-c:a", "pcm_s16le", dir.file("quiet.wav")])
        try FFmpeg.run(["-f", "lavfi", "-i", "anullsrc=r=48000:cl=mono", "-t", "10", "-c:a", "pcm_s16le", dir.file("mic.wav")])
        let environment = ["XDG_CACHE_HOME": dir.file("cache")]
        func sing(_ song: String, _ stems: String, _ extra: [String] = []) throws -> String {
            try FileManager.default.createDirectory(atPath: dir.file(stems), withIntermediateDirectories: true)
            let r = try runProcess(
                liveaudio,
                ["karaoke", dir.file(song), "--backend", "virtual", "--input", dir.file("mic.wav"), "--output", dir.file("out.wav"),
                 "--stems", dir.file(stems), "--latency-ms", "0", "--voice-volume", "-inf", "--normalize"] + extra,
                environment: environment)
            #expect(r.status == 0, "\(r.stderr)")
            return r.stderr
        }
        let first = try sing("loud.wav", "a")
        let second = try sing("quiet.wav", "b")
        #expect(first.contains("played at -18.0 LUFS") && !first.contains("from the cache"), "\(first)")
        #expect(second.contains("played at -18.0 LUFS"), "\(second)")
        let a = try FFmpeg.ebur128(dir.file("a/song.wav")).integrated
        let b = try FFmpeg.ebur128(dir.file("b/song.wav")).integrated
        #expect(abs(a - b) <= 0.5 && abs(a + 18) <= 0.5 && abs(b + 18) <= 0.5, "song stems: \(a) and \(b) LUFS")
        // Again (a second of it): from the cache. Then the file changes (its time moves): measured again.
        let again = try sing("quiet.wav", "c", ["--end", "1"])
        #expect(again.contains("(from the cache)"), "\(again)")
        _ = try runProcess("/usr/bin/touch", ["-d", "2020-01-01", dir.file("quiet.wav")])
        let changed = try sing("quiet.wav", "d", ["--end", "1"])
        #expect(!changed.contains("(from the cache)") && changed.contains("played at -18.0 LUFS"), "\(changed)")
        let cache = try String(contentsOfFile: dir.file("cache/liveaudio/loudness.tsv"), encoding: .utf8)
        #expect(cache.split(separator: "\n").count == 3, "a header and one line a song: \(cache)")
    }
}
