import AudioCore
import MediaContainers
import NIOCore
import NIOPosix
import Logging
import NIOSSL
import Synchronization

/// What a published AAC stream announces in onMetaData and its sequence header.
public struct AACStreamDescription: Hashable, Sendable {
    /// The sample rate in Hz (for `audiosamplerate`).
    public var sampleRate: Double
    /// Channels: 1 is announced as mono, 2 or more as stereo (for `stereo` and the FLV audio tags' flag).
    public var channelCount: Int
    /// Bits per second (for `audiodatarate`).
    public var bitRate: Int
    /// The encoder's AudioSpecificConfig (the sequence header's body).
    public var audioSpecificConfig: [UInt8]

    /// A description of an AAC stream; ``RTMPPublisher/init(url:stream:configuration:)`` checks it.
    /// - Parameters:
    ///   - sampleRate: The sample rate in Hz; more than 0.
    ///   - channelCount: The channel count; 1 or more.
    ///   - bitRate: Bits per second; more than 0.
    ///   - audioSpecificConfig: The encoder's AudioSpecificConfig, which must parse.
    public init(sampleRate: Double, channelCount: Int, bitRate: Int, audioSpecificConfig: [UInt8]) {
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.bitRate = bitRate
        self.audioSpecificConfig = audioSpecificConfig
    }
}

/// Publishes one AAC audio stream to an RTMP server (nginx-rtmp, a CDN's ingest), reconnecting when the
/// connection drops.
///
/// <!-- sample: description: AACStreamDescription, packet: AACPacket -->
/// ```swift
/// let publisher = try RTMPPublisher(url: RTMPURL("rtmp://127.0.0.1/live/key"), stream: description)
/// try await publisher.start()            // connect → … → publish; throws if that fails
/// publisher.send(aacFrame: packet.data, timestamp: packet.streamMilliseconds)   // any thread, never waits
/// await publisher.stop()                 // sends what is queued, FCUnpublish, deleteStream
/// ```
///
/// Frames wait in a send queue bounded by ``Configuration/queueMilliseconds`` of audio; when the network is slower
/// than the stream, the oldest are dropped and counted. Timestamps are the caller's (from sample time), kept
/// monotonic, and carry on across reconnects; each new connection re-sends onMetaData and the sequence header.
public final class RTMPPublisher: Sendable {
    /// How a publisher queues, waits, reconnects, secures and logs: every field has a default, and
    /// ``validate()`` (which ``RTMPPublisher/init(url:stream:configuration:)`` calls) checks the ranges.
    public struct Configuration: Sendable {
        /// The send queue's bound, in milliseconds of audio.
        public var queueMilliseconds: Int64 = 2000
        /// The chunk size this client sends with.
        public var chunkSize = 4096
        /// Seconds to wait for the TCP (and TLS) connection.
        public var connectTimeout = 5.0
        /// Seconds to wait for each answer during the handshake, connect, createStream and publish.
        public var responseTimeout = 10.0
        /// Seconds the connection must stay open after NetStream.Publish.Start before the stream counts as
        /// published (servers that refuse by closing, such as nginx-rtmp's `deny publish`, say Start first).
        public var publishConfirmation = 0.25
        /// Seconds to wait after `publish` for onStatus NetStream.Publish.Start before publishing on the
        /// createStream result alone: some servers never send onStatus. A refusal (an onStatus of level error, an
        /// `_error` for publish, a close) still ends the stream whenever it comes. At most half of
        /// ``responseTimeout`` is spent so, since that bounds the whole exchange from the handshake to publish.
        public var publishStatusWait = 2.0
        /// Seconds a write may wait without the server taking any data before the connection counts as lost
        /// (and is reconnected): a server that hangs without closing, or a connection lost without a reset.
        public var stallTimeout = 10.0
        /// Reconnect by itself after an established stream's connection drops.
        public var reconnect = true
        /// The first reconnect waits this long (± 25 % jitter), doubling up to ``maximumReconnectDelay``.
        public var initialReconnectDelay = 0.5
        /// The longest reconnect delay, in seconds before jitter, that the doubling stops at; at least
        /// ``initialReconnectDelay``.
        public var maximumReconnectDelay = 8.0
        /// Give up after this many failed reconnect attempts in a row (nil: never).
        public var maximumReconnectAttempts: Int? = nil
        /// Seconds between ``RTMPPublisher/statistics`` reports.
        public var statisticsInterval = 1.0
        /// TLS for rtmps:// URLs. The default verifies the server's certificate against the system's trust roots.
        public var tls = TLSConfiguration.makeClientConfiguration()
        /// Where the publisher notes what it met: at debug level, each way a server departs from the spec and how
        /// it was taken (an S2 that does not echo C1, a command ignored, no onStatus after publish); at info, each
        /// connection made and lost. Stream keys never appear.
        public var logger = Logger(label: "liveaudio.rtmp")

