import AudioCore
import AudioGraph
import CSystemCalls
import Synchronization

/// Receives captured audio on the real-time thread, in the input bus's client format, with the sample time of the
/// first frame and its host time (when it reached the device). Must not allocate, lock, log or do I/O.
public typealias CaptureHandler = @Sendable (_ buffer: RawBufferView, _ timeStamp: RenderTimeStamp) -> Void

/// LiveAudio's RemoteIO: an I/O unit over a device, with input bus 1 (capture, the microphone) and output bus 0
/// (playback, the speaker), each enabled by giving it a client format.
///
/// Captured buffers go to a ``CaptureHandler`` and to the graph through ``inputUnit``; playback is pulled
/// through a ``RenderGraph`` (or a client render callback) each cycle. Both directions run in the same cycle on
/// the device's real-time thread — one clock, one sample time — so ear monitoring (input → graph → output) adds
/// nothing to the device's own buffering.
///
/// Faults (the sound server goes away, the device is unplugged, it stalls) become ``DeviceEvent/fault(_:)``
/// events; with ``Configuration/reconnect`` on, the unit reopens the device with backoff until it returns — for
/// at most ``Configuration/reconnectTimeout`` seconds, after which it gives up (``DeviceEvent/gaveUp(_:)``,
/// ``failure``) — and sample time continues across the gap (it advances by the time the device was away).
/// Events, xrun counts and warnings reach the control side through ``events``.
///
/// Thread safety: configure before ``start()``; ``start()``, ``stop()`` and the counters from any control thread.
public final class IOUnit: @unchecked Sendable {
    public enum Bus: Int, Sendable {
        case output = 0
        case input = 1
    }

    public struct Configuration: Sendable {
        public var backend: DeviceBackend
        /// Bus 1's client format (what capture handlers receive); nil disables capture.
        public var inputFormat: StreamFormat?
        /// Bus 0's client format (what a client render callback fills); nil disables playback. With a graph, its
        /// rate and channel count must match the graph's output.
        public var outputFormat: StreamFormat?
        public var inputDevice: String?
        public var outputDevice: String?
        public var periodFrames: Int
        public var periodCount: Int
        /// Reopen the device after a fault, with backoff, until it returns (not for virtual devices).
        public var reconnect: Bool
        /// Seconds after a fault that reconnecting gives up: the device has stopped for good, and ``failure``
        /// says why (0 < seconds ≤ 86400; default 30).
        public var reconnectTimeout: Double = 30
        /// When the device grants another rate than the client formats' (a JACK server at 44.1 kHz, an ALSA `hw:`
        /// device), convert between the two (the default) instead of failing. The grant says the device's rate;
        /// ``conversionLatency`` what the conversion adds (measured when the device opens).
        public var convertsRates = true
        /// libsoxr's quality for that conversion. `.high` (the default: 20-bit precision, flat within 0.01 dB to
        /// 91 % of the lower Nyquist frequency) adds about 41 ms to a round trip at 44.1 ↔ 48 kHz, since libsoxr's
        /// long filters work in large blocks; `.low` (16-bit; at 44.1 kHz flat to 15 kHz, −3 dB at 18 kHz) about
        /// 12 ms — what `liveaudio monitor` uses; `.quick` (cubic interpolation) about 1.5 ms.
        public var conversionQuality: SampleRateConverter.Quality = .high
        /// Whether capture and playback run on one clock or two (``DeviceClocks``; default: decided from the
        /// devices). On two, the unit bridges their drift; ``clockBridgeLatency`` says what that adds.
        public var clocks: DeviceClocks = .automatic
        /// The JACK server's name (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        public var virtual: VirtualDeviceOptions

        public init(
            backend: DeviceBackend = .alsa, inputFormat: StreamFormat? = nil, outputFormat: StreamFormat? = nil,
            inputDevice: String? = nil, outputDevice: String? = nil, periodFrames: Int = 1024, periodCount: Int = 3,
            reconnect: Bool = true, jackServer: String? = nil, virtual: VirtualDeviceOptions = VirtualDeviceOptions()
        ) {
            self.backend = backend
            self.inputFormat = inputFormat
            self.outputFormat = outputFormat
            self.inputDevice = inputDevice
            self.outputDevice = outputDevice
            self.periodFrames = periodFrames
            self.periodCount = periodCount
            self.reconnect = reconnect
            self.jackServer = jackServer
            self.virtual = virtual
        }

        /// The device request these settings make.
        public func request() throws(AudioError) -> DeviceRequest {
            guard reconnectTimeout > 0, reconnectTimeout <= 86_400 else {
                throw AudioError(.invalidParameter, "the reconnect timeout must be more than 0 and at most 86400 seconds, got \(reconnectTimeout)")
            }
            guard let rate = inputFormat?.sampleRate ?? outputFormat?.sampleRate else {
                throw AudioError(.invalidFormat, "enable a bus: give bus 1 (input) or bus 0 (output) a client format")
            }
            if let i = inputFormat, let o = outputFormat, i.sampleRate != o.sampleRate {
                throw AudioError(
                    .formatMismatch,
                    "input and output run on one clock: their rates must agree (input \(formatHz(i.sampleRate)), "
                        + "output \(formatHz(o.sampleRate)))")
            }
            var request = DeviceRequest(
                inputDevice: inputDevice, outputDevice: outputDevice, inputChannels: inputFormat?.channelCount ?? 0,
                outputChannels: outputFormat?.channelCount ?? 0, sampleRate: rate, periodFrames: periodFrames,
                periodCount: periodCount)
            request.acceptsOtherRates = convertsRates && backend != .virtual
            request.clocks = clocks
            return request
        }
    }

