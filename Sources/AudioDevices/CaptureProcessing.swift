import AudioCore
import AudioGraph
import Synchronization

/// What a unit on the capture bus (``IOUnit/setCaptureProcessor(_:reference:)``) is given on its input bus 1.
public enum CaptureReference: Sendable, Equatable {
    /// What the output bus plays: the graph's (or the client callback's) output, at the client's rate, as it goes to
    /// the device. Each cycle's capture is processed against the output rendered up to the cycle before, which
    /// leaves the device later still; a voice-processing unit finds the rest of the delay itself.
    case outputBus
    /// Silence: a unit used for its noise suppression or gain control only, or a unit that takes no reference.
    case none
    /// What a ``CaptureReferenceTap`` in the output graph passes, each cycle as it renders: a bus of the graph's
    /// choosing — the accompaniment alone, say, so the echo canceller is referenced to exactly what of the song is
    /// played and not to the voice the singer hears back. Silence in a cycle the graph does not render.
    case graphTap
}

/// A unit between the capture and everything that consumes it (the capture handler, the input unit of the output
/// graph): the VoiceProcessingIO role. The unit runs in a graph of its own, its bus 0 fed with the capture and its
/// bus 1 (when it has one) with the reference, on the device's thread, before the output graph renders.
///
/// Thread safety: made and started on the control thread while the I/O unit is stopped; ``process(_:timeStamp:)``
/// and ``played(_:)`` on the device thread only.
final class CaptureProcessing: Sendable {
    let unit: RenderUnit
    let reference: CaptureReference
    private let graph: RenderGraph
    private let microphone: InputUnit
    private let referenceFeed: InputUnit?
    /// What the output bus played, not yet given to the unit (reference channels).
    private let fifo: FrameRingBuffer?
    private let referenceScratch: PCMBuffer
    private let playedScratch: PCMBuffer
    private let processed: PCMBuffer
    /// Frames of reference missing when a capture needed them (silence instead), and played frames dropped because
    /// the capture took none for a while. Device thread writes, anyone reads.
    let referenceShortfalls = Atomic<Int>(0)
    let referenceDrops = Atomic<Int>(0)
    /// The most frames one cycle may bring.
    let maximumFrames: Int
    /// Frames a ``CaptureReferenceTap`` gave in the cycle under way (``CaptureReference/graphTap``): one block a cycle
    /// is taken, and a cycle without one puts silence in its place, so the reference keeps its lag. Device thread.
    private let tappedFrames = Atomic<Int>(0)
    /// The unit's latency in nanoseconds, as of the last ``willRender(_:largestCycle:)``.
    var latencyNanoseconds: UInt64 { latencyBits.load(ordering: .relaxed) }
    private let latencyBits = Atomic<UInt64>(0)

    /// - Throws: ``AudioError`` `.formatMismatch` when the unit's input bus 0 or output bus 0 is not the capture's
    ///   rate and channel count, `.invalidBus` when it has no input or more than two.
    init(unit: RenderUnit, captureFormat: StreamFormat, maximumFrames: Int, reference: CaptureReference)
        throws(AudioError)
    {
        guard (1...2).contains(unit.inputFormats.count), unit.outputFormats.count >= 1 else {
            throw AudioError(
                .invalidBus,
                "a capture processor takes the capture on input bus 0 and, optionally, a reference on input bus 1; "
                    + "'\(unit.kind)' has \(unit.inputFormats.count) inputs and \(unit.outputFormats.count) outputs")
        }
        for (what, f) in [("input bus 0", unit.inputFormats[0]), ("output bus 0", unit.outputFormats[0])] {
            guard f.sampleRate == captureFormat.sampleRate, f.channelCount == captureFormat.channelCount else {
                throw AudioError(
                    .formatMismatch,
                    "the capture processor's \(what) is \(f.channelCount) ch at \(formatHz(f.sampleRate)) but the capture "
                        + "is \(captureFormat.channelCount) ch at \(formatHz(captureFormat.sampleRate))")
            }
        }
        self.unit = unit
        self.reference = reference
        graph = try RenderGraph(format: unit.outputFormats[0], maximumFrames: maximumFrames)
        microphone = try InputUnit(sampleRate: captureFormat.sampleRate, channelCount: captureFormat.channelCount)
        let node = try graph.addNode(unit, name: "captureProcessor")
        try graph.connect(try graph.addNode(microphone, name: "capture"), to: node, inputBus: 0)
        let referenceChannels = unit.inputFormats.count > 1 ? unit.inputFormats[1].channelCount : 1
        if unit.inputFormats.count > 1 {
            let feed = try InputUnit(sampleRate: captureFormat.sampleRate, channelCount: referenceChannels)
            try graph.connect(try graph.addNode(feed, name: "reference"), to: node, inputBus: 1)
            referenceFeed = feed
            fifo = reference == .none ? nil : FrameRingBuffer(channelCount: referenceChannels, capacity: 4 * maximumFrames)
        } else {
            referenceFeed = nil
            fifo = nil
        }
        try graph.connect(node, to: graph.output)
        referenceScratch = PCMBuffer(channelCount: referenceChannels, capacity: maximumFrames)
        playedScratch = PCMBuffer(channelCount: referenceChannels, capacity: maximumFrames)
        processed = PCMBuffer(channelCount: captureFormat.channelCount, capacity: maximumFrames)
        self.maximumFrames = maximumFrames
    }

