import AudioCore
import Foundation
import SingAlong
import SongLibrary
import Testing
import TestSupport

@Suite("The queue: a fair rotation, the countdown's freeze, the cap, duets, scores kept")
struct QueueTests {
    typealias E = QueueRotation.Entry

    @Test("The rule alone: three singers queueing 3, 1 and 2 songs at different times sing in turn, least recent first")
    func rotation() {
        // A queues a1, a2; B queues b1; A queues a3; C queues c1, c2 (ids 1…6 in that order; A=1, B=2, C=3).
        let entries = [E(id: 1, singer: 1, queued: 1), E(id: 2, singer: 1, queued: 2), E(id: 3, singer: 2, queued: 3),
                       E(id: 4, singer: 1, queued: 4), E(id: 5, singer: 3, queued: 5), E(id: 6, singer: 3, queued: 6)]
        // Nobody has sung: A, B, C in the order they first queued; then A (who sang longest ago), C, A.
        #expect(QueueRotation(entries: entries).order() == [1, 3, 5, 2, 6, 4])
        // a1 sung (A at clock 7); then B queues b2: B and C have not sung, so b1, c1; then A, B, C by who sang least
        // recently as the rotation goes on.
        let later = entries.filter { $0.id != 1 } + [E(id: 7, singer: 2, queued: 8)]
        #expect(QueueRotation(entries: later, lastSang: [1: 7]).order() == [3, 5, 2, 7, 6, 4])
        // Up next does not move (and its singer counts as having sung); the host's pinned entries come after it, in
        // the host's order.
        #expect(QueueRotation(entries: later, lastSang: [1: 7], upNext: 6).order() == [6, 3, 2, 5, 7, 4])
        var pinned = later
        pinned[pinned.firstIndex { $0.id == 4 }!].pinned = 1
        #expect(QueueRotation(entries: pinned, lastSang: [1: 7]).order().prefix(2) == [4, 3])
        // A duet's partner counts as having sung with it.
        let duet = [E(id: 1, singer: 1, partner: 2, queued: 1), E(id: 2, singer: 2, queued: 2), E(id: 3, singer: 3, queued: 3)]
        #expect(QueueRotation(entries: duet).order() == [1, 3, 2])
        #expect(QueueRotation(entries: []).next() == nil)
    }

    /// A library of five songs (one a duet) and three singers who joined from phones.
    static func evening(_ dir: TemporaryDirectory) throws -> (SongLibrary, [String: Int64], [String: Int64]) {
        let songs = try SongFolder(dir)
        for (n, title) in ["One", "Two", "Three", "Four"].enumerated() {
            try songs.song("S/\(title)", title: title, artist: "Band", notes: ": 0 4 \(n) la\n: 4 4 0 la\n")
        }
        try songs.song("S/Duet", title: "Duet", artist: "Pair", extra: "#P1:Hi\n#P2:Lo\n", notes: "P1\n: 0 4 0 a\nP2\n: 8 4 0 b\n")
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        _ = try library.scan([songs.root])
        let ids = Dictionary(uniqueKeysWithValues: try library.songs().map { ($0.title, $0.id!) })
        var singers: [String: Int64] = [:]
        for name in ["Ana", "Ben", "Cleo"] { singers[name] = try library.join(name: name, token: "phone-\(name)").id! }
        return (library, ids, singers)
    }