    public let configuration: Configuration
    /// What happened on the device: start, xruns, faults, reconnects, warnings. Never fed from the render thread.
    public let events: AsyncStream<DeviceEvent>
    private let continuation: AsyncStream<DeviceEvent>.Continuation
    /// The real-time probe's hook, found when the unit is made (never on the device thread).
    private let renderScopeHook = la_find_render_scope_hook()
    private let request: DeviceRequest

    // Set before start, read on the render thread.
    private var captureHandler: CaptureHandler?
    private var outputCallback: ClientRenderCallback?
    private var graph: RenderGraph?
    private var captureBuffer: RawPCMBuffer?
    private var outputBuffer: RawPCMBuffer?
    private var input: InputUnit?
    /// A unit on the capture bus (the VoiceProcessingIO role), nil without one.
    private var captureProcessing: CaptureProcessing?
    /// Graphs rendered in the capture handler, told the cycles as the output graph is.
    private var handlerGraphs: [RenderGraph] = []
    /// Converts between the device's rate and the client's when they differ (nil when they agree).
    private var bridge: RateBridge?
    /// Bridges capture and playback on two clocks (nil on one clock).
    private var driftBridge: DriftBridge?
    /// The driver's sample time the next cycle should have if none is lost (device thread; 0 at each open).
    private var nextDeviceSampleTime: Int64 = 0
    /// Float scratch for a client render callback's output when bridging.
    private var bridgeOutput: PCMBuffer?
    /// Client frames rendered through the bridge since the last open, and the client sample time it started at.
    private var clientFrames: Int64 = 0
    private var clientTimeBase: Int64 = 0
    /// Reads the output graph's file sources ahead while running.
    private var readAhead: ReadAheadWorker?
    /// Added to the driver's sample time: the frames (and gaps) of earlier connections.
    private var sampleTimeOffset: Int64 = 0
    /// After a reconnect the new driver's first cycle places the sample time where the clock says the stream would
    /// be: `resyncFrom` (where the last connection ended) plus the time since that connection's last cycle. Set by
    /// the supervisor before the driver starts, read by the render thread of the driver it starts.
    private var resyncPending = false
    private var resyncFrom: Int64 = 0
    /// When the cycle that ended at `resyncFrom` ran (0: no cycle has run since the unit started).
    private var resyncAnchor: UInt64 = 0
    /// When the last cycle ran (render thread; read by the supervisor after that driver is stopped) and the rate the
    /// device runs at (set before a driver starts).
    private var lastCycleNanoseconds: UInt64 = 0
    private var deviceRate: Double = 0
    /// Records per-cycle timings when asked to.
    private var timing: CycleTimingRecorder?

    // Render thread → control side.
    private let lastSampleEnd = Atomic<Int64>(0)
    /// Whether the playback reaches somewhere (set by the supervisor; read by anything, the render thread included).
    private let routed = Atomic<Bool>(true)
    /// The output device is away and the capture runs alone (ALSA): the output graph renders on, into nothing, so
    /// what it records or encodes goes on. Set by the supervisor while no driver runs.
    private var captureOnly = false
    /// When the supervisor next looks whether the output device is back (capture-only).
    private var nextOutputProbe: UInt64 = 0
    /// The output device is back: the supervisor reopens capture and playback together, as after a fault but
    /// without reporting one.
    private var restoringOutput = false
    /// Seconds between looks for the output device: 1, doubling (to 30) after a look that found it but could not
    /// reopen both.
    private var probeInterval = 1.0
    private let cycles = Atomic<Int>(0)
    private let graphFailures = Atomic<Int>(0)

    // Control side.
    private let condition = BlockingCondition()
    private var driver: AudioDriver?
    private var supervisor: WorkerThread?
    /// A fault a driver reported; its own lock, so a driver thread never waits on `condition`, which is held
    /// while drivers are opened.
    private let pendingFault = Locked<AudioError?>(nil)
    private var stopping = false
    private var isRunning = false
    private var xrunBase = 0
    private var reportedXruns = 0
    private var reportedInputEnd = false
    private let stateLock = Locked<(grant: DeviceGrant?, faults: Int, reconnects: Int, failure: AudioError?, conversionLatency: Double)>(
        (nil, 0, 0, nil, 0))

    public init(_ configuration: Configuration) throws(AudioError) {
        self.configuration = configuration
        request = try configuration.request()
        try request.validate()
        (events, continuation) = AsyncStream.makeStream(of: DeviceEvent.self, bufferingPolicy: .bufferingNewest(256))
    }

    deinit {
        stop()
        continuation.finish()
    }

    // MARK: Configuration (before start)

    /// Delivers bus 1's capture to `handler` on the real-time thread, in ``Configuration/inputFormat``.
    public func setCaptureHandler(_ handler: @escaping CaptureHandler) throws(AudioError) {
        try requireStopped("set a capture handler")
        guard configuration.inputFormat != nil else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        captureHandler = handler
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
        self.graph = graph
        outputCallback = nil
    }

    /// Fills bus 0's playback from `callback` each cycle, in ``Configuration/outputFormat``.
    public func setOutputCallback(_ callback: @escaping ClientRenderCallback) throws(AudioError) {
        try requireStopped("set the output callback")
        guard configuration.outputFormat != nil else {
            throw AudioError(.invalidBus, "bus 0 (output) is disabled: give the configuration an outputFormat")
        }
        outputCallback = callback
        graph = nil
    }

