import AudioCore
import GRDB
import SingAlong

#if canImport(Glibc)
import Glibc
#endif

/// A singer of the evening: a name, and the phone it joined from.
public struct Singer: Codable, Sendable, Equatable, Identifiable, FetchableRecord, MutablePersistableRecord {
    /// The table the singers are kept in.
    public static let databaseTableName = "singer"
    /// The row's id.
    public var id: Int64?
    /// The name the singer chose (any text: shown as text, never markup), at most ``SongLibrary/nameLimit``
    /// characters.
    public var name: String
    /// The phone's token (a secret it keeps): the same phone is the same singer. Nil for a singer the host or a
    /// duet partner named.
    public var token: String?
    /// The singer's usual key, semitones (their last choice): a song they queue without one takes it.
    public var key: Int
    /// The singer's usual difficulty (`easy`, `medium`, `hard`): likewise.
    public var difficulty: String
    /// When they joined (seconds since 1970).
    public var joined: Double
    /// The queue's clock when they last sang this evening; nil before.
    public var lastSang: Int64?

    /// Takes the id SQLite gave the new row.
    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A queue entry: a song, its singer (and a duet partner), each with a part, a key and a difficulty.
public struct QueueEntry: Codable, Sendable, Equatable, Identifiable, FetchableRecord, MutablePersistableRecord {
    /// The table the queue is kept in.
    public static let databaseTableName = "entry"

    /// Where an entry is in its life.
    public enum State: String, Codable, Sendable {
        /// In the queue.
        case waiting
        /// Up next: its countdown has started; it no longer moves.
        case up
        /// Being sung.
        case singing
        /// Sung (its scores stored).
        case sung
        /// Skipped by the host (the singer's turn counted as taken).
        case skipped
        /// Taken out of the queue before it was sung.
        case removed
    }

    /// The row's id.
    public var id: Int64?
    /// The library song's id.
    public var song: Int64
    /// The song's notes' hash (its scores' key, ``LibrarySong/hash``).
    public var songHash: String
    /// The singer who queued it (whose turn it takes).
    public var singer: Int64
    /// The part the singer sings (1 for a song sung alone).
    public var part: Int
    /// The duet partner, if any.
    public var partner: Int64?
    /// The duet partner's part.
    public var partnerPart: Int?
    /// The key the song is sung in, semitones.
    public var key: Int
    /// `easy`, `medium` or `hard`.
    public var difficulty: String
    /// The queue's clock when it was queued.
    public var queued: Int64
    /// The host's place for it (1 first); nil when the rotation places it.
    public var pinned: Int?
    /// Where it is in its life.
    public var state: State
    /// When it was queued (seconds since 1970).
    public var added: Double
    /// When it was sung, skipped or removed (seconds since 1970); nil before.
    public var ended: Double?

    /// Takes the id SQLite gave the new row.
    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// One take's score, as stored: the song (by its notes' hash, with its title and artist then), the difficulty, the
/// part, the singer, the score (0 … 10,000) and the date.
public struct ScoreRecord: Codable, Sendable, Equatable, Identifiable, FetchableRecord, MutablePersistableRecord {
    /// The table the scores are kept in.
    public static let databaseTableName = "score"
    /// The row's id.
    public var id: Int64?
    /// The song's notes' hash: a moved or renamed chart keeps its scores.
    public var songHash: String
    /// The library song's id when it was sung.
    public var song: Int64?
    /// The song's title when it was sung.
    public var title: String
    /// The song's artist when it was sung.
    public var artist: String
    /// `easy`, `medium` or `hard`.
    public var difficulty: String
    /// The part sung.
    public var part: Int
    /// The singer's id.
    public var singer: Int64?
    /// The singer's name when they sang.
    public var singerName: String
    /// The score, 0 … 10,000.
    public var score: Int
    /// When (seconds since 1970).
    public var date: Double
    /// The queue entry it was sung from.
    public var entry: Int64?

    /// Takes the id SQLite gave the new row.
    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

extension SongLibrary {
    /// Who asks for a change to the queue: the host (the stage's token: anything), or a guest (a phone's singer: its
    /// own entries only).
    public enum Requester: Sendable, Equatable {
        /// The host: may change anything.
        case host
        /// A phone, by its singer's id: its own entries only.
        case guest(Int64)
    }

