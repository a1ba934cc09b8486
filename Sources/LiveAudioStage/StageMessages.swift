import AudioCore
import LiveAudio
import FoundationEssentials

/// The stage's messages, both ways, as JSON text: what the server sends a page (``StageMessages``' encoders) and
/// the controls a page sends (``StageMessages/control(_:kind:)``). Pure functions: the fuzz target and the tests
/// drive them without a server.
///
/// Server to page, each a JSON object with a `type`:
/// - `hello` once on connecting: the session's kind (`karaoke` or `stream`), title and artist, whether this
///   connection may control (`canControl`), and for karaoke the chart's lines (text, times, syllables with notes);
/// - `tick` 30 times a second: the song's position (or the stream's seconds), the state, the meters (peak and RMS in
///   dBFS, null for silence), the sung pitch, and the server's wall clock in ms (`wallMs`);
/// - `status`, `lyrics` and `score` when they change (volumes, mutes, key, tempo, round trip, xruns, drops,
///   outputs; the line and syllable now; the score so far): a page that joins late gets each once at once;
/// - `reply` to each control: `ok` true, or false with an `error` to show.
///
/// Page to server: `{"type": "control", "action": …, "id": …}` with the action's fields; see ``control(_:kind:)``.
public enum StageMessages {
    /// The reason of the close frame a page gets when the session ends (code 1000): the page stops reconnecting.
    public static let endedReason = "the session has ended"

    /// The largest control message taken (bytes): anything longer gets an error reply and changes nothing.
    public static let maximumControlBytes = 4096

    /// The kind of session a stage shows, which decides the controls a page may send.
    public enum Kind: String, Sendable {
        /// `karaoke`: a ``/LiveAudio/KaraokeSession``; `stream`: a ``/LiveAudio/LiveStreamSession``.
        case karaoke, stream
    }

    /// A page's control, parsed: the session's own control, and the id the reply carries back.
    public enum Control: Sendable, Equatable {
        /// A control for a karaoke session.
        case karaoke(KaraokeControl)
        /// A control for a live stream.
        case stream(StreamControl)
    }

    /// A parsed control message: the control and the id its reply carries back.
    public struct Request: Sendable, Equatable {
        /// The message's `id` (a string cut to 64 characters, or an integer as text); nil when it gave none.
        public var id: String?
        /// What the page asks the session to do.
        public var control: Control

        /// A request for `control`, replied to with `id`.
        /// - Parameters:
        ///   - id: the id the reply carries back, or nil.
        ///   - control: what the page asks the session to do.
        public init(id: String?, control: Control) {
            self.id = id
            self.control = control
        }
    }

    /// Why a message was refused: said back to the page in a `reply` with `ok` false.
    public struct Refusal: Error, Sendable, Equatable {
        /// The refused message's `id`, when it could be read; nil otherwise.
        public var id: String?
        /// What was wrong, for the page to show.
        public var message: String
    }

