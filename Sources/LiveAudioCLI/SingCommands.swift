import ArgumentParser
import LiveAudio

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension SingingDifficulty: ExpressibleByArgument {}

struct Score: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Score a recorded dry voice against an UltraStar chart, offline.",
        discussion: """
            The take's first sample is taken as the song's start (the song's audio at 0 s); a voice recorded late \
            (a round trip not taken off) is moved back with --offset-ms. The rules are UltraStar Deluxe's: \
            10,000 points, 9,000 for the notes (golden notes double, freestyle none, rap notes when voiced) and \
            1,000 of line bonus; the sung pitch is folded by octaves; --difficulty sets how close a beat must be \
            (easy: 2 semitones, medium: 1, hard: the note's own). See docs/karaoke.md.
            """)

    @Argument(help: "The chart (UltraStar .txt).")
    var chart: String

    @Argument(help: "The recorded dry voice (any file the decoder reads).")
    var take: String

    @Option(help: "easy, medium or hard.")
    var difficulty: SingingDifficulty = .medium

    @Option(help: "The part of a duet to score: 1 … 9 (P1, P2, …).")
    var part: Int = 1

    @Option(name: .customLong("offset-ms"), help: "How late the voice is in the take, in milliseconds (negative: early).")
    var offsetMilliseconds: Double = 0

    @Option(name: .customLong("score-file"), help: "Also write the score as JSON to this file.")
    var scoreFile: String?

    func run() throws {
        do throws(AudioError) {
            guard (1...9).contains(part) else { throw AudioError(.invalidParameter, "--part must be 1 … 9, got \(part)") }
            guard offsetMilliseconds.isFinite, abs(offsetMilliseconds) <= 60_000 else {
                throw AudioError(.invalidParameter, "--offset-ms must be within ±60000, got \(offsetMilliseconds)")
            }
            let song = try SongChart.load(path: chart)
            for warning in song.warnings { StandardStream.error("liveaudio: warning: \(warning)\n") }
            let result = try TakeScoring.score(
                take: take, chart: song, part: part, difficulty: difficulty, lateBy: offsetMilliseconds / 1000)
            print(ScoreReport.summary(result, title: song.title, artist: song.artist, difficulty: difficulty))
            for line in result.lines { print(ScoreReport.line(line)) }
            if let scoreFile {
                try ScoreReport.write(result.json(difficulty: difficulty, roundTripSeconds: offsetMilliseconds / 1000), to: scoreFile)
            }
        } catch {
            throw fail(error)
        }
    }
}

struct Pitch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the pitch of a voice in a file: time, frequency, confidence, voiced — every 10 ms, as CSV.",
        discussion: """
            The estimator the pitchTracker node runs (YIN, 65 … 1100 Hz by default): times are seconds from the \
            file's first sample, at the centre of the audio each estimate describes; frequency in Hz, the best \
            guess even where the voiced column says 0.
            """)

    @Argument(help: "The file (any the decoder reads, mixed to mono).")
    var file: String

    @Option(name: .customLong("min"), help: "The lowest frequency looked for, Hz.")
    var minimumFrequency: Double = 65

    @Option(name: .customLong("max"), help: "The highest frequency looked for, Hz.")
    var maximumFrequency: Double = 1_100

    func run() throws {
        do throws(AudioError) {
            var c = PitchEstimator.Configuration()
            c.minimumFrequency = minimumFrequency
            c.maximumFrequency = maximumFrequency
            var out = "time,frequency,confidence,voiced\n"
            for e in try TakeScoring.pitch(ofFile: file, configuration: c) {
                out += String(cFormat: "%.4f,%.2f,%.3f,%d\n", e.time, e.frequency, e.confidence, e.voiced ? 1 : 0)
            }
            StandardStream.output(out)
        } catch {
            throw fail(error)
        }
    }
}

/// How scores read on a terminal and in files.
enum ScoreReport {
    static func summary(_ r: SingingScore.Result, title: String, artist: String, difficulty: SingingDifficulty) -> String {
        let name = [artist, title].filter { !$0.isEmpty }.joined(separator: " – ")
        return "\(name.isEmpty ? "score" : name) (\(difficulty.rawValue)): \(r.total) — notes \(Int(r.notes.rounded())), "
            + "golden \(Int(r.golden.rounded())), line bonus \(Int(r.lineBonus.rounded())); \(r.beatsHit) of \(r.beatsJudged) beats hit"
    }

    static func line(_ l: SingingScore.LineResult) -> String {
        String(cFormat: "%7.2f s  ", l.start) + l.rating.padded(to: 8) + String(cFormat: "%3d %%  ", Int((l.hitRatio * 100).rounded())) + l.text
    }

    static func write(_ text: String, to path: String) throws(AudioError) {
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw AudioError(.fileIO, "cannot write the score to \(path): \(error)")
        }
    }
}
