import AudioCore
import Synchronization

/// A peak and RMS reading, linear (1.0 = full scale).
public struct MeterReading: Hashable, Sendable {
    /// The largest absolute sample, over every channel, linear.
    public let peak: Float
    /// The root mean square of every sample of every channel, linear.
    public let rms: Float
    /// ``peak`` in dBFS (`-infinity` for silence).
    public var peakDecibels: Float { 20 * log10f(peak) }
    /// ``rms`` in dBFS (`-infinity` for silence).
    public var rmsDecibels: Float { 20 * log10f(rms) }
}

#if canImport(Glibc)
import Glibc
#endif

/// Peak and RMS measured on the render thread and read from any thread.
///
/// The render thread accumulates every sample it meters; a reading covers everything rendered since the
/// previous reading (at least the last cycle). Peak and RMS travel in one 64-bit atomic word, so a reading
/// never mixes two cycles.
public final class LevelMeter: Sendable {
    private let packed = Atomic<UInt64>(0)
    private let resetRequested = Atomic<Bool>(false)
    // Render-thread accumulators, kept in atomics only so the class is Sendable; accessed relaxed by one thread.
    private let peakBits = Atomic<UInt32>(0)
    private let sumSquares = Atomic<UInt64>(0)  // Double bits
    private let count = Atomic<Int>(0)

    /// A meter that has measured nothing yet (a reading of 0 peak, 0 RMS).
    public init() {}

    /// The levels since the previous reading, and starts the next measurement. Any thread but the render thread, one
    /// reader at a time: each reading starts the next, so two readers would each see part of the levels (a
    /// LiveAudio's `SnapshotMonitor` is the one reader of a session's meters).
    public func read() -> MeterReading {
        let v = packed.load(ordering: .acquiring)
        resetRequested.store(true, ordering: .releasing)
        return MeterReading(peak: Float(bitPattern: UInt32(v >> 32)), rms: Float(bitPattern: UInt32(v & 0xFFFF_FFFF)))
    }

    /// Render thread: adds one cycle's peak and sum of squares over `samples` samples.
    @inline(__always)
    public func accumulate(peak: Float, sumOfSquares: Double, samples: Int) {
        var p = Float(bitPattern: peakBits.load(ordering: .relaxed))
        var s = Double(bitPattern: sumSquares.load(ordering: .relaxed))
        var n = count.load(ordering: .relaxed)
        if resetRequested.exchange(false, ordering: .acquiring) {
            p = 0
            s = 0
            n = 0
        }
        p = max(p, peak)
        s += sumOfSquares
        n += samples
        peakBits.store(p.bitPattern, ordering: .relaxed)
        sumSquares.store(s.bitPattern, ordering: .relaxed)
        count.store(n, ordering: .relaxed)
        let rms = n > 0 ? Float((s / Double(n)).squareRoot()) : 0
        packed.store(UInt64(p.bitPattern) << 32 | UInt64(rms.bitPattern), ordering: .releasing)
    }

    /// Render thread: adds a block's peak and sum of squares, every channel.
    public func accumulate(_ block: BufferView) {
        var peak: Float = 0
        var sum: Double = 0
        for c in 0..<block.channelCount {
            let x = block[c]
            var partial: Float = 0
            for i in 0..<block.frameCount {
                let v = x[i]
                peak = max(peak, abs(v))
                partial += v * v
            }
            sum += Double(partial)
        }
        accumulate(peak: peak, sumOfSquares: sum, samples: block.frameCount * block.channelCount)
    }

    /// Control thread, no render in progress: clears everything.
    public func clear() {
        packed.store(0, ordering: .relaxed)
        resetRequested.store(true, ordering: .relaxed)
    }
}
