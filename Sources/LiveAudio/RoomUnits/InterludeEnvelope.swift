import AudioCore
import AudioGraph
import Synchronization

/// The interlude's level over its life, on the room's timeline: silent before the interlude's first frame, it rises
/// from there to its level over ``fadeInFrames``, and once told the frame by which it must be silent (the next
/// take's first), falls linearly from where it is to silence by then — over ``fadeOutFrames``, or from the first
/// frame it renders after being told when that is later. Told to play on (the take it made way for was dropped
/// before it began), it rises again from where it is. It sits in the room's graph between the interlude's player
/// and the accompaniment mixer, so its frames are the device's: silent from the take's first frame to the sample,
/// a device's gap or a late worker notwithstanding. Real-time safe (two atomic loads a cycle).
final class InterludeEnvelope: RenderUnit {
    let core: UnitCore
    /// The level played at, linear.
    let level: Float
    let fadeInFrames: Int64
    let fadeOutFrames: Int64
    /// The room's frame the interlude begins at (.max: not placed yet).
    private let beginsAt = Atomic<Int64>(.max)
    /// The room's frame by which the interlude is silent (.max: none).
    private let silentFrom = Atomic<Int64>(.max)
    /// The render thread's: the gain at the last frame, the end it follows, and where its fade-out began and from
    /// what.
    private struct Envelope {
        var gain: Float = 0
        var end = Int64.max
        var fadeStart = Int64.max
        var fadeStartGain: Float = 0
    }
    private let envelope = RenderThreadBound(Envelope())

    init(format: StreamFormat, level: Float, fadeIn: Double = 1, fadeOut: Double = 1) {
        self.level = level
        fadeInFrames = max(1, Int64((fadeIn * format.sampleRate).rounded()))
        fadeOutFrames = max(1, Int64((fadeOut * format.sampleRate).rounded()))
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "interludeEnvelope", inputs: [f], outputs: [f])
    }

    /// The interlude begins at the room's frame `frame` (control thread, before it joins the graph).
    func begin(at frame: Int64) { beginsAt.store(frame, ordering: .releasing) }

    /// Silent from the room's frame `frame` on. Control thread.
    func silence(from frame: Int64) { silentFrom.store(frame, ordering: .relaxed) }

    /// Plays on: a fade-out under way turns back up. Control thread.
    func playOn() { silentFrom.store(.max, ordering: .relaxed) }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        let first = context.timeStamp.sampleTime
        let begins = beginsAt.load(ordering: .acquiring)
        var e = envelope.onRenderThread
        let end = silentFrom.load(ordering: .relaxed)
        if end != e.end {
            e.end = end
            e.fadeStart = .max
        }
        let rise = level / Float(fadeInFrames)
        let channels = output.channelCount
        for i in 0..<context.frameCount {
            let t = first + Int64(i)
            let g: Float
            if t < begins || t >= e.end {
                g = 0
            } else if e.end != .max, t >= e.end - fadeOutFrames {
                if e.fadeStart == .max {
                    e.fadeStart = t
                    e.fadeStartGain = e.gain
                }
                g = e.fadeStartGain * Float(Double(e.end - t) / Double(e.end - e.fadeStart))
            } else {
                g = min(level, e.gain + rise)
            }
            e.gain = g
            for c in 0..<channels {
                output[c].baseAddress![i] = input[input.channelCount == 1 ? 0 : c].baseAddress![i] * g
            }
        }
        envelope.onRenderThread = e
    }
}
