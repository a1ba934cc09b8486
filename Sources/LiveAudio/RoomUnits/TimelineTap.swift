import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes its input through and keeps the sample time after the last cycle: the graph's timeline, read by the control
/// thread to schedule on it.
final class TimelineTap: RenderUnit {
    let core: UnitCore
    private let end = Atomic<Int64>(0)

    init(format: StreamFormat) {
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "timeline", inputs: [f], outputs: [f])
    }

    var sampleTime: Int64 { end.load(ordering: .acquiring) }

    func render(_ context: RenderContext) {
        context.output(0).copy(from: context.input(0))
        end.store(context.timeStamp.sampleTime + Int64(context.frameCount), ordering: .releasing)
    }
}

