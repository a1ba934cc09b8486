import AudioCore

/// A publisher's figures: what ``RTMPPublisher/statistics`` reports.
public struct RTMPStatistics: Sendable, CustomStringConvertible {
    /// The running totals, over every connection the publisher made.
    public struct Counters: Sendable {
        /// Bytes written to the socket: chunks of media, commands and control.
        public var bytesSent: Int64 = 0
        /// Bytes of audio message bodies sent.
        public var mediaBytesSent: Int64 = 0
        /// Audio frames sent.
        public var packetsSent = 0
        /// Frames dropped: pushed out of a full queue, lost in a failed write, or left unsent at stop.
        public var droppedPackets = 0
        /// Successful reconnections.
        public var reconnects = 0
        /// The timestamp (ms) of the last frame sent; -1 before the first.
        public var lastTimestamp: Int64 = -1
        /// Audio bits per second over the last statistics interval.
        public var bitRate: Double = 0
    }

    /// Capture-to-socket latency over the most recent frames, in milliseconds.
    public struct Latency: Sendable, Hashable {
        /// The median latency, in milliseconds.
        public var p50: Double
        /// The 99th-percentile latency, in milliseconds.
        public var p99: Double
        /// The longest latency, in milliseconds.
        public var maximum: Double
        /// Frames the percentiles cover.
        public var count: Int
    }

    /// The publisher's state when the figures were taken.
    public var state: RTMPPublisher.State
    /// Bytes written to the socket over every connection: chunks of media, commands and control.
    public var bytesSent: Int64
    /// Audio frames sent.
    public var packetsSent: Int
    /// Frames dropped: pushed out of a full queue, lost in a failed write, or left unsent at stop.
    public var droppedPackets: Int
    /// Successful reconnections.
    public var reconnects: Int
    /// The timestamp (ms) of the last frame sent; -1 before the first.
    public var lastTimestamp: Int64
    /// Audio bits per second over the last interval.
    public var bitRate: Double
    /// Frames waiting in the send queue.
    public var queuedPackets: Int
    /// The milliseconds of audio the queued frames span (the newest's timestamp minus the oldest's).
    public var queuedMilliseconds: Int64
    /// From each frame's first captured sample to its bytes entering the socket; nil when frames carry no
    /// capture time.
    public var latency: Latency?
    /// Why the last connection ended, if it failed.
    public var lastError: AudioError?

    init(
        state: RTMPPublisher.State, counters: Counters, queuedPackets: Int, queuedMilliseconds: Int64, bitRate: Double,
        latency: Latency?, lastError: AudioError?
    ) {
        self.state = state
        bytesSent = counters.bytesSent
        packetsSent = counters.packetsSent
        droppedPackets = counters.droppedPackets
        reconnects = counters.reconnects
        lastTimestamp = counters.lastTimestamp
        self.bitRate = bitRate
        self.queuedPackets = queuedPackets
        self.queuedMilliseconds = queuedMilliseconds
        self.latency = latency
        self.lastError = lastError
    }

    public var description: String {
        var text =
            "\(state.rawValue): \(packetsSent) packets, \(bytesSent / 1024) KiB, \(Int((bitRate / 1000).rounded())) kbit/s, "
            + "queue \(queuedPackets) (\(queuedMilliseconds) ms), dropped \(droppedPackets), reconnects \(reconnects)"
        if let latency {
            text += ", latency p50 \(Int(latency.p50.rounded())) ms p99 \(Int(latency.p99.rounded())) ms"
        }
        return text
    }
}

/// The latencies of the most recent frames (a ring of 4096).
struct LatencyWindow {
    private var values: [Double] = []
    private var next = 0
    static let capacity = 4096

    mutating func add(_ milliseconds: Double) {
        if values.count < Self.capacity {
            values.append(milliseconds)
        } else {
            values[next] = milliseconds
            next = (next + 1) % Self.capacity
        }
    }

    func percentiles() -> RTMPStatistics.Latency? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        func at(_ q: Double) -> Double { sorted[min(sorted.count - 1, Int((q * Double(sorted.count - 1)).rounded()))] }
        return RTMPStatistics.Latency(p50: at(0.5), p99: at(0.99), maximum: sorted.last!, count: sorted.count)
    }
}
