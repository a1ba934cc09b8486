import AudioCore
import LiveAudio
import SingAlong

/// The stage of a karaoke room: ``KaraokeStagePresenter``'s page for the take playing, and a `song` event each time
/// another take comes (its title, artist, chart lines and when it starts), so a page follows the evening without
/// reconnecting. The song's controls act on the take playing.
public final class KaraokeRoomPresenter: StagePresenter {
    /// The room shown and controlled.
    public let room: KaraokeRoom
    private let shown = Locked<Song>(Song())

    private struct Song {
        var number = 0
        var title = ""
        var artist = ""
        var take: KaraokeTake?
        var startTime: Int64 = 0
    }

    /// Always `.karaoke`.
    public var kind: StageMessages.Kind { .karaoke }

    /// A presenter for `room`, showing `take` (nil: none yet) as `title` by `artist`.
    public init(room: KaraokeRoom, take: KaraokeTake?, title: String, artist: String = "") {
        self.room = room
        show(take, title: title, artist: artist)
    }

    /// Shows `take` from now on: pages get a `song` event with its title, artist and lines. Any thread.
    public func show(_ take: KaraokeTake?, title: String, artist: String = "") {
        shown.withLock {
            $0.number += 1
            $0.take = take
            $0.title = title
            $0.artist = artist
            $0.startTime = take?.startTime ?? 0
        }
    }

    public func hello(canControl: Bool) -> String {
        let s = shown.withLock { $0 }
        return KaraokeStagePresenter.hello(
            canControl: canControl, title: s.title, artist: s.artist, keyAdjustable: s.take?.timePitch != nil,
            chart: s.take?.configuration.chart, part: s.take?.parts.first ?? s.take?.configuration.part ?? 1, parts: s.take?.parts ?? [])
    }

    public func tick(_ snapshot: KaraokeSnapshot, wallMilliseconds: Double) -> String {
        KaraokeStagePresenter.tick(snapshot, wallMilliseconds: wallMilliseconds)
    }

    public func events(_ snapshot: KaraokeSnapshot) -> [(type: String, json: String)] {
        let s = shown.withLock { $0 }
        var o = JSONObject()
        o.add("type", "song")
        o.add("number", s.number)
        KaraokeStagePresenter.song(
            &o, title: s.title, artist: s.artist, keyAdjustable: s.take?.timePitch != nil, chart: s.take?.configuration.chart,
            part: s.take?.parts.first ?? s.take?.configuration.part ?? 1, parts: s.take?.parts ?? [])
        // Seconds until the take starts on the room's timeline (0 once it plays): the page's countdown.
        let waiting = s.take?.secondsUntilStart ?? 0
        o.add("startsIn", waiting.rounded(.up))
        // Where the take starts on the room's timeline, exactly: seconds from the room's first frame.
        if let start = s.take?.startTime, let first = room.firstFrame { o.add("startsAt", Double(start - first) / room.sampleRate) }
        return [(type: "song", json: o.json)] + KaraokeStagePresenter.events(snapshot)
    }

    /// The room's phone voices.
    public var phoneVoices: [PhoneVoice] { room.phoneVoices }

    public func perform(_ control: StageMessages.Control) throws(AudioError) {
        guard case .karaoke(let c) = control else {
            throw AudioError(.invalidParameter, "not a karaoke control")
        }
        try room.perform(c)
    }
}
