import AudioCore
import Foundation
import LiveAudio
import SongLibrary
import TestSupport
import Testing

/// A karaoke evening from phones, seen from outside: `liveaudio karaoke --library … --web` on the virtual device, the
/// big screen and two phones in headless Chromium (Tests/Support/stage/stage_evening.py, which starts the process and
/// stops it by its PID, kills it once and starts it again). This suite writes the library and the singer, and
/// judges what the pages saw and what the library kept.
@Suite(.serialized)
struct EveningStageTests {
    static var python: String { StageTests.python }

    /// Four songs (three sung alone, one duet), each a chart of C4 notes over 6 s of a quiet tone, and a singer who
    /// holds C4 all evening: every take scores well whenever it starts.
    static func prepare(_ dir: TemporaryDirectory, songSeconds: Int = 6) throws {
        let rate = 48_000
        let tone = (0..<(songSeconds * rate)).map { Float(0.05 * sin(2 * Double.pi * 1000 * Double($0) / Double(rate))) }
        func notes(_ count: Int, from start: Int = 0, word: String) -> String {
            (0..<count).map { n in ": \(start + n * 4) 3 0 \(word)\n" + (n % 4 == 3 ? "- \(start + n * 4 + 4)\n" : "") }.joined()
        }
        // Each song its own notes (the words differ): scores are kept by the notes.
        for (folder, title, body) in [
            ("One", "Stage One", notes(8, word: "one")), ("Two", "Stage Two", notes(8, word: "two")),
            ("Three", "Stage Three", notes(8, word: "three")),
            ("Duet", "Stage Duet", "P1\n" + notes(4, word: "hi") + "P2\n" + notes(4, from: 16, word: "lo")),
        ] {
            let path = dir.file("songs/\(folder)")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try writeWAV(path + "/song.wav", channels: [tone, tone], sampleType: .int16)
            let duet = folder == "Duet" ? "#P1:High\n#P2:Low\n" : ""
            try "#TITLE:\(title)\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:120\n#GAP:500\n\(duet)\(body)E\n"
                .write(toFile: path + "/song.txt", atomically: true, encoding: .utf8)
        }
        let voice = (0..<(120 * rate)).map { i -> Float in
            let t = Double(i) / Double(rate)
            return Float(0.3 * sin(2 * Double.pi * 261.63 * t) + 0.1 * sin(2 * Double.pi * 523.25 * t))
        }
        try writeWAV(dir.file("voice.wav"), channels: [voice], sampleType: .int16)
    }

    @Test func theEveningFromPhones() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.prepare(dir)
        let port = try freeLoopbackPort()
        let command = [
            productsDirectory + "/liveaudio", "karaoke", "--library", "songs", "--db", "library.sqlite", "--web", "127.0.0.1:\(port)",
            "--web-token", "evening-host-token", "--backend", "virtual", "--input", "voice.wav", "--input-start", "device",
            "--output", "out.wav", "--latency-ms", "0", "--gap", "2",
        ]
        let script = StageTests.repository + "/Tests/Support/stage/stage_evening.py"
        // EVENING_SCREENSHOTS=DIR keeps the big screen and a phone as PNG files (docs/images has them).
        let shots = ProcessInfo.processInfo.environment["EVENING_SCREENSHOTS"].map { ["--screenshots", $0] } ?? []
        let run = try runProcess(Self.python, [script, "--out", dir.file("results.json"), "--cwd", dir.path] + shots + ["--"] + command)
        #expect(run.status == 0, "\(run.stderr)")
        let r = try StageTests.results(dir.file("results.json"))
        // EVENING_RESULTS=FILE keeps what the pages saw (the folder is removed at the end).
        if let keep = ProcessInfo.processInfo.environment["EVENING_RESULTS"] { try? FileManager.default.copyItem(atPath: dir.file("results.json"), toPath: keep) }
        let errors = r["errors"] as? [String] ?? ["no results"]
        #expect(errors.isEmpty, "\(errors) — liveaudio said: \(((r["runs"] as? [[String: Any]])?.first?["stderr"] as? [String] ?? []).suffix(12))")
        #expect(r["bigRole"] as? String == "host" && r["phoneRole"] as? String == "guest")

