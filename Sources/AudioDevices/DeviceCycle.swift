import AudioCore
import AudioGraph
import CSystemCalls
import Synchronization

/// The one device cycle: capture → capture processor → capture handler → input node → graph (or client callback) →
/// playback, at the client's rate. A driver calls it on its real-time thread (``DeviceCycleHandler``); the two
/// bridges are adapters around that one path:
/// - the *drift bridge* (capture and playback on two clocks) turns the capture into the playback clock's frames
///   before the path runs;
/// - the *rate bridge* (the device at another rate than the client) converts the capture, runs the path as many
///   times as the device's playback needs, and converts what it played.
/// Without either, the path runs once, on the device's frames: the identity case.
///
/// Thread safety: configured by its ``IOUnit`` with no driver running (``connect(grant:request:inputFormat:outputFormat:backend:virtual:conversionQuality:handlerGraphs:)``
/// before each driver starts); then touched by the driver's real-time thread alone, until that driver's `stop()` returns. The
/// counters and ``sampleEnd`` from any thread.
final class DeviceCycle: DeviceCycleHandler, Sendable {
    /// What the device thread works with: set by the control side while no driver runs, used by the device thread
    /// while one does (the driver's start and stop hand it over).
    struct State {
        var captureHandler: CaptureHandler?
        var outputCallback: ClientRenderCallback?
        var graph: RenderGraph?
        var input: InputUnit?
        var captureProcessing: CaptureProcessing?
        var readAhead: ReadAheadWorker?
        var timing: CycleTimingRecorder?
        /// The output device is away and the capture runs alone: the output graph renders on, into nothing, so what
        /// it records or encodes goes on.
        var captureOnly = false

        // Per connection (set by `connect`).
        var rateBridge: RateBridge?
        var driftBridge: DriftBridge?
        var captureBuffer: RawPCMBuffer?
        var outputBuffer: RawPCMBuffer?
        /// Float32 for a client callback's output that goes through the rate bridge.
        var callbackScratch: PCMBuffer?
        /// The drift bridge's next playback sample time if no cycle is lost (0 at each connection).
        var nextDeviceSampleTime: Int64 = 0
        /// Client frames rendered through the rate bridge since the connection, and the client time they start at.
        var clientFrames: Int64 = 0
        var clientTimeBase: Int64 = 0
        var deviceRate: Double = 0
        var clientRate: Double = 0

        // The sample time across connections.
        /// Added to the driver's sample time: the frames (and gaps) of earlier connections.
        var sampleTimeOffset: Int64 = 0
        /// After a reconnect, the new driver's first cycle places the sample time where the clock says the stream
        /// would be: `resyncFrom` (where the last connection ended) plus the time since `resyncAnchor` (that
        /// connection's last cycle). Set before the driver starts.
        var resyncPending = false
        var resyncFrom: Int64 = 0
        var resyncAnchor: UInt64 = 0
        /// When the last cycle ran (read after the driver that ran it stopped; 0: none since it was cleared).
        var lastCycleNanoseconds: UInt64 = 0
    }

    let state = RenderThreadBound(State())

    // Device thread → anyone.
    private let lastSampleEnd = Atomic<Int64>(0)
    let cycles = Atomic<Int>(0)
    let graphFailures = Atomic<Int>(0)
    /// The real-time probe's hook, found when the cycle is made (never on the device thread).
    private let renderScopeHook = la_find_render_scope_hook()

    /// The sample time the next cycle starts at.
    var sampleEnd: Int64 { lastSampleEnd.load(ordering: .acquiring) }

    /// Places the stream's sample time (control side, no driver running).
    func setSampleEnd(_ value: Int64) {
        lastSampleEnd.store(value, ordering: .releasing)
    }

