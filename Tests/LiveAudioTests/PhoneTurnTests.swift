import Foundation
import Testing
import TestSupport

/// An evening's phone voices pass from singer to singer, over the stage's WebSocket as the pages speak it (no browser:
/// Tests/Support/stage/stage_turns.py), in a `liveaudio karaoke --library … --phones 3` evening on the virtual device:
/// a guest's page whose singer's song is no longer on or next is ended (told why, its connection kept), one whose
/// song is on is not, the host's never; a voice kept for a dropped guest's page is forgotten once its singer's turn is
/// over — well before the 30 s a kept voice waits for its claim; and a guest's phone asks count against its requests.
@Suite struct PhoneTurnTests {
    @Test func aPhonePassesFromSingerToSinger() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The evening's library (three songs sung alone, a duet), its songs long enough that none ends by itself
        // while the script runs (it skips them); its voice.wav the room's microphone.
        try EveningStageTests.prepare(dir, songSeconds: 40)
        let run = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_turns.py", "--out", dir.file("results.json"), "--cwd", dir.path, "--",
             productsDirectory + "/liveaudio", "karaoke", "--library", "songs", "--db", "library.sqlite", "--phones", "3",
             "--web", "127.0.0.1:0", "--backend", "virtual", "--input", "voice.wav", "--input-start", "device",
             "--output", "out.wav", "--latency-ms", "0", "--gap", "1"])
        let r = try StageTests.results(dir.file("results.json"))
        let errors = r["errors"] as? [String] ?? ["no results"]
        #expect(errors.isEmpty, "\(errors)\n\(run.stderr)\n\((r["stderr"] as? [String] ?? []).suffix(10))")
        func reply(_ key: String) -> [String: Any]? { r[key] as? [String: Any] }
        func voice(_ key: String) -> Int? { (reply(key)?["data"] as? [String: Any])?["voice"] as? Int }
        func error(_ key: String) -> String { reply(key)?["error"] as? String ?? "" }
        print("phone turns: \(r["timeline"] ?? "-")")
        let notNow = "only the singer whose song is on or next may sing with a phone"
        let songs = r["songs"] as? [String: String] ?? [:]

        // The pages: the host's (the stage's token), the guests' (the join address's); the room's three phone voices.
        #expect(r["roles"] as? [String: String] == ["host": "host", "Ana": "guest", "Ben": "guest", "Cy": "guest", "Dee": "guest"])
        #expect(r["phoneVoices"] as? Int == 3)
        // Ana's song on, Ben's next: both sing, the host's page too; Cy, with no song, may not.
        #expect((r["songWhileAna"] as? [String: Any])?["title"] as? String == songs["Ana"])
        #expect(
            voice("anaSings") == 2 && voice("benSings") == 3 && voice("hostSings") == 4,
            "\(r["anaSings"] ?? "-") \(r["benSings"] ?? "-") \(r["hostSings"] ?? "-")")
        #expect(error("cySingsFirst") == notNow, "\(r["cySingsFirst"] ?? "-")")

        // The host skips Ana's song: her page is told its turn is over within seconds (after a few looks in a row,
        // not the first), its connection open; she may not sing again. Ben's song on: his page is not ended.
        #expect(reply("skipAna")?["ok"] as? Bool == true)
        #expect((r["songWhileBen"] as? [String: Any])?["title"] as? String == songs["Ben"])
        let anaEnded = r["anaEnded"] as? String ?? ""
        #expect(anaEnded.hasPrefix("your turn is over"), "\(r["anaEnded"] ?? "-")")
        let endedAfter = r["anaEndedSeconds"] as? Double ?? -1
        // (Three looks a second apart: two seconds at least after the first that found her out of turn.)
        #expect(endedAfter >= 1.5 && endedAfter <= 10, "Ana's voice ended \(endedAfter) s after the skip")
        #expect(r["anaOpen"] as? Bool == true, "the room ends the singing, not the page's connection")
        #expect(r["benEndedWhileOn"] as? [String] == [], "\(r["benEndedWhileOn"] ?? "-")")
        #expect(error("anaSingsAgain") == notNow, "\(r["anaSingsAgain"] ?? "-")")

        // Ben's page drops: his voice is kept for his claim while his song is on. Cy (the duet next, with Dee) gets
        // the voice Ana's end gave back; Dee, who may sing too, is refused seconds later: every voice taken, one kept.
        #expect(r["benClosed"] is [String: Any])
        #expect(r["allowedPage"] as? String == "Dee")
        #expect(voice("cySings") == voice("anaSings"), "the voice Ana's end gave back: \(r["cySings"] ?? "-")")
        #expect(
            voice("allowedRefused") == nil && error("allowedRefused").contains("kept for a page whose connection dropped"),
            "\(r["allowedRefused"] ?? "-")")

        // The host skips Ben's song: Ben neither on nor next, the voice kept for him is forgotten and Dee gets it —
        // within seconds, not after the 30 s a kept voice waits for its claim.
        #expect(reply("skipBen")?["ok"] as? Bool == true)
        let attempts = r["allowedAttempts"] as? [[Any]] ?? []
        #expect((attempts.first?.last as? String)?.contains("kept for a page whose connection dropped") == true, "\(attempts)")
        #expect(voice("allowedSings") == voice("benSings"), "\(attempts)")
        let freed = r["allowedSingsSeconds"] as? Double ?? -1
        #expect(freed >= 1.5 && freed <= 10, "the kept voice was free \(freed) s after the skip: \(attempts)")
        #expect((r["secondsAfterDrop"] as? Double ?? 99) < 30)

        // Ended: Ana's page, once; not Ben's (his song on), Cy's and Dee's (theirs next, then on), nor the host's.
        let ended = r["ended"] as? [String: [String]] ?? [:]
        #expect(ended == ["host": [], "Ana": [anaEnded], "Ben": [], "Cy": [], "Dee": []], "\(ended)")

        // A burst of 40 asks from a guest's phone: at most the bucket's 30 and what it refilled while they were sent
        // (10 a second) taken, the rest refused as its requests are.
        let burst = r["offsetBurst"] as? [String?] ?? []
        let taken = burst.filter { $0 == "ok" }.count
        let refused = burst.filter { $0 == "too many requests: wait a moment" }.count
        let span = r["offsetBurstSeconds"] as? Double ?? 0
        #expect(
            burst.count == 40 && taken >= 10 && taken <= 31 + Int((10 * span).rounded(.up)) && refused >= 1 && taken + refused == 40,
            "\(burst) in \(span) s")
        #expect((r["exitStatus"] as? Int) == 0, "\((r["stderr"] as? [String] ?? []).suffix(5))")
    }
}
