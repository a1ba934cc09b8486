#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import CFloatEnvironment
import Synchronization

/// Identifies a node in a ``RenderGraph``. ``RenderGraph/output`` is the graph's output.
public struct NodeID: Hashable, Sendable, CustomStringConvertible {
    /// The graph the node belongs to: ids of one graph mean nothing to another.
    let graph: Int
    let raw: Int
    public var description: String { "node \(raw)" }
}

private let graphCounter = Atomic<Int>(0)

/// A user render callback feeding an input bus in the graph's format (Float32 non-interleaved): fill every channel
/// of the view. Called on the render thread: no allocation, lock, logging or I/O.
public typealias RenderCallback = @Sendable (_ buffer: BufferView, _ timeStamp: RenderTimeStamp) -> Void

/// A user render callback feeding an input bus in a client format of its choice (Int16 interleaved, …);
/// the graph converts to Float32. Called on the render thread.
public typealias ClientRenderCallback = @Sendable (_ buffer: RawBufferView, _ timeStamp: RenderTimeStamp) -> Void

/// A node: a unit, its name, and the buffers its output buses render into.
final class NodeRecord: Sendable {
    let id: NodeID
    let name: String
    let unit: RenderUnit
    /// The unit's core and whether it pulls its input, read once here: the render thread reaches them as constants
    /// of the node, with no protocol call and no reference count.
    let core: UnitCore
    let pullsInput: Bool
    let outputBuffers: [PCMBuffer]

    init(id: NodeID, name: String, unit: RenderUnit, maximumFrames: Int) {
        self.id = id
        self.name = name
        self.unit = unit
        core = unit.core
        pullsInput = unit.pullsInput
        outputBuffers = unit.outputFormats.map { PCMBuffer(channelCount: $0.channelCount, capacity: maximumFrames) }
    }

    /// Renders through the bypass switch: the unit's output, the input (bit-exact), or a linear crossfade from one
    /// to the other while the switch moves. The unit renders underneath even while bypassed, so its state (delay
    /// lines, envelopes, a lookahead) stays current and switching back is as seamless as switching away.
    /// Render thread; called by the graph's schedule, on a node it holds unretained. Everything it reads is a
    /// constant of the node (the unit, its core), so it takes no reference count and calls the unit once.
    func renderWithBypass(_ context: RenderContext) {
        if pullsInput {
            unit.render(context)
            return
        }
        let rendering = core.rendering
        let bypassFadeFrames = rendering.onRenderThread.bypassFadeFrames
        let bypassPosition = rendering.onRenderThread.bypassPosition
        let wanted = core.bypassFlag.load(ordering: .relaxed) ? bypassFadeFrames : 0
        unit.render(context)
        if bypassPosition == wanted {
            if wanted != 0 { passThrough(context) }
            return
        }
        let step = wanted > bypassPosition ? 1 : -1
        let scale = 1 / Float(bypassFadeFrames)
        var end = bypassPosition
        for o in 0..<context.outputs.count {
            let out = context.outputs[o]
            let dry = o < context.inputs.count ? context.inputs[o] : nil
            for c in 0..<out.channelCount {
                let y = out[c].baseAddress!
                var position = bypassPosition
                let x: UnsafeMutablePointer<Float>? =
                    if let dry, dry.channelCount == 1 || c < dry.channelCount { dry[dry.channelCount == 1 ? 0 : c].baseAddress! } else { nil }
                for i in 0..<context.frameCount {
                    if position != wanted { position += step }
                    let a = Float(position) * scale  // 0 processed … 1 bypassed
                    let d = x?[i] ?? 0
                    y[i] = VectorOps.crossfade(from: y[i], to: d, weight: a)
                }
                end = position
            }
        }
        rendering.onRenderThread.bypassPosition = context.outputs.isEmpty ? wanted : end
    }

    private func passThrough(_ context: RenderContext) {
        for o in 0..<context.outputs.count {
            let out = context.outputs[o]
            if o < context.inputs.count, context.inputs[o].channelCount == 1 || context.inputs[o].channelCount >= out.channelCount {
                out.copy(from: context.inputs[o])
            } else {
                out.clear()
            }
        }
    }
}

/// An input bus fed by a user callback, with the buffer it fills (and conversion from a client format).
final class CallbackInput: Sendable {
    let graphFormat: StreamFormat
    let buffer: PCMBuffer
    private let floatCallback: RenderCallback?
    private let clientCallback: ClientRenderCallback?
    private let clientBuffer: RawPCMBuffer?

    init(graphFormat: StreamFormat, maximumFrames: Int, callback: @escaping RenderCallback) {
        self.graphFormat = graphFormat
        buffer = PCMBuffer(channelCount: graphFormat.channelCount, capacity: maximumFrames)
        floatCallback = callback
        clientCallback = nil
        clientBuffer = nil
    }

    init(graphFormat: StreamFormat, client: StreamFormat, maximumFrames: Int, callback: @escaping ClientRenderCallback) {
        self.graphFormat = graphFormat
        buffer = PCMBuffer(channelCount: graphFormat.channelCount, capacity: maximumFrames)
        floatCallback = nil
        clientCallback = callback
        clientBuffer = RawPCMBuffer(format: client, capacity: maximumFrames)
    }

