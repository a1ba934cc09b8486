/// Everything a unit must know before rendering: the JUCE `ProcessSpec` of LiveAudio.
public struct RenderSpec: Hashable, Sendable {
    /// The sample rate the unit renders at, in Hz.
    public let sampleRate: Double
    /// The most frames one render call asks for. Calls may ask for any count from 0 up to this.
    public let maximumFrames: Int

    /// Creates a spec.
    /// - Parameters:
    ///   - sampleRate: the sample rate, in Hz.
    ///   - maximumFrames: the most frames one render call asks for.
    public init(sampleRate: Double, maximumFrames: Int) {
        self.sampleRate = sampleRate
        self.maximumFrames = maximumFrames
    }
}

/// When a render cycle's first frame is: its sample time (frames since the stream started) and host time
/// (CLOCK_MONOTONIC nanoseconds, 0 when rendering offline).
public struct RenderTimeStamp: Hashable, Sendable {
    /// Frames since the stream started, at the cycle's first frame.
    public var sampleTime: Int64
    /// CLOCK_MONOTONIC nanoseconds at the cycle's first frame; 0 when rendering offline.
    public var hostTime: UInt64

    /// Creates a time stamp.
    /// - Parameters:
    ///   - sampleTime: frames since the stream started.
    ///   - hostTime: CLOCK_MONOTONIC nanoseconds; 0 (the default) when rendering offline.
    public init(sampleTime: Int64, hostTime: UInt64 = 0) {
        self.sampleTime = sampleTime
        self.hostTime = hostTime
    }
}
