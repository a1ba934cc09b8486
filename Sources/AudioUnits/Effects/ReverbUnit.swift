import AudioCore
import AudioGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An algorithmic stereo reverb: the Reverb2 role. Graph-file type `"reverb"`.
///
/// Signal flow, per sample:
/// - the input channels are averaged to mono;
/// - early reflections: `randomizeReflections` taps on a mono delay line at pseudo-random times between the two
///   delay times (fixed seed, so every instance sounds the same), alternately left and right, with random signs and
///   gains falling with time, normalized so their total energy does not depend on the count;
/// - late reverb: a feedback delay network of 8 delay lines, lengths spread geometrically between `minDelayTime`
///   and `maxDelayTime` and nudged to be pairwise coprime, mixed by an 8 × 8 Hadamard matrix scaled by 1/√8
///   (orthogonal, so the loop loses energy only in the lines' absorption filters). Each line of `d` samples ends
///   in a one-pole filter `b0 / (1 − a1 z⁻¹)` whose gain is `10^(−3d / (T·fs))` with `T = decayTimeAt0Hz` at DC and
///   `T = decayTimeAtNyquist` at Nyquist: every round trip loses what a 60 dB decay over `T` seconds allows, so
///   the reverberation time is `decayTimeAt0Hz` at low and `decayTimeAtNyquist` at high frequencies (measured by
///   Schroeder integration below 200 Hz: within 1 % of `decayTimeAt0Hz`; the filters' limits at extreme ratios of
///   the two times are described at `updateAbsorption`). The mono input plus the reflections is injected into the
///   lines with a fixed sign pattern;
/// - left and right are two different rows of the Hadamard matrix applied to the line outputs (orthogonal sign
///   combinations), plus the reflections of their side, so they are decorrelated even for a mono input;
/// - output `gain · ((1 − mix) · dry + mix · wet)`, with `mix = wetDryMix / 100`. A mono output gets
///   `(left + right) / 2` as its wet signal; outputs with more than two channels repeat left, right, left, …
///
/// Level: the injection into the lines is scaled by a constant (``ReverbUnit/injectionGain``) chosen so that the
/// impulse response at the default settings carries about the energy of the impulse in each channel (measured:
/// 0.0 dB left, −0.8 dB right). The late energy grows in proportion to the decay time and falls as the lines get
/// longer (fewer echoes per second): with both decay times at 20 s it is +14 dB, at 0.1 s −13 dB, and with
/// `maxDelayTime` 1 s it drops by 4 … 7 dB. It never grows without bound: the loop gain is below 1 at every
/// frequency for every setting. The reflections carry a fixed total energy (``ReverbUnit/reflectionEnergy``)
/// whatever their count.
///
/// Parameters, all settable from any thread while running, all smoothed:
/// - `wetDryMix` (%, 0 … 100, default 50) and `gain` (dB, −20 … 20, default 0, applied to the whole output):
///   per-sample 20 ms ramps. With `wetDryMix` 0 and `gain` 0 the output is the input, bit for bit;
/// - `minDelayTime`, `maxDelayTime` (s, 0.0001 … 1, defaults 0.008 and 0.050; a pair with max < min is used
///   swapped): the lines' and reflections' read positions glide to the new lengths, linearly interpolated while
///   they move, over at least 50 ms and at most 0.25 samples of delay per sample (a pitch bend of at most
///   −5 … +4 semitones while gliding, never a jump);
/// - `decayTimeAt0Hz` (s, 0.001 … 20, default 1) and `decayTimeAtNyquist` (s, 0.001 … 20, default 0.5): 20 ms
///   ramps; the filter coefficients follow every 32 frames;
/// - `randomizeReflections` (1 … 1000, default 1, rounded to a whole number): taken at the next 32-frame block.
///
/// Cost (release build, 48 kHz stereo, 128-frame cycles, the 2-vCPU benchmark machine): about 6–7 ns per
/// channel-sample at the default settings, whatever the decay and delay times. Each reflection adds a multiply-add
/// per sample, 0.03–0.05 ns per channel-sample — so 1000 reflections cost about 5× the rest — skipped once the
/// input has been silent for longer than the longest delay. While delay times glide, the lines are read with
/// interpolation: about twice the cost.
///
/// Memory: two delay buffers sized for 1 s at the graph's sample rate (about 2.5 MB at 48 kHz), allocated when
/// the unit is prepared.
///
/// Thread safety: like every ``/AudioGraph/RenderUnit``: parameters (and ``tailTime``) from any thread; `render` on the
/// render thread only, where they never allocate, lock, log or do I/O; the rest is
/// control-thread API.
public final class ReverbUnit: RenderUnit {
    public let core: UnitCore
    /// `wetDryMix`: the share of the reverberated signal in %, 0 … 100, default 50; 20 ms ramps.
    public static let wetDryMixSpec = ParameterSpec(
        "wetDryMix", name: "Wet/dry mix", range: 0...100, unit: .percent, default: 50)
    /// `gain`: the whole output's gain in dB, −20 … +20, default 0; 20 ms ramps.
    public static let gainSpec = ParameterSpec("gain", name: "Gain", range: -20...20, unit: .decibels, default: 0)
    /// `minDelayTime`: the shortest delay line and earliest reflection in seconds, 0.0001 … 1, default 0.008; glides
    /// over at least 50 ms.
    public static let minDelayTimeSpec = ParameterSpec(
        "minDelayTime", name: "Minimum delay time", range: 0.0001...1, unit: .seconds, default: 0.008,
        smoothingTime: 0.05)
    /// `maxDelayTime`: the longest delay line and latest reflection in seconds, 0.0001 … 1, default 0.050; glides
    /// over at least 50 ms.
    public static let maxDelayTimeSpec = ParameterSpec(
        "maxDelayTime", name: "Maximum delay time", range: 0.0001...1, unit: .seconds, default: 0.050,
        smoothingTime: 0.05)
    /// `decayTimeAt0Hz`: the time to decay by 60 dB at low frequencies in seconds, 0.001 … 20, default 1.
    public static let decayTimeAt0HzSpec = ParameterSpec(
        "decayTimeAt0Hz", name: "Decay time at 0 Hz", range: 0.001...20, unit: .seconds, default: 1)
    /// `decayTimeAtNyquist`: the time to decay by 60 dB at the Nyquist frequency in seconds, 0.001 … 20, default 0.5.
    public static let decayTimeAtNyquistSpec = ParameterSpec(
        "decayTimeAtNyquist", name: "Decay time at Nyquist", range: 0.001...20, unit: .seconds, default: 0.5)
    /// `randomizeReflections`: the number of early-reflection taps, 1 … 1000 (rounded), default 1; unramped, taken
    /// at the next 32-frame block.
    public static let randomizeReflectionsSpec = ParameterSpec(
        "randomizeReflections", name: "Early reflections", range: 1...1000, unit: .generic, default: 1,
        smoothingTime: 0)