    /// A graph node whose output is this unit's capture (bus 1) in the graph's Float32 layout: the microphone in a
    /// monitoring graph. Created once; add it to the graph that ``setOutputGraph(_:)`` pulls.
    public func inputUnit() throws(AudioError) -> InputUnit {
        if let input { return input }
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        let unit = try InputUnit(sampleRate: format.sampleRate, channelCount: format.channelCount)
        input = unit
        return unit
    }

    /// Feeds an input unit made elsewhere (a graph file's `input` node) from this unit's capture.
    /// - Throws: ``AudioError`` `.formatMismatch` when its rate or channel count differ from bus 1's.
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
    }

    /// Puts `unit` on the capture bus — the VoiceProcessingIO role: every capture goes through it before the capture
    /// handler and the input unit see it, on the device's thread. Its input bus 0 gets the capture; its input bus 1,
    /// when it has one, `reference` — by default what the output bus plays, so an echo canceller is referenced to
    /// exactly what goes to the speaker when nothing better is given. Its output bus 0 replaces the capture, so
    /// both buses 0 must have bus 1's rate and channel count. It adds ``captureProcessingLatency`` to the capture
    /// path. nil takes it off.
    ///
    /// `LiveAudio`'s `enableVoiceProcessing()` puts a `voiceProcessing` unit there.
    /// - Throws: ``AudioError`` `.invalidBus` when capture is disabled or the unit's buses do not fit,
    ///   `.formatMismatch` for another rate or channel count, `.invalidState` while running.
    public func setCaptureProcessor(_ unit: RenderUnit?, reference: CaptureReference = .outputBus) throws(AudioError) {
        try requireStopped("set the capture processor")
        guard let unit else {
            captureProcessing = nil
            return
        }
        guard let format = configuration.inputFormat else {
            throw AudioError(.invalidBus, "bus 1 (input) is disabled: give the configuration an inputFormat")
        }
        captureProcessing = try CaptureProcessing(
            unit: unit, captureFormat: format, maximumFrames: DeviceRequest.maximumPeriodFrames,
            reference: configuration.outputFormat == nil ? .none : reference)
    }

    /// Tells `graph` — one the capture handler renders — what the device's cycles are before each start, as the
    /// output graph is told (``RenderGraph/willRender(cycleFrames:)``): units that work on threads of their own
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
    /// A ``CaptureReferenceTap``'s block for the capture processor's reference. Device thread, in the output graph.
    func tapCaptureReference(_ block: BufferView) { captureProcessing?.tapped(block) }

    /// Frames of reference the capture processor found missing (silence instead): 0 in normal operation.
    public var captureReferenceShortfalls: Int { captureProcessing?.referenceShortfalls.load(ordering: .relaxed) ?? 0 }

    /// Records when each of the next `capacity` cycles started, how long it took and how much of that the thread ran
    /// (see ``cycleTimings``), from the next ``start()`` on, across stops and reconnects, until full; 0 stops
    /// recording. The storage (64 bytes a cycle) is allocated and written here, so the real-time thread only writes
    /// into pages it has; it reads its own CPU time and context switches with four system calls a cycle until the
    /// storage is full, none of which waits.
    /// - Throws: ``AudioError`` `.invalidParameter` for a negative or huge capacity, `.invalidState` while running.
    public func recordCycleTimings(capacity: Int) throws(AudioError) {
        try requireStopped("change cycle timing")
        guard capacity >= 0, capacity <= 50_000_000 else {
            throw AudioError(.invalidParameter, "cycle timing capacity must be 0…50,000,000 cycles, got \(capacity)")
        }
        timing = capacity > 0 ? CycleTimingRecorder(capacity: capacity) : nil
    }

    /// The cycle timings recorded so far (see ``recordCycleTimings(capacity:)``); readable while running.
    public var cycleTimings: [CycleTiming] { timing?.snapshot ?? [] }

    private func requireStopped(_ verb: String) throws(AudioError) {
        condition.lock()
        defer { condition.unlock() }
        if isRunning { throw AudioError(.invalidState, "cannot \(verb) while the I/O unit runs; stop it first") }
    }

    // MARK: Start and stop

    /// What the device granted, while running.
    public var grant: DeviceGrant? { stateLock.withLock { $0.grant } }
    /// Seconds the conversion between the device's rate and the client's adds (capture plus playback), while
    /// running; 0 when the device runs at the client's rate.
    public var conversionLatency: Double { stateLock.withLock { $0.conversionLatency } }
    /// Cycles the rate conversion could not fill (silence instead) since the device opened: client cycles short
    /// of capture, and device cycles short of playback. 0 in normal operation.
    public var conversionShortfalls: Int {
        withBridges { bridge, _ in
            guard let bridge else { return 0 }
            return bridge.shortfalls.load(ordering: .relaxed) + bridge.playShortfalls.load(ordering: .relaxed)
        }
    }
    /// With capture and playback on two clocks (``DeviceGrant/independentClocks``): the capture clock's rate
    /// relative to the playback's as tracked (1.001: capture runs 0.1 % fast); nil on one clock.
    public var clockRatio: Double? { withBridges { $1?.correction } }
    /// With capture and playback on two clocks: seconds the drift bridge adds to the capture path (its FIFO's
    /// target and its converter's delay, measured when the device opened); 0 on one clock.
    public var clockBridgeLatency: Double {
        withBridges { _, drift in drift.map { Double($0.latencyFrames) / $0.sampleRate } ?? 0 }
    }
    /// With two clocks: cycles that found no capture to give (silence instead) and captures dropped because the
    /// bridge was full, since the device opened. 0 in normal operation.
    public var clockShortfalls: Int {
        withBridges { _, drift in
            guard let drift else { return 0 }
            return drift.underruns.load(ordering: .relaxed) + drift.overflows.load(ordering: .relaxed)
        }
    }
    /// With two clocks: times the bridge put its level back on its target at once because one side had stopped
    /// for a while (an xrun, a stall): capture dropped, or silence waited through. 0 in normal operation.
    public var clockResyncs: Int { withBridges { $1?.recentres.load(ordering: .relaxed) ?? 0 } }
    /// With two clocks: frames of capture waiting in the bridge now (it holds them near a target of two periods).
    public var clockBridgeLevel: Int? { withBridges { $1?.level } }

    /// Reads the bridges under the lock their replacement (at open and reconnect) takes.
    private func withBridges<T>(_ body: (RateBridge?, DriftBridge?) -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body(bridge, driftBridge)
    }
    /// Cycles run since the unit was created.
    public var cycleCount: Int { cycles.load(ordering: .relaxed) }
    /// Under- and overruns since the unit was created.
    public var xrunCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return xrunBase + (driver?.xrunCount ?? 0)
    }
    /// Faults seen (each followed by a reconnect when that is on).
    public var faultCount: Int { stateLock.withLock { $0.faults } }
    /// Successful reconnects.
    public var reconnectCount: Int { stateLock.withLock { $0.reconnects } }
    /// Why the device stopped for good while running, until the next ``start()``: the fault itself with
    /// reconnect off, or — after ``Configuration/reconnectTimeout`` seconds of failed attempts — an error naming
    /// the timeout and the last attempt's error. Nil while the device runs or reconnects; kept after ``stop()``
    /// until the next ``start()``.
    public var failure: AudioError? { stateLock.withLock { $0.failure } }
    /// The sample time the next cycle starts at.
    public var sampleTime: Int64 { lastSampleEnd.load(ordering: .acquiring) }

    /// Opens the device, negotiates, and starts cycles.
    /// - Returns: what the device granted.
    /// - Throws: ``AudioError``: `.unknownDevice` (listing the devices there are), `.deviceUnavailable`,
    ///   `.unsupportedSampleRate`, `.formatMismatch` (graph vs grant), `.invalidState` when already running.
    @discardableResult
    public func start() throws(AudioError) -> DeviceGrant {
        condition.lock()
        defer { condition.unlock() }
        guard !isRunning else { throw AudioError(.invalidState, "the I/O unit is already running") }
        if let graph {
            if graph.state == .uninitialized { try graph.initialize() }
            if graph.state == .initialized { try graph.start() }
            let reading = graph.readingAheadUnits
            if !reading.isEmpty, readAhead == nil {
                let worker = try ReadAheadWorker(units: reading, name: "la-io-read")
                try worker.waitUntilReady(frames: configuration.periodFrames * configuration.periodCount)
                readAhead = worker
            }
        }
        try captureProcessing?.start()
        stopping = false
        // A start continues the sample time where the last run ended, without a gap: nothing to place by the clock.
        lastCycleNanoseconds = 0
        resyncAnchor = 0
        resyncPending = false
        routed.store(true, ordering: .releasing)
        // A start opens capture and playback as configured, whatever the last run ended in.
        captureOnly = false
        restoringOutput = false
        nextOutputProbe = 0
        probeInterval = 1
        pendingFault.withLock { $0 = nil }
        stateLock.withLock { $0.failure = nil }
        let opened: (AudioDriver, [String])
        do throws(AudioError) {
            opened = try openAndStart()
        } catch {
            readAhead?.stop()
            readAhead = nil
            throw error
        }
        let (driver, warnings) = opened
        self.driver = driver
        isRunning = true
        for w in warnings { continuation.yield(.warning(w)) }
        continuation.yield(.started(driver.grant))
        supervisor = try WorkerThread(name: "la-io-supervise") { [self] in supervise() }
        return driver.grant
    }

    /// Adds a warning to ``events`` for what the owner of the unit found about the device (a session's calibration
    /// that would not settle). Control thread.
    public func report(warning: String) {
        continuation.yield(.warning(warning))
    }

    /// Stops cycles and closes the device. The unit can be started again; sample time continues.
    public func stop() {
        condition.lock()
        guard isRunning else {
            condition.unlock()
            return
        }
        stopping = true
        condition.broadcast()
        condition.unlock()
        supervisor?.join()
        supervisor = nil
        condition.lock()
        let last = driver
        driver = nil
        condition.unlock()
        // Joined without the lock: a driver thread may be reporting a fault.
        last?.stop()
        condition.lock()
        xrunBase += last?.xrunCount ?? 0
        sampleTimeOffset = lastSampleEnd.load(ordering: .acquiring)
        resyncPending = false
        isRunning = false
        condition.unlock()
        readAhead?.stop()
        readAhead = nil
        stateLock.withLock { $0.grant = nil }
        continuation.yield(.stopped)
    }

    /// Opens a driver for the request, checks the grant against the graph and client formats, allocates the
    /// conversion buffers, and starts it. Called with `condition` held.
    private func openAndStart() throws(AudioError) -> (AudioDriver, [String]) {
        var request = self.request
        if captureOnly {
            request.outputChannels = 0
            request.outputDevice = nil
        }
        let driver: AudioDriver =
            switch configuration.backend {
            case .alsa: try ALSADriver(request: request)
            case .jack: try JACKDriver(request: request, server: configuration.jackServer)
            case .virtual: try VirtualDriver(request: request, options: configuration.virtual)
            }
        let grant = driver.grant
        deviceRate = grant.sampleRate
        do throws(AudioError) {
            // Client cycles: the device's period, or — converting — as many client frames as one takes.
            var clientPeriod = grant.periodFrames
            var notes: [String] = []
            if grant.independentClocks, grant.inputChannels > 0, grant.outputChannels > 0 {
                // The FIFO's target covers the larger of the two periods: capture may arrive a period of its own
                // at a time (ALSA reports its period as the input latency).
                driftBridge = try DriftBridge(
                    sampleRate: grant.sampleRate, channelCount: grant.inputChannels,
                    period: max(grant.periodFrames, grant.inputLatencyFrames),
                    maximumCycle: grant.periodFrames)
                let added = Double(driftBridge!.latencyFrames) / grant.sampleRate
                notes.append(
                    "capture and playback run on two clocks: resampling the capture to follow their drift (adds "
                        + "\(String(format2: added * 1000)) ms)")
            } else {
                driftBridge = nil
            }
            nextDeviceSampleTime = 0
            if grant.sampleRate != request.sampleRate {
                let ratio = request.sampleRate / grant.sampleRate
                let maximum = graph?.maximumFrames ?? (Int((Double(grant.periodFrames) * ratio).rounded(.up)) + 64)
                let made = try RateBridge(
                    deviceRate: grant.sampleRate, clientRate: request.sampleRate, inputChannels: grant.inputChannels,
                    outputChannels: grant.outputChannels, devicePeriod: grant.periodFrames, clientMaximum: maximum,
                    quality: configuration.conversionQuality)
                bridge = made
                bridgeOutput = outputCallback == nil || grant.outputChannels == 0
                    ? nil : PCMBuffer(channelCount: grant.outputChannels, capacity: maximum)
                clientPeriod = maximum
                clientFrames = 0
                clientTimeBase = Int64((Double(sampleTimeOffset) * ratio).rounded())
                let added = made.captureLatency + made.playLatency
                stateLock.withLock { $0.conversionLatency = added }
                notes.append(
                    "the device runs at \(formatHz(grant.sampleRate)), not \(formatHz(request.sampleRate)): converting "
                        + "between them (adds \(String(format2: added * 1000)) ms)")
            } else {
                bridge = nil
                bridgeOutput = nil
                stateLock.withLock { $0.conversionLatency = 0 }
                if let graph, grant.periodFrames > graph.maximumFrames {
                    throw AudioError(
                        .formatMismatch,
                        "the device runs \(grant.periodFrames)-frame cycles but the graph renders at most \(graph.maximumFrames)")
                }
            }
            if let format = configuration.inputFormat {
                if captureBuffer?.capacity ?? 0 < clientPeriod {
                    captureBuffer = RawPCMBuffer(format: format, capacity: clientPeriod)
                }
            }
            if let format = configuration.outputFormat, outputCallback != nil {
                if outputBuffer?.capacity ?? 0 < clientPeriod {
                    outputBuffer = RawPCMBuffer(format: format, capacity: clientPeriod)
                }
            }
            // What the cycles will be: units that work on threads of their own (voiceProcessing) size their lead to
            // them, or wait for their threads when nothing has a deadline.
            let largestCycle =
                if bridge != nil {
                    // Every client cycle of one device cycle runs back to back.
                    Int((Double(grant.periodFrames) * request.sampleRate / grant.sampleRate).rounded(.up))
                        + 2 * RateBridge.minimumClientCycle
                } else if configuration.backend == .virtual {
                    configuration.virtual.maximumCycle(period: grant.periodFrames)
                } else {
                    grant.periodFrames
                }
            let deadline = !(configuration.backend == .virtual && configuration.virtual.pacing == .asFastAsPossible)
            graph?.willRender(cycleFrames: deadline ? largestCycle : nil)
            for g in handlerGraphs { g.willRender(cycleFrames: deadline ? largestCycle : nil) }
            if let captureProcessing {
                guard clientPeriod <= captureProcessing.maximumFrames else {
                    throw AudioError(
                        .formatMismatch,
                        "the device's cycles bring up to \(clientPeriod) frames but the capture processor takes at most "
                            + "\(captureProcessing.maximumFrames)")
                }
                captureProcessing.willRender(cycleFrames: deadline ? largestCycle : nil, largestCycle: largestCycle)
            }
            let faultHandler: @Sendable (AudioError) -> Void = { [weak self] error in self?.noteFault(error) }
            let warnings = try driver.start(handler: self, onFault: faultHandler)
            stateLock.withLock { $0.grant = grant }
            return (driver, notes + warnings)
        } catch {
            driver.stop()
            throw error
        }
    }

    /// Looks whether the playback still reaches somewhere, and says so when that changes. Supervisor, with the lock.
    private func checkRoute() {
        guard request.outputChannels > 0, let driver, pendingFault.withLock({ $0 }) == nil else { return }
        let now = !captureOnly && driver.outputRouted
        guard routed.exchange(now, ordering: .acquiringAndReleasing) != now else { return }
        continuation.yield(now ? .routeReturned : .routeLost("no output port is connected"))
    }

    /// Capture-only: every second, whether the output device opens again; if it does, capture and playback are
    /// reopened together (the capture's place anchors the sample time, as after a fault). Supervisor, with the lock.
    private func probeOutput() {
        guard captureOnly, driver != nil, !restoringOutput, pendingFault.withLock({ $0 }) == nil else { return }
        let now = monotonicNanoseconds()
        guard now >= nextOutputProbe else { return }
        nextOutputProbe = now + UInt64(probeInterval * 1e9)
        // As the reopening will ask for it: the capture's rate and period, no other rate.
        var probe = request
        probe.inputChannels = 0
        probe.inputDevice = nil
        if let grant = driver?.grant {
            probe.sampleRate = grant.sampleRate
            probe.periodFrames = grant.periodFrames
        }
        probe.acceptsOtherRates = false
        guard let opened = try? ALSADriver(request: probe) else { return }
        opened.stop()
        // Only in place of nothing: a fault of the capture that came meanwhile is reported as one.
        let set = pendingFault.withLock { fault -> Bool in
            guard fault == nil else { return false }
            fault = AudioError(.deviceUnavailable, "the output device is back")
            return true
        }
        if set { restoringOutput = true }
    }

    /// True while the playback reaches somewhere: false from a route loss (the output device gone, or on JACK no
    /// output port connected) until it returns. Checked every 100 ms; real-time safe to read (an atomic load).
    public var isOutputRouted: Bool { routed.load(ordering: .acquiring) }

    /// Called by a driver off the real-time thread when its device fails.
    private func noteFault(_ error: AudioError) {
        pendingFault.withLock { if $0 == nil { $0 = error } }
        condition.broadcast()  // the supervisor also looks every 100 ms, so a wake-up lost here costs no more
    }

    /// The control thread that reports xruns and the end of a virtual input, and reconnects after faults.
    private func supervise() {
        condition.lock()
        defer { condition.unlock() }
        while !stopping {
            if pendingFault.withLock({ $0 }) == nil { condition.wait(timeout: 0.1) }
            if stopping { return }
            reportCounters()
            checkRoute()
            probeOutput()
            guard let fault = pendingFault.withLock({ $0 }) else { continue }
            pendingFault.withLock { $0 = nil }
            let restoring = restoringOutput
            restoringOutput = false
            stateLock.withLock {
                if !restoring { $0.faults += 1 }
                $0.grant = nil
            }
            if !restoring { continuation.yield(.fault(fault)) }
            if request.outputChannels > 0, routed.exchange(false, ordering: .acquiringAndReleasing) {
                continuation.yield(.routeLost("the output device went away"))
            }
            let faultTime = monotonicNanoseconds()
            if let failed = driver {
                driver = nil
                condition.unlock()
                failed.stop()
                condition.lock()
                xrunBase += failed.xrunCount
            }
            guard configuration.reconnect, configuration.backend != .virtual else {
                stopForGood(fault)
                return
            }
            // Where the stream stood when no cycle has run since the start (the attempts below write their estimates
            // into the sample time).
            let endedAt = lastSampleEnd.load(ordering: .acquiring)
            var attempt = 0
            var delay = 0.1
            var lastError = fault
            while !stopping {
                let away = Double(monotonicNanoseconds() - faultTime) / 1e9
                if away >= configuration.reconnectTimeout {
                    let e = AudioError(
                        .deviceUnavailable,
                        "the device did not come back within \(wholeOrTwoDecimals(configuration.reconnectTimeout)) s "
                            + "(\(attempt) attempt\(attempt == 1 ? "" : "s"); the last said: \(lastError.message))")
                    continuation.yield(.gaveUp(e))
                    stopForGood(e)
                    return
                }
                attempt += 1
                // Where the stream stood: the last cycle that ran — of the connection that failed (or of an attempt
                // that ran cycles before it failed), or, when none ran, of the one before, whose place still holds.
                if lastCycleNanoseconds != 0 {
                    resyncFrom = lastSampleEnd.load(ordering: .acquiring)
                    resyncAnchor = lastCycleNanoseconds
                    lastCycleNanoseconds = 0
                }
                let resumeAt = resyncAnchor != 0 ? resyncFrom : endedAt
                let awaySince = resyncAnchor != 0 ? resyncAnchor : faultTime
                // Sample time resumes where the wall clock says the stream would be: this estimate (the time since
                // the last cycle) holds until the new stream's first cycle, which measures the whole time away — from
                // the old stream's last cycle to its own, a new stream's slow start included.
                let gap = Int64(Double(monotonicNanoseconds() - awaySince) * request.sampleRate / 1e9)
                sampleTimeOffset = resumeAt + gap
                lastSampleEnd.store(sampleTimeOffset, ordering: .releasing)
                resyncPending = resyncAnchor != 0
                do throws(AudioError) {
                    captureOnly = false
                    let (newDriver, warnings) = try openAndStart()
                    driver = newDriver
                    stateLock.withLock { $0.reconnects += 1 }
                    for w in warnings { continuation.yield(.warning(w)) }
                    continuation.yield(.reconnected(newDriver.grant, gapFrames: gap))
                    break
                } catch {
                    lastError = error
                    // The output device alone may be away (ALSA, capture and playback on two devices): the capture
                    // then runs by itself — the output graph rendering into nothing — until the output is back.
                    if configuration.backend == .alsa, request.inputChannels > 0, request.outputChannels > 0 {
                        captureOnly = true
                        if let (newDriver, warnings) = try? openAndStart() {
                            driver = newDriver
                            stateLock.withLock { $0.reconnects += 1 }
                            for w in warnings { continuation.yield(.warning(w)) }
                            if restoring {
                                // The output opened alone but not with the capture: look again later, less often.
                                probeInterval = min(30, probeInterval * 2)
                            } else {
                                probeInterval = 1
                                continuation.yield(
                                    .warning("the output device is away (\(error.message)); capturing on, and looking for it every second"))
                            }
                            continuation.yield(.reconnected(newDriver.grant, gapFrames: gap))
                            nextOutputProbe = monotonicNanoseconds() + UInt64(probeInterval * 1e9)
                            break
                        }
                        captureOnly = false
                    }
                    // Backoff with jitter: 0.1 s doubling to 2 s, ±25 %; never past the timeout.
                    let left = configuration.reconnectTimeout - Double(monotonicNanoseconds() - faultTime) / 1e9
                    let wait = max(0, min(delay * Double.random(in: 0.75...1.25), left))
                    continuation.yield(.reconnectFailed(attempt: attempt, error: error, retryIn: wait))
                    condition.wait(timeout: wait)
                    delay = min(2, delay * 2)
                }
            }
        }
    }

    /// The supervisor, with `condition` held, when the device has stopped for good: `grant` is nil and
    /// ``failure`` says why. The unit stays "running" until stop() releases the rest (supervisor, read-ahead
    /// worker), after which it can start again.
    private func stopForGood(_ error: AudioError) {
        stateLock.withLock { $0.failure = error }
        condition.unlock()
        continuation.yield(.stopped)
        condition.lock()
    }

    private func reportCounters() {
        let total = xrunBase + (driver?.xrunCount ?? 0)
        if total != reportedXruns {
            reportedXruns = total
            continuation.yield(.xrun(total: total))
        }
        if !reportedInputEnd, driver?.inputHasEnded == true {
            reportedInputEnd = true
            continuation.yield(.inputEnded)
        }
    }

    /// True once a virtual device's input file has ended.
    public var inputHasEnded: Bool {
        condition.lock()
        defer { condition.unlock() }
        return reportedInputEnd || driver?.inputHasEnded == true
    }
}

