import AudioCore
import Synchronization

/// What one render call hands a unit: the frame count, the time stamp, and views of its input and output buses,
/// each exactly `frameCount` frames long. Inputs are read-only by convention; an unconnected input is silence.
///
/// A unit that pulls its input (``RenderUnit/pullsInput``) gets no rendered inputs: `inputs` is empty, and it
/// calls ``pull(frames:)`` for as many input frames as it needs, as often as it needs, at its inputs' own rate.
public struct RenderContext {
    /// Frames to render this call, 0 … the spec's `maximumFrames`; every view is this long.
    public let frameCount: Int
    /// When the call's first frame is: its sample time (frames since the stream started) and host time (0 offline).
    public let timeStamp: RenderTimeStamp
    /// One view per input bus, in bus order (empty for a unit that pulls its input). Read-only by convention.
    public let inputs: UnsafeBufferPointer<BufferView>
    /// One view per output bus, in bus order: the unit writes every frame of each.
    public let outputs: UnsafeBufferPointer<BufferView>
    /// The schedule and chain that render a pulling unit's inputs (nil for other units).
    let puller: Puller?

    /// Unretained: the schedule renders the unit, and keeps it alive, for as long as the context exists.
    struct Puller {
        let schedule: Unmanaged<RenderSchedule>
        let chain: Int
        let unit: Unmanaged<UnitCore>
    }

    /// Creates a context for calling a unit's ``RenderUnit/render(_:)`` directly, outside a graph (tests, a host
    /// of its own). Such a context cannot ``pull(frames:)``: a unit that pulls its input needs a graph.
    /// - Parameters:
    ///   - frameCount: frames to render; every view is exactly this long.
    ///   - timeStamp: the time stamp of the first frame.
    ///   - inputs: one view per input bus.
    ///   - outputs: one view per output bus, written by the unit.
    public init(
        frameCount: Int, timeStamp: RenderTimeStamp, inputs: UnsafeBufferPointer<BufferView>,
        outputs: UnsafeBufferPointer<BufferView>
    ) {
        self.init(frameCount: frameCount, timeStamp: timeStamp, inputs: inputs, outputs: outputs, puller: nil)
    }

    init(
        frameCount: Int, timeStamp: RenderTimeStamp, inputs: UnsafeBufferPointer<BufferView>,
        outputs: UnsafeBufferPointer<BufferView>, puller: Puller?
    ) {
        self.frameCount = frameCount
        self.timeStamp = timeStamp
        self.inputs = inputs
        self.outputs = outputs
        self.puller = puller
    }

    /// The view of input bus `bus` (`inputs[bus]`); the bus must exist.
    @inlinable public func input(_ bus: Int) -> BufferView { inputs[bus] }
    /// The view of output bus `bus` (`outputs[bus]`); the bus must exist.
    @inlinable public func output(_ bus: Int) -> BufferView { outputs[bus] }

    /// A pulling unit's inputs, rendered now for `frames` frames (1 … the graph's `maximumFrames`) at their own
    /// rate: one view per input bus, valid until the next pull or the end of this render call. The inputs' sample
    /// time counts the frames pulled since the unit was reset. Render thread; never allocates.
    /// - Precondition: the unit pulls its input.
    public func pull(frames: Int) -> UnsafeBufferPointer<BufferView> {
        guard let puller else { preconditionFailure("pull(frames:) is for units whose pullsInput is true") }
        let time = puller.unit._withUnsafeGuaranteedRef { core in
            defer { core.rendering.onRenderThread.pulledFrames += Int64(frames) }
            return RenderTimeStamp(sampleTime: core.rendering.onRenderThread.pulledFrames, hostTime: timeStamp.hostTime)
        }
        return puller.schedule._withUnsafeGuaranteedRef { $0.runChain(puller.chain, frames: frames, timeStamp: time) }
    }
}

/// A property value, for the string-keyed property interface units share.
public enum PropertyValue: Hashable, Sendable, CustomStringConvertible {
    /// A switch, such as `"bypass"`.
    case bool(Bool)
    /// A count or size, such as `"maximumFramesPerSlice"` or `"inputBusCount"`.
    case int(Int)
    /// A real number, such as `"latency"` or `"tailTime"` in seconds.
    case double(Double)
    /// Text, such as `"kind"`.
    case string(String)
    /// A bus's stream format, such as `"inputFormat.0"`.
    case format(StreamFormat)

