import AudioCore
import Synchronization

/// What one render call hands a unit: the frame count, the time stamp, and views of its input and output buses,
/// each exactly `frameCount` frames long. Inputs are read-only by convention; an unconnected input is silence.
///
/// A unit that pulls its input (``RenderUnit/pullsInput``) gets no rendered inputs: `inputs` is empty, and it
/// calls ``pull(frames:)`` for as many input frames as it needs, as often as it needs, at its inputs' own rate.
public struct RenderContext {
    public let frameCount: Int
    public let timeStamp: RenderTimeStamp
    public let inputs: UnsafeBufferPointer<BufferView>
    public let outputs: UnsafeBufferPointer<BufferView>
    /// The schedule and chain that render a pulling unit's inputs (nil for other units).
    let puller: Puller?

    /// Unretained: the schedule renders the unit, and keeps it alive, for as long as the context exists.
    struct Puller {
        let schedule: Unmanaged<RenderSchedule>
        let chain: Int
        let unit: Unmanaged<RenderUnit>
    }

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

    @inlinable public func input(_ bus: Int) -> BufferView { inputs[bus] }
    @inlinable public func output(_ bus: Int) -> BufferView { outputs[bus] }

    /// A pulling unit's inputs, rendered now for `frames` frames (1 … the graph's `maximumFrames`) at their own
    /// rate: one view per input bus, valid until the next pull or the end of this render call. The inputs' sample
    /// time counts the frames pulled since the unit was reset. Render thread; never allocates.
    /// - Precondition: the unit pulls its input.
    public func pull(frames: Int) -> UnsafeBufferPointer<BufferView> {
        guard let puller else { preconditionFailure("pull(frames:) is for units whose pullsInput is true") }
        let time = puller.unit._withUnsafeGuaranteedRef { unit in
            defer { unit.rendering.onRenderThread.pulledFrames += Int64(frames) }
            return RenderTimeStamp(sampleTime: unit.rendering.onRenderThread.pulledFrames, hostTime: timeStamp.hostTime)
        }
        return puller.schedule._withUnsafeGuaranteedRef { $0.runChain(puller.chain, frames: frames, timeStamp: time) }
    }
}

/// A property value, for the string-keyed property interface units share.
public enum PropertyValue: Hashable, Sendable, CustomStringConvertible {
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
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

/// The base of every unit: numbered input and output buses with a format each, parameters, properties, and the
/// lifecycle `prepare(spec)` → `render` → `reset`.
///
/// Subclasses override ``allocateRenderResources(_:)`` (allocate everything render needs), ``render(_:)`` (the
/// real-time kernel) and ``reset()`` (clear state). Bus formats are fixed when the unit is created.
///
/// Thread safety: ``render(_:)`` is called from the render thread only, and must not allocate, lock, log or do
/// I/O. Parameters and ``isBypassed`` may be set from any thread. Everything else is control-thread API.
open class RenderUnit: @unchecked Sendable {
    // Unchecked Sendable: an open class cannot be checked; its own render state is in `rendering`, `spec` set by prepare
    /// The unit's type name, as written in graph files (`"gain"`, `"mixer"`, …).
    public let kind: String
    public let inputFormats: [StreamFormat]
    public let outputFormats: [StreamFormat]
    public let parameters: [Parameter]
    /// The spec the unit was prepared with, or nil before ``prepare(_:)``.
    public private(set) var spec: RenderSpec?
    private let bypassFlag = Atomic<Bool>(false)
    /// Set by the graph that holds the unit; a unit belongs to one graph at a time.
    let membership = Atomic<Bool>(false)
    /// What the render thread keeps of the base unit between cycles.
    struct RenderState {
        /// Where the bypass crossfade stands, 0 (processing) … `bypassFadeFrames` (bypassed).
        var bypassPosition = 0
        var bypassFadeFrames = 480
        /// Input frames a pulling unit has pulled since it was reset (its inputs' sample time).
        var pulledFrames: Int64 = 0
    }

    /// The render thread's while the unit renders; the control side's in ``prepare(_:)`` and the graph's reset.
    let rendering = RenderThreadBound(RenderState())

    /// - Parameters:
    ///   - kind: the unit's type name (graph files, messages).
    ///   - inputs: one format per input bus; `outputs` likewise.
    ///   - parameters: the unit's parameters, created by the subclass (owner: `kind`) so it can keep references.
    public init(kind: String, inputs: [StreamFormat], outputs: [StreamFormat], parameters: [Parameter] = []) {
        self.kind = kind
        inputFormats = inputs
        outputFormats = outputs
        self.parameters = parameters
    }

