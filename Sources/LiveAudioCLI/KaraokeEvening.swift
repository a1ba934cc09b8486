import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import LiveAudioStage
import Synchronization

/// One song of a karaoke run: the argument, its chart (an UltraStar `.txt`, or `--lyrics` with one song), the audio
/// played and the title shown.
struct SongPlan: Sendable {
    let argument: String
    let number: Int
    let chart: SongChart?
    let audio: String
    let title: String
    let artist: String

    /// - Parameter part: the part the one voice sings, checked here (nil: several voices, checked by the take).
    init(_ song: String, number: Int, lyrics: String?, part: Int?) throws(AudioError) {
        argument = song
        self.number = number
        let isChart = song.lowercased().hasSuffix(".txt")
        if isChart, lyrics != nil {
            throw AudioError(.invalidParameter, "--lyrics is for a song without a chart: \(song) is a chart and has its own")
        }
        // A chart names its song (its #INSTRUMENTAL, else #AUDIO or #MP3); --lyrics shows words with any song.
        let chart: SongChart? = isChart ? try SongChart.load(path: song) : try lyrics.map { path throws(AudioError) in try SongChart.load(path: path) }
        for warning in chart?.warnings ?? [] { StandardStream.error("liveaudio: warning: \(warning)\n") }
        if let chart, let part, chart.hasNotes, chart.voice(part) == nil {
            throw AudioError(.invalidParameter, "--part \(part): \(song) has \(chart.voices.map { "P\($0.number)" }.joined(separator: ", "))")
        }
        self.chart = chart
        if let chart, isChart {
            let reference = try chart.songReference()
            for warning in reference.warnings { StandardStream.error("liveaudio: warning: \(song): \(warning)\n") }
            audio = reference.path
        } else {
            audio = song
        }
        title = chart.map { [$0.artist, $0.title].filter { !$0.isEmpty }.joined(separator: " – ") }.flatMap { $0.isEmpty ? nil : $0 }
            ?? FilePath.lastComponent(song)
        artist = chart?.artist ?? ""
    }

    /// The title for the stage: the chart's, else the file's name.
    var stageTitle: String { chart.map(\.title).flatMap { $0.isEmpty ? nil : $0 } ?? FilePath.lastComponent(argument) }
}

/// A karaoke run: one room, its songs played in order with a gap between them, each a take with its stems, its
/// score and its summary; the displays (the terminal's screen or status lines, the stage) follow the room.
struct KaraokeEvening {
    let command: Karaoke
    let room: KaraokeRoom
    let plans: [Result<SongPlan, AudioError>]
    let interactive: Bool
    let stageConfiguration: StageConfiguration?

    init(
        command: Karaoke, room: KaraokeRoom, plans: [Result<SongPlan, AudioError>], interactive: Bool,
        stageConfiguration: StageConfiguration?
    ) {
        self.command = command
        self.room = room
        self.plans = plans
        self.interactive = interactive
        self.stageConfiguration = stageConfiguration
    }

    /// What the run learnt of each take: its song, and its summary (nil: refused).
    private struct Played {
        let plan: SongPlan?
        let argument: String
        let summary: KaraokeTake.Summary?
        let error: AudioError?
    }

