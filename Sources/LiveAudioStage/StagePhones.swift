import Dispatch
import LiveAudio
import Synchronization

/// A page's phone messages (`{"type":"phone",…}`), parsed.
public enum PhoneRequest: Sendable, Equatable {
    /// Sing with this phone: take a phone voice; with the offset it was calibrated to before (a page that
    /// reconnected), no calibration; with the page's `claim` (a random name it made when it started singing), the
    /// voice it had, kept for it for a while after its connection dropped, and its clock readings with it.
    case sing(offset: Double?, claim: String? = nil)
    /// Stop singing with it: give the voice back.
    case stop
    /// Measure the phone's offset again (the room plays its chirps).
    case calibrate
    /// The answer to the room's clock reading: the room's time as sent (µs) and the phone's clock (µs) on arrival.
    case clock(room: Double, phone: Double)
    /// The phone's offset set by hand, seconds (−2 … 2), instead of a calibration's.
    case offset(Double)
}

extension StageMessages {
    /// Whether a page's message is a phone message.
    static func isPhone(_ text: String) -> Bool {
        guard text.utf8.count <= maximumControlBytes, let (_, fields) = try? object(text) else { return false }
        return fields["type"] == .string("phone")
    }

    /// Parses a phone message: `action` `sing`, `stop`, `calibrate`, or `clock` with `room` and `phone` (finite
    /// numbers, microseconds).
    /// - Throws: ``Refusal`` naming what is wrong.
    public static func phone(_ text: String) throws(Refusal) -> (id: String?, request: PhoneRequest) {
        let (id, fields) = try object(text)
        guard fields["type"] == .string("phone") else { throw Refusal(id: id, message: "not a phone message") }
        guard case .string(let action)? = fields["action"] else { throw Refusal(id: id, message: "a phone message needs an action") }
        switch action {
        case "sing":
            var claim: String?
            switch fields["claim"] {
            case nil, .null?: claim = nil
            case .string(let c)? where (16...64).contains(c.utf8.count) && c.utf8.allSatisfy(Self.isClaimByte): claim = c
            default: throw Refusal(id: id, message: "a claim is 16 … 64 letters, digits, '-' or '_'")
            }
            switch fields["offset"] {
            case nil, .null?: return (id, .sing(offset: nil, claim: claim))
            case .number(let seconds)? where seconds.isFinite && abs(seconds) <= 2: return (id, .sing(offset: seconds, claim: claim))
            default: throw Refusal(id: id, message: "an offset is seconds, −2 … 2")
            }
        case "stop": return (id, .stop)
        case "calibrate": return (id, .calibrate)
        case "offset":
            guard case .number(let seconds)? = fields["seconds"], seconds.isFinite, abs(seconds) <= 2 else {
                throw Refusal(id: id, message: "an offset is seconds, −2 … 2")
            }
            return (id, .offset(seconds))
        case "clock":
            guard case .number(let room)? = fields["room"], case .number(let phone)? = fields["phone"], room.isFinite, phone.isFinite,
                abs(room) < 1e17, abs(phone) < 1e17
            else { throw Refusal(id: id, message: "a clock answer needs the room's time and the phone's (microseconds)") }
            return (id, .clock(room: room, phone: phone))
        default:
            throw Refusal(id: id, message: "unknown phone action '\(action.prefix(32))'")
        }
    }
}

extension StageMessages {
    static func isClaimByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x5F
    }
}

/// The pages singing into the room's phone voices: which page has which voice, its clock readings, and its audio —
/// each phone's packets decoded and placed on a queue of its own, never on the event loop every page shares.
///
/// A phone that sends what is not audio, more than its queue can hold (a second of packets), or faster than real
/// time is dropped: its connection is closed and its voice given back, the take going on without it.
final class StagePhones: Sendable {
    let voices: [PhoneVoice]
    private struct Link {
        let client: StageClient
        let voice: PhoneVoice
        /// Which taking of a voice this is: a packet queued for an earlier one does not count against this one.
        let generation: Int
        /// The page's name for its singing (``PhoneRequest/sing(offset:claim:)``), if it gave one.
        var claim: String?
        var pending = 0
        var pings = 0
        var nextPing: UInt64 = 0
        var invalid = 0
        /// Looks in a row (``endTurns(why:mayUsePhone:)``) that found the page's singer out of turn.
        var outOfTurn = 0
    }
    /// A voice kept for a page whose connection dropped.
    private struct Kept {
        let claim: String
        /// Until when (monotonic ns).
        let until: UInt64
        /// Who the page was: its voice is forgotten when that singer's turn is over.
        let role: StageRole
        let singer: Int64?
        var outOfTurn = 0
    }
    private struct Links {
        var byClient: [Int: Link] = [:]
        var generations = 0
        /// Voices whose page's connection dropped, by voice: kept for that page's claim for a while.
        var kept: [Int: Kept] = [:]
    }
    private let links = Mutex<Links>(Links())
    /// How long a voice is kept for a page whose connection dropped (it reconnects within seconds).
    static let keptFor: UInt64 = 30_000_000_000
    /// One serial queue a voice, whoever sings into it: its packets, its connects and disconnects in order (a page
    /// that reconnects is connected after its old connection's packets and disconnect).
    private let queues: [Int: DispatchQueue]
    /// Packets a phone may have waiting to be decoded (50: a second of 20 ms packets).
    static let maximumPending = 50

