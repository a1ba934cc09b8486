import AudioCore

#if canImport(Glibc)
import Glibc
#endif

/// How close to the note a sung beat must be.
public enum SingingDifficulty: String, Sendable, CaseIterable {
    /// Within 2 semitones.
    case easy
    /// Within 1 semitone (the default).
    case medium
    /// The note's own semitone.
    case hard

    /// Semitones the sung pitch may be off, after folding by octaves and rounding to a semitone.
    public var toleranceSemitones: Int {
        switch self {
        case .easy: 2
        case .medium: 1
        case .hard: 0
        }
    }
}

/// The score of a take, by the rules most singing games' players know (UltraStar Deluxe's):
///
/// - Each beat of a note is judged by the pitch estimates that fall in it: hit when at least half of them hit. An
///   estimate hits a normal or golden note when the sung pitch, folded by octaves to within ±6 semitones of the note
///   and rounded to a semitone, is within the ``SingingDifficulty`` tolerance of it (an octave low is in tune); it
///   hits a rap note when it is voiced; freestyle notes are not judged.
/// - 10,000 points in all: 9,000 for the notes — each hit beat worth 9,000 × its note's factor (golden 2, normal
///   and rap 1) over the song's sum of beats × factors — and 1,000 of line bonus, shared equally by the lines that
///   have judged notes, each line's share times its hit ratio (the weight of its hit beats over its weight).
/// - Estimates come in the song's time (seconds of its audio): the round trip from the singer's mouth to the
///   recording is taken off before — see ``/AudioCore/PitchEstimate``. A key change moves the notes
///   (``keyShiftCents``), for the estimates added after it.
///
/// Fed estimates in order of time (``add(_:)``), it scores as the song goes (``result``: the beats judged so far)
/// and at the end (``finish()``). Usable without a device: `liveaudio score` feeds it the pitch of a recorded take.
public struct SingingScore: Sendable {
    /// The score of one line of the voice.
    public struct LineResult: Sendable, Equatable {
        /// The line's place in the voice's lines.
        public var index: Int
        /// The line's text.
        public var text: String
        /// When the line starts, in seconds of the song's audio.
        public var start: Double
        /// When the line ends, in seconds of the song's audio.
        public var end: Double
        /// Hit beats' weight over the line's weight, 0 … 1.
        public var hitRatio: Double
        /// What the line earned: its notes' points and its share of the line bonus.
        public var points: Double
        /// A word for the hit ratio: `perfect` (≥ 95 %), `great` (≥ 80 %), `good` (≥ 60 %), `fair` (≥ 30 %), `poor`.
        public var rating: String
    }

    /// A score: the total, its parts and each judged line's score.
    public struct Result: Sendable, Equatable {
        /// 0 … 10,000: ``notes`` + ``golden`` + ``lineBonus``, rounded.
        public var total: Int
        /// Points from normal and rap notes.
        public var notes: Double
        /// Points from golden and golden rap notes.
        public var golden: Double
        /// Points from the line bonus: at most ``SingingScore/lineBonusPoints``.
        public var lineBonus: Double
        /// Each judged line so far (every line with judged notes, at the end).
        public var lines: [LineResult]
        /// Beats judged (of every scored note kind).
        public var beatsJudged: Int
        /// Beats judged and hit (of every scored note kind).
        public var beatsHit: Int
    }

    /// The most beats a part may have to judge: over an hour at the fastest usual tempo (each takes a few words of
    /// memory).
    public static let beatLimit = 1_000_000
    /// The points all the notes are worth together: 9,000.
    public static let notePoints = 9_000.0
    /// The points the line bonus is worth in all: 1,000.
    public static let lineBonusPoints = 1_000.0

    /// How close to the note a sung beat must be (set at creation; ``SingingDifficulty/medium`` by default).
    public let difficulty: SingingDifficulty
    /// Cents the song is transposed by (a key change): the notes' pitches move with it.
    public var keyShiftCents: Double = 0
    /// The voice scored.
    public let voice: SongChart.Voice