    func run() async throws(AudioError) {
        // On the screen and the stage the key may change while singing: the time-pitch is always in.
        let keyAdjustable = interactive || stageConfiguration != nil
        var played: [Played] = []
        var pending = plans.makeIterator()
        /// The next take that can be made; those that cannot are reported and skipped (a single song's is thrown).
        func nextTake() throws(AudioError) -> (SongPlan, KaraokeTake)? {
            while let next = pending.next() {
                do throws(AudioError) {
                    let plan = try next.get()
                    return (plan, try KaraokeTake(try command.takeConfiguration(plan, keyAdjustable: keyAdjustable), room: room))
                } catch {
                    if plans.count == 1 { throw error }
                    let argument = (try? next.get().argument) ?? "a song"
                    note("karaoke: skipped: \(error.message)")
                    played.append(Played(plan: nil, argument: argument, summary: nil, error: error))
                }
            }
            return nil
        }
        guard var (plan, take) = try nextTake() else {
            throw AudioError(.unsupportedFile, "none of the \(plans.count) songs can be played")
        }
        let lastEvent = EventLine()
        let events = interactive ? lastEvent.follow(room.deviceEvents) : printEvents(room.deviceEvents)
        defer { events.cancel() }
        let stop = StopFlag()
        // A signal stops the room at once, a start in progress too; the loops below then find the flag.
        let signals = StopSignals {
            stop.set()
            Task { [room] in _ = await room.stop() }
        }
        defer { withExtendedLifetime(signals) {} }
        do throws(AudioError) {
            try await room.start(playing: take)
        } catch where stop.isSet {
            note("karaoke: stopped before the song started: nothing was recorded")
            return
        }
        let deviceRate = room.deviceGrant?.sampleRate ?? room.sampleRate
        if let n = take.accompanimentNormalization { note("karaoke: " + NormalizeOption.describe(n)) }
        note("karaoke: \(room.deviceGrant.map { "\($0)" } ?? "") ; round trip \(String(cFormat: "%.2f", Double(room.roundTripFrames) * 1000 / room.sampleRate)) ms (\(room.roundTripSource)\(room.calibrations > 1 ? ", \(room.calibrations) calibrations: an xrun, a lost click or clicks apart in the first" : ""))")
        let bound = ClockBound(duration: command.duration, grace: 0)
        // One reader of the room's state for every display: the screen, the status line, the stage.
        let monitor = SnapshotMonitor { room.snapshot() }
        defer { monitor.stop() }
        var stageServer: StageServer<KaraokeRoomPresenter>?
        let presenter = KaraokeRoomPresenter(room: room, take: take, title: plan.stageTitle, artist: plan.artist)
        if let stageConfiguration {
            do throws(AudioError) {
                stageServer = try await StageServer.start(stageConfiguration, presenter: presenter, monitor: monitor)
                note("karaoke: the stage is at \(stageServer!.url)")
            } catch {
                _ = await room.stop()
                throw error
            }
        }
        let display = TakeDisplay(interactive: interactive, room: room, monitor: monitor, lastEvent: lastEvent)
        evening: while true {
            let outcome = await display.follow(take, title: plan.title, until: { stop.isSet || bound.hasPassed })
            let summary = await room.finish(take)
            played.append(Played(plan: plan, argument: plan.argument, summary: summary, error: nil))
            report(summary, plan: plan, ratedAlready: outcome.ratedLines)
            if outcome.quit || stop.isSet || bound.hasPassed || room.isStopRequested || room.failure != nil { break }
            // The next song that starts, after the gap: the room goes on meanwhile. One that cannot start (its
            // loudness not measured, the graph refusing it) is reported and the room goes on to the one after.
            while true {
                guard let next = try nextTake() else { break evening }
                (plan, take) = next
                do throws(AudioError) {
                    try await room.play(take, after: command.gap)
                    break
                } catch {
                    if stop.isSet || room.isStopRequested { break evening }
                    note("karaoke: skipped: \(plan.argument): \(error.message)")
                    played.append(Played(plan: nil, argument: plan.argument, summary: nil, error: error))
                }
            }
            presenter.show(take, title: plan.stageTitle, artist: plan.artist)
            if let n = take.accompanimentNormalization { note("karaoke: " + NormalizeOption.describe(n)) }
            if !interactive { note("karaoke: next: \(plan.title) in \(String(cFormat: "%.0f", command.gap)) s") }
        }
        // The stage shows the end, then closes; the room stops after it (its files complete).
        monitor.refresh()
        if let stageServer {
            await stageServer.stop()
            note("karaoke: the stage served \(stageServer.pagesServed) pages; \(stageServer.droppedSlowClients) were disconnected for not reading")
        }
        let evening = await room.stop()
        try finish(evening, played: played, deviceRate: deviceRate)
    }

