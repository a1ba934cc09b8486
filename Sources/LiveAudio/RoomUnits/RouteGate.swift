import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes the headphones' mix while the route is there; when it is lost, fades to silence within 5 ms, and when it
/// returns fades back in over 20 ms; meters what the headphones get. Real-time safe (an atomic load a cycle).
final class RouteGate: RenderUnit {
    let core: UnitCore
    /// The headphones' level, after the gate.
    let meter = LevelMeter()
    private let route: OutputRoute
    private let fadeOutFrames: Int
    private let fadeInFrames: Int
    private let gain = RenderThreadBound(SmoothedValue(1, rampFrames: 0))

    init(format: StreamFormat, route: OutputRoute) {
        self.route = route
        fadeOutFrames = Int((0.005 * format.sampleRate).rounded())
        fadeInFrames = Int((0.02 * format.sampleRate).rounded())
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "routeGate", inputs: [f], outputs: [f])
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        let target: Float = route.isRouted ? 1 : 0
        if target != gain.onRenderThread.targetValue {
            gain.onRenderThread.rampFrames = target == 0 ? fadeOutFrames : fadeInFrames
            gain.onRenderThread.setTarget(target)
        }
        output.copy(from: input, gain: &gain.onRenderThread)
        meter.accumulate(output)
    }
}

