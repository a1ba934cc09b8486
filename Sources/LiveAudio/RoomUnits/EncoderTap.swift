import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes its input through and hands it to the encoder from a sample time on (a room's song: its start moved by the
/// song mix's shift, as the song's recorders' are — ``Alignment`` — so frame 0 of the encoded song is frame 0 of
/// `song.wav`; a live stream's: its first frame). What it hands on is placed on the graph's timeline — frame t at
/// t − start — so a gap in the sample time (a device reopened after a loss) is a gap the encoder fills with silence,
/// and the stream's timestamps stay on the clock. Real-time safe.
final class EncoderTap: RenderUnit {
    let core: UnitCore
    private let from = Atomic<Int64>(.max)
    private struct State {
        /// Set by the control thread while the device is stopped.
        var outputs: EncodedOutputs?
    }
    private let state = RenderThreadBound(State())
    private let sampleRate: Double

    init(format: StreamFormat) {
        sampleRate = format.sampleRate
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "encoderTap", inputs: [f], outputs: [f])
    }

    /// Where the input goes. Control thread, while the device is stopped.
    var outputs: EncodedOutputs? {
        get { state.whileStopped.outputs }
        set { state.whileStopped.outputs = newValue }
    }

    /// Encodes from `sampleTime` on: its frame 0 is the first encoded. Once, before that time comes.
    func start(atSampleTime sampleTime: Int64) {
        from.store(sampleTime, ordering: .releasing)
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        context.output(0).copy(from: input)
        guard let outputs = state.onRenderThread.outputs else { return }
        let first = from.load(ordering: .acquiring)
        let t0 = context.timeStamp.sampleTime
        let frames = context.frameCount
        if t0 + Int64(frames) <= first { return }
        let offset = Int(max(0, min(Int64(frames), first - t0)))
        guard offset < frames else { return }
        let block = input.slice(from: offset, frames: frames - offset)
        let lead = UInt64(Double(offset) / sampleRate * 1e9)
        outputs.push(block, sampleTime: t0 + Int64(offset) - first, hostTime: context.timeStamp.hostTime + lead)
    }
}
