import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
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
/// The audio path runs on the input's thread (the device's real-time thread, or the file pacer): the graph
/// renders with the input feeding its `input` node, the volume ramps, and the block goes to the encoder worker
/// without allocating or locking. Packets fan out to the outputs on the worker's thread; each RTMP output has its
/// own bounded queue, so a slow server never holds up the files or the other servers.
public final class LiveStreamSession: Sendable {
    /// Where the session's audio comes from: a capture device or an audio file.
    public enum Input: Sendable, Hashable, CustomStringConvertible {
        /// A capture device: an ALSA PCM, a JACK client, or for `.virtual` a WAV file played as the microphone
        /// (nil: the default device).
        case device(name: String?, backend: DeviceBackend)
        /// Any audio file FFmpeg decodes, resampled to the session's rate; paced in real time unless `realTime`
        /// is false (then as fast as the encoder goes).
        case file(path: String, realTime: Bool)

        public var description: String {
            switch self {
            case .device(let name, let backend): "\(backend) device \(name ?? "(default)")"
            case .file(let path, let realTime): "file \(path)\(realTime ? " (real time)" : "")"
            }
        }
    }

    /// Where the encoded AAC goes: an RTMP server or a file. A session sends to any number at once.
    public enum Output: Sendable, Hashable, CustomStringConvertible {
        /// An RTMP or RTMPS server, published to as FLV audio.
        case rtmp(RTMPURL)
        /// An FLV, M4A/MP4 or ADTS (.aac) file, by extension.
        case file(String)

