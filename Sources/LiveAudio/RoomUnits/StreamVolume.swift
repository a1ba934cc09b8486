import AudioCore
import AudioGraph
import Synchronization

/// A live stream's volume and mute: its input times the volume (0 while muted), a change ramping over the cycle it
/// is first seen in. Any thread sets them; real-time safe (two atomic loads a cycle).
final class StreamVolume: RenderUnit {
    let core: UnitCore
    let muted = Atomic<Bool>(false)
    let volumeBits = Atomic<UInt32>(Float(1).bitPattern)
    private let gain = RenderThreadBound(SmoothedValue(1, rampFrames: 0))

    init(format: StreamFormat) {
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "streamVolume", inputs: [f], outputs: [f])
    }

    /// The linear volume, 0 … 4.
    var volume: Float {
        get { Float(bitPattern: volumeBits.load(ordering: .relaxed)) }
        set { volumeBits.store(min(4, max(0, newValue.isFinite ? newValue : 1)).bitPattern, ordering: .relaxed) }
    }

    func render(_ context: RenderContext) {
        let target: Float = muted.load(ordering: .relaxed) ? 0 : Float(bitPattern: volumeBits.load(ordering: .relaxed))
        // A new volume ramps over this cycle.
        gain.onRenderThread.rampFrames = context.frameCount
        gain.onRenderThread.setTarget(target)
        context.output(0).copy(from: context.input(0), gain: &gain.onRenderThread)
    }
}
