import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// The room's policy for the voice in the monitor when the output moves off headphones (``KaraokeRoom/Configuration/offHeadphones``):
/// once the sound server has said the output is headphones (PipeWire's form factor), an output that is no longer
/// headphones — a speaker, a device that does not say — takes the voice out of what it plays (a 5 ms fade), so the
/// singer's voice does not come out of a speaker by surprise, and back to headphones brings it back (20 ms). While the
/// route is lost nothing changes (the route gate silences everything). An output that never was headphones (a room
/// that started on speakers, or a backend that does not say) keeps the voice: that was chosen. Real-time safe (two
/// atomic loads a cycle).
final class HeadphonesGate: RenderUnit {
    let core: UnitCore
    private let route: OutputRoute
    private let mutes: Bool
    private let fadeOutFrames: Int
    private let fadeInFrames: Int
    private struct State {
        var gain = SmoothedValue(1, rampFrames: 0)
        var wasHeadphones = false
    }
    private let state = RenderThreadBound(State())
    /// True while the gate holds the voice out.
    let isClosed = Atomic<Bool>(false)

    init(format: StreamFormat, route: OutputRoute, policy: KaraokeRoom.OffHeadphones) {
        self.route = route
        mutes = policy == .muteVoice
        fadeOutFrames = Int((0.005 * format.sampleRate).rounded())
        fadeInFrames = Int((0.02 * format.sampleRate).rounded())
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "headphonesGate", inputs: [f], outputs: [f])
    }

    func render(_ context: RenderContext) {
        let output = context.output(0)
        var s = state.onRenderThread
        if route.isRouted {
            let headphones = route.isHeadphones
            if headphones == true { s.wasHeadphones = true }
            let closed = mutes && s.wasHeadphones && headphones != true
            let target: Float = closed ? 0 : 1
            if target != s.gain.targetValue {
                s.gain.rampFrames = closed ? fadeOutFrames : fadeInFrames
                s.gain.setTarget(target)
                isClosed.store(closed, ordering: .relaxed)
            }
        }
        output.copy(from: context.input(0), gain: &s.gain)
        state.onRenderThread = s
    }
}
