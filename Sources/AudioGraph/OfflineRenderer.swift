import AudioCore
import Synchronization

/// Pulls a graph as fast as the CPU allows, with no device: the GenericOutput role.
///
/// Each call renders the next frames; sample time advances by what was rendered. Any block size from 0 to the
/// graph's maximum may be asked for, and for a deterministic graph the audio does not depend on the block sizes.
/// File sources are read ahead before each cycle, never inside the render: on the calling thread, or — with a
/// ``ReadAheadWorker`` — on the worker's thread while the caller renders.
///
/// Thread safety: one thread at a time (it may be handed to another thread, e.g. a render thread); that thread is
/// the graph's render thread while it renders.
public final class OfflineRenderer: Sendable {
    /// The graph this renderer pulls; it must be initialized before ``render(frames:)``.
    public let graph: RenderGraph
    /// Frames rendered so far: the sample time of the next cycle.
    public var sampleTime: Int64 { rendered.load(ordering: .relaxed) }
    private let rendered = Atomic<Int64>(0)

    /// Reads file sources ahead on a thread of its own when set; the caller's thread otherwise.
    public let readAhead: ReadAheadWorker?

    /// Creates a renderer for `graph`, starting at sample time 0.
    ///
    /// Tells the graph's units there is no deadline (``RenderGraph/willRender(_:)``): units that work on
    /// threads of their own wait for them, and the output does not depend on how fast they were.
    /// - Parameters:
    ///   - graph: the graph to pull.
    ///   - readAhead: a worker serving the graph's file sources (see ``RenderGraph/readingAheadUnits``),
    ///     or nil to read on the rendering thread.
    public init(graph: RenderGraph, readAhead: ReadAheadWorker? = nil) {
        self.graph = graph
        self.readAhead = readAhead
        graph.willRender(.offline)
    }

    /// Renders the next `frames` frames and returns them; the view is valid until the next call. Does not
    /// allocate.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when the graph is not initialized, `.tooManyFrames`
    ///   above its maximum, or a file source's read error.
    public func render(frames: Int) throws(AudioError) -> BufferView {
        guard frames >= 0, frames <= graph.maximumFrames else {
            throw AudioError(
                .tooManyFrames, "cannot render \(frames) frames in one cycle (0 … \(graph.maximumFrames))")
        }
        guard graph.canRender else {
            throw AudioError(.invalidState, "cannot render: initialize the graph first")
        }
        if let readAhead {
            try readAhead.waitUntilReady(frames: frames)
        } else {
            try graph.prefetch(frames: frames)
        }
        guard let view = graph.renderCycle(frames: frames, timeStamp: RenderTimeStamp(sampleTime: rendered.load(ordering: .relaxed))) else {
            throw AudioError(.invalidState, "cannot render: the graph was uninitialized")
        }
        readAhead?.requestIfNeeded()
        rendered.add(Int64(frames), ordering: .relaxed)
        return view
    }

    /// Renders `destination.frameCount` frames into `destination` (the graph's channel count), in cycles of at
    /// most `blockFrames` (the graph's maximum by default).
    public func render(into destination: BufferView, blockFrames: Int? = nil) throws(AudioError) {
        let block = min(blockFrames ?? graph.maximumFrames, graph.maximumFrames)
        guard block > 0 else { throw AudioError(.tooManyFrames, "blockFrames must be at least 1") }
        var done = 0
        while done < destination.frameCount {
            let n = min(block, destination.frameCount - done)
            let out = try render(frames: n)
            destination.slice(from: done, frames: n).copy(from: out)
            done += n
        }
    }
}
