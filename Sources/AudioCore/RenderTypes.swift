/// Everything a unit must know before rendering: the JUCE `ProcessSpec` of LiveAudio.
public struct RenderSpec: Hashable, Sendable {
    public let sampleRate: Double
    /// The most frames one render call asks for. Calls may ask for any count from 0 up to this.
    public let maximumFrames: Int

    public init(sampleRate: Double, maximumFrames: Int) {
        self.sampleRate = sampleRate
        self.maximumFrames = maximumFrames
    }
}

/// When a render cycle's first frame is: its sample time (frames since the stream started) and host time
/// (CLOCK_MONOTONIC nanoseconds, 0 when rendering offline).
public struct RenderTimeStamp: Hashable, Sendable {
    public var sampleTime: Int64
    public var hostTime: UInt64

    public init(sampleTime: Int64, hostTime: UInt64 = 0) {
        self.sampleTime = sampleTime
        self.hostTime = hostTime
    }
}
