import AudioCore
import LiveAudio
import SingAlong
import SongLibrary
import Synchronization

/// The stage of a karaoke evening over a song library: the room's page (``KaraokeRoomPresenter``: the take playing,
/// its lyrics, pitch lane and controls) and the evening's own — the queue with who is next and when, the join
/// address and its QR code, the scores after each take — and the phones' requests: join, search, queue, remove
/// (``EveningRequest``). What it shows of the queue comes from the library: every change committed there (a
/// phone's request, the room's next song, a take's scores) is on every page within a tick.
public final class EveningPresenter: StagePresenter {
    /// The room's page.
    public let room: KaraokeRoomPresenter
    /// The evening's songs, singers, queue and scores.
    public let library: SongLibrary
    /// Seconds between two songs (for the waits the queue shows).
    public let gap: Double

    private struct State {
        var joinURL: String?
        var joinJSON: String?
        var queueJSON = "{\"type\":\"queue\",\"entries\":[]}"
        var scoresJSON: String?
    }
    private let state = Locked(State())
    private let dirty = Atomic<Bool>(true)
    private let observation = Locked<EveningObservation?>(nil)

    /// Always `.karaoke`.
    public var kind: StageMessages.Kind { .karaoke }

    /// The room's phone voices.
    public var phoneVoices: [PhoneVoice] { room.phoneVoices }

    /// The host's pages, and a guest's whose singer sings the song on or the one up next (its part or its partner's).
    public func mayUsePhone(role: StageRole, singer: Int64?) -> Bool {
        if role == .host { return true }
        guard role == .guest, let singer else { return false }
        guard let now = try? library.singingAndNext() else { return false }
        return [now.singing, now.next].contains { $0.map { $0.singer == singer || $0.partner == singer } ?? false }
    }

    /// A presenter for `room`'s evening over `library`, `gap` seconds between songs.
    public init(room: KaraokeRoomPresenter, library: SongLibrary, gap: Double) {
        self.room = room
        self.library = library
        self.gap = gap
        let token = library.observeEvening { [weak self] in self?.dirty.store(true, ordering: .relaxed) }
        observation.withLock { $0 = token }
    }

    /// The address phones join at (with the guest token): shown on the big screen with its QR code.
    public func setJoinAddress(_ url: String) {
        let svg = (try? QRCode(url))?.svg
        var o = JSONObject()
        o.add("type", "join")
        o.add("url", url)
        o.add("qr", svg)
        let json = o.json
        state.withLock {
            $0.joinURL = url
            $0.joinJSON = json
        }
    }

    /// Shows a take's scores from now on: the results of each part sung with their places, and the song's top five
    /// at the difficulty sung (``/SongLibrary/SongLibrary/topScores(songHash:difficulty:limit:)``), the new ones marked.
    public func showScores(title: String, artist: String, difficulty: String, results: [(record: ScoreRecord, place: Int)], top: [ScoreRecord]) {
        var o = JSONObject()
        o.add("type", "scores")
        o.add("title", title)
        o.add("artist", artist)
        o.add("difficulty", difficulty)
        let fresh = Set(results.compactMap { $0.record.id })
        o.add("results", raw: "[" + results.map { r in
            var e = JSONObject()
            e.add("singer", r.record.singerName)
            e.add("part", r.record.part)
            e.add("score", r.record.score)
            e.add("place", r.place)
            return e.json
        }.joined(separator: ",") + "]")
        o.add("top", raw: "[" + top.enumerated().map { n, s in
            var e = JSONObject()
            e.add("place", n + 1)
            e.add("singer", s.singerName)
            e.add("part", s.part)
            e.add("score", s.score)
            e.add("date", s.date)
            e.add("new", s.id.map { fresh.contains($0) } ?? false)
            return e.json
        }.joined(separator: ",") + "]")
        let json = o.json
        state.withLock { $0.scoresJSON = json }
    }

    /// The queue's message again at the next tick (after a change the library's observation would not see).
    public func queueChanged() { dirty.store(true, ordering: .relaxed) }

    public func hello(canControl: Bool) -> String { hello(role: canControl ? .host : .viewer) }

    public func hello(role: StageRole) -> String {
        let base = room.hello(canControl: role == .host)
        return String(base.dropLast()) + ",\"role\":\"\(role.rawValue)\",\"evening\":true}"
    }

    public func tick(_ snapshot: KaraokeSnapshot, wallMilliseconds: Double) -> String {
        room.tick(snapshot, wallMilliseconds: wallMilliseconds)
    }

    public func events(_ snapshot: KaraokeSnapshot) -> [(type: String, json: String)] {
        if dirty.exchange(false, ordering: .relaxed) {
            if let json = try? queueJSON() { state.withLock { $0.queueJSON = json } } else { dirty.store(true, ordering: .relaxed) }
        }
        let s = state.withLock { $0 }
        var events = room.events(snapshot)
        events.append((type: "queue", json: s.queueJSON))
        if let join = s.joinJSON { events.append((type: "join", json: join)) }
        if let scores = s.scoresJSON { events.append((type: "scores", json: scores)) }
        return events
    }

    public func perform(_ control: StageMessages.Control) throws(AudioError) {
        try room.perform(control)
    }

    // MARK: The phones' requests

