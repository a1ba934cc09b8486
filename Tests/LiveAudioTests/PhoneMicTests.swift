import Foundation
import LiveAudio
import Testing
import TestSupport

/// A phone as the room's microphone, end to end: `liveaudio karaoke --phones 1 --web 127.0.0.2:0` (HTTPS, its own
/// certificate) on the virtual device, the stage's page in headless Chromium whose fake microphone reads a generated
/// singer (Tests/Support/stage/stage_mic.py). The phone's dry stem is the singer's file where the page's timestamps
/// put it (the offset set from where they put a beep 3 s before the singer), and its score is the file's offline.
@Suite(.serialized) struct PhoneMicTests {
    /// Seconds of the first song (silence: the time the browser takes to open the page and the microphone), and of
    /// the gap before the charted song.
    /// (4 s between the songs: the second song is scheduled when the first ends, and the test has until the singer's
    /// first note arrives — `gap − tapAhead + 0.5` s and the page's delay — to read its start and set the offset.)
    static let wait = 14.0, gap = 4.0
    /// Seconds of silence in the singer's file before the chart's time 0; the page opens its microphone when the first
    /// song has played `wait + gap − lead − tapAhead` seconds.
    static let lead = 10.0
    /// Seconds before `wait + gap − lead` that a page taps "Sing with this phone". The offset the test then sets is
    /// the page's delay from the tap to its file's start, less this: a phone's offset is −2 … 2 s, and one above the
    /// room's `--phone-delay` places audio that has already played (late). An idle machine's page starts its file
    /// 0.4–1.2 s after the tap; a loaded one's (four browsers and rooms on two cores, the evening's phase) up to 3 s.
    /// So −1.8 s (the Opus decoder's look-ahead, 6.5 ms, still inside −2 s) up to the phone delay less a packet:
    /// with `--phone-delay 1.5`, a page may be 3.2 s late.
    static let tapAhead = 1.8