    /// A song to queue.
    public struct QueueRequest: Sendable {
        /// The library song's id.
        public var song: Int64
        /// The singer.
        public var singer: Int64
        /// The part the singer sings; nil: the first (P1).
        public var part: Int?
        /// A duet's partner.
        public var partner: Int64?
        /// The partner's part (nil: the part the singer does not sing).
        public var partnerPart: Int?
        /// The key, semitones (−12 … 12); nil: the singer's usual.
        public var key: Int?
        /// The difficulty; nil: the singer's usual.
        public var difficulty: SingingDifficulty?

        /// A request for `song` sung by `singer`.
        public init(song: Int64, singer: Int64, part: Int? = nil, partner: Int64? = nil, partnerPart: Int? = nil, key: Int? = nil, difficulty: SingingDifficulty? = nil) {
            self.song = song
            self.singer = singer
            self.part = part
            self.partner = partner
            self.partnerPart = partnerPart
            self.key = key
            self.difficulty = difficulty
        }
    }

    /// The longest name a singer may have, in characters.
    public static let nameLimit = 40
    /// How many songs a singer may have waiting unless the host says otherwise.
    public static let defaultQueueCap = 3
    /// The most singers a library keeps (a phone that joins beyond is refused).
    public static let singerLimit = 2000

    /// The singer of this name (any case), or nil.
    public func singer(named name: String) throws(AudioError) -> Singer? {
        let clean = Self.cleanName(name)
        return try read("read") { db in try Singer.filter(sql: "name = ? COLLATE NOCASE", arguments: [clean]).fetchOne(db) }
    }

    // MARK: Singers

    /// The singer with this phone token, or a new one named `name` (a phone that joins). A name is trimmed and cut
    /// to ``nameLimit`` characters; names are unique in any case (a second phone asking for a taken name is refused;
    /// the host — no token — gets the singer of that name).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for an empty name or one another phone holds.
    public func join(name: String, token: String? = nil) throws(AudioError) -> Singer {
        let clean = Self.cleanName(name)
        guard !clean.isEmpty else { throw AudioError(.invalidParameter, "a singer needs a name") }
        let now = Self.wallClock()
        return try write("join") { db in
            if let token, var mine = try Singer.filter(Column("token") == token).fetchOne(db) {
                if mine.name != clean {
                    if let other = try Singer.filter(sql: "name = ? COLLATE NOCASE AND id != ?", arguments: [clean, mine.id!]).fetchOne(db) {
                        throw AudioError(.invalidParameter, "the name \(other.name) is taken tonight: choose another")
                    }
                    mine.name = clean
                    try mine.update(db)
                }
                return mine
            }
            if var named = try Singer.filter(sql: "name = ? COLLATE NOCASE", arguments: [clean]).fetchOne(db) {
                // The host's (or a partner's) singer, claimed by the phone that names it first.
                if let token {
                    guard named.token == nil else { throw AudioError(.invalidParameter, "the name \(named.name) is taken tonight: choose another") }
                    named.token = token
                    try named.update(db)
                }
                return named
            }
            let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM singer") ?? 0
            guard count < SongLibrary.singerLimit else {
                throw AudioError(.invalidParameter, "the evening has \(count) singers, the most it takes: join as one of them")
            }
            var singer = Singer(id: nil, name: clean, token: token, key: 0, difficulty: SingingDifficulty.medium.rawValue, joined: now, lastSang: nil)
            try singer.insert(db)
            return singer
        }
    }

    /// The singer with this id, or nil.
    public func singer(id: Int64) throws(AudioError) -> Singer? {
        try read("read") { db in try Singer.fetchOne(db, key: id) }
    }

    /// The singer a phone's token names, or nil.
    public func singer(token: String) throws(AudioError) -> Singer? {
        try read("read") { db in try Singer.filter(Column("token") == token).fetchOne(db) }
    }

    /// Every singer, in the order they joined.
    public func singers() throws(AudioError) -> [Singer] {
        try read("read") { db in try Singer.order(Column("id")).fetchAll(db) }
    }

    /// Sets a singer's usual key and difficulty (what a song they queue takes when the request names none).
    public func setProfile(of singer: Int64, key: Int? = nil, difficulty: SingingDifficulty? = nil) throws(AudioError) {
        if let key { guard (-12...12).contains(key) else { throw AudioError(.invalidParameter, "a key is −12 … 12 semitones, got \(key)") } }
        try write("update") { db in
            if let key { try db.execute(sql: "UPDATE singer SET key = ? WHERE id = ?", arguments: [key, singer]) }
            if let difficulty { try db.execute(sql: "UPDATE singer SET difficulty = ? WHERE id = ?", arguments: [difficulty.rawValue, singer]) }
        }
    }