    init(voices: [PhoneVoice]) {
        self.voices = voices
        queues = Dictionary(uniqueKeysWithValues: voices.map { ($0.voice, DispatchQueue(label: "la-phone-\($0.voice)")) })
    }

    /// `client` takes a voice (or keeps the one it has), connected with `offset` (seconds) when the page knows its
    /// own; returns its number, and whether it was taken now.
    ///
    /// With a `claim`, the page gets back the voice it sang into under that claim: from a connection of its own the
    /// room has not yet seen drop (that one is closed), or kept for it since its connection dropped (for
    /// ``keptFor``) — its clock readings, its drift and its offset go on. Without, or for a claim the room does not
    /// know, the first voice that is neither taken nor kept for another page.
    /// - Throws: ``/AudioCore/AudioError`` `.busy` when every phone voice is taken or kept (or the room has none).
    func take(
        _ client: StageClient, offset: Double? = nil, claim: String? = nil
    ) throws(AudioError) -> (voice: Int, new: Bool, resumed: Bool) {
        let now = monotonicNanoseconds()
        let (voice, new, resumed, replaced) = try links.withLock {
            (l: inout Links) throws(AudioError) -> (PhoneVoice, Bool, Bool, StageClient?) in
            if let mine = l.byClient[client.id] {
                // A page whose first sing raced its reconnect: its claim from now on.
                if mine.claim == nil, let claim { l.byClient[client.id]!.claim = claim }
                return (mine.voice, false, false, nil)
            }
            l.kept = l.kept.filter { $0.value.until > now }
            var pick: (voice: PhoneVoice, resumed: Bool, replaced: StageClient?)?
            if let claim {
                if let (id, old) = l.byClient.first(where: { $0.value.claim == claim }) {
                    // The same page on a new connection, its old one not yet seen to drop.
                    l.byClient.removeValue(forKey: id)
                    pick = (old.voice, true, old.client)
                } else if let number = l.kept.first(where: { $0.value.claim == claim })?.key,
                    let voice = voices.first(where: { $0.voice == number }),
                    !l.byClient.values.contains(where: { $0.voice.voice == number })
                {
                    pick = (voice, true, nil)
                }
            }
            if pick == nil {
                let used = Set(l.byClient.values.map(\.voice.voice)).union(l.kept.keys)
                guard let voice = voices.first(where: { !used.contains($0.voice) }) else {
                    throw AudioError(
                        .busy,
                        voices.isEmpty
                            ? "this room takes no phones"
                            : "every phone voice (\(voices.count)) is taken"
                                + (l.kept.isEmpty
                                    ? ""
                                    : " (\(l.kept.count) kept for \(l.kept.count == 1 ? "a page" : "pages") whose connection dropped, for up to \(Self.keptFor / 1_000_000_000) s)"))
                }
                pick = (voice, false, nil)
            }
            let voice = pick!.voice
            l.kept.removeValue(forKey: voice.voice)
            l.generations += 1
            l.byClient[client.id] = Link(client: client, voice: voice, generation: l.generations, claim: claim)
            return (voice, true, pick!.resumed, pick!.replaced)
        }
        replaced?.abort()
        if new { queues[voice.voice]?.async { voice.connect(offset: offset, resuming: resumed) } }
        return (voice.voice, new, resumed)
    }