extension IOUnit: DeviceCycleHandler {
    /// A virtual device run as fast as possible waits for the file sources' next frames (a read error or a
    /// stopped worker ends the wait; the render then counts the underrun as usual). The worker exists only when
    /// the output graph has file sources.
    func prepareCycle(frames: Int) {
        try? readAhead?.waitUntilReady(frames: frames)
    }

    /// The real-time cycle: capture to the handler and the input unit, then the graph (or callback) to the output.
    func deviceCycle(input captured: BufferView?, output: BufferView?, time: DeviceCycleTime) {
        // The handler's scope for the real-time probe (nil unless a test preloads it): one branch per cycle.
        let scope = renderScopeHook
        scope?(1)
        defer { scope?(-1) }
        let began = monotonicNanoseconds()
        let usageAtStart = timing?.usageAtStart()
        // Two clocks: the capture, on its own clock, becomes the playback clock's frames.
        var input = captured
        var time = time
        if let driftBridge, let captured, let output {
            // A gap in the playback's sample time: it stopped and restarted (an xrun), and the capture that piled up
            // meanwhile arrives in this cycle; the bridge drops what would otherwise stay as latency.
            let resync = time.sampleTime > nextDeviceSampleTime
            nextDeviceSampleTime = time.sampleTime + Int64(output.frameCount)
            driftBridge.push(captured)
            input = driftBridge.pull(frames: output.frameCount, resync: resync)
            // What comes out of the bridge was captured its latency earlier than what went in.
            time.inputHostTime -= min(time.inputHostTime, driftBridge.latencyNanoseconds)
        }
        let frames = input?.frameCount ?? output?.frameCount ?? 0
        if resyncPending { resync(at: began, deviceSampleTime: time.sampleTime, frames: frames) }
        lastCycleNanoseconds = began
        let sampleTime = time.sampleTime + sampleTimeOffset
        if let bridge {
            bridgedCycle(bridge, input: input, output: output, time: time)
            self.input?.current = nil
            cycles.add(1, ordering: .relaxed)
            lastSampleEnd.store(sampleTime + Int64(frames), ordering: .releasing)
            timing?.record(start: began, sampleTime: sampleTime, frames: frames, usageAtStart: usageAtStart)
            return
        }
        if var input {
            let captureStamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime)
            var handlerStamp = captureStamp
            if let captureProcessing {
                input = captureProcessing.process(input, timeStamp: captureStamp)
                // What comes out of the processor reached the device its latency earlier.
                handlerStamp.hostTime -= min(handlerStamp.hostTime, captureProcessing.latencyNanoseconds)
            }
            if let captureHandler, let captureBuffer {
                let raw = captureBuffer.view(frames: input.frameCount)
                PCMConversion.encode(input, into: raw)
                captureHandler(raw, handlerStamp)
            }
            self.input?.current = input
        }
        if let output {
            let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.outputHostTime)
            let processing = captureProcessing
            if let graph {
                let rendered = graph.renderCycle(frames: output.frameCount, timeStamp: stamp) { rendered in
                    output.copy(from: rendered.upmixed(to: output.channelCount))
                    processing?.played(rendered)
                }
                if !rendered {
                    graphFailures.add(1, ordering: .relaxed)
                    processing?.playedSilence(frames: output.frameCount)
                }
                readAhead?.requestIfNeeded()
            } else if let outputCallback, let outputBuffer {
                let raw = outputBuffer.view(frames: output.frameCount)
                outputCallback(raw, stamp)
                PCMConversion.decode(raw, into: output)
                processing?.played(output)
            } else {
                processing?.playedSilence(frames: output.frameCount)
            }
        } else if captureOnly, let graph {
            renderIntoNothing(graph, frames: frames, timeStamp: RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime))
        }
        self.input?.current = nil
        cycles.add(1, ordering: .relaxed)
        lastSampleEnd.store(sampleTime + Int64(frames), ordering: .releasing)
        timing?.record(start: began, sampleTime: sampleTime, frames: frames, usageAtStart: usageAtStart)
    }
}

