import AudioCore
import AudioGraph
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A feed-forward compressor with a soft knee and a downward expander: the DynamicsProcessor role.
///
/// Detection is linked across channels (one gain for all, so the stereo image holds) and reads the peak of the
/// last 2.5–5 ms, so a steady sine of 200 Hz or more is read at its peak and the gain holds still. The static curve,
/// in dB of peak level L:
/// - above the knee: T + (L − T) / ratio; inside a knee of width W: L + (1/ratio − 1)(L − T + W/2)² / 2W;
/// - below `expansionThreshold` Te: a further (L − Te)(expansionRatio − 1) dB (1, the default, turns it off).
/// The gain in dB then follows the curve with one-pole smoothing: time constant `attack` while the gain falls,
/// `release` while it rises (so the expander also opens over `release`). `makeupGain` is added last.
///
/// Parameters: `threshold` −60 … 0 dB (−20), `ratio` 1 … 50 (4), `knee` 0 … 40 dB (0, hard), `attack`
/// 0.0001 … 0.2 s (0.005), `release` 0.01 … 3 s (0.1), `makeupGain` −40 … 40 dB (0), `expansionThreshold`
/// −120 … 0 dB (−60), `expansionRatio` 1 … 50 (1). ``gainReduction`` meters the current reduction.
public final class DynamicsUnit: RenderUnit {
    public let core: UnitCore
    static let specs: [ParameterSpec] = [
        ParameterSpec("threshold", name: "Threshold", range: -60...0, unit: .decibels, default: -20),
        ParameterSpec("ratio", name: "Ratio", range: 1...50, unit: .generic, default: 4),
        ParameterSpec("knee", name: "Knee width", range: 0...40, unit: .decibels, default: 0),
        ParameterSpec("attack", name: "Attack time", range: 0.0001...0.2, unit: .seconds, default: 0.005),
        ParameterSpec("release", name: "Release time", range: 0.01...3, unit: .seconds, default: 0.1),
        ParameterSpec("makeupGain", name: "Makeup gain", range: -40...40, unit: .decibels, default: 0),
        ParameterSpec("expansionThreshold", name: "Expansion threshold", range: -120...0, unit: .decibels, default: -60),
        ParameterSpec("expansionRatio", name: "Expansion ratio", range: 1...50, unit: .generic, default: 1),
    ]
    /// Seconds of each peak-hold segment; the detector reads the larger of the current and the previous segment.
    public static let holdTime = 0.0025
    static let controlFrames = 32

    private let p: [Parameter]
    /// Envelope, peak hold, ramps and `levels`: the render thread's.
    private let kernel: RenderThreadBound<DynamicsKernel>
    /// The envelope (dB bits), written by the render thread each cycle; any thread reads it.
    private let meter = Atomic<UInt32>(Float(0).bitPattern)

    /// Makes a compressor with every parameter at its default (−20 dB threshold, ratio 4, hard knee, expander off).
    ///
    /// - Parameter format: The input and output format; only its rate and channel count are used.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry.
    public init(format: StreamFormat) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        p = Self.specs.map { Parameter($0, owner: "dynamics") }
        kernel = RenderThreadBound(DynamicsKernel(parameters: p))
        core = UnitCore(kind: "dynamics", inputs: [f], outputs: [f], parameters: p)
    }

    /// Current gain reduction in dB (positive: the signal is turned down by that much). Any thread.
    public var gainReduction: Float { -Float(bitPattern: meter.load(ordering: .relaxed)) }

    public var propertyNames: [String] { commonPropertyNames + ["gainReduction"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        name == "gainReduction" ? .double(Double(gainReduction)) : try commonProperty(name)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        kernel.whileStopped.allocate(spec, rampFrames: p.map { rampFrames(for: $0) })
    }

    public func reset() {
        kernel.whileStopped.reset()
        meter.store(Float(0).bitPattern, ordering: .relaxed)
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(
            input: context.input(0), output: context.output(0), frames: context.frameCount, meter: meter)
    }
}

/// The render-side state of a ``DynamicsUnit``: the ramps, the envelope, the peak hold and the `levels` buffer
/// (owned; freed with the kernel). Used by one thread at a time.
private struct DynamicsKernel: ~Copyable {
    let p: [Parameter]
    var smoothed: [SmoothedValue]
    var envelope: Float = 0  // smoothed gain in dB (≤ 0 when compressing)
    var holdCurrent: Float = 0
    var holdPrevious: Float = 0
    var holdCount = 0
    var holdLength = 120
    var sampleRate = 48_000.0
    var levels: UnsafeMutablePointer<Float>?
    var coefficientTimes: (attack: Float, release: Float) = (0, 0)
    var coefficients: (attack: Float, release: Float) = (0, 0)

    init(parameters: [Parameter]) {
        p = parameters
        smoothed = DynamicsUnit.specs.map { SmoothedValue($0.defaultValue, rampFrames: 0) }
    }

    deinit { levels?.deallocate() }

    /// Allocates `levels` for `spec` and sets the ramp lengths (frames, one per parameter). Control thread.
    mutating func allocate(_ spec: RenderSpec, rampFrames: [Int]) {
        levels?.deallocate()
        levels = .allocate(capacity: spec.maximumFrames)
        sampleRate = spec.sampleRate
        holdLength = max(1, Int((DynamicsUnit.holdTime * spec.sampleRate).rounded()))
        for i in smoothed.indices { smoothed[i].rampFrames = rampFrames[i] }
    }