    /// Render thread: runs the callback into `view` (this input's buffer).
    @inline(__always)
    func fill(_ view: BufferView, timeStamp: RenderTimeStamp) {
        if let floatCallback {
            floatCallback(view, timeStamp)
        } else if let clientCallback, let clientBuffer {
            let raw = clientBuffer.view(frames: view.frameCount)
            clientCallback(raw, timeStamp)
            PCMConversion.decode(raw, into: view)
        }
    }
}

/// A graph of units: LiveAudio's AUGraph.
///
/// The topology (nodes, connections) lives on the control side. Every change compiles a new `RenderSchedule`
/// off the render thread and publishes it atomically; the render thread picks it up at the start of its next
/// cycle, and the schedule it replaces is freed back on the control side. So nodes can be added, removed,
/// connected and disconnected while another thread renders, with no lock and no allocation on that thread.
///
/// Lifecycle: ``initialize()`` (prepares every unit) → ``start()`` → ``stop()`` → ``uninitialize()``; calls out of
/// order throw ``/AudioCore/AudioError`` `.invalidState`. The graph output is pulled by a driver —
/// ``OfflineRenderer`` for offline rendering, a device's I/O unit in real time — via
/// ``renderCycle(frames:timeStamp:)``.
///
/// Thread safety: every method except the `renderCycle` ones is control-thread API and may be called from several
/// threads (calls are serialized by a lock that the render thread never takes). A driver may still be inside a
/// render cycle when the control side stops, resets or uninitializes the graph: ``reset()`` and ``uninitialize()``
/// close a gate the render thread checks at the start of each cycle and wait (briefly: one cycle at most) until the
/// cycle in progress has left, so no unit is reset and no schedule freed under a render.
public final class RenderGraph: Sendable {
    /// Where a graph is in its lifecycle (its `state`): ``initialize()`` moves it from `uninitialized` to
    /// `initialized`, ``start()`` and ``stop()`` between `initialized` and `running`, ``uninitialize()`` back.
    public enum State: Int, Sendable {
        /// The stages, in order: `uninitialized` (created or uninitialized: no schedule, drivers cannot render),
        /// `initialized` (every unit prepared and a schedule compiled; stopped, but an offline driver may render),
        /// `running` (started: drivers pull the graph).
        case uninitialized, initialized, running
    }

    /// The graph output's format: every unit runs at its sample rate; its channel count is what drivers receive.
    public let format: StreamFormat
    /// The most frames one render cycle can ask for.
    public let maximumFrames: Int
    /// The graph's output node; connect the last node to it.
    public let output: NodeID
    private let identity: Int

    private struct Endpoint: Hashable {
        let node: NodeID
        let bus: Int
    }
    private enum Source {
        case node(Endpoint)
        case callback(CallbackInput)
    }
    private struct Topology {
        var nextID = 1
        var nodes: [NodeID: NodeRecord] = [:]
        var insertionOrder: [NodeID] = []
        var sources: [Endpoint: Source] = [:]
        /// Nodes rendered every cycle whether or not the output pulls them (``addSink(_:)``), in the order added.
        var sinks: [NodeID] = []
        var state: State = .uninitialized
        /// What ``willRender(_:)`` last said (told to nodes added later too); nil until said.
        var announcedMode: RenderingMode?
    }

    private let control: Locked<Topology>
    private let exchange = ScheduleExchange<RenderSchedule>()
    private let renderState = Atomic<Int>(State.uninitialized.rawValue)
    /// Render cycles in progress, counted in two slots (the render side's half of the gate; see ``reset()`` and
    /// ``uninitialize()``). A cycle counts itself in the slot `gateEpoch` names when it enters; closing the gate
    /// flips the epoch and waits for the old slot alone to drain. Cycles that enter after the flip see the gate
    /// closed and touch no unit, so a driver rendering back to back cannot keep the wait going: it ends when the
    /// cycles already inside have left, one cycle per render thread at most.
    private let rendersInFlightEven = Atomic<Int>(0)
    private let rendersInFlightOdd = Atomic<Int>(0)
    private let gateEpoch = Atomic<Int>(0)
    /// Set while ``reset()`` runs: cycles render silence and touch no unit.
    private let resetting = Atomic<Bool>(false)
    private let silence: PCMBuffer
    /// Incremented for each schedule published (for tests and diagnostics).
    private let generation = Atomic<Int>(0)

    /// Creates an empty, uninitialized graph that renders its output in `format`, in cycles of at most
    /// `maximumFrames` frames.
    /// - Parameters:
    ///   - format: the output format; must be Float32 non-interleaved
    ///     (see ``/AudioCore/StreamFormat/graph(sampleRate:channelCount:)``).
    ///   - maximumFrames: the largest render cycle (1 … 65536); 4096 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for another layout or a `maximumFrames` out of range.
    public init(format: StreamFormat, maximumFrames: Int = 4096) throws(AudioError) {
        guard format.isGraphLayout else {
            throw AudioError(.invalidFormat, "a graph runs in Float32 non-interleaved, got \(format)")
        }
        guard (1...65536).contains(maximumFrames) else {
            throw AudioError(.invalidFormat, "maximumFrames must be between 1 and 65536, got \(maximumFrames)")
        }
        self.format = format
        self.maximumFrames = maximumFrames
        identity = graphCounter.add(1, ordering: .relaxed).newValue
        output = NodeID(graph: identity, raw: 0)
        silence = PCMBuffer(channelCount: 1, capacity: maximumFrames)
        control = Locked(Topology())
    }

