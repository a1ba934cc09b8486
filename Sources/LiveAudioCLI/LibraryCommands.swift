import ArgumentParser
import LiveAudio
import SongLibrary

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `liveaudio library …`: the song library in SQLite (docs/library.md).
struct Library: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The song library: scan folders of songs, search them, list them.",
        discussion: """
            The library is a SQLite file, by default $XDG_DATA_HOME/liveaudio/library.sqlite \
            (~/.local/share/liveaudio/library.sqlite); --db names another. UltraStar folders (a chart .txt with its \
            audio) and plain audio files (with a .lrc of the same name, or none) are indexed; charts are read, \
            audio only checked to exist. See docs/library.md.
            """,
        subcommands: [LibraryScan.self, LibrarySearch.self, LibraryList.self])
}

/// The `--db` option every library command takes.
struct LibraryDatabaseOption: ParsableArguments {
    @Option(name: .customLong("db"), help: "The library's SQLite file (default: $XDG_DATA_HOME/liveaudio/library.sqlite).")
    var database: String?

    var path: String {
        database ?? SongLibrary.defaultPath(environment: ProcessInfo.processInfo.environment)
    }

    func open(_ access: SongLibrary.Access) throws(AudioError) -> SongLibrary {
        try SongLibrary(path: path, access: access)
    }
}

struct LibraryScan: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Index folders of songs into the library (again: only what changed; gone files dropped).",
        discussion: """
            Every folder under each DIR is read, symlinks followed and loops cut. A chart no game could play, or \
            whose audio is missing, is kept as broken with its reason and never offered; a folder that cannot be \
            read, a symlink loop, a .txt too large for a chart are reported and passed over. Without DIR, the \
            folders scanned before are scanned again.
            """)

    @Argument(help: "Folders of songs (default: the folders scanned before).")
    var folders: [String] = []

    @OptionGroup var library: LibraryDatabaseOption

    @Flag(name: .shortAndLong, help: "Print only the summary line, not each broken song and skipped file.")
    var quiet = false

    func run() throws {
        do throws(AudioError) {
            let songs = try library.open(.writer)
            let report = try songs.scan(folders)
            let total = try songs.count()
            if !quiet {
                for problem in report.broken { print("broken: \(problem.path): \(problem.reason)") }
                for problem in report.skipped { print("skipped: \(problem.path): \(problem.reason)") }
            }
            print(
                "\(total) songs in \(songs.path): \(report.added) added, \(report.updated) updated, \(report.unchanged) unchanged, \(report.removed) removed; \(report.broken.count) broken, \(report.skipped.count) skipped (\(String(format: "%.2f", report.seconds)) s)")
        } catch {
            throw fail(error)
        }
    }
}

struct LibrarySearch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "search",
        abstract: "Find songs by words in any order (title, artist, language, genre, edition, year, singers).",
        discussion: """
            Each word matches a word or its start, accents and case ignored: `thek madch` and `thekenmadchen` both \
            find "Thekenmädchen". Best matches first.
            """)

    @Argument(help: "The words.")
    var words: [String] = []

    @Option(help: "At most this many songs (1 … 1000).")
    var limit: Int = 20

    @Flag(help: "Print a JSON array (as `library list --json`).")
    var json = false

    @OptionGroup var library: LibraryDatabaseOption

    func run() throws {
        do throws(AudioError) {
            let songs = try library.open(.reader).search(words.joined(separator: " "), limit: limit)
            if json {
                print(try LibraryJSON.encode(songs))
            } else {
                for song in songs { print(LibraryJSON.row(song)) }
            }
        } catch {
            throw fail(error)
        }
    }
}

struct LibraryList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the library's songs (by artist and title).",
        discussion: "--json prints a JSON array of the playable songs; --broken lists the songs that cannot be sung, with their reasons.")

    @Flag(help: "Print a JSON array of the playable songs.")
    var json = false

    @Flag(help: "List the songs that cannot be sung, with their reasons, instead.")
    var broken = false

    @OptionGroup var library: LibraryDatabaseOption

    func run() throws {
        do throws(AudioError) {
            let opened = try library.open(.reader)
            let songs = broken ? try opened.brokenSongs() : try opened.songs()
            if json {
                print(try LibraryJSON.encode(songs))
            } else if broken {
                for song in songs { print("\(song.path): \(song.problem ?? "")") }
            } else {
                for song in songs { print(LibraryJSON.row(song)) }
            }
        } catch {
            throw fail(error)
        }
    }
}

