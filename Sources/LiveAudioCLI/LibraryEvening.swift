import LiveAudio
import LiveAudioStage
import SongLibrary

/// `liveaudio karaoke --library DIR --web [HOST:]PORT`: a room that plays the library's queue, filled from phones
/// on the stage. The room starts with no song (the interlude, if any, plays); whenever the queue has a song and is
/// not paused, the first entry's countdown starts (it no longer moves), its take plays after `--gap`, and when it
/// ends its scores are stored and shown with the song's top five. The queue, the singers and the scores are the
/// library's (SQLite): the process killed and started again, the evening goes on where it was.
struct LibraryEvening {
    let command: Karaoke
    let room: KaraokeRoom
    let library: SongLibrary
    let stageConfiguration: StageConfiguration

    func run() async throws(AudioError) {
        let stop = StopFlag()
        let signals = StopSignals {
            stop.set()
            Task { [room] in _ = await room.stop() }
        }
        defer { withExtendedLifetime(signals) {} }
        let events = printEvents(room.deviceEvents)
        defer { events.cancel() }
        do throws(AudioError) {
            try await room.start()
        } catch where stop.isSet {
            note("karaoke: stopped before the evening started")
            return
        }
        note("karaoke: \(room.deviceGrant.map { "\($0)" } ?? "") ; round trip \(String(cFormat: "%.2f", Double(room.roundTripFrames) * 1000 / room.sampleRate)) ms (\(room.roundTripSource))")
        let monitor = SnapshotMonitor { room.snapshot() }
        defer { monitor.stop() }
        let presenter = EveningPresenter(
            room: KaraokeRoomPresenter(room: room, take: nil, title: "Sing tonight"), library: library, gap: command.gap)
        let server: StageServer<EveningPresenter>
        do throws(AudioError) {
            server = try await StageServer.start(stageConfiguration, presenter: presenter, monitor: monitor)
        } catch {
            _ = await room.stop()
            throw error
        }
        if let join = server.joinURL { presenter.setJoinAddress(join) }
        monitor.refresh()
        note("karaoke: the stage is at \(server.url)")
        note("karaoke: phones join at \(server.joinURL ?? "")")
        let bound = ClockBound(duration: command.duration, grace: 0)
        let display = TakeDisplay(interactive: false, room: room, monitor: monitor, lastEvent: EventLine())
        var number = 0
        var sung = 0
        func going() -> Bool { !stop.isSet && !bound.hasPassed && !room.isStopRequested && room.failure == nil }
        evening: while going() {
            // The next entry: its countdown starts once the queue has one and is not paused.
            var next: QueueEntry?
            while going() {
                do throws(AudioError) {
                    next = try library.startCountdown()
                } catch {
                    note("karaoke: the library: \(error.message)")
                }
                if next != nil { break }
                _ = room.takeSkipRequest()  // "Next song" with nothing playing does nothing
                try? await Task.sleep(nanoseconds: 200_000_000)
            }
            guard let entry = next, let id = entry.id else { break }
            number += 1
            let made: (take: KaraokeTake, plan: SongPlan, song: LibrarySong)
            do throws(AudioError) {
                made = try take(for: entry, number: number)
                try await room.play(made.take, after: command.gap)
            } catch {
                if !going() { break evening }
                note("karaoke: skipped: entry \(id): \(error.message)")
                // Not the singer's fault: their turn is not counted.
                try? library.cancel(id)
                presenter.queueChanged()
                continue
            }
            let (take, plan, song) = made
            presenter.room.show(take, title: plan.stageTitle, artist: plan.artist)
            presenter.queueChanged()
            monitor.refresh()
            note("karaoke: next: \(plan.title) in \(String(cFormat: "%.0f", command.gap)) s")
            // Up next through its countdown (shown so in the queue); being sung from its first frame.
            var skippedEarly = false
            while take.secondsUntilStart > 0, going() {
                if room.takeSkipRequest() {
                    skippedEarly = true
                    break
                }
                try? await Task.sleep(nanoseconds: 50_000_000)
            }
            if !skippedEarly, going() {
                try? library.begin(id)
                presenter.queueChanged()
                _ = await display.follow(take, title: plan.title, until: { !going() })
            }
            let summary = await room.finish(take)
            if song.audioLength == nil, let songID = song.id, summary.seconds > 0 {
                try? library.setAudioLength(Double(take.player.fileFrames) / room.sampleRate, of: songID)
            }
            if take.songHasEnded {
                // Sung to the end: its scores kept and shown with the song's top five.
                let scores = zip(summary.parts, summary.scores).compactMap { part, score in score.map { (part: part, score: $0.total) } }
                do throws(AudioError) {
                    let stored = try library.finish(id, scores: scores)
                    let difficulty = SingingDifficulty(rawValue: entry.difficulty) ?? .medium
                    let top = try library.topScores(songHash: entry.songHash, difficulty: difficulty)
                    presenter.showScores(title: song.title, artist: song.artist, difficulty: entry.difficulty, results: stored, top: top)
                    sung += 1
                    for s in stored {
                        StandardStream.output("karaoke: take \(number) (\(plan.title)): \(s.record.singerName) P\(s.record.part): \(s.record.score), place \(s.place)\n")
                    }
                    if stored.isEmpty { StandardStream.output("karaoke: take \(number) (\(plan.title)): sung\n") }
                } catch {
                    note("karaoke: the scores of take \(number): \(error.message)")
                }
            } else if going() {
                try? library.skip(id)
                StandardStream.output("karaoke: take \(number) (\(plan.title)): skipped\n")
            } else {
                // Stopped while it was sung: up next again when the evening resumes.
                try? library.resumeEvening()
            }
            presenter.queueChanged()
            monitor.refresh()
        }
        monitor.refresh()
        await server.stop()
        let evening = await room.stop()
        print(
            "karaoke: \(String(cFormat: "%.2f", evening.seconds)) s; \(sung) songs sung of \(number) started; xruns \(evening.xruns)")
        for output in evening.outputs { print("  \(output)") }
        if let error = evening.error { throw error }
    }

    /// The take of a queue entry: the library song's chart (or audio and LRC), the entry's part (and its partner's,
    /// with two voices), key and difficulty, the command's other options.
    func take(for entry: QueueEntry, number: Int) throws(AudioError) -> (KaraokeTake, SongPlan, LibrarySong) {
        // The entry's song by its id; renamed or moved since (another id), by its notes.
        var found = try library.song(id: entry.song)
        if found?.hash != entry.songHash { found = try library.song(hash: entry.songHash) }
        guard let song = found else {
            throw AudioError(.invalidParameter, "the song is no longer in the library")
        }
        guard song.isPlayable, let audio = song.audio else {
            throw AudioError(.unsupportedFile, "\(song.title) cannot be sung: \(song.problem ?? "its audio is missing")")
        }
        let plan = try SongPlan(
            song.kind == .ultraStar ? song.path : audio, number: number, lyrics: song.kind == .audio ? song.lyrics : nil,
            part: command.voices == 1 ? entry.part : nil)
        var c = try command.takeConfiguration(plan, keyAdjustable: true)
        c.part = entry.part
        if command.voices > 1, let partnerPart = entry.partnerPart { c.parts = [entry.part, partnerPart] }
        c.difficulty = SingingDifficulty(rawValue: entry.difficulty) ?? .medium
        c.keyCents = Double(entry.key) * 100
        return (try KaraokeTake(c, room: room), plan, song)
    }
}