    static func cleanName(_ name: String) -> String {
        // Control and format characters go (a bidi override would turn the names after it around), but for the
        // zero-width joiner that emoji sequences are made with.
        let kept = name.unicodeScalars.filter {
            if $0.value == 0x200D { return true }
            switch $0.properties.generalCategory {
            case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator, .paragraphSeparator: return false
            default: return true
            }
        }
        return String(String(String.UnicodeScalarView(kept)).trimmingSpaces.prefix(nameLimit))
    }

    static func wallClock() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    // MARK: The evening's settings

    /// How many songs a singer may have waiting (the host sets it; ``defaultQueueCap`` until then).
    public func queueCap() throws(AudioError) -> Int {
        try read("read") { db in try Int.fetchOne(db, sql: "SELECT value FROM evening WHERE key = 'cap'") ?? SongLibrary.defaultQueueCap }
    }

    /// Sets the cap (1 … 50).
    public func setQueueCap(_ cap: Int) throws(AudioError) {
        guard (1...50).contains(cap) else { throw AudioError(.invalidParameter, "the songs a singer may queue are 1 … 50, got \(cap)") }
        try setting("cap", cap)
    }

    /// Whether the queue is paused (the host's: no next take starts).
    public func isPaused() throws(AudioError) -> Bool {
        try read("read") { db in try Int.fetchOne(db, sql: "SELECT value FROM evening WHERE key = 'paused'") ?? 0 } != 0
    }

    /// Pauses or resumes the queue.
    public func setPaused(_ paused: Bool) throws(AudioError) { try setting("paused", paused ? 1 : 0) }

    /// The evening's guest token (the join address's): made once, kept in the library, so that a phone's address
    /// and the QR code on the wall stay good when the evening's process is started again.
    public func guestToken(makeWith make: @Sendable () -> String) throws(AudioError) -> String {
        let fresh = make()
        return try write("update") { db in
            if let token = try String.fetchOne(db, sql: "SELECT value FROM evening WHERE key = 'guest'") { return token }
            try db.execute(sql: "INSERT INTO evening(key, value) VALUES ('guest', ?)", arguments: [fresh])
            return fresh
        }
    }

    private func setting(_ key: String, _ value: Int) throws(AudioError) {
        try write("update") { db in
            try db.execute(sql: "INSERT INTO evening(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", arguments: [key, value])
        }
    }

    /// The queue's clock, advanced: every queueing and every end of a song takes the next value.
    static func tick(_ db: Database) throws -> Int64 {
        let now = (try Int64.fetchOne(db, sql: "SELECT value FROM evening WHERE key = 'clock'") ?? 0) + 1
        try db.execute(sql: "INSERT INTO evening(key, value) VALUES ('clock', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", arguments: [now])
        return now
    }

    // MARK: The queue