        // Every page shows a phone's song within 200 ms of its tap.
        let delays = r["delays"] as? [String: [String: Double]] ?? [:]
        #expect(delays.count == 5)
        for (entry, pages) in delays {
            #expect(pages.count == 3)
            for (page, ms) in pages { #expect(ms <= 200, "\(entry) reached \(page) after \(ms) ms") }
        }
        // The rule's order: Ana's first (it is sung first, once the host resumes the queue), Ben's duet (with Ana),
        // then Ana's and Ben's second; the same on every page.
        let e = r["entries"] as? [String: Int] ?? [:]
        let order = ["a1", "b1", "a2", "b2"].compactMap { e[$0] }
        let shown = r["queueBig"] as? [Int] ?? []
        #expect(order.count == 4 && shown.count >= 3 && Array(order.suffix(shown.count)) == shown && r["queueAna"] as? [Int] == shown, "\(shown)")
        #expect(r["mineBen"] as? [Int] == ["b1", "b2"].compactMap { e[$0] })
        // A phone reloaded: the same singer, its songs.
        let reloaded = r["anaAfterReload"] as? [String: Any]
        #expect((reloaded?["me"] as? [String: Any])?["name"] as? String == "Ana")
        #expect((reloaded?["mine"] as? [Int]).map { $0.last == e["a2"] && Set($0).isSubset(of: [e["a1"] ?? -1, e["a2"] ?? -1]) } == true, "\(String(describing: reloaded))")
        // A guest's reach: its own entries, no controls.
        let removes = r["benRemovesAna"] as? [String: Any]
        #expect(removes?["ok"] as? Bool == false && removes?["error"] as? String == "a phone removes its own songs only")
        #expect((r["benSkips"] as? [String: Any])?["error"] as? String == "the controls need the stage's token: open the address the command printed")
        #expect(((r["benMoves"] as? [String: Any])?["error"] as? String)?.hasPrefix("only the host") == true)
        // …and its pace: 40 requests 5 ms apart, what is left of its burst of 30 (its searches as it typed took some)
        // answered, the rest refused.
        let burst = r["burst"] as? [[String: Any]] ?? []
        let refused = burst.filter { $0["error"] as? String == "too many requests: wait a moment" }.count
        #expect(burst.count == 40 && refused >= 5 && burst.count - refused >= 20, "\(refused) of \(burst.count) refused")
        // A hostile name is text.
        let hostile = r["hostile"] as? [String: Any]
        #expect((hostile?["text"] as? [String])?.contains("<img src=x onerror=\"window.pwned=1\">Ben & Ana") == true, "\(String(describing: hostile))")
        #expect(hostile?["images"] as? Int == 0 && hostile?["pwned"] as? Bool == false)
        #expect((r["hostilePhone"] as? [String: Any])?["pwned"] as? Bool == false)
        // The QR code is the join address.
        let join = r["joinURL"] as? String ?? ""
        #expect(join.hasPrefix("http://127.0.0.1:\(port)/join?guest=") && r["qr"] as? String == join, "the QR code read \(r["qr"] ?? "-"); the join address \(join)")

        // The host paused the queue while it was filled: the big screen said so, and no entry was up or sung.
        let paused = r["whilePaused"] as? [String: Any] ?? [:]
        #expect(paused["shown"] as? Bool == true && paused["button"] as? String == "Resume the queue", "\(paused)")
        #expect(paused["states"] as? [String] == ["waiting", "waiting", "waiting", "waiting"], "\(paused)")
        // Resumed, the host skipped the first song; the duet was sung, its score shown.
        #expect(r["firstTitle"] as? String == "Stage One")
        let scores = r["scores"] as? [[String: Any]] ?? []
        // Three takes back to back in the room started again (Stage Two, Three, One), and the duet before the kill:
        // each take's score shown with its place and the song's top five.
        #expect(scores.map { $0["title"] as? String } == ["Stage Duet", "Stage Two", "Stage Three", "Stage One"])
        for s in scores {
            let results = s["results"] as? [[String: Any]] ?? []
            let top = s["top"] as? [[String: Any]] ?? []
            #expect(results.count == 1 && (results.first?["score"] as? Int ?? 0) >= 5000, "\(s)")
            #expect(top.count == 1 && top.first?["new"] as? Bool == true && top.first?["place"] as? Int == 1, "\(s)")
        }
        #expect((scores.first?["results"] as? [[String: Any]])?.first?["singer"] as? String == "<img src=x onerror=\"window.pwned=1\">Ben")

        // Killed and started again: the same addresses, the same queue, the phones still who they were.
        #expect(r["killedStatus"] as? Int == -9)
        #expect(r["urlAfterRestart"] as? String == r["url"] as? String && r["joinAfterRestart"] as? String == join)
        // Before the kill a2 was up next (in its countdown) and b2 waiting; after it, a2 is the song that comes (up
        // next again, or sung already when the page looked), b2 still waits.
        let (a2, b2) = (e["a2"] ?? -1, e["b2"] ?? -1)
        #expect(r["queueBeforeKill"] as? [Int] == [a2, b2], "\(r["queueBeforeKill"] ?? "")")
        #expect(["up", "waiting"].contains((r["statesBeforeKill"] as? [String])?.first ?? "") && (r["statesBeforeKill"] as? [String])?.last == "waiting")
        let after = r["queueAfterRestart"] as? [Int] ?? []
        #expect(after == [a2, b2] || after == [b2], "\(after)")
        #expect(r["roleAfterRestart"] as? String == "host")
        #expect(((r["anaAfterRestart"] as? [String: Any])?["me"] as? [String: Any])?["name"] as? String == "Ana")
        #expect(r["queueAtEnd"] as? [Int] == [])

        // What the library kept: one skipped, four sung, four scores.
        let library = try SongLibrary(path: dir.file("library.sqlite"))
        let kept = try library.recentScores()
        #expect(kept.count == 4 && Set(kept.map(\.title)) == ["Stage Duet", "Stage Two", "Stage Three", "Stage One"])
        let printed = try runProcess(productsDirectory + "/liveaudio", ["scores", "stage", "--db", dir.file("library.sqlite")])
        #expect(printed.stdout.contains("Tests – Stage Two\n  medium:\n    1. Ana  "), "\(printed.stdout)")
    }
}
