import AudioCore
import Foundation
import SingAlong
import Testing

@Suite("Singing score: UltraStar Deluxe's rules")
struct SingingScoreTests {
    /// Eight lines of a melody around C4–A4 at BPM 300 (a beat is 50 ms), with golden, rap and freestyle notes and
    /// gaps between notes and lines.
    static let chart: SongChart = {
        var text = "#TITLE:Melody\n#ARTIST:Tests\n#BPM:300\n#GAP:1000\n"
        let pitches = [0, 2, 4, 5, 7, 9, 7, 4, 2, 0, -1, 0]
        var beat = 0
        for line in 0..<8 {
            for n in 0..<6 {
                let kind = line == 3 && n == 2 ? "*" : line == 5 && n == 4 ? "R" : line == 6 && n == 0 ? "F" : ":"
                let length = 3 + (n + line) % 4
                text += "\(kind) \(beat) \(length) \(pitches[(line + n) % pitches.count]) la\n"
                beat += length + 1
            }
            text += "- \(beat)\n"
            beat += 4
        }
        return try! SongChart.ultraStar(bytes: Array(text.utf8), name: "melody.txt")
    }()

    /// A singer following the chart: estimates every 10 ms at each note's pitch moved by `offset` semitones, with a
    /// 5.5 Hz vibrato of ±`vibrato` semitones and a glide over the first 30 ms of each note from the note before;
    /// unvoiced between notes. `late`: seconds behind the song; `silent`: never voiced.
    static func singer(
        offset: Double = 0, vibrato: Double = 0.3, late: Double = 0, silent: Bool = false, chart: SongChart = chart
    ) -> [PitchEstimate] {
        let notes = chart.voices[0].syllables
        var out: [PitchEstimate] = []
        var t = 0.0
        var previous: Double?
        var index = 0
        let end = (notes.last?.end ?? 0) + 1
        while t < end {
            while index < notes.count, notes[index].end <= t { previous = Double(notes[index].note!.midiNote); index += 1 }
            var estimate = PitchEstimate(time: t + late, frequency: 0, confidence: 0.1, voiced: false)
            if !silent, index < notes.count, notes[index].start <= t {
                let target = Double(notes[index].note!.midiNote) + offset
                let into = t - notes[index].start
                let glide = previous.map { p in into < 0.03 ? (p + offset) + (target - p - offset) * into / 0.03 : target } ?? target
                let midi = glide + vibrato * sin(2 * .pi * 5.5 * t)
                estimate = PitchEstimate(time: t + late, frequency: 440 * pow(2, (midi - 69) / 12), confidence: 0.9, voiced: true)
            }
            out.append(estimate)
            t += 0.01
        }
        return out
    }

    static func score(_ estimates: [PitchEstimate], _ difficulty: SingingDifficulty, shift: Double = 0) throws -> SingingScore.Result {
        var score = try SingingScore(chart: chart, difficulty: difficulty)
        for e in estimates { score.add(PitchEstimate(time: e.time - shift, frequency: e.frequency, confidence: e.confidence, voiced: e.voiced)) }
        return score.finish()
    }

    @Test("In tune scores at least 9,500 on hard; an octave low scores the same within 2 %")
    func inTune() throws {
        let tuned = try Self.score(Self.singer(), .hard)
        #expect(tuned.total >= 9_500, "\(tuned.total)")
        #expect(tuned.lines.count == 8 && tuned.lines.allSatisfy { $0.rating == "perfect" || $0.rating == "great" })
        let low = try Self.score(Self.singer(offset: -12), .hard)
        #expect(abs(Double(low.total - tuned.total)) <= 0.02 * Double(tuned.total), "\(low.total) against \(tuned.total)")
        let high = try Self.score(Self.singer(offset: 24), .hard)
        #expect(abs(Double(high.total - tuned.total)) <= 0.02 * Double(tuned.total), "two octaves up: \(high.total)")
    }

    @Test("One semitone flat: below 2,000 on hard (only rap beats), at least 9,000 on easy and medium")
    func flat() throws {
        let flat = Self.singer(offset: -1, vibrato: 0.2)
        let hard = try Self.score(flat, .hard)
        #expect(hard.total < 2_000, "\(hard.total)")
        #expect(try Self.score(flat, .easy).total >= 9_000)
        #expect(try Self.score(flat, .medium).total >= 9_000)
        // Three semitones off misses on easy too (but for the rap note).
        #expect(try Self.score(Self.singer(offset: 3, vibrato: 0.2), .easy).total < 2_000)
    }