    /// Scale of the input injected into each of the 8 lines (linear), fixed: see the level note above.
    public static let injectionGain: Float = ReverbKernel.injectionGain
    /// Total energy of the early-reflection taps, left and right together, relative to the input (linear power).
    public static let reflectionEnergy: Float = ReverbKernel.reflectionEnergy

    private let wetDryMix: Parameter
    private let gain: Parameter
    private let minDelayTime: Parameter
    private let maxDelayTime: Parameter
    private let decayTimeAt0Hz: Parameter
    private let decayTimeAtNyquist: Parameter
    private let randomizeReflections: Parameter
    /// Delay lines, filters, ramps: the render thread's.
    private let kernel = RenderThreadBound(ReverbKernel())

    /// A reverb with the input and output channel counts of `format` (a graph format, see
    /// ``/AudioCore/StreamFormat/graph(sampleRate:channelCount:)``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` when `format` is not a valid graph format.
    public convenience init(format: StreamFormat) throws(AudioError) {
        try self.init(format: format, inputChannelCount: format.channelCount)
    }

    /// A reverb whose output has `format`'s channel count and whose input has `inputChannelCount` channels:
    /// 1 (mono in, for instance stereo out) or `format.channelCount`.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for another input channel count or an invalid format.
    public init(format: StreamFormat, inputChannelCount: Int) throws(AudioError) {
        guard inputChannelCount == 1 || inputChannelCount == format.channelCount else {
            throw AudioError(
                .invalidFormat,
                "reverb: the input must be mono or have the output's \(format.channelCount) channels, "
                    + "got \(inputChannelCount)")
        }
        let output = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let input = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: inputChannelCount)
        wetDryMix = Parameter(Self.wetDryMixSpec, owner: "reverb")
        gain = Parameter(Self.gainSpec, owner: "reverb")
        minDelayTime = Parameter(Self.minDelayTimeSpec, owner: "reverb")
        maxDelayTime = Parameter(Self.maxDelayTimeSpec, owner: "reverb")
        decayTimeAt0Hz = Parameter(Self.decayTimeAt0HzSpec, owner: "reverb")
        decayTimeAtNyquist = Parameter(Self.decayTimeAtNyquistSpec, owner: "reverb")
        randomizeReflections = Parameter(Self.randomizeReflectionsSpec, owner: "reverb")
        core = UnitCore(kind: "reverb", inputs: [input], outputs: [output],
            parameters: [
                wetDryMix, gain, minDelayTime, maxDelayTime, decayTimeAt0Hz, decayTimeAtNyquist, randomizeReflections,
            ])
    }

    /// Seconds the tail lasts after the input stops: the longer decay time plus the longest delay.
    public var tailTime: Double {
        Double(max(decayTimeAt0Hz.value, decayTimeAtNyquist.value) + max(minDelayTime.value, maxDelayTime.value))
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        kernel.whileStopped = ReverbKernel(sampleRate: spec.sampleRate)
    }

    /// Clears the delay lines and filters and jumps every parameter to its target. Control thread.
    public func reset() {
        // Ramp lengths here rather than in allocateRenderResources: `prepare` sets `spec`, which rampFrames(for:)
        // reads, between the two.
        kernel.whileStopped.reset(
            targets,
            rampFrames: (mix: rampFrames(for: wetDryMix), gain: rampFrames(for: gain),
                         decay: rampFrames(for: decayTimeAt0Hz), glide: rampFrames(for: maxDelayTime)))
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(input: context.input(0), output: context.output(0), frames: context.frameCount, targets: targets)
    }

    /// The parameters' current targets, in the kernel's units.
    private var targets: ReverbTargets {
        ReverbTargets(
            mix: wetDryMix.value / 100, gain: decibelsToGain(gain.value),
            minDelay: Double(minDelayTime.value), maxDelay: Double(maxDelayTime.value),
            decay0: decayTimeAt0Hz.value, decayNyquist: decayTimeAtNyquist.value,
            reflections: min(max(Int(randomizeReflections.value.rounded()), 1), ReverbKernel.maximumReflections))
    }
}

