import Foundation
import LiveAudio
import Testing
import TestSupport

/// The calibration end to end, with a real browser hearing the room through PulseAudio — in `make test`'s last phase,
/// beside the phone whose clock runs fast. (It failed one run in two or three while the room laid the page's packets each at its own stamp:
/// the stamps wander by a fraction of a millisecond, which tore the chirps; see ``PhoneCalibration``.)
@Suite struct PhoneRoomCalibrationTests {
    /// The calibration end to end, with a phone that hears the room: the room on PulseAudio plays into the null
    /// sink "spk", and the page's microphone is that sink as a source (a remap of its monitor: Chromium lists no
    /// monitors) — the air between the room's speaker and the phone, with PulseAudio's and Chromium's own buffering in
    /// it, none of it known to the test. The page taps to sing during the first song; two seconds on, the room plays
    /// its chirps and finds the phone's offset in what the page sends back. The second song (noise in bursts) then
    /// plays, and the phone's dry stem is the song as the page heard it: placed by the offset the room measured, it
    /// lines up with the song's own stem within ±10 ms, every quarter of a second (through PCM: noise through Opus at
    /// 48 kbit/s keeps its envelope, not its waveform, and correlates at about 0.6 where it is placed).
    ///
    /// ±10 ms is the bound the issue sets a phone's placing. The offset alone, found from a recording with a known
    /// delay, is held to ±5 ms in ``PhoneCalibrationTests``; here the browser's own path moves under load after the
    /// chirps: 4 … 6 ms early beside the soak and the other tests, −2 … +1.6 ms alone.
    @Test func aPhoneThatHearsTheRoomIsCalibrated() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk", "mic"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("spk")
        for arguments in [["load-module", "module-remap-source", "source_name=phone", "master=spk.monitor"], ["set-default-source", "phone"]] {
            let r = try runProcess("pactl", arguments, environment: pulse.environment)
            try #require(r.status == 0, "pactl \(arguments): \(r.stderr)")
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var recorders: [ChildProcess] = []
        // What the room played and what the phone's microphone gave, kept with the run's files (PHONE_KEEP): the
        // chirps' spacing in each tells the room's output and PulseAudio from the page and the room's placing.
        if let keep = ProcessInfo.processInfo.environment["PHONE_KEEP"] {
            recorders.append(try pulse.record("spk", to: keep + "-spk.wav"))
            recorders.append(try pulse.record(source: "phone", channels: 1, to: keep + "-phone.wav"))
        }
        try writeWAV(dir.file("wait.wav"), channels: [[Float](repeating: 0, count: Int(PhoneMicTests.wait * 48_000))], sampleType: .int16)
        // Noise in bursts of random length (50 … 300 ms) and level (−30 … −10 dBFS), a few silent, below about 3 kHz
        // (a moving sum of 8: full-band noise would not correlate with itself a fraction of a frame off): 12 s.
        var rng = SplitMix64(seed: 7)
        var noise: [Float] = []
        while noise.count < 12 * 48_000 {
            let n = Int.random(in: 2_400...14_400, using: &rng)
            let level = Float.random(in: 0...1, using: &rng) < 0.15 ? 0 : Float(pow(10, Double.random(in: -30 ... -10, using: &rng) / 20))
            for _ in 0..<n { noise.append(level * Float.random(in: -1...1, using: &rng)) }
        }
        let song = noise.indices.map { i in noise[max(0, i - 7)...i].reduce(0, +) / 3 }
        try writeWAV(dir.file("song.wav"), channels: [song, song], sampleType: .int16)
        let command = [
            productsDirectory + "/liveaudio", "karaoke", "wait.wav", "song.wav", "--gap", String(PhoneMicTests.gap), "--phones", "1",
            "--web", "127.0.0.2:0", "--backend", "alsa", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--stems", "stems",
            // PulseAudio's period, deep: at 256 × 2 beside the browser the room ran late (xruns move its timeline).
            "--period", "1024", "--periods", "4", "--no-screen",
        ]
        let process = try await runTool(
            StageTests.python,
            [StageTests.repository + "/Tests/Support/stage/stage_mic.py", "--out", dir.file("results.json"), "--cwd", dir.path,
             "--singer", "-", "--hear-room", "--pcm", "--lead", "0", "--take-start", String(PhoneMicTests.wait + PhoneMicTests.gap), "--click-at", "2", "--"]
                + command,
            environment: pulse.environment.merging(["XDG_DATA_HOME": dir.file("data")]) { $1 })
        for r in recorders { r.stop(signal: SIGINT) }
        if let keep = ProcessInfo.processInfo.environment["PHONE_KEEP"] {
            try? FileManager.default.removeItem(atPath: keep + "-room")
            try? FileManager.default.copyItem(atPath: dir.path, toPath: keep + "-room")
        }
        let r = try StageTests.results(dir.file("results.json"))
        let errors = r["errors"] as? [String] ?? []
        #expect(errors.isEmpty, "\(errors)\n\(process.stderr)\n\((r["stderr"] as? [String] ?? []).suffix(20).joined(separator: "\n"))")
        try #require(errors.isEmpty)
        let page = (r["pages"] as? [[String: Any]])?.first ?? [:]
        let offset = page["offset"] as? Double
        print("a phone that hears the room: calibrated to \(offset.map { String(format: "%.1f ms", $0 * 1000) } ?? "-") (\(page["calibrationNote"] ?? "")), \(page["codec"] ?? "-")")
        try #require(offset != nil, "the room's calibration: \(page)")
        let stem = try FFmpeg.decode(dir.file("stems/02/voice-2-dry.wav"), channels: 1)[0]
        let played = try FFmpeg.decode(dir.file("stems/02/accompaniment.wav"), channels: 2)[0]
        let (lags, correlations) = PhoneMicTests.windows(stem: stem, singer: played)
        let median = correlations.isEmpty ? 0 : correlations.sorted()[correlations.count / 2]
        print("a phone that hears the room: \(lags.count) windows, lags \(lags.min() ?? 0) … \(lags.max() ?? 0) frames, correlation median \(median)")
        #expect(lags.count >= 30 && lags.allSatisfy { abs($0) <= 480 }, "the song in the phone's stem, against its own: \(lags.map { Double($0) / 48 }) ms")
        #expect(median >= 0.9, "\(correlations)")
    }

}