    /// A take's lines: its summary and its score (only when the run has several songs: one song's are the evening's).
    private func report(_ summary: KaraokeTake.Summary, plan: SongPlan, ratedAlready: Int) {
        if let score = summary.score, !interactive {
            // The lines that ended after the last look.
            for line in score.lines.dropFirst(ratedAlready) { StandardStream.output("         " + ScoreReport.line(line) + "\n") }
        }
        let voices = summary.scores.count
        if voices > 1, let chart = plan.chart {
            for (i, score) in summary.scores.enumerated() {
                guard let score else { continue }
                StandardStream.output(
                    "karaoke: take \(plan.number), voice \(i + 1) (P\(summary.parts[i])): "
                        + ScoreReport.summary(score, title: chart.title, artist: chart.artist, difficulty: command.difficulty) + "\n")
            }
        }
        guard plans.count > 1 else { return }
        StandardStream.output(
            "karaoke: take \(plan.number) (\(plan.title)): \(String(cFormat: "%.2f", summary.seconds)) s, accompaniment underruns "
                + "\(summary.accompanimentUnderruns), recorded \(summary.recordedFrames) frames, dropped \(summary.droppedFrames)\n")
        if voices <= 1, let score = summary.score, let chart = plan.chart {
            StandardStream.output(
                "karaoke: take \(plan.number): " + ScoreReport.summary(score, title: chart.title, artist: chart.artist, difficulty: command.difficulty) + "\n")
        }
        for gap in summary.gaps { StandardStream.output("karaoke: take \(plan.number): gap: \(gap) of its stems\n") }
        if let error = summary.error { note("karaoke: take \(plan.number): \(error.message)") }
    }

    /// The evening's summary, the scores, the score file, the timing; an error for what failed.
    private func finish(_ evening: KaraokeRoom.Summary, played: [Played], deviceRate: Double) throws(AudioError) {
        // A take ended before it started (a stop or a skip in the gap) was not sung.
        let takes = played.compactMap(\.summary).filter { $0.seconds > 0 }
        let underruns = takes.reduce(0) { $0 + $1.accompanimentUnderruns }
        let recorded = max(evening.recordedFrames, takes.map(\.recordedFrames).max() ?? 0)
        let dropped = evening.droppedFrames + takes.reduce(0) { $0 + $1.droppedFrames }
        print(
            "karaoke: \(String(cFormat: "%.2f", evening.seconds)) s; round trip \(evening.roundTripFrames) frames "
                + "(\(evening.roundTripSource)); xruns \(evening.xruns), accompaniment underruns "
                + "\(underruns), recorded \(recorded) frames, dropped \(dropped)"
                + (plans.count > 1 ? "; \(takes.count) of \(plans.count) songs sung" : ""))
        print("karaoke: the song's loudness: \(evening.loudness.summaryText)")
        // The interruptions and outages, marked where they are in the recording (silence there).
        for gap in evening.gaps { print("karaoke: gap: \(gap) of the recording (the device away or interrupted)") }
        for output in evening.outputs { print("  \(output)") }
        // One song and one voice: its score alone, as ever; else every take's, and with several voices (wired or phones)
        // every voice's.
        let voiceCount = command.voices + command.phones
        let single = plans.count == 1 && voiceCount == 1
        var scores: [String] = []
        let roundTrip = Double(evening.roundTripFrames) / room.sampleRate
        for p in played {
            guard let summary = p.summary, summary.seconds > 0, let score = summary.score, let plan = p.plan, let chart = plan.chart
            else { continue }
            if single {
                print("karaoke: " + ScoreReport.summary(score, title: chart.title, artist: chart.artist, difficulty: command.difficulty))
                scores.append(score.json(difficulty: command.difficulty, roundTripSeconds: roundTrip))
                continue
            }
            let head = "{\"take\":\(plan.number),\"song\":\(plan.argument.jsonLiteral),\"title\":\(chart.title.jsonLiteral),"
            if voiceCount == 1 {
                scores.append(head + "\"score\":\(score.json(difficulty: command.difficulty, roundTripSeconds: roundTrip))}")
            } else {
                let voices = summary.scores.enumerated().compactMap { i, s in
                    s.map { "{\"voice\":\(i + 1),\"part\":\(summary.parts[i]),\"score\":\($0.json(difficulty: command.difficulty, roundTripSeconds: roundTrip))}" }
                }
                scores.append(head + "\"voices\":[" + voices.joined(separator: ",") + "]}")
            }
        }
        if let scoreFile = command.scoreFile, !scores.isEmpty {
            try ScoreReport.write(single ? scores[0] : "{\"takes\":[" + scores.joined(separator: ",") + "]}\n", to: scoreFile)
        }
        if command.timing {
            CycleTimingLine.print(
                room.cycleTimings, sampleRate: deviceRate,
                capacity: CycleTimingLine.capacity(duration: command.duration, sampleRate: room.sampleRate))
        }
        if let error = evening.error ?? takes.compactMap(\.error).first { throw error }
        for output in evening.outputs {
            if let r = output.rtmp, r.state == .failed {
                throw r.lastError ?? AudioError(.connectionLost, "\(output.output) failed")
            }
        }
        let refused = played.filter { $0.summary == nil }
        if !refused.isEmpty {
            throw AudioError(
                refused[0].error?.code ?? .unsupportedFile,
                "\(refused.count) of \(plans.count) songs could not be played: "
                    + refused.map { $0.error?.message ?? $0.argument }.joined(separator: "; "))
        }
    }
}