    public var description: String {
        switch self {
        case .bool(let v): "\(v)"
        case .int(let v): "\(v)"
        case .double(let v): "\(v)"
        case .string(let v): v
        case .format(let v): "\(v)"
        }
    }
}

/// A unit's base: what every unit has, whatever it computes — numbered input and output buses with a format
/// each, parameters, the bypass switch, the spec it was prepared with, and what the render thread keeps of the
/// base between cycles. A unit creates one in its initialiser and answers it as ``RenderUnit/core``.
///
/// Thread safety: checked `Sendable`. The formats and parameters never change; the bypass switch and the graph's
/// flags are atomics; the spec is under a lock (never read on a render thread); the render state is handed between
/// the control side and the render thread by the graph (``/AudioCore/RenderThreadBound``).
public final class UnitCore: Sendable {
    /// The unit's type name, as written in graph files (`"gain"`, `"mixer"`, …).
    public let kind: String
    /// One format per input bus, in bus order; fixed when the unit is created.
    public let inputFormats: [StreamFormat]
    /// One format per output bus, in bus order; fixed when the unit is created.
    public let outputFormats: [StreamFormat]
    /// The unit's parameters, in the order the unit created them.
    public let parameters: [Parameter]
    let bypassFlag = Atomic<Bool>(false)
    /// Set by the graph that holds the unit; a unit belongs to one graph at a time.
    let membership = Atomic<Bool>(false)
    /// Set by the graph when the unit feeds a pulling unit.
    let pulledChainFlag = Atomic<Bool>(false)

    /// The spec the unit was prepared with, or nil before ``RenderUnit/prepare(_:)``: written by prepare, read by any
    /// thread but a render thread (a graph's latency, a property read while the device runs).
    let preparedSpec = Locked<RenderSpec?>(nil)

    /// What the render thread keeps of the base unit between cycles.
    struct RenderState {
        /// Where the bypass crossfade stands, 0 (processing) … `bypassFadeFrames` (bypassed).
        var bypassPosition = 0
        var bypassFadeFrames = 480
        /// Input frames a pulling unit has pulled since it was reset (its inputs' sample time).
        var pulledFrames: Int64 = 0
    }

    /// The render thread's while the unit renders; the control side's in ``RenderUnit/prepare(_:)`` and the
    /// graph's reset.
    let rendering = RenderThreadBound(RenderState())

    /// Seconds the bypass crossfade takes.
    public static let bypassFadeTime = 0.01

    /// Creates a unit's base with its buses and parameters, not bypassed.
    /// - Parameters:
    ///   - kind: the unit's type name (graph files, messages).
    ///   - inputs: one format per input bus.
    ///   - outputs: one format per output bus.
    ///   - parameters: the unit's parameters, created by the unit (owner: `kind`) so it can keep references.
    public init(kind: String, inputs: [StreamFormat], outputs: [StreamFormat], parameters: [Parameter] = []) {
        self.kind = kind
        inputFormats = inputs
        outputFormats = outputs
        self.parameters = parameters
    }
}

/// What every unit is: a ``UnitCore`` (buses, parameters, bypass), the lifecycle `prepare(spec)` → `render` →
/// `reset`, and the hooks a unit implements — ``allocateRenderResources(_:)`` (allocate everything render
/// needs), ``render(_:)`` (the real-time kernel) and ``reset()`` (clear state). Every hook has a default, so a unit
/// implements only what it needs. Bus formats are fixed when the unit is created.
///
/// Units are final classes, checked `Sendable`: their render-thread state lives in a
/// ``/AudioCore/RenderThreadBound`` (the type, not a comment, says which thread owns it), their control state in
/// atomics or locks, the rest in constants.
///
/// Thread safety: ``render(_:)`` is called from the render thread only, and must not allocate, lock, log or do
/// I/O. Parameters and ``isBypassed`` may be set from any thread. Everything else is control-thread API.
public protocol RenderUnit: AnyObject, Sendable {
    /// The unit's base: buses, parameters, bypass.
    var core: UnitCore { get }