    /// Readies the cycle for a driver's grant: the bridges the grant needs, the client's buffers, and what the graphs
    /// are told of their cycles. Control side, before the driver starts. Returns notes for the user.
    func connect(
        grant: DeviceGrant, request: DeviceRequest, inputFormat: StreamFormat?, outputFormat: StreamFormat?,
        backend: DeviceBackend, virtual: VirtualDeviceOptions, conversionQuality: SampleRateConverter.Quality,
        handlerGraphs: [RenderGraph]
    ) throws(AudioError) -> [String] {
        var st = state.whileStopped
        defer { state.whileStopped = st }
        st.deviceRate = grant.sampleRate
        st.clientRate = request.sampleRate
        var notes: [String] = []
        // Client cycles: the device's period, or — converting — as many client frames as one takes.
        var clientPeriod = grant.periodFrames
        if grant.independentClocks, grant.inputChannels > 0, grant.outputChannels > 0 {
            // The FIFO's target covers the larger of the two periods: capture may arrive a period of its own at a
            // time (ALSA reports its period as the input latency).
            let drift = try DriftBridge(
                sampleRate: grant.sampleRate, channelCount: grant.inputChannels,
                period: max(grant.periodFrames, grant.inputLatencyFrames), maximumCycle: grant.periodFrames)
            st.driftBridge = drift
            notes.append(
                "capture and playback run on two clocks: resampling the capture to follow their drift (adds "
                    + "\(String(format2: Double(drift.latencyFrames) / grant.sampleRate * 1000)) ms)")
        } else {
            st.driftBridge = nil
        }
        st.nextDeviceSampleTime = 0
        if grant.sampleRate != request.sampleRate {
            let ratio = request.sampleRate / grant.sampleRate
            let maximum = st.graph?.maximumFrames ?? (Int((Double(grant.periodFrames) * ratio).rounded(.up)) + 64)
            let made = try RateBridge(
                deviceRate: grant.sampleRate, clientRate: request.sampleRate, inputChannels: grant.inputChannels,
                outputChannels: grant.outputChannels, devicePeriod: grant.periodFrames, clientMaximum: maximum,
                quality: conversionQuality)
            st.rateBridge = made
            st.callbackScratch = st.outputCallback == nil || grant.outputChannels == 0
                ? nil : PCMBuffer(channelCount: grant.outputChannels, capacity: maximum)
            clientPeriod = maximum
            st.clientFrames = 0
            st.clientTimeBase = Int64((Double(st.sampleTimeOffset) * ratio).rounded())
            notes.append(
                "the device runs at \(formatHz(grant.sampleRate)), not \(formatHz(request.sampleRate)): converting "
                    + "between them (adds \(String(format2: (made.captureLatency + made.playLatency) * 1000)) ms)")
        } else {
            st.rateBridge = nil
            st.callbackScratch = nil
            if let graph = st.graph, grant.periodFrames > graph.maximumFrames {
                throw AudioError(
                    .formatMismatch,
                    "the device runs \(grant.periodFrames)-frame cycles but the graph renders at most \(graph.maximumFrames)")
            }
        }
        if let format = inputFormat, st.captureBuffer?.capacity ?? 0 < clientPeriod {
            st.captureBuffer = RawPCMBuffer(format: format, capacity: clientPeriod)
        }
        if let format = outputFormat, st.outputCallback != nil, st.outputBuffer?.capacity ?? 0 < clientPeriod {
            st.outputBuffer = RawPCMBuffer(format: format, capacity: clientPeriod)
        }
        // What the cycles will be: units that work on threads of their own (voiceProcessing) size their lead to
        // them, or wait for their threads when nothing has a deadline.
        let largestCycle =
            if st.rateBridge != nil {
                // Every client cycle of one device cycle runs back to back.
                Int((Double(grant.periodFrames) * request.sampleRate / grant.sampleRate).rounded(.up))
                    + 2 * RateBridge.minimumClientCycle
            } else if backend == .virtual {
                virtual.maximumCycle(period: grant.periodFrames)
            } else {
                grant.periodFrames
            }
        let context: RenderingMode =
            backend == .virtual && virtual.pacing == .asFastAsPossible ? .offline : .realTime(maximumCycleFrames: largestCycle)
        st.graph?.willRender(context)
        for g in handlerGraphs { g.willRender(context) }
        if let captureProcessing = st.captureProcessing {
            guard clientPeriod <= captureProcessing.maximumFrames else {
                throw AudioError(
                    .formatMismatch,
                    "the device's cycles bring up to \(clientPeriod) frames but the capture processor takes at most "
                        + "\(captureProcessing.maximumFrames)")
            }
            captureProcessing.willRender(context, largestCycle: largestCycle)
        }
        return notes
    }

