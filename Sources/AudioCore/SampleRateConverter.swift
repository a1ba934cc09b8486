import CSoxr

/// Sample-rate conversion of Float32 non-interleaved audio, in a streaming way, through libsoxr: what an
/// AUConverter does between units (and devices) that run at different rates.
///
/// <!-- sample: songBlock: BufferView, outputBlock: BufferView -->
/// ```swift
/// let converter = try SampleRateConverter(inputRate: 44_100, outputRate: 48_000, channelCount: 2)
/// let (consumed, produced) = converter.process(input: songBlock, output: outputBlock)
/// let tail = converter.flush(into: outputBlock)   // after the last input
/// ```
///
/// Each ``process(input:output:)`` takes as much input as the converter can use and writes what is ready: the
/// counts vary from call to call (the filter needs look-ahead, and the ratio is rarely a whole number), so callers
/// keep what was not consumed and call again. Over a whole stream, after ``flush(into:)``, the output has exactly
/// `round(inputFrames × outputRate / inputRate)` frames, and sample n of the output is the input at time n /
/// outputRate: the filter's delay is compensated.
///
/// Rates are 8 kHz … 192 kHz, any ratio. With `variableRate`, ``setRatio(_:slewFrames:)`` changes the ratio while
/// running (within ±5 % of the nominal one), for a converter that tracks the drift between two clocks.
///
/// Thread safety: one thread at a time; create, reset and deinit on a control thread. `process`, `flush` and
/// `setRatio` never lock. libsoxr grows its buffers (realloc) when a call needs more than they hold, and ``reset()``
/// frees them: a real-time caller calls `process` with the same sizes every time (as `ConverterUnit` does), so that
/// they reach their sizes within the first few hundred calls after a reset and never grow after; with sizes that
/// vary from call to call they can reach a new high at any time.
public final class SampleRateConverter: @unchecked Sendable {
    // Unchecked Sendable: soxr handle and channel tables: one thread at a time (the render or device thread); made and reset while stopped
    /// libsoxr's five standard qualities (those of SoX's `rate` effect).
    public enum Quality: String, Sendable, CaseIterable {
        /// Cubic interpolation.
        case quick
        /// 16-bit precision, larger roll-off.
        case low
        /// 16-bit precision, medium roll-off.
        case medium
        /// 20-bit precision (about 120 dB), flat to 0.913 of the lower Nyquist frequency: the default.
        case high
        /// 28-bit precision.
        case veryHigh

        var recipe: UInt {
            switch self {
            case .quick: UInt(SOXR_QQ)
            case .low: UInt(SOXR_LQ)
            case .medium: UInt(SOXR_MQ)
            case .high: UInt(SOXR_20_BITQ)
            case .veryHigh: UInt(SOXR_28_BITQ)
            }
        }
    }

    /// The rates a converter accepts.
    public static let rateRange: ClosedRange<Double> = 8_000...192_000

    /// The input sample rate in Hz (for a variable-rate converter, the nominal one).
    public let inputRate: Double
    /// The output sample rate in Hz.
    public let outputRate: Double
    /// Channels per frame, 1 … 64: the views given to ``process(input:output:)`` and ``flush(into:)`` must have
    /// this many.
    public let channelCount: Int
    /// The libsoxr quality the converter was made with.
    public let quality: Quality
    /// Whether ``setRatio(_:slewFrames:)`` can change the ratio while running.
    public let variableRate: Bool
    private let handle: soxr_t
    private let inputChannels: UnsafeMutablePointer<UnsafeRawPointer?>
    private let outputChannels: UnsafeMutablePointer<UnsafeMutableRawPointer?>

    /// Creates a converter from `inputRate` to `outputRate` Hz for `channelCount` channels, at `quality` (default
    /// ``Quality/high``). It allocates: make it on a control thread.
    /// - Throws: ``AudioError`` `.unsupportedSampleRate` for a rate outside ``rateRange``, `.invalidParameter`
    ///   for a channel count outside 1 … 64, `.resourceUnavailable` when libsoxr cannot make the converter.
    public init(
        inputRate: Double, outputRate: Double, channelCount: Int, quality: Quality = .high, variableRate: Bool = false
    ) throws(AudioError) {
        for (what, rate) in [("input", inputRate), ("output", outputRate)] where !Self.rateRange.contains(rate) {
            throw AudioError(
                .unsupportedSampleRate,
                "a sample-rate converter's \(what) rate must be 8000 … 192000 Hz, got \(rate)")
        }
        guard (1...64).contains(channelCount) else {
            throw AudioError(.invalidParameter, "a sample-rate converter takes 1 … 64 channels, got \(channelCount)")
        }
        self.inputRate = inputRate
        self.outputRate = outputRate
        self.channelCount = channelCount
        self.quality = quality
        self.variableRate = variableRate
        var io = soxr_io_spec(SOXR_FLOAT32_S, SOXR_FLOAT32_S)
        io.flags = UInt(SOXR_NO_DITHER)
        var q = soxr_quality_spec(quality.recipe, variableRate ? UInt(SOXR_VR) : 0)
        // One thread: the converter runs on the caller's (render) thread.
        var runtime = soxr_runtime_spec(1)
        var error: soxr_error_t? = nil
        // A variable-rate converter is created at the highest input-to-output ratio it may reach (the nominal one
        // plus 6 %, beyond what setRatio allows), then set to the nominal one.
        let createdInputRate = variableRate ? inputRate * 1.06 : inputRate
        guard let made = soxr_create(createdInputRate, outputRate, UInt32(channelCount), &error, &io, &q, &runtime), error == nil
        else {
            let text = error.map { String(cString: $0) } ?? "unknown error"
            throw AudioError(.resourceUnavailable, "libsoxr could not make a \(inputRate) → \(outputRate) Hz converter: \(text)")
        }
        handle = made
        inputChannels = .allocate(capacity: channelCount)
        inputChannels.initialize(repeating: nil, count: channelCount)
        outputChannels = .allocate(capacity: channelCount)
        outputChannels.initialize(repeating: nil, count: channelCount)
        if variableRate { soxr_set_io_ratio(handle, inputRate / outputRate, 0) }
    }

