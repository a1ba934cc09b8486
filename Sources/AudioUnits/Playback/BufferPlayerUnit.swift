import AudioCore
import AudioGraph
import Synchronization

/// Plays PCM held in memory from its start, once or looping (`loop` property). After the end of a non-looping
/// buffer it outputs silence and reports ``hasFinished``. The output has the buffer's channel count.
public final class BufferPlayerUnit: RenderUnit, FiniteSource, @unchecked Sendable {
    // Unchecked Sendable: RenderUnit subclass; `position` the render thread's; loop and finished flags atomic; `buffer` never written
    private let buffer: PCMBuffer
    private let frames: Int
    private var position = 0
    private let loopFlag: Atomic<Bool>
    private let finished = Atomic<Bool>(false)

    /// - Parameters:
    ///   - buffer: the audio; its ``PCMBuffer/frameLength`` frames play. The player keeps it; do not change it
    ///     while the player is in a graph.
    ///   - sampleRate: the rate the audio was recorded at (must be the graph's).
    public init(buffer: PCMBuffer, sampleRate: Double, loop: Bool = false) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: sampleRate, channelCount: buffer.channelCount)
        self.buffer = buffer
        frames = buffer.frameLength
        loopFlag = Atomic(loop)
        super.init(kind: "player", inputs: [], outputs: [f])
    }

    /// Whether playback wraps to the start at the end. Any thread.
    public var loops: Bool {
        get { loopFlag.load(ordering: .relaxed) }
        set { loopFlag.store(newValue, ordering: .relaxed) }
    }

    public var totalFrames: Int64? { loops ? nil : Int64(frames) }
    public var hasFinished: Bool { finished.load(ordering: .acquiring) }

    override public var propertyNames: [String] { super.propertyNames + ["loop", "frameCount", "hasFinished"] }

    override public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "loop": .bool(loops)
        case "frameCount": .int(frames)
        case "hasFinished": .bool(hasFinished)
        default: try super.property(name)
        }
    }

    override public func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError) {
        guard name == "loop" else { return try super.setProperty(name, value) }
        guard case .bool(let on) = value else {
            throw AudioError(.invalidProperty, "player: property 'loop' takes a bool, got \(value)")
        }
        loops = on
    }

    override public func reset() {
        position = 0
        finished.store(false, ordering: .releasing)
    }

    override public func render(_ context: RenderContext) {
        let output = context.output(0)
        let source = buffer.view(frames: frames)
        let loop = loops
        var done = 0
        var position = self.position
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
        self.position = position
    }
}