    /// Seconds by which the output lags the input (lookahead, filters with delay). 0 by default.
    var latency: Double { get }
    /// Seconds the output keeps sounding after the input falls silent (reverb, delay). 0 by default.
    var tailTime: Double { get }

    /// True for units that consume another number of input frames than they produce — a sample-rate converter,
    /// a time-stretcher: instead of rendered inputs, they pull their inputs themselves
    /// (``RenderContext/pull(frames:)``), and their inputs may run at another rate than their outputs. The nodes
    /// upstream of such a unit render at their own rate, when it pulls. Such units have no bypass crossfade (their
    /// input and output do not line up). False by default.
    var pullsInput: Bool { get }

    /// Output frames per input frame: 1 for most units; for a unit that pulls its input, its rate ratio (output
    /// rate over input rate), times what it does to time (a time-stretcher's speed, inverted). Control thread;
    /// used to say how long a render of a file through the unit lasts. By default the rate ratio of a pulling
    /// unit's first buses, else 1.
    var outputFramesPerInputFrame: Double { get }

    /// Names of the properties ``property(_:)`` answers: by default the common ones (``commonPropertyNames``).
    var propertyNames: [String] { get }

    /// Reads a property by name (`"latency"`, `"outputFormat.0"`, …). Control thread. By default the common
    /// properties (``commonProperty(_:)``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidProperty` for an unknown name.
    func property(_ name: String) throws(AudioError) -> PropertyValue

    /// Writes a property by name. Control thread. By default the common writable property, `"bypass"`
    /// (``setCommonProperty(_:_:)``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidProperty` for an unknown or read-only name or a value of the
    ///   wrong kind.
    func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError)

    /// Hook of ``prepare(_:)``: allocate buffers, compute coefficients. Control thread. Nothing by default.
    func allocateRenderResources(_ spec: RenderSpec) throws(AudioError)

    /// Clears the unit's state (delay lines, phases, envelopes) and jumps parameters to their targets.
    /// Control thread, never while rendering. Nothing by default.
    func reset()

    /// What the host promises about the cycles to come, before they begin (control thread, never while rendering):
    /// ``RenderingMode/offline`` or real-time cycles of at most so many frames. A unit whose latency depends on that
    /// says so in ``latency`` afterwards. Units that have never been told assume ``RenderingMode/offline``, so a host
    /// that renders in real time must tell them: ``RenderGraph/willRender(_:)`` tells every unit (the I/O unit does
    /// it for the graphs it runs). Nothing by default.
    func willRender(_ mode: RenderingMode)

    /// Renders `context.frameCount` frames (0 … spec.maximumFrames) into the output views.
    /// Render thread only: no allocation, lock, logging or I/O. Silence by default.
    func render(_ context: RenderContext)

    /// True for units whose data a reader must fetch ahead of the render thread (files): a ``ReadAheadWorker``,
    /// or an ``OfflineRenderer`` without one before each cycle, calls ``prefetch(frames:)``, so no I/O happens in
    /// ``render(_:)``. False by default.
    var prefetchesAhead: Bool { get }

    /// Makes at least `frames` frames (or everything up to the end) ready for the next render call.
    /// Reader or offline-caller thread; may do I/O; must not allocate per call.
    func prefetch(frames: Int) throws(AudioError)

    /// True when the next render call can take `frames` frames without running dry, or the data has ended.
    /// Render-side thread (the one that renders, or an offline renderer before its cycle); never blocks.
    func isReadyAhead(frames: Int) -> Bool

    /// True when a reader has room to fetch a worthwhile amount (half its buffer or more) and data is left.
    /// Render-side thread; never blocks.
    var wantsReadAhead: Bool { get }
}

// MARK: Defaults of the hooks

extension RenderUnit {
    public var latency: Double { 0 }
    public var tailTime: Double { 0 }
    public var pullsInput: Bool { false }
    public var outputFramesPerInputFrame: Double {
        guard pullsInput, let input = inputFormats.first?.sampleRate, let output = outputFormats.first?.sampleRate else { return 1 }
        return output / input
    }
    public var propertyNames: [String] { commonPropertyNames }
    public func property(_ name: String) throws(AudioError) -> PropertyValue { try commonProperty(name) }
    public func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError) { try setCommonProperty(name, value) }
    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {}
    public func reset() {}
    public func willRender(_ mode: RenderingMode) {}
    public func render(_ context: RenderContext) {
        for o in context.outputs { o.clear() }
    }
    public var prefetchesAhead: Bool { false }
    public func prefetch(frames: Int) throws(AudioError) {}
    public func isReadyAhead(frames: Int) -> Bool { true }
    public var wantsReadAhead: Bool { false }
}

