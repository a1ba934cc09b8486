import AudioCore
import Dispatch
import GRDB
import SingAlong

#if canImport(Glibc)
import Glibc
#endif

/// What a scan did.
public struct LibraryScanReport: Sendable, Equatable {
    /// A file or folder and what is wrong with it.
    public struct Problem: Sendable, Equatable {
        /// The file or folder.
        public var path: String
        /// What is wrong with it, for a person.
        public var reason: String
    }

    /// Songs new to the library.
    public var added = 0
    /// Songs read again because their files changed.
    public var updated = 0
    /// Songs left as they were.
    public var unchanged = 0
    /// Songs dropped because their files are gone.
    public var removed = 0
    /// Songs that cannot be sung (kept in the library with their reasons, never offered).
    public var broken: [Problem] = []
    /// What the scan passed over and why: a folder it cannot read, a symlink loop, a file too large for a chart, a
    /// name that is not UTF-8. The scan goes on past each.
    public var skipped: [Problem] = []
    /// Seconds the scan took.
    public var seconds = 0.0
}

extension SongLibrary {
    /// The largest file read as a chart: real charts are a few kilobytes, the longest under 100 kB.
    public static let chartSizeLimit: Int64 = 1 << 20
    /// The audio files a song may be (by extension, any case).
    public static let audioExtensions: Set<String> = ["mp3", "ogg", "oga", "opus", "m4a", "aac", "flac", "wav", "wma", "webm", "mp4"]

    /// Indexes `folders` (every folder under them, symlinks followed, loops cut): each UltraStar chart (`.txt`) with
    /// its audio, and in a folder without charts each audio file, with the `.lrc` of the same name if there is one.
    /// Charts are read, audio only checked to exist. A rescan reads only files whose size or modification time
    /// changed and drops songs whose files are gone; songs under a folder that cannot be read now are kept as they
    /// were. No folders: the folders scanned before.
    ///
    /// `.txt` files that are not charts (no UltraStar header in their first 4 kB) are passed over quietly; charts no
    /// game could play are kept as broken songs with the reason; a folder that cannot be read, a symlink loop, a
    /// `.txt` over ``chartSizeLimit`` are reported in ``LibraryScanReport/skipped`` and the scan goes on.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` with no folders given nor scanned before; `.database`
    ///   when the library cannot be written (the songs indexed before that stay).
    public func scan(_ folders: [String]) throws(AudioError) -> LibraryScanReport {
        let started = Self.now()
        var roots = folders
        if roots.isEmpty { roots = try self.roots() }
        guard !roots.isEmpty else {
            throw AudioError(.invalidParameter, "no folder to scan: name one (liveaudio library scan DIR…)")
        }
        var scanner = LibraryScanner(library: self)
        for folder in roots { try scanner.scan(root: folder) }
        try scanner.flush()
        scanner.report.seconds = Self.now() - started
        return scanner.report
    }

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}

/// A path as bytes: what the scan's maps are keyed by (a `String` key hashes and compares by Unicode canonical
/// equivalence, which was a third of a rescan of 80,000 songs with accented names).
struct PathKey: Hashable, Sendable {
    var bytes: [UInt8]
    init(_ path: String) { bytes = Array(path.utf8) }
    init(bytes: [UInt8]) { self.bytes = bytes }
    var path: String { String(decoding: bytes, as: UTF8.self) }
}

/// A file the walk found: its name, size and modification time (nanoseconds).
struct FoundFile: Sendable {
    var name: String
    var size: Int64
    var modified: Int64
}

/// One folder's files, indexed on a worker.
struct FolderJob: Sendable {
    var folder: String
    var charts: [FoundFile]
    var audio: [FoundFile]
    var lyrics: [String: FoundFile]
}

/// What indexing one file came to, merged into the scan on the scan's thread.
enum FileOutcome: Sendable {
    /// As the library has it.
    case unchanged(PathKey)
    /// A new or changed song (broken or not) to write.
    case song(LibrarySong, broken: Bool)
    /// Passed over with a reason; `keep`: the library's song for it stays (a file that could not be read now).
    case skipped(String, reason: String, keep: Bool)
}

/// One scan's walk: the folders, what the library knew of each file, the rows to write in batches.
struct LibraryScanner {
    let library: SongLibrary
    var report = LibraryScanReport()