    /// Queues a song: the part, key and difficulty the request names, else the singer's usual ones (and the ones it
    /// names become the singer's usual ones). A guest queues for itself only, at most ``queueCap()`` songs waiting.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` with a sentence for the phone: no such song or singer,
    ///   a broken song, a part the song does not have, a duet without its partner, a guest queueing for another, the
    ///   cap reached.
    @discardableResult
    public func enqueue(_ request: QueueRequest, by requester: Requester) throws(AudioError) -> QueueEntry {
        if case .guest(let id) = requester, id != request.singer {
            throw AudioError(.invalidParameter, "a phone queues songs for its own singer only")
        }
        if let key = request.key { guard (-12...12).contains(key) else { throw AudioError(.invalidParameter, "a key is −12 … 12 semitones, got \(key)") } }
        let now = Self.wallClock()
        let cap = try queueCap()
        return try write("queue") { db in
            guard let song = try LibrarySong.fetchOne(db, key: request.song) else {
                throw AudioError(.invalidParameter, "no song \(request.song) in the library")
            }
            guard song.isPlayable else { throw AudioError(.invalidParameter, "'\(song.title)' cannot be sung: \(song.problem ?? "its audio is missing")") }
            guard var singer = try Singer.fetchOne(db, key: request.singer) else {
                throw AudioError(.invalidParameter, "no singer \(request.singer)")
            }
            let parts = song.parts.isEmpty ? [1] : song.parts
            let part = request.part ?? parts[0]
            guard parts.contains(part) else {
                throw AudioError(.invalidParameter, "'\(song.title)' has \(parts.map { "P\($0)" }.joined(separator: ", ")), not P\(part)")
            }
            var partnerPart: Int?
            if let partner = request.partner {
                guard song.isDuet else { throw AudioError(.invalidParameter, "'\(song.title)' is not a duet") }
                guard partner != request.singer else { throw AudioError(.invalidParameter, "a duet's partner is another singer") }
                guard try Singer.fetchOne(db, key: partner) != nil else { throw AudioError(.invalidParameter, "no singer \(partner)") }
                partnerPart = request.partnerPart ?? parts.first { $0 != part }
                guard let p = partnerPart, parts.contains(p), p != part else {
                    throw AudioError(.invalidParameter, "the partner sings another of '\(song.title)''s parts (\(parts.map { "P\($0)" }.joined(separator: ", ")))")
                }
            }
            if case .guest = requester {
                let waiting = try Int.fetchOne(db, sql: "SELECT count(*) FROM entry WHERE singer = ? AND state IN ('waiting', 'up')", arguments: [request.singer]) ?? 0
                guard waiting < cap else {
                    throw AudioError(.invalidParameter, "\(singer.name) has \(waiting) song\(waiting == 1 ? "" : "s") waiting, the most a singer may queue tonight: sing one first")
                }
            }
            let key = request.key ?? singer.key
            let difficulty = request.difficulty?.rawValue ?? singer.difficulty
            if request.key != nil || request.difficulty != nil {
                singer.key = key
                singer.difficulty = difficulty
                try singer.update(db)
            }
            var entry = QueueEntry(
                id: nil, song: song.id!, songHash: song.hash, singer: request.singer, part: part, partner: request.partner,
                partnerPart: partnerPart, key: key, difficulty: difficulty, queued: try Self.tick(db), pinned: nil, state: .waiting,
                added: now, ended: nil)
            try entry.insert(db)
            return entry
        }
    }

    /// Takes an entry out of the queue: a guest its own only, and none that is being sung.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for another's entry or one no longer waiting.
    public func dequeue(_ id: Int64, by requester: Requester) throws(AudioError) {
        let now = Self.wallClock()
        try write("remove") { db in
            guard let entry = try QueueEntry.fetchOne(db, key: id), entry.state == .waiting || entry.state == .up else {
                throw AudioError(.invalidParameter, "entry \(id) is not in the queue")
            }
            if case .guest(let singer) = requester, entry.singer != singer {
                throw AudioError(.invalidParameter, "a phone removes its own songs only")
            }
            // Up next, its take is made: the host skips it ("Next song").
            guard entry.state == .waiting else {
                throw AudioError(.invalidParameter, "that song is up next: the host can skip it")
            }
            try db.execute(sql: "UPDATE entry SET state = 'removed', ended = ? WHERE id = ?", arguments: [now, id])
        }
    }

    /// The host's reorder: the entry goes to `position` (1 first) of the queue as it stands, and the entries from the
    /// first to it keep those places (pinned) whatever the rotation would say; the rest follow the rotation.
    public func move(_ id: Int64, to position: Int) throws(AudioError) {
        try write("reorder") { db in
            var order = try Self.order(db).map { $0.id! }
            guard let from = order.firstIndex(of: id) else { throw AudioError(.invalidParameter, "entry \(id) is not in the queue") }
            let up = try Int64.fetchOne(db, sql: "SELECT id FROM entry WHERE state = 'up'")
            order.remove(at: from)
            let lowest = up == nil ? 1 : 2
            let target = max(lowest, min(position, order.count + 1))
            order.insert(id, at: target - 1)
            // The entries from the first to the moved one, and on to the last one pinned before, keep these places:
            // an older pin further down would otherwise outrank the new order.
            let pinned = Set(try Int64.fetchAll(db, sql: "SELECT id FROM entry WHERE pinned IS NOT NULL AND state IN ('waiting', 'up')"))
            let through = max(target, (order.lastIndex { pinned.contains($0) } ?? -1) + 1)
            for (index, entry) in order.prefix(through).enumerated() where entry != up {
                try db.execute(sql: "UPDATE entry SET pinned = ? WHERE id = ?", arguments: [index + 1, entry])
            }
        }
    }

    /// The entry being sung, if any.
    public func singing() throws(AudioError) -> QueueEntry? {
        try read("read") { db in try QueueEntry.filter(sql: "state = 'singing'").fetchOne(db) }
    }

    /// The entry being sung and the one up next (the queue's first), read together: one moving into the other between
    /// two reads (``singing()`` then ``queue()``) would be seen in neither.
    public func singingAndNext() throws(AudioError) -> (singing: QueueEntry?, next: QueueEntry?) {
        try read("read") { db in
            (try QueueEntry.filter(sql: "state = 'singing'").fetchOne(db), try Self.order(db).first)
        }
    }