/// What the kernel follows: the parameters' targets, read once per render call.
struct ReverbTargets {
    var mix: Float
    var gain: Float
    var minDelay: Double
    var maxDelay: Double
    var decay0: Float
    var decayNyquist: Float
    var reflections: Int
}

/// The render-side state of a ``ReverbUnit``: buffers (owned; freed when the kernel is replaced or the unit goes
/// away), filter states, ramps and glides. Used by one thread at a time.
struct ReverbKernel: ~Copyable {
    typealias Lanes = SIMD8<Float>
    typealias Indices = SIMD8<Int32>

    // Constants are computed properties, so the render thread never touches a lazily initialized global.
    static var lineCount: Int { 8 }
    /// Frames between control updates (decay coefficients, glides, reflection count).
    static var controlFrames: Int { 32 }
    static var maximumReflections: Int { 1000 }
    /// The longest delay the parameters allow, in seconds.
    static var maximumDelayTime: Double { 1 }
    /// Fastest glide of a read position, in samples of delay per sample.
    static var maximumGlideRate: Double { 0.25 }
    static var injectionGain: Float { 0.6 }
    static var reflectionEnergy: Float { 0.25 }
    /// Signs with which the input enters the lines (not a Hadamard row).
    static var injectionSigns: Lanes { Lanes(1, -1, -1, 1, 1, 1, -1, 1) }
    /// Rows of the Hadamard matrix that make the left and right outputs (`network` reads lanes 1 and 2 directly:
    /// change both together).
    static var leftRow: Int { 1 }
    static var rightRow: Int { 2 }

    // Scratch rows, controlFrames samples each.
    private static var rowInjection: Int { 0 }
    private static var rowReflectionsLeft: Int { 1 }
    private static var rowReflectionsRight: Int { 2 }
    private static var rowWetLeft: Int { 3 }
    private static var rowWetRight: Int { 4 }
    private static var rowDryGain: Int { 5 }
    private static var rowWetGain: Int { 6 }
    private static var rowCount: Int { 7 }

    let sampleRate: Double
    /// Longest line or reflection delay, in samples.
    let delayLimit: Int
    /// Frames per line (a power of two).
    let lineFrames: Int
    /// The 8 lines, frame-interleaved: frame `n` holds the lines' samples at `8n … 8n + 7`.
    let lines: UnsafeMutablePointer<Float>
    /// Frames in the reflection line (a power of two).
    let reflectionFrames: Int
    /// The mono input history, `2 × reflectionFrames`: the second half mirrors the first, so `n` consecutive
    /// samples ending anywhere can be read without wrapping.
    let reflectionLine: UnsafeMutablePointer<Float>
    let scratch: UnsafeMutablePointer<Float>
    /// Per reflection: position in the delay range (0 … 1), signed gain before normalization, glide endpoints and
    /// the current integer delay.
    let tapFraction: UnsafeMutablePointer<Float>
    let tapGain: UnsafeMutablePointer<Float>
    let tapFrom: UnsafeMutablePointer<Float>
    let tapTo: UnsafeMutablePointer<Float>
    let tapDelay: UnsafeMutablePointer<Int>
    /// `tapNormalization[n]`: the gain that gives the first `n` taps a total energy of `reflectionEnergy`.
    let tapNormalization: UnsafeMutablePointer<Float>

    private var write = 0
    private var reflectionWrite = 0
    /// Frames since the mono input was last nonzero (reflections are skipped when the whole line is silent).
    private var silentFrames = 0
    private var controlCountdown = 0
    /// Absorption filter outputs, scaled by 1/√8 (the Hadamard normalization is folded into `b0`).
    private var filterState = Lanes(repeating: 0)
    /// How the input enters each line: `injectionSigns · injectionGain`.
    private let injectionVector = ReverbKernel.injectionSigns * ReverbKernel.injectionGain
    private var b0 = Lanes(repeating: 0)
    private var a1 = Lanes(repeating: 0)
    private var coefficientDecay: (Float, Float) = (-1, -1)
    private var coefficientsStale = true

    /// Line delays in samples: `delay` at the current block's start, moving by `delayStep` per sample while
    /// gliding from `delayFrom` to `delayTo`; integer `delayFrames` otherwise.
    private var delay = Lanes(repeating: 2)
    private var delayStep = Lanes(repeating: 0)
    private var delayFrom = Lanes(repeating: 2)
    private var delayTo = Lanes(repeating: 2)
    private var delayFrames = Indices(repeating: 2)
    private var glideTotal = 0
    private var glideDone = 0
    private var gliding = false
    private var appliedRange: (Double, Double) = (-1, -1)
    private var reflectionCount = 1
    private var minimumGlideFrames = 32

    private var mix = SmoothedValue(0.5, rampFrames: 0)
    private var gain = SmoothedValue(1, rampFrames: 0)
    private var decay0 = SmoothedValue(1, rampFrames: 0)
    private var decayNyquist = SmoothedValue(0.5, rampFrames: 0)

    /// A placeholder with tiny buffers, replaced when the unit is prepared.
    init() {
        self.init(sampleRate: 64)
    }