    /// What the library holds of a file, to tell whether it changed.
    struct Known: Sendable {
        var id: Int64
        var size: Int64
        var modified: Int64
        var audio: String?
        var problem: String?
    }

    /// The ids of the library's songs this scan met (kept), under any of its roots: a song under a scanned folder
    /// not among them is gone (a folder under two roots is walked once, its songs met once). The library's rows themselves are looked up a batch of files at a time, never all held at once
    /// (a rescan of 80,000 songs stays under 100 MB).
    var met: Set<Int64> = []
    /// Folders that could not be read: songs under them are kept.
    var unreadable: [String] = []
    var visited: Set<[UInt64]> = []
    var pending: [LibrarySong] = []
    /// Folders waiting to be indexed, on two threads, in batches.
    var jobs: [FolderJob] = []
    var jobFiles = 0
    /// The first error writing a batch met during the walk: thrown when the walk ends.
    var failure: AudioError?

    init(library: SongLibrary) { self.library = library }

    mutating func scan(root given: String) throws(AudioError) {
        guard let resolved = realpath(given, nil) else {
            report.skipped.append(.init(path: given, reason: "cannot open the folder: \(String(cString: strerror(errno)))"))
            return
        }
        let root = String(cString: resolved)
        free(resolved)
        var status = stat()
        guard stat(root, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            report.skipped.append(.init(path: given, reason: "not a folder"))
            return
        }
        unreadable = []
        walk(root)
        try flush()
        // Songs whose files are gone (and not behind a folder that could not be read).
        let prefix = root == "/" ? "/" : root + "/"
        let kept = met
        let skippedFolders = unreadable
        let gone = try library.read("read") { db in
            var gone: [Int64] = []
            let rows = try Row.fetchCursor(
                db, sql: "SELECT id, path FROM song WHERE path >= ? AND path < ?", arguments: [prefix, String(prefix.dropLast()) + "0"])
            while let row = try rows.next() {
                let id: Int64 = row["id"]
                if kept.contains(id) { continue }
                let path: String = row["path"]
                if skippedFolders.contains(where: { path == $0 || path.hasPrefix($0 + "/") }) { continue }
                gone.append(id)
            }
            return gone
        }
        if !gone.isEmpty {
            let ids = gone
            try library.write("update") { db in
                for chunk in stride(from: 0, to: ids.count, by: 500) {
                    let part = Array(ids[chunk..<min(chunk + 500, ids.count)])
                    try db.execute(
                        sql: "DELETE FROM song WHERE id IN (\(Array(repeating: "?", count: part.count).joined(separator: ",")))",
                        arguments: StatementArguments(part))
                }
            }
            report.removed += gone.count
        }
        let when = Double(time(nil))
        try library.write("update") { db in
            try db.execute(sql: "INSERT INTO root(path, scanned) VALUES (?, ?) ON CONFLICT(path) DO UPDATE SET scanned = excluded.scanned", arguments: [root, when])
        }
    }

    /// Every folder under `root`, level by level, each level's folders listed on two threads (system calls are
    /// what a rescan costs) and merged here in name order: each folder's songs queued as a job, loops cut.
    mutating func walk(_ root: String) {
        var level = [root]
        while !level.isEmpty {
            var next: [String] = []
            for start in stride(from: 0, to: level.count, by: 512) {
                let chunk = Array(level[start..<min(start + 512, level.count)])
                let listings = ListingSlots(count: chunk.count)
                DispatchQueue.concurrentPerform(iterations: chunk.count) { i in listings.set(i, Self.listFolder(chunk[i])) }
                for listing in listings.all {
                    if let problem = listing.problem {
                        report.skipped.append(.init(path: listing.folder, reason: problem))
                        unreadable.append(listing.folder)
                        continue
                    }
                    guard visited.insert(listing.key).inserted else {
                        // A symlink loop, or a folder scanned before under another root: its songs are as they were.
                        report.skipped.append(.init(path: listing.folder, reason: "a symlink loop: this folder was reached before by another path"))
                        unreadable.append(listing.folder)
                        continue
                    }
                    report.skipped += listing.skipped
                    unreadable += listing.unreadable
                    if !listing.job.charts.isEmpty || !listing.job.audio.isEmpty {
                        jobFiles += listing.job.charts.count + listing.job.audio.count
                        jobs.append(listing.job)
                        if jobFiles >= 256, failure == nil {
                            do throws(AudioError) { try indexJobs() } catch { failure = error }
                        }
                    }
                    next += listing.folders
                }
            }
            level = next
        }
    }