    /// Seconds the rate conversion adds (capture plus playback); 0 without one. Control side.
    var conversionLatency: Double { state.whileStopped.rateBridge.map { $0.captureLatency + $0.playLatency } ?? 0 }

    /// A virtual device run as fast as possible waits for the file sources' next frames (a read error or a stopped
    /// worker ends the wait; the render then counts the underrun as usual).
    func prepareCycle(frames: Int) {
        try? state.onRenderThread.readAhead?.waitUntilReady(frames: frames)
    }

    func deviceCycle(input: BufferView?, output: BufferView?, time: DeviceCycleTime) {
        // The handler's scope for the real-time probe (nil unless a test preloads it): one branch per cycle.
        let scope = renderScopeHook
        scope?(1)
        defer { scope?(-1) }
        let began = monotonicNanoseconds()
        let timing = state.onRenderThread.timing
        let usageAtStart = timing?.usageAtStart()
        let (sampleTime, frames, failures) = state.onRenderThread.run(input: input, output: output, time: time, began: began)
        if failures > 0 { graphFailures.add(failures, ordering: .relaxed) }
        cycles.add(1, ordering: .relaxed)
        lastSampleEnd.store(sampleTime + Int64(frames), ordering: .releasing)
        timing?.record(start: began, sampleTime: sampleTime, frames: frames, usageAtStart: usageAtStart)
    }
}

