import AudioCore
import FoundationEssentials
import LiveAudio
import SingAlong

/// Who a page on the stage is, by the token its address gave: the host (the stage's token: everything), a guest
/// (the join address's token, a phone: the library and its own queue entries), or a viewer (neither: it watches).
public enum StageRole: String, Sendable, Equatable {
    /// The stage's token: every control, the queue's too.
    case host
    /// The join address's token (a phone): search, join, queue, and its own entries only.
    case guest
    /// No token: the page shows the stage; every request is refused.
    case viewer
}

/// What a phone or the host asks of an evening (a karaoke night over a song library): the messages of type
/// `evening` (``StageMessages/evening(_:)``).
public enum EveningRequest: Sendable, Equatable {
    /// `join`: the phone's singer, by name (`name`) and the phone's own secret (`phone`, which it keeps).
    case join(name: String, phone: String)
    /// `search`: the library's songs for `text` (as you type).
    case search(String)
    /// `queue`: a song (`song`, its library id) for the connection's singer (the host may name another: `singer`),
    /// the part (`part`), a duet partner by name (`partner`), the key in semitones (`key`) and the difficulty.
    case queue(song: Int64, part: Int?, partner: String?, key: Int?, difficulty: SingingDifficulty?, singer: String?)
    /// `dequeue`: an entry out of the queue (`entry`).
    case dequeue(Int64)
    /// `move` (host): an entry to a place in the queue (`entry`, `position`: 1 first).
    case move(Int64, position: Int)
    /// `pauseQueue` (host): no next song starts while `on`.
    case pauseQueue(Bool)
    /// `cap` (host): the songs a singer may have waiting (`songs`, 1 … 50).
    case cap(Int)
}

/// The answer to an evening request: an error for the page to show, or data for it (a JSON value), and the singer
/// the connection is from now on (after a `join`).
public struct EveningAnswer: Sendable, Equatable {
    /// What went wrong, for the page; nil when done.
    public var error: String?
    /// The reply's `data` (JSON), if any.
    public var data: String?
    /// The connection's singer from now on (a `join`'s); nil: unchanged.
    public var singer: Int64?

    /// An answer.
    /// - Parameters:
    ///   - error: what went wrong, or nil when done.
    ///   - data: the reply's `data` as JSON text, or nil.
    ///   - singer: the connection's singer from now on, or nil.
    public init(error: String? = nil, data: String? = nil, singer: Int64? = nil) {
        self.error = error
        self.data = data
        self.singer = singer
    }
}

extension StageMessages {
    /// The longest name or search a message may carry, in bytes (the library cuts names to 40 characters and
    /// searches to 200).
    public static let maximumTextBytes = 1024

