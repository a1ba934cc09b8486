import AudioCore
import AudioUnits

#if canImport(Glibc)
import Glibc
#endif

/// A level for a display: peak and RMS in dBFS, nil for silence (−∞).
public struct LevelReading: Sendable, Hashable {
    /// The peak level in dBFS; nil for silence.
    public var peak: Double?
    /// The RMS level in dBFS; nil for silence.
    public var rms: Double?

    /// A reading of the levels given.
    /// - Parameters:
    ///   - peak: The peak level in dBFS; nil for silence.
    ///   - rms: The RMS level in dBFS; nil for silence.
    public init(peak: Double?, rms: Double?) {
        self.peak = peak
        self.rms = rms
    }

    init(_ r: MeterReading) {
        peak = r.peak > 0 ? Double(r.peakDecibels) : nil
        rms = r.rms > 0 ? Double(r.rmsDecibels) : nil
    }
}

/// Everything a display shows of a karaoke session at one moment: the song's place, the levels, the volumes and
/// mutes, the key and tempo, the round trip, xruns and drops, the outputs, and — with a chart or lyrics — the
/// lyrics, the sung pitch and the score. The terminal screen and the web stage draw it; an app may too. Take it
/// through one ``SnapshotMonitor`` (``KaraokeSession/snapshot()`` reads the meters, whose readings cover what was
/// rendered since the previous one).
public struct KaraokeSnapshot: Sendable {
    /// Where the song is in its life: playing, held, or over.
    public enum SongState: String, Sendable, Hashable {
        /// `playing`: neither paused nor ended (before the session's start too); `paused`: held by
        /// ``KaraokeSession/pauseSong()``; `ended`: played to its end, and what follows it has passed
        /// (``KaraokeSession/songHasEnded``).
        case playing, paused, ended
    }

    /// Seconds on the monotonic clock when it was taken.
    public var taken: Double
    /// Where the song is as heard, seconds of the file (``KaraokeSession/songPosition``).
    public var position: Double
    /// The start of the session's region (``KaraokeSession/region``: the one it was made with, not one that
    /// ``KaraokeSession/playSong(_:)`` set later), seconds of the file.
    public var regionStart: Double
    /// The end of that region, seconds of the file: the end of one pass of a loop, or the file's end for a region
    /// without one.
    public var regionEnd: Double
    /// Whether the song plays, is paused or has ended.
    public var songState: SongState
    /// The wet voice as sung, before any volume or mute.
    public var voice: LevelReading
    /// The voice in the headphones (after the monitor voice volume and the voice mute).
    public var monitorVoice: LevelReading
    /// The accompaniment in the headphones (after its volume, its loudness gain and its mute).
    public var accompaniment: LevelReading
    /// The headphones' mix as they get it (silence while the route is lost).
    public var output: LevelReading
    /// The song's loudness (EBU R128; the mix that is encoded).
    public var loudness: LoudnessReading
    /// The accompaniment's volume in dB (−∞ for none), in the headphones and the song.
    public var accompanimentVolume: Double
    /// The voice's volume in the song, dB (−∞ for none).
    public var voiceVolume: Double
    /// The voice's volume in the headphones, dB (−∞ for none).
    public var monitorVoiceVolume: Double
    /// Whether the accompaniment is muted (headphones and song).
    public var isAccompanimentMuted: Bool
    /// Whether the voice is muted (headphones and song).
    public var isVoiceMuted: Bool
    /// The key change in cents (+200: two semitones up; 0 without a time-pitch unit).
    public var keyCents: Double
    /// Whether the key may change now: the session has a time-pitch unit (``KaraokeControl/setKey(cents:)``).
    public var keyAdjustable: Bool
    /// The song's tempo (1: as it is), from ``KaraokeSession/Configuration/tempo``.
    public var tempo: Double
    /// The round trip the recordings are shifted by, in milliseconds (0 before the start).
    public var roundTripMilliseconds: Double
    /// Where the round trip came from: "device", "calibration" or "given" (empty before the start).
    public var roundTripSource: String
    /// The device's under- and overruns since the session was made.
    public var xruns: Int
    /// Frames the recorders' or the encoder's writer fell too far behind for (silence in their place).
    public var droppedFrames: Int64
    /// Cycles that found the accompaniment short — its file reader behind, or its look-ahead ring not filled in
    /// time — as ``KaraokeSession/Summary/accompanimentUnderruns`` counts them.
    public var underruns: Int
    /// Each encoded output as a line (keys hidden).
    public var outputs: [String]
    /// Lyrics, pitch and score (nil without a chart or lyrics).
    public var singAlong: SingAlongReadout?
    /// A display asked the session to stop (``KaraokeControl/stop``): its owner should call ``KaraokeSession/stop()``.
    public var stopRequested: Bool
    /// Each voice's wet level, with several voices (``KaraokeRoom/Configuration/voiceCount``); empty with one, whose
    /// level is ``voice``.
    public var voices: [LevelReading] = []
    /// Each voice's lyrics, pitch and score, with several voices (phones too) and a chart: its part's line, what it
    /// sang last and the note to sing (``KaraokeTake/singAlong(voice:)``); empty with one, whose readout is
    /// ``singAlong``.
    public var voiceSingAlong: [SingAlongReadout?] = []
}

