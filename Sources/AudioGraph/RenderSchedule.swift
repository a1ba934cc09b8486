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

/// One entry of a compiled schedule: run a user callback into its buffer, or render a node's unit. The node or
/// callback is held unretained: the schedule keeps them alive (``RenderSchedule``'s retained nodes and callbacks),
/// and the render thread then takes no reference count on them. (A node, not its unit: a unit is a protocol
/// existential, which `Unmanaged` cannot hold; a node's `unit` is a constant, read from the guaranteed node
/// without a reference count.)
struct ScheduleStep {
    let node: Unmanaged<NodeRecord>?
    let callback: Unmanaged<CallbackInput>?
    let inputStart: Int
    let inputCount: Int
    let outputStart: Int
    let outputCount: Int
    /// For a unit that pulls its input: the chain that renders its inputs (whose result is inputStart…); else −1.
    var chain: Int = -1

    init(node: NodeRecord?, callback: CallbackInput?, inputStart: Int, inputCount: Int, outputStart: Int, outputCount: Int) {
        self.node = node.map { .passUnretained($0) }
        self.callback = callback.map { .passUnretained($0) }
        self.inputStart = inputStart
        self.inputCount = inputCount
        self.outputStart = outputStart
        self.outputCount = outputCount
    }
}

/// A run of steps that render together for one frame count: chain 0 is the graph's own cycle; each unit that
/// pulls its input has a chain of its own, the nodes upstream of it, rendered when it pulls, at their rate.
struct ScheduleChain {
    let stepStart: Int
    let stepCount: Int
    /// Where the chain's result is read: for a pulling unit's chain, its input buses.
    let resultStart: Int
    let resultCount: Int
}

/// A graph compiled for the render thread: a flat list of steps in dependency order (every node reachable from
/// the output, each once, after all of its inputs), with every pointer the render thread needs resolved.
///
/// Built and freed on the control thread; immutable once built, so the render thread reads it without locks.
final class RenderSchedule: @unchecked Sendable {
    // Unchecked Sendable: immutable once built; only the render thread writes its view scratch (`inputViews`, `outputViews`)
    /// Keeps the nodes and callbacks the steps point at alive for as long as the schedule is.
    private let retainedNodes: [NodeRecord]
    private let retainedCallbacks: [CallbackInput]
    let steps: UnsafeMutableBufferPointer<ScheduleStep>
    let chains: UnsafeMutableBufferPointer<ScheduleChain>
    let inputSources: UnsafeMutableBufferPointer<BusSource>
    let outputSources: UnsafeMutableBufferPointer<BusSource>
    let inputViews: UnsafeMutableBufferPointer<BufferView>
    let outputViews: UnsafeMutableBufferPointer<BufferView>
    let output: BusSource
    /// The nodes of units that read ahead (files), as unowned references: iterated by index, never allocating.
    let prefetchers: UnsafeMutableBufferPointer<Unmanaged<NodeRecord>>
    /// For each: how many of its frames a graph frame takes (its rate over the graph's), and the frames a chain
    /// may pull beyond that in one cycle (for a reader in a pulled chain: as many as it holds).
    let prefetchScales: UnsafeMutableBufferPointer<(scale: Double, margin: Int)>

    init(
        nodes: [NodeRecord], callbacks: [CallbackInput], steps: [ScheduleStep], chains: [ScheduleChain],
        inputs: [BusSource], outputs: [BusSource], output: BusSource, silence: PCMBuffer,
        prefetchPlan: [(node: NodeRecord, scale: Double, margin: Int)]
    ) {
        retainedNodes = nodes
        retainedCallbacks = callbacks
        self.steps = .allocate(capacity: steps.count)
        _ = self.steps.initialize(from: steps)
        self.chains = .allocate(capacity: chains.count)
        _ = self.chains.initialize(from: chains)
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
        prefetchers = .allocate(capacity: prefetchPlan.count)
        _ = prefetchers.initialize(from: prefetchPlan.map { Unmanaged.passUnretained($0.node) })
        prefetchScales = .allocate(capacity: prefetchPlan.count)
        _ = prefetchScales.initialize(from: prefetchPlan.map { ($0.scale, $0.margin) })
    }

    deinit {
        steps.deallocate()
        chains.deallocate()
        inputSources.deallocate()
        outputSources.deallocate()
        inputViews.deallocate()
        outputViews.deallocate()
        prefetchers.deallocate()
        prefetchScales.deallocate()
    }

    /// Offline caller: lets every reading-ahead unit fetch `frames` frames.
    func prefetch(frames: Int) throws(AudioError) {
        for i in 0..<prefetchers.count {
            let (scale, margin) = prefetchScales[i]
            try prefetchers[i].takeUnretainedValue().unit.prefetch(frames: Int((Double(frames) * scale).rounded(.up)) + margin)
        }
    }

    /// Runs the graph's own chain for `frames` frames and returns the graph output. Render thread.
    @inline(__always)
    func run(frames: Int, timeStamp: RenderTimeStamp) -> BufferView {
        _ = runChain(0, frames: frames, timeStamp: timeStamp)
        return output.view(frames)
    }

    /// Runs chain `index` for `frames` frames and returns views of its result (a pulling unit's inputs; empty
    /// for chain 0). Render thread; re-entered when a unit in a chain pulls from a chain of its own.
    func runChain(_ index: Int, frames: Int, timeStamp: RenderTimeStamp) -> UnsafeBufferPointer<BufferView> {
        let chain = chains[index]
        for s in chain.stepStart..<(chain.stepStart + chain.stepCount) {
            let step = steps[s]
            if let callback = step.callback {
                outputViews[step.outputStart] = outputSources[step.outputStart].view(frames)
                callback._withUnsafeGuaranteedRef { $0.fill(outputViews[step.outputStart], timeStamp: timeStamp) }
                continue
            }
            let node = step.node.unsafelyUnwrapped
            for o in step.outputStart..<(step.outputStart + step.outputCount) {
                outputViews[o] = outputSources[o].view(frames)
            }
            let outputs = UnsafeBufferPointer(rebasing: outputViews[step.outputStart..<(step.outputStart + step.outputCount)])
            let context: RenderContext
            if step.chain >= 0 {
                context = RenderContext(
                    frameCount: frames, timeStamp: timeStamp, inputs: UnsafeBufferPointer(start: nil, count: 0),
                    outputs: outputs, puller: .init(schedule: .passUnretained(self), chain: step.chain,
                        unit: node._withUnsafeGuaranteedRef { .passUnretained($0.core) }))
            } else {
                for i in step.inputStart..<(step.inputStart + step.inputCount) {
                    inputViews[i] = inputSources[i].view(frames)
                }
                context = RenderContext(
                    frameCount: frames, timeStamp: timeStamp,
                    inputs: UnsafeBufferPointer(rebasing: inputViews[step.inputStart..<(step.inputStart + step.inputCount)]),
                    outputs: outputs, puller: nil)
            }
            node._withUnsafeGuaranteedRef { $0.renderWithBypass(context) }
        }
        for i in chain.resultStart..<(chain.resultStart + chain.resultCount) {
            inputViews[i] = inputSources[i].view(frames)
        }
        return UnsafeBufferPointer(rebasing: inputViews[chain.resultStart..<(chain.resultStart + chain.resultCount)])
    }
}
