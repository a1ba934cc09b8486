import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import LiveAudioStage
import SongLibrary
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

    @Argument(help: "The songs, played in order in one room: each any file FFmpeg reads, or an UltraStar chart (.txt), whose song is played and sung to.")
    var songs: [String] = []

    @Option(
        name: .customLong("library"),
        help: "Play the evening's queue from this song library folder (repeat for several; scanned first, only what changed), filled from phones on the stage: needs --web. See docs/library.md.")
    var library: [String] = []

    @Option(name: .customLong("db"), help: "With --library, the library's SQLite file (default: $XDG_DATA_HOME/liveaudio/library.sqlite).")
    var database: String?

    @Option(name: .customLong("queue-cap"), help: "With --library, the songs each singer may have waiting (1 … 50; default: the library's, 3 at first).")
    var queueCap: Int?

    @Option(help: "Seconds between two songs: the room plays on (the voice, the stream) meanwhile.")
    var gap: Double = 5

    @Option(help: "An audio file looped between songs (fading in after a song, out by the next song's start); default: silence.")
    var interlude: String?

    @Option(name: .customLong("interlude-volume"), parsing: .unconditional, help: "The interlude's level in dB (-inf for none, at most 12; default -12).")
    var interludeVolume: String = "-12"

    @Option(help: "Lyrics to show with any song: an LRC file (or an UltraStar chart, whose notes are then scored).")
    var lyrics: String?

    @Option(help: "How close the voice must be to score, with a chart: easy, medium or hard.")
    var difficulty: SingingDifficulty = .medium

    @Option(help: "The part of a duet chart to sing: 1 (P1) or 2 (P2).")
    var part: Int = 1

    @Option(help: "Voices: the first N channels of the input device (of the WAV file with --backend virtual), one singer each, with a copy of the voice chain, stems and a score of their own (1 … 8).")
    var voices: Int = 1

    @Option(help: "Phone voices: phones that sing into the room over the stage (--web), each a voice after the wired ones with its chain, stems and score (0 … 8; wired and phones at most 8 in all).")
    var phones: Int = 0

    @Option(name: .customLong("phone-delay"), help: "With --phones: seconds the song mix, recording and stream wait for the phones' audio (0.1 … 1.5; default 0.6).")
    var phoneDelay: Double = 0.6

    @Flag(name: .customLong("phones-in-output"), help: "With --phones: the phones' voices in the room's output too (off by default: they arrive --phone-delay late).")
    var phonesInOutput = false

    @Option(help: "With several voices, the part each sings, in voice order — the wired ones, then the phones (e.g. 2,1; default: voice N sings PN when the chart has it, else --part).")
    var parts: String?

    @Option(name: .customLong("score-file"), help: "Write the score as JSON to this file (with a chart).")
    var scoreFile: String?

    @Option(help: "The voice chain: a graph file with an input node (default: Examples/graphs/voice-chain.json when the current folder has it; otherwise the voice as it is).")
    var graph: String?

    @Option(help: "The microphone (for --backend virtual, the WAV file read as the microphone).")
    var input: String?

    @Option(
        name: .customLong("input-start"),
        help: "With --backend virtual, where the microphone file starts: song (default: its frame 0 is sung to the first song's frame 0, as a take recorded to the song) or device (with the device, half a second and any calibration before the song).")
    var inputStart: String = "song"

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
        name: .customLong("off-headphones"),
        help: ArgumentHelp(
            "When the output moves from headphones to something that is not (PipeWire says which): mute-voice takes the voice out of it, the accompaniment plays on, until headphones are back; keep-voice leaves it.",
            valueName: "mute-voice|keep-voice"))
    var offHeadphones: String = KaraokeRoom.OffHeadphones.muteVoice.rawValue

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

    @Option(help: "Record accompaniment.wav, voice-dry.wav, voice-wet.wav and song.wav into this folder (with several songs, into a numbered folder in it for each: 01, 02, ...).")
    var stems: String?

    @Option(name: .customLong("latency-ms"), help: "The round trip in ms, or 'calibrate' (default: what the device reports).")
    var latencyMs: String?

    @Option(help: "Seconds to run (default: until the last song ends, q on the screen, or Ctrl-C).")
    var duration: Double?

    @Flag(name: .customLong("no-screen"), help: "On a terminal too, print a status line a second instead of the live screen.")
    var noScreen = false

    @Flag(help: "Time every cycle of the device thread; print render time, callback jitter, load and CPU time (p50/p99/max) at the end.")
    var timing = false

    @OptionGroup var stage: StageOptions

    func run() async throws {
        do throws(AudioError) {
            if !library.isEmpty { return try await runLibrary() }
            let plans = try songPlans()
            try validateDuration(duration)
            guard gap.isFinite, (0...3600).contains(gap) else {
                throw AudioError(.invalidParameter, "--gap must be between 0 and 3600 seconds, got \(gap)")
            }
            guard (1...9).contains(part) else { throw AudioError(.invalidParameter, "--part must be 1 … 9, got \(part)") }
            guard (-24...24).contains(key) else { throw AudioError(.invalidParameter, "--key must be between -24 and 24 semitones, got \(key)") }
            guard (0.25...4).contains(tempo) else { throw AudioError(.invalidParameter, "--tempo must be between 0.25 and 4, got \(tempo)") }
            guard start >= 0, end.map({ $0 > start }) ?? true, loop >= 0 else {
                throw AudioError(.invalidParameter, "--start must be 0 or more, --end after it, --loop 0 or more")
            }
            if scoreFile != nil, !plans.contains(where: { (try? $0.get().chart?.hasNotes) == true }) {
                throw AudioError(.invalidParameter, "--score-file needs a chart with notes (an UltraStar .txt)")
            }
            _ = try parsedParts()  // a bad --parts is the command's error, not every song's
            let interactive = Terminal.isInteractive && !noScreen
            let stageConfiguration = try stage.configuration()
            let room = try KaraokeRoom(try roomConfiguration(interactive: interactive))
            let evening = KaraokeEvening(
                command: self, room: room, plans: plans, interactive: interactive, stageConfiguration: stageConfiguration)
            try await evening.run()
        } catch {
            throw fail(error)
        }
    }

    /// `--library`: the evening's queue from phones. The library opened to write (a second evening on it is
    /// refused), its folders scanned, the evening resumed; the stage always has a host token (on loopback too, so the
    /// phones, which get the join address's token, are not hosts).
    func runLibrary() async throws(AudioError) {
        guard songs.isEmpty else {
            throw AudioError(.invalidParameter, "--library plays the queue the phones fill: give no songs on the command line with it")
        }
        guard var stageConfiguration = try stage.configuration() else {
            throw AudioError(.invalidParameter, "--library needs --web [HOST:]PORT: the queue is filled from phones on the stage")
        }
        try validateDuration(duration)
        guard gap.isFinite, (0...3600).contains(gap) else {
            throw AudioError(.invalidParameter, "--gap must be between 0 and 3600 seconds, got \(gap)")
        }
        if stageConfiguration.token == nil { stageConfiguration.token = StageConfiguration.randomToken() }
        let path = database ?? SongLibrary.defaultPath(environment: ProcessInfo.processInfo.environment)
        let store = try SongLibrary(path: path, access: .writer)
        stageConfiguration.guestToken = try store.guestToken { StageConfiguration.randomToken() }
        let report = try store.scan(library)
        for problem in report.broken { note("karaoke: library: broken: \(problem.path): \(problem.reason)") }
        for problem in report.skipped { note("karaoke: library: skipped: \(problem.path): \(problem.reason)") }
        note("karaoke: library \(path): \(try store.count()) songs (\(report.added) added, \(report.updated) updated, \(report.removed) removed)")
        if let queueCap { try store.setQueueCap(queueCap) }
        try store.resumeEvening()
        let room = try KaraokeRoom(try roomConfiguration(interactive: false))
        try await LibraryEvening(command: self, room: room, library: store, stageConfiguration: stageConfiguration).run()
    }

    /// Each song argument as a plan: its chart read (a failure kept for its turn, so the others still play — but a
    /// single song's is thrown at once), its audio, its title.
    func songPlans() throws(AudioError) -> [Result<SongPlan, AudioError>] {
        guard !songs.isEmpty else { throw AudioError(.invalidParameter, "karaoke needs a song: liveaudio karaoke SONG...") }
        if lyrics != nil, songs.count > 1 {
            throw AudioError(.invalidParameter, "--lyrics is for one song; give several songs as UltraStar charts (.txt) for their words")
        }
        var plans: [Result<SongPlan, AudioError>] = []
        for (i, song) in songs.enumerated() {
            let plan = Result { () throws(AudioError) in try SongPlan(song, number: i + 1, lyrics: lyrics, part: voices == 1 && parts == nil ? part : nil) }
            if songs.count == 1, case .failure(let error) = plan { throw error }
            plans.append(plan)
        }
        return plans
    }

    /// The room's settings from the options.
    func roomConfiguration(interactive: Bool) throws(AudioError) -> KaraokeRoom.Configuration {
        var c = KaraokeRoom.Configuration()
        c.voiceChain = graph ?? (FileManager.default.fileExists(atPath: "Examples/graphs/voice-chain.json") ? "Examples/graphs/voice-chain.json" : nil)
        c.backend = try options.parsedBackend()
        c.inputDevice = input
        c.outputDevice = output
        c.periodFrames = options.period ?? DeviceOptions.monitorBuffering.period
        c.periodCount = options.periods ?? DeviceOptions.monitorBuffering.periods
        c.jackServer = options.jackServer
        c.virtual = try options.virtualOptions()
        switch inputStart {
        case "song": c.virtual.capturesFromStartTime = true
        case "device": c.virtual.capturesFromStartTime = false
        default: throw AudioError(.invalidParameter, "--input-start must be song or device, got '\(inputStart)'")
        }
        c.reconnect = options.reconnect
        c.reconnectTimeout = try validReconnectTimeout(options.reconnectTimeout)
        guard let clocks = DeviceClocks(rawValue: options.clocks) else {
            throw AudioError(.invalidParameter, "--clocks must be auto, one or two, got '\(options.clocks)'")
        }
        c.clocks = clocks
        guard (1...KaraokeRoom.Configuration.maximumVoices).contains(voices) else {
            throw AudioError(.invalidParameter, "--voices must be 1 … \(KaraokeRoom.Configuration.maximumVoices), got \(voices)")
        }
        c.voiceCount = voices
        guard (0...KaraokeRoom.Configuration.maximumVoices).contains(phones) else {
            throw AudioError(.invalidParameter, "--phones must be 0 … \(KaraokeRoom.Configuration.maximumVoices), got \(phones)")
        }
        if phones > 0, stage.web == nil { throw AudioError(.invalidParameter, "--phones needs --web: phones sing through the stage") }
        c.phoneVoices = phones
        c.phoneDelay = phoneDelay
        c.phoneVoicesInOutput = phonesInOutput
        c.accompanimentVolume = try Self.decibels(accompanimentVolume, "--accompaniment-volume")
        c.interlude = interlude
        c.interludeVolume = try Self.decibels(interludeVolume, "--interlude-volume")
        c.voiceVolume = try Self.decibels(voiceVolume, "--voice-volume")
        c.monitorVoiceVolume = try Self.decibels(monitorVoiceVolume, "--monitor-voice-volume")
        guard let policy = KaraokeRoom.OffHeadphones(rawValue: offHeadphones) else {
            throw AudioError(.invalidParameter, "--off-headphones must be mute-voice or keep-voice, got '\(offHeadphones)'")
        }
        c.offHeadphones = policy
        c.voiceProcessing = voiceProcessing
        c.recordPath = record
        c.outputs = try destinations.parsedOutputs()
        c.bitRate = try destinations.parsedBitRate()
        // On the screen, the outputs' line says how each connection is; log lines would scroll it away.
        c.rtmp = try destinations.rtmpConfiguration(logLevel: interactive ? .critical : .warning)
        if timing { c.cycleTimingCapacity = CycleTimingLine.capacity(duration: duration, sampleRate: c.sampleRate) }
        switch latencyMs {
        case nil: c.roundTrip = .device
        case "calibrate": c.roundTrip = .calibrate
        case let text?:
            guard let ms = Double(text), ms >= 0, ms <= 2000 else {
                throw AudioError(.invalidParameter, "--latency-ms must be between 0 and 2000, or 'calibrate', got '\(text)'")
            }
            c.roundTrip = .milliseconds(ms)
        }
        return c
    }

    /// `--parts 2,1`: the part each voice sings.
    func parsedParts() throws(AudioError) -> [Int]? {
        guard let parts else { return nil }
        let list = parts.split(separator: ",").map { Int(String($0).filter { $0 != " " }) }
        guard !list.isEmpty, list.count <= voices + phones, list.allSatisfy({ $0.map { (1...9).contains($0) } == true }) else {
            throw AudioError(
                .invalidParameter,
                "--parts takes a part 1 … 9 for each voice (--voices, then --phones), up to \(voices + phones), separated by commas (e.g. 2,1), got '\(parts)'")
        }
        return list.compactMap { $0 }
    }

    /// A take's settings: the song's, and the options every take shares.
    func takeConfiguration(_ plan: SongPlan, keyAdjustable: Bool) throws(AudioError) -> KaraokeTake.Configuration {
        var c = KaraokeTake.Configuration(song: plan.audio)
        c.chart = plan.chart
        c.part = part
        c.parts = try parsedParts()
        c.difficulty = difficulty
        c.keyCents = key * 100
        c.tempo = tempo
        c.keyAdjustable = keyAdjustable
        c.accompanimentLoudness = try NormalizeOption.target(normalize, default: -18, ceiling: c.accompanimentTruePeak)
        // In seconds: the take converts them at the room's rate.
        c.regionInSeconds = KaraokeSession.RegionInSeconds(start: start, end: end, loopCount: loop)
        if let stems {
            let folder = songs.count == 1 ? stems : FilePath.join(stems, String(cFormat: "%02d", plan.number))
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            c.stemsDirectory = folder
        }
        return c
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