extension IOUnit {
    /// Capture-only (the output device away): the graph renders on — recordings, the song, encoders — into nothing,
    /// and the echo canceller's reference is what is played: silence. Render thread.
    fileprivate func renderIntoNothing(_ graph: RenderGraph, frames: Int, timeStamp: RenderTimeStamp) {
        if !graph.renderCycle(frames: frames, timeStamp: timeStamp, consume: { _ in }) {
            graphFailures.add(1, ordering: .relaxed)
        }
        captureProcessing?.playedSilence(frames: frames)
        readAhead?.requestIfNeeded()
    }

    /// The first cycle after a reconnect: its frames end where the clock says the stream would be, counted from
    /// the last cycle of the connection that failed (never overlapping what that one delivered).
    fileprivate func resync(at now: UInt64, deviceSampleTime: Int64, frames: Int) {
        resyncPending = false
        let elapsed = now > resyncAnchor ? Int64(Double(now - resyncAnchor) * deviceRate / 1e9) : 0
        // This cycle begins here, in device frames: where the last one ended plus the time away (never before it).
        let begins = resyncFrom + max(0, elapsed - Int64(frames))
        sampleTimeOffset = begins - deviceSampleTime
        resyncAnchor = 0
        if bridge != nil {
            // The client's time at this cycle (no client frame has been counted since the open).
            clientTimeBase = Int64((Double(begins) * request.sampleRate / deviceRate).rounded())
        }
    }

