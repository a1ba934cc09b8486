import AudioCore
import AudioGraph
import Synchronization

/// Converts between sample rates and channel layouts: AUConverter's role, between units (or a file, or a device)
/// that run at different rates. Its input runs at `inputFormat`'s rate and the nodes upstream render at that rate,
/// pulled as the conversion needs them; its output runs at `outputFormat`'s.
///
/// - Rates: 8 kHz … 192 kHz, any ratio, through libsoxr (``/AudioCore/SampleRateConverter``) at `quality` (default
///   `.high`); equal rates pass samples through unchanged. The output is the input at the output's rate, aligned:
///   sample n of the output is the input at time n / outputRate.
/// - Channels: `channelMap[c]` is the input channel output channel c takes (−1: silence). Without one, equal
///   counts map one to one, a mono input goes to every output channel, a mono output takes the average of every
///   input channel, and otherwise output c takes input c (silence past the input's last channel).
/// - ``latency``: how far ahead of its output the converter reads its input (the filter's look-ahead): what it
///   adds when its input is live.
///
/// Thread safety: as every unit; render neither allocates nor locks (libsoxr's working memory is allocated when the
/// unit is prepared and primed).
public final class ConverterUnit: RenderUnit {
    public let core: UnitCore
    /// The libsoxr quality the rate conversion runs at (`.high` by default); unused when the rates are equal.
    public let quality: SampleRateConverter.Quality
    /// The input channel each output channel takes (−1: silence): the map given, or the default one. For a mono
    /// output of a multichannel input the default reads `[0]`, though the output is the average of every channel.
    public let channelMap: [Int]
    /// The converter and the input pulled ahead of it: the render thread's (made in allocateRenderResources).
    private let kernel: RenderThreadBound<ConverterKernel>
    /// ``latency`` in seconds (the bits of a `Double`): set when the unit is prepared, read from any thread.
    private let lookahead = Atomic<UInt64>(Double(0).bitPattern)

    /// Makes a converter from `inputFormat` to `outputFormat`; libsoxr is set up later, when the unit is prepared.
    ///
    /// - Parameters:
    ///   - inputFormat: The input's rate and channel count (a graph format).
    ///   - outputFormat: The output's rate and channel count (a graph format).
    ///   - quality: The libsoxr quality for the rate conversion; `.high` by default.
    ///   - channelMap: For each output channel, the input channel it takes (0-based) or −1 for silence; nil (the
    ///     default) for the default mapping described above.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` for a rate outside 8–192 kHz, `.invalidParameter`
    ///   for a channel map of the wrong length or naming a channel the input lacks.
    public init(
        inputFormat: StreamFormat, outputFormat: StreamFormat, quality: SampleRateConverter.Quality = .high,
        channelMap: [Int]? = nil
    ) throws(AudioError) {
        let input = try StreamFormat.graph(sampleRate: inputFormat.sampleRate, channelCount: inputFormat.channelCount)
        let output = try StreamFormat.graph(sampleRate: outputFormat.sampleRate, channelCount: outputFormat.channelCount)
        for rate in [input.sampleRate, output.sampleRate] where !SampleRateConverter.rateRange.contains(rate) {
            throw AudioError(.unsupportedSampleRate, "converter: rates must be 8000 … 192000 Hz, got \(rate)")
        }
        let mapping: [Int]
        let averageInputs: Bool
        let inCount = input.channelCount
        let outCount = output.channelCount
        if let channelMap {
            guard channelMap.count == outCount else {
                throw AudioError(
                    .invalidParameter, "converter: the channel map needs one entry per output channel (\(outCount)), got \(channelMap.count)")
            }
            if let bad = channelMap.first(where: { $0 < -1 || $0 >= inCount }) {
                throw AudioError(.invalidParameter, "converter: channel map entry \(bad) is not an input channel (0 … \(inCount - 1)) or −1")
            }
            mapping = channelMap
            averageInputs = false
        } else {
            mapping = (0..<outCount).map { c in inCount == 1 ? 0 : c < inCount ? c : -1 }
            averageInputs = outCount == 1 && inCount > 1
        }
        self.channelMap = mapping
        let ratio = input.sampleRate / output.sampleRate
        kernel = RenderThreadBound(ConverterKernel(channelMap: mapping, averageInputs: averageInputs, ratio: ratio))
        self.quality = quality
        core = UnitCore(kind: "converter", inputs: [input], outputs: [output])
    }