    deinit {
        soxr_delete(handle)
        inputChannels.deallocate()
        outputChannels.deallocate()
    }

    /// Converts: takes up to `input.frameCount` frames and writes up to `output.frameCount` frames.
    /// - Returns: the input frames consumed and the output frames written.
    /// - Precondition: both views have ``channelCount`` channels.
    @discardableResult
    public func process(input: BufferView, output: BufferView) -> (consumed: Int, produced: Int) {
        precondition(input.channelCount == channelCount && output.channelCount == channelCount, "channel counts differ")
        for c in 0..<channelCount {
            inputChannels[c] = UnsafeRawPointer(input.base + c * input.channelStride)
            outputChannels[c] = UnsafeMutableRawPointer(output.base + c * output.channelStride)
        }
        var consumed = 0
        var produced = 0
        soxr_process(
            handle, UnsafeRawPointer(inputChannels), input.frameCount, &consumed, UnsafeMutableRawPointer(outputChannels),
            output.frameCount, &produced)
        return (consumed, produced)
    }

    /// After the last input: writes up to `output.frameCount` frames of what the filter still holds. Call until
    /// it returns 0.
    public func flush(into output: BufferView) -> Int {
        precondition(output.channelCount == channelCount, "channel counts differ")
        for c in 0..<channelCount { outputChannels[c] = UnsafeMutableRawPointer(output.base + c * output.channelStride) }
        var produced = 0
        soxr_process(handle, nil, 0, nil, UnsafeMutableRawPointer(outputChannels), output.frameCount, &produced)
        return produced
    }

    /// Output frames the converter holds back now: what an output lags the input by, in output frames.
    public var delayFrames: Double { soxr_delay(handle) }

    /// Forgets the signal (for a new one at the same rates).
    public func reset() {
        soxr_clear(handle)
        if variableRate { soxr_set_io_ratio(handle, inputRate / outputRate, 0) }
    }

    /// A variable-rate converter's output-to-input ratio from now on, reached over `slewFrames` output frames:
    /// `ratio` > 1 produces more output per input than the nominal `outputRate / inputRate`. Ignored unless the
    /// converter was made with `variableRate`.
    /// - Precondition: `ratio` within 0.95 … 1.05 of nominal.
    public func setRatio(_ ratio: Double, slewFrames: Int = 0) {
        guard variableRate else { return }
        precondition(ratio >= 0.95 && ratio <= 1.05, "a drift correction of more than 5 %")
        soxr_set_io_ratio(handle, inputRate / (outputRate * ratio), slewFrames)
    }

    /// The frames a whole stream of `inputFrames` converts to.
    public func outputFrames(forInput inputFrames: Int) -> Int {
        Int((Double(inputFrames) * outputRate / inputRate).rounded())
    }

    /// Converts whole channels at once (tools and tests; allocates).
    public static func convert(
        _ channels: [[Float]], from inputRate: Double, to outputRate: Double, quality: Quality = .high
    ) throws(AudioError) -> [[Float]] {
        let converter = try SampleRateConverter(
            inputRate: inputRate, outputRate: outputRate, channelCount: channels.count, quality: quality)
        let input = PCMBuffer(channels: channels)
        let total = converter.outputFrames(forInput: input.frameLength)
        let output = PCMBuffer(channelCount: channels.count, capacity: total + 1024)
        var produced = 0
        var consumed = 0
        while consumed < input.frameLength {
            let r = converter.process(
                input: input.view(frames: input.frameLength).slice(from: consumed, frames: input.frameLength - consumed),
                output: output.view(frames: output.capacity).slice(from: produced, frames: output.capacity - produced))
            consumed += r.consumed
            produced += r.produced
            if r.consumed == 0 && r.produced == 0 { break }
        }
        while produced < output.capacity {
            let n = converter.flush(into: output.view(frames: output.capacity).slice(from: produced, frames: output.capacity - produced))
            if n == 0 { break }
            produced += n
        }
        return (0..<channels.count).map { c in Array(output.view(frames: produced)[c]) }
    }
}
