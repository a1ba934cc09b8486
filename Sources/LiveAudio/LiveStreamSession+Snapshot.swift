import AudioCore
import RTMP
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Everything a display shows of a live stream at one moment: the levels, the volume and mute, the encoder's and
/// the device's figures, and each output's state and bit rate. Take it through one ``SnapshotMonitor``
/// (``LiveStreamSession/snapshot()`` reads the meters).
public struct StreamSnapshot: Sendable {
    /// One output's state and figures (``LiveStreamSession/OutputStatistics`` as a display shows them).
    public struct Output: Sendable, Hashable {
        /// The output as printed (an RTMP URL's key hidden, or a file's path).
        public var name: String
        /// An RTMP connection's state (`connecting`, `publishing`, `reconnecting`, `failed`, `stopped`…), or
        /// `writing` for a file.
        public var state: String
        /// Audio bits per second over the last interval (RTMP; 0 for a file).
        public var bitRate: Double
        /// Packets sent to the server (RTMP) or written to the file.
        public var packets: Int
        /// Packets an RTMP output dropped: pushed out of a full queue, lost in a failed write, or left unsent at stop
        /// (0 for a file).
        public var droppedPackets: Int
        /// Times an RTMP output reconnected to its server successfully (0 for a file).
        public var reconnects: Int
    }

    /// When the snapshot was taken: CLOCK_MONOTONIC, seconds.
    public var taken: Double
    /// Seconds of input taken in.
    public var seconds: Double
    /// What the input delivers, before the graph.
    public var input: LevelReading
    /// What is encoded: after the graph, the volume and the mute.
    public var output: LevelReading
    /// The programme's loudness (EBU R128; what is encoded).
    public var loudness: LoudnessReading
    /// Linear gain 0 … 4 after the graph.
    public var volume: Double
    /// Whether silence is being encoded.
    public var isMuted: Bool
    /// AAC packets encoded so far.
    public var packetsEncoded: Int
    /// Frames the encoder had no room for.
    public var droppedFrames: Int64
    /// Device under- and overruns (0 for a file input).
    public var xruns: Int
    /// Times the device was reopened after a fault (0 for a file input).
    public var deviceReconnects: Int
    /// Each output's state, in the order configured.
    public var outputs: [Output]
    /// The session has ended on its own (``LiveStreamSession/hasEnded``): a file input played to its end, the
    /// device stopped for good, or encoding failed.
    public var hasEnded: Bool
    /// A display asked for the stop (``StreamControl/stop``).
    public var stopRequested: Bool
}

/// What a display may do to a running live stream.
public enum StreamControl: Sendable, Hashable {
    /// The volume in dB (−∞ for none, at most +12: the session's linear gain is at most 4).
    case setVolume(decibels: Double)
    /// Mutes (true) or unmutes (false): while muted, silence is encoded.
    case setMuted(Bool)
    /// Mutes when unmuted, unmutes when muted.
    case toggleMuted
    /// Asks the session's owner to stop it (``LiveStreamSession/isStopRequested``).
    case stop
}

extension LiveStreamSession {
    /// The session now, for a display; reads the meters. Any thread but the render thread.
    public func snapshot() -> StreamSnapshot {
        let m = meters
        let s = statistics
        let outputs = s.outputs.map { o in
            StreamSnapshot.Output(
                name: o.output.description, state: o.rtmp.map { $0.state.rawValue } ?? "writing",
                bitRate: o.rtmp?.bitRate ?? 0, packets: o.rtmp?.packetsSent ?? o.packetsWritten,
                droppedPackets: o.rtmp?.droppedPackets ?? 0, reconnects: o.rtmp?.reconnects ?? 0)
        }
        return StreamSnapshot(
            taken: Double(monotonicNanoseconds()) / 1e9, seconds: s.seconds, input: LevelReading(m.input),
            output: LevelReading(m.output), loudness: m.loudness, volume: Double(s.volume), isMuted: s.isMuted,
            packetsEncoded: s.packetsEncoded, droppedFrames: s.framesDropped, xruns: s.xruns,
            deviceReconnects: s.deviceReconnects, outputs: outputs, hasEnded: hasEnded, stopRequested: isStopRequested)
    }

    /// True once a display asked for the stop; the session runs on until its owner calls ``stop()``.
    public var isStopRequested: Bool { stopRequest.load(ordering: .acquiring) }

    /// Does what a display asks. Any thread but the render thread.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a volume out of range (the session unchanged).
    public func perform(_ control: StreamControl) throws(AudioError) {
        switch control {
        case .setVolume(let dB):
            guard dB == -.infinity || (dB.isFinite && dB >= -96 && dB <= 12) else {
                throw AudioError(.invalidParameter, "a volume is -inf or -96 … 12 dB, got \(dB)")
            }
            volume = dB == -.infinity ? 0 : min(4, Float(pow10(dB / 20)))
        case .setMuted(let on): isMuted = on
        case .toggleMuted: isMuted.toggle()
        case .stop: stopRequest.store(true, ordering: .releasing)
        }
    }

    private func pow10(_ x: Double) -> Double { exp(x * 2.302_585_092_994_046) }
}