// MARK: What every unit has

extension RenderUnit {
    /// The unit's type name, as written in graph files (`"gain"`, `"mixer"`, …).
    public var kind: String { core.kind }
    /// One format per input bus, in bus order (``UnitCore/inputFormats``). Any thread.
    public var inputFormats: [StreamFormat] { core.inputFormats }
    /// One format per output bus, in bus order (``UnitCore/outputFormats``). Any thread.
    public var outputFormats: [StreamFormat] { core.outputFormats }
    /// The unit's parameters (``UnitCore/parameters``). Any thread reads this and may set the parameters.
    public var parameters: [Parameter] { core.parameters }
    /// The number of input buses. Any thread.
    public var inputBusCount: Int { core.inputFormats.count }
    /// The number of output buses. Any thread.
    public var outputBusCount: Int { core.outputFormats.count }
    /// The spec the unit was prepared with, or nil before ``prepare(_:)``. Any thread but a render thread (it locks).
    public var spec: RenderSpec? { core.preparedSpec.withLock { $0 } }

    // MARK: Parameters

    /// The parameter with this identifier.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` listing the unit's parameters when there is none.
    public func parameter(_ identifier: String) throws(AudioError) -> Parameter {
        guard let p = parameters.first(where: { $0.identifier == identifier }) else {
            let known = parameters.map(\.identifier).joined(separator: ", ")
            throw AudioError(
                .invalidParameter,
                "\(kind) has no parameter '\(identifier)'" + (known.isEmpty ? "" : " (it has: \(known))"))
        }
        return p
    }

    /// Sets a parameter from any thread; the render thread ramps to it.
    public func setParameter(_ identifier: String, _ value: Float) throws(AudioError) {
        try parameter(identifier).set(value)
    }

    // MARK: Bypass

    /// When true, each input bus is passed to the output bus of the same number bit for bit (silence for outputs
    /// without an input). Settable from any thread. The switch crossfades between the processed and the
    /// unprocessed signal over ``UnitCore/bypassFadeTime``, so it never clicks. The unit keeps rendering
    /// underneath (its output unused), so its state stays current for when bypass ends.
    public var isBypassed: Bool {
        get { core.bypassFlag.load(ordering: .relaxed) }
        set { core.bypassFlag.store(newValue, ordering: .relaxed) }
    }

    // MARK: Rates

    /// The rate the unit runs at: its outputs' (or, with none, its inputs'), or nil for a unit with no buses.
    public var busSampleRate: Double? { outputFormats.first?.sampleRate ?? inputFormats.first?.sampleRate }

    // MARK: Properties

    /// The properties every unit answers: `kind`, `latency`, `tailTime`, `bypass`, `maximumFramesPerSlice`,
    /// `inputBusCount`, `outputBusCount`, `inputFormat.N`, `outputFormat.N`.
    public var commonPropertyNames: [String] {
        ["kind", "latency", "tailTime", "bypass", "maximumFramesPerSlice", "inputBusCount", "outputBusCount"]
            + inputFormats.indices.map { "inputFormat.\($0)" } + outputFormats.indices.map { "outputFormat.\($0)" }
    }

