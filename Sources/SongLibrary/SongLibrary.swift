import AudioCore
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// The evening's songs, kept in SQLite: a library of UltraStar folders and audio files (``scan(_:)``), searched as
/// you type (``search(_:limit:)``), listed (``songs(includeBroken:)``).
///
/// One file (``defaultPath(environment:)``: `$XDG_DATA_HOME/liveaudio/library.sqlite`), in WAL mode: readers never
/// wait for the writer. One process writes at a time: opened ``Access/writer`` (a scan, an evening), the library
/// holds a lock beside the file that a second writer is refused with (``/AudioCore/AudioError/Code/busy``); readers
/// (a search, a list) open it whatever holds it.
///
/// **Thread safety**: every method may be called from any thread; SQLite's own connections are serialized by GRDB.
public final class SongLibrary: Sendable {
    /// Whether the library is opened to change it.
    public enum Access: Sendable {
        /// Reads only: several readers and one writer at a time.
        case reader
        /// Reads and writes (scans, the queue, scores): one process at a time.
        case writer
    }

    /// The database file.
    public let path: String
    let pool: DatabasePool
    /// The writer's lock (an open descriptor holding `flock`), closed with the library.
    private let lock: Int32

    /// The library's file when none is named: `$XDG_DATA_HOME/liveaudio/library.sqlite`, else
    /// `$HOME/.local/share/liveaudio/library.sqlite` (the XDG base directory specification's default).
    public static func defaultPath(environment: [String: String]) -> String {
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") { return data + "/liveaudio/library.sqlite" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? "."
        return home + "/.local/share/liveaudio/library.sqlite"
    }

