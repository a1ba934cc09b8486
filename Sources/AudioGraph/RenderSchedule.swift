import AudioCore

/// Where an input bus reads from: a buffer's storage, its channel stride (0 for a mono source feeding more
/// channels) and the channel count the consumer sees.
struct BusSource {
    var base: UnsafeMutablePointer<Float>
    var stride: Int
    var channels: Int

    @inline(__always)
    func view(_ frames: Int) -> BufferView {
        BufferView(base: base, channelStride: stride, channelCount: channels, frameCount: frames)
    }
}

/// One entry of a compiled schedule: run a user callback into its buffer, or render a unit.
struct ScheduleStep {
    unowned(unsafe) let unit: RenderUnit?
    unowned(unsafe) let callback: CallbackInput?
    let inputStart: Int
    let inputCount: Int
    let outputStart: Int
    let outputCount: Int
}

/// A graph compiled for the render thread: a flat list of steps in dependency order (every node reachable from
/// the output, each once, after all of its inputs), with every pointer the render thread needs resolved.
///
/// Built and freed on the control thread; immutable once built, so the render thread reads it without locks.
final class RenderSchedule: @unchecked Sendable {
    /// Keeps the nodes and callbacks the steps point at alive for as long as the schedule is.
    private let retainedNodes: [NodeRecord]
    private let retainedCallbacks: [CallbackInput]
    let steps: UnsafeMutableBufferPointer<ScheduleStep>
    let inputSources: UnsafeMutableBufferPointer<BusSource>
    let outputSources: UnsafeMutableBufferPointer<BusSource>
    let inputViews: UnsafeMutableBufferPointer<BufferView>
    let outputViews: UnsafeMutableBufferPointer<BufferView>
    let output: BusSource
    /// Units that read ahead (files), as unowned references: iterated by index, never allocating.
    let prefetchers: UnsafeMutableBufferPointer<Unmanaged<RenderUnit>>

    init(
        nodes: [NodeRecord], callbacks: [CallbackInput], steps: [ScheduleStep], inputs: [BusSource],
        outputs: [BusSource], output: BusSource, silence: PCMBuffer
    ) {
        retainedNodes = nodes
        retainedCallbacks = callbacks
        self.steps = .allocate(capacity: steps.count)
        _ = self.steps.initialize(from: steps)
        inputSources = .allocate(capacity: inputs.count)
        _ = inputSources.initialize(from: inputs)
        outputSources = .allocate(capacity: outputs.count)
        _ = outputSources.initialize(from: outputs)
        let blank = BufferView(base: silence.storage, channelStride: 0, channelCount: 1, frameCount: 0)
        inputViews = .allocate(capacity: inputs.count)
        inputViews.initialize(repeating: blank)
        outputViews = .allocate(capacity: outputs.count)
        outputViews.initialize(repeating: blank)
        self.output = output
        let reading = nodes.filter(\.unit.prefetchesAhead).map { Unmanaged.passUnretained($0.unit) }
        prefetchers = .allocate(capacity: reading.count)
        _ = prefetchers.initialize(from: reading)
    }

    deinit {
        steps.deallocate()
        inputSources.deallocate()
        outputSources.deallocate()
        inputViews.deallocate()
        outputViews.deallocate()
        prefetchers.deallocate()
    }

    /// Offline caller: lets every reading-ahead unit fetch `frames` frames.
    func prefetch(frames: Int) throws(AudioError) {
        for i in 0..<prefetchers.count {
            try prefetchers[i].takeUnretainedValue().prefetch(frames: frames)
        }
    }

    /// Runs every step for `frames` frames and returns the graph output. Render thread.
    @inline(__always)
    func run(frames: Int, timeStamp: RenderTimeStamp) -> BufferView {
        for s in 0..<steps.count {
            let step = steps[s]
            for i in step.inputStart..<(step.inputStart + step.inputCount) {
                inputViews[i] = inputSources[i].view(frames)
            }
            for o in step.outputStart..<(step.outputStart + step.outputCount) {
                outputViews[o] = outputSources[o].view(frames)
            }
            if let callback = step.callback {
                callback.fill(outputViews[step.outputStart], timeStamp: timeStamp)
                continue
            }
            let unit = step.unit.unsafelyUnwrapped
            let context = RenderContext(
                frameCount: frames, timeStamp: timeStamp,
                inputs: UnsafeBufferPointer(rebasing: inputViews[step.inputStart..<(step.inputStart + step.inputCount)]),
                outputs: UnsafeBufferPointer(
                    rebasing: outputViews[step.outputStart..<(step.outputStart + step.outputCount)]))
            unit.renderWithBypass(context)
        }
        return output.view(frames)
    }
}
