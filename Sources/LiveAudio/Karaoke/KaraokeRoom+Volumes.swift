import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits

/// The range every volume of the room and its displays takes: −96 … +12 dB, or −∞ for none.
enum VolumeRange {
    static let lowest = -96.0
    static let highest = 12.0

    /// Whether `dB` is a volume: −∞, or −96 … +12.
    static func contains(_ dB: Double) -> Bool { dB == -.infinity || (dB.isFinite && dB >= lowest && dB <= highest) }

    /// `dB` brought into the range (NaN and −∞: none).
    static func clamp(_ dB: Double) -> Double { dB == -.infinity || dB.isNaN ? -.infinity : min(highest, max(lowest, dB)) }

    /// The linear gain of a volume (AudioCore's conversion; −∞: 0).
    static func gain(_ dB: Double) -> Float { dB == -.infinity ? 0 : decibelsToGain(Float(dB)) }
}

extension KaraokeRoom {
    /// The accompaniment's live volume in dB, in the headphones and the song (`-.infinity` for none; clamped to −96 …
    /// +12), click-free, on top of the playing take's loudness gain. Any thread but the render thread.
    public var accompanimentVolume: Double {
        get { volumes.withLock { $0.accompaniment } }
        set { volumes.withLock { $0.accompaniment = VolumeRange.clamp(newValue); apply($0) } }
    }
    /// The voice's live volume in the song in dB (`-.infinity` for none; clamped to −96 … +12), click-free; the voice
    /// stems are recorded before it. Any thread but the render thread.
    public var voiceVolume: Double {
        get { volumes.withLock { $0.voice } }
        set { volumes.withLock { $0.voice = VolumeRange.clamp(newValue); apply($0) } }
    }
    /// The voice's live volume in the singer's headphones in dB (`-.infinity`: the accompaniment only; clamped to
    /// −96 … +12), click-free. Any thread but the render thread.
    public var monitorVoiceVolume: Double {
        get { volumes.withLock { $0.monitorVoice } }
        set { volumes.withLock { $0.monitorVoice = VolumeRange.clamp(newValue); apply($0) } }
    }
    /// Mutes the accompaniment in the headphones and the song, click-free, the volumes left as they are. Any thread
    /// but the render thread.
    public var isAccompanimentMuted: Bool {
        get { volumes.withLock { $0.accompanimentMuted } }
        set { volumes.withLock { $0.accompanimentMuted = newValue; apply($0) } }
    }
    /// Mutes the voice in the headphones and the song, click-free, the volumes left as they are. Any thread but the
    /// render thread.
    public var isVoiceMuted: Bool {
        get { volumes.withLock { $0.voiceMuted } }
        set { volumes.withLock { $0.voiceMuted = newValue; apply($0) } }
    }

    /// Under the volumes' lock, so the mixers end with the last values set.
    func apply(_ v: Volumes) {
        // A take's loudness normalisation is its bus's volume on the accompaniment mixer (the interlude has its own).
        let accompaniment = v.accompanimentMuted ? 0 : VolumeRange.gain(v.accompaniment)
        try? monitor.setVolume(accompaniment, bus: 0)
        echoReference?.gain = accompaniment
        try? monitor.setVolume(v.voiceMuted ? 0 : VolumeRange.gain(v.monitorVoice), bus: 1)
        try? songMix.setVolume(accompaniment, bus: 0)
        try? songMix.setVolume(v.voiceMuted ? 0 : VolumeRange.gain(v.voice), bus: 1)
    }

    /// Levels for a VU display; each reading covers what passed since the previous one.
    public var meters: KaraokeSession.Meters {
        KaraokeSession.Meters(
            voice: voiceMeter.read(), monitorVoice: monitor.meter(bus: 1), accompaniment: monitor.meter(bus: 0),
            output: routeGate.meter.read(), loudness: songLoudness.read())
    }

    /// A unit of the voice chain by its id in the graph file, for live control (`"room"` → its reverb).
    public func unit(named id: String) -> RenderUnit? { loaded.first?.units[id] }

    /// A unit of voice `voice`'s chain (1 … ``Configuration/voiceCount``) by its id in the graph file.
    public func unit(named id: String, voice: Int) -> RenderUnit? {
        loaded.indices.contains(voice - 1) ? loaded[voice - 1].units[id] : nil
    }

    /// Each voice's wet level since the previous reading (one reading with one voice).
    public var voiceLevels: [MeterReading] { voiceMeters.map { $0.read() } }

    /// The device's cycles so far, as ``Configuration/cycleTimingCapacity`` asked.
    public var cycleTimings: [CycleTiming] { io.cycleTimings }

    /// The error that stopped the device for good, or the encoder or an encoded file.
    public var failure: AudioError? { io.failure ?? encoded.withLock { $0 }?.failure }

    /// False while the route is lost: the headphones are silent, the recordings and outputs go on.
    public var isOutputRouted: Bool { io.isOutputRouted }

    /// True while the voice is out of the output because it moved off headphones (``Configuration/offHeadphones``).
    public var isVoiceOffHeadphones: Bool { headphonesGates[0].isClosed.load(ordering: .relaxed) }

    /// True while the device is open: from a start that got that far to the stop.
    public var isDeviceOpen: Bool { io.isStarted }

    /// Device events: start, xruns, faults, reconnects, route changes.
    public var deviceEvents: AsyncStream<DeviceEvent> { io.events }
    /// The device's under- and overruns since the room was made.
    public var xruns: Int { io.xrunCount }
    /// What the device granted while it runs; nil before the start, while reconnecting and after the stop.
    public var deviceGrant: DeviceGrant? { io.grant }

    /// Frames the room's recording or the encoder's writer fell too far behind for, so far.
    public var droppedFrames: Int64 { encoded.withLock { $0 }?.droppedFrames ?? 0 }

    /// The encoded outputs now (RTMP connections, files), in the order given; empty without any.
    public var outputStatistics: [LiveStreamSession.OutputStatistics] { encoded.withLock { $0 }?.statistics ?? [] }

    /// The publishers of the RTMP outputs, for their statistics streams.
    public var rtmpPublishers: [RTMPPublisher] { encoded.withLock { $0 }?.publishers.map(\.1) ?? [] }

    /// True once a display asked for the stop (``KaraokeControl/stop``); the room runs on until its owner calls
    /// ``stop()``.
    public var isStopRequested: Bool { stopRequest.load(ordering: .acquiring) }
}

extension KaraokeRoom {
    /// The room's timeline: the sample time after the device's last cycle (takes start on it). Any thread.
    public var sampleTime: Int64 { timeline.sampleTime }
}