        /// A configuration with every field at its default.
        public init() {}

        /// The longest any timeout, delay or interval may be: one day.
        public static let maximumSeconds = 86_400.0

        /// Checks every field, naming the first one out of range.
        /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter`.
        public func validate() throws(AudioError) {
            func out(_ field: String, _ value: Any, _ range: String) -> AudioError {
                AudioError(.invalidParameter, "RTMP publisher configuration: \(field) must be \(range), got \(value)")
            }
            let day = "more than 0 and at most \(Int(Self.maximumSeconds)) seconds"
            let seconds: [(String, Double)] = [
                ("connectTimeout", connectTimeout), ("responseTimeout", responseTimeout), ("stallTimeout", stallTimeout),
                ("statisticsInterval", statisticsInterval), ("initialReconnectDelay", initialReconnectDelay),
                ("maximumReconnectDelay", maximumReconnectDelay),
            ]
            // Written so that NaN fails too; infinity and absurd values would overflow the nanosecond conversions.
            for (field, value) in seconds where !(value > 0 && value <= Self.maximumSeconds) {
                throw out(field, value, day)
            }
            guard publishConfirmation >= 0, publishConfirmation <= 10 else {
                throw out("publishConfirmation", publishConfirmation, "0 … 10 seconds")
            }
            guard publishStatusWait >= 0, publishStatusWait <= 60 else {
                throw out("publishStatusWait", publishStatusWait, "0 … 60 seconds")
            }
            guard maximumReconnectDelay >= initialReconnectDelay else {
                throw out("maximumReconnectDelay", maximumReconnectDelay, "at least initialReconnectDelay (\(initialReconnectDelay))")
            }
            guard queueMilliseconds > 0, queueMilliseconds <= Int64(Self.maximumSeconds * 1000) else {
                throw out("queueMilliseconds", queueMilliseconds, "1 … \(Int(Self.maximumSeconds * 1000))")
            }
            guard (128...65_536).contains(chunkSize) else { throw out("chunkSize", chunkSize, "128 … 65536") }
            if let attempts = maximumReconnectAttempts, attempts < 0 {
                throw out("maximumReconnectAttempts", attempts, "0 or more (or nil: no limit)")
            }
        }

        /// Trusts the certificates in a PEM file as well as the system's roots (a private CA, a test server).
        public mutating func trustCertificates(inPEMFile path: String) {
            tls.additionalTrustRoots.append(.file(path))
        }
    }

    /// Where a publisher is in its life, as ``RTMPStatistics/state`` reports it.
    ///
    /// - `idle`: made, ``RTMPPublisher/start()`` not yet called.
    /// - `connecting`: ``RTMPPublisher/start()`` is making the first connection (TCP and TLS, the handshake,
    ///   `connect`, `createStream`, `publish`).
    /// - `publishing`: the server took `publish`; queued frames are being sent.
    /// - `reconnecting`: an established stream's connection was lost; waiting out the reconnect delay, then
    ///   connecting again, until publishing again.
    /// - `stopping`: ``RTMPPublisher/stop(drainTimeout:)`` is sending what is queued, then FCUnpublish and
    ///   deleteStream.
    /// - `stopped`: stopped; the publisher is done.
    /// - `failed`: the first connection failed, or a lost one was not (or could no longer be) reconnected; the
    ///   publisher is done, and ``RTMPStatistics/lastError`` says why. Stopping leaves it failed.
    public enum State: String, Sendable {
        /// One of a publisher's states (its raw value is the case's name); see ``RTMPPublisher/State``.
        case idle, connecting, publishing, reconnecting, stopping, stopped, failed
    }

    /// Where this publisher publishes.
    public let url: RTMPURL
    /// The AAC stream it publishes, as its onMetaData and sequence header announce it.
    public let stream: AACStreamDescription
    /// The settings it was made with (validated).
    public let configuration: Configuration
    /// Reports every ``Configuration/statisticsInterval`` seconds and on each change of state, until stopped.
    public let statistics: AsyncStream<RTMPStatistics>

    private let statisticsContinuation: AsyncStream<RTMPStatistics>.Continuation
    private let shared = Locked(Shared())
    private let doorbell = Doorbell()
    private let sslContext: NIOSSLContext?
    private let stereo: Bool

    /// State the producer, the connection tasks and the reader of statistics share.
    struct Shared {
        var state: State = .idle
        var queue = PacketQueue()
        var counters = RTMPStatistics.Counters()
        var stopping = false
        var lastError: AudioError?
        var firstOutcome: CheckedContinuation<Void, any Error>?
        var run: Task<Void, Never>?
        var ticker: Task<Void, Never>?
        var channel: (any Channel)?
        var latencies = LatencyWindow()
    }

    /// A publisher to `url` for `stream`, idle until ``start()``: it checks the stream and the configuration, and
    /// for an rtmps:// URL sets up TLS; it connects to nothing yet.
    /// - Parameters:
    ///   - url: Where to publish.
    ///   - stream: The AAC stream to publish.
    ///   - configuration: How to queue, wait and reconnect; the defaults unless given.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` when the stream's AudioSpecificConfig does not parse,
    ///   `.invalidParameter` for a stream or configuration that cannot be published, `.connectionFailed` when the
    ///   TLS configuration cannot be used.
    public init(url: RTMPURL, stream: AACStreamDescription, configuration: Configuration = Configuration()) throws(AudioError) {
        _ = try AudioSpecificConfig(parsing: stream.audioSpecificConfig)
        guard stream.channelCount >= 1, stream.sampleRate > 0, stream.bitRate > 0 else {
            throw AudioError(.invalidParameter, "an RTMP stream needs a positive sample rate, channel count and bit rate")
        }
        try configuration.validate()
        self.url = url
        self.stream = stream
        self.configuration = configuration
        stereo = stream.channelCount > 1
        if url.scheme == .rtmps {
            do { sslContext = try NIOSSLContext(configuration: configuration.tls) } catch {
                throw AudioError(.connectionFailed, "cannot set up TLS for \(url): \(error)")
            }
        } else {
            sslContext = nil
        }
        (statistics, statisticsContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
    }

    deinit {
        let (run, ticker, channel) = shared.withLock { s in
            s.stopping = true
            return (s.run, s.ticker, s.channel)
        }
        run?.cancel()
        ticker?.cancel()
        channel?.close(promise: nil)
        doorbell.ring()
        statisticsContinuation.finish()
    }

    // MARK: Control

    /// Connects, performs the handshake, `connect`, `createStream` and `publish`, and starts sending.
    ///
    /// Returns once the server said NetStream.Publish.Start. Frames sent before that wait in the queue.
    /// - Throws: ``/AudioCore/AudioError``: `.connectionFailed` (refused, unreachable, unknown host, TLS),
    ///   `.protocolError` (bad handshake or chunks), `.rejected` (connect or publish refused — the server's
    ///   description is in the message), `.timedOut`, `.connectionLost`, `.invalidState` when already started.
    ///   The first connection is not retried; later drops are (see ``Configuration/reconnect``).
    public func start() async throws(AudioError) {
        let alreadyStarted = shared.withLock { s in
            if s.state != .idle { return true }
            s.state = .connecting
            return false
        }
        if alreadyStarted { throw AudioError(.invalidState, "the publisher to \(url) was already started") }
        publishStatistics()
        do {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                shared.withLock { s in
                    s.firstOutcome = continuation
                    // On the publishers' own thread (their event loop), not the cooperative pool (see NetworkExecutor).
                    s.run = Task(executorPreference: NetworkExecutor.shared) { await self.run() }
                    s.ticker = Task(executorPreference: NetworkExecutor.shared) { await self.tick() }
                }
            }
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.connectionFailed, "publishing to \(url) failed: \(error)")
        }
    }