    /// Seconds the unit delays the capture.
    var latency: Double { graph.latency }

    /// Prepares the graph (its first time: the unit's resources) and empties the reference. Control thread, while
    /// the device is stopped.
    func start() throws(AudioError) {
        if graph.state == .uninitialized { try graph.initialize() }
        if graph.state == .initialized { try graph.start() }
        fifo?.reset()
    }

    /// Tells the unit what the cycles will be (see ``RenderGraph/willRender(_:)``), and puts the largest
    /// cycle's worth of silence in the reference: each cycle takes its capture's frames before its playback's go in,
    /// so the reference then never runs short whatever the cycles' sizes, and keeps one lag. Control thread, while
    /// the device is stopped.
    func willRender(_ mode: RenderingMode, largestCycle: Int) {
        graph.willRender(mode)
        latencyBits.store(UInt64(latency * 1e9), ordering: .relaxed)
        guard let fifo else { return }
        fifo.reset()
        let silence = referenceScratch.view(frames: min(largestCycle, referenceScratch.capacity))
        silence.clear()
        fifo.write(silence)
    }

    /// The capture through the unit; the view is valid until the next call. Device thread.
    func process(_ captured: BufferView, timeStamp: RenderTimeStamp) -> BufferView {
        let frames = captured.frameCount
        let out = processed.view(frames: frames)
        let referenceView = referenceScratch.view(frames: frames)
        if let fifo {
            let got = fifo.read(into: referenceView)
            if got < frames {
                referenceView.slice(from: got, frames: frames - got).clear()
                referenceShortfalls.add(frames - got, ordering: .relaxed)
            }
        } else {
            referenceView.clear()
        }
        let graph = graph
        let referenceFeed = referenceFeed
        let rendered =
            (try? microphone.feeding(captured) { () throws(AudioError) -> Bool in
                guard let referenceFeed else {
                    return graph.renderCycle(frames: frames, timeStamp: timeStamp) { out.copy(from: $0) }
                }
                return try referenceFeed.feeding(referenceView) { () throws(AudioError) -> Bool in
                    graph.renderCycle(frames: frames, timeStamp: timeStamp) { out.copy(from: $0) }
                }
            }) ?? false
        if !rendered { out.clear() }
        return out
    }

    /// What the output bus played this cycle, as the reference of the captures to come (with ``CaptureReference/outputBus``).
    /// Device thread.
    func played(_ output: BufferView) {
        switch reference {
        case .outputBus: push(output)
        case .graphTap: endTappedCycle(frames: output.frameCount)
        case .none: break
        }
    }

    /// What a ``CaptureReferenceTap`` passed this cycle (with ``CaptureReference/graphTap``); a second tap in the same
    /// cycle is ignored. Device thread.
    func tapped(_ block: BufferView) {
        guard reference == .graphTap, tappedFrames.load(ordering: .relaxed) == 0 else { return }
        push(block)
        tappedFrames.store(block.frameCount, ordering: .relaxed)
    }

    /// The output cycle is over: silence in place of a tap that did not render (a graph being reset, no tap).
    private func endTappedCycle(frames: Int) {
        if tappedFrames.load(ordering: .relaxed) == 0 { pushSilence(frames: frames) }
        tappedFrames.store(0, ordering: .relaxed)
    }