    /// Every judged beat: its note's kind and pitch, its time span, its line; and what the estimates said.
    private struct Beat: Sendable {
        var start: Double
        var end: Double
        var midiNote: Int
        var kind: SongChart.NoteKind
        var line: Int
        var estimates = 0
        var hits = 0
        var isHit: Bool { estimates > 0 && hits * 2 >= estimates }
    }
    private var beats: [Beat] = []
    private let lineWeights: [Int]
    private let totalWeight: Int
    private let linesScored: Int
    /// Half the time an estimate stands for (the tracker's hop): an estimate counts for every beat its span touches.
    private let halfInterval: Double
    /// The first beat not yet wholly before the newest estimate, and the newest estimate's time.
    private var cursor = 0
    private var latest = -Double.infinity

    /// A score of one part of `chart`, with no estimates yet.
    /// - Parameters:
    ///   - chart: an UltraStar chart (with notes).
    ///   - number: the part sung (`P1` is 1, the default); a duet's other part is not scored.
    ///   - difficulty: how close to the note a sung beat must be (default ``SingingDifficulty/medium``).
    ///   - estimateInterval: seconds between the tracker's estimates (its hop, default 0.01): each estimate counts for
    ///     the beats within half of it either side, so every beat is judged however short.
    ///   - within: the song's seconds that play (a session's region): only the notes wholly inside are judged, and
    ///     only lines with such notes share the line bonus.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` when the chart has no notes or no such part, or more than
    ///   ``beatLimit`` beats to judge.
    public init(
        chart: SongChart, voice number: Int = 1, difficulty: SingingDifficulty = .medium, estimateInterval: Double = 0.01,
        within: ClosedRange<Double> = -Double.infinity...Double.infinity
    ) throws(AudioError) {
        guard chart.hasNotes else {
            throw AudioError(.invalidChart, "'\(chart.title)' has lyrics but no notes to score (an UltraStar chart has them)")
        }
        guard let voice = chart.voice(number) else {
            let parts = chart.voices.map { "P\($0.number)" }.joined(separator: ", ")
            throw AudioError(.invalidChart, "'\(chart.title)' has no part P\(number) (it has \(parts))")
        }
        let total = voice.notes.reduce(0) { $0 + ($1.kind.scoreFactor > 0 ? $1.beats : 0) }
        guard total <= Self.beatLimit else {
            throw AudioError(.invalidChart, "'\(chart.title)' P\(number) has \(total) beats to judge, more than a song has (at most \(Self.beatLimit))")
        }
        self.voice = voice
        self.difficulty = difficulty
        halfInterval = max(0, estimateInterval) / 2
        var weights: [Int] = []
        for (lineIndex, line) in voice.lines.enumerated() {
            var weight = 0
            for syllable in line.syllables {
                guard let note = syllable.note, note.kind.scoreFactor > 0,
                    syllable.start >= within.lowerBound, syllable.end <= within.upperBound
                else { continue }
                weight += note.beats * note.kind.scoreFactor
                for b in 0..<note.beats {
                    beats.append(Beat(
                        start: chart.time(ofBeat: Double(note.startBeat + b)), end: chart.time(ofBeat: Double(note.startBeat + b + 1)),
                        midiNote: note.midiNote, kind: note.kind, line: lineIndex))
                }
            }
            weights.append(weight)
        }
        lineWeights = weights
        totalWeight = weights.reduce(0, +)
        linesScored = weights.filter { $0 > 0 }.count
        // Beats in time order (a voice's notes are; kept so for the cursor).
        beats.sort { $0.start < $1.start }
    }

    /// Judges one estimate against the beats its time touches. Estimates come in order of time.
    public mutating func add(_ estimate: PitchEstimate) {
        guard estimate.time.isFinite else { return }
        latest = max(latest, estimate.time)
        let from = estimate.time - halfInterval
        let to = estimate.time + halfInterval
        while cursor < beats.count, beats[cursor].end <= from - 1 { cursor += 1 }
        var i = cursor
        let sung = estimate.midiNote
        while i < beats.count, beats[i].start <= to {
            if beats[i].end >= from {
                beats[i].estimates += 1
                if hits(sung, beats[i]) { beats[i].hits += 1 }
            }
            i += 1
        }
    }