/// The library's songs as the commands print them.
enum LibraryJSON {
    /// One song in `list --json`: what a program choosing songs needs.
    struct Song: Encodable {
        var id: Int64
        var title: String
        var artist: String
        var language: String?
        var genre: String?
        var year: Int?
        var edition: String?
        var creator: String?
        var kind: String
        var duet: Bool
        var parts: [Int]
        var singers: [String]
        var length: Double?
        var audioLength: Double?
        var bpm: Double?
        var path: String
        var audio: String?
        var lyrics: String?
        var hash: String
        var warnings: [String]
        var problem: String?
    }

    static func encode(_ songs: [LibrarySong]) throws(AudioError) -> String {
        let rows = songs.map { s in
            Song(
                id: s.id ?? 0, title: s.title, artist: s.artist, language: s.language, genre: s.genre, year: s.year,
                edition: s.edition, creator: s.creator, kind: s.kind.rawValue, duet: s.isDuet, parts: s.parts,
                singers: s.singers, length: s.length.map { ($0 * 1000).rounded() / 1000 }, audioLength: s.audioLength, bpm: s.bpm,
                path: s.path, audio: s.audio, lyrics: s.lyrics, hash: s.hash, warnings: s.warnings, problem: s.problem)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do {
            return String(decoding: try encoder.encode(rows), as: UTF8.self)
        } catch {
            throw AudioError(.invalidParameter, "cannot write the songs as JSON: \(error)")
        }
    }

    /// `id  artist – title  (duet: A & B)  3:25`
    static func row(_ song: LibrarySong) -> String {
        var text = "\(song.id ?? 0)\t\(song.artist.isEmpty ? "" : song.artist + " – ")\(song.title)"
        if song.isDuet { text += "  (duet\(song.singers.isEmpty ? "" : ": " + song.singers.joined(separator: " & ")))" }
        if let length = song.length ?? song.audioLength {
            let seconds = Int(length.rounded())
            text += "\t\(seconds / 60):\(seconds % 60 < 10 ? "0" : "")\(seconds % 60)"
        }
        return text
    }
}

/// `liveaudio scores [WORDS]`: the highscores kept in the library.
struct Scores: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the top five scores of the songs sung (those WORDS find, or every song with scores).",
        discussion: """
            Every take's score is kept in the song library (by the song's notes: a moved or renamed chart keeps its \
            scores), per difficulty and part. See docs/library.md.
            """)

    @Argument(help: "Words that find the songs (as `library search`); none: every song with scores.")
    var words: [String] = []

    @Option(help: "Only this difficulty: easy, medium or hard.")
    var difficulty: SingingDifficulty?

    @Option(help: "How many scores per song and difficulty (1 … 100).")
    var top: Int = 5

    @OptionGroup var library: LibraryDatabaseOption

    func run() throws {
        do throws(AudioError) {
            let opened = try library.open(.reader)
            var songs: [(hash: String, title: String, artist: String)]
            if words.isEmpty {
                songs = try opened.scoredSongs()
            } else {
                var seen: Set<String> = []
                songs = try opened.search(words.joined(separator: " "), limit: 200).compactMap { song in
                    seen.insert(song.hash).inserted ? (song.hash, song.title, song.artist) : nil
                }
            }
            var printed = 0
            for song in songs {
                var block: [String] = []
                for level in difficulty.map({ [$0] }) ?? SingingDifficulty.allCases {
                    let best = try opened.topScores(songHash: song.hash, difficulty: level, limit: top)
                    guard !best.isEmpty else { continue }
                    block.append("  \(level.rawValue):")
                    for (n, s) in best.enumerated() {
                        block.append("    \(n + 1). \(s.singerName)  \(s.score)  (P\(s.part), \(Self.date(s.date)))")
                    }
                }
                guard !block.isEmpty else { continue }
                print("\(song.artist.isEmpty ? "" : song.artist + " – ")\(song.title)")
                for line in block { print(line) }
                printed += 1
            }
            if printed == 0 { print(words.isEmpty ? "no scores yet" : "no scores for the songs '\(words.joined(separator: " "))' finds") }
        } catch {
            throw fail(error)
        }
    }

    /// `2026-12-05 21:14`, local time.
    static func date(_ seconds: Double) -> String {
        var time = time_t(seconds)
        var parts = tm()
        localtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M", &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
