import AudioCore
import AudioGraph

/// White noise, uniformly distributed in `−amplitude … amplitude` (RMS `amplitude / √3`), from a seeded
/// generator: the same seed gives the same samples, whatever the block sizes. Each channel gets its own samples.
/// `amplitude`: linear, 0 … 1, default 0.1, smoothed.
public final class NoiseUnit: RenderUnit {
    public let core: UnitCore
    /// The generator's seed (1 by default); ``reset()`` starts the sequence over from it.
    public let seed: UInt64
    private let amplitude: Parameter
    /// The generator and the amplitude ramp: the render thread's.
    private let state: RenderThreadBound<RenderState>

    private struct RenderState {
        var smoothedAmplitude = SmoothedValue(0.1, rampFrames: 0)
        var generator: Xoshiro256
    }

    /// Makes a noise source with no inputs and one output.
    ///
    /// - Parameters:
    ///   - format: The output format; only its rate and channel count are used.
    ///   - amplitude: The peak amplitude, linear, 0 … 1; 0.1 by default.
    ///   - seed: The generator's seed; 1 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry, `.invalidParameter`
    ///   for an amplitude outside 0 … 1.
    public init(format: StreamFormat, amplitude: Float = 0.1, seed: UInt64 = 1) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        self.seed = seed
        state = RenderThreadBound(RenderState(generator: Xoshiro256(seed: seed)))
        self.amplitude = Parameter(
            ParameterSpec("amplitude", name: "Amplitude", range: 0...1, unit: .linearGain, default: 0.1), owner: "noise")
        core = UnitCore(kind: "noise", inputs: [], outputs: [f], parameters: [self.amplitude])
        try self.amplitude.set(amplitude)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        state.whileStopped.smoothedAmplitude.rampFrames = rampFrames(for: amplitude)
    }

    public func reset() {
        state.whileStopped.generator = Xoshiro256(seed: seed)
        state.whileStopped.smoothedAmplitude.reset(to: amplitude.value)
    }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        name == "seed" ? .int(Int(truncatingIfNeeded: seed)) : try commonProperty(name)
    }

    public var propertyNames: [String] { commonPropertyNames + ["seed"] }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        let channels = output.channelCount
        var g = state.onRenderThread.generator
        var a = state.onRenderThread.smoothedAmplitude
        a.setTarget(amplitude.value)
        for i in 0..<context.frameCount {
            let gain = a.next()
            for c in 0..<channels {
                output[c][i] = gain * g.nextBipolar()
            }
        }
        state.onRenderThread.generator = g
        state.onRenderThread.smoothedAmplitude = a
    }
}

/// xoshiro256+ (Blackman & Vigna), seeded through SplitMix64: fast, and good enough in its high bits for audio.
struct Xoshiro256: Sendable {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    init(seed: UInt64) {
        var x = seed
        func splitMix() -> UInt64 {
            x &+= 0x9E37_79B9_7F4A_7C15
            var z = x
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        s = (splitMix(), splitMix(), splitMix(), splitMix())
    }

    @inline(__always)
    mutating func next() -> UInt64 {
        let result = s.0 &+ s.3
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = (s.3 << 45) | (s.3 >> 19)
        return result
    }

    /// Uniform in [−1, 1), from the top 24 bits.
    @inline(__always)
    mutating func nextBipolar() -> Float {
        Float(Int32(truncatingIfNeeded: next() >> 40) - (1 << 23)) * (1 / Float(1 << 23))
    }
}
