import FoundationEssentials
import Synchronization

/// The streaming SDK in one object: an input (a device through the I/O unit, or a file paced in real time), an
/// optional effects graph, the AAC encoder, and any number of outputs at once — RTMP servers and FLV, M4A or ADTS
/// files. Start, stop, mute, volume, statistics.
///
/// ```swift
/// var configuration = LiveStreamSession.Configuration(input: .device(name: nil, backend: .alsa))
/// configuration.graphPath = "Examples/graphs/voice-chain.json"
/// configuration.outputs = [.rtmp(try RTMPURL("rtmp://127.0.0.1/live/key")), .file("show.m4a")]
/// let session = try LiveStreamSession(configuration)
/// try await session.start()
/// session.volume = 0.8
/// …
/// let summary = await session.stop()
/// ```
///
/// The audio path is one graph, wired as a karaoke room's: the input feeds its `input` node, the
/// graph file's chain, the volume, and as sinks the meters, the loudness and the encoder's tap, which hands each block
/// to the encoder worker without allocating or locking. The device renders it each capture cycle on its real-time
/// thread (a live stream is a room with no takes and no playback); a file input's pacer renders it a block at a time.
/// Packets fan out to the outputs on the worker's thread; each RTMP output has its own bounded queue, so a slow
/// server never holds up the files or the other servers.
public final class LiveStreamSession: Sendable {
    /// Set by ``StreamControl/stop`` (a display asked the owner to stop the session).
    let stopRequest = Atomic<Bool>(false)
    /// The configuration the session was made from.
    public let configuration: Configuration
    /// The session's rate, Hz: the graph's, or the configured one without a graph.
    public let sampleRate: Double
    /// The encoded channel count: the graph's, or the configured one without a graph.
    public let channelCount: Int

    private let parts: StreamGraph
    /// The encoder and its outputs: made again after a start that failed (a publisher and an encoding worker run
    /// once), while nothing runs.
    private let encodedOutputs: Locked<EncodedOutputs>
    private var encoded: EncodedOutputs { encodedOutputs.withLock { $0 } }
    private var worker: AACEncodingWorker { encoded.worker }
    private let io: IOUnit?
    private let pacer: FilePacer?
    private let lifecycle = LockedLifecycle(name: "the live stream")
    /// What the stop that did the work returned: what later (and concurrent) stops return too.
    private let finalSummary = Locked<Summary?>(nil)
    /// The file pacer's read-ahead worker, set by start, taken by stop and deinit.
    private let readAhead = Locked<ReadAheadWorker?>(nil)

    /// Checks everything that can be checked before anything opens: the graph, the input, the outputs, the
    /// encoder settings.
    /// - Throws: ``/AudioCore/AudioError``: `.invalidGraphDescription` (no or several input nodes),
    ///   `.unsupportedSampleRate`, `.invalidParameter`, `.invalidURL`, `.unsupportedFile`, `.fileIO` (an input file
    ///   that cannot be read, an output folder that does not exist), `.corruptFile`.
    public init(_ configuration: Configuration) throws(AudioError) {
        self.configuration = configuration
        guard !configuration.outputs.isEmpty else {
            throw AudioError(.invalidParameter, "a live stream needs at least one output: an rtmp:// URL or a .flv/.m4a/.aac file")
        }
        let parts = try StreamGraph(configuration, maximumFrames: max(DeviceRequest.maximumPeriodFrames, 4096))
        self.parts = parts
        sampleRate = parts.graph.format.sampleRate
        channelCount = parts.graph.format.channelCount
        let encoded = try Self.encodedOutputs(configuration, sampleRate: sampleRate, channelCount: channelCount)
        encodedOutputs = Locked(encoded)
        parts.encoder.outputs = encoded
        parts.encoder.start(atSampleTime: 0)

        // The input.
        let inputChannels = parts.input.outputFormats[0].channelCount
        switch configuration.input {
        case .file(let path, let realTime):
            let reader = try AudioFile.open(path: path, sampleRate: sampleRate, channelCount: inputChannels)
            pacer = FilePacer(reader: reader, graph: parts, realTime: realTime)
            io = nil
        case .device(let name, let backend):
            pacer = nil
            var device = IOUnit.Configuration(
                backend: backend,
                inputFormat: try StreamFormat(sampleRate: sampleRate, channelCount: inputChannels, sampleType: .float32, interleaved: false),
                inputDevice: name, periodFrames: configuration.periodFrames, periodCount: configuration.periodCount,
                reconnect: configuration.reconnectDevice, jackServer: configuration.jackServer,
                virtual: VirtualDeviceOptions(pacing: configuration.virtualPacing))
            device.reconnectTimeout = configuration.deviceReconnectTimeout
            let io = try IOUnit(device)
            try io.setInputUnit(parts.input)
            try io.setCaptureGraph(parts.graph)
            self.io = io
        }
    }

    deinit {
        pacer?.stop()
        io?.stop()
        readAhead.withLock { $0 }?.stop()
    }

    // MARK: Control