    /// Queues one raw AAC frame (no ADTS header) stamped `milliseconds` from sample time. Any thread; never waits.
    ///
    /// When the queue spans more than ``Configuration/queueMilliseconds``, the oldest frames are dropped (and
    /// counted); after ``stop(drainTimeout:)`` frames are ignored.
    /// - Parameters:
    ///   - aacFrame: One raw AAC frame, without an ADTS header.
    ///   - milliseconds: The frame's timestamp in milliseconds, from sample time.
    ///   - captureTime: When the frame's first sample was captured (``/AudioCore/monotonicNanoseconds()``), for
    ///     the latency figures in ``RTMPStatistics``; nil (the default) leaves the frame out of them.
    public func send(aacFrame: [UInt8], timestamp milliseconds: Int64, captureTime: UInt64? = nil) {
        var body = [UInt8]()
        body.reserveCapacity(aacFrame.count + 2)
        body += FLVAudio.aacPrefix(stereo: stereo, packetType: FLVAudio.raw)
        body += aacFrame
        let packet = QueuedPacket(body: body, timestamp: milliseconds, captureTime: captureTime)
        let accepted = shared.withLock { s -> Bool in
            guard !s.stopping else { return false }
            s.counters.droppedPackets += s.queue.push(packet, limit: configuration.queueMilliseconds)
            return true
        }
        if accepted { doorbell.ring() }
    }

