import AudioCore
import AudioGraph
import Synchronization

/// Passes its input through and adds a fixed signal to every channel from a sample time it is armed with: the room's
/// phone calibration chirps (``PhoneCalibration``), played through the room's output once per calibration.
///
/// Thread safety: ``render(_:)`` on the render thread; ``arm(at:)`` from the control side (an atomic start time).
final class SignalInjector: RenderUnit {
    let core: UnitCore
    private let signal: PCMBuffer
    private let start = Atomic<Int64>(.max)

    /// Adds `signal` (mono, at `format`'s rate) once armed.
    init(format: StreamFormat, signal: [Float]) {
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "signalInjector", inputs: [f], outputs: [f])
        self.signal = PCMBuffer(channels: [signal])
    }

    /// The signal's length in frames.
    var length: Int { signal.frameLength }

    /// Plays the signal from sample time `time` (a time already passed plays nothing).
    func arm(at time: Int64) { start.store(time, ordering: .releasing) }

    func render(_ context: RenderContext) {
        let output = context.output(0)
        output.copy(from: context.input(0))
        let from = start.load(ordering: .acquiring)
        let t = context.timeStamp.sampleTime
        let n = Int64(context.frameCount)
        guard from != .max, t + n > from, t < from + Int64(signal.frameLength) else { return }
        let first = Int(max(t, from) - t), last = Int(min(t + n, from + Int64(signal.frameLength)) - t)
        let source = signal.storage
        for c in 0..<output.channelCount {
            let channel = output[c]
            for i in first..<last { channel[i] += source[Int(t - from) + i] }
        }
    }
}
