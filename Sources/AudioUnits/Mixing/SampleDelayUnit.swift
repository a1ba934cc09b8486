import AudioCore
import AudioGraph
import Synchronization

/// A delay of whole frames, exact from the first cycle: the input comes out `delayFrames` frames later, bit for bit,
/// preceded by silence. Graph-file type `"sampleDelay"` (field `delayFrames`).
///
/// For keeping parallel paths aligned — a recording shifted by a round trip, a dry path beside a chain with a
/// lookahead — not an echo: no feedback, no mix, no glide. A change of ``delayFrames`` takes effect at the start of
/// the next render cycle as a jump (the line keeps its history: a longer delay replays what it already holds, a
/// shorter one skips), so change it while the path is silent, or accept the jump. The delay is the unit's
/// ``latency``.
///
/// Thread safety: ``delayFrames`` from any thread; the line is the render thread's.
public final class SampleDelayUnit: RenderUnit {
    public let core: UnitCore
    /// The longest delay this unit takes, in frames.
    public let maximumDelayFrames: Int
    private let requested: Atomic<Int>
    /// The delay line: the render thread's.
    private let line: RenderThreadBound<DelayLine>

    /// - Parameters:
    ///   - format: the input and output format (a graph format).
    ///   - delayFrames: the delay to start with.
    ///   - maximumDelayFrames: the longest delay it will be set to (default 2 s at the format's rate); the line holds
    ///     this many frames and a cycle more, allocated when the unit is prepared.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format that is not a graph format,
    ///   `.invalidParameter` for a maximum outside 0 … 2²⁶ (67,108,864) frames or a delay outside 0 … the maximum.
    public init(format: StreamFormat, delayFrames: Int = 0, maximumDelayFrames: Int? = nil) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let maximum = maximumDelayFrames ?? Int((2 * f.sampleRate).rounded())
        guard (0...(1 << 26)).contains(maximum) else {
            throw AudioError(.invalidParameter, "sampleDelay: the maximum delay must be 0 … \(1 << 26) frames, got \(maximum)")
        }
        self.maximumDelayFrames = maximum
        requested = Atomic(0)
        line = RenderThreadBound(DelayLine(channelCount: f.channelCount, capacity: 1))
        core = UnitCore(kind: "sampleDelay", inputs: [f], outputs: [f])
        try setDelayFrames(delayFrames)
    }

    /// The delay in frames, as the next cycle will apply it.
    public var delayFrames: Int { requested.load(ordering: .relaxed) }

    /// Sets the delay in frames; the next render cycle applies it. Any thread.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` outside 0 … ``maximumDelayFrames``.
    public func setDelayFrames(_ frames: Int) throws(AudioError) {
        guard (0...maximumDelayFrames).contains(frames) else {
            throw AudioError(
                .invalidParameter, "sampleDelay: delayFrames must be 0 … \(maximumDelayFrames), got \(frames)")
        }
        requested.store(frames, ordering: .relaxed)
    }

    public var latency: Double { Double(delayFrames) / outputFormats[0].sampleRate }

    public var propertyNames: [String] { commonPropertyNames + ["delayFrames", "maximumDelayFrames"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "delayFrames": .int(delayFrames)
        case "maximumDelayFrames": .int(maximumDelayFrames)
        default: try commonProperty(name)
        }
    }

    public func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError) {
        guard name == "delayFrames" else { return try setCommonProperty(name, value) }
        guard case .int(let frames) = value else {
            throw AudioError(.invalidProperty, "sampleDelay: property 'delayFrames' takes a whole number, got \(value)")
        }
        try setDelayFrames(frames)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        line.whileStopped = DelayLine(
            channelCount: outputFormats[0].channelCount, capacity: maximumDelayFrames + spec.maximumFrames)
    }

    public func reset() { line.whileStopped.clear() }

    public func render(_ context: RenderContext) {
        line.onRenderThread.pass(context.input(0), into: context.output(0), delay: requested.load(ordering: .relaxed))
    }
}

/// Frames delayed by a whole number of frames up to the line's capacity less a block: each block is written in,
/// then the block that many frames older is read out (in place when the input is the output). Render thread;
/// allocates only when made.
struct DelayLine {
    private let storage: PCMBuffer
    private var write = 0

    init(channelCount: Int, capacity: Int) { storage = PCMBuffer(channelCount: channelCount, capacity: capacity) }

    mutating func clear() {
        storage.view(frames: storage.capacity).clear()
        write = 0
    }

    /// `input` in, `output` (as many frames) out `delay` frames later; `delay` ≤ capacity − the block's frames.
    mutating func pass(_ input: BufferView, into output: BufferView, delay: Int) {
        let capacity = storage.capacity
        let frames = input.frameCount
        let line = storage.view(frames: capacity)
        for c in 0..<storage.channelCount {
            let x = input[c]
            let y = output[c]
            let d = line[c]
            var w = write
            var r = (write - delay + capacity) % capacity
            for i in 0..<frames {
                d[w] = x[i]
                y[i] = d[r]
                w = w + 1 == capacity ? 0 : w + 1
                r = r + 1 == capacity ? 0 : r + 1
            }
        }
        write = (write + frames) % capacity
    }
}