    deinit {
        exchange.deactivate()
        control.withLock { t in for n in t.nodes.values { n.unit.core.membership.store(false, ordering: .relaxed) } }
    }

    /// The graph's lifecycle state. Takes the control lock: any thread but a render thread.
    public var state: State { control.withLock { $0.state } }
    /// The spec of the graph's cycles: ``format``'s sample rate and ``maximumFrames``. Units at the graph's rate
    /// are prepared with it; a unit at another rate is prepared with its own rate. Any thread.
    public var spec: RenderSpec { RenderSpec(sampleRate: format.sampleRate, maximumFrames: maximumFrames) }

    // MARK: Nodes

    /// Adds a unit. In an initialized graph the unit is prepared here, on the calling thread.
    ///
    /// A node may run at another rate than the graph's; it then reaches the output through a unit that pulls its
    /// input (``RenderUnit/pullsInput``: a converter), since a connection joins buses of one rate.
    /// - Parameters:
    ///   - unit: the unit to add; a unit belongs to one graph at a time.
    ///   - name: used in error messages and diagnostics; defaults to `kind#n`.
    /// - Returns: the new node's id.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidNode` when the unit already belongs to a graph,
    ///   `.unsupportedSampleRate` when its buses run at different rates (outside a pulling unit's inputs) or at a
    ///   rate outside 1–768 kHz, or what the unit's prepare throws in an initialized graph.
    @discardableResult
    public func addNode(_ unit: RenderUnit, name: String? = nil) throws(AudioError) -> NodeID {
        let label = name ?? unit.kind
        let rate = unit.busSampleRate ?? format.sampleRate
        for f in (unit.pullsInput ? [] : unit.inputFormats) + unit.outputFormats where f.sampleRate != rate {
            throw AudioError(
                .unsupportedSampleRate,
                "node '\(label)' (\(unit.kind)) has buses at \(formatHz(rate)) and \(formatHz(f.sampleRate)): a unit runs at one rate")
        }
        for f in unit.inputFormats + unit.outputFormats where !(1_000...768_000).contains(f.sampleRate) {
            throw AudioError(.unsupportedSampleRate, "node '\(label)' (\(unit.kind)) runs at \(formatHz(f.sampleRate)), outside 1–768 kHz")
        }
        guard unit.core.membership.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else {
            throw AudioError(.invalidNode, "node '\(label)': the \(unit.kind) unit already belongs to a graph")
        }
        do throws(AudioError) {
            return try control.withLock { (t: inout Topology) throws(AudioError) -> NodeID in
                let id = NodeID(graph: identity, raw: t.nextID)
                t.nextID += 1
                let record = NodeRecord(id: id, name: name ?? "\(unit.kind)#\(id.raw)", unit: unit, maximumFrames: maximumFrames)
                if let mode = t.announcedMode { unit.willRender(unitMode(mode, unit)) }
                if t.state != .uninitialized { try unit.prepare(spec(for: unit)) }
                t.nodes[id] = record
                t.insertionOrder.append(id)
                if t.state != .uninitialized { publish(t) }
                return id
            }
        } catch {
            unit.core.membership.store(false, ordering: .releasing)
            throw error
        }
    }

