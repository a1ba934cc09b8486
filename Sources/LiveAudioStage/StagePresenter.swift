import AudioCore
import LiveAudio
import AudioUnits
import SingAlong

#if canImport(Glibc)
import Glibc
#endif

/// Turns a session's snapshots into the stage's messages (``StageMessages``), and the page's controls into the
/// session's: one for a karaoke session, one for a live stream. The server holds one and never looks inside.
public protocol StagePresenter: Sendable {
    /// The session's snapshot type (``/LiveAudio/KaraokeSnapshot``, ``/LiveAudio/StreamSnapshot``), which ``tick(_:wallMilliseconds:)``
    /// and ``events(_:)`` turn into messages.
    associatedtype Snapshot: Sendable
    /// The session's kind: what `hello` says and which controls ``StageMessages/control(_:kind:)`` parses.
    var kind: StageMessages.Kind { get }
    /// The first message to a page (`hello`), told whether it may control.
    func hello(canControl: Bool) -> String
    /// The `tick` for a snapshot (sent every time).
    func tick(_ snapshot: Snapshot, wallMilliseconds: Double) -> String
    /// The event messages for a snapshot, by type (`status`, `lyrics`, `score`): sent when one differs from the
    /// last sent, and all to a page that joins.
    func events(_ snapshot: Snapshot) -> [(type: String, json: String)]
    /// Does a parsed control.
    func perform(_ control: StageMessages.Control) throws(AudioError)
    /// The first message to a page of `role` (default: ``hello(canControl:)``, true for the host).
    func hello(role: StageRole) -> String
    /// Answers an evening request (the song library and its queue: ``EveningRequest``) from a page of `role` whose
    /// singer is `singer` (nil before it joined). Default: refused, the stage has no library.
    func evening(_ request: EveningRequest, role: StageRole, singer: Int64?) -> EveningAnswer
    /// The room's phone voices, which pages may sing into (default: none).
    var phoneVoices: [PhoneVoice] { get }
    /// Whether a page of `role` whose singer is `singer` may sing with its phone (default: the host's pages).
    func mayUsePhone(role: StageRole, singer: Int64?) -> Bool
}

extension StagePresenter {
    /// The `hello` of ``hello(canControl:)``: controls for the host.
    public func hello(role: StageRole) -> String { hello(canControl: role == .host) }

    /// Refused: this stage shows no evening.
    public func evening(_ request: EveningRequest, role: StageRole, singer: Int64?) -> EveningAnswer {
        EveningAnswer(error: "this stage has no song library")
    }

    /// None: this stage takes no phones.
    public var phoneVoices: [PhoneVoice] { [] }

    /// The host's pages.
    public func mayUsePhone(role: StageRole, singer: Int64?) -> Bool { role == .host }
}

extension LevelReading {
    var json: String { "[" + jsonNumber(peak) + "," + jsonNumber(rms) + "]" }
}

/// The stage of a karaoke session: lyrics, pitch lane, score, meters and the controls.
public struct KaraokeStagePresenter: StagePresenter {
    /// The session shown and controlled.
    public let session: KaraokeSession
    /// The song's title, sent in `hello`.
    public let title: String
    /// The song's artist, sent in `hello` (empty for none).
    public let artist: String
    /// Always `.karaoke`.
    public var kind: StageMessages.Kind { .karaoke }

    /// A presenter for `session`.
    /// - Parameters:
    ///   - session: the session shown and controlled.
    ///   - title: the song's title for the page.
    ///   - artist: the song's artist for the page (default: none).
    public init(session: KaraokeSession, title: String, artist: String = "") {
        self.session = session
        self.title = title
        self.artist = artist
    }

    public func hello(canControl: Bool) -> String {
        Self.hello(
            canControl: canControl, title: title, artist: artist, keyAdjustable: session.timePitch != nil,
            chart: session.configuration.chart, part: session.configuration.part)
    }

    /// The karaoke `hello`: the song's title, artist and chart lines (the part sung), and what the page may do.
    static func hello(
        canControl: Bool, title: String, artist: String, keyAdjustable: Bool, chart: SongChart?, part: Int, parts: [Int] = []
    ) -> String {
        var o = JSONObject()
        o.add("type", "hello")
        o.add("kind", "karaoke")
        song(&o, title: title, artist: artist, keyAdjustable: keyAdjustable, chart: chart, part: part, parts: parts)
        o.add("canControl", canControl)
        return o.json
    }