    /// Sends what is queued (waiting at most `drainTimeout` seconds), then FCUnpublish and deleteStream, and
    /// closes. Frames left unsent count as dropped. Safe to call more than once and from any state.
    public func stop(drainTimeout: Double = 2) async {
        let (run, channel) = shared.withLock { s -> (Task<Void, Never>?, (any Channel)?) in
            if !s.stopping {
                s.stopping = true
                if s.state == .publishing || s.state == .connecting || s.state == .reconnecting { s.state = .stopping }
            }
            return (s.run, s.channel)
        }
        doorbell.ring()
        if let run {
            if drainTimeout > 0 {
                let deadline = Task(executorPreference: NetworkExecutor.shared) {
                    try? await Task.sleep(nanoseconds: UInt64(min(drainTimeout, Configuration.maximumSeconds) * 1e9))
                    if !Task.isCancelled { channel?.close(promise: nil) }
                    run.cancel()
                }
                await run.value
                deadline.cancel()
            } else {
                // No drain: closed at once, not after a timer (whose wake-up a busy cooperative pool can hold back).
                channel?.close(promise: nil)
                run.cancel()
                await run.value
            }
        }
        let ticker = shared.withLock { s -> Task<Void, Never>? in
            s.counters.droppedPackets += s.queue.removeAll()
            if s.state != .failed { s.state = .stopped }
            return s.ticker
        }
        // Not waited for: it only refreshes the figures, and a figure it yields after the stream below has finished
        // is dropped.
        ticker?.cancel()
        publishStatistics()
        statisticsContinuation.finish()
    }

    /// The figures now.
    public var currentStatistics: RTMPStatistics {
        shared.withLock { s in
            RTMPStatistics(
                state: s.state, counters: s.counters, queuedPackets: s.queue.count,
                queuedMilliseconds: s.queue.spanMilliseconds, bitRate: s.counters.bitRate,
                latency: s.latencies.percentiles(), lastError: s.lastError)
        }
    }