    public var inputBusCount: Int { inputFormats.count }
    public var outputBusCount: Int { outputFormats.count }

    // MARK: Parameters

    /// The parameter with this identifier.
    /// - Throws: ``AudioError`` `.invalidParameter` listing the unit's parameters when there is none.
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

    // MARK: Bypass, latency, tail

    /// When true, each input bus is passed to the output bus of the same number bit for bit (silence for outputs
    /// without an input). Settable from any thread. The switch crossfades between the processed and the
    /// unprocessed signal over ``bypassFadeTime``, so it never clicks. The unit keeps rendering underneath (its
    /// output unused), so its state stays current for when bypass ends.
    public var isBypassed: Bool {
        get { bypassFlag.load(ordering: .relaxed) }
        set { bypassFlag.store(newValue, ordering: .relaxed) }
    }

    /// Seconds the bypass crossfade takes.
    public static let bypassFadeTime = 0.01

    /// Seconds by which the output lags the input (lookahead, filters with delay). 0 by default.
    open var latency: Double { 0 }

    // MARK: Rates

    /// True for units that consume another number of input frames than they produce — a sample-rate converter,
    /// a time-stretcher: instead of rendered inputs, they pull their inputs themselves (``RenderContext/pull(frames:)``),
    /// and their inputs may run at another rate than their outputs. The nodes upstream of such a unit render at
    /// their own rate, when it pulls. Such units have no bypass crossfade (their input and output do not line up).
    open var pullsInput: Bool { false }

    /// Output frames per input frame: 1 for most units; for a unit that pulls its input, its rate ratio (output
    /// rate over input rate), times what it does to time (a time-stretcher's speed, inverted). Control thread;
    /// used to say how long a render of a file through the unit lasts.
    open var outputFramesPerInputFrame: Double {
        guard pullsInput, let input = inputFormats.first?.sampleRate, let output = outputFormats.first?.sampleRate else { return 1 }
        return output / input
    }

    /// The rate the unit runs at: its outputs' (or, with none, its inputs'), or nil for a unit with no buses.
    public var busSampleRate: Double? { outputFormats.first?.sampleRate ?? inputFormats.first?.sampleRate }
    /// Seconds the output keeps sounding after the input falls silent (reverb, delay). 0 by default.
    open var tailTime: Double { 0 }

    // MARK: Properties

    /// Names of the properties ``property(_:)`` answers: the common ones plus the unit's own.
    open var propertyNames: [String] {
        ["kind", "latency", "tailTime", "bypass", "maximumFramesPerSlice", "inputBusCount", "outputBusCount"]
            + inputFormats.indices.map { "inputFormat.\($0)" } + outputFormats.indices.map { "outputFormat.\($0)" }
    }

