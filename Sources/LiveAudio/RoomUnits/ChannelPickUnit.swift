import AudioCore
import AudioGraph

/// Passes `count` channels of its input from channel `first` on: one voice's channels of a microphone that carries
/// several (the room's voices are the first channels of its input device). Real-time safe: a copy.
final class ChannelPickUnit: RenderUnit {
    let core: UnitCore
    /// The first input channel passed.
    let first: Int

    /// - Parameters:
    ///   - sampleRate: the rate of both buses.
    ///   - inputChannels: the microphone's channels.
    ///   - first: the first channel passed (0-based).
    ///   - count: the channels passed.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` when the channels passed are not all in the input.
    init(sampleRate: Double, inputChannels: Int, first: Int, count: Int) throws(AudioError) {
        guard first >= 0, count >= 1, first + count <= inputChannels else {
            throw AudioError(.invalidParameter, "channels \(first + 1)…\(first + count) of a \(inputChannels)-channel input do not exist")
        }
        self.first = first
        core = UnitCore(
            kind: "channelPick",
            inputs: [try .graph(sampleRate: sampleRate, channelCount: inputChannels)],
            outputs: [try .graph(sampleRate: sampleRate, channelCount: count)])
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        output.copy(
            from: BufferView(
                base: input.base + first * input.channelStride, channelStride: input.channelStride,
                channelCount: output.channelCount, frameCount: input.frameCount))
    }
}
