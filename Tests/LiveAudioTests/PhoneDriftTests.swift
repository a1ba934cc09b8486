import Foundation
import Testing
import TestSupport

/// A phone singing for five minutes with a clock that runs fast, as ``PhoneFaultTests`` runs its pages (headless
/// Chromium, a generated singer, the room on the virtual device). A suite of its own: `make test` runs it beside the
/// other phones' suites, the evening, the calibration, the soak and the PipeWire tests, one after the other
/// (scripts/run-tests.sh).
@Suite struct PhoneDriftTests {
    /// A phone whose clock runs fast: the page's clock (performance.now, and the times its audio context pairs with
    /// it) made to run `PHONE_DRIFT_PPM` (default 200) ppm fast over a take of `PHONE_DRIFT_SECONDS` (default 300):
    /// 60 ms of drift over five minutes. The room follows it: every second of the dry stem (a 100 ms window) placed
    /// within ±10 ms of where the timestamps say, first minute and last alike, and the drift it reports within a
    /// quarter of the truth.
    @Test func aFastPhoneClockIsFollowed() async throws {
        let environment = ProcessInfo.processInfo.environment
        let ppm = Double(environment["PHONE_DRIFT_PPM"] ?? "") ?? 200
        let seconds = Double(environment["PHONE_DRIFT_SECONDS"] ?? "") ?? 300
        var text = "#TITLE:Phone drift\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:240\n#GAP:500\n"
        for n in 0..<Int(seconds * 2 - 2) { text += ": \(n * 8) 6 \([0, 2, 4, 5, 7, 5, 4, 2][n % 8]) la\n" }
        text += "E\n"
        let started = Date()
        let run = try await PhoneFaultTests.run(
            parts: [1], options: ["--clock-ppm", String(ppm)], chart: text, songSeconds: seconds + 2)
        let ran = Date()
        defer { run.dir.remove() }
        try PhoneFaultTests.checkRan(run)
        let status = (run.pages.first?["mic"] as? [String: Any])?["status"] as? [String: Any] ?? [:]
        print("phone drift (\(ppm) ppm fast, \(seconds) s): \(status)")
        #expect((status["late"] as? Int) == 0 && (status["holes"] as? Int) == 0, "\(status)")
        let drift = status["clockDriftPPM"] as? Double ?? .nan
        #expect(abs(drift - ppm) <= 0.25 * ppm, "the room says the phone's clock drifts \(drift) ppm; it runs \(ppm) ppm fast")
        let stem = try FFmpeg.decode(run.dir.file("stems/02/voice-2-dry.wav"), channels: 1)[0]
        let (lags, correlations) = PhoneMicTests.windows(stem: stem, singer: run.singers[0], every: 48_000)
        let third = lags.count / 3
        print("phone drift: the room's run took \(Int(ran.timeIntervalSince(started))) s (its singer made, the browser, the take), the stem's windows \(Int(Date().timeIntervalSince(ran))) s")
        print("phone drift: \(lags.count) windows; lags in the first third \(lags.prefix(third).min() ?? 0) … \(lags.prefix(third).max() ?? 0), in the last \(lags.suffix(third).min() ?? 0) … \(lags.suffix(third).max() ?? 0) frames")
        #expect(Double(lags.count) >= seconds * 0.8, "\(lags.count) windows of singing")
        #expect(lags.allSatisfy { abs($0) <= 480 }, "placed \(lags.map { Double($0) / 48 }) ms from where its timestamps say")
        #expect(correlations.sorted()[correlations.count / 2] >= 0.95, "\(correlations)")
    }
}