    /// Reads a property by name (`"latency"`, `"outputFormat.0"`, …). Control thread.
    /// - Throws: ``AudioError`` `.invalidProperty` for an unknown name.
    open func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "kind": return .string(kind)
        case "latency": return .double(latency)
        case "tailTime": return .double(tailTime)
        case "bypass": return .bool(isBypassed)
        case "maximumFramesPerSlice": return .int(spec?.maximumFrames ?? 0)
        case "inputBusCount": return .int(inputBusCount)
        case "outputBusCount": return .int(outputBusCount)
        default:
            if let bus = Self.busIndex(name, prefix: "inputFormat."), inputFormats.indices.contains(bus) {
                return .format(inputFormats[bus])
            }
            if let bus = Self.busIndex(name, prefix: "outputFormat."), outputFormats.indices.contains(bus) {
                return .format(outputFormats[bus])
            }
            throw AudioError(
                .invalidProperty, "\(kind) has no property '\(name)' (it has: \(propertyNames.joined(separator: ", ")))")
        }
    }

    /// Writes a property by name. The common writable property is `"bypass"`. Control thread.
    /// - Throws: ``AudioError`` `.invalidProperty` for an unknown or read-only name or a value of the wrong kind.
    open func setProperty(_ name: String, _ value: PropertyValue) throws(AudioError) {
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

    private static func busIndex(_ name: String, prefix: String) -> Int? {
        name.hasPrefix(prefix) ? Int(name.dropFirst(prefix.count)) : nil
    }

    // MARK: Lifecycle

    /// Allocates what rendering needs for `spec`. Control thread. Preparing again with the same spec does nothing;
    /// with another spec, resources are reallocated and state is reset.
    /// - Throws: ``AudioError`` `.unsupportedSampleRate` when a bus's rate differs from `spec`'s, or what the
    ///   subclass throws.
    public final func prepare(_ spec: RenderSpec) throws(AudioError) {
        if self.spec == spec { return }
        // A pulling unit's inputs run at their own rate.
        for f in (pullsInput ? [] : inputFormats) + outputFormats where f.sampleRate != spec.sampleRate {
            throw AudioError(
                .unsupportedSampleRate,
                "\(kind) runs at \(formatHz(f.sampleRate)) but the graph runs at \(formatHz(spec.sampleRate))")
        }
        // The spec is visible to allocateRenderResources (rampFrames(for:) reads its rate); a failure takes it back.
        let previous = self.spec
        self.spec = spec
        do throws(AudioError) {
            try allocateRenderResources(spec)
        } catch {
            self.spec = previous
            throw error
        }
        let fade = max(1, Int((Self.bypassFadeTime * spec.sampleRate).rounded()))
        rendering.whileStopped = RenderState(bypassPosition: isBypassed ? fade : 0, bypassFadeFrames: fade, pulledFrames: 0)
        reset()
    }

    /// Subclass hook of ``prepare(_:)``: allocate buffers, compute coefficients. Control thread.
    open func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {}

    /// Clears the unit's state (delay lines, phases, envelopes) and jumps parameters to their targets.
    /// Control thread, never while rendering.
    open func reset() {}

    /// What the host promises about the cycles to come, before they begin (control thread, never while rendering):
    /// ``RenderingMode/offline`` or real-time cycles of at most so many frames. A unit whose latency depends on that
    /// says so in ``latency`` afterwards. Units that have never been told assume ``RenderingMode/offline``, so a host
    /// that renders in real time must tell them: ``RenderGraph/willRender(_:)`` tells every unit (the I/O unit does
    /// it for the graphs it runs).
    open func willRender(_ mode: RenderingMode) {}

    /// Renders `context.frameCount` frames (0 … spec.maximumFrames) into the output views.
    /// Render thread only: no allocation, lock, logging or I/O.
    open func render(_ context: RenderContext) {
        for o in context.outputs { o.clear() }
    }

    /// Renders through the bypass switch: the unit's output, the input (bit-exact), or a linear crossfade from one
    /// to the other while the switch moves. The unit renders underneath even while bypassed, so its state (delay
    /// lines, envelopes, a lookahead) stays current and switching back is as seamless as switching away.
    /// Render thread; called by the graph's schedule.
    public final func renderWithBypass(_ context: RenderContext) {
        if pullsInput {
            render(context)
            return
        }
        let bypassFadeFrames = rendering.onRenderThread.bypassFadeFrames
        let bypassPosition = rendering.onRenderThread.bypassPosition
        let wanted = isBypassed ? bypassFadeFrames : 0
        render(context)
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
                    y[i] = a == 1 ? d : y[i] + (d - y[i]) * a
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

    // MARK: Reading ahead

    /// True for units whose data a reader must fetch ahead of the render thread (files): a ``ReadAheadWorker``,
    /// or an ``OfflineRenderer`` without one before each cycle, calls ``prefetch(frames:)``, so no I/O happens in
    /// ``render(_:)``.
    open var prefetchesAhead: Bool { false }

    /// Makes at least `frames` frames (or everything up to the end) ready for the next render call.
    /// Reader or offline-caller thread; may do I/O; must not allocate per call.
    open func prefetch(frames: Int) throws(AudioError) {}

    /// True when the next render call can take `frames` frames without running dry, or the data has ended.
    /// Render-side thread (the one that renders, or an offline renderer before its cycle); never blocks.
    open func isReadyAhead(frames: Int) -> Bool { true }

    /// True when the unit feeds a pulling unit (a time-pitch, a converter), whose cycles take as many of its frames
    /// as its rate and look-ahead ask: a reader then keeps it full rather than a cycle ahead. Set by the graph
    /// when it compiles a schedule; any thread reads it.
    public var isReadInPulledChain: Bool { pulledChainFlag.load(ordering: .relaxed) }
    let pulledChainFlag = Atomic<Bool>(false)

    /// True when a reader has room to fetch a worthwhile amount (half its buffer or more) and data is left.
    /// Render-side thread; never blocks.
    open var wantsReadAhead: Bool { false }

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