    /// The entries waiting, in the order they will be sung (up next first).
    public func queue() throws(AudioError) -> [QueueEntry] {
        try read("read") { db in try Self.order(db) }
    }

    static func order(_ db: Database) throws -> [QueueEntry] {
        let entries = try QueueEntry.filter(sql: "state IN ('waiting', 'up')").fetchAll(db)
        let singers = try Singer.fetchAll(db)
        var lastSang: [Int64: Int64] = [:]
        for singer in singers { if let t = singer.lastSang { lastSang[singer.id!] = t } }
        let rotation = QueueRotation(
            entries: entries.map { QueueRotation.Entry(id: $0.id!, singer: $0.singer, partner: $0.partner, queued: $0.queued, pinned: $0.pinned) },
            lastSang: lastSang, upNext: entries.first { $0.state == .up }?.id)
        let byID = Dictionary(uniqueKeysWithValues: entries.map { ($0.id!, $0) })
        return rotation.order().compactMap { byID[$0] }
    }

    /// Starts the next entry's countdown: the queue's first becomes "up next" and no longer moves. Returns it (the
    /// one already up, if any); nil when the queue is empty or paused.
    public func startCountdown() throws(AudioError) -> QueueEntry? {
        try write("update") { db in
            let paused = (try Int.fetchOne(db, sql: "SELECT value FROM evening WHERE key = 'paused'") ?? 0) != 0
            guard !paused else { return nil }
            if let up = try QueueEntry.filter(sql: "state = 'up'").fetchOne(db) { return up }
            guard var first = try Self.order(db).first else { return nil }
            first.state = .up
            first.pinned = nil
            try first.update(db)
            return first
        }
    }

    /// The entry up next is being sung.
    public func begin(_ id: Int64) throws(AudioError) {
        try write("update") { db in try db.execute(sql: "UPDATE entry SET state = 'singing' WHERE id = ? AND state = 'up'", arguments: [id]) }
    }

    /// An entry was sung: its singers have sung now (the rotation's clock), and each score is stored. Returns the
    /// stored scores with each one's place among its song's scores at its difficulty (1 best).
    @discardableResult
    public func finish(_ id: Int64, scores: [(part: Int, score: Int)]) throws(AudioError) -> [(record: ScoreRecord, place: Int)] {
        let now = Self.wallClock()
        return try write("store the scores") { db in
            guard var entry = try QueueEntry.fetchOne(db, key: id), entry.state == .up || entry.state == .singing else {
                throw AudioError(.invalidParameter, "entry \(id) is not being sung")
            }
            let song = try LibrarySong.fetchOne(db, key: entry.song)
            let clock = try Self.tick(db)
            entry.state = .sung
            entry.ended = now
            try entry.update(db)
            try db.execute(sql: "UPDATE singer SET lastSang = ? WHERE id IN (?, ?)", arguments: [clock, entry.singer, entry.partner ?? entry.singer])
            var stored: [(record: ScoreRecord, place: Int)] = []
            for result in scores {
                let singerID = result.part == entry.part ? entry.singer : entry.partner ?? entry.singer
                let name = try Singer.fetchOne(db, key: singerID)?.name ?? ""
                var record = ScoreRecord(
                    id: nil, songHash: entry.songHash, song: entry.song, title: song?.title ?? "", artist: song?.artist ?? "",
                    difficulty: entry.difficulty, part: result.part, singer: singerID, singerName: name,
                    score: max(0, min(10_000, result.score)), date: now, entry: id)
                try record.insert(db)
                let better = try Int.fetchOne(
                    db, sql: "SELECT count(*) FROM score WHERE songHash = ? AND difficulty = ? AND (score > ? OR (score = ? AND id < ?))",
                    arguments: [record.songHash, record.difficulty, record.score, record.score, record.id!]) ?? 0
                stored.append((record, better + 1))
            }
            return stored
        }
    }

    /// The host skipped an entry (up next, or being sung): its singers' turn counts as taken.
    public func skip(_ id: Int64) throws(AudioError) {
        let now = Self.wallClock()
        try write("update") { db in
            guard let entry = try QueueEntry.fetchOne(db, key: id), [.waiting, .up, .singing].contains(entry.state) else {
                throw AudioError(.invalidParameter, "entry \(id) is not in the queue")
            }
            let clock = try Self.tick(db)
            try db.execute(sql: "UPDATE entry SET state = 'skipped', ended = ? WHERE id = ?", arguments: [now, id])
            try db.execute(sql: "UPDATE singer SET lastSang = ? WHERE id IN (?, ?)", arguments: [clock, entry.singer, entry.partner ?? entry.singer])
        }
    }

