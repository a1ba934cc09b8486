/// The representation of one sample.
public enum SampleType: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Signed 16-bit integer, full scale ±32768.
    case int16
    /// Signed 24-bit integer packed in three bytes, little-endian. Used by files, not by the graph.
    case int24
    /// Signed 32-bit integer, full scale ±2³¹.
    case int32
    /// 32-bit IEEE float, full scale ±1.0. The graph's internal type.
    case float32

    /// Bytes one sample of this type occupies.
    public var bytesPerSample: Int {
        switch self {
        case .int16: 2
        case .int24: 3
        case .int32, .float32: 4
        }
    }

    /// Bits one sample of this type occupies: 16, 24 or 32.
    public var bitsPerSample: Int { bytesPerSample * 8 }
    /// Whether this is a floating-point type (only ``float32`` is).
    public var isFloat: Bool { self == .float32 }

    public var description: String {
        switch self {
        case .int16: "16-bit integer"
        case .int24: "24-bit integer"
        case .int32: "32-bit integer"
        case .float32: "32-bit float"
        }
    }
}

/// How a stream of linear PCM audio is laid out: LiveAudio's counterpart of `AudioStreamBasicDescription`.
///
/// Byte sizes are derived from the other fields, never entered by hand; every initializer validates and throws
/// an ``AudioError`` with code ``AudioError/Code/invalidFormat`` whose message names the offending field.
///
/// Interleaved formats hold all channels in one buffer (`L R L R …`); non-interleaved formats hold one buffer per
/// channel, so ``bytesPerFrame`` counts one channel, as in Core Audio.
public struct StreamFormat: Hashable, Sendable, CustomStringConvertible {
    /// Frames per second, in Hz, within ``supportedSampleRates``.
    public let sampleRate: Double
    /// Channels per frame, within ``supportedChannelCounts``.
    public let channelCount: Int
    /// The representation of one sample.
    public let sampleType: SampleType
    /// Whether all channels share one buffer (`L R L R …`) rather than having one buffer each.
    public let isInterleaved: Bool

    /// Sample rates LiveAudio accepts.
    public static let supportedSampleRates: ClosedRange<Double> = 1000...768_000
    /// Channel counts LiveAudio accepts.
    public static let supportedChannelCounts: ClosedRange<Int> = 1...64

    /// Creates a validated format.
    /// - Throws: ``AudioError`` `.invalidFormat` naming `sampleRate` or `channelCount` when out of range.
    public init(sampleRate: Double, channelCount: Int, sampleType: SampleType, interleaved: Bool) throws(AudioError) {
        guard sampleRate.isFinite, sampleRate > 0 else {
            throw AudioError(.invalidFormat, "sampleRate must be a positive number of Hz, got \(sampleRate)")
        }
        guard Self.supportedSampleRates.contains(sampleRate) else {
            throw AudioError(
                .invalidFormat,
                "sampleRate \(formatHz(sampleRate)) is not supported (\(formatHz(Self.supportedSampleRates.lowerBound))"
                    + "–\(formatHz(Self.supportedSampleRates.upperBound)))")
        }
        guard Self.supportedChannelCounts.contains(channelCount) else {
            throw AudioError(
                .invalidFormat,
                "channelCount must be between \(Self.supportedChannelCounts.lowerBound) and "
                    + "\(Self.supportedChannelCounts.upperBound), got \(channelCount)")
        }
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.sampleType = sampleType
        self.isInterleaved = interleaved
    }

    /// Creates a format from a full description, as read from a file header or a foreign API, checking that the
    /// stated byte sizes agree with the derived ones.
    /// - Throws: ``AudioError`` `.invalidFormat` naming the field that disagrees.
    public init(
        sampleRate: Double, channelCount: Int, sampleType: SampleType, interleaved: Bool,
        bytesPerFrame: Int, bytesPerPacket: Int, framesPerPacket: Int
    ) throws(AudioError) {
        try self.init(sampleRate: sampleRate, channelCount: channelCount, sampleType: sampleType, interleaved: interleaved)
        guard framesPerPacket == 1 else {
            throw AudioError(.invalidFormat, "framesPerPacket must be 1 for linear PCM, got \(framesPerPacket)")
        }
        guard bytesPerFrame == self.bytesPerFrame else {
            throw AudioError(
                .invalidFormat,
                "bytesPerFrame \(bytesPerFrame) does not match \(self.bytesPerFrame) for \(self)")
        }
        guard bytesPerPacket == self.bytesPerPacket else {
            throw AudioError(
                .invalidFormat,
                "bytesPerPacket \(bytesPerPacket) does not match \(self.bytesPerPacket) for \(self)")
        }
    }

    /// Bytes per frame in one buffer: all channels when interleaved, one channel otherwise.
    public var bytesPerFrame: Int { sampleType.bytesPerSample * (isInterleaved ? channelCount : 1) }
    /// Bytes per packet; linear PCM has one frame per packet.
    public var bytesPerPacket: Int { bytesPerFrame }
    /// Always 1 for linear PCM.
    public var framesPerPacket: Int { 1 }
    /// Number of separate buffers a buffer list in this format holds.
    public var bufferCount: Int { isInterleaved ? 1 : channelCount }
    /// Samples per frame in each buffer.
    public var samplesPerFrameInBuffer: Int { isInterleaved ? channelCount : 1 }

    /// The same layout with another channel count.
    public func with(channelCount: Int) throws(AudioError) -> StreamFormat {
        try StreamFormat(sampleRate: sampleRate, channelCount: channelCount, sampleType: sampleType, interleaved: isInterleaved)
    }

    public var description: String {
        let channels = channelCount == 1 ? "mono" : channelCount == 2 ? "stereo" : "\(channelCount) ch"
        let layout = channelCount == 1 ? "" : isInterleaved ? ", interleaved" : ", non-interleaved"
        return "\(formatHz(sampleRate)) \(channels) \(sampleType)\(layout)"
    }
}

extension StreamFormat {
    /// The graph's internal format: Float32, non-interleaved.
    public static func graph(sampleRate: Double, channelCount: Int) throws(AudioError) -> StreamFormat {
        try StreamFormat(sampleRate: sampleRate, channelCount: channelCount, sampleType: .float32, interleaved: false)
    }

    /// 48 kHz mono Int16 interleaved: what iOS capture code usually takes from the microphone.
    public static let capture48kMonoInt16 = try! StreamFormat(
        sampleRate: 48_000, channelCount: 1, sampleType: .int16, interleaved: true)

    /// 44.1 kHz stereo Int16 interleaved: CD audio, a karaoke accompaniment, AAC input.
    public static let stereo44kInt16 = try! StreamFormat(
        sampleRate: 44_100, channelCount: 2, sampleType: .int16, interleaved: true)

    /// Whether this is the graph's internal sample layout (Float32, non-interleaved, or mono Float32).
    public var isGraphLayout: Bool { sampleType == .float32 && (!isInterleaved || channelCount == 1) }
}

/// `48000` → `"48 kHz"`, `44100` → `"44.1 kHz"`, `22.5` → `"22.5 Hz"`.
public func formatHz(_ hz: Double) -> String {
    if hz >= 1000, hz.truncatingRemainder(dividingBy: 100) == 0 {
        let khz = hz / 1000
        return khz == khz.rounded() ? "\(Int(khz)) kHz" : "\(khz) kHz"
    }
    return hz == hz.rounded() && abs(hz) < 1e15 ? "\(Int(hz)) Hz" : "\(hz) Hz"
}
