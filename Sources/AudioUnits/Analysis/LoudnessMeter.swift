import AudioCore
import AudioGraph
import Synchronization

/// Loudness (EBU R128) measured on the render thread and read from any thread: momentary, short-term, integrated,
/// loudness range and true peak of one signal, all channels together (``LoudnessKernel``).
///
/// The render thread measures every sample it is given and publishes the readings every 100 ms step; a reader
/// gets the latest step, never a mix of two (a sequence count around the published values). Memory is fixed at
/// init, whatever the length of the run.
public final class LoudnessMeter: Sendable {
    private let kernel: RenderThreadBound<LoudnessKernel>
    private let resetRequested = Atomic<Bool>(false)
    /// Odd while the render thread writes the values below.
    private let sequence = Atomic<UInt64>(0)
    private let momentary = Atomic<UInt64>(0), shortTerm = Atomic<UInt64>(0), integrated = Atomic<UInt64>(0)
    private let range = Atomic<UInt64>(0), truePeak = Atomic<UInt64>(0), samplePeak = Atomic<UInt64>(0)
    private let duration = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - sampleRate: the signal's rate (8 kHz … 384 kHz).
    ///   - channelCount: 1 … 8, weighted as ``LoudnessChannelWeights`` says.
    public init(sampleRate: Double, channelCount: Int) {
        kernel = RenderThreadBound(LoudnessKernel(sampleRate: sampleRate, channelCount: channelCount))
        publish(.silent)
    }

    /// The channels' weights and their layout.
    public var channelWeights: LoudnessChannelWeights { kernel.whileStopped.channelWeights }

    /// The latest readings. Any thread; never waits for the render thread (a reading that overlapped its
    /// publication is taken again).
    public func read() -> LoudnessReading {
        while true {
            let before = sequence.load(ordering: .acquiring)
            if before & 1 == 1 { continue }
            func value(_ a: borrowing Atomic<UInt64>) -> Double { Double(bitPattern: a.load(ordering: .relaxed)) }
            let r = LoudnessReading(
                momentary: value(momentary), shortTerm: value(shortTerm), integrated: value(integrated),
                loudnessRange: value(range), truePeak: value(truePeak), samplePeak: value(samplePeak),
                duration: value(duration))
            atomicMemoryFence(ordering: .acquiring)
            if sequence.load(ordering: .relaxed) == before { return r }
        }
    }

    /// Starts a new measurement at the render thread's next block (a new song, a new stream). Any thread.
    public func reset() { resetRequested.store(true, ordering: .releasing) }

    /// Render thread: measures a block. Publishes at every 100 ms step. Does not allocate or lock.
    public func accumulate(_ block: BufferView) {
        if resetRequested.exchange(false, ordering: .acquiring) {
            kernel.onRenderThread.reset()
            publish(kernel.onRenderThread.reading)
        }
        if kernel.onRenderThread.process(block) { publish(kernel.onRenderThread.reading) }
    }

    /// Control thread, no render in progress: clears the measurement now.
    public func clear() {
        resetRequested.store(false, ordering: .relaxed)
        kernel.whileStopped.reset()
        publish(kernel.whileStopped.reading)
    }

    private func publish(_ r: LoudnessReading) {
        sequence.add(1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        momentary.store(r.momentary.bitPattern, ordering: .relaxed)
        shortTerm.store(r.shortTerm.bitPattern, ordering: .relaxed)
        integrated.store(r.integrated.bitPattern, ordering: .relaxed)
        range.store(r.loudnessRange.bitPattern, ordering: .relaxed)
        truePeak.store(r.truePeak.bitPattern, ordering: .relaxed)
        samplePeak.store(r.samplePeak.bitPattern, ordering: .relaxed)
        duration.store(r.duration.bitPattern, ordering: .relaxed)
        sequence.add(1, ordering: .releasing)
    }
}

/// Measures its input's loudness and passes nothing on: a graph sink (``/AudioGraph/RenderGraph/addSink(_:)``) whose
/// ``LoudnessReading`` any thread reads (``LoudnessMeter``): the sessions meter
/// their programme with one.
public final class LoudnessMeterUnit: RenderUnit {
    public let core: UnitCore
    /// The meter the render thread feeds; read it (or ``read()``) from any thread.
    public let meter: LoudnessMeter

    /// - Parameter format: the input's format (a graph format; 1 … 8 channels).
    public init(format: StreamFormat) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        guard f.sampleRate >= 8000, f.sampleRate <= 384_000, (1...8).contains(f.channelCount) else {
            throw AudioError(.invalidFormat, "a loudness meter takes 1 … 8 channels at 8 kHz … 384 kHz, got \(f)")
        }
        meter = LoudnessMeter(sampleRate: f.sampleRate, channelCount: f.channelCount)
        core = UnitCore(kind: "loudnessMeter", inputs: [f], outputs: [])
    }

    /// The latest readings. Any thread.
    public func read() -> LoudnessReading { meter.read() }

    public var propertyNames: [String] { commonPropertyNames + ["integrated", "loudnessRange", "truePeak"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        let r = meter.read()
        switch name {
        case "integrated": return .double(r.integrated)
        case "loudnessRange": return .double(r.loudnessRange)
        case "truePeak": return .double(r.truePeak)
        default: return try commonProperty(name)
        }
    }

    public func reset() { meter.clear() }

    public func render(_ context: RenderContext) { meter.accumulate(context.input(0)) }
}