    @Test("A scripted evening in the database: the rule's order, sung in turn, the countdown's freeze, the same after a reopen")
    func scriptedEvening() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (library, song, who) = try Self.evening(dir)
        let (a, b, c) = (who["Ana"]!, who["Ben"]!, who["Cleo"]!)
        func add(_ title: String, _ singer: Int64) throws -> Int64 {
            try library.enqueue(.init(song: song[title]!, singer: singer), by: .guest(singer)).id!
        }
        let a1 = try add("One", a), a2 = try add("Two", a)
        let b1 = try add("Three", b)
        let a3 = try add("Four", a)
        let c1 = try add("One", c), c2 = try add("Two", c)
        #expect(try library.queue().map(\.id!) == [a1, b1, c1, a2, c2, a3])
        // The first song's countdown: a1 is up. Sung, scored.
        #expect(try library.startCountdown()?.id == a1)
        // The song on and the one up next, read together (who may sing with a phone).
        #expect(try library.singingAndNext().singing == nil && library.singingAndNext().next?.id == a1)
        try library.begin(a1)
        let now = try library.singingAndNext(), waiting = try library.queue().map(\.id!)
        #expect(now.singing?.id == a1 && now.next?.id == waiting.first, "\(String(describing: now.singing?.id)), \(String(describing: now.next?.id)); queue \(waiting)")
        try library.finish(a1, scores: [(part: 1, score: 7000)])
        let b2 = try add("Four", b)
        #expect(try library.queue().map(\.id!) == [b1, c1, a2, b2, c2, a3])
        // b1 and c1 sung: everyone has sung once; Ana longest ago, so a2's countdown starts.
        for entry in [b1, c1] {
            #expect(try library.startCountdown()?.id == entry)
            try library.begin(entry)
            try library.finish(entry, scores: [(part: 1, score: 5000)])
        }
        #expect(try library.queue().map(\.id!) == [a2, b2, c2, a3])
        #expect(try library.startCountdown()?.id == a2)
        // Dana joins and queues: she has not sung, so the rule puts her first — but a2 no longer moves.
        let d = try library.join(name: "Dana", token: "phone-Dana").id!
        let d1 = try add("Three", d)
        #expect(try library.queue().map(\.id!) == [a2, d1, b2, c2, a3])
        // The process dies while a2 is sung: reopened, the same queue, a2 up next again, the same scores.
        try library.begin(a2)
        try library.resumeEvening()
        let reopened = try SongLibrary(path: dir.file("library.sqlite"), access: .reader)
        #expect(try reopened.queue().map(\.id!) == [a2, d1, b2, c2, a3])
        #expect(try reopened.queue().first?.state == .up)
        #expect(try reopened.topScores(songHash: reopened.song(id: song["One"]!)!.hash, difficulty: .medium).map(\.score) == [7000, 5000])
    }

    @Test("The cap per singer, a guest's rights, the host's reorder, skip and pause")
    func rights() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (library, song, who) = try Self.evening(dir)
        let (a, b) = (who["Ana"]!, who["Ben"]!)
        try library.setQueueCap(2)
        let a1 = try library.enqueue(.init(song: song["One"]!, singer: a), by: .guest(a)).id!
        let a2 = try library.enqueue(.init(song: song["Two"]!, singer: a), by: .guest(a)).id!
        var error = Self.failure { () throws(AudioError) in _ = try library.enqueue(.init(song: song["Three"]!, singer: a), by: .guest(a)) }
        #expect(error?.message == "Ana has 2 songs waiting, the most a singer may queue tonight: sing one first")
        // The host may add beyond the cap, and for anyone.
        let a3 = try library.enqueue(.init(song: song["Three"]!, singer: a), by: .host).id!
        error = Self.failure { () throws(AudioError) in _ = try library.enqueue(.init(song: song["Four"]!, singer: a), by: .guest(b)) }
        #expect(error?.message == "a phone queues songs for its own singer only")
        let b1 = try library.enqueue(.init(song: song["Four"]!, singer: b), by: .guest(b)).id!
        error = Self.failure { () throws(AudioError) in try library.dequeue(a1, by: .guest(b)) }
        #expect(error?.message == "a phone removes its own songs only")
        #expect(try library.queue().map(\.id!) == [a1, b1, a2, a3])
        // The host moves Ana's third song to the top, then Ben's up twice: the older pins follow the new order.
        try library.move(a3, to: 1)
        #expect(try library.queue().first?.id == a3)
        try library.move(b1, to: 3)
        #expect(try library.queue().map(\.id!) == [a3, a1, b1, a2])
        try library.move(b1, to: 2)
        #expect(try library.queue().map(\.id!) == [a3, b1, a1, a2])
        try library.dequeue(a3, by: .host)
        #expect(try !library.queue().contains { $0.id == a3 })
        // Paused: no countdown starts. Resumed: it does; a skip counts as the singer's turn.
        try library.setPaused(true)
        #expect(try library.startCountdown() == nil)
        try library.setPaused(false)
        let up = try #require(try library.startCountdown())
        let upRemoved = Self.failure { () throws(AudioError) in try library.dequeue(up.id!, by: .host) }
        #expect(upRemoved?.message == "that song is up next: the host can skip it")
        #expect(up.id == b1, "the host's order: Ben's song first")
        try library.skip(up.id!)
        #expect(try library.queue().map(\.id!) == [a1, a2])
        #expect(try library.singers().first { $0.id == b }?.lastSang != nil, "a skip counts as Ben's turn")
    }

    @Test("Duets: two singers with their parts; a profile's key and difficulty used when a song names none; scores ranked")
    func duetsAndScores() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (library, song, who) = try Self.evening(dir)
        let (a, b, c) = (who["Ana"]!, who["Ben"]!, who["Cleo"]!)
        let duet = try library.enqueue(.init(song: song["Duet"]!, singer: a, part: 2, partner: b, key: -2, difficulty: .hard), by: .guest(a))
        #expect(duet.part == 2 && duet.partnerPart == 1 && duet.key == -2 && duet.difficulty == "hard")
        // Ana's choices became her usual ones.
        let next = try library.enqueue(.init(song: song["One"]!, singer: a), by: .guest(a))
        #expect(next.key == -2 && next.difficulty == "hard")
        for (request, message) in [
            (SongLibrary.QueueRequest(song: song["One"]!, singer: c, partner: b), "'One' is not a duet"),
            (SongLibrary.QueueRequest(song: song["Duet"]!, singer: c, part: 3), "'Duet' has P1, P2, not P3"),
            (SongLibrary.QueueRequest(song: song["Duet"]!, singer: c, partner: c), "a duet's partner is another singer"),
            (SongLibrary.QueueRequest(song: 9999, singer: c), "no song 9999 in the library"),
            (SongLibrary.QueueRequest(song: song["One"]!, singer: c, key: 13), "a key is −12 … 12 semitones, got 13"),
        ] {
            let error = Self.failure { () throws(AudioError) in _ = try library.enqueue(request, by: .guest(c)) }
            #expect(error?.message == message)
        }
        // Sung: both singers have sung; each part's score stored under its singer, placed among the song's.
        _ = try library.startCountdown()
        let placed = try library.finish(duet.id!, scores: [(part: 2, score: 8100), (part: 1, score: 6000)])
        #expect(placed.map(\.record.singerName) == ["Ana", "Ben"] && placed.map(\.place) == [1, 2])
        #expect(try library.singers().filter { $0.lastSang != nil }.map(\.name).sorted() == ["Ana", "Ben"])
        // Another take of the duet at the same difficulty: its place among the three.
        let again = try library.enqueue(.init(song: song["Duet"]!, singer: c, partner: b, difficulty: .hard), by: .guest(c))
        let early = Self.failure { () throws(AudioError) in _ = try library.finish(again.id!, scores: []) }
        #expect(early?.message == "entry \(again.id!) is not being sung", "a waiting entry is not finished")
        #expect(try library.startCountdown()?.id == again.id, "Cleo has not sung: first")
        let second = try library.finish(again.id!, scores: [(part: 1, score: 7000)])
        #expect(second.first?.place == 2)
        let hash = try library.song(id: song["Duet"]!)!.hash
        #expect(try library.topScores(songHash: hash, difficulty: .hard).map(\.score) == [8100, 7000, 6000])
        #expect(try library.topScores(songHash: hash, difficulty: .easy).isEmpty)
        // `liveaudio scores`: the song's top five per difficulty, found by words or all.
        let printed = try runProcess(productsDirectory + "/liveaudio", ["scores", "duet", "--db", dir.file("library.sqlite")])
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(printed.stdout.hasPrefix("Pair – Duet\n  hard:\n    1. Ana  8100  (P2, "), "\(printed.stdout)")
        #expect(printed.stdout.contains("    2. Cleo  7000  (P1, ") && printed.stdout.contains("    3. Ben  6000  (P1, "))
        let all = try runProcess(productsDirectory + "/liveaudio", ["scores", "--db", dir.file("library.sqlite")])
        #expect(all.stdout == printed.stdout)
        let none = try runProcess(productsDirectory + "/liveaudio", ["scores", "one", "--db", dir.file("library.sqlite")])
        #expect(none.stdout == "no scores for the songs 'one' finds\n")
        // Names: trimmed, cut, control characters dropped, any text kept as text; a taken name refused.
        let odd = try library.join(name: "  <b>Zoë</b>\u{7}  ", token: "phone-z")
        #expect(odd.name == "<b>Zoë</b>")
        let long = try library.join(name: String(repeating: "x", count: 500), token: "phone-long")
        #expect(long.name.count == SongLibrary.nameLimit)
        let taken = Self.failure { () throws(AudioError) in _ = try library.join(name: "ana", token: "another-phone") }
        #expect(taken?.message == "the name Ana is taken tonight: choose another")
        #expect(try library.join(name: "Ana", token: "phone-Ana").id == a, "the same phone is the same singer")
    }

    static func failure(_ body: () throws(AudioError) -> Void) -> AudioError? {
        do throws(AudioError) {
            try body()
        } catch {
            return error
        }
        Issue.record("no error thrown")
        return nil
    }
}