/// What a display may do to a running karaoke session: the terminal's keys and the web stage's controls are these.
public enum KaraokeControl: Sendable, Hashable {
    /// Which volume ``KaraokeControl/setVolume(_:decibels:)`` and ``KaraokeControl/stepVolume(_:by:)`` change.
    public enum Volume: String, Sendable, Hashable, CaseIterable {
        /// `accompaniment`: in the headphones and the song (``KaraokeSession/accompanimentVolume``); `voice`: the
        /// voice in the song (``KaraokeSession/voiceVolume``); `monitorVoice`: the voice in the headphones
        /// (``KaraokeSession/monitorVoiceVolume``).
        case accompaniment, voice, monitorVoice
    }
    /// Which mute ``KaraokeControl/setMuted(_:_:)`` and ``KaraokeControl/toggleMuted(_:)`` change.
    public enum Mute: String, Sendable, Hashable, CaseIterable {
        /// `accompaniment`: ``KaraokeSession/isAccompanimentMuted``; `voice`: ``KaraokeSession/isVoiceMuted`` (each
        /// in the headphones and the song).
        case accompaniment, voice
    }

    /// A volume in dB: −∞ (none) or −96 … +12.
    case setVolume(Volume, decibels: Double)
    /// A volume up or down by `by` dB, as a key steps it: down past −60 dB to none, up from none to −40 dB, at most
    /// +12.
    case stepVolume(Volume, by: Double)
    /// A mute on (true) or off (false).
    case setMuted(Mute, Bool)
    /// A mute turned on when it is off, off when it is on.
    case toggleMuted(Mute)
    /// The key: −2400 … 2400 cents (with a time-pitch in the session).
    case setKey(cents: Double)
    /// The key moved by semitones, within −24 … 24.
    case stepKey(semitones: Double)
    /// Holds the song where it is heard (``KaraokeSession/pauseSong()``).
    case pause
    /// Goes on from where the song was held (``KaraokeSession/resumeSong()``).
    case resume
    /// Resumes a paused song, pauses one that is not.
    case togglePause
    /// The song to a place, seconds of the file within the region playing.
    case seek(seconds: Double)
    /// Asks the session's owner to stop it (``KaraokeSession/isStopRequested``).
    case stop
    /// Asks the room's owner to end the take playing and go on to the next song (``KaraokeRoom/takeSkipRequest()``).
    case skip
}

extension KaraokeSession {
    /// The session now, for a display; reads the meters (see ``KaraokeSnapshot``). Any thread but the render thread.
    public func snapshot() -> KaraokeSnapshot { room.snapshot(of: take) }

    /// True while the song is held by ``pauseSong()``.
    public var isSongPaused: Bool { take.isSongPaused }

    /// True once a display asked for the stop (``KaraokeControl/stop``); the session runs on until its owner
    /// calls ``stop()``.
    public var isStopRequested: Bool { room.isStopRequested }

    /// Does what a display asks. Any thread but the render thread.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a value out of range (the session unchanged),
    ///   `.invalidState` for a key change without a time-pitch or a seek before the start, as the calls it makes.
    public func perform(_ control: KaraokeControl) throws(AudioError) {
        do throws(AudioError) { try room.perform(control, on: take) } catch {
            throw error.code == .invalidState && error.message.hasPrefix("the song starts with the take")
                ? AudioError(.invalidState, "the song starts with the session: seek or play a part once it has started") : error
        }
    }
}

extension KaraokeRoom {
    /// The room now, with the take playing (if any), for a display; reads the meters. Any thread but the render
    /// thread.
    public func snapshot() -> KaraokeSnapshot { snapshot(of: currentTake) }