    /// The phone's voice through 16-bit PCM (WebCodecs hidden from the page) and through Opus (WebCodecs'
    /// AudioEncoder at 48 kbit/s): the dry stem matches the file from the chart's start — every 100 ms of singing
    /// placed within ±10 ms of where the page's timestamps (and the offset set from them) say, the median correlation
    /// ≥ 0.99 through PCM, ≥ 0.95 through Opus — with no hole and nothing late; the phone's score on hard is ≥ 9,500 and within 1 % of `liveaudio score`
    /// of the singer's file; the page sent at most 64 kbit/s with Opus, headers and all.
    @Test(arguments: ["pcm", "opus"])
    func aPhoneSingsIntoTheRoom(codec: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var text = "#TITLE:Phone\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:240\n#GAP:500\n"
        for n in 0..<16 { text += ": \(n * 8) 6 \([0, 2, 4, 5, 7, 5, 4, 2][n % 8]) la\n" }
        text += "E\n"
        try text.write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("chart.txt"))
        try KaraokeRoomTests.tone(dir.file("song.wav"), frequency: 110, seconds: 10)
        try writeWAV(dir.file("wait.wav"), channels: [[Float](repeating: 0, count: Int(Self.wait * 48_000))], sampleType: .int16)
        try writeWAV(dir.file("room-mic.wav"), channels: [[Float](repeating: 0, count: 48_000)], sampleType: .int16)
        let singer = GeneratedSinger(chart: chart, part: 1, snr: 30, seed: 4).samples
        try writeWAV(dir.file("singer-alone.wav"), channels: [singer], sampleType: .int16)
        // The phone's microphone: the lead with a beep 3 s before its end (50 ms of 1 kHz), the singer, and silence to
        // the end of the run.
        var file = [Float](repeating: 0, count: Int(Self.lead * 48_000)) + singer + [Float](repeating: 0, count: 40 * 48_000)
        let beep = Int((Self.lead - 3) * 48_000)
        for n in 0..<2_400 { file[beep + n] = Float(0.3 * sin(2 * Double.pi * 1000 * Double(n) / 48_000)) }
        try writeWAV(dir.file("singer.wav"), channels: [file], sampleType: .int16)
        let liveaudio = productsDirectory + "/liveaudio"
        let command = [
            liveaudio, "karaoke", "wait.wav", "chart.txt", "--gap", String(Self.gap), "--phones", "1", "--web", "127.0.0.2:0",
            "--backend", "virtual", "--input", "room-mic.wav", "--output", "out.wav", "--stems", "stems", "--latency-ms", "0",
            "--difficulty", "hard", "--score-file", "scores.json", "--no-screen",
            // The room's buffer holds a page that started its file late (``tapAhead``).
            "--phone-delay", "1.5",
        ]
        let run = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_mic.py", "--out", dir.file("results.json"), "--cwd", dir.path,
             "--singer", dir.file("singer.wav"), "--lead", String(Self.lead), "--take-start", String(Self.wait + Self.gap),
             "--click-at", String(Self.wait + Self.gap - Self.lead - Self.tapAhead)]
                + (codec == "pcm" ? ["--pcm"] : []) + ["--"] + command,
            environment: ["XDG_DATA_HOME": dir.file("data")])
        if let keep = ProcessInfo.processInfo.environment["PHONE_KEEP"] {
            try? FileManager.default.removeItem(atPath: keep + "-" + codec)
            try? FileManager.default.copyItem(atPath: dir.path, toPath: keep + "-" + codec)
        }
        let r = try StageTests.results(dir.file("results.json"))
        let errors = r["errors"] as? [String] ?? []
        #expect(errors.isEmpty, "\(errors)\n\(run.stderr)\n\((r["stderr"] as? [String] ?? []).suffix(20).joined(separator: "\n"))")
        try #require(errors.isEmpty)
        #expect((r["url"] as? String ?? "").hasPrefix("https://127.0.0.2:") && (r["secure"] as? Bool) == true, "\(r["url"] ?? "")")
        #expect((r["codec"] as? String) == (codec == "pcm" ? "PCM" : "Opus"), "\(r["codec"] ?? "")")
        #expect((r["exitStatus"] as? Int) == 0, "\((r["stderr"] as? [String] ?? []).suffix(10))")
        let status = (r["mic"] as? [String: Any])?["status"] as? [String: Any] ?? [:]
        print("phone (\(codec)): \(status)")
        #expect((status["late"] as? Int) == 0 && (status["holes"] as? Int) == 0, "\(status)")

        // The dry stem of the phone's voice (voice 2) in the second take, against the singer from the chart's start:
        // each 100 ms of singing (every 250 ms, where the singer is not silent) at its best lag within ±20 ms — where it
        // lies against where the timestamps put it — and how well it matches there.
        let stem = try FFmpeg.decode(dir.file("stems/02/voice-2-dry.wav"), channels: 1)[0]
        let (lags, correlations) = Self.windows(stem: stem, singer: singer)
        let sortedCorrelations = correlations.sorted()
        let median = sortedCorrelations.isEmpty ? 0 : sortedCorrelations[sortedCorrelations.count / 2]
        print("phone (\(codec)): \(lags.count) windows of the dry stem: lags \(lags.min() ?? 0) … \(lags.max() ?? 0) frames, correlation median \(median), least \(sortedCorrelations.first ?? 0)")
        #expect(lags.count >= 20, "\(lags.count) windows of singing")
        #expect(lags.allSatisfy { abs($0) <= 480 }, "placed \(lags.map { Double($0) / 48 }) ms from where its timestamps say")
        #expect(median >= (codec == "pcm" ? 0.99 : 0.95), "correlation median \(median): \(correlations)")

        // Its score, and the file's offline.
        let json = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("scores.json")))) as? [String: Any])
        let take = try #require((json["takes"] as? [[String: Any]])?.first { $0["take"] as? Int == 2 }, "\(json)")
        let voices = take["voices"] as? [[String: Any]] ?? []
        // Voice 2: the phone (voice 1 is the room's own microphone, silent here).
        let phone = try #require(voices.count == 2 ? voices[1] : nil, "\(take)")
        let live = (phone["score"] as? [String: Any])?["total"] as? Int ?? -1
        let offline = try await runTool(liveaudio, ["score", dir.file("chart.txt"), dir.file("singer-alone.wav"), "--difficulty", "hard"])
        let scored = Int(offline.stdout.split(separator: "\n").first?.split(separator: ": ")[1].split(separator: " ")[0] ?? "") ?? -1
        print("phone (\(codec)): scored \(live) live, \(scored) offline")
        #expect(live >= 9_500, "the phone's score on hard: \(live)")
        #expect(abs(Double(scored - live)) <= 0.01 * Double(max(scored, 1)), "live \(live), offline \(scored)")

        if codec == "opus" {
            let mic = r["mic"] as? [String: Any] ?? [:]
            let packets = mic["packets"] as? Int ?? 0, bytes = mic["bytes"] as? Int ?? 0
            let kbps = packets > 0 ? Double(bytes) * 8 / (Double(packets) * 0.02) / 1000 : .infinity
            print("phone (opus): \(packets) packets, \(bytes) bytes: \(kbps) kbit/s")
            #expect(kbps <= 64, "\(kbps) kbit/s")
        }
    }

    /// Each 100 ms of singing (every 250 ms, or `every` frames, from the singer's first half second, where the singer
    /// is not silent) of `singer` found in `stem` at its best lag within ±20 ms: the lags (where it lies against
    /// where the timestamps put it) and how well it matches there. `skip` leaves out windows (a gap the test made).
    static func windows(
        stem: [Float], singer: [Float], every: Int = 12_000, skip: (Int) -> Bool = { _ in false }
    ) -> (lags: [Int], correlations: [Double]) {
        let span = 960, length = 4_800
        var lags: [Int] = [], correlations: [Double] = []
        // Through unsafe buffers, the probe's energy once and the stem's sliding along the lags: the debug build's
        // checked arrays took 41 s over a five-minute take's 300 windows.
        stem.withUnsafeBufferPointer { x in
            singer.withUnsafeBufferPointer { y in
                for start in stride(from: 24_000, to: min(singer.count, stem.count) - length - span, by: every) where !skip(start) {
                    var b = 0.0
                    for i in 0..<length { b += Double(y[start + i]) * Double(y[start + i]) }
                    guard b / Double(length) > 1e-4 else { continue }
                    var a = 0.0
                    for i in 0..<length { a += Double(x[start - span + i]) * Double(x[start - span + i]) }
                    var best = (lag: 0, correlation: -1.0)
                    for lag in -span...span {
                        if lag > -span {
                            let gone = Double(x[start + lag - 1]), come = Double(x[start + lag + length - 1])
                            a += come * come - gone * gone
                        }
                        var c = 0.0
                        let base = start + lag
                        for i in 0..<length { c += Double(x[base + i]) * Double(y[start + i]) }
                        let v = a > 0 ? c / (a * b).squareRoot() : 0
                        if v > best.correlation { best = (lag, v) }
                    }
                    lags.append(best.lag)
                    correlations.append(best.correlation)
                }
            }
        }
        return (lags, correlations)
    }
}