/// What the terminal shows while a take plays: the live screen (and its keys), or off a terminal each lyric line
/// as it starts, each line's score as it ends and a status line a second.
struct TakeDisplay {
    let interactive: Bool
    let room: KaraokeRoom
    let monitor: SnapshotMonitor<KaraokeSnapshot>
    let lastEvent: EventLine

    /// How following a take ended: the user quit (q), and the lyric lines already rated on the way.
    struct Outcome {
        var quit = false
        var ratedLines = 0
    }

    /// Follows `take` until its song has ended, the user skips it (n) or quits (q), a display asks for the stop,
    /// the room fails, or `until` says so.
    func follow(_ take: KaraokeTake, title: String, until: () -> Bool) async -> Outcome {
        var outcome = Outcome()
        func going() -> Bool {
            !until() && !take.songHasEnded && !room.isStopRequested && room.failure == nil && take.failure == nil
                && !room.takeSkipRequest()
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
            let screen = KaraokeScreen(room: room, title: title)
            var message: String?
            keys: while going() {
                for key in terminal.readKeys() {
                    if key == UInt8(ascii: "q") || key == UInt8(ascii: "Q") {
                        outcome.quit = true
                        break keys
                    }
                    if key == UInt8(ascii: "n") || key == UInt8(ascii: "N") { break keys }
                    message = screen.handle(key)
                    if message == nil { monitor.refresh() }
                }
                let waiting = take.secondsUntilStart
                screen.title = waiting > 0 ? "next: \(title) in \(Int(waiting.rounded(.up))) s" : title
                terminal.draw(screen.lines(monitor.latest, event: lastEvent.text, note: message))
                try? await Task.sleep(nanoseconds: 100_000_000)
            }
            return outcome
        }
        var lastLine = monotonicNanoseconds()
        var shownLine = -1
        while going() {
            try? await Task.sleep(nanoseconds: 50_000_000)
            if let s = take.singAlong {
                if let index = s.lineIndex, let line = s.line, index > shownLine, line.start <= s.position {
                    shownLine = index
                    StandardStream.output(String(cFormat: "%7.2f s  ", line.start) + "♪ " + line.text + "\n")
                }
                let rated = s.score?.lines ?? []
                while outcome.ratedLines < rated.count {
                    StandardStream.output("         " + ScoreReport.line(rated[outcome.ratedLines]) + "\n")
                    outcome.ratedLines += 1
                }
            }
            if monotonicNanoseconds() - lastLine >= 1_000_000_000, take.secondsUntilStart == 0 {
                lastLine = monotonicNanoseconds()
                let s = monitor.latest
                let line = String(
                    cFormat: "%.1f / %.1f s  voice %.1f dB  accompaniment %.1f dB  output %.1f dB  round trip %.2f ms",
                    s.position, Double(take.player.fileFrames) / room.sampleRate,
                    s.voice.peak ?? -.infinity, s.accompaniment.peak ?? -.infinity, s.output.peak ?? -.infinity,
                    s.roundTripMilliseconds) + "  xruns \(s.xruns)  \(s.loudness.statusText)"
                    + (s.voices.isEmpty ? "" : "  voices " + s.voices.map { String(cFormat: "%.1f", $0.peak ?? -.infinity) }.joined(separator: "/") + " dB")
                let outputs = s.outputs.map { " | \($0)" }.joined()
                StandardStream.output(line + outputs + "\n")
            }
        }
        return outcome
    }
}