    /// A device cycle when the device runs at another rate than the client: the capture is converted to the
    /// client's rate, the client runs as many cycles (of varying sizes) as the device's playback needs, and its
    /// output is converted to the device's rate. With capture only, the client gets what the capture converted to.
    fileprivate func bridgedCycle(_ bridge: RateBridge, input: BufferView?, output: BufferView?, time: DeviceCycleTime) {
        if let input { bridge.capture(input) }
        if let output {
            var rounds = 0
            while rounds < RateBridge.maximumClientCycles {
                let k = bridge.framesToRender(deviceFrames: output.frameCount)
                if k == 0 { break }
                rounds += 1
                clientCycle(bridge, frames: k, captured: input == nil ? nil : bridge.takeCapture(k), time: time, playing: true)
            }
            bridge.takePlayback(into: output)
        } else if input != nil {
            let k = bridge.captureReady
            if k > 0 { clientCycle(bridge, frames: k, captured: bridge.takeCapture(k), time: time, playing: false) }
        }
    }

    /// One client cycle of `frames` frames at the client's rate.
    private func clientCycle(_ bridge: RateBridge, frames: Int, captured: BufferView?, time: DeviceCycleTime, playing: Bool) {
        let sampleTime = clientTimeBase + clientFrames
        clientFrames += Int64(frames)
        if var captured {
            let captureStamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime)
            var handlerStamp = captureStamp
            if let captureProcessing {
                captured = captureProcessing.process(captured, timeStamp: captureStamp)
                handlerStamp.hostTime -= min(handlerStamp.hostTime, captureProcessing.latencyNanoseconds)
            }
            if let captureHandler, let captureBuffer {
                let raw = captureBuffer.view(frames: frames)
                PCMConversion.encode(captured, into: raw)
                captureHandler(raw, handlerStamp)
            }
            self.input?.current = captured
        }
        guard playing else {
            if captureOnly, let graph {
                renderIntoNothing(graph, frames: frames, timeStamp: RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime))
            }
            self.input?.current = nil
            return
        }
        let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.outputHostTime)
        let channels = bridge.playChannels
        let processing = captureProcessing
        if let graph {
            let rendered = graph.renderCycle(frames: frames, timeStamp: stamp) { rendered in
                bridge.play(rendered.upmixed(to: channels))
                processing?.played(rendered)
            }
            if !rendered {
                graphFailures.add(1, ordering: .relaxed)
                bridge.playSilence(frames: frames)
                processing?.playedSilence(frames: frames)
            }
            readAhead?.requestIfNeeded()
        } else if let outputCallback, let outputBuffer, let bridgeOutput {
            let raw = outputBuffer.view(frames: frames)
            outputCallback(raw, stamp)
            let scratch = bridgeOutput.view(frames: frames)
            PCMConversion.decode(raw, into: scratch)
            bridge.play(scratch)
            processing?.played(scratch)
        } else {
            bridge.playSilence(frames: frames)
            processing?.playedSilence(frames: frames)
        }
        self.input?.current = nil
    }
}

