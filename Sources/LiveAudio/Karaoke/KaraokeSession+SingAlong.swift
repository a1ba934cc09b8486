import FoundationEssentials
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What a karaoke session with a chart follows and scores: the voice's pitch (a `pitchTracker` on the dry voice),
/// each estimate put at the song's time the singer sang it to, and the score as the song goes.
///
/// The song's time of a voice estimate: the voice that reaches the graph at sample time t was sung to the
/// accompaniment rendered at t − R (R the round trip and the capture processing, as the dry stem is shifted), which
/// was the song's frame `anchor.song + (t − R − anchor.graph) × tempo` — the anchor the song's start, or the last
/// pause, resume, seek or new region. While the song is paused the voice is not scored; the notes judged are the
/// region's; a passage sung again (a loop, a seek back) keeps its first verdicts, as the score judges in order of
/// time. A key change counts from when the singer hears it.
final class SingAlongFollower: Sendable {
    let chart: SongChart
    /// The part sung (`P1` is 1).
    let part: Int
    /// The part sung: its lines are the ones shown, its notes the ones scored (the first part for lyrics alone).
    let voice: SongChart.Voice?
    let tracker: PitchTrackerUnit?
    let sampleRate: Double
    /// A phone voice's source: its `pitch-N.csv` marks the estimates made where the phone's audio did not come.
    let phone: PhoneVoiceSource?
    /// Takes the estimates in every 100 ms (a `la-work` job) from the song's start to ``finish()``.
    private let job = Mutex<WorkerPool.Job?>(nil)
    /// Where its pitch tracker and its job run (its room's).
    private let pool: WorkerPool
    private let state: Mutex<State>

    struct Anchor {
        var graphFrame: Int64
        var songFrame: Int64
        /// Song frames per graph frame: the tempo; 0 while paused.
        var rate: Double
    }

    struct State: ~Copyable {
        var score: SingingScore?
        var anchors: [Anchor] = []
        /// Key changes (cents), each from the graph frame the singer hears it at.
        var keys: [(graphFrame: Int64, cents: Double)] = [(.min, 0)]
        var roundTrip: Int64 = 0
        var latest: PitchEstimate?
        /// `time,frequency,confidence,voiced,note` lines for `pitch.csv`, written as they come.
        var csv: UnsafeMutablePointer<FILE>?
    }

    /// The region of the song that plays, in frames (its start, its length when it ends before the file's end),
    /// and whether it loops: a loop's later passes map back into it.
    let region: FilePlayerUnit.Region

    init(
        chart: SongChart, part: Int, difficulty: SingingDifficulty, format: StreamFormat, region: FilePlayerUnit.Region,
        pitchPath: String?, phone: PhoneVoiceSource? = nil, pool: WorkerPool = .shared
    ) throws(AudioError) {
        self.region = region
        self.phone = phone
        self.pool = pool
        self.chart = chart
        self.part = part
        voice = chart.hasNotes ? chart.voice(part) : chart.voices.first
        sampleRate = format.sampleRate
        guard chart.hasNotes else {
            tracker = nil
            state = Mutex(State())
            return
        }
        // Only the notes within the region that plays are judged.
        let rate = format.sampleRate
        let within = Double(region.startFrame) / rate...(region.frameCount.map { Double(region.startFrame + $0) / rate } ?? .infinity)
        let score = try SingingScore(chart: chart, voice: part, difficulty: difficulty, within: within)
        let tracker = try PitchTrackerUnit(format: format, pool: pool)
        self.tracker = tracker
        var file: UnsafeMutablePointer<FILE>?
        if let pitchPath {
            guard let f = fopen(pitchPath, "w") else {
                throw AudioError(.fileIO, "cannot write \(pitchPath): \(String(cString: strerror(errno)))")
            }
            fputs(phone == nil ? "time,frequency,confidence,voiced,note\n" : "time,frequency,confidence,voiced,note,gap\n", f)
            file = f
        }
        state = Mutex(State(score: score, csv: file))
    }

    deinit {
        state.withLock { s in
            if let f = s.csv { fclose(f) }
            s.csv = nil
        }
    }

    /// The song starts: frame `songFrame` is rendered at graph frame `graphFrame`; the voice arrives `roundTrip`
    /// frames after what it was sung to.
    func start(graphFrame: Int64, songFrame: Int64, tempo: Double, roundTrip: Int64) throws(AudioError) {
        state.withLock { s in
            s.anchors = [Anchor(graphFrame: graphFrame, songFrame: songFrame, rate: tempo)]
            s.roundTrip = roundTrip
        }
        guard tracker != nil else { return }
        let made = try pool.add("sing-along") { [weak self] last in
            self?.update()
            return last ? .idle : .after(0.1)
        }
        job.withLock { $0 = made }
    }

    /// The song changed where it plays (a pause, resume, seek or region): from `graphFrame` on it is at `songFrame`.
    func moved(graphFrame: Int64, songFrame: Int64, rate: Double) {
        state.withLock { s in
            guard !s.anchors.isEmpty else { return }
            s.anchors.append(Anchor(graphFrame: graphFrame, songFrame: songFrame, rate: rate))
        }
    }