    /// Into the reference, mixed to its channels. Device thread.
    private func push(_ output: BufferView) {
        guard let fifo else { return }
        let frames = output.frameCount
        let mixed = playedScratch.view(frames: frames)
        if output.channelCount == mixed.channelCount {
            mixed.copy(from: output)
        } else if mixed.channelCount == 1 {
            // Each speaker puts its own channel into the room.
            let m = mixed[0]
            m.update(repeating: 0)
            for c in 0..<output.channelCount {
                let x = output[c]
                for i in 0..<frames { m[i] += x[i] }
            }
        } else {
            for c in 0..<mixed.channelCount {
                mixed[c].baseAddress!.update(from: output[c % output.channelCount].baseAddress!, count: frames)
            }
        }
        // The capture took nothing for a while (capture-less cycles): the oldest goes, the newest is kept.
        let room = fifo.availableToWrite
        if room < frames {
            let excess = frames - room
            var dropped = 0
            while dropped < excess {
                let n = min(excess - dropped, referenceScratch.capacity)
                let got = fifo.read(into: referenceScratch.view(frames: n))
                if got == 0 { break }
                dropped += got
            }
            referenceDrops.add(dropped, ordering: .relaxed)
        }
        fifo.write(mixed)
    }

    /// The output bus played silence this cycle (its graph failed to render, or there is none): the reference keeps
    /// its lag.
    func playedSilence(frames: Int) {
        switch reference {
        case .outputBus: pushSilence(frames: frames)
        case .graphTap: endTappedCycle(frames: frames)
        case .none: break
        }
    }

    private func pushSilence(frames: Int) {
        let silence = playedScratch.view(frames: frames)
        silence.clear()
        push(silence)
    }
}

/// Passes its input through and gives it, each cycle, to the I/O unit's capture processor as its reference
/// (``CaptureReference/graphTap``): put it on the bus the echo canceller is to take out of the microphone — the
/// accompaniment — in the output graph the I/O unit renders. The reference is what the speaker plays of that bus:
/// times ``gain`` (the volume applied after the tap, set by whoever sets that volume), and silence while the I/O unit's
/// route is lost. Real-time safe.
///
/// Make it after the I/O unit's capture processor (``IOUnit/setCaptureProcessor(_:reference:)`` with `.graphTap`):
/// the tap feeds that processor, and holds it and the unit's ``IOUnit/outputRoute``, not the unit. A processor set
/// later needs a tap of its own (this one goes on feeding the one it was made with).
public final class CaptureReferenceTap: RenderUnit {
    public let core: UnitCore
    private let processing: CaptureProcessing
    private let route: OutputRoute
    private let gainBits = Atomic<UInt32>(Float(1).bitPattern)
    /// The gain: each cycle ramps from where the last one ended to the new one.
    private let ramp = RenderThreadBound(SmoothedValue(1, rampFrames: 0))
    private let scratch: PCMBuffer

    /// A tap that feeds `io`'s capture processor its reference, in `format` (the rate and channel count of the graph
    /// it sits in), from the graph's audio passing through it.
    /// - Parameters:
    ///   - format: the rate and channel count of the audio passing through the tap.
    ///   - io: the I/O unit whose capture processor the tap feeds.
    ///   - maximumFrames: the most frames a render call asks for (default ``DeviceRequest/maximumPeriodFrames``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when `io` has no capture processor referenced to a graph
    ///   tap.
    public init(format: StreamFormat, io: IOUnit, maximumFrames: Int = DeviceRequest.maximumPeriodFrames) throws(AudioError) {
        guard let processing = io.captureProcessing, processing.reference == .graphTap else {
            throw AudioError(
                .invalidState,
                "the I/O unit has no capture processor referenced to a graph tap: call setCaptureProcessor(_:reference: .graphTap) first")
        }
        self.processing = processing
        route = io.outputRoute
        scratch = PCMBuffer(channelCount: format.channelCount, capacity: max(1, maximumFrames))
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "captureReferenceTap", inputs: [f], outputs: [f])
    }

    /// Linear gain between this tap and the speaker (0 … 16): the reference is scaled by it, ramped over a cycle.
    public var gain: Float {
        get { Float(bitPattern: gainBits.load(ordering: .relaxed)) }
        set { gainBits.store(min(16, max(0, newValue.isFinite ? newValue : 1)).bitPattern, ordering: .relaxed) }
    }

    public func render(_ context: RenderContext) {
        let input = context.input(0)
        context.output(0).copy(from: input)
        let target: Float = route.isRouted ? gain : 0
        let frames = min(context.frameCount, scratch.capacity)
        var ramp = self.ramp.onRenderThread
        ramp.rampFrames = frames
        ramp.setTarget(target)
        if !ramp.isRamping && ramp.value == 1 {
            processing.tapped(input)
            return
        }
        let out = scratch.view(frames: frames)
        out.copy(from: input.prefix(frames), gain: &ramp)
        self.ramp.onRenderThread = ramp
        processing.tapped(out)
    }
}
