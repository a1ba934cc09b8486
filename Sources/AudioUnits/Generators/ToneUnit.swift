import AudioCore
import AudioGraph

#if canImport(Glibc)
import Glibc
#endif

/// A sine generator: `frequency` (Hz, 0 … Nyquist, default 440) and `amplitude` (linear, 0 … 1, default 0.5),
/// both smoothed. Every output channel carries the same signal; sample n is `amplitude · sin(2π · f · n / fs)`.
public final class ToneUnit: RenderUnit {
    public let core: UnitCore
    private let frequency: Parameter
    private let amplitude: Parameter
    /// The phase and the ramps: the render thread's.
    private let state = RenderThreadBound(RenderState())
    private let sampleRate: Double

    private struct RenderState {
        var smoothedFrequency = SmoothedValue(440, rampFrames: 0)
        var smoothedAmplitude = SmoothedValue(0.5, rampFrames: 0)
        var phase: Double = 0  // in cycles, 0 ..< 1
    }

    /// Makes a sine source with no inputs and one output, its phase at 0.
    ///
    /// - Parameters:
    ///   - format: The output format; only its rate and channel count are used.
    ///   - frequency: The frequency in Hz, 0 … the Nyquist frequency; 440 by default.
    ///   - amplitude: The peak amplitude, linear, 0 … 1; 0.5 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry, `.invalidParameter`
    ///   for a frequency or amplitude outside its range.
    public init(format: StreamFormat, frequency: Float = 440, amplitude: Float = 0.5) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let nyquist = Float(format.sampleRate / 2)
        sampleRate = format.sampleRate
        self.frequency = Parameter(
            ParameterSpec("frequency", name: "Frequency", range: 0...nyquist, unit: .hertz, default: min(440, nyquist)),
            owner: "tone")
        self.amplitude = Parameter(
            ParameterSpec("amplitude", name: "Amplitude", range: 0...1, unit: .linearGain, default: 0.5), owner: "tone")
        core = UnitCore(kind: "tone", inputs: [], outputs: [f], parameters: [self.frequency, self.amplitude])
        try self.frequency.set(frequency)
        try self.amplitude.set(amplitude)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        state.whileStopped.smoothedFrequency.rampFrames = rampFrames(for: frequency)
        state.whileStopped.smoothedAmplitude.rampFrames = rampFrames(for: amplitude)
    }

    public func reset() {
        state.whileStopped.phase = 0
        state.whileStopped.smoothedFrequency.reset(to: frequency.value)
        state.whileStopped.smoothedAmplitude.reset(to: amplitude.value)
    }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        let frames = context.frameCount
        var f = state.onRenderThread.smoothedFrequency
        var a = state.onRenderThread.smoothedAmplitude
        f.setTarget(frequency.value)
        a.setTarget(amplitude.value)
        var phase = state.onRenderThread.phase
        let inverseRate = 1 / sampleRate
        let y = output[0].baseAddress!
        for i in 0..<frames {
            y[i] = a.next() * Float(sin(2 * Double.pi * phase))
            phase += Double(f.next()) * inverseRate
            if phase >= 1 { phase -= 1 }
        }
        for c in 1..<max(output.channelCount, 1) {
            output[c].baseAddress!.update(from: y, count: frames)
        }
        state.onRenderThread.phase = phase
        state.onRenderThread.smoothedFrequency = f
        state.onRenderThread.smoothedAmplitude = a
    }
}
