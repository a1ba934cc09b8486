import AudioCore
import AudioGraph
import Synchronization

/// The interlude's level over its life, on its own timeline (frame 0 is its first frame in the room): it fades in
/// from silence over ``fadeInFrames``, plays at its level, and once told the frame by which it must be silent (the
/// next take's first), fades out to silence by then — over ``fadeOutFrames``, or from the first frame it renders
/// after being told when that is later. Rendered ahead with the interlude's player on its worker, so the fade lands
/// on the sample whatever the control side's timing; a pure function of the frame but for the fade-out's start.
/// Real-time safe (one atomic load a cycle).
final class InterludeEnvelope: RenderUnit {
    let core: UnitCore
    /// The level played at, linear.
    let level: Float
    let fadeInFrames: Int64
    let fadeOutFrames: Int64
    /// The frame by which the interlude is silent (.max: not known yet).
    private let silentFrom = Atomic<Int64>(.max)
    /// The fade-out the worker follows: the end it was told and the frame it began at.
    private struct FadeOut {
        var end = Int64.max
        var start = Int64.max
    }
    private let fade = RenderThreadBound(FadeOut())

    init(format: StreamFormat, level: Float, fadeIn: Double = 1, fadeOut: Double = 1) {
        self.level = level
        fadeInFrames = max(1, Int64((fadeIn * format.sampleRate).rounded()))
        fadeOutFrames = max(1, Int64((fadeOut * format.sampleRate).rounded()))
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "interludeEnvelope", inputs: [f], outputs: [f])
    }

    /// Silent from `frame` of the interlude's timeline on (control thread, once).
    func silence(from frame: Int64) { silentFrom.store(max(0, frame), ordering: .relaxed) }

    /// The level at `frame` before any fade-out.
    @inline(__always)
    private func faded(in frame: Int64) -> Float { level * Float(min(1, Double(max(0, frame)) / Double(fadeInFrames))) }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        let first = context.timeStamp.sampleTime
        let end = silentFrom.load(ordering: .relaxed)
        if end != fade.onRenderThread.end {
            fade.onRenderThread.end = end
            fade.onRenderThread.start = end == .max ? .max : min(end, max(first, end - fadeOutFrames))
        }
        let f = fade.onRenderThread
        let startLevel = f.start == .max ? 0 : faded(in: f.start)
        for c in 0..<output.channelCount {
            let x = input[input.channelCount == 1 ? 0 : c].baseAddress!
            let y = output[c].baseAddress!
            for i in 0..<context.frameCount {
                let t = first + Int64(i)
                let g: Float
                if t < f.start {
                    g = faded(in: t)
                } else if t >= f.end {
                    g = 0
                } else {
                    g = startLevel * Float(Double(f.end - t) / Double(f.end - f.start))
                }
                y[i] = x[i] * g
            }
        }
    }
}
