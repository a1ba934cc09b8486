import GRDB

/// A song of the library: an UltraStar chart (with its audio and, maybe, its LRC), or an audio file with a sidecar
/// LRC or none (sung without words). What the scan learnt from its chart, never from its audio: the audio is only
/// checked to exist; its length (``audioLength``) is learnt when it is first played.
public struct LibrarySong: Codable, Sendable, Equatable, Identifiable, FetchableRecord, MutablePersistableRecord {
    /// The table the songs are kept in.
    public static let databaseTableName = "song"

    /// What the song was found as.
    public enum Kind: String, Codable, Sendable {
        /// An UltraStar TXT chart: lyrics, notes, scores.
        case ultraStar = "ultrastar"
        /// An audio file with no chart: its sidecar LRC's words, or none.
        case audio
    }

    /// The row's id: stable across rescans of the same file (a queue entry names it).
    public var id: Int64?
    /// The chart's path (or the audio file's, for a song without a chart), absolute, as the scan reached it.
    public var path: String
    /// Chart or plain audio.
    public var kind: Kind
    /// `#TITLE` (or the LRC's `[ti:]`, or the file's name).
    public var title: String
    /// `#ARTIST` (or the LRC's `[ar:]`, or the part of the file's name before " - ").
    public var artist: String
    /// `#LANGUAGE` as written (the LRC's `[la:]`); nil when absent.
    public var language: String?
    /// `#GENRE` as written; nil when absent.
    public var genre: String?
    /// `#EDITION` as written (the collection the chart came with); nil when absent.
    public var edition: String?
    /// `#CREATOR` (or `#AUTHOR`): who wrote the chart; nil when absent.
    public var creator: String?
    /// `#YEAR`, when it is a year.
    public var year: Int?
    /// The parts' numbers (`P1` is 1); one for a song sung alone, none for a song without notes.
    public var parts: [Int]
    /// The duet's singers as the chart names them (`#P1`, `#P2`, …), in the order of ``parts``; empty when unnamed.
    public var singers: [String]
    /// Seconds the chart spans: `#END`, else its last note's (or LRC line's) end; nil for audio without words.
    public var length: Double?
    /// The audio's own length in seconds, once it has been played (nil before).
    public var audioLength: Double?
    /// `#BPM`; nil without a chart.
    public var bpm: Double?
    /// The audio file to play (absolute); nil when the song's audio is missing (then ``problem`` says so).
    public var audio: String?
    /// The LRC file shown with an audio file (absolute), if any.
    public var lyrics: String?
    /// The chart file's size in bytes (an audio file's and its LRC's together, for a song without a chart): a
    /// rescan reads a song again only when it or ``modified`` changes.
    public var size: Int64
    /// The chart file's modification time, nanoseconds since 1970 (for a song without a chart, its audio's and
    /// LRC's added up).
    public var modified: Int64
    /// A hash of what is sung (the notes, or the words), not of the file: a renamed or moved file keeps its scores.
    public var hash: String
    /// What the chart's reader let pass (each naming its line), and what the audio's lookup noticed.
    public var warnings: [String]
    /// Why the song cannot be sung (a chart no game could play, its audio missing); nil for a playable song.
    public var problem: String?

    /// The columns a scan writes (all but ``audioLength``, which playing learns).
    static let scannedColumns = [
        "path", "kind", "title", "artist", "language", "genre", "edition", "creator", "year", "parts", "singers", "length",
        "bpm", "audio", "lyrics", "size", "modified", "hash", "warnings", "problem",
    ]

    /// True for a duet: a chart with more than one part.
    public var isDuet: Bool { parts.count > 1 }
    /// True when it can be offered for singing.
    public var isPlayable: Bool { problem == nil && audio != nil }

    /// Takes the id SQLite gave the new row.
    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}
