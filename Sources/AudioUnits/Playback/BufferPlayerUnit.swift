import AudioCore
import AudioGraph
import Synchronization

/// Plays PCM held in memory from its start, once or looping (`loop` property). After the end of a non-looping
/// buffer it outputs silence and reports ``hasFinished``. The output has the buffer's channel count.
public final class BufferPlayerUnit: RenderUnit, FiniteSource {
    public let core: UnitCore
    /// Never written by the unit.
    private let buffer: PCMBuffer
    private let frames: Int
    /// The next frame to play: the render thread's.
    private let position = RenderThreadBound<Int>(0)
    private let loopFlag: Atomic<Bool>
    private let finished = Atomic<Bool>(false)

    /// - Parameters:
    ///   - buffer: the audio; its ``/AudioCore/PCMBuffer/frameLength`` frames play. The player keeps it; do not
    ///     change it while the player is in a graph.
    ///   - sampleRate: the rate the audio was recorded at (must be the graph's).
    ///   - loop: whether playback wraps to the start at the end (``loops``); false by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a rate or channel count the graph cannot carry.
    public init(buffer: PCMBuffer, sampleRate: Double, loop: Bool = false) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: sampleRate, channelCount: buffer.channelCount)
        self.buffer = buffer
        frames = buffer.frameLength
        loopFlag = Atomic(loop)
        core = UnitCore(kind: "player", inputs: [], outputs: [f])
    }

    /// Whether playback wraps to the start at the end. Any thread.
    public var loops: Bool {
        get { loopFlag.load(ordering: .relaxed) }
        set { loopFlag.store(newValue, ordering: .relaxed) }
    }

    public var totalFrames: Int64? { loops ? nil : Int64(frames) }
    public var hasFinished: Bool { finished.load(ordering: .acquiring) }

    public var propertyNames: [String] { commonPropertyNames + ["loop", "frameCount", "hasFinished"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "loop": .bool(loops)
        case "frameCount": .int(frames)
        case "hasFinished": .bool(hasFinished)
        default: try commonProperty(name)
        }
    }

    public func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError) {
        guard name == "loop" else { return try setCommonProperty(name, value) }
        guard case .bool(let on) = value else {
            throw AudioError(.invalidProperty, "player: property 'loop' takes a bool, got \(value)")
        }
        loops = on
    }

    public func reset() {
        position.whileStopped = 0
        finished.store(false, ordering: .releasing)
    }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        let source = buffer.view(frames: frames)
        let loop = loops
        var done = 0
        var position = self.position.onRenderThread
        while done < context.frameCount {
            if position >= frames {
                if loop && frames > 0 {
                    position = 0
                } else {
                    output.slice(from: done, frames: context.frameCount - done).clear()
                    if !finished.load(ordering: .relaxed) { finished.store(true, ordering: .releasing) }
                    break
                }
            }
            let n = min(context.frameCount - done, frames - position)
            output.slice(from: done, frames: n).copy(from: source.slice(from: position, frames: n))
            position += n
            done += n
        }
        if !loop && position >= frames && !finished.load(ordering: .relaxed) {
            finished.store(true, ordering: .releasing)
        }
        self.position.onRenderThread = position
    }
}