    /// Parses a page's control message. Karaoke actions: `volume` (`part`: `accompaniment`, `voice` or
    /// `monitorVoice`; `db`: a number, or `"-inf"`/null for none), `mute` (`part`: `accompaniment` or `voice`; `on`),
    /// `key` (`cents`, or `step` in semitones), `pause`, `resume`, `seek` (`seconds`), `stop`. Stream actions:
    /// `volume` (`db`), `mute` (`on`), `stop`. `id` (a string or number, at most 64 characters) comes back in the
    /// reply.
    /// - Throws: ``Refusal`` for anything else: not JSON, too long, an unknown action or field value, a missing field.
    public static func control(_ text: String, kind: Kind) throws(Refusal) -> Request {
        let (id, fields) = try object(text)
        func refuse(_ message: String) -> Refusal { Refusal(id: id, message: message) }
        guard fields["type"] == .string("control") else { throw refuse("type must be \"control\"") }
        guard case .string(let action)? = fields["action"] else { throw refuse("action is required") }
        func number(_ key: String) throws(Refusal) -> Double {
            guard case .number(let n)? = fields[key], n.isFinite else { throw refuse("\(action): \(key) must be a number") }
            return n
        }
        func flag(_ key: String) throws(Refusal) -> Bool {
            guard case .bool(let b)? = fields[key] else { throw refuse("\(action): \(key) must be true or false") }
            return b
        }
        func decibels() throws(Refusal) -> Double {
            switch fields["db"] {
            case .null?, .string("-inf")?: return -.infinity
            case .number(let n)? where n.isFinite && n >= -96 && n <= 12: return n
            default: throw refuse("\(action): db must be -96 … 12, or \"-inf\"")
            }
        }
        switch kind {
        case .karaoke:
            let control: KaraokeControl
            switch action {
            case "volume":
                guard case .string(let p)? = fields["part"], let part = KaraokeControl.Volume(rawValue: p) else {
                    throw refuse("volume: part must be accompaniment, voice or monitorVoice")
                }
                control = .setVolume(part, decibels: try decibels())
            case "mute":
                guard case .string(let p)? = fields["part"], let part = KaraokeControl.Mute(rawValue: p) else {
                    throw refuse("mute: part must be accompaniment or voice")
                }
                control = .setMuted(part, try flag("on"))
            case "key":
                if fields["step"] != nil {
                    let step = try number("step")
                    guard abs(step) <= 24 else { throw refuse("key: step must be -24 … 24 semitones") }
                    control = .stepKey(semitones: step)
                } else {
                    let cents = try number("cents")
                    guard abs(cents) <= 2400 else { throw refuse("key: cents must be -2400 … 2400") }
                    control = .setKey(cents: cents)
                }
            case "pause": control = .pause
            case "resume": control = .resume
            case "seek":
                let seconds = try number("seconds")
                guard seconds >= 0 else { throw refuse("seek: seconds must be 0 or more") }
                control = .seek(seconds: seconds)
            case "stop": control = .stop
            case "skip": control = .skip
            default: throw refuse("unknown action \(Self.shown(action))")
            }
            return Request(id: id, control: .karaoke(control))
        case .stream:
            let control: StreamControl
            switch action {
            case "volume": control = .setVolume(decibels: try decibels())
            case "mute": control = .setMuted(try flag("on"))
            case "stop": control = .stop
            default: throw refuse("unknown action \(Self.shown(action))")
            }
            return Request(id: id, control: .stream(control))
        }
    }

    /// A page's text in a reason: letters, digits, - and _ only, at most 32 (never a long or escaped echo).
    static func shown(_ text: String) -> String {
        "\"" + String(text.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }.prefix(32)) + "\""
    }

    /// The reply to a control: `{"type":"reply","id":…,"ok":true}` or with `"ok":false,"error":…`.
    public static func reply(id: String?, error: String?) -> String {
        var o = JSONObject()
        o.add("type", "reply")
        o.add("id", id)
        o.add("ok", error == nil)
        if let error { o.add("error", error) }
        return o.json
    }
}

/// A JSON object written field by field (numbers that are not finite are null).
struct JSONObject {
    private(set) var text = "{"
    private var empty = true

    private mutating func key(_ k: String) {
        text += empty ? "" : ","
        empty = false
        text += k.jsonLiteral + ":"
    }

    mutating func add(_ k: String, _ v: String?) {
        key(k)
        text += v?.jsonLiteral ?? "null"
    }

    mutating func add(_ k: String, _ v: Double?) {
        key(k)
        text += jsonNumber(v)
    }

    mutating func add(_ k: String, _ v: Int) {
        key(k)
        text += String(v)
    }

    mutating func add(_ k: String, _ v: Int64) {
        key(k)
        text += String(v)
    }

    mutating func add(_ k: String, _ v: Bool) {
        key(k)
        text += v ? "true" : "false"
    }

    /// A value already JSON (an object or array made here).
    mutating func add(_ k: String, raw: String) {
        key(k)
        text += raw
    }

    /// The object, closed.
    var json: String { text + "}" }
}

/// A number for JSON: at most 4 decimals, null when not finite.
func jsonNumber(_ v: Double?) -> String {
    guard let v, v.isFinite else { return "null" }
    let r = (v * 10_000).rounded() / 10_000
    if r == r.rounded(), abs(r) < 1e15 { return String(Int64(r)) }
    return String(r)
}