    init(sampleRate: Double) {
        self.sampleRate = sampleRate
        delayLimit = Int((sampleRate * Self.maximumDelayTime).rounded(.up)) + 64
        lineFrames = Self.powerOfTwo(atLeast: delayLimit + 2 * Self.controlFrames)
        reflectionFrames = Self.powerOfTwo(atLeast: delayLimit + 2 * Self.controlFrames)
        lines = Self.allocate(lineFrames * Self.lineCount)
        reflectionLine = Self.allocate(2 * reflectionFrames)
        scratch = Self.allocate(Self.rowCount * Self.controlFrames)
        let taps = Self.maximumReflections
        tapFraction = Self.allocate(taps)
        tapGain = Self.allocate(taps)
        tapFrom = Self.allocate(taps)
        tapTo = Self.allocate(taps)
        tapDelay = UnsafeMutablePointer<Int>.allocate(capacity: taps)
        tapDelay.initialize(repeating: 1, count: taps)
        tapNormalization = Self.allocate(taps + 1)

        // Reflection times and signs from a fixed seed; gains fall linearly to 1/4 across the delay range.
        var random = Xoshiro256(seed: 0x5EED_0F_2E7E_2B)
        var energy = 0.0
        tapNormalization[0] = 0
        for k in 0..<taps {
            let bits = random.next()
            let fraction = Float(bits >> 40) * 0x1p-24
            let sign: Float = (bits >> 39) & 1 == 0 ? 1 : -1
            tapFraction[k] = fraction
            tapGain[k] = sign * (1 - 0.75 * fraction)
            energy += Double(tapGain[k] * tapGain[k])
            tapNormalization[k + 1] = Float((Double(Self.reflectionEnergy) / energy).squareRoot())
        }
    }

    deinit {
        UnsafeMutableRawPointer(lines).deallocate()
        UnsafeMutableRawPointer(reflectionLine).deallocate()
        UnsafeMutableRawPointer(scratch).deallocate()
        UnsafeMutableRawPointer(tapFraction).deallocate()
        UnsafeMutableRawPointer(tapGain).deallocate()
        UnsafeMutableRawPointer(tapFrom).deallocate()
        UnsafeMutableRawPointer(tapTo).deallocate()
        UnsafeMutableRawPointer(tapNormalization).deallocate()
        tapDelay.deallocate()
    }