    /// Takes an entry out because it cannot be played (its song gone or broken): removed, its singers' turn not
    /// counted (as a host's skip would).
    public func cancel(_ id: Int64) throws(AudioError) {
        let now = Self.wallClock()
        try write("update") { db in
            try db.execute(sql: "UPDATE entry SET state = 'removed', ended = ? WHERE id = ? AND state IN ('waiting', 'up', 'singing')", arguments: [now, id])
        }
    }

    /// The playable song with these notes (a queue entry's song renamed or moved since it was queued), or nil.
    public func song(hash: String) throws(AudioError) -> LibrarySong? {
        try read("read") { db in
            try LibrarySong.fetchOne(db, sql: "SELECT * FROM song WHERE hash = ? AND problem IS NULL AND audio IS NOT NULL ORDER BY id LIMIT 1", arguments: [hash])
        }
    }

    /// After a restart: an entry that was being sung when the process ended is up next again (sung from the start).
    public func resumeEvening() throws(AudioError) {
        try write("update") { db in try db.execute(sql: "UPDATE entry SET state = 'up' WHERE state = 'singing'") }
    }

    /// A new evening: the queue emptied (its entries marked removed), every singer as if they had not sung yet.
    public func newEvening() throws(AudioError) {
        let now = Self.wallClock()
        try write("update") { db in
            try db.execute(sql: "UPDATE entry SET state = 'removed', ended = ? WHERE state IN ('waiting', 'up', 'singing')", arguments: [now])
            try db.execute(sql: "UPDATE singer SET lastSang = NULL")
        }
    }

    // MARK: Scores

    /// A song's best scores at a difficulty (by its notes' hash), best first (ties: the earlier first).
    public func topScores(songHash: String, difficulty: SingingDifficulty, limit: Int = 5) throws(AudioError) -> [ScoreRecord] {
        try read("read") { db in
            try ScoreRecord.fetchAll(
                db, sql: "SELECT * FROM score WHERE songHash = ? AND difficulty = ? ORDER BY score DESC, id LIMIT ?",
                arguments: [songHash, difficulty.rawValue, max(1, min(limit, 100))])
        }
    }

    /// Every score stored, newest first (at most `limit`).
    public func recentScores(limit: Int = 50) throws(AudioError) -> [ScoreRecord] {
        try read("read") { db in try ScoreRecord.fetchAll(db, sql: "SELECT * FROM score ORDER BY id DESC LIMIT ?", arguments: [max(1, min(limit, 10_000))]) }
    }

    /// The song hashes that have scores, with the title and artist last sung under.
    public func scoredSongs() throws(AudioError) -> [(hash: String, title: String, artist: String)] {
        try read("read") { db in
            try Row.fetchAll(db, sql: "SELECT songHash, title, artist FROM score WHERE id IN (SELECT max(id) FROM score GROUP BY songHash) ORDER BY artist COLLATE NOCASE, title COLLATE NOCASE")
                .map { (hash: $0["songHash"] as String, title: $0["title"] as String, artist: $0["artist"] as String) }
        }
    }
}

/// An observation of the evening's tables: held, it calls back after every change committed to the singers, the
/// queue, the settings or the scores (by this process or another); released or cancelled, it stops.
public final class EveningObservation: Sendable {
    private let cancellable: AnyDatabaseCancellable

    init(_ cancellable: AnyDatabaseCancellable) { self.cancellable = cancellable }

    /// Stops the callbacks.
    public func cancel() { cancellable.cancel() }

    deinit { cancellable.cancel() }
}

extension SongLibrary {
    /// Calls `changed` (on a queue of GRDB's, never inside a transaction's work) after each committed change to
    /// the singers, the queue, the evening's settings or the scores: what a stage needs to show the queue within
    /// a moment of a phone's request. Keep the result; `changed` must not wait for the library.
    public func observeEvening(_ changed: @escaping @Sendable () -> Void) -> EveningObservation {
        let observation = DatabaseRegionObservation(tracking: Table("singer"), Table("entry"), Table("evening"), Table("score"))
        return EveningObservation(observation.start(in: pool, onError: { _ in changed() }, onChange: { _ in changed() }))
    }
}
