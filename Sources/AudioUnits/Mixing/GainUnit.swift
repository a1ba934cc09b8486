import AudioCore
import AudioGraph

/// Applies a gain in decibels, smoothed over 20 ms so changes never click. `gain`: −96 … +24 dB, default 0.
public final class GainUnit: RenderUnit {
    public let core: UnitCore
    /// `gain`: the gain in dB, −96 … +24, default 0, ramped over 20 ms.
    public static let gainSpec = ParameterSpec(
        "gain", name: "Gain", range: -96...24, unit: .decibels, default: 0)

    /// The gain ramp.
    private let smoothed = RenderThreadBound(SmoothedValue(1, rampFrames: 0))
    private let gainParameter: Parameter

    /// - Parameters:
    ///   - format: the input and output format (graph layout).
    ///   - gain: the starting gain in dB, −96 … +24; 0 by default.
    public init(format: StreamFormat, gain: Float = 0) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        gainParameter = Parameter(Self.gainSpec, owner: "gain")
        core = UnitCore(kind: "gain", inputs: [f], outputs: [f], parameters: [gainParameter])
        try gainParameter.set(gain)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        smoothed.whileStopped.rampFrames = rampFrames(for: gainParameter)
    }

    public func reset() {
        smoothed.whileStopped.reset(to: decibelsToGain(gainParameter.value))
    }

    public func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        let frames = context.frameCount
        var smoothed = self.smoothed.onRenderThread
        defer { self.smoothed.onRenderThread = smoothed }
        smoothed.setTarget(decibelsToGain(gainParameter.value))
        if !smoothed.isRamping {
            let g = smoothed.value
            for c in 0..<output.channelCount {
                let x = input[c].baseAddress!
                let y = output[c].baseAddress!
                for i in 0..<frames { y[i] = x[i] * g }
            }
            return
        }
        // Ramp: every channel follows the same gain curve.
        let start = smoothed
        for c in 0..<output.channelCount {
            var ramp = start
            let x = input[c].baseAddress!
            let y = output[c].baseAddress!
            for i in 0..<frames { y[i] = x[i] * ramp.next() }
            smoothed = ramp
        }
    }
}
