import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import LiveAudioStage
import Synchronization

struct Karaoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sing along to a song: accompaniment, voice chain, ear monitoring, live volumes, stems in sync.",
        discussion: """
            The song plays on --output while the voice from --input goes through the voice chain (--graph, \
            Examples/graphs/voice-chain.json by default) into the headphones. The recordings (--stems, --record) put the \
            voice where it was sung: shifted by the round trip, which --latency-ms gives, or a calibration click \
            measures (--latency-ms calibrate; the output must reach the input), or else the device reports. The song \
            goes to --record (WAV, or AAC in .m4a, .flv or .aac) and, encoded, to every --to: RTMP servers (the live \
            room) and files, its timestamps starting at its first sample. One status line a second; on a \
            terminal, a live screen instead: the song's progress, level meters, the volumes, the key, the round trip, \
            xruns and drops, and keys: a/A accompaniment -/+1 dB, v/V voice, m/M the voice in the headphones, k/K key \
            -/+1 semitone, 1/2 mute the accompaniment/the voice, space pause, q quit. q or Ctrl-C stops and \
            completes the files.
            """)

    @Argument(help: "The song (the accompaniment): any file FFmpeg reads; or an UltraStar chart (.txt), whose song is played and sung to.")
    var song: String

    @Option(help: "Lyrics to show with any song: an LRC file (or an UltraStar chart, whose notes are then scored).")
    var lyrics: String?

    @Option(help: "How close the voice must be to score, with a chart: easy, medium or hard.")
    var difficulty: SingingDifficulty = .medium

    @Option(help: "The part of a duet chart to sing: 1 (P1) or 2 (P2).")
    var part: Int = 1

    @Option(name: .customLong("score-file"), help: "Write the score as JSON to this file (with a chart).")
    var scoreFile: String?

    @Option(help: "The voice chain: a graph file with an input node (default: Examples/graphs/voice-chain.json when the current folder has it; otherwise the voice as it is).")
    var graph: String?

    @Option(help: "The microphone (for --backend virtual, the WAV file read as the microphone).")
    var input: String?

    @Option(help: "The headphones (for --backend virtual, the WAV file written as the speaker).")
    var output: String?

    @OptionGroup var options: DeviceOptions

    // Values that may be negative are taken whatever they look like (`--key -2`, `--voice-volume -6`).
    @Option(parsing: .unconditional, help: "Key change in semitones (e.g. 2, -1.5).")
    var key: Double = 0

    @Option(help: "Tempo (1: as it is; 0.9: 10 % slower).")
    var tempo: Double = 1

    @Option(help: "Where in the song to start, seconds.")
    var start: Double = 0

    @Option(help: "Where in the song to end, seconds (default: its end).")
    var end: Double?

    @Option(help: "How many more times to play the part (0: once).")
    var loop: Int = 0

    @Option(name: .customLong("accompaniment-volume"), parsing: .unconditional, help: "dB (-inf for none, at most 12).")
    var accompanimentVolume: String = "0"

    @Option(name: .customLong("voice-volume"), parsing: .unconditional, help: "dB in the recording (-inf for none, at most 12).")
    var voiceVolume: String = "0"

    @Option(name: .customLong("monitor-voice-volume"), parsing: .unconditional, help: "dB in the headphones (-inf for none, at most 12).")
    var monitorVoiceVolume: String = "0"

    @Option(
        help: ArgumentHelp(
            "Play the accompaniment at this integrated loudness (default -18 LUFS): the song is measured before it starts (once: kept in the user's cache folder) and its gain set; the volume keys move around it.",
            valueName: "=LUFS"))
    var normalize: String?

    @Flag(name: .customLong("voice-processing"), help: "Echo cancellation, noise suppression and gain control on the microphone.")
    var voiceProcessing = false

    @Option(help: "Record the song to this file: .wav, or AAC-LC in .m4a/.mp4, .flv or .aac (ADTS).")
    var record: String?

    @OptionGroup var destinations: EncodedOutputOptions

    @Option(help: "Record accompaniment.wav, voice-dry.wav, voice-wet.wav and song.wav into this folder.")
    var stems: String?

    @Option(name: .customLong("latency-ms"), help: "The round trip in ms, or 'calibrate' (default: what the device reports).")
    var latencyMs: String?

    @Option(help: "Seconds to run (default: until the song ends, q on the screen, or Ctrl-C).")
    var duration: Double?

    @Flag(name: .customLong("no-screen"), help: "On a terminal too, print a status line a second instead of the live screen.")
    var noScreen = false

    @Flag(help: "Time every cycle of the device thread; print render time, callback jitter, load and CPU time (p50/p99/max) at the end.")
    var timing = false

    @OptionGroup var stage: StageOptions

    func run() async throws {
        do throws(AudioError) {
            try validateDuration(duration)
            // A chart names its song (its #INSTRUMENTAL, else #AUDIO or #MP3); --lyrics shows words with any song.
            let chart: SongChart? =
                song.lowercased().hasSuffix(".txt") ? try SongChart.load(path: song) : try lyrics.map { path throws(AudioError) in try SongChart.load(path: path) }
            if song.lowercased().hasSuffix(".txt"), lyrics != nil {
                throw AudioError(.invalidParameter, "--lyrics is for a song without a chart: \(song) is a chart and has its own")
            }
            for warning in chart?.warnings ?? [] { StandardStream.error("liveaudio: warning: \(warning)\n") }
            guard (1...9).contains(part) else { throw AudioError(.invalidParameter, "--part must be 1 … 9, got \(part)") }
            if let chart, chart.hasNotes, chart.voice(part) == nil {
                throw AudioError(.invalidParameter, "--part \(part): the chart has \(chart.voices.map { "P\($0.number)" }.joined(separator: ", "))")
            }
            if scoreFile != nil, chart?.hasNotes != true {
                throw AudioError(.invalidParameter, "--score-file needs a chart with notes (an UltraStar .txt)")
            }
            let songPath = try chart.flatMap { c throws(AudioError) in song.lowercased().hasSuffix(".txt") ? try c.songPath() : nil } ?? song
            var c = KaraokeSession.Configuration(song: songPath)
            c.chart = chart
            c.part = part
            c.difficulty = difficulty
            c.voiceChain = graph ?? (FileManager.default.fileExists(atPath: "Examples/graphs/voice-chain.json") ? "Examples/graphs/voice-chain.json" : nil)
            c.backend = try options.parsedBackend()
            c.inputDevice = input
            c.outputDevice = output
            c.periodFrames = options.period ?? DeviceOptions.monitorBuffering.period
            c.periodCount = options.periods ?? DeviceOptions.monitorBuffering.periods
            c.jackServer = options.jackServer
            c.virtual = try options.virtualOptions()
            c.reconnect = options.reconnect
            c.reconnectTimeout = try validReconnectTimeout(options.reconnectTimeout)
            guard let clocks = DeviceClocks(rawValue: options.clocks) else {
                throw AudioError(.invalidParameter, "--clocks must be auto, one or two, got '\(options.clocks)'")
            }
            c.clocks = clocks
            guard (-24...24).contains(key) else { throw AudioError(.invalidParameter, "--key must be between -24 and 24 semitones, got \(key)") }
            guard (0.25...4).contains(tempo) else { throw AudioError(.invalidParameter, "--tempo must be between 0.25 and 4, got \(tempo)") }
            c.keyCents = key * 100
            c.tempo = tempo
            c.accompanimentVolume = try Self.decibels(accompanimentVolume, "--accompaniment-volume")
            c.accompanimentLoudness = try NormalizeOption.target(normalize, default: -18, ceiling: c.accompanimentTruePeak)
            c.voiceVolume = try Self.decibels(voiceVolume, "--voice-volume")
            c.monitorVoiceVolume = try Self.decibels(monitorVoiceVolume, "--monitor-voice-volume")
            c.voiceProcessing = voiceProcessing
            c.recordPath = record
            c.outputs = try destinations.parsedOutputs()
            c.bitRate = try destinations.parsedBitRate()
            // On the screen, the outputs' line says how each connection is; log lines would scroll it away.
            c.rtmp = try destinations.rtmpConfiguration(logLevel: Terminal.isInteractive && !noScreen ? .critical : .warning)
            c.stemsDirectory = stems
            let timingCapacity = CycleTimingLine.capacity(duration: duration, sampleRate: c.sampleRate)
            if timing { c.cycleTimingCapacity = timingCapacity }
            if let stems { try? FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true) }
            switch latencyMs {
            case nil: c.roundTrip = .device
            case "calibrate": c.roundTrip = .calibrate
            case let text?:
                guard let ms = Double(text), ms >= 0, ms <= 2000 else {
                    throw AudioError(.invalidParameter, "--latency-ms must be between 0 and 2000, or 'calibrate', got '\(text)'")
                }
                c.roundTrip = .milliseconds(ms)
            }
            guard start >= 0, end.map({ $0 > start }) ?? true, loop >= 0 else {
                throw AudioError(.invalidParameter, "--start must be 0 or more, --end after it, --loop 0 or more")
            }
            let interactive = Terminal.isInteractive && !noScreen
            let stageConfiguration = try stage.configuration()
            // On the screen and the stage the key may change while singing: the time-pitch is always in.
            c.keyAdjustable = interactive || stageConfiguration != nil
            // In seconds: the session converts them at its rate (the voice chain's, read once, by the session).
            c.regionInSeconds = KaraokeSession.RegionInSeconds(start: start, end: end, loopCount: loop)
            let session = try KaraokeSession(c)
            let lastEvent = EventLine()
            let events = interactive ? lastEvent.follow(session.deviceEvents) : printEvents(session.deviceEvents)
            let stop = StopFlag()
            // A signal stops the session at once, a start in progress too (a calibration, a server that does not
            // answer); the loops below then find the flag and collect the summary.
            let signals = StopSignals {
                stop.set()
                Task { _ = await session.stop() }
            }
            do throws(AudioError) {
                try await session.start()
            } catch where stop.isSet {
                events.cancel()
                withExtendedLifetime(signals) {}
                note("karaoke: stopped before the song started: nothing was recorded")
                return
            }
            let deviceRate = session.deviceGrant?.sampleRate ?? session.sampleRate
            if let n = session.accompanimentNormalization {
                note("karaoke: " + NormalizeOption.describe(n))
            }
            note("karaoke: \(session.deviceGrant.map { "\($0)" } ?? "") ; round trip \(String(cFormat: "%.2f", Double(session.roundTripFrames) * 1000 / session.sampleRate)) ms (\(session.roundTripSource)\(session.calibrations > 1 ? ", \(session.calibrations) calibrations: an xrun, a lost click or clicks apart in the first" : ""))")
            let bound = ClockBound(duration: duration, grace: 0)
            let title = chart.map { [$0.artist, $0.title].filter { !$0.isEmpty }.joined(separator: " – ") } ?? FilePath.lastComponent(song)
            // One reader of the session's state for every display: the screen, the status line, the stage.
            let monitor = SnapshotMonitor { session.snapshot() }
            defer { monitor.stop() }
            var stageServer: StageServer<KaraokeStagePresenter>?
            if let stageConfiguration {
                do throws(AudioError) {
                    let presenter = KaraokeStagePresenter(
                        session: session, title: chart.map(\.title).flatMap { $0.isEmpty ? nil : $0 } ?? FilePath.lastComponent(song),
                        artist: chart?.artist ?? "")
                    stageServer = try await StageServer.start(stageConfiguration, presenter: presenter, monitor: monitor)
                    note("karaoke: the stage is at \(stageServer!.url)")
                } catch {
                    _ = await session.stop()
                    throw error
                }
            }
            if interactive {
                let terminal = Terminal()
                terminal.enterRawMode()
                // Ctrl-Z would leave the terminal without echo behind a stopped screen: it does nothing here.
                signal(SIGTSTP, SIG_IGN)
                defer {
                    signal(SIGTSTP, SIG_DFL)
                    terminal.restore()
                }
                let screen = KaraokeScreen(session: session, title: title)
                var message: String?
                keys: while !stop.isSet, !bound.hasPassed, !session.songHasEnded, !session.isStopRequested, session.failure == nil {
                    for key in terminal.readKeys() {
                        if key == UInt8(ascii: "q") || key == UInt8(ascii: "Q") { break keys }
                        message = screen.handle(key)
                        if message == nil { monitor.refresh() }
                    }
                    terminal.draw(screen.lines(monitor.latest, event: lastEvent.text, note: message))
                    try? await Task.sleep(nanoseconds: 100_000_000)
                }
            }
            var lastLine = monotonicNanoseconds()
            // Off a terminal, with a chart: each lyric line as it starts, each line's score as it ends.
            var shownLine = -1
            var ratedLines = 0
            while !interactive, !stop.isSet, !bound.hasPassed, !session.songHasEnded, !session.isStopRequested, session.failure == nil {
                try? await Task.sleep(nanoseconds: 50_000_000)
                if let s = session.singAlong {
                    if let index = s.lineIndex, let line = s.line, index > shownLine, line.start <= s.position {
                        shownLine = index
                        StandardStream.output(String(cFormat: "%7.2f s  ", line.start) + "♪ " + line.text + "\n")
                    }
                    let rated = s.score?.lines ?? []
                    while ratedLines < rated.count {
                        StandardStream.output("         " + ScoreReport.line(rated[ratedLines]) + "\n")
                        ratedLines += 1
                    }
                }
                if monotonicNanoseconds() - lastLine >= 1_000_000_000 {
                    lastLine = monotonicNanoseconds()
                    let s = monitor.latest
                    let line = String(
                        cFormat: "%.1f / %.1f s  voice %.1f dB  accompaniment %.1f dB  output %.1f dB  round trip %.2f ms",
                        s.position, Double(session.player.fileFrames) / session.sampleRate,
                        s.voice.peak ?? -.infinity, s.accompaniment.peak ?? -.infinity, s.output.peak ?? -.infinity,
                        s.roundTripMilliseconds) + "  xruns \(s.xruns)  \(s.loudness.statusText)"
                    let outputs = s.outputs.map { " | \($0)" }.joined()
                    StandardStream.output(line + outputs + "\n")
                }
            }
            // The stage shows the end, then closes; the session stops after it (its files complete).
            monitor.refresh()
            if let stageServer {
                await stageServer.stop()
                note("karaoke: the stage served \(stageServer.pagesServed) pages; \(stageServer.droppedSlowClients) were disconnected for not reading")
            }
            let summary = await session.stop()
            withExtendedLifetime(signals) {}
            events.cancel()
            print(
                "karaoke: \(String(cFormat: "%.2f", summary.seconds)) s; round trip \(summary.roundTripFrames) frames "
                    + "(\(summary.roundTripSource)); xruns \(summary.xruns), accompaniment underruns "
                    + "\(summary.accompanimentUnderruns), recorded \(summary.recordedFrames) frames, dropped \(summary.droppedFrames)")
            print("karaoke: the song's loudness: \(summary.loudness.summaryText)")
            for output in summary.outputs { print("  \(output)") }
            if let score = summary.score, let chart {
                // The lines that ended after the last look (off a terminal).
                if !interactive {
                    for line in score.lines.dropFirst(ratedLines) { StandardStream.output("         " + ScoreReport.line(line) + "\n") }
                }
                print("karaoke: " + ScoreReport.summary(score, title: chart.title, artist: chart.artist, difficulty: difficulty))
                if let scoreFile {
                    try ScoreReport.write(
                        score.json(difficulty: difficulty, roundTripSeconds: Double(summary.roundTripFrames) / session.sampleRate), to: scoreFile)
                }
            }
            if timing { CycleTimingLine.print(session.cycleTimings, sampleRate: deviceRate, capacity: timingCapacity) }
            if let error = summary.error { throw error }
            for output in summary.outputs {
                if let r = output.rtmp, r.state == .failed {
                    throw r.lastError ?? AudioError(.connectionLost, "\(output.output) failed")
                }
            }
        } catch {
            throw fail(error)
        }
    }

    static func decibels(_ text: String, _ option: String) throws(AudioError) -> Double {
        if text == "-inf" { return -.infinity }
        guard let v = Double(text), v.isFinite, v <= 12, v >= -96 else {
            throw AudioError(.invalidParameter, "\(option) must be a level in dB between -96 and 12, or -inf, got '\(text)'")
        }
        return v
    }
}

/// The last device event, for the screen (it would scroll the screen away on standard error).
final class EventLine: Sendable {
    private let last = Locked<String>("")

    var text: String { last.withLock { $0 } }

    func follow(_ events: AsyncStream<DeviceEvent>) -> Task<Void, Never> {
        Task.detached { [self] in
            for await event in events {
                if case .started = event { continue }
                self.last.withLock { $0 = event.description }
            }
        }
    }
}
