import Foundation
import LiveAudio
import Testing
import TestSupport

/// The karaoke session in this process through PulseAudio (ALSA's pulse plugin): a null sink is the headphones and
/// its monitor the microphone, the loop a singer would close. A suite of its own, serialized, since each test points
/// this process at its own server (`exportToThisProcess`); it runs beside ``KaraokeSessionTests``, whose sessions are
/// on JACK and the virtual device.
@Suite(.serialized) struct KaraokePulseAudioTests {
    /// The sync rule through PulseAudio at 128, 256 and 1024 frames: the headphones are a null sink and the
    /// microphone is that sink's monitor (ALSA's pulse plugin both ways), the voice left out of the headphones; the
    /// dry-voice stem — the accompaniment heard back through the loop — lines up with the accompaniment stem within
    /// ±96 frames (2 ms), the round trip found by calibration clicks on the same device.
    @Test(arguments: [128, 256, 1024]) func theVoiceLandsWhereItWasSungOnPulseAudio(period: Int) async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = KaraokeSession.Configuration(song: try KaraokeSessionTests.song(dir))
        configuration.backend = .alsa
        configuration.inputDevice = "pulse:spk.monitor"
        configuration.outputDevice = "pulse:spk"
        configuration.periodFrames = period
        configuration.periodCount = max(2, 4096 / period)
        configuration.monitorVoiceVolume = -.infinity
        configuration.roundTrip = .calibrate
        let stems = dir.file("stems")
        try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
        configuration.stemsDirectory = stems
        let session = try KaraokeSession(configuration)
        try await session.start()
        let calibrations = session.calibrations
        try await offPool {
            let deadline = Date().addingTimeInterval(40)
            while !session.songHasEnded, Date() < deadline { usleep(10_000) }
        }
        let summary = await session.stop()
        print("karaoke on PulseAudio at \(period): \(summary)")
        #expect(summary.error == nil && summary.droppedFrames == 0, "\(summary)")
        #expect(summary.roundTripSource == "calibration", "\(summary)")
        let accompaniment = try FFmpeg.decode(stems + "/accompaniment.wav", channels: 2)[0]
        let dry = try FFmpeg.decode(stems + "/voice-dry.wav", channels: 1)[0]
        let lag = try #require(SignalCheck.lag(of: Array(accompaniment.prefix(6 * 48_000)), in: dry, window: 48_000, search: 9600))
        print("karaoke on PulseAudio at \(period): the voice \(lag) frames off, round trip \(summary.roundTripFrames) frames, xruns \(summary.xruns), \(calibrations) calibrations")
        #expect((1...3).contains(calibrations))
        #expect(abs(lag) <= 96, "the voice is \(lag) frames off the accompaniment (round trip \(summary.roundTripFrames) frames)")
    }

    /// Voice processing in the session, referenced to the accompaniment bus: through PulseAudio the accompaniment
    /// is played into the null sink "spk" and the microphone is that sink's monitor — the echo path: everything
    /// played comes back, at the server's latency — and nothing is sung. The dry-voice stem (the microphone after
    /// the capture processing) carries the accompaniment at its level with voice processing off (within 6 dB: the
    /// path is real) and at least 20 dB lower with it on, from the fourth second to the ninth.
    @Test func voiceProcessingTakesTheSongOutOfTheVoice() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let music = SignalCheck.music(seconds: 10, seed: 7)
        try writeWAV(dir.file("song.wav"), channels: [music, music])
        func dryVoicePower(processing: Bool) async throws -> Double {
            let stems = dir.file(processing ? "on" : "off")
            try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
            var configuration = KaraokeSession.Configuration(song: dir.file("song.wav"))
            configuration.backend = .alsa
            configuration.inputDevice = "pulse:spk.monitor"
            configuration.outputDevice = "pulse:spk"
            configuration.periodFrames = 480
            configuration.periodCount = 4
            configuration.voiceProcessing = processing
            configuration.monitorVoiceVolume = -.infinity
            configuration.roundTrip = .milliseconds(0)
            configuration.stemsDirectory = stems
            let session = try KaraokeSession(configuration)
            try await session.start()
            try await offPool {
                let deadline = Date().addingTimeInterval(40)
                while !session.songHasEnded, Date() < deadline { usleep(10_000) }
            }
            let summary = await session.stop()
            #expect(summary.error == nil, "\(summary)")
            let dry = try FFmpeg.decode(stems + "/voice-dry.wav", channels: 1)[0]
            try #require(dry.count >= 9 * 48_000, "\(dry.count) frames")
            return KaraokeSessionTests.power(dry[(4 * 48_000)..<(9 * 48_000)])
        }
        let off = try await dryVoicePower(processing: false)
        let on = try await dryVoicePower(processing: true)
        let played = KaraokeSessionTests.power(music[(4 * 48_000)..<(9 * 48_000)])
        let reduction = 10 * log10(off / max(on, 1e-20))
        print("voice processing in the session: the accompaniment in the voice \(10 * log10(off / played)) dB off, \(reduction) dB less on")
        #expect(abs(10 * log10(off / played)) <= 6, "without voice processing the voice carries the song at \(10 * log10(off / played)) dB")
        #expect(reduction >= 20, "voice processing took the song down \(reduction) dB in the voice")
    }

    /// Live through a PulseAudio loop: the song is the chart's melody sung (a generated singer on time), it goes out to
    /// a null sink whose monitor is the microphone, so the voice the session hears is the melody one round trip late
    /// (calibrated). The live score takes the round trip off — in tune on `hard` — and agrees with the offline score
    /// of the recorded dry stem within 1 %.
    @Test func aChartScoresTheSameLiveThroughAPulseAudioLoop() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var text = "#TITLE:Loop\n#ARTIST:Tests\n#MP3:song.wav\n#BPM:240\n#GAP:1000\n"
        var beat = 0
        for line in 0..<3 {
            for n in 0..<5 {
                text += ": \(beat) 6 \([0, 4, 7, 5, 2, -3, 0, 9][(line + n) % 8]) la\n"
                beat += 8
            }
            text += "- \(beat)\n"
            beat += 4
        }
        try text.write(toFile: dir.file("chart.txt"), atomically: true, encoding: .utf8)
        let chart = try SongChart.load(path: dir.file("chart.txt"))
        let melody = GeneratedSinger(chart: chart, snr: 40)
        try writeWAV(dir.file("song.wav"), channels: [melody.samples, melody.samples])
        var configuration = KaraokeSession.Configuration(song: dir.file("song.wav"))
        configuration.backend = .alsa
        configuration.inputDevice = "pulse:spk.monitor"
        configuration.outputDevice = "pulse:spk"
        configuration.periodFrames = 256
        configuration.periodCount = 16
        configuration.monitorVoiceVolume = -.infinity
        configuration.roundTrip = .calibrate
        configuration.chart = chart
        configuration.difficulty = .hard
        let stems = dir.file("stems")
        try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
        configuration.stemsDirectory = stems
        let session = try KaraokeSession(configuration)
        try await session.start()
        try await offPool {
            let deadline = Date().addingTimeInterval(40)
            while !session.songHasEnded, Date() < deadline { usleep(10_000) }
        }
        let summary = await session.stop()
        #expect(summary.error == nil && summary.roundTripSource == "calibration", "\(summary)")
        let live = try #require(summary.score)
        let offline = try TakeScoring.score(take: stems + "/voice-dry.wav", chart: chart, difficulty: .hard)
        print("karaoke with a chart on PulseAudio: live \(live.total), the dry stem \(offline.total), round trip \(summary.roundTripFrames) frames")
        // In tune through the loop — as long as the loop held the latency the calibration measured (an xrun may move
        // it); the agreement with the dry stem holds either way.
        if summary.xruns == 0 { #expect(live.total >= 9_000, "in tune through the loop: \(live.total)") }
        #expect(abs(Double(live.total - offline.total)) <= 0.01 * Double(live.total), "live \(live.total), the dry stem \(offline.total)")
    }
}