    public var pullsInput: Bool { true }
    public var latency: Double { Double(bitPattern: lookahead.load(ordering: .relaxed)) }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        let inRate = inputFormats[0].sampleRate
        let outRate = outputFormats[0].sampleRate
        kernel.whileStopped.pending = PCMBuffer(
            channelCount: outputFormats[0].channelCount, capacity: spec.maximumFrames)
        guard inRate != outRate else {
            kernel.whileStopped.converter = nil
            lookahead.store(Double(0).bitPattern, ordering: .relaxed)
            return
        }
        let made = try SampleRateConverter(
            inputRate: inRate, outputRate: outRate, channelCount: outputFormats[0].channelCount, quality: quality)
        // The look-ahead: input frames taken before the first output frame, found by feeding silence. This also
        // primes libsoxr's working memory here rather than on the render thread.
        let probe = PCMBuffer(channelCount: made.channelCount, capacity: 64)
        let sink = PCMBuffer(channelCount: made.channelCount, capacity: 4096)
        var fed = 0
        while fed < Int(inRate) {
            let r = made.process(input: probe.view(frames: 64), output: sink.view(frames: 4096))
            fed += r.consumed
            if r.produced > 0 {
                fed -= Int((Double(r.produced) * inRate / outRate).rounded())
                break
            }
        }
        lookahead.store((Double(fed) / inRate).bitPattern, ordering: .relaxed)
        made.reset()
        kernel.whileStopped.converter = made
    }

    public func reset() {
        kernel.whileStopped.reset()
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(context)
    }
}

/// The render-side state of a ``ConverterUnit``: the converter (nil for equal rates) and the input pulled and
/// mapped to the output's channels, not yet taken by it. Used by one thread at a time.
private struct ConverterKernel {
    let channelMap: [Int]
    let averageInputs: Bool
    /// Input rate over output rate.
    let ratio: Double
    var converter: SampleRateConverter?
    /// Input pulled and mapped to the output's channels, not yet taken by the converter.
    var pending = PCMBuffer(channelCount: 1, capacity: 0)
    var pendingStart = 0
    var pendingEnd = 0

    init(channelMap: [Int], averageInputs: Bool, ratio: Double) {
        self.channelMap = channelMap
        self.averageInputs = averageInputs
        self.ratio = ratio
    }

    mutating func reset() {
        converter?.reset()
        pendingStart = 0
        pendingEnd = 0
    }

    mutating func render(_ context: RenderContext) {
        let output = context.output(0)
        let frames = context.frameCount
        guard frames > 0 else { return }
        guard let converter else {
            map(context.pull(frames: frames)[0], into: output, frames: frames)
            return
        }
        let maximum = pending.capacity
        var produced = 0
        var rounds = 0
        while produced < frames {
            if pendingStart == pendingEnd {
                let wanted = Int((Double(frames - produced) * ratio).rounded(.up)) + 16
                let n = min(maximum, max(1, wanted))
                map(context.pull(frames: n)[0], into: pending.view(frames: n), frames: n)
                pendingStart = 0
                pendingEnd = n
            }
            let r = converter.process(
                input: pending.view(frames: pendingEnd).slice(from: pendingStart, frames: pendingEnd - pendingStart),
                output: output.slice(from: produced, frames: frames - produced))
            pendingStart += r.consumed
            produced += r.produced
            rounds += 1
            // libsoxr always takes or gives something; a bound all the same, so a render can never spin.
            if rounds > 4096 {
                output.slice(from: produced, frames: frames - produced).clear()
                return
            }
        }
    }

    /// Writes `frames` frames of `input` into `output` through the channel map.
    private func map(_ input: BufferView, into output: BufferView, frames: Int) {
        if averageInputs {
            let y = output[0].baseAddress!
            let scale = 1 / Float(input.channelCount)
            let x0 = input[0].baseAddress!
            for i in 0..<frames { y[i] = x0[i] }
            for c in 1..<input.channelCount {
                let x = input[c].baseAddress!
                for i in 0..<frames { y[i] += x[i] }
            }
            for i in 0..<frames { y[i] *= scale }
            return
        }
        for c in 0..<output.channelCount {
            let y = output[c].baseAddress!
            let source = channelMap[c]
            if source < 0 {
                y.update(repeating: 0, count: frames)
            } else {
                let x = input[source].baseAddress!
                if x != y { y.update(from: x, count: frames) }
            }
        }
    }
}
