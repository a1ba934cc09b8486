import AudioCore
import AudioGraph

/// Configuring the buses, before ``IOUnit/start()``: what the capture goes to, where the playback comes from, a unit
/// on the capture bus, and cycle timing.
extension IOUnit {
    /// Delivers bus 1's capture to `handler` on the real-time thread, in ``Configuration/inputFormat``.
    public func setCaptureHandler(_ handler: @escaping CaptureHandler) throws(AudioError) {
        try requireStopped("set a capture handler")
        guard configuration.inputFormat != nil else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        cycle.state.whileStopped.captureHandler = handler
    }

    /// Pulls bus 0's playback from `graph` each cycle. The graph's rate and channel count must match the output
    /// format; the I/O unit initializes and starts it if needed.
    public func setOutputGraph(_ graph: RenderGraph) throws(AudioError) {
        try requireStopped("set the output graph")
        guard let format = configuration.outputFormat else {
            throw AudioError(.invalidBus, "bus 0 (output) is disabled: give the configuration an outputFormat")
        }
        guard graph.format.sampleRate == format.sampleRate, graph.format.channelCount == format.channelCount else {
            throw AudioError(
                .formatMismatch,
                "the graph renders \(graph.format.channelCount) ch at \(formatHz(graph.format.sampleRate)) but bus 0 "
                    + "plays \(format.channelCount) ch at \(formatHz(format.sampleRate))")
        }
        cycle.state.whileStopped.graph = graph
        cycle.state.whileStopped.outputCallback = nil
    }

    /// Renders `graph` each cycle after the capture, its output going nowhere: a capture-only unit (no
    /// ``Configuration/outputFormat``) whose graph's sinks — meters, recorders, an encoder — take the capture from
    /// its input node (``setInputUnit(_:)``), on the device's thread, as an output graph's would. The I/O unit
    /// initializes and starts it, and reads its file sources ahead, as it does an output graph.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidBus` with playback (use ``setOutputGraph(_:)``) or without
    ///   capture, `.unsupportedSampleRate` when its rate is not bus 1's.
    public func setCaptureGraph(_ graph: RenderGraph) throws(AudioError) {
        try requireStopped("set the capture graph")
        guard configuration.outputFormat == nil else {
            throw AudioError(.invalidBus, "bus 0 (output) plays: its graph is the output graph (setOutputGraph)")
        }
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        guard graph.format.sampleRate == format.sampleRate else {
            throw AudioError(
                .unsupportedSampleRate,
                "the graph renders at \(formatHz(graph.format.sampleRate)) but bus 1 captures at \(formatHz(format.sampleRate))")
        }
        cycle.state.whileStopped.graph = graph
        cycle.state.whileStopped.outputCallback = nil
    }

    /// Fills bus 0's playback from `callback` each cycle, in ``Configuration/outputFormat``.
    public func setOutputCallback(_ callback: @escaping ClientRenderCallback) throws(AudioError) {
        try requireStopped("set the output callback")
        guard configuration.outputFormat != nil else {
            throw AudioError(.invalidBus, "bus 0 (output) is disabled: give the configuration an outputFormat")
        }
        cycle.state.whileStopped.outputCallback = callback
        cycle.state.whileStopped.graph = nil
    }

    /// A graph node whose output is this unit's capture (bus 1) in the graph's Float32 layout: the microphone in a
    /// monitoring graph. Created once; add it to the graph that ``setOutputGraph(_:)`` pulls.
    public func inputUnit() throws(AudioError) -> InputUnit {
        if let input { return input }
        try requireStopped("make the input unit")
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        let unit = try InputUnit(sampleRate: format.sampleRate, channelCount: format.channelCount)
        input = unit
        cycle.state.whileStopped.input = unit
        return unit
    }

    /// Feeds an input unit made elsewhere (a graph file's `input` node) from this unit's capture.
    /// - Throws: ``/AudioCore/AudioError`` `.formatMismatch` when its rate or channel count differ from bus 1's.
    public func setInputUnit(_ unit: InputUnit) throws(AudioError) {
        try requireStopped("set the input unit")
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        let produced = unit.outputFormats[0]
        guard produced.sampleRate == format.sampleRate, produced.channelCount == format.channelCount else {
            throw AudioError(
                .formatMismatch,
                "the input node gives \(produced.channelCount) ch at \(formatHz(produced.sampleRate)) but bus 1 captures "
                    + "\(format.channelCount) ch at \(formatHz(format.sampleRate))")
        }
        input = unit
        cycle.state.whileStopped.input = unit
    }

