import AudioCore
import AudioGraph

/// Meters its input and passes nothing on: a graph sink (``/AudioGraph/RenderGraph/addSink(_:)``) whose level any
/// thread reads — peak and RMS since the last read (``LevelMeter``). Where a meter must not depend on a volume after
/// it (a voice meter beside a monitor mix), it taps the signal before that volume.
public final class MeterUnit: RenderUnit {
    public let core: UnitCore
    /// The meter the render thread feeds; ``read()`` reads it.
    public let meter = LevelMeter()

    /// - Parameter format: the input's format (a graph format).
    public init(format: StreamFormat) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "meter", inputs: [f], outputs: [])
    }

    /// The levels since the previous reading, and starts the next measurement: ``LevelMeter/read()``, with its thread
    /// rules (any thread but the render thread, one reader at a time).
    public func read() -> MeterReading { meter.read() }

    public func render(_ context: RenderContext) { meter.accumulate(context.input(0)) }
}