    private func publishStatistics() { statisticsContinuation.yield(currentStatistics) }

    private func setState(_ state: State) {
        let changed = shared.withLock { s -> Bool in
            guard s.state != state, !(s.stopping && state != .stopped && state != .failed) else { return false }
            s.state = state
            return true
        }
        if changed { publishStatistics() }
    }

    private var isStopping: Bool { shared.withLock { $0.stopping } }

    // MARK: Connection loop

    private func run() async {
        var published = false
        var failures = 0
        var delay = configuration.initialReconnectDelay
        while !isStopping && !Task.isCancelled {
            do {
                try await connection {
                    if published {
                        self.shared.withLock { $0.counters.reconnects += 1 }
                    }
                    self.configuration.logger.info("publishing to \(self.url)\(published ? " again" : "")")
                    published = true
                    failures = 0
                    delay = self.configuration.initialReconnectDelay
                    self.setState(.publishing)
                    self.resolveFirstOutcome(nil)
                }
                break  // stopped
            } catch {
                if isStopping { break }
                shared.withLock { $0.lastError = error }
                guard published else {
                    setState(.failed)
                    resolveFirstOutcome(error)
                    return
                }
                failures += 1
                if !configuration.reconnect || configuration.maximumReconnectAttempts.map({ failures > $0 }) == true {
                    setState(.failed)
                    return
                }
                setState(.reconnecting)
                let wait = delay * Double.random(in: 0.75...1.25)
                configuration.logger.info("\(error.message); reconnecting to \(url) in \(formatSeconds(wait))")
                delay = min(configuration.maximumReconnectDelay, delay * 2)
                let until = monotonicNanoseconds() + UInt64(wait * 1e9)
                while !isStopping, !Task.isCancelled, monotonicNanoseconds() < until {
                    try? await Task.sleep(nanoseconds: 20_000_000)
                }
            }
        }
        resolveFirstOutcome(AudioError(.invalidState, "the publisher to \(url) was stopped before it started"))
    }

    private func resolveFirstOutcome(_ error: AudioError?) {
        guard let continuation = shared.withLock({ s in
            defer { s.firstOutcome = nil }
            return s.firstOutcome
        }) else { return }
        if let error { continuation.resume(throwing: error) } else { continuation.resume() }
    }