    /// A key change moves the notes from `graphFrame` on: when the singer hears it (the song's look-ahead and the
    /// time-pitch's after it is made). Before the start, from the start.
    func setKey(cents: Double, fromGraphFrame graphFrame: Int64) {
        state.withLock { s in
            if s.anchors.isEmpty { s.keys = [(.min, cents)] } else { s.keys.append((graphFrame, cents)) }
        }
    }

    /// Takes the tracker's estimates into the score (and `pitch.csv`). Any thread but a render thread; called by
    /// readers and at the end.
    func update() {
        guard let tracker else { return }
        state.withLock { s in
            tracker.readEstimates { e in ingest(e, &s) }
        }
    }

    /// Takes estimates made elsewhere (tests): as ``update()`` does with the tracker's.
    func ingest(_ estimates: [PitchEstimate]) {
        state.withLock { s in
            for e in estimates { ingest(e, &s) }
        }
    }

    /// One estimate: put at the song's time it was sung to (none before the start, while paused, or past the
    /// region's end without a loop), judged in the key the singer heard then, written to `pitch.csv`.
    private func ingest(_ e: PitchEstimate, _ s: inout State) {
        s.latest = e
        guard !s.anchors.isEmpty else { return }
        let rate = sampleRate
        let heardAt = Int64((e.time * rate).rounded()) - s.roundTrip
        guard let anchor = s.anchors.last(where: { $0.graphFrame <= heardAt }), anchor.rate > 0 else { return }
        var frame = Double(anchor.songFrame) + Double(heardAt - anchor.graphFrame) * anchor.rate
        if let count = region.frameCount, count > 0, frame >= Double(region.startFrame + count) {
            // A loop's later passes are the region again (only the first pass is scored: the score judges in order).
            guard region.loopCount > 0 else { return }
            frame = Double(region.startFrame) + (frame - Double(region.startFrame)).truncatingRemainder(dividingBy: Double(count))
        }
        var song = e
        song.time = frame / rate
        s.latest = song
        if let key = s.keys.last(where: { $0.graphFrame <= heardAt }) { s.score?.keyShiftCents = key.cents }
        s.score?.add(song)
        if let f = s.csv {
            let note = targetNote(at: song.time).map(String.init) ?? ""
            var line = String(cFormat: "%.4f,%.2f,%.3f,%d,", song.time, song.frequency, song.confidence, song.voiced ? 1 : 0) + note
            if let phone {
                // A gap: most of the 10 ms around the estimate had no audio from the phone (its connection lost,
                // packets that never came, or not singing yet); empty when no longer known.
                let at = Int64((e.time * rate).rounded()), half = Int64((rate * 0.005).rounded())
                line += phone.shareHeard(from: at - half, to: at + half).map { $0 < 0.5 ? ",1" : ",0" } ?? ","
            }
            fputs(line + "\n", f)
        }
    }

    /// The MIDI note the part sings at `seconds` of the song, if any.
    func targetNote(at seconds: Double) -> Int? {
        guard let voice else { return nil }
        for line in voice.lines where line.start <= seconds && seconds < line.end {
            for s in line.syllables where s.start <= seconds && seconds < s.end { return s.note?.midiNote }
        }
        return nil
    }

    var latest: PitchEstimate? { state.withLock { $0.latest } }
    var result: SingingScore.Result? { state.withLock { $0.score?.result } }

    /// The whole part's score, and `pitch.csv` completed.
    func finish() -> SingingScore.Result? {
        job.withLock { j in
            j?.finish()
            j = nil
        }
        update()
        return state.withLock { s in
            if let f = s.csv { fclose(f) }
            s.csv = nil
            return s.score?.finish()
        }
    }
}

/// What a karaoke session with a chart or lyrics shows: where the singer is in the words, the pitch sung and the
/// note to sing, and the score so far.
public struct SingAlongReadout: Sendable {
    /// The place in the part of ``line`` (nil once the part's lines are over).
    public var lineIndex: Int?
    /// The line being sung now, or the next one coming before it starts (a line shows from the end of the one
    /// before); nil once the part's lines are over.
    public var line: SongChart.Line?
    /// The line after ``line``, if there is one.
    public var nextLine: SongChart.Line?
    /// The syllable of ``line`` being sung now, if one is.
    public var syllableIndex: Int?
    /// The song's position, seconds of its audio.
    public var position: Double
    /// The newest pitch estimate of the voice (nil without notes to score), its time the song's it was sung to (the
    /// round trip taken off) once the song plays, before that the tracker's.
    public var sung: PitchEstimate?
    /// The MIDI note the part sings now, if one.
    public var targetNote: Int?
    /// The score of the beats and lines so far (nil without notes).
    public var score: SingingScore.Result?
}

extension SingAlongFollower {
    func readout(at position: Double) -> SingAlongReadout {
        update()
        let lines = voice?.lines ?? []
        // The line now, or the next to come (a line shows from the end of the one before).
        let index = lines.firstIndex { position < $0.end }
        let line = index.map { lines[$0] }
        let syllable = line?.syllables.firstIndex { $0.start <= position && position < $0.end }
        return SingAlongReadout(
            lineIndex: index, line: line, nextLine: index.flatMap { $0 + 1 < lines.count ? lines[$0 + 1] : nil },
            syllableIndex: syllable, position: position, sung: latest, targetNote: targetNote(at: position), score: result)
    }
}