extension DeviceCycle.State {
    /// One device cycle, begun at `began`: its sample time, its frames, and the graph's failed renders.
    mutating func run(input captured: BufferView?, output: BufferView?, time: DeviceCycleTime, began: UInt64)
        -> (sampleTime: Int64, frames: Int, failures: Int)
    {
        var input = captured
        var time = time
        if let driftBridge, let captured, let output {
            // Two clocks: the capture, on its own clock, becomes the playback clock's frames. A gap in the
            // playback's sample time (it stopped and restarted: an xrun) brings the capture that piled up meanwhile
            // in this cycle; the bridge drops what would otherwise stay as latency.
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
        var failures = 0
        if let rateBridge {
            bridgedCycle(rateBridge, input: input, output: output, time: time, failures: &failures)
        } else {
            let playback: Playback? = output.map { .device($0) } ?? (captureOnly ? .nothing : nil)
            clientCycle(frames: frames, sampleTime: sampleTime, captured: input, time: time, playback: playback, failures: &failures)
        }
        return (sampleTime, frames, failures)
    }

    /// Where a client cycle's playback goes.
    private enum Playback {
        /// The device's output buffer, at the client's rate.
        case device(BufferView)
        /// The rate bridge's playback converter.
        case rateBridge(RateBridge, scratch: PCMBuffer?)
        /// Nowhere (capture-only): the graph renders on, and the echo canceller's reference is silence.
        case nothing

        func play(_ rendered: BufferView) {
            switch self {
            case .device(let output): output.copy(from: rendered.upmixed(to: output.channelCount))
            case .rateBridge(let bridge, _): bridge.play(rendered.upmixed(to: bridge.playChannels))
            case .nothing: break
            }
        }

        func playSilence(frames: Int) {
            switch self {
            case .device(let output): output.clear()
            case .rateBridge(let bridge, _): bridge.playSilence(frames: frames)
            case .nothing: break
            }
        }

        /// Where a client callback's Float32 output is decoded to, before ``play(_:)``.
        func callbackDestination(frames: Int) -> BufferView? {
            switch self {
            case .device(let output): output
            case .rateBridge(_, let scratch): scratch?.view(frames: frames)
            case .nothing: nil
            }
        }
    }

    /// The one path, for `frames` client frames: capture through the processor to the handler and the input node,
    /// then the graph (or callback) to `playback` (nil: none this cycle).
    private mutating func clientCycle(
        frames: Int, sampleTime: Int64, captured: BufferView?, time: DeviceCycleTime, playback: Playback?, failures: inout Int
    ) {
        if var captured {
            let captureStamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime)
            var handlerStamp = captureStamp
            if let captureProcessing {
                captured = captureProcessing.process(captured, timeStamp: captureStamp)
                // What comes out of the processor reached the device its latency earlier.
                handlerStamp.hostTime -= min(handlerStamp.hostTime, captureProcessing.latencyNanoseconds)
            }
            if let captureHandler, let captureBuffer {
                let raw = captureBuffer.view(frames: frames)
                PCMConversion.encode(captured, into: raw)
                captureHandler(raw, handlerStamp)
            }
            input?.current.onRenderThread = captured
        }
        defer { input?.current.onRenderThread = nil }
        guard let playback else { return }
        let processing = captureProcessing
        if case .nothing = playback {
            // Capture-only: the graph renders on (recordings, the song, encoders) into nothing.
            guard let graph else { return }
            let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.inputHostTime)
            if !graph.renderCycle(frames: frames, timeStamp: stamp, consume: { _ in }) { failures += 1 }
            processing?.playedSilence(frames: frames)
            readAhead?.requestIfNeeded()
            return
        }
        let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: time.outputHostTime)
        if let graph {
            let rendered = graph.renderCycle(frames: frames, timeStamp: stamp) { rendered in
                playback.play(rendered)
                processing?.played(rendered)
            }
            if !rendered {
                failures += 1
                playback.playSilence(frames: frames)
                processing?.playedSilence(frames: frames)
            }
            readAhead?.requestIfNeeded()
        } else if let outputCallback, let outputBuffer, let destination = playback.callbackDestination(frames: frames) {
            let raw = outputBuffer.view(frames: frames)
            outputCallback(raw, stamp)
            PCMConversion.decode(raw, into: destination)
            if case .rateBridge(let bridge, _) = playback { bridge.play(destination) }
            processing?.played(destination)
        } else {
            playback.playSilence(frames: frames)
            processing?.playedSilence(frames: frames)
        }
    }

    /// The rate bridge's adapter: the capture converted to the client's rate, the path run as many times (of varying
    /// sizes) as the device's playback needs, and what it played converted to the device's rate. With capture only,
    /// the path gets what the capture converted to.
    private mutating func bridgedCycle(
        _ bridge: RateBridge, input: BufferView?, output: BufferView?, time: DeviceCycleTime, failures: inout Int
    ) {
        if let input { bridge.capture(input) }
        if let output {
            let playback = Playback.rateBridge(bridge, scratch: callbackScratch)
            for _ in 0..<RateBridge.maximumClientCycles {
                let k = bridge.framesToRender(deviceFrames: output.frameCount)
                if k == 0 { break }
                let sampleTime = clientTimeBase + clientFrames
                clientFrames += Int64(k)
                clientCycle(
                    frames: k, sampleTime: sampleTime, captured: input == nil ? nil : bridge.takeCapture(k), time: time,
                    playback: playback, failures: &failures)
            }
            bridge.takePlayback(into: output)
        } else if input != nil {
            let k = bridge.captureReady
            if k > 0 {
                let sampleTime = clientTimeBase + clientFrames
                clientFrames += Int64(k)
                clientCycle(
                    frames: k, sampleTime: sampleTime, captured: bridge.takeCapture(k), time: time,
                    playback: captureOnly ? .nothing : nil, failures: &failures)
            }
        }
    }

    /// The first cycle after a reconnect: its frames end where the clock says the stream would be, counted from the
    /// last cycle of the connection that failed (never overlapping what that one delivered).
    private mutating func resync(at now: UInt64, deviceSampleTime: Int64, frames: Int) {
        resyncPending = false
        let elapsed = now > resyncAnchor ? Int64(Double(now - resyncAnchor) * deviceRate / 1e9) : 0
        // This cycle begins here, in device frames: where the last one ended plus the time away (never before it).
        let begins = resyncFrom + max(0, elapsed - Int64(frames))
        sampleTimeOffset = begins - deviceSampleTime
        resyncAnchor = 0
        if rateBridge != nil {
            // The client's time at this cycle (no client frame has been counted since the connection).
            clientTimeBase = Int64((Double(begins) * clientRate / deviceRate).rounded())
        }
    }
}