    private func tick() async {
        var lastBytes = shared.withLock { $0.counters.mediaBytesSent }
        var lastTime = monotonicNanoseconds()
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: UInt64(configuration.statisticsInterval * 1e9))
            if Task.isCancelled { break }
            let now = monotonicNanoseconds()
            shared.withLock { s in
                let seconds = Double(now - lastTime) / 1e9
                s.counters.bitRate = seconds > 0 ? Double(s.counters.mediaBytesSent - lastBytes) * 8 / seconds : 0
                lastBytes = s.counters.mediaBytesSent
            }
            lastTime = now
            publishStatistics()
        }
    }

    /// One connection: connect, handshake, commands, then send until stopped (returns) or the connection fails
    /// (throws).
    private func connection(onPublishing: () -> Void) async throws(AudioError) {
        let inbound = InboundBridge()
        let channel: any Channel
        do {
            let sslContext = self.sslContext
            let host = url.host
            channel = try await ClientBootstrap(group: NetworkExecutor.shared.group)
                .connectTimeout(.nanoseconds(Int64(configuration.connectTimeout * 1e9)))
                .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { [weak self] channel in
                    // Known from before the TCP connect completes, so a stop closes it there instead of waiting out
                    // the connect timeout.
                    let stopping = self?.shared.withLock { s -> Bool in
                        s.channel = channel
                        return s.stopping
                    } ?? true
                    if stopping { return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
                    return channel.eventLoop.makeCompletedFuture {
                        if let sslContext {
                            let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
                            let tls = try NIOSSLClientHandler(context: sslContext, serverHostname: isAddress ? nil : host)
                            try channel.pipeline.syncOperations.addHandler(tls)
                        }
                        try channel.pipeline.syncOperations.addHandler(inbound)
                    }
                }
                .connect(host: url.host, port: url.port).get()
        } catch {
            shared.withLock { $0.channel = nil }
            throw AudioError(.connectionFailed, "cannot connect to \(url): \(Self.describe(error))")
        }
        shared.withLock { $0.channel = channel }
        defer {
            channel.close(promise: nil)
            shared.withLock { $0.channel = nil }
        }
        var wire = RTMPConnection(channel: channel, inbound: inbound, publisher: self)
        try await wire.run(onPublishing: onPublishing)
    }

    /// A failure of the TLS layer (a certificate not trusted, a name that does not match, a bad handshake).
    static func isTLSFailure(_ error: any Error) -> Bool { error is NIOSSLError || error is BoringSSLError }

    static func describe(_ error: any Error) -> String {
        if let error = error as? AudioError { return error.message }
        if isTLSFailure(error) { return "TLS failed: \(error)" }
        if let error = error as? IOError { return error.description }
        if let error = error as? ChannelError {
            switch error {
            case .connectTimeout: return "the connection timed out"
            default: return "\(error)"
            }
        }
        if let error = error as? NIOConnectionError {
            if let first = error.connectionErrors.first { return describe(first.error) }
            if error.dnsAError != nil || error.dnsAAAAError != nil { return "the host name '\(error.host)' was not found" }
            return "no address for '\(error.host)'"
        }
        return "\(error)"
    }

    // MARK: What the connection needs from the publisher

    func takeQueued(maximumBytes: Int) -> [QueuedPacket] {
        shared.withLock { $0.queue.popBatch(maximumBytes: maximumBytes) }
    }

    /// The timestamp of the last frame sent (-1 before the first), without building the whole statistics.
    var lastSentTimestamp: Int64 { shared.withLock { $0.counters.lastTimestamp } }

    func firstQueuedTimestamp() -> Int64? { shared.withLock { $0.queue.firstTimestamp } }

    func noteSent(packets: [QueuedPacket], wireBytes: Int, at now: UInt64) {
        shared.withLock { s in
            s.counters.bytesSent += Int64(wireBytes)
            s.counters.packetsSent += packets.count
            for p in packets {
                s.counters.mediaBytesSent += Int64(p.body.count)
                s.counters.lastTimestamp = p.timestamp
                if let t = p.captureTime, now >= t { s.latencies.add(Double(now - t) / 1e6) }
            }
        }
    }

    func noteWireBytes(_ n: Int) { shared.withLock { $0.counters.bytesSent += Int64(n) } }

    /// Frames taken from the queue whose write failed.
    func noteLost(_ n: Int) { shared.withLock { $0.counters.droppedPackets += n } }

    var wantsStop: Bool { isStopping }
    var bell: Doorbell { doorbell }
    var metadataMessage: RTMPMessage {
        RTMPMessage(
            type: .dataAMF0,
            payload: AMF0.encode([
                .string("@setDataFrame"), .string("onMetaData"),
                .ecmaArray(
                    FLVAudio.metadata(sampleRate: stream.sampleRate, channelCount: stream.channelCount, bitRate: stream.bitRate)
                        + [AMF0Property("encoder", .string("LiveAudio"))]),
            ]))
    }
    var sequenceHeader: [UInt8] {
        FLVAudio.aacPrefix(stereo: stereo, packetType: FLVAudio.sequenceHeader) + stream.audioSpecificConfig
    }
}

/// A frame waiting to be sent: the FLV audio body (`AF 01` + raw AAC) and its timestamp.
struct QueuedPacket: Sendable {
    var body: [UInt8]
    var timestamp: Int64
    var captureTime: UInt64?
}

/// The send queue: oldest first, bounded by the span of timestamps it holds.
struct PacketQueue {
    private var packets: [QueuedPacket] = []
    private var head = 0

    var count: Int { packets.count - head }
    var firstTimestamp: Int64? { head < packets.count ? packets[head].timestamp : nil }
    var spanMilliseconds: Int64 {
        guard let first = firstTimestamp, let last = packets.last?.timestamp else { return 0 }
        return max(0, last - first)
    }