    /// Opens (creating when absent, with its folder) the library at `path`.
    /// - Throws: ``/AudioCore/AudioError`` `.busy` when `access` is `.writer` and another process writes to it,
    ///   `.database` when the file is not a library (another SQLite file, a newer LiveAudio's) or cannot be opened,
    ///   `.fileIO` when its folder cannot be made.
    public init(path: String, access: Access = .reader) throws(AudioError) {
        self.path = path
        let folder = FilePath.folder(of: path)
        try Self.makeFolder(folder)
        var descriptor: Int32 = -1
        if access == .writer {
            descriptor = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                throw AudioError(.fileIO, "cannot open \(path).lock: \(String(cString: strerror(errno)))")
            }
            if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                let holder = Self.holder(descriptor)
                close(descriptor)
                throw AudioError(
                    .busy,
                    "the song library \(path) is in use by another liveaudio\(holder.map { " (process \($0))" } ?? ""): stop it first, or give this one another with --db")
            }
            let pid = "\(getpid())\n"
            _ = ftruncate(descriptor, 0)
            _ = pid.utf8CString.withUnsafeBufferPointer { pwrite(descriptor, $0.baseAddress, pid.utf8.count, 0) }
        }
        // The pool is made and migrated before any stored property is set: a failure closes the lock here, once.
        let opened: DatabasePool
        do {
            var configuration = Configuration()
            configuration.label = "liveaudio-library"
            configuration.readonly = false
            // A reader meeting the writer's checkpoint waits a little rather than failing.
            configuration.busyMode = .timeout(5)
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            opened = try DatabasePool(path: path, configuration: configuration)
            let migrator = LibrarySchema.migrator
            if try opened.read({ db in try migrator.hasBeenSuperseded(db) }) {
                throw AudioError(.database, "the song library \(path) was written by a newer LiveAudio: open it with that one, or give this one another with --db")
            }
            try migrator.migrate(opened)
        } catch let error as DatabaseError {
            if descriptor >= 0 { close(descriptor) }
            throw Self.failure("open", path, error)
        } catch let error as AudioError {
            if descriptor >= 0 { close(descriptor) }
            throw error
        } catch {
            if descriptor >= 0 { close(descriptor) }
            throw AudioError(.database, "cannot open the song library \(path): \(error)")
        }
        pool = opened
        lock = descriptor
    }

    deinit {
        if lock >= 0 { close(lock) }
    }

    /// What SQLite said, for a person: the file and the operation, and what to do for the common cases.
    static func failure(_ operation: String, _ path: String, _ error: DatabaseError) -> AudioError {
        let what = error.message ?? "\(error.resultCode)"
        switch error.resultCode {
        case .SQLITE_NOTADB:
            return AudioError(.database, "\(path) is not a song library (SQLite: \(what)): give another file with --db")
        case .SQLITE_CORRUPT:
            return AudioError(.database, "the song library \(path) is damaged (SQLite: \(what)): move it aside and scan the songs again")
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return AudioError(.busy, "the song library \(path) is busy (SQLite: \(what)): try again")
        case .SQLITE_READONLY, .SQLITE_CANTOPEN, .SQLITE_PERM:
            return AudioError(.database, "cannot \(operation) the song library \(path) (SQLite: \(what)): check the file and its folder's permissions")
        case .SQLITE_FULL:
            return AudioError(.database, "cannot \(operation) the song library \(path): the disk is full")
        default:
            return AudioError(.database, "cannot \(operation) the song library \(path) (SQLite: \(what))")
        }
    }

    /// Runs `body` on the database, GRDB's errors turned into typed ones naming `operation`.
    func read<T: Sendable>(_ operation: String, _ body: @Sendable (Database) throws -> T) throws(AudioError) -> T {
        do {
            return try pool.read(body)
        } catch let error as DatabaseError {
            throw Self.failure(operation, path, error)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.database, "cannot \(operation) the song library \(path): \(error)")
        }
    }

    func write<T: Sendable>(_ operation: String, _ body: @Sendable (Database) throws -> T) throws(AudioError) -> T {
        do {
            return try pool.write(body)
        } catch let error as DatabaseError {
            throw Self.failure(operation, path, error)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.database, "cannot \(operation) the song library \(path): \(error)")
        }
    }

    private static func makeFolder(_ folder: String) throws(AudioError) {
        var status = stat()
        if stat(folder, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFDIR else { throw AudioError(.fileIO, "\(folder) is not a folder: the song library cannot be made in it") }
            return
        }
        let parent = FilePath.folder(of: folder)
        if parent != folder { try makeFolder(parent) }
        guard mkdir(folder, 0o755) == 0 || errno == EEXIST else {
            throw AudioError(.fileIO, "cannot make the folder \(folder) for the song library: \(String(cString: strerror(errno)))")
        }
    }

    /// The process id the lock's holder wrote into it, if readable.
    private static func holder(_ descriptor: Int32) -> Int? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = pread(descriptor, &buffer, 31, 0)
        guard count > 0 else { return nil }
        return Int(String(decoding: buffer[..<count], as: UTF8.self).filter(\.isNumber))
    }

    // MARK: Songs

    /// The song with this id, or nil.
    public func song(id: Int64) throws(AudioError) -> LibrarySong? {
        try read("read") { db in try LibrarySong.fetchOne(db, key: id) }
    }

    /// Every song, ordered by artist and title (case-insensitive): the playable ones, and with `includeBroken` those
    /// that cannot be sung too (each with its ``LibrarySong/problem``).
    public func songs(includeBroken: Bool = false) throws(AudioError) -> [LibrarySong] {
        try read("list") { db in
            try LibrarySong.fetchAll(
                db,
                sql: "SELECT * FROM song \(includeBroken ? "" : "WHERE problem IS NULL") ORDER BY artist COLLATE NOCASE, title COLLATE NOCASE, path")
        }
    }

    /// The songs that cannot be sung, with their reasons, by path.
    public func brokenSongs() throws(AudioError) -> [LibrarySong] {
        try read("list") { db in try LibrarySong.fetchAll(db, sql: "SELECT * FROM song WHERE problem IS NOT NULL ORDER BY path") }
    }

    /// How many playable songs the library holds.
    public func count() throws(AudioError) -> Int {
        try read("count") { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM song WHERE problem IS NULL") ?? 0 }
    }

    /// Records the audio's own length, learnt when the song is first played.
    public func setAudioLength(_ seconds: Double, of id: Int64) throws(AudioError) {
        guard seconds.isFinite, seconds >= 0 else { return }
        try write("update") { db in try db.execute(sql: "UPDATE song SET audioLength = ? WHERE id = ?", arguments: [seconds, id]) }
    }

    /// The folders scanned before, in the order they were first scanned.
    public func roots() throws(AudioError) -> [String] {
        try read("read") { db in try String.fetchAll(db, sql: "SELECT path FROM root ORDER BY rowid") }
    }
}