    /// Parses an evening message: `{"type": "evening", "action": …, "id": …}` with the action's fields —
    /// `join` (`name`, `phone`: 16 … 64 letters, digits, `-` or `_`), `search` (`text`), `queue` (`song`; `part`
    /// 1 … 9, `partner`, `key` −12 … 12, `difficulty`, `singer` optional), `dequeue` (`entry`), `move` (`entry`,
    /// `position` ≥ 1), `pauseQueue` (`on`), `cap` (`songs` 1 … 50).
    /// - Throws: ``Refusal`` for anything else: not JSON, too long, another type, an unknown action, a field missing
    ///   or out of range.
    public static func evening(_ text: String) throws(Refusal) -> (id: String?, request: EveningRequest) {
        let (id, fields) = try object(text)
        func refuse(_ message: String) -> Refusal { Refusal(id: id, message: message) }
        guard fields["type"] == .string("evening") else { throw refuse("type must be \"evening\"") }
        guard case .string(let action)? = fields["action"] else { throw refuse("action is required") }
        func string(_ key: String, optional: Bool = false) throws(Refusal) -> String? {
            switch fields[key] {
            case nil, .null?:
                if optional { return nil }
                throw refuse("\(action): \(key) is required")
            case .string(let s)?:
                guard s.utf8.count <= maximumTextBytes else { throw refuse("\(action): \(key) is longer than \(maximumTextBytes) bytes") }
                return s
            default: throw refuse("\(action): \(key) must be text")
            }
        }
        func integer(_ key: String, _ range: ClosedRange<Int64>, optional: Bool = false) throws(Refusal) -> Int64? {
            switch fields[key] {
            case nil, .null?:
                if optional { return nil }
                throw refuse("\(action): \(key) is required")
            case .number(let n)? where n.isFinite && n == n.rounded() && n >= Double(range.lowerBound) && n <= Double(range.upperBound):
                return Int64(n)
            default: throw refuse("\(action): \(key) must be a whole number \(range.lowerBound) … \(range.upperBound)")
            }
        }
        let ids: ClosedRange<Int64> = 1...(1 << 53)
        switch action {
        case "join":
            let name = try string("name")!
            let phone = try string("phone")!
            guard (16...64).contains(phone.utf8.count), phone.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D || $0 == 0x5F })
            else { throw refuse("join: phone must be 16 … 64 letters, digits, - or _") }
            return (id, .join(name: name, phone: phone))
        case "search":
            return (id, .search(try string("text")!))
        case "queue":
            let song = try integer("song", ids)!
            let part = try integer("part", 1...9, optional: true).map(Int.init)
            let partner = try string("partner", optional: true)
            let key = try integer("key", -12...12, optional: true).map(Int.init)
            var difficulty: SingingDifficulty?
            if let d = try string("difficulty", optional: true) {
                guard let level = SingingDifficulty(rawValue: d) else { throw refuse("queue: difficulty must be easy, medium or hard") }
                difficulty = level
            }
            let singer = try string("singer", optional: true)
            return (id, .queue(song: song, part: part, partner: partner, key: key, difficulty: difficulty, singer: singer))
        case "dequeue":
            return (id, .dequeue(try integer("entry", ids)!))
        case "move":
            return (id, .move(try integer("entry", ids)!, position: Int(try integer("position", 1...10_000)!)))
        case "pauseQueue":
            guard case .bool(let on)? = fields["on"] else { throw refuse("pauseQueue: on must be true or false") }
            return (id, .pauseQueue(on))
        case "cap":
            return (id, .cap(Int(try integer("songs", 1...50)!)))
        default:
            throw refuse("unknown action \(shown(action))")
        }
    }

    /// A message's JSON object and its `id`, with the limits every message has.
    static func object(_ text: String) throws(Refusal) -> (id: String?, fields: [String: JSONValue]) {
        let bytes = text.utf8.count
        guard bytes <= maximumControlBytes else {
            throw Refusal(id: nil, message: "message too long: \(bytes) bytes, at most \(maximumControlBytes)")
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        } catch {
            throw Refusal(id: nil, message: "not a JSON message")
        }
        guard case .object(let fields) = value else { throw Refusal(id: nil, message: "a message is a JSON object") }
        var id: String?
        switch fields["id"] {
        case nil, .null?: id = nil
        case .string(let s)?: id = String(s.prefix(64))
        case .number(let n)? where n.isFinite && abs(n) < 1e15: id = String(Int64(n))
        default: throw Refusal(id: nil, message: "id must be a string or an integer")
        }
        return (id, fields)
    }

    /// Whether a message is of type `evening` (cheaply, before it is parsed in full).
    static func isEvening(_ text: String) -> Bool {
        guard text.utf8.count <= maximumControlBytes, let (_, fields) = try? object(text) else { return false }
        return fields["type"] == .string("evening")
    }

    /// The reply to a request with data: `{"type":"reply","id":…,"ok":true,"data":…}`.
    public static func reply(id: String?, answer: EveningAnswer) -> String {
        var o = JSONObject()
        o.add("type", "reply")
        o.add("id", id)
        o.add("ok", answer.error == nil)
        if let error = answer.error { o.add("error", error) }
        if let data = answer.data { o.add("data", raw: data) }
        return o.json
    }
}