        /// An rtmp:// or rtmps:// URL, or a file name.
        /// - Throws: ``/AudioCore/AudioError`` `.invalidURL` for a bad URL, `.unsupportedFile` for an unknown
        ///   extension. The message never repeats the text beyond a URL's scheme or a file's extension: a mistyped
        ///   destination (`rtmp:/host/app/KEY`, `rtmpx://…`, `host/app/KEY`) still holds a stream key.
        public init(parsing text: String) throws(AudioError) {
            let lower = text.lowercased()
            if lower.hasPrefix("rtmp://") || lower.hasPrefix("rtmps://") {
                self = .rtmp(try RTMPURL(text))
            } else if let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix(":/") {
                // A URL of another scheme, or a mistyped one: only a plausible scheme name is repeated.
                let scheme = text[..<colon]
                let plausible = scheme.count <= 16 && scheme.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) }
                throw AudioError(
                    .invalidURL,
                    "cannot stream to \(plausible ? "a '\(scheme.lowercased()):/…' URL" : "that URL"): use rtmp://host/app/key, "
                        + "rtmps://…, or a .flv, .m4a, .mp4 or .aac file")
            } else {
                guard AACContainer(path: text) != nil else {
                    let name = text.split(separator: "/").last ?? ""
                    let ext = name.lastIndex(of: ".").map { String(name[$0...]) }
                    let shown = ext.map { "a file ending in '\($0.prefix(12))'" } ?? "a name without an extension"
                    throw AudioError(
                        .unsupportedFile,
                        "cannot stream to \(shown): a file name must end in .flv, .m4a, .mp4 or .aac, and a URL must "
                            + "start with rtmp:// or rtmps://")
                }
                self = .file(text)
            }
        }

        /// Destinations from a file: one per line; blank lines and lines starting with `#` are skipped, and
        /// spaces around each line are trimmed. The way to keep stream keys out of the command line (which every
        /// local user can read in /proc/PID/cmdline) and out of shell history.
        /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the file cannot be read, `.invalidParameter` when it
        ///   holds no destination, or what ``init(parsing:)`` throws for a line (naming the line, never its text).
        public static func parsingLines(of path: String) throws(AudioError) -> [Output] {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw AudioError(.fileIO, "cannot read the destinations file '\(path)'")
            }
            var outputs: [Output] = []
            for (n, line) in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let text = line.trimmingWhitespace()
                if text.isEmpty || text.hasPrefix("#") { continue }
                do throws(AudioError) {
                    outputs.append(try Output(parsing: text))
                } catch {
                    throw AudioError(error.code, "'\(path)' line \(n + 1): \(error.message)")
                }
            }
            guard !outputs.isEmpty else {
                throw AudioError(.invalidParameter, "the destinations file '\(path)' holds no destination")
            }
            return outputs
        }

        /// Safe to print: RTMP stream keys are hidden.
        public var description: String {
            switch self {
            case .rtmp(let url): url.description
            case .file(let path): path
            }
        }
    }

    /// Everything a session is made from; checked by ``LiveStreamSession/init(_:)``, read-only afterwards.
    public struct Configuration: Sendable {
        /// Where the audio comes from.
        public var input: Input
        /// A graph file with one node of type "input" where the input enters; nil: the input is encoded as is.
        public var graphPath: String?
        /// The node types the graph file may use (add your own units to the standard ones).
        public var unitRegistry = UnitRegistry.standard
        /// The session's rate, Hz, when there is no graph (default 48000; a graph sets its own).
        public var sampleRate: Double = 48_000
        /// The encoder's channel count when there is no graph (default 2; a graph sets its own).
        public var channelCount = 2
        /// Channels taken from the input. With a graph, its input node's; without, nil means 1 for a device (a
        /// microphone, upmixed) and the stream's channel count for a file.
        public var inputChannels: Int?
        /// The AAC bit rate, bits per second for all channels together (default 128000; 32000 … 320000, and no
        /// more than AAC carries at the rate and channel count).
        public var bitRate = 128_000
        /// Where the encoded audio goes; at least one is needed.
        public var outputs: [Output] = []
        /// Device buffering: frames per period asked of the device (default 1024).
        public var periodFrames = 1024
        /// Periods in the device buffer asked for (ALSA; default 3).
        public var periodCount = 3
        /// The JACK server's name for the `.jack` backend (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        /// Reopen a device input after a fault until it returns or ``deviceReconnectTimeout`` passes (default true).
        public var reconnectDevice = true
        /// Seconds a device that went away is reopened for before the session gives up (see
        /// ``/AudioDevices/IOUnit/Configuration/reconnectTimeout``).
        public var deviceReconnectTimeout = 30.0
        /// For `.virtual` devices: pacing of the WAV file read as the microphone.
        public var virtualPacing: VirtualDeviceOptions.Pacing = .realTime
        /// Settings every RTMP output shares (queue, timeouts, reconnects, TLS).
        public var rtmp = RTMPPublisher.Configuration()
        /// Seconds of audio the encoder's input ring holds.
        public var encoderBufferSeconds = 2.0

        /// A configuration with every other setting at its default.
        /// - Parameters:
        ///   - input: where the audio comes from.
        ///   - outputs: where the encoded audio goes (may be set later; a session needs at least one).
        public init(input: Input, outputs: [Output] = []) {
            self.input = input
            self.outputs = outputs
        }
    }

    /// What one output has done.
    public struct OutputStatistics: Sendable, CustomStringConvertible {
        /// The output these figures are for.
        public let output: Output
        /// For RTMP outputs.
        public let rtmp: RTMPStatistics?
        /// For files: packets written.
        public let packetsWritten: Int

        public var description: String {
            if let rtmp { "\(output): \(rtmp)" } else { "\(output): \(packetsWritten) packets" }
        }
    }

    /// The session's figures at one moment (``LiveStreamSession/statistics``).
    public struct Statistics: Sendable, CustomStringConvertible {
        /// Seconds of input taken in.
        public var seconds: Double
        /// AAC packets the encoder has made (each 1024 frames).
        public var packetsEncoded: Int
        /// Frames the encoder's ring had no room for (the encoder fell behind).
        public var framesDropped: Int64
        /// Blocks the graph could not render (silence was encoded in their place).
        public var renderFailures: Int
        /// Device under- and overruns (0 for a file input).
        public var xruns: Int
        /// Times the device was reopened after a fault (0 for a file input).
        public var deviceReconnects: Int
        /// Whether silence is being encoded (``LiveStreamSession/isMuted``).
        public var isMuted: Bool
        /// The linear gain after the graph, 0 … 4 (``LiveStreamSession/volume``).
        public var volume: Float
        /// Each output's figures, in the order configured (a file not yet opened by the start is left out).
        public var outputs: [OutputStatistics]
        /// The loudness of what is encoded (EBU R128): integrated, range and true peak since the start, momentary
        /// and short-term now.
        public var loudness: LoudnessReading

        public var description: String {
            var parts = [
                String(cFormat: "%7.1f s", seconds), "aac \(packetsEncoded) packets",
                "encoder drops \(framesDropped) frames", "xruns \(xruns)", loudness.statusText,
            ]
            if renderFailures > 0 { parts.append("render failures \(renderFailures)") }
            if isMuted { parts.append("muted") } else if volume != 1 { parts.append(String(cFormat: "volume %.2f", volume)) }
            var line = parts.joined(separator: ", ")
            for o in outputs { line += " | \(o)" }
            return line
        }
    }

    /// How a session ended.
    public struct Summary: Sendable {
        /// The figures at the stop.
        public let statistics: Statistics
        /// The first error of the encoder or a file output, if any.
        public let error: AudioError?
    }

    /// Set by ``StreamControl/stop`` (a display asked the owner to stop the session).
    let stopRequest = Atomic<Bool>(false)
    /// The configuration the session was made from.
    public let configuration: Configuration
    /// The session's rate, Hz: the graph's, or the configured one without a graph.
    public let sampleRate: Double
    /// The encoded channel count: the graph's, or the configured one without a graph.
    public let channelCount: Int

    private let processor: StreamProcessor
    /// The encoder and the outputs' fan-out (shared with ``KaraokeSession``).
    /// The encoder and its outputs: made again after a start that failed (a publisher and an encoding worker run
    /// once), while nothing runs.
    private let encodedOutputs: Locked<EncodedOutputs>
    private var encoded: EncodedOutputs { encodedOutputs.withLock { $0 } }
    private var worker: AACEncodingWorker { encoded.worker }
    private let loaded: LoadedGraph?
    private let io: IOUnit?
    private let fileReader: (any AudioFileReader & Sendable)?
    private let ended = Atomic<Bool>(false)
    private let stopPacer = Atomic<Bool>(false)
    private let lifecycle = LockedLifecycle(name: "the live stream")
    /// What the stop that did the work returned: what later (and concurrent) stops return too.
    private let finalSummary = Locked<Summary?>(nil)
    /// The file pacer and the read-ahead worker, set by start, taken by stop and deinit.
    private let threads = Locked<(pacer: WorkerThread?, readAhead: ReadAheadWorker?)>((nil, nil))

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
        let maximumFrames = max(DeviceRequest.maximumPeriodFrames, 4096)
        var inputUnit: InputUnit?
        if let path = configuration.graphPath {
            let loaded = try GraphFile.load(path: path, maximumFrames: maximumFrames, registry: configuration.unitRegistry)
            inputUnit = try loaded.onlyInput(
                as: "a live-stream graph", meaning: "where the microphone or file enters", source: path
            ).unit
            self.loaded = loaded
            sampleRate = loaded.graph.format.sampleRate
            channelCount = loaded.graph.format.channelCount
        } else {
            loaded = nil
            sampleRate = configuration.sampleRate
            channelCount = configuration.channelCount
        }
        let defaultChannels = if case .device = configuration.input { 1 } else { channelCount }
        let inputChannels = inputUnit?.outputFormats[0].channelCount ?? configuration.inputChannels ?? defaultChannels
        guard inputUnit != nil || inputChannels == channelCount || inputChannels == 1 else {
            throw AudioError(
                .invalidParameter,
                "the input has \(inputChannels) channels but the stream \(channelCount): without a graph they must match (or the input be mono)")
        }
        let encoded = try Self.encodedOutputs(configuration, sampleRate: sampleRate, channelCount: channelCount)
        encodedOutputs = Locked(encoded)

        // The input.
        let format = try StreamFormat(
            sampleRate: sampleRate, channelCount: inputChannels, sampleType: .float32, interleaved: false)
        switch configuration.input {
        case .file(let path, _):
            fileReader = try AudioFile.open(path: path, sampleRate: sampleRate, channelCount: inputChannels)
            io = nil
        case .device(let name, let backend):
            fileReader = nil
            var device = IOUnit.Configuration(
                backend: backend, inputFormat: format, inputDevice: name, periodFrames: configuration.periodFrames,
                periodCount: configuration.periodCount, reconnect: configuration.reconnectDevice,
                jackServer: configuration.jackServer, virtual: VirtualDeviceOptions(pacing: configuration.virtualPacing))
            device.reconnectTimeout = configuration.deviceReconnectTimeout
            io = try IOUnit(device)
        }

        processor = StreamProcessor(
            graph: loaded?.graph, input: inputUnit, channelCount: channelCount, sampleRate: sampleRate,
            maximumFrames: maximumFrames, outputs: encoded)
        if let io {
            let processor = processor
            try io.setCaptureHandler { raw, stamp in
                let view = BufferView(
                    base: raw.base.assumingMemoryBound(to: Float.self), channelStride: raw.planeStride / 4,
                    channelCount: raw.format.channelCount, frameCount: raw.frameCount)
                processor.process(view, sampleTime: stamp.sampleTime, hostTime: stamp.hostTime)
            }
        }
    }

    deinit {
        stopPacer.store(true, ordering: .relaxed)
        let t = threads.withLock { $0 }
        t.pacer?.join()
        io?.stop()
        t.readAhead?.stop()
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
            if let graph = loaded?.graph {
                if graph.state == .uninitialized { try graph.initialize() }
                if graph.state == .initialized { try graph.start() }
                let reading = graph.readingAheadUnits
                if !reading.isEmpty {
                    let worker = try ReadAheadWorker(units: reading, name: "la-stream-read")
                    try worker.waitUntilReady(frames: 8192)
                    threads.withLock { $0.readAhead = worker }
                    processor.readAhead = worker
                }
            }
            if let io {
                if let graph = loaded?.graph { try io.announceCycles(to: graph) }
                try io.start()
            } else if fileReader != nil {
                let realTime = if case .file(_, let r) = configuration.input { r } else { true }
                // The pacer's blocks: real-time ones, or none with a deadline.
                loaded?.graph.willRender(realTime ? .realTime(maximumCycleFrames: Self.fileBlock) : .offline)
                let pacer = try WorkerThread(name: "la-stream-file") { [self] in pace(fileReader!, realTime: realTime) }
                threads.withLock { $0.pacer = pacer }
            }
        } catch {
            if encoding { await encoded.abandon() }
            threads.withLock { t in defer { t.readAhead = nil }; return t.readAhead }?.stop()
            processor.readAhead = nil
            // Made again for the next start (they were checked when the session was made).
            if let fresh = try? Self.encodedOutputs(configuration, sampleRate: sampleRate, channelCount: channelCount) {
                encodedOutputs.withLock { $0 = fresh }
                processor.outputs = fresh
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
            bitRate: configuration.bitRate, rtmp: configuration.rtmp, bufferedSeconds: configuration.encoderBufferSeconds)
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
        stopPacer.store(true, ordering: .relaxed)
        threads.withLock { t in defer { t.pacer = nil }; return t.pacer }?.join()
        io?.stop()
        let failure = await encoded.finish(inputFrames: processor.framesProcessed)
        threads.withLock { t in defer { t.readAhead = nil }; return t.readAhead }?.stop()
        let summary = Summary(statistics: statistics, error: failure ?? processor.inputError ?? io?.failure)
        finalSummary.withLock { $0 = summary }
        lifecycle.stopEnded()
        return summary
    }

    /// While true, silence is encoded (timestamps go on, so players and servers see a steady stream).
    public var isMuted: Bool {
        get { processor.muted.load(ordering: .relaxed) }
        set { processor.muted.store(newValue, ordering: .relaxed) }
    }

    /// Linear gain applied after the graph, 0 … 4; changes ramp over one block.
    public var volume: Float {
        get { Float(bitPattern: processor.volumeBits.load(ordering: .relaxed)) }
        set { processor.volumeBits.store(min(4, max(0, newValue.isFinite ? newValue : 1)).bitPattern, ordering: .relaxed) }
    }

    /// The error that stopped the session: a file output that could not be written, a damaged file input, or a
    /// device that went away for good (reconnect off, or not back within the reconnect timeout).
    public var failure: AudioError? { worker.failure ?? processor.inputError ?? io?.failure }

    /// True while the input's device is open: from a start that got that far to the stop (false for a file input).
    public var isDeviceOpen: Bool { io?.isStarted ?? false }

    /// True once a file input has been played to its end, the device stopped for good, or encoding failed.
    public var hasEnded: Bool {
        if ended.load(ordering: .relaxed) || worker.failure != nil { return true }
        if let io { return io.inputHasEnded || io.failure != nil }
        return false
    }

    /// Device events (start, xruns, faults, reconnects) for a device input; nil for a file.
    public var deviceEvents: AsyncStream<DeviceEvent>? { io?.events }
    /// What the capture device granted (its rate may differ from the session's: then the I/O unit converts), while
    /// a device session runs.
    public var deviceGrant: DeviceGrant? { io?.grant }

    /// The figures now.
    public var statistics: Statistics {
        Statistics(
            seconds: Double(processor.framesProcessed) / sampleRate, packetsEncoded: worker.packetsEncoded,
            framesDropped: worker.droppedFrames, renderFailures: processor.renderFailures, xruns: io?.xrunCount ?? 0, deviceReconnects: io?.reconnectCount ?? 0,
            isMuted: isMuted, volume: volume, outputs: encoded.statistics, loudness: processor.loudness.read())
    }

    /// The publishers of the RTMP outputs, for their statistics streams.
    public var rtmpPublishers: [RTMPPublisher] { encoded.publishers.map(\.1) }

    /// Peak and RMS levels (linear, 1 = full scale) since the previous reading.
    public struct Meters: Sendable, Hashable {
        /// What the input delivers (the microphone or the file), before the graph.
        public let input: MeterReading
        /// What is encoded: after the graph, the volume and the mute.
        public let output: MeterReading
        /// The loudness of what is encoded (the programme): not a reading since the previous one, but the meter's
        /// latest (momentary, short-term; integrated, range and true peak since the start).
        public let loudness: LoudnessReading
    }

    /// Levels for a VU display: each reading covers what passed since the previous one (poll it, e.g. 10 times a
    /// second). Lock-free on the audio thread.
    public var meters: Meters {
        Meters(input: processor.inputMeter.read(), output: processor.outputMeter.read(), loudness: processor.loudness.read())
    }

    /// A unit of the graph by its id in the graph file, for live control while streaming (`"room"` → its reverb:
    /// `try session.unit(named: "room")?.parameter("wetDryMix").set(35)`); nil without a graph or for an unknown id.
    public func unit(named id: String) -> RenderUnit? { loaded?.units[id] }

    // MARK: Internals

    /// The file input's thread: reads blocks and processes them at the pace of the clock (or at once).
    /// Frames the file pacer reads and processes at a time.
    static let fileBlock = 1024

    private func pace(_ reader: any AudioFileReader, realTime: Bool) {
        let block = Self.fileBlock
        let buffer = PCMBuffer(channelCount: reader.channelCount, capacity: block)
        let start = monotonicNanoseconds()
        var sampleTime: Int64 = 0
        // This thread is the one that renders: the outputs are its while it runs.
        let worker = processor.outputs.worker
        while !stopPacer.load(ordering: .relaxed) {
            let n: Int
            do throws(AudioError) { n = try reader.read(into: buffer.view(frames: block)) } catch {
                processor.noteInputFailure(error)
                break
            }
            if n == 0 { break }
            let due = start + UInt64(Double(sampleTime) / sampleRate * 1e9)
            if realTime {
                let now = monotonicNanoseconds()
                if due > now { sleepNanoseconds(due - now) }
            }
            processor.process(buffer.view(frames: n), sampleTime: sampleTime, hostTime: realTime ? due : monotonicNanoseconds())
            sampleTime += Int64(n)
            // As fast as possible, but never faster than the encoder: wait while its ring is nearly full.
            while !realTime, worker.pendingSlots >= worker.slotCount - 2, worker.failure == nil,
                !stopPacer.load(ordering: .relaxed)
            {
                sleepNanoseconds(1_000_000)
            }
        }
        ended.store(true, ordering: .relaxed)
    }
}