    public func evening(_ request: EveningRequest, role: StageRole, singer: Int64?) -> EveningAnswer {
        guard role != .viewer else {
            return EveningAnswer(error: "the song library is for the join address: scan the code on the big screen")
        }
        let requester: SongLibrary.Requester = role == .host ? .host : .guest(singer ?? -1)
        do throws(AudioError) {
            switch request {
            case .join(let name, let phone):
                let joined = try library.join(name: name, token: phone)
                return EveningAnswer(data: Self.json(joined), singer: joined.id)
            case .search(let text):
                let songs = try library.search(text, limit: 20)
                return EveningAnswer(data: "[" + songs.map(Self.json).joined(separator: ",") + "]")
            case .queue(let song, let part, let partnerName, let key, let difficulty, let singerName):
                let who: Int64
                if role == .host, let singerName {
                    who = try library.join(name: singerName).id!
                } else if let singer {
                    who = singer
                } else {
                    return EveningAnswer(error: "enter your name first")
                }
                var partner: Int64?
                if let partnerName {
                    if role == .host {
                        partner = try library.join(name: partnerName).id
                    } else {
                        // A phone names a partner who has joined: it may not make singers, nor move another's turn
                        // by a name it made up.
                        guard let joined = try library.singer(named: partnerName) else {
                            return EveningAnswer(error: "\(partnerName.prefix(40)) has not joined tonight: they join with their phone first")
                        }
                        partner = joined.id
                    }
                }
                let entry = try library.enqueue(
                    .init(song: song, singer: who, part: part, partner: partner, key: key, difficulty: difficulty), by: requester)
                queueChanged()
                return EveningAnswer(data: "{\"entry\":\(entry.id ?? 0)}")
            case .dequeue(let entry):
                try library.dequeue(entry, by: requester)
            case .move(let entry, let position):
                guard role == .host else { return Self.hostOnly }
                try library.move(entry, to: position)
            case .pauseQueue(let on):
                guard role == .host else { return Self.hostOnly }
                try library.setPaused(on)
            case .cap(let songs):
                guard role == .host else { return Self.hostOnly }
                try library.setQueueCap(songs)
            }
            queueChanged()
            return EveningAnswer()
        } catch {
            return EveningAnswer(error: error.message)
        }
    }

    static let hostOnly = EveningAnswer(error: "only the host may do that (the address with the stage's token)")

    /// The queue's message: paused, the cap, and the entries in the order they will be sung, each with its place,
    /// its song, its singers and when it starts after the song playing now ends (`startsAfter`, seconds: the gaps
    /// and the songs before it, a song of unknown length counted as 3 minutes).
    func queueJSON() throws(AudioError) -> String {
        let entries = try library.queue()
        let singers = Dictionary(uniqueKeysWithValues: try library.singers().map { ($0.id!, $0) })
        var songs: [Int64: LibrarySong] = [:]
        for id in Set(entries.map(\.song)) { songs[id] = try library.song(id: id) }
        var o = JSONObject()
        o.add("type", "queue")
        o.add("paused", try library.isPaused())
        o.add("cap", try library.queueCap())
        var startsAfter = gap
        var list: [String] = []
        for (n, entry) in entries.enumerated() {
            let song = songs[entry.song]
            var e = JSONObject()
            e.add("id", entry.id ?? 0)
            e.add("place", n + 1)
            e.add("state", entry.state.rawValue)
            e.add("song", entry.song)
            e.add("title", song?.title ?? "")
            e.add("artist", song?.artist ?? "")
            e.add("duet", entry.partner != nil)
            e.add("length", song?.length ?? song?.audioLength)
            e.add("singer", raw: Self.person(singers[entry.singer]))
            e.add("partner", raw: entry.partner.map { Self.person(singers[$0]) } ?? "null")
            e.add("part", entry.part)
            e.add("partnerPart", entry.partnerPart.map(Double.init))
            e.add("key", entry.key)
            e.add("difficulty", entry.difficulty)
            e.add("startsAfter", startsAfter)
            startsAfter += (song?.audioLength ?? song?.length ?? 180) + gap
            list.append(e.json)
        }
        o.add("entries", raw: "[" + list.joined(separator: ",") + "]")
        return o.json
    }

    static func person(_ singer: Singer?) -> String {
        guard let singer else { return "null" }
        var o = JSONObject()
        o.add("id", singer.id ?? 0)
        o.add("name", singer.name)
        return o.json
    }

    static func json(_ singer: Singer) -> String {
        var o = JSONObject()
        o.add("id", singer.id ?? 0)
        o.add("name", singer.name)
        o.add("key", singer.key)
        o.add("difficulty", singer.difficulty)
        return o.json
    }

    static func json(_ song: LibrarySong) -> String {
        var o = JSONObject()
        o.add("id", song.id ?? 0)
        o.add("title", song.title)
        o.add("artist", song.artist)
        o.add("duet", song.isDuet)
        o.add("parts", raw: "[" + song.parts.map(String.init).joined(separator: ",") + "]")
        o.add("singers", raw: "[" + song.singers.map(\.jsonLiteral).joined(separator: ",") + "]")
        o.add("length", song.length ?? song.audioLength)
        o.add("language", song.language)
        o.add("year", song.year.map(Double.init))
        return o.json
    }
}