    private func hits(_ sung: Double?, _ beat: Beat) -> Bool {
        guard let sung else { return false }
        if !beat.kind.hasPitch { return true }  // rap: voiced is enough
        var difference = sung - (Double(beat.midiNote) + keyShiftCents / 100)
        difference -= 12 * (difference / 12).rounded()  // folded to within ±6 semitones
        return abs(difference.rounded()) <= Double(difficulty.toleranceSemitones)
    }

    /// The score of the beats that have ended by the newest estimate, and of the lines that have ended.
    public var result: Result { score(through: latest) }

    /// The score of the whole part: beats no estimate reached are misses.
    public func finish() -> Result { score(through: .infinity) }

    private func score(through time: Double) -> Result {
        guard totalWeight > 0 else {
            return Result(total: 0, notes: 0, golden: 0, lineBonus: 0, lines: [], beatsJudged: 0, beatsHit: 0)
        }
        let perWeight = Self.notePoints / Double(totalWeight)
        var notes = 0.0
        var golden = 0.0
        var judged = 0
        var hit = 0
        var lineHit = [Int](repeating: 0, count: lineWeights.count)
        for beat in beats where beat.end <= time {
            judged += 1
            guard beat.isHit else { continue }
            hit += 1
            let factor = beat.kind.scoreFactor
            if factor == 2 { golden += perWeight * 2 } else { notes += perWeight * Double(factor) }
            lineHit[beat.line] += factor
        }
        var bonus = 0.0
        var lines: [LineResult] = []
        for (index, line) in voice.lines.enumerated() where lineWeights[index] > 0 && line.end <= time {
            let ratio = Double(lineHit[index]) / Double(lineWeights[index])
            let share = Self.lineBonusPoints / Double(linesScored) * ratio
            bonus += share
            lines.append(LineResult(
                index: index, text: line.text, start: line.start, end: line.end, hitRatio: ratio,
                points: Double(lineHit[index]) * perWeight + share, rating: Self.rating(ratio)))
        }
        return Result(
            total: Int((notes + golden + bonus).rounded()), notes: notes, golden: golden, lineBonus: bonus, lines: lines,
            beatsJudged: judged, beatsHit: hit)
    }

    static func rating(_ ratio: Double) -> String {
        switch ratio {
        case 0.95...: "perfect"
        case 0.8...: "great"
        case 0.6...: "good"
        case 0.3...: "fair"
        default: "poor"
        }
    }
}

extension SingingScore.Result {
    /// The result as a JSON object — `total`, `notes`, `golden`, `lineBonus`, `beatsJudged`, `beatsHit`, `difficulty`,
    /// `roundTripMilliseconds` (the shift used: the measured round trip in a session, `--offset-ms` offline), and
    /// `lines` (each line's `index`, `text`, `start`, `end`, `hitRatio`, `points`, `rating`): what `--score-file`
    /// writes.
    public func json(difficulty: SingingDifficulty, roundTripSeconds: Double) -> String {
        func number(_ x: Double) -> String {
            guard x.isFinite else { return "null" }
            let rounded = (x * 1000).rounded() / 1000
            return rounded == rounded.rounded() && abs(rounded) < 1e15 ? String(Int(rounded)) : String(rounded)
        }
        var out = "{\n"
        out += "  \"total\": \(total),\n"
        out += "  \"notes\": \(number(notes)),\n  \"golden\": \(number(golden)),\n  \"lineBonus\": \(number(lineBonus)),\n"
        out += "  \"beatsJudged\": \(beatsJudged),\n  \"beatsHit\": \(beatsHit),\n"
        out += "  \"difficulty\": \(difficulty.rawValue.jsonLiteral),\n"
        out += "  \"roundTripMilliseconds\": \(number(roundTripSeconds * 1000)),\n"
        out += "  \"lines\": ["
        for (k, line) in lines.enumerated() {
            out += k == 0 ? "\n" : ",\n"
            out += "    {\"index\": \(line.index), \"text\": \(line.text.jsonLiteral), \"start\": \(number(line.start)), "
            out += "\"end\": \(number(line.end)), \"hitRatio\": \(number(line.hitRatio)), \"points\": \(number(line.points)), "
            out += "\"rating\": \(line.rating.jsonLiteral)}"
        }
        out += lines.isEmpty ? "]\n}\n" : "\n  ]\n}\n"
        return out
    }
}