    /// Appends `packet` and drops the oldest while the queue spans more than `limit` ms. Returns how many it
    /// dropped.
    mutating func push(_ packet: QueuedPacket, limit: Int64) -> Int {
        packets.append(packet)
        var dropped = 0
        while count > 1, spanMilliseconds > limit || count > 100_000 {
            head += 1
            dropped += 1
        }
        compact()
        return dropped
    }

    mutating func popBatch(maximumBytes: Int) -> [QueuedPacket] {
        var out: [QueuedPacket] = []
        var bytes = 0
        while head < packets.count, out.isEmpty || bytes + packets[head].body.count <= maximumBytes {
            bytes += packets[head].body.count
            out.append(packets[head])
            head += 1
        }
        compact()
        return out
    }

    mutating func removeAll() -> Int {
        defer {
            packets.removeAll()
            head = 0
        }
        return count
    }

    private mutating func compact() {
        if head > 256, head * 2 > packets.count {
            packets.removeFirst(head)
            head = 0
        }
    }
}

/// Wakes the sending task: ring from any thread; one waiter.
final class Doorbell: Sendable {
    private let state = Locked<(rung: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func ring() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.rung = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns once rung (at once if it was rung since the last wait), or when the task is cancelled.
    func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.rung {
                        s.rung = false
                        return true
                    }
                    s.waiter = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            ring()
        }
    }
}

/// Bytes from the channel as an async sequence; ends when the connection closes.
final class InboundBridge: ChannelDuplexHandler, @unchecked Sendable {
    // Unchecked Sendable: `context` touched on the channel's event loop only; the rest `let`s, the stream, or under locks
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let stream: AsyncThrowingStream<ByteBuffer, any Error>
    private let continuation: AsyncThrowingStream<ByteBuffer, any Error>.Continuation

    private let firstError = Locked<(any Error)?>(nil)
    /// Bytes handed to the stream and not yet consumed, whether a read is being held back, and the channel's event
    /// loop (for the reader's thread to resume reading on).
    private let backlog = Locked<(bytes: Int, held: Bool, loop: (any EventLoop)?)>((0, false, nil))
    private var context: ChannelHandlerContext?  // event loop only

    /// The most bytes read from the server and not yet parsed before reading stops: the connection never reads
    /// faster than it parses, so a server that floods it costs this much memory at most (plus one read).
    static let highWater = 1 << 20

    init() { (stream, continuation) = AsyncThrowingStream.makeStream() }

    /// The first error the channel reported (a TLS failure, a reset), if any.
    var failure: (any Error)? { firstError.withLock { $0 } }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        backlog.withLock { $0.loop = context.eventLoop }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        backlog.withLock { $0.loop = nil }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        backlog.withLock { $0.bytes += buffer.readableBytes }
        continuation.yield(buffer)
    }

    /// Reads (asked for after every read when auto-read is on) pass only while the backlog is below the high
    /// water mark; otherwise the last one is held until ``consumed(_:)`` brings it down.
    func read(context: ChannelHandlerContext) {
        let pass = backlog.withLock { b -> Bool in
            if b.bytes < Self.highWater { return true }
            b.held = true
            return false
        }
        if pass { context.read() }
    }

    /// Hands the reader an empty buffer, which carries no bytes: a wake-up for a reader waiting with a deadline
    /// of its own (any thread).
    func wake() { continuation.yield(ByteBuffer()) }

    /// The reader took `count` bytes off the stream (any thread).
    func consumed(_ count: Int) {
        let loop = backlog.withLock { b -> (any EventLoop)? in
            b.bytes -= count
            guard b.held, b.bytes < Self.highWater / 2 else { return nil }
            b.held = false
            return b.loop
        }
        loop?.execute { [self] in self.context?.read() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        continuation.finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        firstError.withLock { if $0 == nil { $0 = error } }
        continuation.finish(throwing: error)
        context.close(promise: nil)
    }
}
