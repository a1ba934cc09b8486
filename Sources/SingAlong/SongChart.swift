import AudioCore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A song to sing along to: its lyrics in lines of syllables, each syllable timed, and — from an UltraStar chart —
/// the melody as notes the singer is scored against. Read from an UltraStar TXT chart
/// (``ultraStar(bytes:name:folder:)``) or from LRC lyrics (``lrc(bytes:name:folder:)``), which have words and times but
/// no notes; ``load(path:)`` picks by the file's extension.
///
/// Times are seconds of the song's audio file (an UltraStar chart's `#GAP` and `#BPM` applied; an LRC file's
/// `[offset:]` applied).
public struct SongChart: Sendable, Equatable {
    /// Where a chart came from.
    public enum Format: Sendable, Equatable {
        /// UltraStar TXT, with the `#VERSION` it declares (nil: the older, unversioned format).
        case ultraStar(version: String?)
        /// LRC lyrics: lines and (enhanced LRC) word times, no notes.
        case lrc
    }

    /// The file format the chart was read from.
    public var format: Format
    /// The song's title: `#TITLE` (UltraStar) or `[ti:]` (LRC); empty when absent.
    public var title: String
    /// The song's artist: `#ARTIST` (UltraStar) or `[ar:]` (LRC); empty when absent.
    public var artist: String
    /// Every header as written, keys in capitals without the `#` (UltraStar) or the id tags (LRC: `AR`, `TI`, …),
    /// those LiveAudio does not use included.
    public var headers: [String: String]
    /// `#BPM` as written (a chart's beat lasts 60 / (4 × bpm) s); nil for LRC.
    public var beatsPerMinute: Double?
    /// `#GAP`: milliseconds from the audio's start to beat 0 (0 when absent).
    public var gapMilliseconds: Double
    /// `#START` in seconds: where a game starts the song; nil when absent (and for LRC).
    public var startSeconds: Double?
    /// `#END` in milliseconds: where a game ends the song; nil when absent (and for LRC).
    public var endMilliseconds: Double?
    /// The folder the chart's file references are relative to.
    public var folder: String
    /// The voices: one for most songs, two or more for a duet (`P1`, `P2`, …), in the order of their numbers.
    public var voices: [Voice]
    /// What the parser let pass but a user may want to know (an unknown note type read as freestyle, a BPM change
    /// line ignored, text read as CP1252 because it was not UTF-8, …), each naming its line.
    public var warnings: [String]

    /// One singer's part.
    public struct Voice: Sendable, Equatable {
        /// The number after `P` (1 for a song without voice changes).
        public var number: Int
        /// The `#P1` … `#P9` header's name for it, if any.
        public var name: String?
        /// The part's lyric lines, in order of time.
        public var lines: [Line]

        /// Every syllable of the part, in order.
        public var syllables: [Syllable] { lines.flatMap(\.syllables) }
        /// Every note of the part, in order.
        public var notes: [Note] { lines.flatMap { $0.syllables.compactMap(\.note) } }
    }

    /// A lyric line (a phrase): its syllables in order.
    public struct Line: Sendable, Equatable {
        /// The line's syllables, in order.
        public var syllables: [Syllable]
        /// When the line is sung, in seconds: from its first syllable's start (an LRC line: its time tag, which may
        /// come before its first word's time) to its last syllable's end.
        public var start: Double
        /// When the line ends, in seconds (see ``start``).
        public var end: Double
        /// The line's text: its syllables joined as written (UltraStar syllables carry their own spaces).
        public var text: String { syllables.map(\.text).joined().trimmingSpaces }
    }

    /// A piece of text sung at a time: an UltraStar note's syllable, or an LRC word (or a whole line without word
    /// times).
    public struct Syllable: Sendable, Equatable {
        /// The text as written (UltraStar syllables carry their own spaces).
        public var text: String
        /// When it starts, in seconds of the song's audio.
        public var start: Double
        /// When it ends, in seconds of the song's audio: an UltraStar note's last beat's end; an LRC word's next
        /// word's start (the last word's: its line's end).
        public var end: Double
        /// The note (UltraStar); nil for LRC text.
        public var note: Note?
    }

    /// An UltraStar note.
    public struct Note: Sendable, Equatable {
        /// The note type.
        public var kind: NoteKind
        /// The beat the note starts on, counted from beat 0 at `#GAP` (a `#RELATIVE` file's offsets applied).
        public var startBeat: Int
        /// The note's length in beats.
        public var beats: Int
        /// Semitones from C4 (middle C, MIDI 60): 5 is F4, −2 is A♯3. Meaningless for rap and freestyle notes.
        public var pitch: Int
        /// The note's MIDI number (60 + ``pitch``).
        public var midiNote: Int { 60 + pitch }
        /// The file line it was read from (1-based).
        public var sourceLine: Int
    }

    /// The note types of the UltraStar format.
    public enum NoteKind: String, Sendable, Equatable, CaseIterable {
        /// `:` sung at its pitch.
        case normal = ":"
        /// `*` sung at its pitch, worth double.
        case golden = "*"
        /// `F` no pitch, no points.
        case freestyle = "F"
        /// `R` spoken: hit when voiced, pitch ignored.
        case rap = "R"
        /// `G` spoken, worth double.
        case goldenRap = "G"

        /// The weight of one of its beats in the score: 0 for freestyle, 2 for golden notes, 1 otherwise.
        public var scoreFactor: Int {
            switch self {
            case .freestyle: 0
            case .normal, .rap: 1
            case .golden, .goldenRap: 2
            }
        }
        /// True for notes sung at a pitch (normal and golden).
        public var hasPitch: Bool { self == .normal || self == .golden }
    }

