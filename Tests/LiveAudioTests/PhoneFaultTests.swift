import Foundation
import LiveAudio
import Testing
import TestSupport

/// Phones singing a duet, over a bad link, cut off, and abused — end to end as PhoneMicTests: `liveaudio karaoke
/// --phones 2 --parts 1,1,2 --web 127.0.0.2:0` on the virtual device (voice 1 the room's silent microphone, voices 2
/// and 3 the phones), a headless Chromium a phone whose fake microphone reads a generated singer
/// (Tests/Support/stage/stage_mic.py), the bad link a proxy on 127.0.0.3 the page goes through (Tests/Support/stage/stage_link.py: this
/// kernel has no netem, so the relay delays and holds what TCP would).
@Suite(.serialized) struct PhoneFaultTests {
    /// Seconds of the first song (silence: the time two browsers take to open the page), of the gap before the
    /// charted song, and of silence in a singer's file before the chart's time 0 (a beep 3 s before its end).
    /// (The gap as ``PhoneMicTests/gap`` explains: time to set both pages' offsets before their first notes.)
    static let wait = 20.0, gap = 4.0, lead = 10.0

    /// A duet at 240 BPM, 16 notes a part, both parts at once (P1 low, P2 a third to a sixth above).
    static let chartText: String = {
        var text = "#TITLE:Phone duet\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:240\n#GAP:500\n#P1:Low\n#P2:High\nP1\n"
        for n in 0..<16 { text += ": \(n * 8) 6 \([-5, -3, -1, 0, 2, 0, -1, -3][n % 8]) lo\n" }
        text += "P2\n"
        for n in 0..<16 { text += ": \(n * 8) 6 \([0, 2, 4, 5, 7, 5, 4, 2][n % 8]) hi\n" }
        return text + "E\n"
    }()

    struct Run {
        let dir: TemporaryDirectory
        let results: [String: Any]
        /// Each page's singer from the chart's start (empty for a page that does not sing).
        let singers: [[Float]]
        let stderr: String

        var pages: [[String: Any]] { results["pages"] as? [[String: Any]] ?? [] }
        var stdout: [String] { results["stdout"] as? [String] ?? [] }