/// The microphone as a graph node: its output is the I/O unit's capture (bus 1) of the current cycle, in the
/// graph's Float32 layout. Silence when there is no capture this cycle. Get it from ``IOUnit/inputUnit()``.
public final class InputUnit: RenderUnit, @unchecked Sendable {
    /// Set by the I/O unit (or ``feeding(_:_:)``) on the render thread for the duration of one cycle.
    var current: BufferView?

    /// A microphone node of `channelCount` channels at `sampleRate`; an ``IOUnit`` feeds it once given it.
    public init(sampleRate: Double, channelCount: Int) throws(AudioError) {
        try super.init(kind: "input", inputs: [], outputs: [.graph(sampleRate: sampleRate, channelCount: channelCount)])
    }

    /// Makes `buffer` this node's output for the cycles `body` renders: how audio that does not come from an
    /// I/O unit (a file paced in real time, a capture processed elsewhere) reaches a graph's `input` node.
    /// Real-time safe; call it on the thread that renders the graph.
    public func feeding<R>(_ buffer: BufferView, _ body: () throws(AudioError) -> R) throws(AudioError) -> R {
        current = buffer
        defer { current = nil }
        return try body()
    }

    public override func render(_ context: RenderContext) {
        let out = context.output(0)
        if let current, current.frameCount >= context.frameCount {
            out.copy(from: current.prefix(context.frameCount).upmixed(to: out.channelCount))
        } else {
            out.clear()
        }
    }
}

/// `2` for 2.0, `2.50` for 2.5: seconds as a user typed them, most of the time.
func wholeOrTwoDecimals(_ value: Double) -> String {
    value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format2: value)
}