    private static func allocate(_ count: Int) -> UnsafeMutablePointer<Float> {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1) * MemoryLayout<Float>.stride, alignment: 64)
        let p = raw.bindMemory(to: Float.self, capacity: max(count, 1))
        p.initialize(repeating: 0, count: max(count, 1))
        return p
    }

    private static func powerOfTwo(atLeast n: Int) -> Int {
        var p = 1
        while p < n { p <<= 1 }
        return p
    }

    // MARK: Lifecycle

    /// Clears every buffer and jumps to the targets; sets the ramp lengths (frames). Control thread.
    mutating func reset(_ t: ReverbTargets, rampFrames: (mix: Int, gain: Int, decay: Int, glide: Int)) {
        minimumGlideFrames = max(rampFrames.glide, Self.controlFrames)
        mix.rampFrames = rampFrames.mix
        gain.rampFrames = rampFrames.gain
        decay0.rampFrames = rampFrames.decay
        decayNyquist.rampFrames = rampFrames.decay
        lines.update(repeating: 0, count: lineFrames * Self.lineCount)
        reflectionLine.update(repeating: 0, count: 2 * reflectionFrames)
        write = 0
        reflectionWrite = 0
        silentFrames = reflectionFrames
        filterState = Lanes(repeating: 0)
        let range = Self.orderedRange(t)
        let span = (range.0 * sampleRate, range.1 * sampleRate)
        delayTo = Self.lineLengths(span, limit: delayLimit)
        for k in 0..<Self.maximumReflections {
            tapTo[k] = Self.tapPosition(tapFraction[k], span, limit: delayLimit)
        }
        settle()
        appliedRange = range
        reflectionCount = t.reflections
        mix.reset(to: t.mix)
        gain.reset(to: t.gain)
        decay0.reset(to: t.decay0)
        decayNyquist.reset(to: t.decayNyquist)
        updateAbsorption(decay0.value, decayNyquist.value)
        controlCountdown = 0
    }

    // MARK: Control rate

    /// The delay range in seconds, shortest first.
    private static func orderedRange(_ t: ReverbTargets) -> (Double, Double) {
        (min(t.minDelay, t.maxDelay), max(t.minDelay, t.maxDelay))
    }

    /// Line lengths in samples for a delay range: spread geometrically, rounded, then each nudged up until it is
    /// coprime with every shorter one (so the lines' echoes never coincide periodically). At least 2 samples.
    /// `range`: shortest and longest, in samples.
    private static func lineLengths(_ range: (Double, Double), limit: Int) -> Lanes {
        let shortest = max(range.0, 2)
        let longest = max(range.1, shortest)
        var lengths = Lanes(repeating: 0)
        for i in 0..<Self.lineCount {
            let ideal = shortest * pow(longest / shortest, Double(i) / Double(Self.lineCount - 1))
            var d = min(max(Int(ideal.rounded()), 2), limit)
            var j = 0
            while j < i, d < limit {
                if Self.gcd(Int(lengths[j]), d) != 1 {
                    d += 1
                    j = 0
                } else {
                    j += 1
                }
            }
            lengths[i] = Float(d)
        }
        return lengths
    }

    private static func gcd(_ a: Int, _ b: Int) -> Int {
        var (x, y) = (a, b)
        while y != 0 { (x, y) = (y, x % y) }
        return x
    }

    /// Where a reflection at `fraction` of the delay range (`range` in samples) falls, in whole samples.
    private static func tapPosition(_ fraction: Float, _ range: (Double, Double), limit: Int) -> Float {
        let t = range.0 + Double(fraction) * (range.1 - range.0)
        return Float(min(max(t.rounded(), 1), Double(limit)))
    }

    /// Ends a glide (or puts every delay at its target): integer delays from here on.
    private mutating func settle() {
        delay = delayTo
        delayFrom = delayTo
        delayStep = Lanes(repeating: 0)
        delayFrames = Self.wholeNumbers(delayTo)
        for k in 0..<Self.maximumReflections {
            tapFrom[k] = tapTo[k]
            tapDelay[k] = Int(tapTo[k])
        }
        glideTotal = 0
        glideDone = 0
        gliding = false
        coefficientsStale = true
    }

    /// The once-per-32-frames update: new delay targets start a glide, the glide advances, the reflection count
    /// and the decay ramps are applied.
    private mutating func control(_ t: ReverbTargets) {
        let range = Self.orderedRange(t)
        if range != appliedRange {
            // Glide from wherever the read positions are now.
            let progress = glideTotal > 0 ? Float(glideDone) / Float(glideTotal) : 1
            let span = (range.0 * sampleRate, range.1 * sampleRate)
            let newTo = Self.lineLengths(span, limit: delayLimit)
            let now = delayFrom + (delayTo - delayFrom) * progress
            var change = pointwiseMax(newTo - now, now - newTo).max()
            delayFrom = now
            delayTo = newTo
            for k in 0..<Self.maximumReflections {
                let tap = tapFrom[k] + (tapTo[k] - tapFrom[k]) * progress
                tapFrom[k] = tap
                tapTo[k] = Self.tapPosition(tapFraction[k], span, limit: delayLimit)
                change = max(change, abs(tapTo[k] - tap))
            }
            // At most `maximumGlideRate` samples of delay per sample, and never faster than the parameter's smoothing
            // time; a whole number of control blocks.
            let frames = max(minimumGlideFrames, Int((Double(change) / Self.maximumGlideRate).rounded(.up)))
            glideTotal = change == 0 ? 1 : (frames + Self.controlFrames - 1) / Self.controlFrames * Self.controlFrames
            glideDone = change == 0 ? 1 : 0
            appliedRange = range
        }
        if glideTotal > 0 {
            if glideDone >= glideTotal {
                settle()
            } else {
                let scale = 1 / Float(glideTotal)
                delay = delayFrom + (delayTo - delayFrom) * (Float(glideDone) * scale)
                delayStep = (delayTo - delayFrom) * scale
                glideDone += Self.controlFrames
                gliding = true
            }
            coefficientsStale = true
        }
        reflectionCount = t.reflections
        decay0.setTarget(t.decay0)
        decayNyquist.setTarget(t.decayNyquist)
        let d0 = decay0.advance(by: Self.controlFrames)
        let dn = decayNyquist.advance(by: Self.controlFrames)
        if coefficientsStale || d0 != coefficientDecay.0 || dn != coefficientDecay.1 { updateAbsorption(d0, dn) }
    }

    /// The lines' filters for their current lengths: gain `g0 = 10^(−3d / (T0·fs))` at DC and `gN` likewise at
    /// Nyquist, i.e. pole `a1 = (g0 − gN) / (g0 + gN)` and `b0 = 2·g0·gN / (g0 + gN)`.
    ///
    /// Computed from the gains' logarithms — `a1 = tanh((ln g0 − ln gN) / 2)`, `b0 = g · (1 − |a1|)` with `g` the
    /// gain at the slower end, the same values — so a gain that underflows (1 ms over a 1 s line) mutes the line
    /// instead of giving 0 / 0. Two refinements keep the decay right when the decay times differ a lot:
    /// - the filter delays the slower end by `|a1| / (1 − |a1|)` samples, which lengthens that end's loop; `g` is
    ///   computed for the line plus that delay (a 0.3-sample correction at the default settings);
    /// - `|a1|` is kept below `d / (20 + d)`, so that delay stays under 5 % of the line. Without the limit, 20 s at
    ///   DC and 0.5 s at Nyquist on a 1 s line give a pole of 1 − 3·10⁻⁶ (a filter ringing longer than the reverb,
    ///   or exactly 1 in Float). The faster end then decays a little slower than asked, never slower than the other.
    private mutating func updateAbsorption(_ decay0: Float, _ decayNyquist: Float) {
        let perSample0 = -3 * M_LN10 / (Double(decay0) * sampleRate)
        let perSampleNyquist = -3 * M_LN10 / (Double(decayNyquist) * sampleRate)
        let slowerRate = max(perSample0, perSampleNyquist)
        let normalization = 1 / 8.0.squareRoot()
        for i in 0..<Self.lineCount {
            let d = Double(delay[i])
            let limit = d / (20 + d)
            let pole = Float(min(max(tanh((perSample0 - perSampleNyquist) * d / 2), -limit), limit))
            let magnitude = Double(abs(pole))
            let filterDelay = magnitude / (1 - magnitude)
            a1[i] = pole
            // From the rounded pole, so that the Float filter's gain at the slower end is g·(1 ± 10⁻⁷).
            b0[i] = Float(exp(slowerRate * (d + filterDelay)) * (1 - magnitude) * normalization)
        }
        coefficientDecay = (decay0, decayNyquist)
        coefficientsStale = false
    }

    // MARK: Rendering

    /// Renders `frames` frames (0 … any) of `output` from `input`. Render thread.
    mutating func render(input: BufferView, output: BufferView, frames: Int, targets: ReverbTargets) {
        mix.setTarget(targets.mix)
        gain.setTarget(targets.gain)
        var done = 0
        while done < frames {
            if controlCountdown == 0 {
                control(targets)
                controlCountdown = Self.controlFrames
            }
            let n = min(controlCountdown, frames - done)
            process(input: input, output: output, offset: done, frames: n)
            done += n
            controlCountdown -= n
        }
    }

    /// One piece of a control block: `n` ≤ 32 frames from `offset`.
    private mutating func process(input: BufferView, output: BufferView, offset: Int, frames n: Int) {
        let row = Self.controlFrames
        let injection = scratch + Self.rowInjection * row
        let reflectionsLeft = scratch + Self.rowReflectionsLeft * row
        let reflectionsRight = scratch + Self.rowReflectionsRight * row
        let wetLeft = scratch + Self.rowWetLeft * row
        let wetRight = scratch + Self.rowWetRight * row

        // Mono input, into the reflection line (both halves).
        let inputs = input.channelCount
        let first = input[0].baseAddress! + offset
        for i in 0..<n { injection[i] = first[i] }
        if inputs > 1 {
            for c in 1..<inputs {
                let x = input[c].baseAddress! + offset
                for i in 0..<n { injection[i] += x[i] }
            }
            let scale = 1 / Float(inputs)
            for i in 0..<n { injection[i] *= scale }
        }
        var bits: UInt32 = 0
        let mask = reflectionFrames - 1
        for i in 0..<n {
            let j = (reflectionWrite + i) & mask
            reflectionLine[j] = injection[i]
            reflectionLine[j + reflectionFrames] = injection[i]
            bits |= injection[i].bitPattern & 0x7fff_ffff
        }
        silentFrames = bits == 0 ? min(silentFrames + n, reflectionFrames) : 0

        // Early reflections: they reach the output and feed the network.
        reflectionsLeft.update(repeating: 0, count: n)
        reflectionsRight.update(repeating: 0, count: n)
        if silentFrames < reflectionFrames {
            let normalization = tapNormalization[reflectionCount]
            if gliding {
                reflectionsGliding(frames: n, normalization: normalization, left: reflectionsLeft, right: reflectionsRight)
            } else {
                reflections(frames: n, normalization: normalization, left: reflectionsLeft, right: reflectionsRight)
            }
            for i in 0..<n { injection[i] += reflectionsLeft[i] + reflectionsRight[i] }
        }
        reflectionWrite = (reflectionWrite + n) & mask

        if gliding {
            networkGliding(frames: n, injection: injection, wetLeft: wetLeft, wetRight: wetRight)
        } else {
            network(frames: n, injection: injection, wetLeft: wetLeft, wetRight: wetRight)
        }
        for i in 0..<n {
            wetLeft[i] += reflectionsLeft[i]
            wetRight[i] += reflectionsRight[i]
        }
        mixOut(input: input, output: output, offset: offset, frames: n)
    }

    /// Adds the reflections at integer delays (no glide): per tap, a multiply-add over contiguous history. Even
    /// taps go left, odd taps right.
    @_noLocks
    private mutating func reflections(
        frames n: Int, normalization: Float, left: UnsafeMutablePointer<Float>, right: UnsafeMutablePointer<Float>
    ) {
        let mask = reflectionFrames - 1
        for side in 0..<2 {
            let destination = side == 0 ? left : right
            var k = side
            if n == Self.controlFrames {
                // A whole control block: 32 sums held in registers across the taps.
                var y0 = Lanes(repeating: 0), y1 = y0, y2 = y0, y3 = y0
                while k < reflectionCount {
                    let g = Lanes(repeating: tapGain[k] * normalization)
                    let x = UnsafeRawPointer(reflectionLine + ((reflectionWrite - tapDelay[k]) & mask))
                    y0 += x.loadUnaligned(as: Lanes.self) * g
                    y1 += x.loadUnaligned(fromByteOffset: 32, as: Lanes.self) * g
                    y2 += x.loadUnaligned(fromByteOffset: 64, as: Lanes.self) * g
                    y3 += x.loadUnaligned(fromByteOffset: 96, as: Lanes.self) * g
                    k += 2
                }
                let y = UnsafeMutableRawPointer(destination)
                y.storeBytes(of: y0, as: Lanes.self)
                y.storeBytes(of: y1, toByteOffset: 32, as: Lanes.self)
                y.storeBytes(of: y2, toByteOffset: 64, as: Lanes.self)
                y.storeBytes(of: y3, toByteOffset: 96, as: Lanes.self)
            } else {
                while k < reflectionCount {
                    let source = reflectionLine + ((reflectionWrite - tapDelay[k]) & mask)
                    Self.multiplyAdd(source, tapGain[k] * normalization, destination, n)
                    k += 2
                }
            }
        }
    }

    @_noLocks
    @inline(__always)
    private static func multiplyAdd(
        _ x: UnsafeMutablePointer<Float>, _ g: Float, _ y: UnsafeMutablePointer<Float>, _ n: Int
    ) {
        var i = 0
        let gv = Lanes(repeating: g)
        while i + 8 <= n {
            let v = UnsafeRawPointer(x + i).loadUnaligned(as: Lanes.self) * gv
                + UnsafeRawPointer(y + i).loadUnaligned(as: Lanes.self)
            UnsafeMutableRawPointer(y + i).storeBytes(of: v, as: Lanes.self)
            i += 8
        }
        while i < n {
            y[i] += x[i] * g
            i += 1
        }
    }

    /// Adds the reflections while their delays glide: fractional delays, linearly interpolated.
    @_noLocks
    private mutating func reflectionsGliding(
        frames n: Int, normalization: Float, left: UnsafeMutablePointer<Float>, right: UnsafeMutablePointer<Float>
    ) {
        let mask = reflectionFrames - 1
        // `glideDone` already counts this block; positions at its start are `glideDone − 32` frames in.
        let scale = 1 / Float(glideTotal)
        let progress = Float(glideDone - Self.controlFrames) * scale
        let blockOffset = Float(Self.controlFrames - controlCountdown)
        for k in 0..<reflectionCount {
            let g = tapGain[k] * normalization
            let step = (tapTo[k] - tapFrom[k]) * scale
            let start = tapFrom[k] + (tapTo[k] - tapFrom[k]) * progress
            let destination = k & 1 == 0 ? left : right
            for i in 0..<n {
                // Position from the block start, not accumulated: the same whatever the render call sizes.
                let t = start + step * (blockOffset + Float(i))
                let whole = Int(t)
                let fraction = t - Float(whole)
                let j = (reflectionWrite + i - whole) & mask
                let x0 = reflectionLine[j]
                let x1 = reflectionLine[j + reflectionFrames - 1]
                destination[i] += g * (x0 + fraction * (x1 - x0))
            }
        }
    }

    /// The Hadamard transform of 8 lanes (entries ±1, `H[a][i] = (−1)^popcount(a & i)`), as three butterflies.
    @inline(__always)
    private static func hadamard(_ v: Lanes) -> Lanes {
        let s = v.lowHalf + v.highHalf
        let d = v.lowHalf - v.highHalf
        return Lanes(lowHalf: butterfly4(s), highHalf: butterfly4(d))
    }

    @inline(__always)
    private static func butterfly4(_ v: SIMD4<Float>) -> SIMD4<Float> {
        let s = v.lowHalf + v.highHalf
        let d = v.lowHalf - v.highHalf
        return SIMD4(s.x + s.y, s.x - s.y, d.x + d.y, d.x - d.y)
    }

    /// Splits positive delays below 2²² into an integer part and a fraction in 0 … 1 (vector code throughout:
    /// adding 1.5 · 2²³ rounds to an integer held in the low mantissa bits). At exact integers the split may be
    /// `(d − 1, 1)` instead of `(d, 0)`; linear interpolation gives the same value either way.
    @inline(__always)
    private static func split(_ d: Lanes) -> (Indices, Lanes) {
        let magic = Lanes(repeating: 12_582_912)
        let rounded = (d - 0.5) + magic
        let whole = unsafeBitCast(rounded, to: Indices.self) &- unsafeBitCast(magic, to: Indices.self)
        return (whole, d - (rounded - magic))
    }

    /// Lanes holding whole numbers, as integers.
    private static func wholeNumbers(_ v: Lanes) -> Indices {
        var result = Indices(repeating: 0)
        for i in 0..<Self.lineCount { result[i] = Int32(v[i]) }
        return result
    }

    @inline(__always)
    private static func gather(_ base: UnsafeMutablePointer<Float>, _ frame: Indices) -> Lanes {
        Lanes(
            base[Int(frame[0]) &<< 3], base[Int(frame[1]) &<< 3 &+ 1], base[Int(frame[2]) &<< 3 &+ 2],
            base[Int(frame[3]) &<< 3 &+ 3], base[Int(frame[4]) &<< 3 &+ 4], base[Int(frame[5]) &<< 3 &+ 5],
            base[Int(frame[6]) &<< 3 &+ 6], base[Int(frame[7]) &<< 3 &+ 7])
    }

    /// The network at integer delays.
    ///
    /// Works in runs of frames in which neither the write position nor any read position wraps around the lines:
    /// within a run every read sits at a fixed offset from the write position, so the loop keeps no index vector
    /// (extracting eight indices per frame cost more than the filtering). The 8 lanes are handled as two halves,
    /// which is what SSE2 and NEON registers hold.
    @_noLocks
    private mutating func network(
        frames n: Int, injection: UnsafeMutablePointer<Float>, wetLeft: UnsafeMutablePointer<Float>,
        wetRight: UnsafeMutablePointer<Float>
    ) {
        typealias Half = SIMD4<Float>
        let lines = self.lines
        let frames = lineFrames
        let frameMask = frames - 1
        let b0Low = b0.lowHalf, b0High = b0.highHalf
        let a1Low = a1.lowHalf, a1High = a1.highHalf
        let injectLow = injectionVector.lowHalf, injectHigh = injectionVector.highHalf
        var yLow = filterState.lowHalf, yHigh = filterState.highHalf
        let d0 = Int(delayFrames[0]), d1 = Int(delayFrames[1]), d2 = Int(delayFrames[2]), d3 = Int(delayFrames[3])
        let d4 = Int(delayFrames[4]), d5 = Int(delayFrames[5]), d6 = Int(delayFrames[6]), d7 = Int(delayFrames[7])
        var w = write
        var i = 0
        while i < n {
            // Read positions, and the run until the write position or one of them wraps. (Comparisons rather
            // than `min`: generic functions are not specialized in debug builds, which the real-time checks reject.)
            let r0 = (w &- d0) & frameMask, r1 = (w &- d1) & frameMask, r2 = (w &- d2) & frameMask
            let r3 = (w &- d3) & frameMask, r4 = (w &- d4) & frameMask, r5 = (w &- d5) & frameMask
            let r6 = (w &- d6) & frameMask, r7 = (w &- d7) & frameMask
            var highest = w
            if r0 > highest { highest = r0 }
            if r1 > highest { highest = r1 }
            if r2 > highest { highest = r2 }
            if r3 > highest { highest = r3 }
            if r4 > highest { highest = r4 }
            if r5 > highest { highest = r5 }
            if r6 > highest { highest = r6 }
            if r7 > highest { highest = r7 }
            var run = frames - highest
            if n - i < run { run = n - i }
            // Offsets in floats from the write frame's first sample to each line's read sample.
            let o0 = (r0 &- w) &* 8, o1 = (r1 &- w) &* 8 &+ 1, o2 = (r2 &- w) &* 8 &+ 2, o3 = (r3 &- w) &* 8 &+ 3
            let o4 = (r4 &- w) &* 8 &+ 4, o5 = (r5 &- w) &* 8 &+ 5, o6 = (r6 &- w) &* 8 &+ 6, o7 = (r7 &- w) &* 8 &+ 7
            var q = lines + w &* 8
            for j in i..<(i + run) {
                yLow = b0Low * Half(q[o0], q[o1], q[o2], q[o3]) + a1Low * yLow
                yHigh = b0High * Half(q[o4], q[o5], q[o6], q[o7]) + a1High * yHigh
                // The Hadamard transform: one butterfly across the halves, two within each.
                let sum = yLow + yHigh, difference = yLow - yHigh
                let s2 = sum.lowHalf + sum.highHalf, s3 = sum.lowHalf - sum.highHalf
                let d2 = difference.lowHalf + difference.highHalf, d3 = difference.lowHalf - difference.highHalf
                let hLow = Half(s2.x + s2.y, s2.x - s2.y, s3.x + s3.y, s3.x - s3.y)
                let hHigh = Half(d2.x + d2.y, d2.x - d2.y, d3.x + d3.y, d3.x - d3.y)
                let x = injection[j]
                UnsafeMutableRawPointer(q).storeBytes(of: hLow + injectLow * x, as: Half.self)
                UnsafeMutableRawPointer(q + 4).storeBytes(of: hHigh + injectHigh * x, as: Half.self)
                wetLeft[j] = hLow[1]  // leftRow and rightRow, both in the low half
                wetRight[j] = hLow[2]
                q += 8
            }
            i += run
            w = (w &+ run) & frameMask
        }
        filterState = Lanes(lowHalf: yLow, highHalf: yHigh)
        write = w
    }

    /// The network while the delays glide: fractional delays, linearly interpolated.
    @_noLocks
    private mutating func networkGliding(
        frames n: Int, injection: UnsafeMutablePointer<Float>, wetLeft: UnsafeMutablePointer<Float>,
        wetRight: UnsafeMutablePointer<Float>
    ) {
        let lines = self.lines
        let frameMask = lineFrames - 1
        let indexMask = Indices(repeating: Int32(frameMask))
        let b0 = self.b0
        let a1 = self.a1
        let step = delayStep
        let inject = Self.injectionSigns * Self.injectionGain
        var y = filterState
        var w = write
        let blockOffset = Float(Self.controlFrames - controlCountdown)
        for i in 0..<n {
            // Delays from the block start, not accumulated: the same whatever the render call sizes.
            let d = delay + step * (blockOffset + Float(i))
            let (whole, fraction) = Self.split(d)
            let newer = (Indices(repeating: Int32(w)) &- whole) & indexMask
            let x0 = Self.gather(lines, newer)
            let x1 = Self.gather(lines, (newer &- 1) & indexMask)
            y = b0 * (x0 + fraction * (x1 - x0)) + a1 * y
            let h = Self.hadamard(y)
            UnsafeMutableRawPointer(lines + w &<< 3).storeBytes(of: h + inject * injection[i], as: Lanes.self)
            wetLeft[i] = h[Self.leftRow]
            wetRight[i] = h[Self.rightRow]
            w = (w &+ 1) & frameMask
        }
        filterState = y
        write = w
    }

    /// `gain · ((1 − mix) · dry + mix · wet)` into every output channel.
    private mutating func mixOut(input: BufferView, output: BufferView, offset: Int, frames n: Int) {
        let row = Self.controlFrames
        let wetLeft = scratch + Self.rowWetLeft * row
        let wetRight = scratch + Self.rowWetRight * row
        let channels = output.channelCount
        if channels == 1 {
            for i in 0..<n { wetLeft[i] = 0.5 * (wetLeft[i] + wetRight[i]) }
        }
        let dryInput = input.channelCount
        if !mix.isRamping && !gain.isRamping {
            let g = gain.value
            let m = mix.value
            let dryGain = g * (1 - m)
            let wetGain = g * m
            for c in 0..<channels {
                let x = input[dryInput == 1 ? 0 : c].baseAddress! + offset
                let wet = c & 1 == 0 ? wetLeft : wetRight
                let y = output[c].baseAddress! + offset
                for i in 0..<n { y[i] = x[i] * dryGain + wet[i] * wetGain }
            }
            return
        }
        let dryGains = scratch + Self.rowDryGain * row
        let wetGains = scratch + Self.rowWetGain * row
        for i in 0..<n {
            let g = gain.next()
            let m = mix.next()
            dryGains[i] = g * (1 - m)
            wetGains[i] = g * m
        }
        for c in 0..<channels {
            let x = input[dryInput == 1 ? 0 : c].baseAddress! + offset
            let wet = c & 1 == 0 ? wetLeft : wetRight
            let y = output[c].baseAddress! + offset
            for i in 0..<n { y[i] = x[i] * dryGains[i] + wet[i] * wetGains[i] }
        }
    }
}