        /// Voice `voice`'s total on take 2.
        func score(voice: Int) throws -> (total: Int, part: Int) {
            let json = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("scores.json")))) as? [String: Any])
            let take = try #require((json["takes"] as? [[String: Any]])?.first { $0["take"] as? Int == 2 }, "\(json)")
            let voices = take["voices"] as? [[String: Any]] ?? []
            let v = try #require(voices.count >= voice ? voices[voice - 1] : nil, "\(take)")
            return ((v["score"] as? [String: Any])?["total"] as? Int ?? -1, v["part"] as? Int ?? -1)
        }

        /// `liveaudio score` of `samples` on `part`.
        func offlineScore(_ samples: [Float], part: Int) async throws -> Int {
            let path = dir.file("offline-\(part)-\(samples.count).wav")
            try writeWAV(path, channels: [samples], sampleType: .int16)
            let r = try await runTool(
                productsDirectory + "/liveaudio", ["score", dir.file("chart.txt"), path, "--part", String(part), "--difficulty", "hard"])
            return Int(r.stdout.split(separator: "\n").first?.split(separator: ": ").dropFirst().first?.split(separator: " ").first ?? "") ?? -1
        }
    }

    /// Runs the room with a page a singer: `parts[i]` the part page i sings (0: none, its file only the beep), the
    /// first page behind the link `options` describe.
    static func run(parts: [Int], options: [String], chart chartText: String = chartText, songSeconds: Double = 10) async throws -> Run {
        let dir = try TemporaryDirectory()
        try chartText.write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("chart.txt"))
        try KaraokeRoomTests.tone(dir.file("song.wav"), frequency: 110, seconds: songSeconds)
        try writeWAV(dir.file("wait.wav"), channels: [[Float](repeating: 0, count: Int(wait * 48_000))], sampleType: .int16)
        try writeWAV(dir.file("room-mic.wav"), channels: [[Float](repeating: 0, count: 48_000)], sampleType: .int16)
        var singers: [[Float]] = []
        var files: [String] = []
        let making = Date()
        for (i, part) in parts.enumerated() {
            let singer = part > 0 ? GeneratedSinger(chart: chart, part: part, snr: 30, seed: UInt64(10 + i)).samples : []
            singers.append(singer)
            var file = [Float](repeating: 0, count: Int(lead * 48_000)) + singer + [Float](repeating: 0, count: 50 * 48_000)
            let beep = Int((lead - 3) * 48_000)
            for n in 0..<2_400 { file[beep + n] = Float(0.3 * sin(2 * Double.pi * 1000 * Double(n) / 48_000)) }
            files.append(dir.file("singer-\(i + 1).wav"))
            try writeWAV(files[i], channels: [file], sampleType: .int16)
        }
        print("phone run: the singers made and written in \(String(format: "%.1f", Date().timeIntervalSince(making))) s")
        let command = [
            productsDirectory + "/liveaudio", "karaoke", "wait.wav", "chart.txt", "--gap", String(gap), "--phones", String(parts.count),
            "--parts", "1," + parts.map { String(max($0, 1)) }.joined(separator: ","), "--web", "127.0.0.2:0",
            "--backend", "virtual", "--input", "room-mic.wav", "--output", "out.wav", "--stems", "stems", "--latency-ms", "0",
            "--difficulty", "hard", "--score-file", "scores.json", "--no-screen",
            // A page may start its file up to 3 s after its tap on a loaded machine, so the offset the test sets
            // can place its audio a second or more earlier than its stamps — a test's artefact, not a phone's path —
            // which the room's buffer must hold (``PhoneMicTests/tapAhead``).
            "--phone-delay", "1.5",
        ]
        let process = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_mic.py", "--out", dir.file("results.json"), "--cwd", dir.path]
                + files.flatMap { ["--singer", $0] }
                + ["--lead", String(lead), "--take-start", String(wait + gap), "--click-at", String(wait + gap - lead - PhoneMicTests.tapAhead)]
                + options + ["--"] + command,
            environment: ["XDG_DATA_HOME": dir.file("data")])
        if let keep = ProcessInfo.processInfo.environment["PHONE_KEEP"] {
            let name = keep + "-" + (options.first ?? "plain").trimmingCharacters(in: CharacterSet(charactersIn: "-"))
            try? FileManager.default.removeItem(atPath: name)
            try? FileManager.default.copyItem(atPath: dir.path, toPath: name)
        }
        return Run(dir: dir, results: try StageTests.results(dir.file("results.json")), singers: singers, stderr: process.stderr)
    }

    static func checkRan(_ run: Run) throws {
        let errors = run.results["errors"] as? [String] ?? []
        #expect(errors.isEmpty, "\(errors)\n\(run.stderr)\n\((run.results["stderr"] as? [String] ?? []).suffix(20).joined(separator: "\n"))")
        try #require(errors.isEmpty)
        #expect((run.results["exitStatus"] as? Int) == 0, "\((run.results["stderr"] as? [String] ?? []).suffix(10))")
        #expect(run.pages.map { $0["voice"] as? Int } == Array(2...(run.pages.count + 1)).map { Optional($0) }, "\(run.pages.map { $0["voice"] ?? "" })")
        // The room kept time: no xrun, and take 2 recorded without a dropped frame.
        let summary = run.stdout.first { $0.hasPrefix("karaoke: ") && $0.contains("; xruns ") } ?? ""
        #expect(summary.contains("; xruns 0,"), "\(run.stdout.suffix(8))")
        let take = run.stdout.first { $0.hasPrefix("karaoke: take 2 (") } ?? ""
        #expect(take.contains("dropped 0"), "\(run.stdout.suffix(8))")
    }

    /// Two pages sing the two parts of a duet, the first over a bad link (each read 30 ± 20 ms late, 5 % of them held
    /// 200 … 400 ms more, as TCP holds what follows a lost segment): each part scores ≥ 9,500 on hard on its own voice,
    /// the lossy one within 2 % of `liveaudio score` of its file, its dry stem placed window by window within ±10 ms
    /// of where its timestamps say, with no hole and nothing late.
    @Test func aDuetOverALossyLink() async throws {
        let run = try await Self.run(parts: [1, 2], options: ["--lossy", "30,20,0.05"])
        defer { run.dir.remove() }
        try Self.checkRan(run)
        let link = run.results["link"] as? [String: Any] ?? [:]
        print("phone duet: the link held \(link["held"] ?? 0) reads a retransmission timeout")
        #expect((link["held"] as? Int ?? 0) > 20, "the link lost segments: \(link)")
        for (i, page) in run.pages.enumerated() {
            let status = (page["mic"] as? [String: Any])?["status"] as? [String: Any] ?? [:]
            print("phone duet, page \(i + 1): \(status)")
            #expect((status["late"] as? Int) == 0 && (status["holes"] as? Int) == 0, "page \(i + 1): \(status)")
        }
        let stem = try FFmpeg.decode(run.dir.file("stems/02/voice-2-dry.wav"), channels: 1)[0]
        let (lags, correlations) = PhoneMicTests.windows(stem: stem, singer: run.singers[0])
        let median = correlations.sorted()[correlations.count / 2]
        print("phone duet over the lossy link: \(lags.count) windows, lags \(lags.min() ?? 0) … \(lags.max() ?? 0) frames, correlation median \(median)")
        #expect(lags.count >= 20 && lags.allSatisfy { abs($0) <= 480 }, "placed \(lags.map { Double($0) / 48 }) ms from where its timestamps say")
        #expect(median >= 0.95, "\(correlations)")
        let low = try run.score(voice: 2), high = try run.score(voice: 3)
        let offline = try await run.offlineScore(run.singers[0], part: 1)
        print("phone duet: P1 (lossy link) \(low.total) live, \(offline) offline; P2 \(high.total)")
        #expect(low.part == 1 && high.part == 2)
        #expect(low.total >= 9_500 && high.total >= 9_500, "P1 \(low.total), P2 \(high.total)")
        #expect(abs(Double(offline - low.total)) <= 0.02 * Double(max(offline, 1)), "live \(low.total), offline \(offline)")
        try Self.checkLane(run, page: 0, part: 1)
        try Self.checkLane(run, page: 1, part: 2)
    }

    /// Page `page`'s own pitch lane (the microphone's, drawn from the room's ticks) against part `part` of the chart:
    /// shown while it sings, each line it drew has that part's notes, and its dots — the phone voice's pitch as the
    /// room tracked it — sit on them (within a semitone, 80 % of the dots inside a note).
    static func checkLane(_ run: Run, page: Int, part: Int) throws {
        let lines = try #require(try SongChart.load(path: run.dir.file("chart.txt")).voice(part)?.lines)
        let looks = run.pages.count > page ? run.pages[page]["lanes"] as? [[String: Any]] ?? [] : []
        #expect(!looks.isEmpty && looks.allSatisfy { $0["shown"] as? Bool == true }, "page \(page + 1)'s lane: \(looks.map { $0["shown"] ?? "" })")
        var on = 0, all = 0
        for look in looks {
            let lane = look["lane"] as? [String: Any] ?? [:]
            let index = lane["line"] as? Int ?? -1
            let notes = lane["notes"] as? [[String: Any]] ?? []
            let expected = lines.indices.contains(index)
                ? lines[index].syllables.compactMap(\.note).filter { $0.kind.hasPitch }.map { Double($0.midiNote) } : []
            #expect(!expected.isEmpty && notes.map { $0["midi"] as? Double ?? .nan } == expected, "page \(page + 1), line \(index): \(notes)")
            for point in lane["points"] as? [[String: Any]] ?? [] {
                guard let t = point["time"] as? Double, let midi = point["midi"] as? Double,
                    let note = notes.first(where: { t >= ($0["start"] as? Double ?? 0) + 0.1 && t <= ($0["end"] as? Double ?? 0) })
                else { continue }
                all += 1
                if abs(midi - (note["midi"] as? Double ?? .nan)) <= 1 { on += 1 }
            }
        }
        print("phone \(page + 1)'s lane (P\(part)): \(looks.count) lines seen, \(on) of \(all) dots on their notes")
        #expect(all >= 10 && Double(on) >= 0.8 * Double(all), "page \(page + 1): \(on) of \(all) dots on their notes")
    }

    /// A page's link cut for 2 s when the take has played 4 s, while another page floods the room with 6 s of audio
    /// at once and, tapped to sing again, sends three messages of garbage: the flooding page is dropped each time (its
    /// connection closed by the room, the page told why); the cut page reconnects by itself, and its voice is silence from the cut to
    /// its return and placed as before after it, its stem as long as the take's; its score is `liveaudio score` of
    /// its file with that silence (within 2 %); the room kept time throughout (no xrun, no dropped frame). A third
    /// page, whose browser denies it the microphone, says so when tapped.
    @Test func aCutLinkAndAFloodingPage() async throws {
        // 32 notes (16 s of singing): the cut 4 s in, a good 8 s after the page's return.
        var text = "#TITLE:Phone cut\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:240\n#GAP:500\n"
        for n in 0..<32 { text += ": \(n * 8) 6 \([0, 2, 4, 5, 7, 5, 4, 2][n % 8]) la\n" }
        text += "E\n"
        let run = try await Self.run(
            parts: [1, 0], options: ["--cut-at", "4", "--cut-for", "2", "--abuse", "1", "--abuse-at", "1.5", "--denied"], chart: text,
            songSeconds: 18)
        defer { run.dir.remove() }
        try Self.checkRan(run)
        // A third page, whose browser will not give it the microphone, says so on the page.
        let denied = run.results["deniedShown"] as? String ?? ""
        print("phone faults: a page without a microphone shows: \(denied)")
        #expect(denied.contains("no microphone: the browser was not allowed to use it"), "\(run.results["deniedError"] ?? "-")")
        // The abusive page: closed by the room after the flood and after the garbage.
        let abusive = run.pages[1]
        let closes = abusive["closes"] as? [[String: Any]] ?? []
        print("phone faults: the flooding page's connection closed \(closes.count) times: \(closes); flood at \(run.results["floodAt"] ?? "-"), garbage at \(run.results["garbageAt"] ?? "-")")
        print("phone faults: the page was told: \(run.results["floodError"] ?? "-"); then \(run.results["garbageError"] ?? "-")")
        #expect(run.results["garbageAt"] != nil, "the page was back and singing after the flood")
        // Caught by the decoder's clock (audio faster than real time) or by its queue (a second of packets waiting),
        // whichever comes first.
        #expect((run.results["floodError"] as? String ?? "").contains("faster than"), "\(run.results["floodError"] ?? "-")")
        #expect((run.results["garbageError"] as? String ?? "").contains("three messages that are not a phone's audio"), "\(run.results["garbageError"] ?? "-")")
        #expect(closes.filter { $0["code"] as? Int != 1000 }.count >= 2, "dropped after the flood and after the garbage: \(closes)")
        // The cut page: reconnected, singing at the end.
        let cut = run.pages[0]
        let mic = cut["mic"] as? [String: Any] ?? [:]
        print("phone faults: the cut page: closes \(cut["closes"] ?? []), reconnects \(mic["reconnects"] ?? "-"), status \(mic["status"] ?? [:])")
        #expect((cut["closes"] as? [Any] ?? []).count >= 1 && (mic["mode"] as? String) == "singing", "\(mic)")
        let dry = try FFmpeg.decode(run.dir.file("stems/02/voice-2-dry.wav"), channels: 1)[0]
        let room = try FFmpeg.decode(run.dir.file("stems/02/voice-1-dry.wav"), channels: 1)[0]
        #expect(abs(dry.count - room.count) <= 1, "the phone's stem is the take's length: \(dry.count) against \(room.count)")
        // The silence: the longest run of zeros in the sung part of the stem.
        let singer = run.singers[0]
        var best = (start: 0, length: 0), runStart = 0
        for i in 0..<min(dry.count, singer.count) {
            if dry[i] != 0 { runStart = i + 1 } else if i + 1 - runStart > best.length { best = (runStart, i + 1 - runStart) }
        }
        let cutAt = run.results["cutAt"] as? Double ?? -1
        print("phone faults: cut at \(cutAt) s of the take; the stem silent from \(Double(best.start) / 48_000) s for \(Double(best.length) / 48_000) s")
        // Where the cut falls in the take is known only to the stage's ticks, read by the test every 0.2 s.
        let silentFrom = Double(best.start) / 48_000
        // Silent for the cut and the page's way back (its reconnect waits 0.5 … 1 s more), not for ever.
        #expect(best.length >= 96_000 - 4_800 && best.length <= 5 * 48_000, "silent for \(Double(best.length) / 48_000) s")
        #expect(silentFrom > cutAt - 0.5 && silentFrom < cutAt + 2.5, "silent from \(silentFrom) s after a cut at \(cutAt) s")
        let gap = best.start..<(best.start + best.length)
        // The pitch track marks the gap: its estimates inside the silence say gap, those of the singing around it not.
        let rows = try String(contentsOfFile: run.dir.file("stems/02/pitch-2.csv"), encoding: .utf8).split(separator: "\n")
        #expect(rows.first == "time,frequency,confidence,voiced,note,gap", "\(rows.first ?? "")")
        let marks = rows.dropFirst().compactMap { row -> (time: Double, gap: Bool)? in
            let f = row.split(separator: ",", omittingEmptySubsequences: false)
            guard f.count == 6, let t = Double(f[0]), f[5] == "0" || f[5] == "1" else { return nil }
            return (t, f[5] == "1")
        }
        let (gapFrom, gapTo) = (Double(gap.lowerBound) / 48_000, Double(gap.upperBound) / 48_000)
        let inside = marks.filter { $0.time > gapFrom + 0.05 && $0.time < gapTo - 0.05 }
        let sung = marks.filter { ($0.time > 0.5 && $0.time < gapFrom - 0.1) || ($0.time > gapTo + 0.1 && $0.time < 15.5) }
        print("phone faults: pitch-2.csv marks \(inside.filter(\.gap).count) of \(inside.count) estimates in the silence a gap, \(sung.filter(\.gap).count) of \(sung.count) around it")
        #expect(marks.count >= rows.count - 2, "every row has its gap column: \(rows.prefix(3))")
        #expect(inside.count >= 150 && inside.allSatisfy(\.gap), "\(inside.filter { !$0.gap }.prefix(5))")
        // (A lost packet would be a gap too, if the page's link lost one: at most 1 %.)
        #expect(sung.count >= 900 && sung.filter(\.gap).count <= sung.count / 100, "\(sung.filter(\.gap).prefix(5))")
        // After it, placed as before, from its return on (its voice came back with its clock readings).
        let (lags, _) = PhoneMicTests.windows(stem: dry, singer: singer) { start in start - 960 < gap.upperBound }
        print("phone faults: \(lags.count) windows after the return, lags \(lags.min() ?? 0) … \(lags.max() ?? 0) frames")
        #expect(lags.count >= 16 && lags.allSatisfy { abs($0) <= 480 }, "placed \(lags.map { Double($0) / 48 }) ms from where its timestamps say")
        // Scored as the file with that silence.
        var silenced = singer
        for i in gap where i < silenced.count { silenced[i] = 0 }
        let live = try run.score(voice: 2).total
        let offline = try await run.offlineScore(silenced, part: 1)
        let whole = try await run.offlineScore(singer, part: 1)
        print("phone faults: the cut page scored \(live) live; its file with the gap \(offline), without \(whole)")
        #expect(live < whole && abs(Double(offline - live)) <= 0.02 * Double(max(offline, 1)), "live \(live), offline with the gap \(offline)")
    }

}