    /// A song's fields, in `hello` and in a room's `song` event: `lines` are `part`'s; with several voices, `parts`
    /// is the part each voice sings (voice 1 first) and `partLines` the lines of every other part the voices sing, by
    /// part number (a phone singing P2 draws its lane from them).
    static func song(
        _ o: inout JSONObject, title: String, artist: String, keyAdjustable: Bool, chart: SongChart?, part: Int, parts: [Int] = []
    ) {
        o.add("title", title)
        o.add("artist", artist)
        o.add("keyAdjustable", keyAdjustable)
        let lines = chart?.voice(part)?.lines ?? chart?.voices.first?.lines ?? []
        o.add("hasNotes", chart?.hasNotes ?? false)
        o.add("lines", raw: "[" + lines.map(Self.line).joined(separator: ",") + "]")
        guard parts.count > 1, let chart else { return }
        o.add("parts", raw: "[" + parts.map(String.init).joined(separator: ",") + "]")
        var others = JSONObject()
        for p in Set(parts).sorted() where p != part {
            guard let voice = chart.voice(p) else { continue }
            others.add(String(p), raw: "[" + voice.lines.map(Self.line).joined(separator: ",") + "]")
        }
        o.add("partLines", raw: others.json)
    }

    static func line(_ line: SongChart.Line) -> String {
        var o = JSONObject()
        o.add("start", line.start)
        o.add("end", line.end)
        o.add("text", line.text)
        let syllables = line.syllables.map { s -> String in
            var y = JSONObject()
            y.add("text", s.text)
            y.add("start", s.start)
            y.add("end", s.end)
            if let n = s.note {
                y.add("midi", n.kind.hasPitch ? Double(n.midiNote) : nil)
                y.add("kind", String(describing: n.kind))
            }
            return y.json
        }
        o.add("syllables", raw: "[" + syllables.joined(separator: ",") + "]")
        return o.json
    }

    public func tick(_ s: KaraokeSnapshot, wallMilliseconds: Double) -> String { Self.tick(s, wallMilliseconds: wallMilliseconds) }

    static func tick(_ s: KaraokeSnapshot, wallMilliseconds: Double) -> String {
        var o = JSONObject()
        o.add("type", "tick")
        o.add("wallMs", wallMilliseconds)
        o.add("position", s.position)
        o.add("state", s.songState.rawValue)
        var m = JSONObject()
        m.add("voice", raw: s.voice.json)
        m.add("monitorVoice", raw: s.monitorVoice.json)
        m.add("accompaniment", raw: s.accompaniment.json)
        m.add("output", raw: s.output.json)
        for (i, v) in s.voices.enumerated() { m.add("voice-\(i + 1)", raw: v.json) }
        o.add("meters", raw: m.json)
        o.add("loudness", raw: s.loudness.json)
        if let sung = s.singAlong?.sung {
            var p = JSONObject()
            p.add("time", sung.time)
            p.add("frequency", sung.voiced ? sung.frequency : nil)
            p.add("midi", sung.midiNote)
            p.add("voiced", sung.voiced)
            o.add("pitch", raw: p.json)
        } else {
            o.add("pitch", nil as String?)
        }
        o.add("target", s.singAlong?.targetNote.map(Double.init))
        // With several voices, each one's: the line of its part, its newest pitch and its note (null without a chart).
        if !s.voiceSingAlong.isEmpty {
            let voices = s.voiceSingAlong.map { r -> String in
                guard let r else { return "null" }
                var v = JSONObject()
                v.add("line", r.lineIndex.map(Double.init))
                if let sung = r.sung {
                    v.add("time", sung.time)
                    v.add("frequency", sung.voiced ? sung.frequency : nil)
                    v.add("midi", sung.midiNote)
                    v.add("voiced", sung.voiced)
                }
                v.add("target", r.targetNote.map(Double.init))
                return v.json
            }
            o.add("voices", raw: "[" + voices.joined(separator: ",") + "]")
        }
        return o.json
    }

    public func events(_ s: KaraokeSnapshot) -> [(type: String, json: String)] { Self.events(s) }

    static func events(_ s: KaraokeSnapshot) -> [(type: String, json: String)] {
        var status = JSONObject()
        status.add("type", "status")
        status.add("regionStart", s.regionStart)
        status.add("regionEnd", s.regionEnd)
        status.add("state", s.songState.rawValue)
        var v = JSONObject()
        v.add("accompaniment", s.accompanimentVolume)
        v.add("voice", s.voiceVolume)
        v.add("monitorVoice", s.monitorVoiceVolume)
        status.add("volumes", raw: v.json)
        var mutes = JSONObject()
        mutes.add("accompaniment", s.isAccompanimentMuted)
        mutes.add("voice", s.isVoiceMuted)
        status.add("mutes", raw: mutes.json)
        status.add("keyCents", s.keyCents)
        status.add("keyAdjustable", s.keyAdjustable)
        status.add("tempo", s.tempo)
        status.add("roundTripMs", s.roundTripMilliseconds)
        status.add("roundTripSource", s.roundTripSource)
        status.add("xruns", s.xruns)
        status.add("drops", s.droppedFrames)
        status.add("underruns", s.underruns)
        status.add("outputs", raw: "[" + s.outputs.map(\.jsonLiteral).joined(separator: ",") + "]")
        status.add("stopRequested", s.stopRequested)
        var events = [(type: "status", json: status.json)]
        if let a = s.singAlong {
            var lyrics = JSONObject()
            lyrics.add("type", "lyrics")
            lyrics.add("line", a.lineIndex.map(Double.init))
            lyrics.add("syllable", a.syllableIndex.map(Double.init))
            lyrics.add("text", a.line?.text)
            lyrics.add("next", a.nextLine?.text)
            events.append((type: "lyrics", json: lyrics.json))
            if let score = a.score {
                var o = JSONObject()
                o.add("type", "score")
                o.add("total", score.total)
                o.add("notes", score.notes)
                o.add("golden", score.golden)
                o.add("lineBonus", score.lineBonus)
                let lines = score.lines.suffix(50).map { l -> String in
                    var r = JSONObject()
                    r.add("index", l.index)
                    r.add("text", l.text)
                    r.add("rating", l.rating)
                    r.add("hitRatio", l.hitRatio)
                    r.add("points", l.points)
                    return r.json
                }
                o.add("lines", raw: "[" + lines.joined(separator: ",") + "]")
                events.append((type: "score", json: o.json))
            }
        }
        return events
    }

