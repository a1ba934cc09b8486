import Foundation  // tanhf
import LiveAudio

/// A unit of your own: a soft clipper, `tanh(drive · x) / tanh(drive)` — warmth at a few dB of drive, a fuzz at 20.
///
/// The shape every LiveAudio unit has:
/// - a ``UnitCore`` made in `init`, with the buses' formats (fixed for the unit's life) and the parameters;
/// - `allocateRenderResources(_:)` and `reset()` on the control thread, before the graph renders: allocate and clear
///   there;
/// - `render(_:)` on the render thread: no allocation, no lock, no logging, no I/O — it reads its parameters (atomic
///   loads) and the state only it touches, wrapped in a `RenderThreadBound` so that the type says which thread owns it.
public final class SoftClipUnit: RenderUnit {
    public let core: UnitCore
    /// Drive in dB, 0 … 30: any thread may set it, at any time; the render thread ramps to it over 20 ms.
    public let drive: Parameter
    private let state = RenderThreadBound(SmoothedValue(0, rampFrames: 0))

    public init(format: StreamFormat, driveDecibels: Float = 6) throws(AudioError) {
        drive = Parameter(
            ParameterSpec("drive", name: "Drive", range: 0...30, unit: .decibels, default: 6), owner: "softClip")
        // One input bus and one output bus, both in the graph's Float32 layout with the format's channel count.
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "softClip", inputs: [f], outputs: [f], parameters: [drive])
        try drive.set(driveDecibels)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        state.whileStopped.rampFrames = rampFrames(for: drive)
    }

    public func reset() {
        state.whileStopped.reset(to: drive.value)
    }

    public func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        var smoothed = state.onRenderThread
        smoothed.setTarget(drive.value)
        for i in 0..<context.frameCount {
            let gain = decibelsToGain(smoothed.next())
            let normal = 1 / tanhf(gain)
            for c in 0..<output.channelCount {
                output[c][i] = tanhf(gain * input[c][i]) * normal
            }
        }
        state.onRenderThread = smoothed
    }
}