    /// `client` gives its voice back: it stopped, or was dropped (`keep` false), or its connection ended (`keep`
    /// true: the voice is kept for its claim for ``keptFor``, the page reconnecting by itself).
    func release(_ client: StageClient, keep: Bool = false) {
        let now = monotonicNanoseconds()
        guard
            let link = links.withLock({ l -> Link? in
                guard let link = l.byClient.removeValue(forKey: client.id) else { return nil }
                if keep, let claim = link.claim {
                    l.kept[link.voice.voice] = Kept(claim: claim, until: now + Self.keptFor, role: client.role, singer: client.singer)
                }
                return link
            })
        else { return }
        queues[link.voice.voice]?.async { link.voice.disconnect() }
    }

    /// Looks in a row that must find a page's singer out of turn before its voice ends (about a second apart): one
    /// look between two songs, as the library moves one on, does not end a phone that may still sing.
    static let outOfTurnLooks = 3

    /// Ends the singing of the pages whose singer may no longer sing with a phone (`mayUsePhone` false on
    /// ``outOfTurnLooks`` looks in a row — a guest whose song is neither on nor next): each one's voice is given back
    /// and the page is told `why` (its connection stays); and forgets, the same way, the voices kept for dropped pages
    /// whose singer's turn is over, so that other pages may take them. Returns how many pages it ended.
    ///
    /// Called about once a second, off the event loop: `mayUsePhone` may read the song library.
    @discardableResult
    func endTurns(why: String, mayUsePhone: (StageRole, Int64?) -> Bool) -> Int {
        let (holders, kept) = links.withLock { l in
            (l.byClient.map { (id: $0.key, role: $0.value.client.role, singer: $0.value.client.singer) },
             l.kept.map { (voice: $0.key, role: $0.value.role, singer: $0.value.singer) })
        }
        guard !holders.isEmpty || !kept.isEmpty else { return 0 }
        let outOfTurn = Set(holders.filter { !mayUsePhone($0.role, $0.singer) }.map(\.id))
        let keptOutOfTurn = Set(kept.filter { !mayUsePhone($0.role, $0.singer) }.map(\.voice))
        // Given back here, under the lock that counted the looks: a page that stopped and sang again in between is a
        // new link (its count from 0), not the one found out of turn.
        let ended = links.withLock { l -> [Link] in
            var ended: [Link] = []
            for id in Array(l.byClient.keys) {
                l.byClient[id]!.outOfTurn = outOfTurn.contains(id) ? l.byClient[id]!.outOfTurn + 1 : 0
                if l.byClient[id]!.outOfTurn >= Self.outOfTurnLooks, let link = l.byClient.removeValue(forKey: id) { ended.append(link) }
            }
            for voice in Array(l.kept.keys) {
                l.kept[voice]!.outOfTurn = keptOutOfTurn.contains(voice) ? l.kept[voice]!.outOfTurn + 1 : 0
                if l.kept[voice]!.outOfTurn >= Self.outOfTurnLooks { l.kept.removeValue(forKey: voice) }
            }
            return ended
        }
        for link in ended {
            queues[link.voice.voice]?.async { link.voice.disconnect() }
            link.client.post(type: "phone-ended", StageMessages.phoneEnded(why))
        }
        return ended.count
    }

    /// Sets `client`'s voice's offset by hand (in order with its connect and its packets).
    func setOffset(_ client: StageClient, seconds: Double) -> PhoneVoice? {
        guard let voice = voice(of: client) else { return nil }
        queues[voice.voice]?.async { voice.setOffset(seconds) }
        return voice
    }

    /// The voice `client` sings into, if any.
    func voice(of client: StageClient) -> PhoneVoice? { links.withLock { $0.byClient[client.id]?.voice } }

    /// The page's answer to a clock reading, received now.
    func clock(_ client: StageClient, room: Double, phone: Double) {
        guard let voice = voice(of: client) else { return }
        voice.clockReading(sentMicros: room, phoneMicros: phone, receivedMicros: Self.nowMicros())
    }

    /// What became of a binary message.
    enum Taken: Equatable { case taken, notSinging, dropped(String) }