    /// Seconds from the audio's start to the start of `beat`: GAP / 1000 + beat × 60 / (BPM × 4). For LRC
    /// (no BPM), 0.
    public func time(ofBeat beat: Double) -> Double {
        guard let bpm = beatsPerMinute else { return 0 }
        return gapMilliseconds / 1000 + beat * 60 / (bpm * 4)
    }

    /// The beat at `seconds` of the audio (fractional); nil for LRC.
    public func beat(at seconds: Double) -> Double? {
        guard let bpm = beatsPerMinute else { return nil }
        return (seconds - gapMilliseconds / 1000) * bpm * 4 / 60
    }

    /// The part numbered `number` (`P1` is 1).
    public func voice(_ number: Int) -> Voice? { voices.first { $0.number == number } }

    /// True when the chart has notes to score (an UltraStar chart); false for lyrics alone.
    public var hasNotes: Bool { voices.contains { !$0.notes.isEmpty } }

    // MARK: The song's audio

    /// The audio file to play, from the headers in this order: `#INSTRUMENTAL` (the accompaniment alone, what a
    /// karaoke plays), else `#AUDIO`, else `#MP3` — relative to the chart's folder (see ``songReference()``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` when no header names one, `.fileIO` naming the header and
    ///   the path when that file is missing.
    public func songPath() throws(AudioError) -> String {
        try songReference().path
    }

    /// The audio file to play and what was made of its headers: `#INSTRUMENTAL`, else `#AUDIO`, else `#MP3`,
    /// relative to the chart's folder. Charts in the wild name files that are not there: when the first named is
    /// missing, `#AUDIO` and `#MP3` stand in for each other (and for a missing `#INSTRUMENTAL`), and a name that
    /// differs from the file's only in case (written on a system that ignores case) finds it — each with a warning.
    /// - Returns: the path, and the warnings (empty when the first header named an existing file exactly).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` when no header names one, `.fileIO` naming the header and
    ///   the path when no named file is there.
    public func songReference() throws(AudioError) -> (path: String, warnings: [String]) {
        let named = ["INSTRUMENTAL", "AUDIO", "MP3"].compactMap { key in
            headers[key].flatMap { $0.isEmpty ? nil : (key: key, value: $0) }
        }
        guard let first = named.first else {
            throw AudioError(.invalidChart, "\(title.isEmpty ? "the chart" : "'\(title)'") names no audio file (#INSTRUMENTAL, #AUDIO or #MP3)")
        }
        var warnings: [String] = []
        var firstError: AudioError?
        for (index, reference) in named.enumerated() {
            do throws(AudioError) {
                let found = try existingReference(reference.key, reference.value, anyCase: true)
                if index > 0 {
                    warnings.insert("#\(first.key) names '\(first.value)', which is not there: #\(reference.key) '\(reference.value)' plays instead", at: 0)
                }
                if found.hasSuffix("/" + reference.value) == false, found != reference.value {
                    warnings.append("#\(reference.key) '\(reference.value)' found as '\(FilePath.lastComponent(found))' (the name's case differs)")
                }
                return (found, warnings)
            } catch {
                if firstError == nil { firstError = error }
                if error.code == .invalidChart { throw error }
            }
        }
        throw firstError!
    }
    /// The `#VOCALS` file (the voice alone), if the chart names one. Relative to the chart's folder.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when it is named but missing.
    public func vocalsPath() throws(AudioError) -> String? {
        guard let value = headers["VOCALS"], !value.isEmpty else { return nil }
        return try existingReference("VOCALS", value)
    }

    private func existingReference(_ key: String, _ value: String, anyCase: Bool = false) throws(AudioError) -> String {
        guard !value.hasPrefix("/") else {
            throw AudioError(.invalidChart, "#\(key):\(value): charts name files relative to their folder, not by absolute paths")
        }
        let path = folder == "." ? value : folder + "/" + value
        var status = stat()
        if stat(path, &status) == 0, status.st_mode & S_IFMT != S_IFDIR { return path }
        // The same name in another case, in the folder the reference points into.
        if anyCase {
            let inner = FilePath.folder(of: path)
            let wanted = FilePath.lastComponent(path).lowercased()
            if let names = try? FileManager.default.contentsOfDirectory(atPath: inner),
                let match = names.sorted().first(where: { $0.lowercased() == wanted })
            {
                let candidate = inner == "." && !path.hasPrefix("./") ? match : inner + "/" + match
                if stat(candidate, &status) == 0, status.st_mode & S_IFMT != S_IFDIR { return candidate }
            }
        }
        throw AudioError(.fileIO, "#\(key) names '\(value)', which is not in \(folder == "." ? "the current folder" : folder)")
    }

    // MARK: Loading

    /// Reads a chart: LRC lyrics for a `.lrc` file, an UltraStar chart otherwise.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the file cannot be read; `.invalidChart` with the file, line
    ///   and field for what is wrong in it.
    public static func load(path: String) throws(AudioError) -> SongChart {
        guard let data = FileManager.default.contents(atPath: path) else {
            let exists = FileManager.default.fileExists(atPath: path)
            throw AudioError(.fileIO, exists ? "cannot read \(path)" : "no such file: \(path)")
        }
        let bytes = [UInt8](data)
        let folder = FilePath.folder(of: path)
        if path.lowercased().hasSuffix(".lrc") { return try lrc(bytes: bytes, name: path, folder: folder) }
        return try ultraStar(bytes: bytes, name: path, folder: folder)
    }
}

extension String {
    var trimmingSpaces: String { String(self[...].trimmedWhitespace) }
}