    @Test("Silence scores 0; 120 ms late costs points unless the round trip is taken off, then it is the same")
    func silenceAndLateness() throws {
        let silent = try Self.score(Self.singer(silent: true), .easy)
        #expect(silent.total == 0 && silent.beatsHit == 0 && silent.beatsJudged > 0)
        let tuned = try Self.score(Self.singer(), .medium)
        let late = Self.singer(late: 0.12)
        let uncorrected = try Self.score(late, .medium)
        let corrected = try Self.score(late, .medium, shift: 0.12)
        #expect(Double(uncorrected.total) < 0.9 * Double(tuned.total), "late and uncorrected: \(uncorrected.total)")
        #expect(abs(Double(corrected.total - tuned.total)) <= 0.02 * Double(tuned.total), "\(corrected.total) against \(tuned.total)")
    }

    @Test("The points: golden notes count double, freestyle not at all, rap when voiced; 9,000 + 1,000; lines as they end")
    func points() throws {
        let chart = try SongChart.ultraStar(bytes: Array("""
            #TITLE:P
            #ARTIST:A
            #BPM:300
            : 0 4 0 a
            * 4 2 2 b
            - 7
            R 8 4 0 c
            F 12 4 0 d
            - 17
            F 18 2 0 e

            """.utf8), name: "p.txt")
        // Weight: 4 + 2 × 2 + 4 = 12 (the freestyle line has none: two lines share the bonus).
        func run(_ sing: (Double) -> Double?) throws -> SingingScore.Result {
            var score = try SingingScore(chart: chart, difficulty: .hard)
            var t = 0.0
            while t < 2 {
                let midi = sing(t)
                score.add(PitchEstimate(time: t, frequency: midi.map { 440 * pow(2, ($0 - 69) / 12) } ?? 0, confidence: 1, voiced: midi != nil))
                t += 0.01
            }
            return score.finish()
        }
        let beat = 0.05
        // Everything right: 10,000.
        let all = try run { t in t < 4 * beat ? 60 : t < 6 * beat ? 62 : 50 }
        #expect(all.total == 10_000 && all.lines.count == 2 && all.lines.allSatisfy { $0.rating == "perfect" })
        #expect(abs(all.golden - 3_000) < 1e-9 && abs(all.notes - 6_000) < 1e-9 && abs(all.lineBonus - 1_000) < 1e-9)
        // Only the golden note: 4 of 12 weight → 3,000 + half the first line's bonus share (4 of 8) = 250.
        let golden = try run { t in t >= 4 * beat && t < 6 * beat ? 62 : nil }
        #expect(golden.total == 3_250, "\(golden)")
        #expect(golden.lines[0].hitRatio == 0.5 && golden.lines[1].hitRatio == 0)
        // Only the rap note, spoken at any pitch: 3,000 + the second line's whole share, 500.
        let rap = try run { t in t >= 8 * beat && t < 12 * beat ? 47.3 : nil }
        #expect(rap.total == 3_500, "\(rap)")
        // While singing: a line is rated once it ends; beats judged as they pass.
        var live = try SingingScore(chart: chart, difficulty: .hard)
        for k in 0..<30 { live.add(PitchEstimate(time: Double(k) * 0.01, frequency: 261.63, confidence: 1, voiced: true)) }
        let soFar = live.result
        #expect(soFar.lines.isEmpty && soFar.beatsJudged == 5 && soFar.beatsHit == 4, "\(soFar)")
    }

    @Test("A key change moves the notes: sung two semitones up after +200 cents is in tune")
    func keyChange() throws {
        var score = try SingingScore(chart: Self.chart, difficulty: .hard)
        score.keyShiftCents = 200
        for e in Self.singer(offset: 2) { score.add(e) }
        #expect(score.finish().total >= 9_500)
    }

    @Test("Errors: lyrics without notes, a part the chart does not have")
    func errors() throws {
        let lyrics = try SongChart.lrc(bytes: Array("[00:01.00]words\n".utf8), name: "l.lrc")
        #expect(throws: AudioError.self) { try SingingScore(chart: lyrics) }
        do {
            _ = try SingingScore(chart: Self.chart, voice: 2)
            Issue.record("no error")
        } catch {
            #expect(error.code == .invalidChart && error.message == "'Melody' has no part P2 (it has P1)")
        }
    }
}