    /// A binary message from `client`: a packet of its audio, parsed here and decoded on its queue. `.dropped` with
    /// why when the page must go (garbage three times, a flood: its voice is given back here); `.notSinging` from a
    /// page that has no phone voice.
    func audio(_ client: StageClient, _ bytes: [UInt8]) -> Taken {
        guard links.withLock({ $0.byClient[client.id] != nil }) else { return .notSinging }
        let packet: PhoneAudioPacket
        do {
            packet = try PhoneAudioPacket(decoding: bytes)
        } catch {
            let invalid = links.withLock { l -> Int in
                l.byClient[client.id]?.invalid += 1
                return l.byClient[client.id]?.invalid ?? 3
            }
            guard invalid >= 3 else { return .taken }
            release(client)
            return .dropped("three messages that are not a phone's audio (the last: \(error.message))")
        }
        guard
            let link = links.withLock({ l -> Link? in
                guard l.byClient[client.id] != nil, l.byClient[client.id]!.pending < Self.maximumPending else { return nil }
                l.byClient[client.id]!.pending += 1
                return l.byClient[client.id]
            }), let queue = queues[link.voice.voice]
        else {
            release(client)
            return .dropped("more than a second of audio waiting: the phone sends faster than the room takes it")
        }
        queue.async { [self] in
            defer {
                links.withLock { l in
                    if l.byClient[client.id]?.generation == link.generation { l.byClient[client.id]!.pending -= 1 }
                }
            }
            // A packet of a taking that has ended (the page stopped or went meanwhile) is not this voice's any more.
            guard links.withLock({ $0.byClient[client.id]?.generation == link.generation }) else { return }
            do throws(AudioError) {
                try link.voice.audio(
                    codec: packet.codec == .opus ? .opus : .pcm16, payload: packet.payload, sampleRate: packet.sampleRate,
                    channelCount: packet.channelCount, captureMicroseconds: packet.captureMicroseconds, sequence: packet.sequence,
                    isFirst: packet.isFirst)
            } catch {
                let invalid = links.withLock { l -> Int in
                    l.byClient[client.id]?.invalid += 1
                    return l.byClient[client.id]?.invalid ?? 0
                }
                if error.code == .invalidParameter || invalid >= 3 {
                    release(client)
                    // Its own kind in the page's outbox: a calibration's result posted after it does not replace it.
                    client.post(type: "phone-ended", StageMessages.phoneEnded(error.message))
                    client.abort()
                }
            }
        }
        return .taken
    }

    /// The clock readings due now: ten a second (the best of each two seconds is what counts: the more readings, the
    /// likelier one with a short round trip, whose midpoint a jittery network has split least unevenly — a few dozen
    /// bytes each way), and with every third the voice's state for the page.
    func pings() {
        let now = monotonicNanoseconds()
        let due = links.withLock { l -> [(StageClient, Bool)] in
            var due: [(StageClient, Bool)] = []
            for (id, link) in l.byClient where now >= link.nextPing {
                l.byClient[id]!.pings += 1
                l.byClient[id]!.nextPing = now + 100_000_000
                due.append((link.client, link.pings % 3 == 0))
            }
            return due
        }
        for (client, withStatus) in due {
            client.post(type: "clock", "{\"type\":\"clock\",\"room\":\(Int64(Self.nowMicros()))}")
            if withStatus, let report = voice(of: client)?.report { client.post(type: "phone-status", StageMessages.phoneStatus(report)) }
        }
    }

    /// The phones' reports, for the page that asks and the room's status.
    func reports() -> [PhoneVoice.Report] { voices.map(\.report) }

    static func nowMicros() -> Double { Double(monotonicNanoseconds()) / 1000 }
}

extension StageMessages {
    /// A phone voice ended by the room: `{"type":"phone","ended":…}` with why.
    static func phoneEnded(_ why: String) -> String {
        var o = JSONObject()
        o.add("type", "phone")
        o.add("ended", why)
        return o.json
    }
}

extension StageMessages {
    /// A phone voice's calibration: `{"type":"phone","voice":N,"offset":seconds}` or with `error`.
    static func phoneCalibrated(voice: Int, offset: Double? = nil, error: String? = nil) -> String {
        var o = JSONObject()
        o.add("type", "phone")
        o.add("voice", voice)
        if let offset { o.add("offset", offset) }
        if let error { o.add("error", error) }
        return o.json
    }
}

extension StageMessages {
    /// A phone voice's state for its page: `{"type":"phone-status",…}` (seconds, counts).
    static func phoneStatus(_ r: PhoneVoice.Report) -> String {
        var o = JSONObject()
        o.add("type", "phone-status")
        o.add("voice", r.voice)
        o.add("offset", r.offset)
        o.add("roundTrip", r.roundTrip)
        o.add("clockDriftPPM", r.clockDriftPPM)
        o.add("captureStart", r.captureStart)
        o.add("firstSound", r.firstSound)
        o.add("packets", r.packets)
        o.add("bytes", r.bytes)
        o.add("unplaced", r.unplaced)
        o.add("late", r.counters.late)
        o.add("holes", r.counters.holes)
        o.add("margin", r.counters.margin.map { Double($0) })
        o.add("runs", r.runs)
        return o.json
    }
}
