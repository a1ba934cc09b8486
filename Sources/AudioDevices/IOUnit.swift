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
/// Captured buffers go to a ``CaptureHandler`` and to the graph through ``inputUnit()``; playback is pulled
/// through a ``/AudioGraph/RenderGraph`` (or a client render callback) each cycle. Both directions run in the same
/// cycle on the device's real-time thread — one clock, one sample time — so ear monitoring (input → graph → output)
/// adds nothing to the device's own buffering.
///
/// Faults (the sound server goes away, the device is unplugged, it stalls) become ``DeviceEvent/fault(_:)``
/// events; with ``Configuration/reconnect`` on, the unit reopens the device with backoff until it returns — for
/// at most ``Configuration/reconnectTimeout`` seconds, after which it gives up (``DeviceEvent/gaveUp(_:)``,
/// ``failure``) — and sample time continues across the gap (it advances by the time the device was away). When
/// the output alone is away, the capture runs on by itself until it is back. Events, xrun counts and warnings
/// reach the control side through ``events``.
///
/// The unit composes three parts: the drivers (ALSA, JACK, virtual), which move frames; the `DeviceCycle`,
/// the one routine their real-time thread runs each cycle; and the `DeviceSupervisor`, the state machine that
/// decides when to open, reopen, fall back or give up, which the unit's supervisor thread (`la-io-supervise`) feeds
/// with faults, the route and the time, and whose actions it performs.
///
/// Thread safety: configure before ``start()``; ``start()``, ``stop()`` and the counters from any control thread.
public final class IOUnit: @unchecked Sendable {
    // Unchecked Sendable: control state under `condition`; bus parts set only while stopped; device state in `cycle`
    /// The settings the unit was made with (fixed for its life).
    public let configuration: Configuration
    /// What happened on the device: start, xruns, faults, reconnects, warnings. Never fed from the render thread.
    public let events: AsyncStream<DeviceEvent>
    private let continuation: AsyncStream<DeviceEvent>.Continuation
    private let request: DeviceRequest
    /// What the device thread runs each cycle, and its state.
    let cycle = DeviceCycle()
    /// Graphs rendered in the capture handler, told the cycles as the output graph is.
    var handlerGraphs: [RenderGraph] = []
    // What the control side reads of the cycle's parts while it runs: set with them, while stopped.
    var captureProcessing: CaptureProcessing?
    var input: InputUnit?
    var timing: CycleTimingRecorder?
    /// The bridges of the driver that runs (replaced under `condition` at each open).
    private var bridges: (rate: RateBridge?, drift: DriftBridge?) = (nil, nil)
    /// Whether the playback reaches somewhere now (the supervisor's word): for a graph's units to read, the render
    /// thread's included, without holding the unit.
    public let outputRoute = OutputRoute()
    /// A fault a driver reported, with the driver's name (the latest driver's, when two report); its own lock, so a
    /// driver thread never waits on `condition`, which is held while drivers are opened.
    private let pendingFault = Locked<(AudioError, DeviceSupervisor.DriverID)?>(nil)
    /// What readers see without waiting for an open in progress.
    private let status = Locked<(grant: DeviceGrant?, faults: Int, reconnects: Int, failure: AudioError?, conversionLatency: Double)>(
        (nil, 0, 0, nil, 0))

    // Control side, under `condition`.
    let condition = BlockingCondition()
    private var supervisor: DeviceSupervisor
    private var driver: (AudioDriver, DeviceSupervisor.DriverID)?
    /// Where a held virtual capture's file starts (``VirtualDeviceOptions/capturesFromStartTime``).
    private let captureStart = CaptureStart()
    private var supervisorThread: WorkerThread?
    /// Set by ``wakeSupervisor()``: the supervisor looks again before it waits.
    private let woken = Atomic<Bool>(false)
    private var stopping = false
    var isRunning = false
    private var xrunBase = 0
    private var reportedXruns = 0
    private var reportedInputEnd = false
    /// Where the stream stood when an outage began (the attempts write their estimates into the sample time).
    private var outageEndedAt: Int64 = 0
    /// While stopping: the events to report once everything is released, not before.
    private var heldEvents: [DeviceEvent]?