    /// Jumps the ramps to their targets and clears the envelope and the hold. Control thread.
    mutating func reset() {
        for i in smoothed.indices { smoothed[i].reset(to: p[i].value) }
        clearState()
    }

    private mutating func clearState() {
        envelope = 0
        holdCurrent = 0
        holdPrevious = 0
        holdCount = 0
    }

    /// Lane-wise maximum as a compare and a blend (`pointwiseMax` handles NaN lane by lane, in scalar code).
    @inline(__always)
    private static func larger(_ a: SIMD4<Float>, _ b: SIMD4<Float>) -> SIMD4<Float> {
        a.replacing(with: b, where: a .< b)
    }

    mutating func render(input: BufferView, output: BufferView, frames: Int, meter: borrowing Atomic<UInt32>) {
        guard let levels else { return }
        let channels = output.channelCount
        for i in smoothed.indices { smoothed[i].setTarget(p[i].value) }

        // Pass 1: the linked peak of each frame.
        let x0 = input[0].baseAddress!
        for i in 0..<frames { levels[i] = abs(x0[i]) }
        for c in 1..<max(channels, 1) where input.channelStride != 0 {
            let x = input[c].baseAddress!
            for i in 0..<frames { levels[i] = max(levels[i], abs(x[i])) }
        }

        // Pass 2: the peak-hold detector: the running maximum of the current hold window, or the previous window's
        // maximum if larger. Window by window; within one, the running maximum goes four frames at a time (the
        // levels are magnitudes, so shifting zeros in leaves them unchanged).
        var current = holdCurrent, previous = holdPrevious, count = holdCount
        let hold = holdLength
        var i = 0
        while i < frames {
            let end = i + min(frames - i, hold - count)
            count += end - i
            var j = i
            if end - j >= 4 {
                typealias Quad = SIMD4<Float>
                let floor = Quad(repeating: previous)
                var carry = Quad(repeating: current)
                while j + 4 <= end {
                    let p = UnsafeMutableRawPointer(levels + j)
                    var v = p.loadUnaligned(as: Quad.self)
                    v = Self.larger(v, Quad(0, v[0], v[1], v[2]))
                    v = Self.larger(v, Quad(0, 0, v[0], v[1]))
                    v = Self.larger(v, carry)
                    carry = Quad(repeating: v[3])
                    p.storeBytes(of: Self.larger(v, floor), as: Quad.self)
                    j += 4
                }
                current = carry[0]
            }
            while j < end {
                current = max(current, levels[j])
                levels[j] = max(current, previous)
                j += 1
            }
            i = end
            if count == hold {
                // The window's last frame already sees it as the previous window (and an empty current one).
                levels[end - 1] = current
                previous = current
                current = 0
                count = 0
            }
        }
        holdCurrent = current
        holdPrevious = previous
        holdCount = count

        // Pass 3, in control blocks: the static curve (independent per frame, so it vectorizes), then the
        // attack/release smoothing and makeup (serial).
        var start = 0
        var y = envelope
        while start < frames {
            let n = min(DynamicsUnit.controlFrames, frames - start)
            let threshold = smoothed[0].advance(by: n)
            let slope = 1 / smoothed[1].advance(by: n) - 1  // dB of gain per dB over the threshold
            let knee = smoothed[2].advance(by: n)
            let attackTime = smoothed[3].advance(by: n), releaseTime = smoothed[4].advance(by: n)
            if attackTime != coefficientTimes.attack || releaseTime != coefficientTimes.release {
                coefficientTimes = (attackTime, releaseTime)
                coefficients = (
                    Float(exp(-1 / (Double(attackTime) * sampleRate))), Float(exp(-1 / (Double(releaseTime) * sampleRate)))
                )
            }
            let (attack, release) = coefficients
            let expansionThreshold = smoothed[6].advance(by: n)
            let expansionSlope = smoothed[7].advance(by: n) - 1
            let kneeLow = threshold - knee / 2, kneeHigh = threshold + knee / 2
            let kneeScale = knee > 0 ? slope / (2 * knee) : 0
            for i in start..<(start + n) {
                let level = FastMath.decibels(levels[i])
                let d = max(level - kneeLow, 0)
                var g = level >= kneeHigh ? (level - threshold) * slope : d * d * kneeScale
                g += min(level - expansionThreshold, 0) * expansionSlope
                levels[i] = max(g, -120)  // a deep expander floor, so the gain comes back within its release time
            }
            if smoothed[5].isRamping {
                var makeup = smoothed[5]
                for i in start..<(start + n) {
                    let g = levels[i]
                    y = g < y ? y * attack + g * (1 - attack) : y * release + g * (1 - release)
                    levels[i] = y + makeup.next()
                }
                smoothed[5] = makeup
            } else {
                let makeup = smoothed[5].value
                // Both candidates are computed while the comparison runs, so the chain from one y to the next
                // is a multiply, an add and a blend.
                let attackIn = 1 - attack, releaseIn = 1 - release
                for i in start..<(start + n) {
                    let g = levels[i]
                    let falling = y * attack + g * attackIn
                    let rising = y * release + g * releaseIn
                    y = g < y ? falling : rising
                    levels[i] = y + makeup
                }
            }
            start += n
        }
        envelope = y
        for i in 0..<frames { levels[i] = FastMath.amplitude(decibels: levels[i]) }
        meter.store(envelope.bitPattern, ordering: .relaxed)

        // Pass 4: apply.
        for c in 0..<channels {
            let x = input[c].baseAddress!, out = output[c].baseAddress!
            for i in 0..<frames { out[i] = x[i] * levels[i] }
        }
    }
}