private func sleepNanoseconds(_ ns: UInt64) {
    var request = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// The real-time half of a session: graph, volume and mute, then the encoder worker. Nothing here allocates,
/// locks or waits.
final class StreamProcessor: Sendable {
    let graph: RenderGraph?
    let input: InputUnit?
    let channelCount: Int
    let sampleRate: Double
    let output: PCMBuffer
    /// Where the blocks go: the render thread's; replaced while the input is stopped (after a failed start).
    private let boundOutputs: RenderThreadBound<EncodedOutputs>
    var outputs: EncodedOutputs {
        get { boundOutputs.onRenderThread }
        set { boundOutputs.whileStopped = newValue }
    }
    /// Set while the input is stopped; read by the input's thread.
    private let bound = RenderThreadBound<(readAhead: ReadAheadWorker?, gain: SmoothedValue)>((nil, SmoothedValue(1, rampFrames: 0)))
    var readAhead: ReadAheadWorker? {
        get { bound.whileStopped.readAhead }
        set { bound.whileStopped.readAhead = newValue }
    }
    let muted = Atomic<Bool>(false)
    let volumeBits = Atomic<UInt32>(Float(1).bitPattern)
    let inputMeter = LevelMeter()
    let outputMeter = LevelMeter()
    /// The programme's loudness, after the volume.
    let loudness: LoudnessMeter
    private let processed = Atomic<Int64>(0)
    private let failures = Atomic<Int>(0)
    private let inputFailure = Locked<AudioError?>(nil)

    init(graph: RenderGraph?, input: InputUnit?, channelCount: Int, sampleRate: Double, maximumFrames: Int, outputs: EncodedOutputs) {
        boundOutputs = RenderThreadBound(outputs)
        self.graph = graph
        self.input = input
        self.channelCount = channelCount
        self.sampleRate = sampleRate
        output = PCMBuffer(channelCount: channelCount, capacity: maximumFrames)
        loudness = LoudnessMeter(sampleRate: sampleRate, channelCount: channelCount)
    }

    /// Frames taken in (sample time of the end of the last block).
    var framesProcessed: Int64 { processed.load(ordering: .relaxed) }
    /// Blocks the graph failed to render (silence was encoded instead).
    var renderFailures: Int { failures.load(ordering: .relaxed) }

    func noteInputFailure(_ error: AudioError) { inputFailure.withLock { $0 = error } }
    /// Why a file input stopped early (a decoding error), if it did.
    var inputError: AudioError? { inputFailure.withLock { $0 } }

    /// One block of input at `sampleTime`, captured at `hostTime`.
    func process(_ block: BufferView, sampleTime: Int64, hostTime: UInt64) {
        let frames = min(block.frameCount, output.capacity)
        var source = block.prefix(frames)
        inputMeter.accumulate(source)
        if let graph, let input {
            let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: hostTime)
            let rendered = try? input.feeding(source) { () throws(AudioError) -> BufferView? in
                graph.renderCycle(frames: frames, timeStamp: stamp)
            }
            bound.onRenderThread.readAhead?.requestIfNeeded()
            if let rendered {
                source = rendered
            } else {
                failures.add(1, ordering: .relaxed)
                output.view(frames: frames).clear()
                source = output.view(frames: frames)
            }
        }
        source = source.upmixed(to: channelCount)
        let target: Float = muted.load(ordering: .relaxed) ? 0 : Float(bitPattern: volumeBits.load(ordering: .relaxed))
        let out = output.view(frames: frames)
        // A new volume ramps over this block.
        bound.onRenderThread.gain.rampFrames = frames
        bound.onRenderThread.gain.setTarget(target)
        out.copy(from: source, gain: &bound.onRenderThread.gain)
        outputMeter.accumulate(out)
        loudness.accumulate(out)
        outputs.push(out, sampleTime: sampleTime, hostTime: hostTime)
        processed.store(sampleTime + Int64(frames), ordering: .relaxed)
    }
}