    /// Reads one of the properties every unit has (``commonPropertyNames``). A unit with properties of its own
    /// answers them in ``property(_:)`` and hands the rest to this.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidProperty` for an unknown name, listing ``propertyNames``.
    public func commonProperty(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "kind": return .string(kind)
        case "latency": return .double(latency)
        case "tailTime": return .double(tailTime)
        case "bypass": return .bool(isBypassed)
        case "maximumFramesPerSlice": return .int(spec?.maximumFrames ?? 0)
        case "inputBusCount": return .int(inputBusCount)
        case "outputBusCount": return .int(outputBusCount)
        default:
            if let bus = busIndex(name, prefix: "inputFormat."), inputFormats.indices.contains(bus) {
                return .format(inputFormats[bus])
            }
            if let bus = busIndex(name, prefix: "outputFormat."), outputFormats.indices.contains(bus) {
                return .format(outputFormats[bus])
            }
            throw AudioError(
                .invalidProperty, "\(kind) has no property '\(name)' (it has: \(propertyNames.joined(separator: ", ")))")
        }
    }

    /// Writes the one writable property every unit has, `"bypass"`. A unit with writable properties of its own
    /// handles them in ``setProperty(_:_:)`` and hands the rest to this.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidProperty` for an unknown or read-only name or a value of the
    ///   wrong kind.
    public func setCommonProperty(_ name: String, _ value: PropertyValue) throws(AudioError) {
        if name == "bypass" {
            guard case .bool(let on) = value else {
                throw AudioError(.invalidProperty, "\(kind): property 'bypass' takes a bool, got \(value)")
            }
            isBypassed = on
            return
        }
        if propertyNames.contains(name) {
            throw AudioError(.invalidProperty, "\(kind): property '\(name)' is read-only")
        }
        throw AudioError(.invalidProperty, "\(kind) has no property '\(name)'")
    }

    private func busIndex(_ name: String, prefix: String) -> Int? {
        name.hasPrefix(prefix) ? Int(name.dropFirst(prefix.count)) : nil
    }

    // MARK: Lifecycle

    /// Allocates what rendering needs for `spec`. Control thread. Preparing again with the same spec does nothing;
    /// with another spec, resources are reallocated and state is reset.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` when a bus's rate differs from `spec`'s, or what
    ///   the unit's ``allocateRenderResources(_:)`` throws.
    public func prepare(_ spec: RenderSpec) throws(AudioError) {
        if self.spec == spec { return }
        // A pulling unit's inputs run at their own rate.
        for f in (pullsInput ? [] : inputFormats) + outputFormats where f.sampleRate != spec.sampleRate {
            throw AudioError(
                .unsupportedSampleRate,
                "\(kind) runs at \(formatHz(f.sampleRate)) but the graph runs at \(formatHz(spec.sampleRate))")
        }
        // The spec is visible to allocateRenderResources (rampFrames(for:) reads its rate); a failure takes it back.
        let previous = self.spec
        core.preparedSpec.withLock { $0 = spec }
        do throws(AudioError) {
            try allocateRenderResources(spec)
        } catch {
            core.preparedSpec.withLock { $0 = previous }
            throw error
        }
        let fade = max(1, Int((UnitCore.bypassFadeTime * spec.sampleRate).rounded()))
        core.rendering.whileStopped = .init(bypassPosition: isBypassed ? fade : 0, bypassFadeFrames: fade, pulledFrames: 0)
        reset()
    }

    // MARK: Reading ahead

    /// True when the unit feeds a pulling unit (a time-pitch, a converter), whose cycles take as many of its frames
    /// as its rate and look-ahead ask: a reader then keeps it full rather than a cycle ahead. Set by the graph
    /// when it compiles a schedule; any thread reads it.
    public var isReadInPulledChain: Bool { core.pulledChainFlag.load(ordering: .relaxed) }

    /// Ramp length in frames for a parameter's smoothing time at the prepared sample rate.
    public func rampFrames(for parameter: Parameter) -> Int {
        Int((parameter.spec.smoothingTime * (spec?.sampleRate ?? 48_000)).rounded())
    }
}

/// Units that produce audio from something finite (a file) report when it has ended.
public protocol FiniteSource: AnyObject {
    /// Frames the source plays in all, or nil when unknown or endless.
    var totalFrames: Int64? { get }
    /// True once every frame has been rendered. Any thread.
    var hasFinished: Bool { get }
}

/// What a host promises of the cycles to come (``RenderUnit/willRender(_:)``, ``RenderGraph/willRender(_:)``).
public enum RenderingMode: Hashable, Sendable {
    /// No deadline: offline rendering, a virtual device run as fast as it goes. A unit that hands work to a thread
    /// of its own may wait for it, so the output does not depend on how fast that thread was.
    case offline
    /// Cycles on a real-time thread with a deadline, of at most `maximumCycleFrames` frames: nothing may wait.
    case realTime(maximumCycleFrames: Int)

    /// The largest real-time cycle; nil offline.
    public var maximumCycleFrames: Int? {
        if case .realTime(let frames) = self { frames } else { nil }
    }
}