    /// An I/O unit over the device `configuration` describes; nothing is opened until ``start()``. Set up the buses
    /// (capture handler, output graph or callback, capture processor) after this, before ``start()``.
    /// - Throws: ``/AudioCore/AudioError`` when the configuration makes no valid device request: `.invalidFormat`
    ///   (no bus enabled, bad channel count, period or period count), `.formatMismatch` (input and output rates
    ///   differ), `.unsupportedSampleRate`, `.invalidParameter` (reconnect timeout out of range).
    public init(_ configuration: Configuration) throws(AudioError) {
        self.configuration = configuration
        request = try configuration.request()
        try request.validate()
        supervisor = DeviceSupervisor(
            DeviceSupervisor.Configuration(
                backend: configuration.backend, reconnect: configuration.reconnect,
                reconnectTimeout: configuration.reconnectTimeout, inputChannels: request.inputChannels,
                outputChannels: request.outputChannels),
            random: SplitMix64(seed: UInt64.random(in: 0...UInt64.max)))
        (events, continuation) = AsyncStream.makeStream(of: DeviceEvent.self, bufferingPolicy: .bufferingNewest(256))
    }

    deinit {
        stop()
        continuation.finish()
    }

    // MARK: State

    /// What the device granted, while running.
    public var grant: DeviceGrant? { status.withLock { $0.grant } }
    /// Seconds the conversion between the device's rate and the client's adds (capture plus playback), while
    /// running; 0 when the device runs at the client's rate.
    public var conversionLatency: Double { status.withLock { $0.conversionLatency } }
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
        return body(bridges.rate, bridges.drift)
    }
    /// Cycles run since the unit was created.
    public var cycleCount: Int { cycle.cycles.load(ordering: .relaxed) }
    /// Cycles whose graph could not render (silence played, or nothing rendered into a capture graph's sinks).
    public var renderFailures: Int { cycle.graphFailures.load(ordering: .relaxed) }
    /// Under- and overruns since the unit was created.
    public var xrunCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return xrunBase + (driver?.0.xrunCount ?? 0)
    }
    /// Faults seen (each followed by a reconnect when that is on).
    public var faultCount: Int { status.withLock { $0.faults } }
    /// Successful reconnects.
    public var reconnectCount: Int { status.withLock { $0.reconnects } }
    /// Why the device stopped for good while running, until the next ``start()``: the fault itself with
    /// reconnect off, or — after ``Configuration/reconnectTimeout`` seconds of failed attempts — an error naming
    /// the timeout and the last attempt's error. Nil while the device runs or reconnects; kept after ``stop()``
    /// until the next ``start()``.
    public var failure: AudioError? { status.withLock { $0.failure } }
    /// The sample time the next cycle starts at.
    public var sampleTime: Int64 { cycle.sampleEnd }
    /// True while the playback reaches somewhere: false from a route loss (the output device gone, or on JACK no
    /// output port connected) until it returns. Checked every 100 ms; real-time safe to read (an atomic load).
    public var isOutputRouted: Bool { outputRoute.isRouted }
    /// True once a virtual device's input file has ended.
    public var inputHasEnded: Bool {
        condition.lock()
        defer { condition.unlock() }
        return reportedInputEnd || driver?.0.inputHasEnded == true
    }

    // MARK: Start and stop

    /// Opens the device, negotiates, and starts cycles.
    /// - Returns: what the device granted.
    /// - Throws: ``/AudioCore/AudioError``: `.unknownDevice` (listing the devices there are), `.deviceUnavailable`,
    ///   `.unsupportedSampleRate`, `.formatMismatch` (graph vs grant), `.invalidState` when already running.
    @discardableResult
    public func start() throws(AudioError) -> DeviceGrant {
        condition.lock()
        defer { condition.unlock() }
        guard !isRunning else { throw AudioError(.invalidState, "the I/O unit is already running") }
        if let graph = cycle.state.whileStopped.graph {
            let worker = try graph.prepareToRender(
                readAhead: cycle.state.whileStopped.readAhead == nil ? "la-io-read" : nil,
                readyFrames: configuration.periodFrames * configuration.periodCount)
            if let worker { cycle.state.whileStopped.readAhead = worker }
        }
        try cycle.state.whileStopped.captureProcessing?.start()
        stopping = false
        // A start continues the sample time where the last run ended, without a gap: nothing to place by the clock.
        cycle.state.whileStopped.lastCycleNanoseconds = 0
        cycle.state.whileStopped.resyncAnchor = 0
        cycle.state.whileStopped.resyncPending = false
        pendingFault.withLock { $0 = nil }
        if let error = perform(supervisor.start(now: monotonicNanoseconds())) {
            cycle.state.whileStopped.readAhead?.stop()
            cycle.state.whileStopped.readAhead = nil
            throw error
        }
        isRunning = true
        supervisorThread = try WorkerThread(name: "la-io-supervise") { [self] in supervise() }
        return driver!.0.grant
    }

    /// True from a ``start()`` that succeeded to ``stop()``: the device open, or being reopened after a loss.
    public var isStarted: Bool {
        condition.lock()
        defer { condition.unlock() }
        return isRunning
    }

    /// Adds a warning to ``events`` for what the owner of the unit found about the device (a session's calibration
    /// that would not settle). Control thread.
    public func report(warning: String) {
        continuation.yield(.warning(warning))
    }

    /// With a virtual device that holds its capture (``VirtualDeviceOptions/capturesFromStartTime``): the capture
    /// file's frame 0 arrives at the device's sample time `sampleTime`, silence before it. Other devices ignore it.
    /// Any thread but the render thread; the first call counts.
    public func startCapture(atSampleTime sampleTime: Int64) {
        if captureStart.sampleTime == .max { captureStart.set(sampleTime) }
    }

    /// Holds a virtual capture again (a start that failed, a stop): the next ``startCapture(atSampleTime:)`` counts.
    public func holdCapture() { captureStart.set(.max) }

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
        supervisorThread?.join()
        supervisorThread = nil
        condition.lock()
        heldEvents = []
        _ = perform(supervisor.stop())
        let events = heldEvents ?? []
        heldEvents = nil
        cycle.state.whileStopped.sampleTimeOffset = cycle.sampleEnd
        cycle.state.whileStopped.resyncPending = false
        isRunning = false
        condition.unlock()
        cycle.state.whileStopped.readAhead?.stop()
        cycle.state.whileStopped.readAhead = nil
        for event in events { continuation.yield(event) }
    }

    // MARK: Supervision

    /// The supervisor thread: reports xruns and the end of a virtual input, polls the route every 100 ms, and feeds
    /// the supervisor faults and the time (a reconnect attempt due, a look for the output device due).
    private func supervise() {
        condition.lock()
        defer { condition.unlock() }
        while !stopping {
            if pendingFault.withLock({ $0 }) == nil, !woken.exchange(false, ordering: .acquiringAndReleasing) {
                var wait = 0.1
                if let wake = supervisor.nextWakeup {
                    let now = monotonicNanoseconds()
                    wait = min(wait, wake > now ? Double(wake - now) / 1e9 : 0)
                }
                if wait > 0 { condition.wait(timeout: wait) }
            }
            if stopping { return }
            reportCounters()
            // What a driver noted where it could not report it (JACK's notification thread).
            if let (running, id) = driver, let fault = running.fault { noteFault(fault, driver: id) }
            // The fault first: the route of a driver that failed says nothing.
            if let (error, id) = pendingFault.withLock({ f in defer { f = nil }; return f }) {
                _ = perform(supervisor.fault(error, driver: id, now: monotonicNanoseconds()))
                // Closing the driver let go of the lock: a stop that came meanwhile opens nothing more.
                if stopping { return }
            }
            if let (running, _) = driver {
                for event in running.takeEvents() { continuation.yield(event) }
                let routed = running.outputRouted
                outputRoute.setHeadphones(routed ? running.outputIsHeadphones : nil)
                _ = perform(supervisor.routeObserved(outputRouted: routed, reason: routed ? "" : running.routeLossReason))
            }
            _ = perform(supervisor.tick(now: monotonicNanoseconds()))
        }
    }

    /// Called by a driver (on a thread of its own) when it has something new: the supervisor looks at once rather
    /// than at its next 100 ms. Never takes `condition` (held while drivers are opened, which may wait on that thread).
    private func wakeSupervisor() {
        woken.store(true, ordering: .releasing)
        condition.broadcast()
    }

    /// Called by a driver off the real-time thread when its device fails.
    private func noteFault(_ error: AudioError, driver id: DeviceSupervisor.DriverID) {
        pendingFault.withLock { if $0.map({ $0.1 < id }) ?? true { $0 = (error, id) } }
        condition.broadcast()  // the supervisor also looks every 100 ms, so a wake-up lost here costs no more
    }

    /// Performs the supervisor's actions in order, feeding the answers of opens and probes back in. With
    /// `condition` held (released while a driver stops). What the supervisor's state says (grant, counters, failure,
    /// route) is published before each event, so a reader woken by an event finds it. Returns the start's error, if
    /// it failed.
    private func perform(_ actions: [DeviceSupervisor.Action]) -> AudioError? {
        var queue = actions[...]
        var startError: AudioError?
        while let action = queue.popFirst() {
            publish()
            switch action {
            case .open(let open):
                queue += supervisor.opened(self.open(open), now: monotonicNanoseconds())
            case .closeDriver:
                guard let (closing, _) = driver else { break }
                driver = nil
                condition.unlock()
                closing.stop()  // joined without the lock: a driver thread may be reporting a fault
                condition.lock()
                xrunBase += closing.xrunCount
            case .probeOutput(let like):
                let found = outputOpens(like: like)
                // A fault of the capture that came meanwhile is reported as one, and the answer then goes unheard.
                if let (error, id) = pendingFault.withLock({ f in defer { f = nil }; return f }) {
                    queue += supervisor.fault(error, driver: id, now: monotonicNanoseconds())
                }
                queue += supervisor.outputProbed(found: found, now: monotonicNanoseconds())
            case .emit(let event):
                if heldEvents != nil { heldEvents!.append(event) } else { continuation.yield(event) }
            case .startFailed(let error):
                startError = error
            }
        }
        publish()
        return startError
    }

    private func publish() {
        outputRoute.set(supervisor.isOutputRouted)
        status.withLock {
            $0.grant = supervisor.grant
            $0.faults = supervisor.faultCount
            $0.reconnects = supervisor.reconnectCount
            $0.failure = supervisor.failure
        }
    }

    /// Opens and starts a driver as the supervisor asks: at a reconnect, the sample time is first placed where the
    /// clock says the stream would be. With `condition` held.
    private func open(_ open: DeviceSupervisor.Open) -> Result<DeviceSupervisor.Opened, AudioError> {
        var gap: Int64 = 0
        if case .reconnect(let attempt, let since) = open.purpose {
            // Placed again for the capture-only fallback: the full attempt may have run cycles before it failed (a
            // JACK client runs once activated, before its ports are connected).
            if attempt == 1, open.mode == .full { outageEndedAt = cycle.sampleEnd }
            // Where the stream stood: the last cycle that ran — of the connection that failed (or of an attempt that
            // ran cycles before it failed), or, when none ran, of the one before, whose place still holds.
            if cycle.state.whileStopped.lastCycleNanoseconds != 0 {
                cycle.state.whileStopped.resyncFrom = cycle.sampleEnd
                cycle.state.whileStopped.resyncAnchor = cycle.state.whileStopped.lastCycleNanoseconds
                cycle.state.whileStopped.lastCycleNanoseconds = 0
            }
            let resumeAt = cycle.state.whileStopped.resyncAnchor != 0 ? cycle.state.whileStopped.resyncFrom : outageEndedAt
            let awaySince = cycle.state.whileStopped.resyncAnchor != 0 ? cycle.state.whileStopped.resyncAnchor : since
            // Sample time resumes where the wall clock says the stream would be: this estimate (the time since the
            // last cycle) holds until the new stream's first cycle, which measures the whole time away — from the
            // old stream's last cycle to its own, a new stream's slow start included.
            gap = Int64(Double(monotonicNanoseconds() - awaySince) * request.sampleRate / 1e9)
            cycle.state.whileStopped.sampleTimeOffset = resumeAt + gap
            cycle.setSampleEnd(cycle.state.whileStopped.sampleTimeOffset)
            cycle.state.whileStopped.resyncPending = cycle.state.whileStopped.resyncAnchor != 0
        }
        var request = self.request
        if open.mode == .captureOnly {
            request.outputChannels = 0
            request.outputDevice = nil
        }
        // Without playback for good (a capture graph) or for now (the output device away), the graph renders into
        // nothing.
        cycle.state.whileStopped.captureOnly = open.mode == .captureOnly || configuration.outputFormat == nil
        do throws(AudioError) {
            let opened = try makeDriver(request)
            do throws(AudioError) {
                let notes = try cycle.connect(
                    grant: opened.grant, request: request, inputFormat: configuration.inputFormat,
                    outputFormat: configuration.outputFormat, backend: configuration.backend, virtual: configuration.virtual,
                    conversionQuality: configuration.conversionQuality, handlerGraphs: handlerGraphs)
                let latency = cycle.conversionLatency
                status.withLock { $0.conversionLatency = latency }
                bridges = (cycle.state.whileStopped.rateBridge, cycle.state.whileStopped.driftBridge)
                let id = open.driver
                let warnings = try opened.start(handler: cycle, onFault: { [weak self] error in self?.noteFault(error, driver: id) })
                opened.setWake { [weak self] in self?.wakeSupervisor() }
                driver = (opened, id)
                return .success(DeviceSupervisor.Opened(grant: opened.grant, warnings: notes + warnings, gapFrames: gap))
            } catch {
                opened.stop()
                throw error
            }
        } catch {
            return .failure(error)
        }
    }

    /// Whether the output device opens now, alone, at `like`'s rate and period, and is there to play to (closed again
    /// at once).
    private func outputOpens(like grant: DeviceGrant) -> Bool {
        var probe = request
        probe.inputChannels = 0
        probe.inputDevice = nil
        probe.sampleRate = grant.sampleRate
        probe.periodFrames = grant.periodFrames
        probe.acceptsOtherRates = false
        guard let opened = try? makeDriver(probe) else { return false }
        defer { opened.stop() }
        return opened.playbackReachable
    }

    private func makeDriver(_ request: DeviceRequest) throws(AudioError) -> AudioDriver {
        switch configuration.backend {
        case .alsa: try ALSADriver(request: request)
        case .jack: try JACKDriver(request: request, server: configuration.jackServer)
        case .pipewire:
            try PipeWireDriver(request: request, applicationName: configuration.applicationName, remote: configuration.pipeWireRemote)
        case .virtual: try VirtualDriver(request: request, options: configuration.virtual, captureStart: captureStart)
        }
    }

    private func reportCounters() {
        let total = xrunBase + (driver?.0.xrunCount ?? 0)
        if total != reportedXruns {
            reportedXruns = total
            continuation.yield(.xrun(total: total))
        }
        if !reportedInputEnd, driver?.0.inputHasEnded == true {
            reportedInputEnd = true
            continuation.yield(.inputEnded)
        }
    }
}