    /// Removes a node and every connection to or from it.
    public func removeNode(_ id: NodeID) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard let record = t.nodes[id] else { throw unknownNode(id) }
            t.nodes[id] = nil
            t.insertionOrder.removeAll { $0 == id }
            t.sinks.removeAll { $0 == id }
            t.sources = t.sources.filter { key, source in
                if key.node == id { return false }
                if case .node(let from) = source, from.node == id { return false }
                return true
            }
            record.unit.core.membership.store(false, ordering: .releasing)
            if t.state != .uninitialized { publish(t) }
        }
    }

    /// The unit of a node.
    public func unit(_ id: NodeID) throws(AudioError) -> RenderUnit {
        try control.withLock { (t: inout Topology) throws(AudioError) -> RenderUnit in
            guard let r = t.nodes[id] else { throw unknownNode(id) }
            return r.unit
        }
    }

    /// The name a node was added with.
    public func name(of id: NodeID) -> String? {
        id == output ? "output" : control.withLock { $0.nodes[id]?.name }
    }

    /// Every node, in the order added.
    public var nodes: [NodeID] { control.withLock { $0.insertionOrder } }

    // MARK: Sinks

    /// Makes a node a sink: the schedule renders it every cycle, after what it depends on, whether or not anything
    /// leads from it to the output — a recorder, an encoder's tap, a meter, an analyser. Its output buses, if it has
    /// any, may feed other nodes as usual; a sink that also reaches the output renders once a cycle all the same.
    /// Making a sink of a node that already is one does nothing. Any time, also while the graph renders (the next
    /// schedule has it).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidNode` for a node of another graph or one removed, or for a node
    ///   that a pulling unit pulls (a converter's input side renders at the converter's pace, not once a cycle).
    public func addSink(_ id: NodeID) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard t.nodes[id] != nil else { throw unknownNode(id) }
            guard !t.sinks.contains(id) else { return }
            var trial = t
            trial.sinks.append(id)
            if let conflict = chainConflict(trial) { throw AudioError(.invalidNode, conflict) }
            t = trial
            if t.state != .uninitialized { publish(t) }
        }
    }

    /// Stops rendering a node for its own sake: it renders again only if the output pulls it. A node that is not a
    /// sink is left as it is.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidNode` for a node of another graph or one removed.
    public func removeSink(_ id: NodeID) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard t.nodes[id] != nil else { throw unknownNode(id) }
            guard let index = t.sinks.firstIndex(of: id) else { return }
            t.sinks.remove(at: index)
            if t.state != .uninitialized { publish(t) }
        }
    }

    /// The sinks, in the order made.
    public var sinks: [NodeID] { control.withLock { $0.sinks } }

    /// Tells every unit what the cycles to come are (``RenderUnit/willRender(_:)``): offline, or real-time cycles of
    /// at most so many frames. Control thread, while not rendering.
    /// Nodes added later are told as they are added.
    /// A unit at another rate than the graph's (behind a converter) is told its own cycle: scaled by the rates, and
    /// 128 frames more for the converter's blocks. Units may reset themselves in answer: as ``reset()``, this waits
    /// for the cycle in progress to leave, and cycles meanwhile are silence.
    public func willRender(_ mode: RenderingMode) {
        control.withLock { t in
            t.announcedMode = mode
            resetting.store(true, ordering: .sequentiallyConsistent)
            waitForRendersToLeave()
            for id in t.insertionOrder {
                let unit = t.nodes[id]!.unit
                unit.willRender(unitMode(mode, unit))
            }
            resetting.store(false, ordering: .releasing)
        }
    }

    /// The graph's mode as `unit`'s rate sees it: its cycles scaled by the rates.
    private func unitMode(_ mode: RenderingMode, _ unit: RenderUnit) -> RenderingMode {
        let rate = unit.busSampleRate ?? format.sampleRate
        guard case .realTime(let frames) = mode, rate != format.sampleRate else { return mode }
        return .realTime(maximumCycleFrames: Int((Double(frames) * rate / format.sampleRate).rounded(.up)) + 128)
    }

    /// The units that read ahead of the render (file sources), in the order added: what a ``ReadAheadWorker``
    /// serves.
    public var readingAheadUnits: [RenderUnit] {
        control.withLock { t in t.insertionOrder.compactMap { t.nodes[$0]?.unit }.filter(\.prefetchesAhead) }
    }

    // MARK: Connections

    /// Connects output bus `outputBus` of `source` to input bus `inputBus` of `destination` (or of
    /// ``output``). One output may feed any number of inputs (it is rendered once per cycle); an input takes one
    /// connection. A mono output may feed an input with more channels: it is copied to every channel.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidNode` (also when a node would be pulled from both sides of a
    ///   converter), `.invalidBus`, `.formatMismatch` (naming both formats), `.unsupportedSampleRate` (naming both
    ///   rates: a converter belongs between them), `.cycle` (naming the cycle), or `.invalidState` when the input is
    ///   already connected.
    public func connect(_ source: NodeID, outputBus sourceBus: Int = 0, to destination: NodeID, inputBus destinationBus: Int = 0)
        throws(AudioError)
    {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard let from = t.nodes[source] else { throw unknownNode(source) }
            guard from.unit.outputFormats.indices.contains(sourceBus) else {
                throw AudioError(
                    .invalidBus,
                    "'\(from.name)' has no output bus \(sourceBus) (it has \(from.unit.outputBusCount))")
            }
            let target = try inputFormat(t, destination, destinationBus)
            let produced = from.unit.outputFormats[sourceBus]
            guard produced.sampleRate == target.sampleRate else {
                throw AudioError(
                    .unsupportedSampleRate,
                    "cannot connect '\(from.name)' (\(formatHz(produced.sampleRate))) to '\(nameOf(t, destination))' "
                        + "input bus \(destinationBus) (\(formatHz(target.sampleRate))): the rates differ; put a converter between them")
            }
            guard produced.channelCount == target.channelCount || produced.channelCount == 1 else {
                throw AudioError(
                    .formatMismatch,
                    "cannot connect '\(from.name)' output bus \(sourceBus) (\(produced)) to '\(nameOf(t, destination))' "
                        + "input bus \(destinationBus) (\(target)): channel counts differ")
            }
            if let path = pathDownstream(t, from: destination, to: source) {
                let names = ([source] + path).map { nameOf(t, $0) }
                throw AudioError(
                    .cycle,
                    "connecting '\(from.name)' to '\(nameOf(t, destination))' would create a cycle: "
                        + names.joined(separator: " → "))
            }
            let key = Endpoint(node: destination, bus: destinationBus)
            if t.sources[key] == nil {
                var trial = t
                trial.sources[key] = .node(Endpoint(node: source, bus: sourceBus))
                if let conflict = chainConflict(trial) { throw AudioError(.invalidNode, conflict) }
            }
            try setSource(&t, destination, destinationBus, .node(Endpoint(node: source, bus: sourceBus)))
        }
    }

    /// Removes whatever feeds input bus `inputBus` of `destination`. Disconnecting an unconnected input does nothing.
    public func disconnect(_ destination: NodeID, inputBus bus: Int = 0) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            _ = try inputFormat(t, destination, bus)
            if t.sources.removeValue(forKey: Endpoint(node: destination, bus: bus)) != nil, t.state != .uninitialized {
                publish(t)
            }
        }
    }

    /// Feeds input bus `inputBus` of `destination` from `callback`, in the graph's Float32 format, instead of a node.
    public func setInputCallback(_ destination: NodeID, inputBus bus: Int = 0, _ callback: @escaping RenderCallback)
        throws(AudioError)
    {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            let target = try inputFormat(t, destination, bus)
            try setSource(&t, destination, bus, .callback(CallbackInput(graphFormat: target, maximumFrames: maximumFrames, callback: callback)))
        }
    }

    /// Feeds input bus `inputBus` of `destination` from `callback` in `clientFormat` (any sample type, interleaved or
    /// not, the bus's rate and channel count); the graph converts to Float32.
    /// - Throws: ``/AudioCore/AudioError`` `.formatMismatch` when rate or channel count differ from the bus's.
    public func setInputCallback(
        _ destination: NodeID, inputBus bus: Int = 0, format clientFormat: StreamFormat,
        _ callback: @escaping ClientRenderCallback
    ) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            let target = try inputFormat(t, destination, bus)
            _ = try FormatConverter(client: clientFormat, graph: target)
            let input = CallbackInput(
                graphFormat: target, client: clientFormat, maximumFrames: maximumFrames, callback: callback)
            try setSource(&t, destination, bus, .callback(input))
        }
    }

    private func setSource(_ t: inout Topology, _ destination: NodeID, _ bus: Int, _ source: Source) throws(AudioError) {
        let key = Endpoint(node: destination, bus: bus)
        if let existing = t.sources[key] {
            throw AudioError(
                .invalidState,
                "input bus \(bus) of '\(nameOf(t, destination))' is already fed by \(describe(t, existing)); "
                    + "disconnect it first")
        }
        t.sources[key] = source
        if t.state != .uninitialized { publish(t) }
    }

    // MARK: Lifecycle

    /// Prepares every unit for the graph's spec and compiles the first schedule.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when already initialized, or what a unit's prepare
    ///   throws.
    public func initialize() throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard t.state == .uninitialized else {
                throw AudioError(.invalidState, "the graph is already initialized")
            }
            for id in t.insertionOrder {
                let record = t.nodes[id]!
                do throws(AudioError) {
                    try record.unit.prepare(spec(for: record.unit))
                } catch {
                    throw AudioError(error.code, "node '\(record.name)': \(error.message)")
                }
            }
            t.state = .initialized
            renderState.store(State.initialized.rawValue, ordering: .releasing)
            publish(t)
        }
    }

    /// Marks the graph running: drivers may now pull it.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` unless initialized and stopped.
    public func start() throws(AudioError) {
        try transition(from: .initialized, to: .running, "start", need: "initialize it first")
    }

    /// Marks the graph stopped. Units keep their state; ``start()`` resumes.
    public func stop() throws(AudioError) {
        try transition(from: .running, to: .initialized, "stop", need: "it is not running")
    }

    /// Frees the render schedule and returns to the uninitialized state. Call when no render is in progress.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when running (stop first) or not initialized.
    public func uninitialize() throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            switch t.state {
            case .running: throw AudioError(.invalidState, "cannot uninitialize a running graph; stop it first")
            case .uninitialized: throw AudioError(.invalidState, "the graph is not initialized")
            case .initialized: break
            }
            t.state = .uninitialized
            // No new cycle starts from here; one already running finishes before its schedule is freed.
            renderState.store(State.uninitialized.rawValue, ordering: .sequentiallyConsistent)
            waitForRendersToLeave()
            exchange.deactivate()
        }
    }

    /// Resets every unit's state (phases, delay lines, file positions). Safe while a driver renders: cycles that
    /// start meanwhile output silence, and the reset waits for a cycle in progress to finish first.
    public func reset() {
        control.withLock { t in
            resetting.store(true, ordering: .sequentiallyConsistent)
            waitForRendersToLeave()
            for id in t.insertionOrder {
                let unit = t.nodes[id]!.unit
                unit.reset()
                unit.core.rendering.whileStopped.pulledFrames = 0
            }
            resetting.store(false, ordering: .releasing)
        }
    }

    /// Frees schedules the render thread has finished with. Publishing a change does this too; long-running
    /// hosts that rarely change the graph may call it from time to time.
    public func collectGarbage() {
        // Under the lock: `publish` collects too, and the retire queue has one consumer.
        control.withLock { _ in exchange.collect() }
    }

    /// Control thread (under the control lock), after closing the gate (a store the render side reads after
    /// announcing itself): waits until every cycle that could have seen the gate open has left.
    ///
    /// The flip comes after the gate closed, so a cycle that reads the new epoch also sees the gate closed. A cycle
    /// counted in the old slot is waited for; one that read the old epoch but had not yet counted itself when the
    /// slot was seen empty reads the epoch again after counting (``enterCycle()``), finds it moved and counts itself
    /// in the new slot, then sees the gate closed — even when it was held up across a whole reset, the gate open
    /// again, and the next close waits for the slot it counted in.
    private func waitForRendersToLeave() {
        let old = gateEpoch.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue & 1
        if old == 0 {
            while rendersInFlightEven.load(ordering: .sequentiallyConsistent) != 0 { sched_yield() }
        } else {
            while rendersInFlightOdd.load(ordering: .sequentiallyConsistent) != 0 { sched_yield() }
        }
    }

    private func transition(from: State, to: State, _ verb: String, need: String) throws(AudioError) {
        try control.withLock { (t: inout Topology) throws(AudioError) in
            guard t.state == from else { throw AudioError(.invalidState, "cannot \(verb) the graph: \(need)") }
            t.state = to
            renderState.store(to.rawValue, ordering: .releasing)
        }
    }

    // MARK: Rendering

    /// True when drivers may call ``renderCycle(frames:timeStamp:)``: initialized (offline) or running.
    public var canRender: Bool { renderState.load(ordering: .acquiring) != State.uninitialized.rawValue }

    /// Renders one cycle and returns the output, valid until the next cycle (or until the graph is reset or
    /// uninitialized: drivers that run on their own thread use ``renderCycle(frames:timeStamp:consume:)``, which
    /// keeps the output valid for as long as it is read). Render thread only; never allocates, locks or blocks.
    /// Returns nil when the graph is not initialized or `frames` exceeds ``maximumFrames``; silence while
    /// ``reset()`` runs. With nothing connected to the output, the output is silence.
    @inline(__always)
    public func renderCycle(frames: Int, timeStamp: RenderTimeStamp) -> BufferView? {
        let slot = enterCycle()
        defer { leaveCycle(slot) }
        return runCycle(frames: frames, timeStamp: timeStamp)
    }

    /// Renders one cycle and hands the output to `consume` before the cycle ends: the control side cannot reset
    /// or uninitialize the graph until `consume` has returned. Render thread only; never allocates, locks or
    /// blocks (nor may `consume`). Returns false, without calling `consume`, when the graph is not initialized or
    /// `frames` exceeds ``maximumFrames``.
    @inline(__always)
    public func renderCycle(frames: Int, timeStamp: RenderTimeStamp, consume: (BufferView) -> Void) -> Bool {
        let slot = enterCycle()
        defer { leaveCycle(slot) }
        guard let view = runCycle(frames: frames, timeStamp: timeStamp) else { return false }
        consume(view)
        return true
    }

    /// Counts the cycle in the current epoch's slot and returns the slot, for ``leaveCycle(_:)``.
    @inline(__always)
    private func enterCycle() -> Int {
        while true {
            let epoch = gateEpoch.load(ordering: .sequentiallyConsistent)
            let slot = epoch & 1
            if slot == 0 {
                rendersInFlightEven.add(1, ordering: .sequentiallyConsistent)
            } else {
                rendersInFlightOdd.add(1, ordering: .sequentiallyConsistent)
            }
            // Counted in the slot of the epoch still in force: a close that flips it from now on waits for this
            // cycle. If the epoch moved between the read and the count — a cycle held up there across a whole
            // reset, whose slot is then the new epoch's, which the next close would not wait for — count again.
            if gateEpoch.load(ordering: .sequentiallyConsistent) == epoch { return slot }
            leaveCycle(slot)
        }
    }
    @inline(__always)
    private func leaveCycle(_ slot: Int) {
        if slot == 0 {
            rendersInFlightEven.subtract(1, ordering: .releasing)
        } else {
            rendersInFlightOdd.subtract(1, ordering: .releasing)
        }
    }

    /// The cycle proper, between `enterCycle` and `leaveCycle`.
    @inline(__always)
    private func runCycle(frames: Int, timeStamp: RenderTimeStamp) -> BufferView? {
        guard frames >= 0, frames <= maximumFrames,
            renderState.load(ordering: .sequentiallyConsistent) != State.uninitialized.rawValue
        else { return nil }
        if resetting.load(ordering: .sequentiallyConsistent) {
            let blank = silence.view(frames: frames)
            blank.clear()
            return blank.upmixed(to: format.channelCount)
        }
        guard let schedule = exchange.acquire() else { return nil }
        // Denormals flush to zero while the graph renders, so decaying filter and reverb states stay cheap.
        let saved = la_float_environment_enter()
        defer { la_float_environment_leave(saved) }
        return schedule._withUnsafeGuaranteedRef { $0.run(frames: frames, timeStamp: timeStamp) }
    }

    /// Offline callers: makes file sources read ahead `frames` frames on this thread before a cycle.
    func prefetch(frames: Int) throws(AudioError) {
        guard let schedule = exchange.acquire() else { return }
        try schedule.takeUnretainedValue().prefetch(frames: frames)
    }

    /// Names of the nodes the current schedule renders, in order (diagnostics and tests).
    public var renderOrder: [String] {
        control.withLock { t in pullOrder(t).map(\.name) }
    }

    /// Seconds by which the output lags its sources: the units' latencies (lookahead) added along each path to the
    /// output, the longest path's. What ear monitoring adds to the device's own buffering.
    public var latency: Double {
        control.withLock { t in
            guard case .node(let from)? = t.sources[Endpoint(node: output, bus: 0)] else { return 0 }
            return longestPath(t, to: from.node, \.latency)
        }
    }

    /// Seconds a node's output keeps sounding after its sources fall silent: the units' tail times (a reverb's
    /// decay, a delay's echoes; none for a bypassed unit) added along each path into it, the longest path's. Now, at
    /// the parameters' current values; 0 for the output or a node not in the graph.
    public func tailTime(of node: NodeID) -> Double {
        control.withLock { t in longestPath(t, to: node) { $0.isBypassed ? 0 : $0.tailTime } }
    }

    /// The largest sum of `value` over the nodes of a path ending at `id` (its sources first).
    private func longestPath(_ t: Topology, to id: NodeID, _ value: (RenderUnit) -> Double) -> Double {
        var memo: [NodeID: Double] = [:]
        func upstream(_ id: NodeID) -> Double {
            if let known = memo[id] { return known }
            guard let record = t.nodes[id] else { return 0 }
            var longest = 0.0
            for bus in 0..<record.unit.inputBusCount {
                if case .node(let from)? = t.sources[Endpoint(node: id, bus: bus)] { longest = max(longest, upstream(from.node)) }
            }
            let total = longest + value(record.unit)
            memo[id] = total
            return total
        }
        return upstream(id)
    }

    /// Number of schedules published so far.
    public var scheduleGeneration: Int { generation.load(ordering: .relaxed) }

    // MARK: Compilation

    private func publish(_ t: Topology) {
        exchange.publish(compile(t))
        generation.add(1, ordering: .relaxed)
    }

    /// The spec a unit is prepared with: its own rate (the graph's for a unit with no buses), the graph's
    /// largest cycle (a pulling unit pulls its inputs in pieces of at most that many frames).
    private func spec(for unit: RenderUnit) -> RenderSpec {
        RenderSpec(sampleRate: unit.busSampleRate ?? format.sampleRate, maximumFrames: maximumFrames)
    }

    /// The nodes the output pulls, depth-first from the output: each reachable node once, after its inputs, the
    /// nodes a pulling unit pulls right before it.
    private func pullOrder(_ t: Topology) -> [NodeRecord] {
        var order: [NodeRecord] = []
        var visited = Set<NodeID>()
        func visit(_ id: NodeID) {
            guard id != output, !visited.contains(id), let record = t.nodes[id] else { return }
            visited.insert(id)
            for bus in 0..<record.unit.inputBusCount {
                if case .node(let from)? = t.sources[Endpoint(node: id, bus: bus)] { visit(from.node) }
            }
            order.append(record)
        }
        if case .node(let from)? = t.sources[Endpoint(node: output, bus: 0)] { visit(from.node) }
        for sink in t.sinks { visit(sink) }
        return order
    }

    /// The nodes a chain renders: depth-first from the sources of the input buses `results` (what the chain hands
    /// back) and then from the nodes `roots` (the graph's sinks, for its own chain), each once, after its inputs, not
    /// going past a pulling unit (whose inputs are a chain of their own).
    private func chainOrder(_ t: Topology, _ results: [Endpoint], roots: [NodeID] = []) -> [NodeRecord] {
        var order: [NodeRecord] = []
        var visited = Set<NodeID>()
        func visit(_ id: NodeID) {
            guard id != output, !visited.contains(id), let record = t.nodes[id] else { return }
            visited.insert(id)
            if !record.unit.pullsInput {
                for bus in 0..<record.unit.inputBusCount {
                    if case .node(let from)? = t.sources[Endpoint(node: id, bus: bus)] { visit(from.node) }
                }
            }
            order.append(record)
        }
        for result in results {
            if case .node(let from)? = t.sources[result] { visit(from.node) }
        }
        for root in roots { visit(root) }
        return order
    }

    /// Why `t` cannot be rendered, when a node would belong to two chains (pulled by a converter and by another
    /// part of the graph, which would render it twice a cycle, at two paces), or nil.
    private func chainConflict(_ t: Topology) -> String? {
        var owner: [NodeID: String] = [:]
        var problem: String?
        func walk(_ results: [Endpoint], roots: [NodeID] = [], _ chain: String) {
            for record in chainOrder(t, results, roots: roots) {
                if let other = owner[record.id], other != chain {
                    problem =
                        problem
                        ?? "node '\(record.name)' would be pulled both by \(other) and by \(chain); a node feeds one side of a converter"
                    continue
                }
                guard owner[record.id] == nil else { continue }
                owner[record.id] = chain
                if record.unit.pullsInput {
                    walk((0..<record.unit.inputBusCount).map { Endpoint(node: record.id, bus: $0) }, "'\(record.name)'")
                }
            }
        }
        walk([Endpoint(node: output, bus: 0)], roots: t.sinks, "the graph output and its sinks")
        return problem
    }

    /// Builds the render schedule for an initialized graph (every node has its buffers).
    private func compile(_ t: Topology) -> RenderSchedule {
        var steps: [ScheduleStep] = []
        var chains: [ScheduleChain] = [ScheduleChain(stepStart: 0, stepCount: 0, resultStart: 0, resultCount: 0)]
        var inputs: [BusSource] = []
        var outputs: [BusSource] = []
        var callbacks: [CallbackInput] = []
        var everything: [NodeRecord] = []
        var prefetchPlan: [(node: NodeRecord, scale: Double, margin: Int)] = []
        let silent = BusSource(base: silence.storage, stride: 0, channels: 1)

        func resolve(_ key: Endpoint, channels: Int) -> BusSource {
            switch t.sources[key] {
            case .node(let from)?:
                let buffer = t.nodes[from.node]!.outputBuffers[from.bus]
                let mono = buffer.channelCount == 1 && channels > 1
                return BusSource(base: buffer.storage, stride: mono ? 0 : buffer.channelStride, channels: channels)
            case .callback(let cb)?:
                callbacks.append(cb)
                steps.append(
                    ScheduleStep(node: nil, callback: cb, inputStart: inputs.count, inputCount: 0, outputStart: outputs.count, outputCount: 1))
                outputs.append(BusSource(base: cb.buffer.storage, stride: cb.buffer.channelStride, channels: channels))
                return BusSource(base: cb.buffer.storage, stride: cb.buffer.channelStride, channels: channels)
            case nil:
                return BusSource(base: silent.base, stride: 0, channels: channels)
            }
        }

        /// Compiles the chain that hands back `results` (input buses, with their channel counts) and renders
        /// `roots` (the sinks, for the graph's own chain), and returns the range of `inputs` where its result is
        /// read. Chains of pulling units inside it are compiled first, so that each chain's steps are contiguous.
        func compileChain(_ results: [(Endpoint, Int)], roots: [NodeID] = [], index: Int?, inChain: Bool)
            -> (start: Int, count: Int, chain: Int)
        {
            let order = chainOrder(t, results.map(\.0), roots: roots)
            var pulled: [NodeID: (start: Int, count: Int, chain: Int)] = [:]
            for record in order where record.unit.pullsInput {
                let unit = record.unit
                pulled[record.id] = compileChain(
                    unit.inputFormats.indices.map { (Endpoint(node: record.id, bus: $0), unit.inputFormats[$0].channelCount) },
                    index: nil, inChain: true)
            }
            let stepStart = steps.count
            for record in order {
                let unit = record.unit
                everything.append(record)
                if unit.prefetchesAhead {
                    // In a pulled chain, how much a cycle takes depends on the puller (a time-pitch's rate, its
                    // look-ahead): offline, such a reader fills its whole buffer before each cycle.
                    let scale = (unit.busSampleRate ?? format.sampleRate) / format.sampleRate
                    prefetchPlan.append((record, scale, inChain ? Int.max / 4 : 0))
                    unit.core.pulledChainFlag.store(inChain, ordering: .relaxed)
                }
                let outputStart = outputs.count
                outputs += record.outputBuffers.map { BusSource(base: $0.storage, stride: $0.channelStride, channels: $0.channelCount) }
                if let chain = pulled[record.id] {
                    var step = ScheduleStep(
                        node: record, callback: nil, inputStart: chain.start, inputCount: chain.count, outputStart: outputStart,
                        outputCount: record.outputBuffers.count)
                    step.chain = chain.chain
                    steps.append(step)
                    continue
                }
                // Callback steps for this node's inputs go first, then the node's own step.
                let resolved = unit.inputFormats.indices.map {
                    resolve(Endpoint(node: record.id, bus: $0), channels: unit.inputFormats[$0].channelCount)
                }
                let inputStart = inputs.count
                inputs += resolved
                steps.append(
                    ScheduleStep(
                        node: record, callback: nil, inputStart: inputStart, inputCount: resolved.count, outputStart: outputStart,
                        outputCount: record.outputBuffers.count))
            }
            // The result, read after the chain's steps (callback steps for the result buses themselves join the chain).
            let resolved = results.map { resolve($0.0, channels: $0.1) }
            let resultStart = inputs.count
            inputs += resolved
            let chain = ScheduleChain(stepStart: stepStart, stepCount: steps.count - stepStart, resultStart: resultStart, resultCount: resolved.count)
            if let index {
                chains[index] = chain
                return (resultStart, resolved.count, index)
            }
            chains.append(chain)
            return (resultStart, resolved.count, chains.count - 1)
        }

        let main = compileChain([(Endpoint(node: output, bus: 0), format.channelCount)], roots: t.sinks, index: 0, inChain: false)
        return RenderSchedule(
            nodes: everything, callbacks: callbacks, steps: steps, chains: chains, inputs: inputs, outputs: outputs,
            output: inputs[main.start], silence: silence, prefetchPlan: prefetchPlan)
    }

    // MARK: Helpers (control thread, lock held)

    private func inputFormat(_ t: Topology, _ id: NodeID, _ bus: Int) throws(AudioError) -> StreamFormat {
        if id == output {
            guard bus == 0 else { throw AudioError(.invalidBus, "the graph output has one input bus (0), not \(bus)") }
            return format
        }
        guard let r = t.nodes[id] else { throw unknownNode(id) }
        guard r.unit.inputFormats.indices.contains(bus) else {
            throw AudioError(.invalidBus, "'\(r.name)' has no input bus \(bus) (it has \(r.unit.inputBusCount))")
        }
        return r.unit.inputFormats[bus]
    }

    /// A path `from → … → to` following connections downstream (source to consumer), or nil.
    private func pathDownstream(_ t: Topology, from: NodeID, to: NodeID) -> [NodeID]? {
        if from == to { return [to] }
        var consumers: [NodeID: [NodeID]] = [:]
        for (key, source) in t.sources {
            if case .node(let s) = source { consumers[s.node, default: []].append(key.node) }
        }
        var visited = Set<NodeID>()
        func dfs(_ n: NodeID) -> [NodeID]? {
            if n == to { return [n] }
            guard visited.insert(n).inserted else { return nil }
            for c in (consumers[n] ?? []).sorted(by: { $0.raw < $1.raw }) {
                if let rest = dfs(c) { return [n] + rest }
            }
            return nil
        }
        return dfs(from)
    }

    private func nameOf(_ t: Topology, _ id: NodeID) -> String { id == output ? "output" : t.nodes[id]?.name ?? "\(id)" }

    private func describe(_ t: Topology, _ source: Source) -> String {
        switch source {
        case .node(let e): "'\(nameOf(t, e.node))' output bus \(e.bus)"
        case .callback: "a render callback"
        }
    }

    private func unknownNode(_ id: NodeID) -> AudioError {
        AudioError(.invalidNode, id.graph == identity ? "\(id) is not in this graph (removed?)" : "\(id) belongs to another graph")
    }
}