    /// What listing one folder found.
    struct FolderListing: Sendable {
        var folder: String
        /// The folder's device and inode (a folder met twice is a loop).
        var key: [UInt64] = []
        /// Why it could not be read.
        var problem: String?
        var job: FolderJob
        var folders: [String] = []
        var skipped: [LibraryScanReport.Problem] = []
        /// Entries that could not be looked at (a symlink to nothing: a drive not mounted): their songs are kept.
        var unreadable: [String] = []
    }

    /// One folder, opened once, its files looked at through the open folder (`fstatat`), audio files only when the
    /// folder turns out to have no chart (a chart's audio is found in the listing).
    static func listFolder(_ folder: String) -> FolderListing {
        var listing = FolderListing(folder: folder, job: FolderJob(folder: folder, charts: [], audio: [], lyrics: [:]))
        guard let directory = opendir(folder) else {
            listing.problem = "cannot read the folder: \(String(cString: strerror(errno)))"
            return listing
        }
        defer { closedir(directory) }
        let descriptor = dirfd(directory)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            listing.problem = "cannot read: \(String(cString: strerror(errno)))"
            return listing
        }
        listing.key = [UInt64(status.st_dev), UInt64(status.st_ino)]
        var entries: [(name: String, type: UInt8)] = []
        while let entry = readdir(directory) {
            let type = entry.pointee.d_type
            let name: String? = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(validatingCString: $0) }
            }
            guard let name else {
                listing.skipped.append(.init(path: folder + "/…", reason: "a name that is not UTF-8"))
                continue
            }
            if name == "." || name == ".." { continue }
            if name.hasPrefix(".") && type != DT_REG { continue }
            entries.append((name, type))
        }
        entries.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        for entry in entries {
            var kind = entry.type
            let suffix = Self.suffix(entry.name)
            let isAudio = SongLibrary.audioExtensions.contains(suffix)
            let wanted = suffix == "txt" || suffix == "lrc" || isAudio
            var file = FoundFile(name: entry.name, size: -1, modified: 0)
            if kind == DT_UNKNOWN || kind == DT_LNK || (kind == DT_REG && wanted && !isAudio) {
                var s = stat()
                guard fstatat(descriptor, entry.name, &s, 0) == 0 else {
                    if kind == DT_LNK { listing.skipped.append(.init(path: folder + "/" + entry.name, reason: "a symlink to nothing")) }
                    listing.unreadable.append(folder == "/" ? "/" + entry.name : folder + "/" + entry.name)
                    continue
                }
                kind = s.st_mode & S_IFMT == S_IFDIR ? UInt8(DT_DIR) : s.st_mode & S_IFMT == S_IFREG ? UInt8(DT_REG) : 0
                file.size = Int64(s.st_size)
                file.modified = Int64(s.st_mtim.tv_sec) * 1_000_000_000 + Int64(s.st_mtim.tv_nsec)
            }
            if kind == DT_DIR {
                if !entry.name.hasPrefix(".") { listing.folders.append(folder == "/" ? "/" + entry.name : folder + "/" + entry.name) }
                continue
            }
            guard kind == DT_REG, wanted else { continue }
            if suffix == "txt" {
                listing.job.charts.append(file)
            } else if suffix == "lrc" {
                listing.job.lyrics[Self.baseName(entry.name).lowercased()] = file
            } else {
                listing.job.audio.append(file)
            }
        }
        return listing
    }

    /// A file name's extension in lower case ("" without one).
    static func suffix(_ name: String) -> String {
        guard let dot = name.utf8.lastIndex(of: UInt8(ascii: ".")) else { return "" }
        let tail = name.utf8[name.utf8.index(after: dot)...]
        guard tail.count <= 5 else { return "" }
        return String(decoding: tail.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// Indexes the queued folders on two threads (reading and parsing charts is most of a first scan), then merges
    /// what they found here, in the walk's order.
    mutating func indexJobs() throws(AudioError) {
        guard !jobs.isEmpty else { return }
        let batch = jobs
        jobs = []
        jobFiles = 0
        // What the library holds of the batch's files, looked up here: the workers see their job's part.
        let paths = batch.flatMap { job in (job.charts + job.audio).map { job.folder + "/" + $0.name } }
        let found = try library.read("read") { db in
            var found: [PathKey: Known] = [:]
            for start in stride(from: 0, to: paths.count, by: 500) {
                let part = Array(paths[start..<min(start + 500, paths.count)])
                let rows = try Row.fetchCursor(
                    db,
                    sql: "SELECT id, path, size, modified, audio, problem FROM song WHERE path IN (\(Array(repeating: "?", count: part.count).joined(separator: ",")))",
                    arguments: StatementArguments(part))
                while let row = try rows.next() {
                    found[PathKey(row["path"] as String)] = Known(
                        id: row["id"], size: row["size"], modified: row["modified"], audio: row["audio"], problem: row["problem"])
                }
            }
            return found
        }
        let knownPerJob: [[PathKey: Known]] = batch.map { job in
            var mine: [PathKey: Known] = [:]
            for file in job.charts + job.audio {
                let key = PathKey(job.folder + "/" + file.name)
                if let k = found[key] { mine[key] = k }
            }
            return mine
        }
        let results = ResultSlots(count: batch.count)
        DispatchQueue.concurrentPerform(iterations: batch.count) { i in
            results.set(i, Self.index(batch[i], known: knownPerJob[i]))
        }
        for outcome in results.all.joined() {
            switch outcome {
            case .unchanged(let key):
                if let old = found[key] { met.insert(old.id) }
                report.unchanged += 1
            case .song(let song, let broken):
                let old = found[PathKey(song.path)]
                if let old { met.insert(old.id) }
                if broken, let problem = song.problem { report.broken.append(.init(path: song.path, reason: problem)) }
                // A broken song read again (its audio may have come) is unchanged when it is as it was.
                if let old, old.size == song.size, old.modified == song.modified, old.problem == song.problem, old.audio == song.audio {
                    report.unchanged += 1
                    continue
                }
                var song = song
                song.id = old?.id
                if song.id == nil { report.added += 1 } else { report.updated += 1 }
                pending.append(song)
            case .skipped(let path, let reason, let keep):
                if !reason.isEmpty { report.skipped.append(.init(path: path, reason: reason)) }
                if keep, let old = found[PathKey(path)] { met.insert(old.id) }
            }
        }
        if pending.count >= 500 { try flushPending() }
    }

    /// One folder's songs: its charts; without a chart, each audio file with its LRC.
    static func index(_ job: FolderJob, known: [PathKey: Known]) -> [FileOutcome] {
        var outcomes: [FileOutcome] = []
        var anyChart = false
        let audioNames = Set(job.audio.map { PathKey($0.name) })
        for chart in job.charts {
            let outcome = index(chart: chart, in: job.folder, audioNames: audioNames, known: known)
            switch outcome {
            case .unchanged, .song: anyChart = true
            case .skipped: break
            }
            outcomes.append(outcome)
        }
        // A folder with a chart: its audio files are the chart's. Without: each is a song.
        if !anyChart {
            for file in job.audio {
                outcomes.append(index(audio: file, lyrics: job.lyrics[baseName(file.name).lowercased()], in: job.folder, known: known))
            }
        }
        return outcomes
    }

    /// One `.txt`: a chart (playable or broken), or passed over.
    /// Whether `path`, a file directly in `folder`, is among the folder's audio files; nil when it is elsewhere.
    /// Compared as bytes (`String` compares by Unicode equivalence, a tenth of a rescan).
    static func listed(_ path: String, in folder: String, _ names: Set<PathKey>) -> Bool? {
        let bytes = Array(path.utf8)
        let prefix = folder.utf8.count
        guard bytes.count > prefix + 1, bytes.starts(with: folder.utf8), bytes[prefix] == UInt8(ascii: "/") else { return nil }
        let name = bytes[(prefix + 1)...]
        guard !name.contains(UInt8(ascii: "/")) else { return nil }
        return names.contains(PathKey(bytes: Array(name)))
    }

    static func index(chart file: FoundFile, in folder: String, audioNames: Set<PathKey>, known: [PathKey: Known]) -> FileOutcome {
        let path = folder + "/" + file.name
        if file.size > SongLibrary.chartSizeLimit {
            return .skipped(path, reason: "\(megabytes(file.size)): too large for a chart (charts are under 1 MB)", keep: false)
        }
        let old = known[PathKey(path)]
        if let old, old.size == file.size, old.modified == file.modified, old.problem == nil, let audio = old.audio,
            listed(audio, in: folder, audioNames) ?? exists(audio)
        {
            return .unchanged(PathKey(path))
        }
        guard let bytes = read(path, limit: Int(SongLibrary.chartSizeLimit)) else {
            return .skipped(path, reason: "cannot read: \(String(cString: strerror(errno)))", keep: true)
        }
        // Not a chart (a README): passed over quietly.
        guard looksLikeChart(bytes) else { return .skipped(path, reason: "", keep: false) }
        var song = LibrarySong(
            id: nil, path: path, kind: .ultraStar, title: baseName(file.name), artist: "", language: nil,
            genre: nil, edition: nil, creator: nil, year: nil, parts: [], singers: [], length: nil, audioLength: nil,
            bpm: nil, audio: nil, lyrics: nil, size: file.size, modified: file.modified, hash: "", warnings: [], problem: nil)
        do throws(AudioError) {
            let chart = try SongChart.ultraStar(bytes: bytes, name: file.name, folder: folder)
            fill(&song, from: chart)
            do throws(AudioError) {
                let reference = try chart.songReference()
                song.audio = reference.path
                song.warnings += reference.warnings
            } catch {
                song.problem = error.message
            }
        } catch {
            song.hash = ChartFingerprint.ofBytes(bytes)
            song.problem = error.message
        }
        return .song(song, broken: song.problem != nil)
    }

    /// An audio file of a folder without charts, with its LRC.
    static func index(audio found: FoundFile, lyrics: FoundFile?, in folder: String, known: [PathKey: Known]) -> FileOutcome {
        let path = folder + "/" + found.name
        var file = found
        if file.size < 0 {
            var s = stat()
            guard stat(path, &s) == 0 else { return .skipped(path, reason: "cannot read: \(String(cString: strerror(errno)))", keep: true) }
            file.size = Int64(s.st_size)
            file.modified = Int64(s.st_mtim.tv_sec) * 1_000_000_000 + Int64(s.st_mtim.tv_nsec)
        }
        let size = file.size + (lyrics?.size ?? 0)
        let modified = file.modified &+ (lyrics?.modified ?? 0)
        if let old = known[PathKey(path)], old.size == size, old.modified == modified, old.problem == nil {
            return .unchanged(PathKey(path))
        }
        let base = baseName(file.name)
        let parts = base.split(separator: " - ", maxSplits: 1).map { String($0).trimmingSpaces }
        var song = LibrarySong(
            id: nil, path: path, kind: .audio, title: parts.count == 2 ? parts[1] : base,
            artist: parts.count == 2 ? parts[0] : "", language: nil, genre: nil, edition: nil, creator: nil, year: nil,
            parts: [], singers: [], length: nil, audioLength: nil, bpm: nil, audio: path, lyrics: nil, size: size,
            modified: modified, hash: ChartFingerprint.ofAudio(name: file.name, size: file.size), warnings: [], problem: nil)
        if let lyrics {
            let lrcPath = folder + "/" + lyrics.name
            if lyrics.size > SongLibrary.chartSizeLimit {
                song.warnings.append("\(lyrics.name): \(megabytes(lyrics.size)), too large for lyrics: sung without words")
            } else if let bytes = read(lrcPath, limit: Int(SongLibrary.chartSizeLimit)) {
                do throws(AudioError) {
                    let chart = try SongChart.lrc(bytes: bytes, name: lyrics.name, folder: folder)
                    song.lyrics = lrcPath
                    if !chart.title.isEmpty { song.title = chart.title }
                    if !chart.artist.isEmpty { song.artist = chart.artist }
                    song.length = chart.voices.flatMap(\.lines).map(\.end).max()
                    song.language = chart.headers["LA"].flatMap { $0.isEmpty ? nil : $0 }
                    song.hash = ChartFingerprint.of(chart)
                    song.warnings += chart.warnings
                } catch {
                    song.warnings.append(error.message + ": sung without words")
                }
            }
        }
        return .song(song, broken: false)
    }

    /// Writes the pending rows.
    mutating func flushPending() throws(AudioError) {
        guard !pending.isEmpty else { return }
        let batch = pending
        pending = []
        let inserted = try library.write("write") { db in
            var inserted: [Int64] = []
            for var song in batch {
                if let id = song.id {
                    // The audio's length learnt when played stays, unless the song's audio is another file now.
                    try db.execute(sql: "UPDATE song SET audioLength = NULL WHERE id = ? AND audio IS NOT ?", arguments: [id, song.audio])
                    try song.update(db, columns: LibrarySong.scannedColumns)
                } else {
                    try song.insert(db)
                    if let id = song.id { inserted.append(id) }
                }
            }
            return inserted
        }
        // New rows are met too: the search for gone songs must not take them.
        met.formUnion(inserted)
    }

    mutating func flush() throws(AudioError) {
        if let failure { throw failure }
        try indexJobs()
        try flushPending()
    }

    // MARK: Reading

    static func fill(_ song: inout LibrarySong, from chart: SongChart) {
        func header(_ key: String) -> String? { chart.headers[key].flatMap { $0.isEmpty ? nil : $0 } }
        if !chart.title.isEmpty { song.title = chart.title }
        song.artist = chart.artist
        song.language = header("LANGUAGE")
        song.genre = header("GENRE")
        song.edition = header("EDITION")
        song.creator = header("CREATOR") ?? header("AUTHOR")
        song.year = header("YEAR").flatMap { Int($0.prefix(4)) }.flatMap { (1000...2999).contains($0) ? $0 : nil }
        song.parts = chart.voices.map(\.number)
        let names = chart.voices.map { $0.name }
        song.singers = names.contains { $0 != nil } ? zip(chart.voices, names).map { $1 ?? "P\($0.number)" } : []
        song.bpm = chart.beatsPerMinute
        let lastEnd = chart.voices.flatMap(\.lines).map(\.end).max()
        song.length = chart.endMilliseconds.map { $0 / 1000 } ?? lastEnd
        song.hash = ChartFingerprint.of(chart)
        song.warnings = chart.warnings
    }

    /// True when the first 4 kB hold an UltraStar header (`#TITLE`, `#ARTIST`, `#BPM`, `#MP3`, `#AUDIO`,
    /// `#VERSION`), in any case and any of the encodings charts come in.
    static func looksLikeChart(_ bytes: [UInt8]) -> Bool {
        var head = Array(bytes.prefix(4096))
        // UTF-16: keep the ASCII bytes.
        if head.starts(with: [0xFF, 0xFE]) || head.starts(with: [0xFE, 0xFF]) { head = head.filter { $0 != 0 } }
        let text = String(decoding: head.map { $0 >= 0x80 ? 0x20 : $0 }, as: UTF8.self).uppercased()
        for key in ["#TITLE", "#ARTIST", "#BPM", "#MP3", "#AUDIO", "#VERSION"] where text.contains(key) { return true }
        return false
    }

    static func read(_ path: String, limit: Int) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[..<count])
        }
        return bytes
    }

    static func exists(_ path: String) -> Bool {
        var s = stat()
        return stat(path, &s) == 0 && s.st_mode & S_IFMT == S_IFREG
    }

    static func baseName(_ name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return name }
        return String(name[..<dot])
    }

    static func megabytes(_ size: Int64) -> String {
        size >= 1 << 20 ? "\(size >> 20) MB" : "\(size >> 10) kB"
    }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}

/// One slot per item of a parallel loop, each written by one worker and read after all have finished (a buffer of
/// its own: a Swift array in a class may not be written from two threads at once, even at different indices).
final class Slots<Value: Sendable>: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<Value?>
    private let count: Int
    init(count: Int) {
        self.count = count
        slots = .allocate(capacity: count)
        slots.initialize(repeating: nil, count: count)
    }
    deinit {
        slots.deinitialize(count: count)
        slots.deallocate()
    }
    /// Called from the worker that owns slot `i` alone.
    func set(_ i: Int, _ value: Value) { slots[i] = value }
    /// Called after every worker has finished.
    var all: [Value] { UnsafeBufferPointer(start: slots, count: count).compactMap { $0 } }
}

typealias ResultSlots = Slots<[FileOutcome]>
typealias ListingSlots = Slots<LibraryScanner.FolderListing>