    /// Puts `unit` on the capture bus — the VoiceProcessingIO role: every capture goes through it before the capture
    /// handler and the input unit see it, on the device's thread. Its input bus 0 gets the capture; its input bus 1,
    /// when it has one, `reference` — by default what the output bus plays, so an echo canceller is referenced to
    /// exactly what goes to the speaker when nothing better is given. Its output bus 0 replaces the capture, so
    /// both buses 0 must have bus 1's rate and channel count. It adds ``captureProcessingLatency`` to the capture
    /// path. nil takes it off.
    ///
    /// `LiveAudio`'s `enableVoiceProcessing()` puts a `voiceProcessing` unit there.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidBus` when capture is disabled or the unit's buses do not fit,
    ///   `.formatMismatch` for another rate or channel count, `.invalidState` while running.
    public func setCaptureProcessor(_ unit: RenderUnit?, reference: CaptureReference = .outputBus) throws(AudioError) {
        try requireStopped("set the capture processor")
        guard let unit else {
            captureProcessing = nil
            cycle.state.whileStopped.captureProcessing = nil
            return
        }
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        captureProcessing = try CaptureProcessing(
            unit: unit, captureFormat: format, maximumFrames: DeviceRequest.maximumPeriodFrames,
            reference: configuration.outputFormat == nil ? .none : reference)
        cycle.state.whileStopped.captureProcessing = captureProcessing
    }

    /// Tells `graph` — one the capture handler renders — what the device's cycles are before each start, as the
    /// output graph is told (``/AudioGraph/RenderGraph/willRender(_:)``): units that work on threads of their own
    /// (voiceProcessing) then never wait on the device's thread.
    public func announceCycles(to graph: RenderGraph) throws(AudioError) {
        try requireStopped("add a graph to tell the cycles")
        if !handlerGraphs.contains(where: { $0 === graph }) { handlerGraphs.append(graph) }
    }

    /// The unit on the capture bus, if any (see ``setCaptureProcessor(_:reference:)``).
    public var captureProcessor: RenderUnit? { captureProcessing?.unit }
    /// Seconds the unit on the capture bus delays the capture; 0 without one. Final once started: a unit that works
    /// on a thread of its own (voiceProcessing) adds the device's cycle to it. The capture handler's host times
    /// are moved back by it; sample times count the frames as they come.
    public var captureProcessingLatency: Double { captureProcessing?.latency ?? 0 }

    /// Frames of reference the capture processor found missing (silence instead): 0 in normal operation.
    public var captureReferenceShortfalls: Int { captureProcessing?.referenceShortfalls.load(ordering: .relaxed) ?? 0 }

    /// Records when each of the next `capacity` cycles started, how long it took and how much of that the thread ran
    /// (see ``cycleTimings``), from the next ``start()`` on, across stops and reconnects, until full; 0 stops
    /// recording. The storage (72 bytes a cycle) is allocated and written here, so the real-time thread only writes
    /// into pages it has; it reads its own CPU time and context switches with four system calls a cycle until the
    /// storage is full, none of which waits.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a negative or huge capacity, `.invalidState` while
    ///   running.
    public func recordCycleTimings(capacity: Int) throws(AudioError) {
        try requireStopped("change cycle timing")
        guard capacity >= 0, capacity <= 50_000_000 else {
            throw AudioError(.invalidParameter, "cycle timing capacity must be 0…50,000,000 cycles, got \(capacity)")
        }
        timing = capacity > 0 ? CycleTimingRecorder(capacity: capacity) : nil
        cycle.state.whileStopped.timing = timing
    }

    /// The cycle timings recorded so far (see ``recordCycleTimings(capacity:)``); readable while running.
    public var cycleTimings: [CycleTiming] { timing?.snapshot ?? [] }

    func requireStopped(_ verb: String) throws(AudioError) {
        condition.lock()
        defer { condition.unlock() }
        if isRunning { throw AudioError(.invalidState, "cannot \(verb) while the I/O unit runs; stop it first") }
    }
}