    public func perform(_ control: StageMessages.Control) throws(AudioError) {
        guard case .karaoke(let c) = control else {
            throw AudioError(.invalidParameter, "not a karaoke control")
        }
        try session.perform(c)
    }
}

/// The stage of a live stream: meters, the outputs, bit rate, drops and reconnects; volume, mute and stop.
public struct StreamStagePresenter: StagePresenter {
    /// The live stream shown and controlled.
    public let session: LiveStreamSession
    /// The stream's title, sent in `hello`.
    public let title: String
    /// Always `.stream`.
    public var kind: StageMessages.Kind { .stream }

    /// A presenter for `session`.
    /// - Parameters:
    ///   - session: the live stream shown and controlled.
    ///   - title: the stream's title for the page.
    public init(session: LiveStreamSession, title: String) {
        self.session = session
        self.title = title
    }

    public func hello(canControl: Bool) -> String {
        var o = JSONObject()
        o.add("type", "hello")
        o.add("kind", "stream")
        o.add("title", title)
        o.add("artist", "")
        o.add("canControl", canControl)
        o.add("lines", raw: "[]")
        return o.json
    }

    public func tick(_ s: StreamSnapshot, wallMilliseconds: Double) -> String {
        var o = JSONObject()
        o.add("type", "tick")
        o.add("wallMs", wallMilliseconds)
        o.add("position", s.seconds)
        o.add("state", s.hasEnded ? "ended" : "streaming")
        var m = JSONObject()
        m.add("input", raw: s.input.json)
        m.add("output", raw: s.output.json)
        o.add("meters", raw: m.json)
        o.add("loudness", raw: s.loudness.json)
        return o.json
    }

    public func events(_ s: StreamSnapshot) -> [(type: String, json: String)] {
        var o = JSONObject()
        o.add("type", "status")
        o.add("state", s.hasEnded ? "ended" : "streaming")
        var v = JSONObject()
        v.add("stream", s.volume > 0 ? 20 * log10(s.volume) : -Double.infinity)
        o.add("volumes", raw: v.json)
        var mutes = JSONObject()
        mutes.add("stream", s.isMuted)
        o.add("mutes", raw: mutes.json)
        o.add("packets", s.packetsEncoded)
        o.add("drops", s.droppedFrames)
        o.add("xruns", s.xruns)
        o.add("reconnects", s.deviceReconnects)
        let outputs = s.outputs.map { out -> String in
            var r = JSONObject()
            r.add("name", out.name)
            r.add("state", out.state)
            r.add("bitRate", out.bitRate)
            r.add("packets", out.packets)
            r.add("dropped", out.droppedPackets)
            r.add("reconnects", out.reconnects)
            return r.json
        }
        o.add("outputs", raw: "[" + outputs.joined(separator: ",") + "]")
        o.add("stopRequested", s.stopRequested)
        return [(type: "status", json: o.json)]
    }

    public func perform(_ control: StageMessages.Control) throws(AudioError) {
        guard case .stream(let c) = control else {
            throw AudioError(.invalidParameter, "not a stream control")
        }
        try session.perform(c)
    }
}

extension LoudnessReading {
    /// `{"momentary": …, "shortTerm": …, "integrated": …, "range": …, "truePeak": …}`: LUFS, LU and dBTP, null where
    /// there is no loudness yet.
    var json: String {
        var o = JSONObject()
        func finite(_ v: Double) -> Double? { v.isFinite ? (v * 100).rounded() / 100 : nil }
        o.add("momentary", finite(momentary))
        o.add("shortTerm", finite(shortTerm))
        o.add("integrated", finite(integrated))
        o.add("range", finite(loudnessRange))
        o.add("truePeak", finite(truePeak))
        return o.json
    }
}
