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
/// Thread safety: as every unit; render never locks. It allocates only within its first few hundred calls to libsoxr
/// after the unit is prepared or reset (a graph's reset too: libsoxr's reset frees its buffers), while they grow to
/// the sizes the unit's fixed calls need — a handful of reallocations in the seconds after, none later (see
/// `ConverterKernel`).
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
        let channels = outputFormats[0].channelCount
        guard inRate != outRate else {
            kernel.whileStopped.converter = nil
            lookahead.store(Double(0).bitPattern, ordering: .relaxed)
            return
        }
        let made = try SampleRateConverter(inputRate: inRate, outputRate: outRate, channelCount: channels, quality: quality)
        // libsoxr is called with `chunk` input frames and room for `room` output frames, every time: the sizes its
        // buffers grow to are reached within the first few hundred calls and never exceeded after (with calls of
        // varying sizes they could grow at any time, and input given in small pieces piled up in them).
        let chunk = max(1, min(ConverterKernel.chunkFrames, spec.maximumFrames))
        let room = Int((Double(chunk) * outRate / inRate).rounded(.up)) + ConverterKernel.extraRoom
        kernel.whileStopped.prepare(converter: made, channelCount: channels, chunk: chunk, room: room)
        // The look-ahead: input frames taken before the first output frame, found by feeding silence as render does.
        let probe = PCMBuffer(channelCount: channels, capacity: chunk)
        let sink = PCMBuffer(channelCount: channels, capacity: room)
        var fed = 0
        while fed < Int(inRate) * 2 {
            let r = made.process(input: probe.view(frames: chunk), output: sink.view(frames: room))
            fed += r.consumed
            if r.produced > 0 {
                fed -= Int((Double(r.produced) * inRate / outRate).rounded())
                break
            }
        }
        lookahead.store((Double(max(fed, 0)) / inRate).bitPattern, ordering: .relaxed)
        made.reset()
    }

    public func reset() {
        kernel.whileStopped.reset()
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(context)
    }
}

/// The render-side state of a ``ConverterUnit``: the converter (nil for equal rates), the input pulled and mapped to
/// the output's channels for its next call, and what it gave and render has not taken yet. Used by one thread at a
/// time.
///
/// libsoxr keeps its own FIFOs, which grow (realloc) when a call needs more than they hold: called with sizes that
/// vary from call to call, they reach a new high now and then, however long the run. So it is always called with
/// `chunk` input frames and room for `room` output frames; what it gives waits in `converted`. Its buffers then
/// reach their sizes within its first few hundred calls after the unit is prepared or reset (a handful of
/// reallocations, none later), and input never piles up inside it: a chunk is pulled only when `converted` is empty.
private struct ConverterKernel {
    /// Input frames a call to libsoxr takes (fewer when the graph's cycles are shorter): pulled ahead of the
    /// output by at most this many frames.
    static let chunkFrames = 128
    /// Output room beyond a chunk's share: libsoxr's stages give their output in blocks.
    static let extraRoom = 2_048

    let channelMap: [Int]
    let averageInputs: Bool
    /// Input rate over output rate.
    let ratio: Double
    var converter: SampleRateConverter?
    var chunk = 1
    var room = 1
    /// A chunk of input pulled and mapped to the output's channels; `stagedStart` frames of it already taken.
    var staged = PCMBuffer(channelCount: 1, capacity: 0)
    var stagedStart = 0
    var stagedEnd = 0
    /// What the converter gave, not yet rendered.
    var converted = PCMBuffer(channelCount: 1, capacity: 0)
    var convertedStart = 0
    var convertedEnd = 0

    init(channelMap: [Int], averageInputs: Bool, ratio: Double) {
        self.channelMap = channelMap
        self.averageInputs = averageInputs
        self.ratio = ratio
    }

    /// Control side, while stopped.
    mutating func prepare(converter: SampleRateConverter, channelCount: Int, chunk: Int, room: Int) {
        self.converter = converter
        self.chunk = chunk
        self.room = room
        staged = PCMBuffer(channelCount: channelCount, capacity: chunk)
        converted = PCMBuffer(channelCount: channelCount, capacity: room)
        reset()
    }

    mutating func reset() {
        converter?.reset()
        stagedStart = 0
        stagedEnd = 0
        convertedStart = 0
        convertedEnd = 0
    }

    mutating func render(_ context: RenderContext) {
        let output = context.output(0)
        let frames = context.frameCount
        guard frames > 0 else { return }
        guard let converter else {
            map(context.pull(frames: frames)[0], into: output, frames: frames)
            return
        }
        var produced = 0
        var calls = 0, idle = 0
        while produced < frames {
            if convertedStart == convertedEnd {
                if stagedStart == stagedEnd {
                    map(context.pull(frames: chunk)[0], into: staged.view(frames: chunk), frames: chunk)
                    stagedStart = 0
                    stagedEnd = chunk
                }
                let r = converter.process(
                    input: staged.view(frames: stagedEnd).slice(from: stagedStart, frames: stagedEnd - stagedStart),
                    output: converted.view(frames: room))
                stagedStart += r.consumed
                convertedStart = 0
                convertedEnd = r.produced
                // libsoxr always takes or gives something; a bound all the same, so a render can never spin: calls
                // that do neither, and in all a few times the calls the cycle's input needs.
                calls += 1
                idle = r.consumed == 0 && r.produced == 0 ? idle + 1 : 0
                if idle > 16 || calls > 64 + 4 * (Int(Double(frames) * ratio) / chunk + 1) {
                    output.slice(from: produced, frames: frames - produced).clear()
                    return
                }
                continue
            }
            let n = min(frames - produced, convertedEnd - convertedStart)
            let from = converted.view(frames: convertedEnd).slice(from: convertedStart, frames: n)
            let to = output.slice(from: produced, frames: n)
            for c in 0..<to.channelCount { to[c].baseAddress!.update(from: from[c].baseAddress!, count: n) }
            convertedStart += n
            produced += n
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
