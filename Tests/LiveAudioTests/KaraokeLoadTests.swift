import Foundation
import Testing
import TestSupport

/// The room under load, in a suite of its own: `make test` runs it beside its computing phase (scripts/run-tests.sh),
/// whose work is the load, rather than beside the sessions whose timing the other suites judge.
@Suite struct KaraokeLoadTests {
    /// A take under load: at 256 frames on JACK, with the stage open in headless Chromium and `KARAOKE_STRESS_BUSY`
    /// (default 2) loops of CPU beside it on this machine's cores, for `KARAOKE_STRESS_SECONDS` (default 180): the
    /// song's worker (`la-song`, at the lowest real-time priority) keeps the accompaniment from running dry — no
    /// underrun — and no cycle of ours blocked, took a page fault after the first, or computed for half its period or
    /// more; and the machine's CPUs were at least 90 % busy over the take. `make test` runs it beside its computing
    /// tests, whose work is the load, with no loops of its own (`KARAOKE_STRESS_BUSY=0`; `KARAOKE_STRESS_BUSY_NICE`
    /// sets the loops' niceness).
    @Test func aTakeUnderLoad() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seconds = Double(environment["KARAOKE_STRESS_SECONDS"] ?? "") ?? 180
        let busy = Int(environment["KARAOKE_STRESS_BUSY"] ?? "") ?? 2
        let busyNice = Int(environment["KARAOKE_STRESS_BUSY_NICE"] ?? "") ?? 0
        let jack = try await JACKServer.started(periodFrames: 256)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try KaraokeRoomTests.tone(dir.file("song.wav"), frequency: 330, seconds: seconds + 5)
        let run = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_stress.py", "--out", dir.file("results.json"), "--cwd", dir.path,
             "--busy", String(busy), "--busy-nice", String(busyNice), "--", productsDirectory + "/liveaudio", "karaoke", "song.wav", "--backend", "jack", "--jack-server", jack.name,
             "--input", "self", "--output", "self", "--period", "256", "--latency-ms", "10", "--duration", "\(seconds)", "--timing",
             "--no-screen", "--web", "127.0.0.1:0"])
        let r = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("results.json")))) as? [String: Any],
            "\(run.stderr)")
        let errors = r["errors"] as? [String] ?? []
        #expect(errors.isEmpty && (r["busyRunning"] as? Bool) == true, "\(errors)")
        #expect((r["exitStatus"] as? Int) == 0, "\((r["stderr"] as? [String] ?? []).suffix(5))")
        #expect((r["ticks"] as? Int ?? 0) > Int(seconds) * 10, "the page ticked \(r["ticks"] ?? 0) times")
        let stdout = r["stdout"] as? [String] ?? []
        let summary = try #require(stdout.first { $0.hasPrefix("karaoke: ") && $0.contains(" s; round trip") }, "\(stdout.suffix(5))")
        let machineBusy = r["machineBusy"] as? Double ?? 0
        print("a take under load (\(busy) busy loops at nice \(busyNice); the machine's CPUs \(Int(100 * machineBusy)) % busy): \(summary)")
        #expect(machineBusy >= 0.9, "the machine's CPUs were only \(Int(100 * machineBusy)) % busy over the take: it was not under load")
        #expect(summary.contains("accompaniment underruns 0,"), "\(summary)")
        let timing = try #require(stdout.first { $0.hasPrefix("cycle timing: ") }, "\(stdout.suffix(5))")
        print(timing)
        #expect(timing.contains("cycles blocked 0,") && timing.hasSuffix("faulted 0"), "\(timing)")
        // The CPU time of the longest cycle: under half the period (2.67 ms of 5.33).
        let cpu = timing.components(separatedBy: "CPU ").last?.components(separatedBy: "max ").last?.split(separator: " ").first.flatMap { Double($0) }
        #expect(cpu.map { $0 < 2_667 } == true, "\(timing)")
    }
}
