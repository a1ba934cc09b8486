import Foundation
import Synchronization
import LiveAudio
import Testing
import TestSupport

/// The karaoke session through a real sound server. The loopback is the singer: JACK's dummy driver with our output
/// ports connected to our input ports, so the microphone hears exactly what the headphones play, one round trip
/// late — the accompaniment alone, since the voice is left out of the headphones here.
@Suite(.serialized) struct KaraokeSessionTests {
    /// 6 s of the test chirp (200 Hz rising 300 Hz a second): it lines up at one lag only.
    static func song(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.file("song.wav")
        try writeWAV(path, channels: [SignalCheck.testSignal(seconds: 6)[0]])
        return path
    }

    /// No xrun was the session's, judged by our own cycles (``KaraokeSession/cycleTimings``), all of them measured:
    /// - none gave its CPU up waiting for something (a lock, a disk, the server): a voluntary context switch;
    /// - none after the first took a page fault (memory touched for the first time on the device thread; the first
    ///   cycle maps in the new thread's stack and the code it runs);
    /// - none computed for half the period or more: the callback's budget, which leaves the other half of the cycle
    ///   to the server and the other clients.
    /// Whatever else makes a cycle late is the machine's: the server's thread or ours woken late, a virtual CPU not
    /// run by its host, the CPU running the same code slower (sampled with `perf record -e cpu-clock`, the slowest
    /// cycles of a run ran the code every cycle runs, no other). Those xruns are printed, not judged; each xrun the
    /// session counted must be one the server sent (its log read for the count alone).
    static func expectNoXrunOfOurs(
        _ counted: Int, on jack: JACKServer, timings: [CycleTiming], periodFrames: Int, sampleRate: Double = 48_000,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(timings.count > 100 && timings.allSatisfy(\.usageMeasured),
                "the session recorded \(timings.count) cycle timings, \(timings.count { !$0.usageMeasured }) not measured",
                sourceLocation: sourceLocation)
        let period = UInt64(Double(periodFrames) / sampleRate * 1e9)
        let first = timings.first?.start ?? 0
        func show(_ t: CycleTiming) -> String {
            String(format: "cycle at %.6f (%.3f s in): %.0f µs, CPU %.0f µs, switches %ld voluntary, %ld involuntary, %ld page faults",
                   Double(t.start) / 1e9, Double(t.start &- first) / 1e9, Double(t.duration) / 1000, Double(t.cpuTime) / 1000,
                   t.voluntarySwitches, t.involuntarySwitches, t.pageFaults)
        }
        print("our cycles: \(CycleTimingSummary(timings, sampleRate: sampleRate)); the busiest:")
        for t in timings.sorted(by: { $0.cpuTime > $1.cpuTime }).prefix(3) { print("  " + show(t)) }
        let overBudget = timings.filter { $0.cpuTime >= period / 2 }
        #expect(overBudget.isEmpty, "our callback computed for half the period or more: \(overBudget.prefix(5).map(show))",
                sourceLocation: sourceLocation)
        let blocked = timings.filter { $0.voluntarySwitches > 0 }
        #expect(blocked.isEmpty, "our callback gave up its CPU waiting: \(blocked.prefix(5).map(show))", sourceLocation: sourceLocation)
        // The first cycle on a new device thread maps in its stack and the code it runs for the first time.
        let faulted = timings.dropFirst().filter { $0.pageFaults > 0 }
        #expect(faulted.isEmpty, "our callback took page faults after its first cycle: \(faulted.prefix(5).map(show))",
                sourceLocation: sourceLocation)
        // The server's last lines reach its log through a pipe and a reader thread: a moment after the session.
        usleep(200_000)
        var sent = jack.xrunNotifications()
        for _ in 0..<10 where counted > sent {
            usleep(100_000)
            sent = jack.xrunNotifications()
        }
        if counted > 0 || sent > 0 { print("xruns: the session counted \(counted); the server sent \(sent)") }
        // A log that cannot be read would count nothing: the server's banner must be in it. jackd's logger drops a
        // line when it is busy (it says "message buffer overruns" when it stops): rare.
        #expect(jack.output.contains("JACK server starting"), "the server's log is not readable: \(jack.output.prefix(200))",
                sourceLocation: sourceLocation)
        #expect(counted <= sent, "the session counted \(counted) xruns, the server sent \(sent)", sourceLocation: sourceLocation)
    }

    /// The server's notifications, counted in its log: a late wake of its thread, and each client it named late.
    @Test func theServersNotificationsAreCountedInItsLog() {
        let log = """
            10.000000 jackdmp 1.9.21
            10.000100 JACK server starting in realtime mode with priority 2
            11.000000 JackTimedDriver::Process XRun = 16 usec
            11.006000 JackEngine::XRun: client = liveaudio was not finished, state = Triggered
            11.006010 JackAudioDriver::ProcessGraphAsyncMaster: Process error
            15.000000 JackEngine::XRun: client = liveaudio was not finished, state = Running
            15.000010 JackEngine::XRun: client peer finished after current callback
            15.000020 JackAudioDriver::ProcessGraphAsyncMaster: Process error
            """
        #expect(JACKServer.xrunNotifications(inLog: log) == 4)
        #expect(JACKServer.xrunNotifications(inLog: "") == 0)
    }

    static func power(_ x: ArraySlice<Float>) -> Double { x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count)) }

    /// The sync rule on JACK at 128, 256 and 1024 frames: the dry-voice stem (the accompaniment heard back through the
    /// loop) lines up with the accompaniment stem within ±48 frames (1 ms), the round trip found by calibration.
    /// The song file is the accompaniment stem times its gain plus the wet-voice stem times its gain, within −90 dB,
    /// before and after the accompaniment is turned down 6 dB while running, and the change does not click.
    @Test(arguments: [128, 256, 1024]) func theVoiceLandsWhereItWasSungOnJACK(period: Int) async throws {
        let jack = try await JACKServer.started(periodFrames: period)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = KaraokeSession.Configuration(song: try Self.song(dir))
        configuration.backend = .jack
        configuration.jackServer = jack.name
        configuration.inputDevice = "self"
        configuration.outputDevice = "self"
        configuration.periodFrames = period
        configuration.monitorVoiceVolume = -.infinity
        configuration.roundTrip = .calibrate
        configuration.cycleTimingCapacity = 100_000
        let stems = dir.file("stems")
        try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
        configuration.stemsDirectory = stems
        let session = try KaraokeSession(configuration)
        try await session.start()
        try await offPool {
            let deadline = Date().addingTimeInterval(30)
            var turnedDown = false
            while !session.songHasEnded, Date() < deadline {
                if !turnedDown, session.player.currentTime >= 3 {
                    session.accompanimentVolume = -6
                    turnedDown = true
                }
                usleep(10_000)
            }
            usleep(200_000)
        }
        let summary = await session.stop()
        print("karaoke on JACK at \(period): \(summary)")
        #expect(summary.error == nil && summary.accompanimentUnderruns == 0 && summary.droppedFrames == 0)
        Self.expectNoXrunOfOurs(summary.xruns, on: jack, timings: session.cycleTimings, periodFrames: period)
        #expect(summary.roundTripSource == "calibration" && summary.roundTripFrames >= period, "\(summary.roundTripFrames) frames")
        // The song is played at the graph's channel count: stereo here, the mono file on both channels.
        let accompaniment = try FFmpeg.decode(stems + "/accompaniment.wav", channels: 2)[0]
        let dry = try FFmpeg.decode(stems + "/voice-dry.wav", channels: 1)[0]
        let wet = try FFmpeg.decode(stems + "/voice-wet.wav", channels: 1)[0]
        let song = try FFmpeg.decode(stems + "/song.wav", channels: 2)
        // The accompaniment stem begins with the song's first frame: nothing recorded before the start.
        let original = SignalCheck.testSignal(seconds: 6)[0]
        #expect(Array(accompaniment.prefix(4800)) == Array(original.prefix(4800)), "the accompaniment stem's start")
        let lag = try #require(SignalCheck.lag(of: Array(accompaniment.prefix(6 * 48_000)), in: dry, window: 48_000, search: 4800))
        #expect(abs(lag) <= 48, "the voice is \(lag) frames off the accompaniment")
        // The song: the accompaniment at 0 dB up to 3 s and at −6 dB from 3.1 s (the change ramps in 20 ms), plus
        // the wet voice, frame for frame.
        let n = min(accompaniment.count, wet.count, song[0].count)
        #expect(n >= 6 * 48_000 - 4800, "\(n) frames")
        let half = Float(pow(10, -6.0 / 20))
        for c in 0..<2 {
            let s = song[c]
            let before: [Float] = (48_000..<(3 * 48_000 - 9600)).map { (t: Int) -> Float in s[t] - accompaniment[t] - wet[t] }
            let after: [Float] = ((3 * 48_000 + 14_400)..<(n - 100)).map { (t: Int) -> Float in
                let a: Float = accompaniment[t] * half
                return s[t] - a - wet[t]
            }
            let level = Self.power(song[c][48_000..<n])
            #expect(10 * log10(max(Self.power(before[...]), 1e-30) / level) < -90, "channel \(c) before the change")
            #expect(10 * log10(max(Self.power(after[...]), 1e-30) / level) < -90, "channel \(c) after the change")
            // No click: around the change the accompaniment's gain in the song glides from 1 to −6 dB over
            // hundreds of frames (the mixer's 20 ms), never outside that span.
            var gliding = 0
            for t in (3 * 48_000 - 4800)..<(3 * 48_000 + 14_400) where abs(accompaniment[t]) > 0.05 {
                let g: Float = (s[t] - wet[t]) / accompaniment[t]
                #expect(g >= half - 0.01 && g <= 1.01, "gain \(g) at \(t)")
                if g > half + 0.01 && g < 0.99 { gliding += 1 }
            }
            #expect(gliding >= 300, "the gain changed over \(gliding) frames")
        }
    }

    /// The calibration with the voice in the headphones at 0 dB (the default), through JACK's self loop at 1024
    /// frames: the voice is kept out of the headphones while the clicks play — through the loop it would bring each
    /// click back once a round trip, and a late copy of one click looks like the next — so the round trip is the
    /// loop's one period, exactly; afterwards the voice is heard again.
    @Test func theCalibrationKeepsTheVoiceOutOfTheLoop() async throws {
        let jack = try await JACKServer.started(periodFrames: 1024)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = KaraokeSession.Configuration(song: try Self.song(dir))
        configuration.backend = .jack
        configuration.jackServer = jack.name
        configuration.inputDevice = "self"
        configuration.outputDevice = "self"
        configuration.periodFrames = 1024
        configuration.roundTrip = .calibrate
        let session = try KaraokeSession(configuration)
        try await session.start()
        let voice = try await offPool { () -> Float in
            // The song comes back through the loop as the voice, and the voice is in the headphones again.
            while session.player.currentTime < 1 { usleep(10_000) }
            _ = session.meters
            usleep(300_000)
            return session.meters.monitorVoice.peak
        }
        let summary = await session.stop()
        #expect(summary.roundTripSource == "calibration" && summary.roundTripFrames == 1024, "\(summary)")
        #expect(voice > 0.05, "the voice was not heard again after the calibration: \(voice)")
    }

    /// A voice chain with latency (a limiter's 3 ms look-ahead, below its ceiling: a pure delay): the wet-voice stem
    /// is shifted by it too, so it lines up with the dry one, to the frame.
    @Test func theWetVoiceIsShiftedByTheChainsLatency() async throws {
        let jack = try await JACKServer.started(periodFrames: 256)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let chain = """
            {"sampleRate": 48000, "channels": 1,
             "nodes": [{"id": "mic", "type": "input", "channels": 1},
                       {"id": "limit", "type": "limiter", "attackTime": 0.003, "ceiling": -1}],
             "connections": [{"from": "mic", "to": "limit"}, {"from": "limit", "to": "output"}]}
            """
        try chain.write(toFile: dir.file("chain.json"), atomically: true, encoding: .utf8)
        var configuration = KaraokeSession.Configuration(song: try Self.song(dir))
        configuration.voiceChain = dir.file("chain.json")
        configuration.backend = .jack
        configuration.jackServer = jack.name
        configuration.inputDevice = "self"
        configuration.outputDevice = "self"
        configuration.monitorVoiceVolume = -.infinity
        configuration.roundTrip = .calibrate
        configuration.cycleTimingCapacity = 100_000
        try FileManager.default.createDirectory(atPath: dir.file("stems"), withIntermediateDirectories: true)
        configuration.stemsDirectory = dir.file("stems")
        let session = try KaraokeSession(configuration)
        try await session.start()
        try await offPool {
            let deadline = Date().addingTimeInterval(30)
            while !session.songHasEnded, Date() < deadline { usleep(10_000) }
        }
        let summary = await session.stop()
        #expect(summary.error == nil)
        Self.expectNoXrunOfOurs(summary.xruns, on: jack, timings: session.cycleTimings, periodFrames: 256)
        let dry = try FFmpeg.decode(dir.file("stems/voice-dry.wav"), channels: 1)[0]
        let wet = try FFmpeg.decode(dir.file("stems/voice-wet.wav"), channels: 1)[0]
        let lag = try #require(SignalCheck.lag(of: Array(dry.prefix(5 * 48_000)), in: wet, window: 48_000, search: 2400))
        #expect(lag == 0, "the wet voice is \(lag) frames off the dry one")
        let n = min(dry.count, wet.count) - 1000
        #expect(maxAbsDifference(Array(dry[48_000..<n]), Array(wet[48_000..<n])) < 1e-4)
    }

    /// `liveaudio karaoke` on the virtual device (a WAV file as the microphone, one as the headphones): through the
    /// example voice chain with a key change, it prints a status line a second, and writes the four stems — the song,
    /// the accompaniment and the wet voice in stereo, the dry voice mono — running past the song's end by its tail
    /// (the time-pitch's look-ahead and the round trip), each shifted as the sync rule says. Bad values exit 1 naming
    /// the option.
    @Test func theCommandOnTheVirtualDevice() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        let chain = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000:duration=2.5", "-ac", "2", "-b:a", "128k", dir.file("song.m4a")])
        try writeWAV(dir.file("voice.wav"), channels: [SignalCheck.testSignal(seconds: 4)[0]], sampleType: .int16)
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let run = try await runTool(
            liveaudio,
            ["karaoke", dir.file("song.m4a"), "--graph", chain, "--backend", "virtual", "--input", dir.file("voice.wav"),
             "--output", dir.file("out.wav"), "--stems", dir.file("take"), "--latency-ms", "5", "--key", "-2",
             "--voice-volume", "-3", "--timing"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("round trip 5.00 ms") && run.stdout.contains("/ 2.5 s"), "\(run.stdout)")
        // `--timing`: the device thread's cycles after the run, as `monitor --timing` prints them.
        let timing = run.stdout.split(separator: "\n").first { $0.hasPrefix("cycle timing: ") }
        #expect(timing?.contains(" cycles of ") == true && timing?.contains("; CPU p50 ") == true
                    && timing?.contains("; cycles blocked ") == true, "\(run.stdout)")
        #expect(run.stderr.contains("round trip 5.00 ms (given)"), "\(run.stderr)")
        var lengths: [Int] = []
        for (name, channels) in [("accompaniment.wav", 2), ("voice-dry.wav", 1), ("voice-wet.wav", 2), ("song.wav", 2)] {
            let probe = try FFmpeg.probe(dir.file("take/" + name))
            #expect(probe["channels"] == "\(channels)", "\(name): \(probe)")
            lengths.append(Int(probe["duration_ts"] ?? "") ?? 0)
        }
        // Every stem is the take's length: each ends where the take's end falls on its own timeline (the dry voice
        // the round trip, 240 frames, after the accompaniment; the wet voice and the song the chain's latency later
        // still), so what was sung to the song's last frames is in each.
        #expect(lengths[0] > 120_000 + 4000 && Set(lengths).count == 1, "\(lengths)")
        let bad = try await runTool(liveaudio, ["karaoke", dir.file("song.m4a"), "--backend", "virtual", "--voice-volume", "20"])
        #expect(bad.status == 1 && bad.stderr.contains("--voice-volume"), "\(bad.stderr)")
        let badKey = try await runTool(liveaudio, ["karaoke", dir.file("song.m4a"), "--backend", "virtual", "--key", "30"])
        #expect(badKey.status == 1 && badKey.stderr.contains("--key"), "\(badKey.stderr)")
    }

    /// `liveaudio karaoke CHART.txt` on the virtual device with a generated singer as the microphone, following the
    /// chart half a second late (the song starts half a second after the device): the chart's song plays, each lyric
    /// line is printed as it starts and rated as it ends, the score is printed and written, `pitch.csv` joins the
    /// stems — and the live score agrees with `liveaudio score` on the recorded dry stem within 1 %.
    @Test func aChartIsSungAndScored() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        var text = "#VERSION:1.1.0\n#TITLE:Generated\n#ARTIST:LiveAudio\n#MP3:song.wav\n#BPM:280\n#GAP:800\n"
        let pitches = [-5, -3, 0, 2, 4, 2, 0, -1, -3, 0, 4, 7]
        var beat = 0
        for line in 0..<3 {
            for n in 0..<4 {
                text += ": \(beat) \(4 + (n + line) % 3) \(pitches[(line * 4 + n) % pitches.count]) la\n"
                beat += 5 + (n + line) % 3
            }
            text += "- \(beat)\n"
            beat += 3
        }
        try text.write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("chart.txt"))
        let seconds = chart.voices[0].lines.last!.end + 1
        try writeWAV(dir.file("song.wav"), channels: [[Float](repeating: 0, count: Int(seconds * 48_000))], sampleType: .int16)
        let singer = GeneratedSinger(chart: chart, snr: 30)
        try singer.write(to: dir.file("voice.wav"))
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let run = try await runTool(
            liveaudio,
            ["karaoke", dir.file("chart.txt"), "--backend", "virtual", "--input", dir.file("voice.wav"), "--output", dir.file("out.wav"),
             "--stems", dir.file("take"), "--latency-ms", "0", "--difficulty", "easy", "--score-file", dir.file("take/score.json")])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.components(separatedBy: "♪ lalalala").count - 1 == 3, "each line as it starts: \(run.stdout)")
        let summary = run.stdout.split(separator: "\n").first { $0.hasPrefix("karaoke: LiveAudio – Generated (easy): ") }
        let live = summary.flatMap { Int($0.split(separator: ": ")[2].split(separator: " ")[0]) } ?? -1
        #expect(live >= 8_000, "\(run.stdout)")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("take/score.json")))) as! [String: Any]
        #expect(json["total"] as? Int == live && (json["lines"] as? [Any])?.count == 3)
        let csv = try String(contentsOfFile: dir.file("take/pitch.csv"), encoding: .utf8).split(separator: "\n")
        #expect(csv.first == "time,frequency,confidence,voiced,note" && csv.count > Int(seconds * 50))
        let offline = try await runTool(liveaudio, ["score", dir.file("chart.txt"), dir.file("take/voice-dry.wav"), "--difficulty", "easy"])
        let first = offline.stdout.split(separator: "\n").first ?? ""
        let scored = Int(first.split(separator: ": ")[1].split(separator: " ")[0]) ?? -1
        #expect(abs(Double(scored - live)) <= 0.01 * Double(max(live, 1)), "live \(live), the dry stem offline \(scored)")
    }

    /// A duet sung live as its second part: `--part 2` scores P2 (the singer follows it) and pitch.csv's notes are P2's.
    @Test func aDuetsSecondPartIsSungAndScored() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        var text = "#TITLE:Duet\n#ARTIST:Two\n#MP3:song.wav\n#BPM:240\n#GAP:500\n#P1:Low\n#P2:High\nP1\n"
        for n in 0..<8 { text += ": \(n * 8) 6 \([-5, -3, -1, 0][n % 4]) lo\n" }
        text += "P2\n"
        for n in 0..<8 { text += ": \(n * 8) 6 \([4, 7, 9, 11][n % 4]) hi\n" }
        try text.write(toFile: dir.file("duet.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("duet.txt"))
        try writeWAV(dir.file("song.wav"), channels: [[Float](repeating: 0, count: 5 * 48_000)], sampleType: .int16)
        try GeneratedSinger(chart: chart, part: 2, snr: 30).write(to: dir.file("voice.wav"))
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let run = try await runTool(
            liveaudio,
            ["karaoke", dir.file("duet.txt"), "--part", "2", "--backend", "virtual", "--input", dir.file("voice.wav"),
             "--output", dir.file("out.wav"), "--stems", dir.file("take"), "--latency-ms", "0", "--difficulty", "easy"])
        #expect(run.status == 0, "\(run.stderr)")
        let summary = run.stdout.split(separator: "\n").first { $0.hasPrefix("karaoke: Two – Duet (easy): ") }
        let live = summary.flatMap { Int($0.split(separator: ": ")[2].split(separator: " ")[0]) } ?? -1
        #expect(live >= 8_000, "\(run.stdout)")
        let notes = try String(contentsOfFile: dir.file("take/pitch.csv"), encoding: .utf8).split(separator: "\n").dropFirst()
            .compactMap { $0.split(separator: ",", omittingEmptySubsequences: false).last.flatMap { Int($0) } }
        #expect(!notes.isEmpty && notes.allSatisfy { $0 >= 64 }, "P2's notes (64 … 71): \(Set(notes).sorted())")
    }

    /// `--lyrics FILE.lrc` with any song: each line printed as it starts, nothing scored; a score file asked for
    /// without a chart's notes is refused, and so are lyrics beside a chart.
    @Test func lyricsWithAnySong() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        try writeWAV(dir.file("song.wav"), channels: [[Float](repeating: 0, count: 4 * 48_000)], sampleType: .int16)
        try writeWAV(dir.file("voice.wav"), channels: [[Float](repeating: 0, count: 6 * 48_000)], sampleType: .int16)
        try "[ti:Words]\n[00:00.50]first words\n[00:01.50]<00:01.50>second <00:02.00>line\n[00:03.00]\n".write(
            toFile: dir.file("words.lrc"), atomically: true, encoding: .utf8)
        let base = ["--backend", "virtual", "--input", dir.file("voice.wav"), "--output", dir.file("out.wav"), "--latency-ms", "0"]
        let run = try await runTool(liveaudio, ["karaoke", dir.file("song.wav"), "--lyrics", dir.file("words.lrc")] + base)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("♪ first words") && run.stdout.contains("♪ second line"), "\(run.stdout)")
        #expect(!run.stdout.contains("karaoke: Words"), "nothing scored: \(run.stdout)")
        let scoreless = try await runTool(
            liveaudio, ["karaoke", dir.file("song.wav"), "--lyrics", dir.file("words.lrc"), "--score-file", dir.file("s.json")] + base)
        #expect(scoreless.status == 1 && scoreless.stderr.contains("--score-file needs a chart with notes"), "\(scoreless.stderr)")
        try "#TITLE:T\n#ARTIST:A\n#BPM:240\n#MP3:song.wav\n: 0 4 0 a\n".write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let both = try await runTool(liveaudio, ["karaoke", dir.file("chart.txt"), "--lyrics", dir.file("words.lrc")] + base)
        #expect(both.status == 1 && both.stderr.contains("--lyrics is for a song without a chart"), "\(both.stderr)")
    }

    /// The screen with a chart, through tmux: the line being sung and the next one below it, the pitch lane and the
    /// score.
    @Test func theScreenShowsTheLyrics() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        let words = [["Twin", "kle ", "lit", "tle ", "star "], ["how ", "I ", "won", "der ", "what "], ["you ", "are ", "up ", "a", "bove "]]
        var text = "#TITLE:Stars\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:120\n#GAP:1500\n"
        var beat = 0
        for line in words {
            for (n, word) in line.enumerated() {
                text += (n == 2 ? "* " : ": ") + "\(beat) 3 \([0, 7, 9, 7, 5][n]) \(word)\n"
                beat += 4
            }
            text += "- \(beat)\n"
            beat += 4
        }
        try text.write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("chart.txt"))
        let seconds = chart.voices[0].lines.last!.end + 2
        try writeWAV(dir.file("song.wav"), channels: [[Float](repeating: 0, count: Int(seconds * 48_000))], sampleType: .int16)
        try GeneratedSinger(chart: chart, snr: 30).write(to: dir.file("voice.wav"))
        let command = [liveaudio, "karaoke", "chart.txt", "--backend", "virtual", "--input", "voice.wav", "--output", "out.wav",
                       "--latency-ms", "0"].map { "'\($0)'" }.joined(separator: " ")
        let terminal = try TmuxTerminal(command: command, directory: dir.path)
        defer { terminal.stop() }
        // While the first line is sung: the lane shows the time now ("|") among its notes.
        let first = try await terminal.waitFor("the first line sung") { screen in
            screen.contains("Twinkle little star") && screen.contains("score ")
                && screen.split(separator: "\n").contains { $0.contains("=") && $0.contains("|") }
        }
        let rows = first.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let sung = try #require(rows.firstIndex { $0.contains("Twinkle little star") })
        #expect(rows[sung + 1].contains("how I wonder what"), "the next line below the one sung:\n\(first)")
        #expect(rows.contains { $0.contains("=") && $0.contains("|") }, "the pitch lane:\n\(first)")
        let later = try await terminal.waitFor("the second line sung", seconds: 20) {
            $0.split(separator: "\n").contains { $0.contains("how I wonder what") && !$0.contains("Twinkle") } && $0.contains("last line: ")
        }
        #expect(later.contains("you are up above"), "\(later)")
        let end = try await terminal.waitFor("the command ending", seconds: 30) { $0.contains("exit status") }
        #expect(end.contains("exit status 0") && end.contains("karaoke: Tests – Stars (medium): "), "\(end)")
    }

    /// The song goes live and to AAC files while it is recorded: `liveaudio karaoke --record song.m4a --to
    /// rtmp://… --to song.flv` on the virtual device, with nginx-rtmp as the live room. Each decodes with FFmpeg and
    /// is the WAV song of the same take (the stems' `song.wav`) as AAC carries it: correlation ≥ 0.99 and the level
    /// within 0.5 dB at the offset the container gives (M4A trims the encoder's priming, FLV does not: 1024 frames),
    /// as long as it within two packets and the quarter second the room takes to stop after the take. A record path
    /// of another kind and an output given twice are errors.
    @Test func theSongGoesLiveAndToAACFiles() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        let chain = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000:duration=3", "-ac", "2", dir.file("song.wav")])
        try writeWAV(dir.file("voice.wav"), channels: [SignalCheck.testSignal(seconds: 4)[0]], sampleType: .int16)
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let run = try await runTool(
            liveaudio,
            ["karaoke", dir.file("song.wav"), "--graph", chain, "--backend", "virtual", "--input", dir.file("voice.wav"),
             "--output", dir.file("out.wav"), "--stems", dir.file("take"), "--latency-ms", "5",
             "--record", dir.file("take/song.m4a"), "--to", server.url("room"), "--to", dir.file("take/song.flv")])
        #expect(run.status == 0, "\(run.stderr); nginx log: \(server.log)")
        #expect(run.stdout.contains("rtmp://127.0.0.1:\(server.port)/live/<key>"), "the status names the live room: \(run.stdout)")
        #expect(!run.stdout.contains("/room") && !run.stderr.contains("/room"), "the stream key stays hidden")
        server.stop()
        let reference = try FFmpeg.decode(dir.file("take/song.wav"), channels: 2)
        #expect(reference[0].count > 3 * 48_000, "\(reference[0].count) frames")
        let live = try #require(server.recordedFiles(start: 1).first, "nginx recorded nothing: \(server.log)")
        for (file, priming) in [(dir.file("take/song.m4a"), 0), (dir.file("take/song.flv"), 1024), (live, 1024)] {
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", file, "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "\(file): \(check.stderr)")
            let decoded = try FFmpeg.decode(file, channels: 2)
            // The stem ends with the take; the files run on (silence) until the room stops after it: 0.25 s at most.
            #expect(
                decoded[0].count >= reference[0].count + priming && decoded[0].count <= reference[0].count + priming + 2048 + 12_000,
                "\(file): \(decoded[0].count) frames for \(reference[0].count)")
            for c in 0..<2 {
                let r = SignalCheck.compare(reference[c], decoded[c], lag: priming, skip: 2400)
                #expect(r.correlation >= 0.99 && abs(r.levelDB) < 0.5, "\(file) channel \(c): \(r)")
            }
        }
        let wrongKind = try await runTool(
            liveaudio, ["karaoke", dir.file("song.wav"), "--backend", "virtual", "--record", dir.file("take/song.ogg")])
        #expect(wrongKind.status == 1 && wrongKind.stderr.contains(".m4a"), "\(wrongKind.stderr)")
        let twice = try await runTool(
            liveaudio,
            ["karaoke", dir.file("song.wav"), "--backend", "virtual", "--record", dir.file("a.flv"), "--to", dir.file("a.flv")])
        #expect(twice.status == 1 && twice.stderr.contains("given twice"), "\(twice.stderr)")
    }

    /// The frequency near `guess` (± `span` Hz) whose single-bin DFT over `x` (Hann-windowed, so the other partials'
    /// leakage stays out) is largest: the best of a 0.05 Hz grid, refined by golden-section search within the
    /// mainlobe to a thousandth of a hertz.
    static func peakFrequency(_ x: ArraySlice<Float>, around guess: Double, span: Double) -> Double {
        let count = x.count
        let windowed = x.enumerated().map { i, v in Double(v) * (0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(count - 1))) }
        func magnitude(_ f: Double) -> Double {
            var re = 0.0, im = 0.0
            let w = 2 * Double.pi * f / 48_000
            for (i, v) in windowed.enumerated() {
                re += v * cos(w * Double(i))
                im -= v * sin(w * Double(i))
            }
            return (re * re + im * im).squareRoot()
        }
        let grid = stride(from: guess - span, through: guess + span, by: 0.05).map { ($0, magnitude($0)) }
        let best = grid.max { $0.1 < $1.1 }!.0
        var (a, b) = (best - 0.05, best + 0.05)
        let g = (5.0.squareRoot() - 1) / 2
        var c = b - g * (b - a), d = a + g * (b - a)
        var (mc, md) = (magnitude(c), magnitude(d))
        while b - a > 0.001 {
            if mc > md {
                (b, d, md) = (d, c, mc)
                c = b - g * (b - a)
                mc = magnitude(c)
            } else {
                (a, c, mc) = (c, d, md)
                d = a + g * (b - a)
                md = magnitude(d)
            }
        }
        return (a + b) / 2
    }

    /// A key change of +2 semitones through the session (the time-pitch unit behind the file player, on the virtual
    /// device): both partials of a two-tone song, 330 Hz and 523.25 Hz, come out of the accompaniment stem 200 ± 1
    /// cents higher, measured over 2 s of steady tone. The same song without a key change measures within 0.1 cent of
    /// its own frequencies, which bounds the measurement's error.
    @Test(arguments: [0.0, 200.0]) func aKeyChangeMovesThePitchByItsCents(cents: Double) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let partials = [330.0, 523.25]
        let n = 4 * 48_000
        let tone = (0..<n).map { i in Float(partials.map { 0.2 * sin(2 * Double.pi * $0 * Double(i) / 48_000) }.reduce(0, +)) }
        try writeWAV(dir.file("song.wav"), channels: [tone])
        try writeWAV(dir.file("mic.wav"), channels: [[Float](repeating: 0, count: 5 * 48_000)])
        try FileManager.default.createDirectory(atPath: dir.file("stems"), withIntermediateDirectories: true)
        var configuration = KaraokeSession.Configuration(song: dir.file("song.wav"))
        configuration.backend = .virtual
        configuration.inputDevice = dir.file("mic.wav")
        configuration.outputDevice = dir.file("out.wav")
        configuration.keyCents = cents
        configuration.stemsDirectory = dir.file("stems")
        configuration.roundTrip = .milliseconds(0)
        let session = try KaraokeSession(configuration)
        #expect((session.timePitch != nil) == (cents != 0))
        try await session.start()
        try await offPool {
            let deadline = Date().addingTimeInterval(30)
            while !session.songHasEnded, Date() < deadline { usleep(10_000) }
        }
        let summary = await session.stop()
        #expect(summary.error == nil && summary.accompanimentUnderruns == 0, "\(summary)")
        let accompaniment = try FFmpeg.decode(dir.file("stems/accompaniment.wav"), channels: 2)[0]
        try #require(accompaniment.count >= n - 4800, "\(accompaniment.count) frames")
        let steady = accompaniment[48_000..<(3 * 48_000)]
        for f in partials {
            let expected = f * pow(2, cents / 1200)
            let measured = Self.peakFrequency(steady, around: expected, span: 3)
            let moved = 1200 * log2(measured / f)
            print("key \(cents) cents: \(f) Hz → \(String(format: "%.3f", measured)) Hz, \(String(format: "%.3f", moved)) cents")
            #expect(abs(moved - cents) <= (cents == 0 ? 0.1 : 1), "\(f) Hz came out at \(measured) Hz: \(moved) cents")
        }
    }

    /// A stop while the start calibrates (on the virtual device no click ever comes back, so the calibration would
    /// wait out its 30 s): the start gives up at once, the device is closed, nothing is recorded, and the
    /// session does not start again. A second stop meanwhile waits for the first and returns its summary.
    @Test func aStopDuringTheStartBreaksItOff() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("song.wav"), channels: [[Float](repeating: 0.1, count: 48_000)])
        try writeWAV(dir.file("mic.wav"), channels: [[Float](repeating: 0, count: 20 * 48_000)])
        try FileManager.default.createDirectory(atPath: dir.file("stems"), withIntermediateDirectories: true)
        var configuration = KaraokeSession.Configuration(song: dir.file("song.wav"))
        configuration.backend = .virtual
        configuration.inputDevice = dir.file("mic.wav")
        configuration.outputDevice = dir.file("out.wav")
        configuration.stemsDirectory = dir.file("stems")
        configuration.roundTrip = .calibrate
        let session = try KaraokeSession(configuration)
        let starting = Task { () -> AudioError? in
            do throws(AudioError) { try await session.start() } catch { return error }
            return nil
        }
        while !session.isDeviceOpen { try await Task.sleep(nanoseconds: 10_000_000) }  // calibrating
        try await Task.sleep(nanoseconds: 200_000_000)
        let began = monotonicNanoseconds()
        async let second = session.stop()
        let first = await session.stop()
        let error = await starting.value
        _ = await second
        let seconds = Double(monotonicNanoseconds() - began) / 1e9
        // The calibration looks every 10 ms; the bound is half its 30 s, since the test shares its process's
        // cooperative pool with other suites, which has held a stop's resumptions back for seconds (the command
        // line's figure, SIGINT to exit, is measured on its own).
        #expect(seconds < 15, "the stop took \(seconds) s: the calibration's 30 s were waited for")
        let e = try #require(error, "the start went on after the stop")
        #expect(e.message.contains("stopped while it started"), "\(e)")
        #expect(!session.isDeviceOpen)
        #expect(first.recordedFrames == 0)
        await #expect(throws: AudioError.self) { try await session.start() }
    }

    /// The live screen as a person uses it: tmux runs `liveaudio karaoke` on a 120×30 terminal (the virtual device,
    /// a 330 Hz song at 0.25 played to 20 s of its 30, a chirp as the voice); the test reads the screen and types keys.
    /// The screen shows the region's progress bar, meters, volumes, key and round trip; `aaa` turns the accompaniment down 3 dB, `K` raises
    /// the key a semitone, `2` mutes the voice, space pauses (the position stands still) and resumes, `q` quits with
    /// exit status 0 and the terminal given back. The files say the keys took effect: at the end of the song file the
    /// accompaniment is at 349.2 Hz (a semitone up) and −3 dB, and the voice is gone.
    @Test func theLiveScreenOnATerminal() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        let song = (0..<(30 * 48_000)).map { Float(0.25 * sin(2 * Double.pi * 330 * Double($0) / 48_000)) }
        try writeWAV(dir.file("song.wav"), channels: [song, song])
        try writeWAV(dir.file("voice.wav"), channels: [SignalCheck.testSignal(seconds: 32)[0]])
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let command = [liveaudio, "karaoke", "song.wav", "--backend", "virtual", "--input", "voice.wav", "--output", "out.wav",
                       "--stems", "take", "--latency-ms", "0", "--end", "20"].map { "'\($0)'" }.joined(separator: " ")
        let terminal = try TmuxTerminal(command: command, directory: dir.path)
        defer { terminal.stop() }
        func waitFor(_ what: String, seconds: Double = 15, _ ready: (String) -> Bool) async throws -> String {
            try await terminal.waitFor(what, seconds: seconds, ready)
        }
        func type(_ keys: String) throws { try terminal.type(keys) }
        func position(_ text: String) -> String? {
            text.split(separator: "\n").first { $0.hasPrefix("[#") || $0.hasPrefix("[-") }.map { String($0.suffix(18)) }
        }

        let first = try await waitFor("the song playing") { $0.contains("[playing]") && $0.contains("[#") }
        // The bar and the clock run to the region's end (--end 20), not the 30 s file's.
        for part in ["liveaudio karaoke - song.wav", " / 0:20.0", "voice", "accompaniment", "output", "round trip 0.00 ms (given)",
                     "key +0.0", "xruns 0", "keys: a/A accompaniment"] {
            #expect(first.contains(part), "\(part) is not on the screen:\n\(first)")
        }
        try type("aaa")
        _ = try await waitFor("the accompaniment at -3 dB") { $0.contains("volume -3.0 dB") }
        try type("K")
        _ = try await waitFor("the key a semitone up") { $0.contains("key +1.0") }
        try type("2")
        _ = try await waitFor("the voice muted") { $0.contains("MUTED") }
        try type(" ")
        _ = try await waitFor("the song paused") { $0.contains("[PAUSED]") }
        // The player takes the pause on its next cycle and fades for 5 ms (behind the time-pitch's pull): the
        // position stands still from a moment later.
        try await Task.sleep(nanoseconds: 400_000_000)
        let paused = try terminal.screen()
        try await Task.sleep(nanoseconds: 1_000_000_000)
        let stillPaused = try terminal.screen()
        #expect(position(paused) != nil && position(paused) == position(stillPaused), "the position moved while paused")
        try type(" ")
        _ = try await waitFor("the song playing again") { $0.contains("[playing]") }
        try await Task.sleep(nanoseconds: 2_000_000_000)
        try type("q")
        let end = try await waitFor("the command ending", seconds: 20) { $0.contains("exit status") }
        #expect(end.contains("exit status 0") && end.contains("karaoke:"), "\(end)")
        #expect(terminal.cursorShown, "the terminal was not given back: the cursor is still hidden")

        let songFile = try FFmpeg.decode(dir.file("take/song.wav"), channels: 2)[0]
        try #require(songFile.count > 3 * 48_000, "\(songFile.count) frames")
        let last = songFile[(songFile.count - 72_000)..<(songFile.count - 24_000)]
        let raised = 330 * pow(2, 1.0 / 12)
        let tone = SignalCheck.toneAmplitude(last, frequency: raised)
        #expect(abs(tone - 0.25 * pow(10, -3.0 / 20)) < 0.015, "the accompaniment at \(tone), not 0.177, at \(raised) Hz")
        #expect(SignalCheck.toneAmplitude(last, frequency: 330) < 0.02, "the old key is still there")
        // The voice: what is left once the tone is taken out (least squares, any phase). At the start, before any
        // key, it is there; at the end, muted, only the time-pitch's own residue of the tone is.
        func residue(_ x: ArraySlice<Float>, _ f: Double) -> Double {
            let w = 2 * Double.pi * f / 48_000
            var a = 0.0, b = 0.0
            for (i, v) in x.enumerated() {
                a += Double(v) * sin(w * Double(i))
                b += Double(v) * cos(w * Double(i))
            }
            a *= 2 / Double(x.count)
            b *= 2 / Double(x.count)
            let power = x.enumerated().reduce(0.0) { sum, e in
                let r = Double(e.element) - a * sin(w * Double(e.offset)) - b * cos(w * Double(e.offset))
                return sum + r * r
            }
            return (power / Double(x.count)).squareRoot()
        }
        let sung = residue(songFile[4800..<19_200], 330)
        let muted = residue(last, raised)
        #expect(sung > 0.1 && muted < 0.02, "the voice at \(sung) RMS before the mute, \(muted) after")
    }

    /// The route lost and back, on JACK's dummy driver (the session plays to `system` and hears `system`): another
    /// JACK client takes our output ports off the system's playback (`jack_disconnect`, as a patchbay or an unplugged
    /// interface does). Within a few tenths of a second the session says the route is lost (an event, and
    /// `isOutputRouted`), the headphones fall silent, and the recording goes on — the accompaniment stem grows by
    /// the time the route was away. `jack_connect` brings it back: an event, and the headphones play again.
    @Test func theRouteLostSilencesTheHeadphonesWhileTheRecordingGoesOn() async throws {
        let jack = try await JACKServer.started(periodFrames: 256)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<(10 * 48_000)).map { Float(0.25 * sin(2 * Double.pi * 330 * Double($0) / 48_000)) }
        try writeWAV(dir.file("song.wav"), channels: [tone, tone])
        try FileManager.default.createDirectory(atPath: dir.file("stems"), withIntermediateDirectories: true)
        var configuration = KaraokeSession.Configuration(song: dir.file("song.wav"))
        configuration.backend = .jack
        configuration.jackServer = jack.name
        configuration.inputDevice = "system"
        configuration.outputDevice = "system"
        configuration.stemsDirectory = dir.file("stems")
        configuration.roundTrip = .milliseconds(0)
        let session = try KaraokeSession(configuration)
        let seen = EventList()
        let watcher = seen.follow(session.deviceEvents)
        try await session.start()
        let figures = try await offPool { () throws -> (before: Float, lost: Float, grew: Int64, back: Float) in
            func waitUntil(_ what: String, _ seconds: Double, _ ready: () -> Bool) throws {
                let deadline = Date().addingTimeInterval(seconds)
                while !ready() {
                    guard Date() < deadline else { throw SoundServerError("timed out waiting for \(what)") }
                    usleep(10_000)
                }
            }
            func outputPeak() -> Float {
                _ = session.meters
                usleep(300_000)
                return session.meters.output.peak
            }
            func stemFrames() -> Int64 { (try? WAVFileReader.info(path: dir.file("stems/accompaniment.wav")).frameCount) ?? 0 }
            func ourClient(_ listing: String) -> String {
                listing.split(separator: "\n").first { !$0.hasPrefix(" ") && $0.hasSuffix(":out_1") && !$0.hasPrefix("system:") }
                    .map { String($0.dropLast(":out_1".count)) } ?? "liveaudio"
            }
            // Our output ports and what they are connected to, as jack_lsp lists them.
            func patch(_ tool: String) throws {
                let listing = try runProcess("jack_lsp", ["-c"], environment: jack.environment).stdout
                var port: String?
                var pairs: [(String, String)] = []
                for line in listing.split(separator: "\n") {
                    if line.hasPrefix(" ") {
                        if let port, port.contains(":out_") { pairs.append((port, line.trimmingCharacters(in: .whitespaces))) }
                    } else {
                        port = String(line)
                    }
                }
                if tool == "jack_disconnect" {
                    try #require(!pairs.isEmpty, "no connection of ours in: \(listing)")
                    for (ours, theirs) in pairs { _ = try runProcess(tool, [ours, theirs], environment: jack.environment) }
                } else {
                    for n in 1...2 {
                        let r = try runProcess(tool, ["\(ourClient(listing)):out_\(n)", "system:playback_\(n)"], environment: jack.environment)
                        try #require(r.status == 0, "\(tool): \(r.stderr)")
                    }
                }
            }
            try waitUntil("a second of the song", 20) { session.player.currentTime >= 1 }
            try #require(session.isOutputRouted)
            let before = outputPeak()
            try patch("jack_disconnect")
            try waitUntil("the route lost", 2) { !session.isOutputRouted }
            usleep(50_000)  // the gate's 5 ms fade, in the cycles after the flag
            let lost = outputPeak()
            let from = stemFrames()
            usleep(1_000_000)
            let grew = stemFrames() - from
            try patch("jack_connect")
            try waitUntil("the route back", 2) { session.isOutputRouted }
            return (before, lost, grew, outputPeak())
        }
        let summary = await session.stop()
        watcher.cancel()
        #expect(summary.error == nil, "\(summary)")
        #expect(abs(figures.before - 0.25) < 0.01 && figures.lost == 0 && abs(figures.back - 0.25) < 0.01, "\(figures)")
        #expect(figures.grew >= 40_000, "the recording stood still while the route was lost: \(figures.grew) frames in a second")
        let events = seen.events
        #expect(events.contains { if case .routeLost = $0 { true } else { false } }, "\(events)")
        #expect(events.contains { if case .routeReturned = $0 { true } else { false } }, "\(events)")
    }

    /// The output device gone while the microphone stays (ALSA, two devices): the headphones are a null sink of a
    /// second PulseAudio server, reached through an ALSA PCM the test names (`spk2`), the microphone a sink monitor of
    /// the first. `liveaudio karaoke --duration 18` runs; once the song plays, the headphones' server is killed, and
    /// 6 s after the capture went on alone it is started again. Once the pulse plugin reports the fault (it takes it a second or two) the I/O unit captures on
    /// alone (the graph renders into nothing), so the song and the recording carry on: the status lines printed
    /// while the output is away show the song's position moving a second a second, and the accompaniment stem keeps
    /// the wall time: the song, frame for frame, with the time without cycles (that detection, the reopening) as
    /// silence in its place and marked ("gap:"), not short of the outage (which would leave it under 10 s). The
    /// events say the route was lost, that the capture went on, and that it came back.
    @Test func theRecordingCarriesOnWhileTheOutputDeviceIsAway() async throws {
        let microphone = try await PulseAudioServer.started(sinks: ["mic"])
        defer { microphone.stop() }
        try microphone.keepMonitorAlive("mic")
        let headphones = try await PulseAudioServer.started(sinks: ["spk"])
        defer { headphones.stop() }
        // A reader on the headphones' monitor: an idle null sink makes a new playback stream wait a second or more.
        try headphones.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The ALSA configuration the command reads (its HOME is the first server's): `spk2` is the second server's sink.
        var environment = microphone.environment
        try """
            pcm.spk2 {
                type pulse
                server "unix:\(headphones.root)/run/pulse.sock"
                device "spk"
            }
            """.write(toFile: environment["HOME"]! + "/.asoundrc", atomically: true, encoding: .utf8)
        environment["LIVEAUDIO_TEST"] = "1"
        let music = SignalCheck.music(seconds: 20, seed: 11)
        try writeWAV(dir.file("song.wav"), channels: [music, music])
        try FileManager.default.createDirectory(atPath: dir.file("take"), withIntermediateDirectories: true)
        let run = try ChildProcess(
            productsDirectory + "/liveaudio",
            ["karaoke", dir.file("song.wav"), "--backend", "alsa", "--input", "pulse:mic.monitor", "--output", "spk2",
             "--period", "960", "--periods", "4", "--stems", dir.file("take"), "--latency-ms", "0", "--duration", "18",
             "--monitor-voice-volume", "-inf", "--no-screen"],
            environment: environment, log: dir.file("karaoke.log"))
        defer { run.stop() }
        func waitFor(_ what: String, seconds: Double, _ seen: (String) -> Bool) async throws {
            let deadline = Date().addingTimeInterval(seconds)
            while !seen(run.output) {
                guard Date() < deadline, run.isRunning else { throw SoundServerError("never saw \(what):\n\(run.output)") }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
        }
        func waitFor(_ what: String, seconds: Double) async throws { try await waitFor("'\(what)'", seconds: seconds) { $0.contains(what) } }
        // A second of the song on the status lines.
        try await waitFor("a second of the song", seconds: 20) { log in
            log.split(separator: "\n").contains { $0.contains(" / 20.0 s") && (Double($0.split(separator: " ").first ?? "") ?? 0) >= 1 }
        }
        headphones.kill()
        try await waitFor("capturing on", seconds: 10)
        try await Task.sleep(nanoseconds: 6_000_000_000)
        try await headphones.restart()
        let status = await run.finished(timeout: 40)
        let log = run.output
        #expect(status == 0, "\(log)")
        #expect(log.contains("route lost") && log.contains("capturing on") && log.contains("route back"), "\(log)")
        let accompaniment = try FFmpeg.decode(dir.file("take/accompaniment.wav"), channels: 2)[0]
        #expect(accompaniment.count >= 13 * 48_000, "the recording stood still while the output was away: \(accompaniment.count) frames\n\(log)")
        // The positions of the status lines between "capturing on" and "route back".
        let lines = log.split(separator: "\n")
        let from = try #require(lines.firstIndex { $0.contains("capturing on") })
        let to = try #require(lines.firstIndex { $0.contains("route back") })
        // The last one may fall in the gap of the reopening: left out.
        let positions = lines[from..<to].filter { $0.contains(" / 20.0 s") }.compactMap { Double($0.split(separator: " ").first ?? "") }.dropLast()
        #expect(positions.count >= 3, "\(log)")
        if let first = positions.first, let last = positions.last, positions.count >= 3 {
            #expect(last - first >= 0.8 * Double(positions.count - 1), "the song stood still while the output was away: \(positions)")
        }
        // The time the device was away without cycles (the fault's detection, the reopening) is silence in the stem,
        // in its place, and marked in the summary ("gap: …"); what is left is the song, frame for frame.
        let marked = lines.filter { $0.contains("karaoke: gap: ") }.compactMap { line -> Double? in
            guard let r = line.range(of: "gap: ") else { return nil }
            return Double(line[r.upperBound...].prefix { $0.isNumber || $0 == "." })
        }
        var runs: [(start: Int, length: Int)] = []
        var k = 0
        while k < accompaniment.count {
            var end = k
            while end < accompaniment.count, accompaniment[end] == 0 { end += 1 }
            if end - k >= 8 { runs.append((k, end - k)) }
            k = max(end, k + 1)
        }
        // A run at the very end is the stop's last cycle, not a gap.
        if let last = runs.last, last.start + last.length == accompaniment.count { runs.removeLast() }
        print("the stem's silences: \(runs.map { "\(Double($0.length) / 48_000) s at \(Double($0.start) / 48_000) s" }); marked \(marked)")
        #expect(runs.count == marked.count, "silences \(runs), marked \(marked)\n\(log)")
        for (run, seconds) in zip(runs, marked) { #expect(abs(Double(run.length) / 48_000 - seconds) < 0.001, "\(run) against \(seconds) s") }
        var song: [Float] = []
        var at = 0
        for run in runs {
            song += accompaniment[at..<run.start]
            at = run.start + run.length
        }
        song += accompaniment[at...]
        let n = min(song.count, music.count)
        #expect(maxAbsDifference(Array(song[0..<n]), Array(music[0..<n])) < 1e-4, "the accompaniment stem, its gaps left out, is not the song")
    }

    @Test func badSettingsAreErrorsThatSayWhy() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = KaraokeSession.Configuration(song: dir.file("missing.m4a"))
        configuration.backend = .virtual
        do {
            _ = try KaraokeSession(configuration)
            Issue.record("a missing song accepted")
        } catch {
            #expect(error.message.contains("the song") && error.message.contains("missing.m4a"), "\(error)")
        }
        configuration.song = try Self.song(dir)
        configuration.voiceVolume = 20
        #expect(throws: AudioError.self) { try KaraokeSession(configuration) }
        configuration.voiceVolume = 0
        configuration.stemsDirectory = dir.file("nowhere")
        do {
            _ = try KaraokeSession(configuration)
            Issue.record("a missing stems folder accepted")
        } catch {
            #expect(error.code == .fileIO && error.message.contains("nowhere"), "\(error)")
        }
    }
}

/// Device events as they come, for a test to look at afterwards.
final class EventList: Sendable {
    private let list = Mutex<[DeviceEvent]>([])
    var events: [DeviceEvent] { list.withLock { $0 } }

    func follow(_ stream: AsyncStream<DeviceEvent>) -> Task<Void, Never> {
        Task.detached { [self] in
            for await e in stream { self.list.withLock { $0.append(e) } }
        }
    }
}