    /// The room now with `take`'s song (between takes: the song ended, nothing playing).
    func snapshot(of take: KaraokeTake?) -> KaraokeSnapshot {
        let m = meters
        let rate = sampleRate
        let region = take?.regionPlaying ?? .wholeFile
        let regionStart = Double(region.startFrame) / rate
        let regionEnd = take.map { Double(region.frameCount.map { region.startFrame + $0 } ?? $0.player.fileFrames) / rate } ?? 0
        let songState: KaraokeSnapshot.SongState =
            take.map { $0.songHasEnded ? .ended : $0.isSongPaused ? .paused : .playing } ?? .ended
        return KaraokeSnapshot(
            taken: Double(monotonicNanoseconds()) / 1e9, position: take?.songPosition ?? 0, regionStart: regionStart,
            regionEnd: regionEnd, songState: songState, voice: LevelReading(m.voice),
            monitorVoice: LevelReading(m.monitorVoice), accompaniment: LevelReading(m.accompaniment),
            output: LevelReading(m.output), loudness: m.loudness, accompanimentVolume: accompanimentVolume, voiceVolume: voiceVolume,
            monitorVoiceVolume: monitorVoiceVolume, isAccompanimentMuted: isAccompanimentMuted,
            isVoiceMuted: isVoiceMuted, keyCents: take?.keyCents ?? 0, keyAdjustable: take?.timePitch != nil,
            tempo: take?.configuration.tempo ?? 1, roundTripMilliseconds: Double(roundTripFrames) * 1000 / rate,
            roundTripSource: roundTripSource, xruns: xruns, droppedFrames: droppedFrames + (take?.droppedFrames ?? 0),
            underruns: take?.accompanimentUnderruns ?? 0, outputs: outputStatistics.map(\.description), singAlong: take?.singAlong,
            stopRequested: isStopRequested, voices: voiceMeters.count > 1 ? voiceLevels.map(LevelReading.init) : [],
            voiceSingAlong: take.map { t in t.followers.count > 1 ? (1...t.followers.count).map { t.singAlong(voice: $0) } : [] } ?? [])
    }

    /// Does what a display asks, the song's controls on the take playing. Any thread but the render thread.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a value out of range (the room unchanged),
    ///   `.invalidState` for a song's control between takes, a key change without a time-pitch or a seek before the
    ///   take plays.
    public func perform(_ control: KaraokeControl) throws(AudioError) { try perform(control, on: currentTake) }

    func perform(_ control: KaraokeControl, on take: KaraokeTake?) throws(AudioError) {
        func playing() throws(AudioError) -> KaraokeTake {
            guard let take else { throw AudioError(.invalidState, "no song is playing: the song's controls act on a take") }
            return take
        }
        switch control {
        case .setVolume(let which, let dB):
            guard VolumeRange.contains(dB) else {
                throw AudioError(.invalidParameter, "a volume is -inf or -96 … 12 dB, got \(dB)")
            }
            setVolume(which, dB)
        case .stepVolume(let which, let by):
            guard by.isFinite, abs(by) <= 24 else { throw AudioError(.invalidParameter, "a volume step is at most 24 dB, got \(by)") }
            let dB = volume(which)
            setVolume(which, dB == -.infinity ? (by > 0 ? -40 : -.infinity) : (dB + by < -60 ? -.infinity : min(VolumeRange.highest, dB + by)))
        case .setMuted(let which, let on):
            switch which {
            case .accompaniment: isAccompanimentMuted = on
            case .voice: isVoiceMuted = on
            }
        case .toggleMuted(let which):
            switch which {
            case .accompaniment: isAccompanimentMuted.toggle()
            case .voice: isVoiceMuted.toggle()
            }
        case .setKey(let cents):
            guard cents.isFinite, abs(cents) <= 2400 else {
                throw AudioError(.invalidParameter, "the key is -2400 … 2400 cents, got \(cents)")
            }
            try playing().setKey(cents: cents)
        case .stepKey(let semitones):
            guard semitones.isFinite, abs(semitones) <= 48 else {
                throw AudioError(.invalidParameter, "a key step is at most 48 semitones, got \(semitones)")
            }
            let take = try playing()
            try take.setKey(cents: max(-2400, min(2400, take.keyCents + semitones * 100)))
        case .pause: try playing().pauseSong()
        case .resume: try playing().resumeSong()
        case .togglePause:
            let take = try playing()
            if take.isSongPaused { take.resumeSong() } else { take.pauseSong() }
        case .seek(let seconds):
            guard seconds.isFinite else { throw AudioError(.invalidParameter, "a seek needs a time in seconds") }
            try playing().seekSong(toSeconds: seconds)
        case .stop: stopRequest.store(true, ordering: .releasing)
        case .skip: skipRequest.store(true, ordering: .releasing)
        }
    }

    /// True once, after a display asked to skip the take playing (``KaraokeControl/skip``): the owner ends it (the
    /// room only carries the request). Any thread.
    public func takeSkipRequest() -> Bool { skipRequest.exchange(false, ordering: .acquiringAndReleasing) }

    private func volume(_ which: KaraokeControl.Volume) -> Double {
        switch which {
        case .accompaniment: accompanimentVolume
        case .voice: voiceVolume
        case .monitorVoice: monitorVoiceVolume
        }
    }

    private func setVolume(_ which: KaraokeControl.Volume, _ dB: Double) {
        switch which {
        case .accompaniment: accompanimentVolume = dB
        case .voice: voiceVolume = dB
        case .monitorVoice: monitorVoiceVolume = dB
        }
    }
}
