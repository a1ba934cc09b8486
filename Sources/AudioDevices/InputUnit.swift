import AudioCore
import AudioGraph

/// The microphone as a graph node: its output is the I/O unit's capture (bus 1) of the current cycle, in the
/// graph's Float32 layout. Silence when there is no capture this cycle. Get it from ``IOUnit/inputUnit()``.
public final class InputUnit: RenderUnit {
    public let core: UnitCore
    /// This cycle's capture: set by the I/O unit (or ``feeding(_:_:)``) on the render thread for the duration of one
    /// cycle.
    let current = RenderThreadBound<BufferView?>(nil)

    /// A microphone node of `channelCount` channels at `sampleRate`; an ``IOUnit`` feeds it once given it.
    public init(sampleRate: Double, channelCount: Int) throws(AudioError) {
        try core = UnitCore(kind: "input", inputs: [], outputs: [.graph(sampleRate: sampleRate, channelCount: channelCount)])
    }

    /// Makes `buffer` this node's output for the cycles `body` renders: how audio that does not come from an
    /// I/O unit (a file paced in real time, a capture processed elsewhere) reaches a graph's `input` node.
    /// Real-time safe; call it on the thread that renders the graph.
    public func feeding<R>(_ buffer: BufferView, _ body: () throws(AudioError) -> R) throws(AudioError) -> R {
        current.onRenderThread = buffer
        defer { current.onRenderThread = nil }
        return try body()
    }

    public func render(_ context: RenderContext) {
        let out = context.output(0)
        if let current = current.onRenderThread, current.frameCount >= context.frameCount {
            out.copy(from: current.prefix(context.frameCount).upmixed(to: out.channelCount))
        } else {
            out.clear()
        }
    }
}