    /// Opens the files, connects to every RTMP server (all must accept), then starts the encoder and the input.
    /// A ``stop()`` meanwhile breaks the start off at once (a server that has not answered is not waited for).
    /// - Throws: ``/AudioCore/AudioError`` from the first output or the input that fails, or `.invalidState` when
    ///   stopped meanwhile, started already or stopped before; whatever had opened is closed and files already
    ///   created are deleted. After a failure (not a stop) the session may be started again.
    public func start() async throws(AudioError) {
        try lifecycle.startRequested()
        var encoding = false
        do throws(AudioError) {
            try await encoded.start()
            encoding = true
            try lifecycle.checkStarting()
            if let io {
                try io.start()
            } else if let pacer {
                let realTime = if case .file(_, let r) = configuration.input { r } else { true }
                // The pacer's blocks: real-time ones, or none with a deadline.
                parts.graph.willRender(realTime ? .realTime(maximumCycleFrames: FilePacer.block) : .offline)
                let worker = try parts.graph.prepareToRender(readAhead: "la-stream-read", readyFrames: 8192)
                readAhead.withLock { $0 = worker }
                try pacer.start(readAhead: worker, worker: self.worker)
            }
        } catch {
            if encoding { await encoded.abandon() }
            readAhead.withLock { w in defer { w = nil }; return w }?.stop()
            // Made again for the next start (they were checked when the session was made).
            if let fresh = try? Self.encodedOutputs(configuration, sampleRate: sampleRate, channelCount: channelCount) {
                encodedOutputs.withLock { $0 = fresh }
                parts.encoder.outputs = fresh
            }
            let interrupted = lifecycle.startEnded(succeeded: false)
            throw interrupted ? AudioError(.invalidState, "the live stream was stopped while it started") : error
        }
        lifecycle.startEnded(succeeded: true)
    }

    private static func encodedOutputs(_ configuration: Configuration, sampleRate: Double, channelCount: Int) throws(AudioError)
        -> EncodedOutputs
    {
        try EncodedOutputs(
            outputs: configuration.outputs, sampleRate: sampleRate, channelCount: channelCount,
            bitRate: configuration.bitRate, rtmp: configuration.rtmp, bufferedSeconds: configuration.encoderBufferSeconds,
            pool: configuration.workerPool)
    }

    /// Stops the input, encodes what is buffered, finishes the files and unpublishes. Safe to call more than once.
    public func stop() async -> Summary {
        switch lifecycle.stopRequested() {
        case .nothing:
            return finalSummary.withLock { $0 } ?? Summary(statistics: statistics, error: nil)
        case .waitForStop:
            await lifecycle.waitForStop()
            return finalSummary.withLock { $0 } ?? Summary(statistics: statistics, error: nil)
        case .interruptStart:
            await encoded.interrupt()
            // The start undoes what it opened; if it got through anyway, what it started is stopped below.
            guard await lifecycle.waitForStart() else { return Summary(statistics: statistics, error: nil) }
        case .stop:
            break
        }
        pacer?.stop()
        io?.stop()
        let failure = await encoded.finish(inputFrames: framesTaken)
        readAhead.withLock { w in defer { w = nil }; return w }?.stop()
        let summary = Summary(statistics: statistics, error: failure ?? pacer?.failure ?? io?.failure)
        finalSummary.withLock { $0 = summary }
        lifecycle.stopEnded()
        return summary
    }

    /// While true, silence is encoded (timestamps go on, so players and servers see a steady stream).
    public var isMuted: Bool {
        get { parts.volume.muted.load(ordering: .relaxed) }
        set { parts.volume.muted.store(newValue, ordering: .relaxed) }
    }

    /// Linear gain applied after the graph, 0 … 4; changes ramp over one block.
    public var volume: Float {
        get { parts.volume.volume }
        set { parts.volume.volume = newValue }
    }

    /// The error that stopped the session: a file output that could not be written, a damaged file input, or a
    /// device that went away for good (reconnect off, or not back within the reconnect timeout).
    public var failure: AudioError? { worker.failure ?? pacer?.failure ?? io?.failure }

    /// True while the input's device is open: from a start that got that far to the stop (false for a file input).
    public var isDeviceOpen: Bool { io?.isStarted ?? false }

    /// True once a file input has been played to its end, the device stopped for good, or encoding failed.
    public var hasEnded: Bool {
        if pacer?.hasEnded == true || worker.failure != nil { return true }
        if let io { return io.inputHasEnded || io.failure != nil }
        return false
    }

    /// Device events (start, xruns, faults, reconnects) for a device input; nil for a file.
    public var deviceEvents: AsyncStream<DeviceEvent>? { io?.events }
    /// What the capture device granted (its rate may differ from the session's: then the I/O unit converts), while
    /// a device session runs.
    public var deviceGrant: DeviceGrant? { io?.grant }

    /// Frames of input taken in, at the session's rate: the sample time after the last block handed to the encoder.
    private var framesTaken: Int64 { encoded.framesPushed }

    /// The figures now.
    public var statistics: Statistics {
        Statistics(
            seconds: Double(framesTaken) / sampleRate, packetsEncoded: worker.packetsEncoded,
            framesDropped: worker.droppedFrames, renderFailures: pacer?.renderFailures ?? io?.renderFailures ?? 0,
            xruns: io?.xrunCount ?? 0, deviceReconnects: io?.reconnectCount ?? 0, isMuted: isMuted, volume: volume,
            outputs: encoded.statistics, loudness: parts.loudness.read())
    }

    /// The publishers of the RTMP outputs, for their statistics streams.
    public var rtmpPublishers: [RTMPPublisher] { encoded.publishers.map(\.1) }

    /// Levels for a VU display: each reading covers what passed since the previous one (poll it, e.g. 10 times a
    /// second). Lock-free on the audio thread.
    public var meters: Meters {
        Meters(input: parts.inputMeter.read(), output: parts.outputMeter.read(), loudness: parts.loudness.read())
    }

    /// A unit of the graph by its id in the graph file, for live control while streaming (`"room"` → its reverb:
    /// `try session.unit(named: "room")?.parameter("wetDryMix").set(35)`); nil without a graph or for an unknown id.
    public func unit(named id: String) -> RenderUnit? { parts.loaded?.units[id] }
}
