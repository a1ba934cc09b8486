import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes the song through and hands it to the encoder from a sample time on, dropping a skip first (the same start
/// and shift as the song's recorders): frame 0 of the encoded song is frame 0 of `song.wav`. Real-time safe.
final class EncoderTap: RenderUnit {
    let core: UnitCore
    private let from = Atomic<Int64>(.max)
    private let skipRequest = Atomic<Int64>(0)
    private struct State {
        /// Set by the control thread while the device is stopped.
        var outputs: EncodedOutputs?
        var armed = false
        var toSkip: Int64 = 0
        var encodedFrames: Int64 = 0
    }
    private let state = RenderThreadBound(State())
    private let sampleRate: Double

    init(format: StreamFormat) {
        sampleRate = format.sampleRate
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "encoderTap", inputs: [f], outputs: [f])
    }

    /// Where the song goes. Control thread, while the device is stopped.
    var outputs: EncodedOutputs? {
        get { state.whileStopped.outputs }
        set { state.whileStopped.outputs = newValue }
    }

    /// Encodes from `sampleTime` on, the first `skipFrames` of it dropped. Once, before that time comes.
    func start(atSampleTime sampleTime: Int64, skipFrames: Int64) {
        skipRequest.store(max(0, skipFrames), ordering: .releasing)
        from.store(sampleTime, ordering: .releasing)
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        context.output(0).copy(from: input)
        guard let outputs = state.onRenderThread.outputs else { return }
        let start = from.load(ordering: .acquiring)
        let t0 = context.timeStamp.sampleTime
        let frames = context.frameCount
        if t0 + Int64(frames) <= start { return }
        if !state.onRenderThread.armed {
            state.onRenderThread.armed = true
            state.onRenderThread.toSkip = skipRequest.load(ordering: .acquiring)
        }
        var offset = start > t0 ? Int(start - t0) : 0
        let toSkip = state.onRenderThread.toSkip
        if toSkip > 0 {
            let skip = Int(min(toSkip, Int64(frames - offset)))
            state.onRenderThread.toSkip -= Int64(skip)
            offset += skip
        }
        guard offset < frames else { return }
        let block = input.slice(from: offset, frames: frames - offset)
        let lead = UInt64(Double(offset) / sampleRate * 1e9)
        outputs.push(block, sampleTime: state.onRenderThread.encodedFrames, hostTime: context.timeStamp.hostTime + lead)
        state.onRenderThread.encodedFrames += Int64(block.frameCount)
    }
}

