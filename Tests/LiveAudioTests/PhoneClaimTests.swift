import Foundation
import Testing
import TestSupport

/// A page's phone voice across its connections, over the stage's WebSocket as the page speaks it (no browser:
/// Tests/Support/stage/stage_claims.py), a `liveaudio karaoke --phones 2` room on the virtual device: a page's new
/// connection gets its voice back by the claim it sings under — from its old connection the room has not yet seen
/// drop (closed then), or kept for it for a while after its connection dropped, when no other page may take it —
/// and a voice given back by a stop is anyone's.
@Suite struct PhoneClaimTests {
    @Test func aPageGetsItsVoiceBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try KaraokeRoomTests.tone(dir.file("song.wav"), frequency: 110, seconds: 40)
        try writeWAV(dir.file("room-mic.wav"), channels: [[Float](repeating: 0, count: 48_000)], sampleType: .int16)
        let run = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_claims.py", "--out", dir.file("results.json"), "--cwd", dir.path, "--",
             productsDirectory + "/liveaudio", "karaoke", "song.wav", "--phones", "2", "--web", "127.0.0.1:0", "--backend", "virtual",
             "--input", "room-mic.wav", "--output", "out.wav", "--latency-ms", "0", "--no-screen"])
        let r = try StageTests.results(dir.file("results.json"))
        let errors = r["errors"] as? [String] ?? []
        #expect(errors.isEmpty, "\(errors)\n\(run.stderr)\n\((r["stderr"] as? [String] ?? []).suffix(10))")
        func voice(_ step: String) -> Int? { ((r[step] as? [String: Any])?["data"] as? [String: Any])?["voice"] as? Int }
        func error(_ step: String) -> String { (r[step] as? [String: Any])?["error"] as? String ?? "" }
        print("phone claims: \(["a", "b", "c", "d", "e", "dAgain"].map { "\($0) \(voice($0).map(String.init) ?? error($0))" }); A closed \(r["aClosed"] ?? "-")")
        #expect(voice("a") == 2)
        #expect(voice("b") == 2, "a new connection under the same claim gets its voice: \(r["b"] ?? "-")")
        #expect(r["aClosed"] is [String: Any], "the old connection is closed by the room")
        #expect(voice("c") == 3)
        #expect(voice("d") == nil && error("d").contains("kept for a page whose connection dropped"), "\(r["d"] ?? "-")")
        #expect(voice("e") == 2, "the claim's voice after its connection dropped: \(r["e"] ?? "-")")
        #expect((r["eStop"] as? [String: Any])?["ok"] as? Bool == true)
        #expect(voice("dAgain") == 2, "a voice given back by a stop is anyone's: \(r["dAgain"] ?? "-")")
        #expect(error("badClaim").contains("a claim is 16"), "\(r["badClaim"] ?? "-")")
        #expect((r["exitStatus"] as? Int) == 0, "\((r["stderr"] as? [String] ?? []).suffix(5))")
    }
}
