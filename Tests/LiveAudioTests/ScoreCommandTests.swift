import Foundation
import LiveAudio
import TestSupport
import Testing

/// `liveaudio score` and `liveaudio pitch`: a generated singer following a generated chart, recorded to a file.
@Suite("score and pitch commands")
struct ScoreCommandTests {
    static func runLiveAudio(_ arguments: [String]) throws -> ProcessResult {
        try runProcess(productsDirectory + "/liveaudio", arguments)
    }

    /// Six lines of a melody at BPM 280 from 1 s; a golden note and a rap note among them.
    static let chartText: String = {
        var text = "#VERSION:1.1.0\n#TITLE:Generated\n#ARTIST:LiveAudio\n#MP3:song.wav\n#BPM:280\n#GAP:1000\n"
        let pitches = [-5, -3, 0, 2, 4, 2, 0, -1, -3, 0, 4, 7]
        var beat = 0
        for line in 0..<6 {
            for n in 0..<5 {
                let kind = line == 2 && n == 1 ? "*" : line == 4 && n == 3 ? "R" : ":"
                let length = 4 + (n + line) % 3
                text += "\(kind) \(beat) \(length) \(pitches[(line * 5 + n) % pitches.count]) la\n"
                beat += length + 1
            }
            text += "- \(beat)\n"
            beat += 3
        }
        return text + "E\n"
    }()

    static func setUp(_ dir: TemporaryDirectory) throws -> SongChart {
        let path = dir.file("chart.txt")
        try Self.chartText.write(toFile: path, atomically: true, encoding: .utf8)
        return try SongChart.load(path: path)
    }

    @Test("In tune, flat, late with --offset-ms, an octave low: the scores the rules give; --score-file writes JSON")
    func scores() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let chart = try Self.setUp(dir)
        func take(_ name: String, offset: Double = 0, late: Double = 0, silent: Bool = false) throws -> String {
            let path = dir.file(name)
            let singer = silent
                ? GeneratedSinger(rate: 48_000, segments: [], length: 10)
                : GeneratedSinger(chart: chart, offset: offset, late: late, snr: 30)
            try singer.write(to: path)
            return path
        }
        func score(_ take: String, _ extra: [String] = []) throws -> (total: Int, output: String) {
            let r = try Self.runLiveAudio(["score", dir.file("chart.txt"), take] + extra)
            #expect(r.status == 0, "\(r.stderr)")
            let first = r.stdout.split(separator: "\n").first.map(String.init) ?? ""
            let total = first.split(separator: ":").dropFirst().first.flatMap { Int($0.split(separator: " ").first ?? "") } ?? -1
            return (total, r.stdout)
        }
        let tuned = try score(take("tuned.wav"), ["--difficulty", "hard", "--score-file", dir.file("score.json")])
        #expect(tuned.total >= 9_500, "\(tuned.output)")
        #expect(tuned.output.contains("Generated") && tuned.output.split(separator: "\n").count == 7, "a summary and six lines")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("score.json")))) as! [String: Any]
        #expect(json["total"] as? Int == tuned.total && (json["lines"] as? [Any])?.count == 6 && json["difficulty"] as? String == "hard")
        let flat = try take("flat.wav", offset: -1)
        #expect(try score(flat, ["--difficulty", "hard"]).total < 2_000)
        #expect(try score(flat, ["--difficulty", "easy"]).total >= 9_000)
        let low = try score(take("low.wav", offset: -12), ["--difficulty", "hard"]).total
        #expect(abs(Double(low - tuned.total)) <= 0.02 * Double(tuned.total), "an octave low: \(low)")
        let late = try take("late.wav", late: 0.12)
        let uncorrected = try score(late, ["--difficulty", "hard"]).total
        let corrected = try score(late, ["--difficulty", "hard", "--offset-ms", "120"]).total
        #expect(Double(uncorrected) < 0.9 * Double(tuned.total), "late: \(uncorrected)")
        #expect(abs(Double(corrected - tuned.total)) <= 0.02 * Double(tuned.total), "late, corrected: \(corrected)")
        #expect(try score(take("silent.wav", silent: true)).total == 0)
    }

    @Test("A duet: --part 2 scores the second part; the first part of the same take scores little")
    func duet() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var text = "#TITLE:Duet\n#ARTIST:Two\n#BPM:240\n#GAP:500\n#P1:Low\n#P2:High\nP1\n"
        for n in 0..<8 { text += ": \(n * 8) 6 \([-5, -3, -1, 0][n % 4]) lo\n" }
        text += "P2\n"
        for n in 0..<8 { text += ": \(n * 8) 6 \([4, 7, 9, 11][n % 4]) hi\n" }
        try text.write(toFile: dir.file("duet.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("duet.txt"))
        try GeneratedSinger(chart: chart, part: 2, snr: 30).write(to: dir.file("high.wav"))
        func total(_ part: String) throws -> Int {
            let r = try Self.runLiveAudio(["score", dir.file("duet.txt"), dir.file("high.wav"), "--part", part, "--difficulty", "hard"])
            #expect(r.status == 0, "\(r.stderr)")
            return Int(r.stdout.split(separator: ": ")[1].split(separator: " ")[0]) ?? -1
        }
        #expect(try total("2") >= 9_500)
        #expect(try total("1") < 3_000)
        let missing = try Self.runLiveAudio(["score", dir.file("duet.txt"), dir.file("high.wav"), "--part", "3"])
        #expect(missing.status == 1 && missing.stderr.contains("has no part P3 (it has P1, P2)"), "\(missing.stderr)")
    }

    @Test("pitch prints CSV every 10 ms; bad input gets a clear error")
    func pitchAndErrors() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try Self.setUp(dir)
        let singer = GeneratedSinger(notes: [57], noteLength: 0.5, gap: 0.1)
        try singer.write(to: dir.file("a.wav"))
        let r = try Self.runLiveAudio(["pitch", dir.file("a.wav")])
        #expect(r.status == 0)
        let rows = r.stdout.split(separator: "\n")
        #expect(rows.first == "time,frequency,confidence,voiced" && rows.count > 50)
        let middle = rows.dropFirst().map { $0.split(separator: ",") }.filter { (Double($0[0]) ?? 0) > 0.1 && (Double($0[0]) ?? 0) < 0.4 }
        #expect(!middle.isEmpty && middle.allSatisfy { $0[3] == "1" && abs((Double($0[1]) ?? 0) - 220) < 5 })

        let missing = try Self.runLiveAudio(["score", dir.file("chart.txt"), dir.file("none.wav")])
        #expect(missing.status == 1 && missing.stderr.contains("none.wav"))
        try "#TITLE:x\n: 0 4 0 a\n".write(toFile: dir.file("bad.txt"), atomically: true, encoding: .utf8)
        let bad = try Self.runLiveAudio(["score", dir.file("bad.txt"), dir.file("a.wav")])
        #expect(bad.status == 1 && bad.stderr.contains("#BPM: no such header") && bad.stderr.contains("'crt?'"))
        try "[00:01.00]words\n".write(toFile: dir.file("words.lrc"), atomically: true, encoding: .utf8)
        let lyrics = try Self.runLiveAudio(["score", dir.file("words.lrc"), dir.file("a.wav")])
        #expect(lyrics.status == 1 && lyrics.stderr.contains("no notes to score"))
    }
}
