import AudioCore
import Logging
import MediaContainers
import NIOCore
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Writes messages to a channel: chunked with one encoder (its header state is per chunk stream), each batch
/// flushed as one write. `send` returns once the bytes are in the kernel, so a slow network slows the sender and
/// the publisher's queue absorbs (and bounds) the difference.
final class MessageSender: Sendable {
    let channel: any Channel
    private let encoder = Locked(ChunkStreamEncoder())
    /// Writes under way, and when one last completed (or the first began): what the stall watch reads.
    private let pendingWrites = Atomic<Int>(0)
    private let lastProgress = Atomic<UInt64>(0)
    private let stallDetected = Atomic<Bool>(false)

    init(channel: any Channel) { self.channel = channel }

    /// Sends raw bytes (the handshake).
    func sendRaw(_ bytes: [UInt8]) async throws {
        if pendingWrites.add(1, ordering: .acquiringAndReleasing).oldValue == 0 {
            lastProgress.store(monotonicNanoseconds(), ordering: .releasing)
        }
        defer {
            lastProgress.store(monotonicNanoseconds(), ordering: .releasing)
            pendingWrites.subtract(1, ordering: .acquiringAndReleasing)
        }
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    /// True once the stall watch closed the connection.
    var stalled: Bool { stallDetected.load(ordering: .acquiring) }

    /// Closes the connection when a write has waited `seconds` without any write completing: a server that
    /// stopped reading (hung, or a middlebox that lost the connection without a reset) fills the socket buffers
    /// and would otherwise hold the stream forever. Checked on the event loop a few times per timeout; cancel the
    /// returned task when the connection ends.
    func watchForStalls(seconds: Double) -> RepeatedTask {
        let limit = UInt64(seconds * 1e9)
        let every = TimeAmount.nanoseconds(Int64(min(1.0, seconds / 4) * 1e9))
        return channel.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { [self] task in
            guard pendingWrites.load(ordering: .acquiring) > 0 else { return }
            let since = lastProgress.load(ordering: .acquiring)
            let now = monotonicNanoseconds()
            if now > since, now - since >= limit {
                stallDetected.store(true, ordering: .releasing)
                task.cancel()
                // An abortive close (a reset): the unsent bytes are dropped rather than left to the kernel, which
                // would keep offering them to the stopped server for minutes; and the server learns at once that
                // this stream is gone, instead of refusing the reconnection as already publishing.
                if let socket = channel as? any SocketOptionProvider {
                    socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { [channel] _ in channel.close(promise: nil) }
                } else {
                    channel.close(promise: nil)
                }
            }
        }
    }

    /// Chunks and sends `messages`; returns the bytes written.
    @discardableResult
    func send(_ messages: [(RTMPMessage, chunkStream: UInt32)]) async throws -> Int {
        let bytes = encoder.withLock { encoder -> [UInt8] in
            var out: [UInt8] = []
            for (message, chunkStream) in messages { encoder.encode(message, chunkStream: chunkStream, into: &out) }
            return out
        }
        try await sendRaw(bytes)
        return bytes.count
    }

    /// Sends Set Chunk Size and switches to `size` for what follows.
    func setChunkSize(_ size: Int) async throws {
        let bytes = encoder.withLock { $0.setChunkSizeMessage(size) }
        try await sendRaw(bytes)
    }
}

/// One connection's protocol: handshake, connect, createStream, publish, then media out and control in.
struct RTMPConnection {
    static let transactionConnect = 1.0
    static let transactionReleaseStream = 2.0
    static let transactionFCPublish = 3.0
    static let transactionCreateStream = 4.0
    static let transactionPublish = 5.0
    static let transactionFCUnpublish = 6.0
    static let transactionDeleteStream = 7.0

    let publisher: RTMPPublisher
    let sender: MessageSender
    let inbound: InboundBridge
    var channel: any Channel { sender.channel }
    private var iterator: AsyncThrowingStream<ByteBuffer, any Error>.AsyncIterator
    private var decoder = RTMPConnection.makeDecoder()
    private var pending: [UInt8] = []
    private var bytesReceived: UInt64 = 0
    private var lastAcknowledged: UInt64 = 0
    /// The peer's Window Acknowledgement Size: acknowledge each time this many more bytes have arrived.
    private var acknowledgementWindow: UInt64 = 2_500_000
    private var lastWindowSent: UInt32?
    /// What is being waited for, for error messages.
    private var phase = "the handshake"
    private let deadline = Deadline()

    /// What a publisher accepts from a server: commands and protocol control, a few hundred bytes each. Anything
    /// near these bounds is a broken or hostile server, refused with a protocol error before it costs memory.
    static let maximumMessageLength = 256 << 10
    static let maximumPartialBytes = 2 << 20
    static let maximumChunkStreams = 64

    static func makeDecoder() -> ChunkStreamDecoder {
        var d = ChunkStreamDecoder()
        d.maximumMessageLength = maximumMessageLength
        d.maximumPartialBytes = maximumPartialBytes
        d.maximumChunkStreams = maximumChunkStreams
        return d
    }

    init(channel: any Channel, inbound: InboundBridge, publisher: RTMPPublisher) {
        self.publisher = publisher
        sender = MessageSender(channel: channel)
        self.inbound = inbound
        iterator = inbound.stream.makeAsyncIterator()
    }

    /// Runs the connection until the publisher stops (returns) or it fails (throws).
    mutating func run(onPublishing: () -> Void) async throws(AudioError) {
        let url = publisher.url
        let timeout = publisher.configuration.responseTimeout
        deadline.arm(channel: channel, seconds: timeout)
        do {
            // Handshake: C2 goes out once S1 is in (a server may hold S2 back until it has C2), and an S2 that
            // does not echo C1 is only noted, as established clients do.
            let handshake = RTMPHandshake(time: 0)
            try await sender.sendRaw(handshake.c0c1)
            let s0s1 = try await readRaw(count: RTMPHandshake.s0s1Size)
            try await sender.sendRaw(try handshake.c2(answering: s0s1[...]))
            let s2 = try await readRaw(count: RTMPHandshake.s2Size)
            if !handshake.echoes(s2: s2[...]) {
                logger.debug("the server at \(url) sent an S2 that does not echo C1's random bytes; going on, as established clients do")
            }
            decoder.append(pending)
            pending = []

            // connect.
            phase = "connect"
            try await sender.setChunkSize(publisher.configuration.chunkSize)
            let connect = RTMPCommand(
                "connect", transactionID: Self.transactionConnect,
                object: .object([
                    AMF0Property("app", .string(url.app)),
                    AMF0Property("type", .string("nonprivate")),
                    AMF0Property("flashVer", .string("FMLE/3.0 (compatible; LiveAudio)")),
                    AMF0Property("tcUrl", .string(url.tcUrl)),
                ]))
            try await sender.send([(connect.message(), ChunkStreamID.command)])
            let connected = try await awaitResult(transaction: Self.transactionConnect)
            if connected.name == "_error" {
                throw AudioError(.rejected, "the server at \(url) refused to connect to app '\(url.app)': \(statusText(connected))")
            }

            // createStream.
            phase = "createStream"
            let key = AMF0Value.string(url.streamKey)
            try await sender.send([
                (RTMPCommand("releaseStream", transactionID: Self.transactionReleaseStream, arguments: [key]).message(), ChunkStreamID.command),
                (RTMPCommand("FCPublish", transactionID: Self.transactionFCPublish, arguments: [key]).message(), ChunkStreamID.command),
                (RTMPCommand("createStream", transactionID: Self.transactionCreateStream).message(), ChunkStreamID.command),
            ])
            let created = try await awaitResult(transaction: Self.transactionCreateStream)
            guard created.name == "_result", let id = created.resultNumber, id >= 0, id <= Double(UInt32.max), id == id.rounded()
            else {
                throw AudioError(.rejected, "the server at \(url) did not create a stream: \(statusText(created))")
            }
            let streamID = UInt32(id)

            // publish.
            phase = "publish"
            let publish = RTMPCommand("publish", transactionID: Self.transactionPublish, arguments: [key, .string("live")])
            try await sender.send([(publish.message(streamID: streamID), ChunkStreamID.command)])
            try await awaitPublishStart()
            deadline.disarm()

            // Metadata and the sequence header open each new stream at timestamp 0, as FFmpeg sends them; the
            // frames then carry on from where the last connection stopped. (nginx-rtmp's recorder measures from
            // the first audio message, so a header stamped later would shift a reconnection's recording to 0.)
            let start = max(publisher.firstQueuedTimestamp() ?? 0, publisher.lastSentTimestamp)
            var metadata = publisher.metadataMessage
            metadata.streamID = streamID
            let header = RTMPMessage(type: .audio, streamID: streamID, timestamp: 0, payload: publisher.sequenceHeader)
            publisher.noteWireBytes(try await sender.send([(metadata, ChunkStreamID.data), (header, ChunkStreamID.audio)]))
            // Some servers say NetStream.Publish.Start and close the connection right after (nginx-rtmp's `deny
            // publish`): the close follows the status in the same stream, so a short wait tells the two apart.
            try await Task.sleep(nanoseconds: UInt64(publisher.configuration.publishConfirmation * 1e9))
            if !channel.isActive { throw closedDuring() }
            phase = "publishing"
            onPublishing()

            try await exchange(streamID: streamID, start: start)
        } catch {
            deadline.disarm()
            throw classify(error)
        }
    }

    /// Maps any failure to the error a user sees.
    private func classify(_ error: any Error) -> AudioError {
        let url = publisher.url
        if deadline.fired {
            return AudioError(
                .timedOut,
                "the server at \(url) did not answer within \(formatSeconds(publisher.configuration.responseTimeout)) during \(phase)")
        }
        if sender.stalled {
            return AudioError(
                .connectionLost,
                "the server at \(url) took no data for \(formatSeconds(publisher.configuration.stallTimeout)) "
                    + "(it stopped reading): the connection was dropped")
        }
        if let error = error as? AudioError { return error }
        // A write fails with "I/O on closed channel" when the reason (a TLS alert, a reset) reached the reader.
        let cause = inbound.failure ?? error
        let text = RTMPPublisher.describe(cause)
        if RTMPPublisher.isTLSFailure(cause) { return AudioError(.connectionFailed, "cannot connect to \(url): \(text)") }
        if ["connect", "createStream", "publish"].contains(phase) {
            // A server that drops the connection instead of answering is refusing what was asked.
            return closedDuring(detail: text)
        }
        return AudioError(.connectionLost, "the connection to \(url) was lost during \(phase): \(text)")
    }

    /// Sends queued frames (a child task) while reading control messages, until stopped or failed.
    private mutating func exchange(streamID: UInt32, start: Int64) async throws {
        let publisher = self.publisher
        let sender = self.sender
        let watch = sender.watchForStalls(seconds: publisher.configuration.stallTimeout)
        defer { watch.cancel() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    try await Self.sendQueued(publisher: publisher, sender: sender, streamID: streamID, start: start)
                } catch {
                    sender.channel.close(promise: nil)
                    throw error
                }
            }
            do {
                while let message = try await nextMessage() {
                    guard let command = try Self.command(in: message) else {
                        noteIgnored(message)
                        continue
                    }
                    if command.name == "onStatus", command.info?["level"]?.stringValue == "error" {
                        throw AudioError(.rejected, "the server at \(publisher.url) stopped the stream: \(statusText(command))")
                    }
                    if command.name == "_error", command.transactionID == Self.transactionPublish {
                        throw AudioError(.rejected, "the server at \(publisher.url) refused to publish: \(statusText(command))")
                    }
                    noteIgnored(command)
                }
                if !publisher.wantsStop {
                    throw AudioError(.connectionLost, "the server at \(publisher.url) closed the connection")
                }
            } catch {
                sender.channel.close(promise: nil)
                throw error
            }
            try await group.waitForAll()
        }
    }

    /// The sending loop: frames from the queue, in batches, until the publisher stops; then FCUnpublish and
    /// deleteStream, and close.
    private static func sendQueued(publisher: RTMPPublisher, sender: MessageSender, streamID: UInt32, start: Int64)
        async throws
    {
        var last = start
        while true {
            let batch = publisher.takeQueued(maximumBytes: 64 * 1024)
            if batch.isEmpty {
                if publisher.wantsStop { break }
                await publisher.bell.wait()
                try Task.checkCancellation()
                continue
            }
            var messages: [(RTMPMessage, chunkStream: UInt32)] = []
            messages.reserveCapacity(batch.count)
            for packet in batch {
                last = max(last, packet.timestamp)
                messages.append(
                    (RTMPMessage(type: .audio, streamID: streamID, timestamp: UInt32(truncatingIfNeeded: last), payload: packet.body),
                     ChunkStreamID.audio))
            }
            do {
                let bytes = try await sender.send(messages)
                publisher.noteSent(packets: batch, wireBytes: bytes, at: monotonicNanoseconds())
            } catch {
                publisher.noteLost(batch.count)
                throw error
            }
        }
        let key = AMF0Value.string(publisher.url.streamKey)
        publisher.noteWireBytes(
            try await sender.send([
                (RTMPCommand("FCUnpublish", transactionID: transactionFCUnpublish, arguments: [key]).message(), ChunkStreamID.command),
                (RTMPCommand("deleteStream", transactionID: transactionDeleteStream, arguments: [.number(Double(streamID))]).message(),
                 ChunkStreamID.command),
            ]))
        try await sender.channel.close()
    }

    // MARK: Reading

    /// Reads exactly `count` raw bytes (the handshake); what follows stays in `pending`.
    private mutating func readRaw(count: Int) async throws -> [UInt8] {
        while pending.count < count {
            guard let buffer = try await iterator.next() else {
                throw AudioError(
                    .protocolError,
                    "the RTMP handshake failed: the server at \(publisher.url) closed the connection after \(pending.count) bytes")
            }
            bytesReceived += UInt64(buffer.readableBytes)
            pending += buffer.readableBytesView
            inbound.consumed(buffer.readableBytes)
        }
        let out = Array(pending[..<count])
        pending.removeFirst(count)
        return out
    }

    /// The next message, with protocol control handled (acknowledgements, pings, window sizes); nil when the
    /// connection closed.
    private mutating func nextMessage() async throws -> RTMPMessage? {
        while true {
            switch try await nextInbound() {
            case .message(let message): return message
            case .closed: return nil
            case .woken: continue
            }
        }
    }

    private enum Inbound {
        case message(RTMPMessage)
        case closed
        /// ``InboundBridge/wake()`` ran: a deadline of the reader's may have passed.
        case woken
    }

    /// The next message or the next wake-up, in the order they came.
    private mutating func nextInbound() async throws -> Inbound {
        while true {
            if let (message, _) = try decoder.nextMessage() {
                try await handleControl(message)
                return .message(message)
            }
            guard let buffer = try await iterator.next() else { return .closed }
            if buffer.readableBytes == 0 { return .woken }
            bytesReceived += UInt64(buffer.readableBytes)
            decoder.append(buffer.readableBytesView)
            inbound.consumed(buffer.readableBytes)
            if bytesReceived - lastAcknowledged >= acknowledgementWindow {
                lastAcknowledged = bytesReceived
                let ack = ProtocolControl.acknowledgement(sequenceNumber: UInt32(truncatingIfNeeded: bytesReceived))
                publisher.noteWireBytes(try await sender.send([(ack, ChunkStreamID.control)]))
            }
        }
    }

    private mutating func handleControl(_ message: RTMPMessage) async throws {
        switch message.type {
        case .windowAcknowledgementSize:
            let size = try ProtocolControl.parseUInt32(message)
            if size > 0 { acknowledgementWindow = UInt64(size) }
        case .setPeerBandwidth:
            // Answer with our Window Acknowledgement Size when it differs from the last one sent (RTMP §5.4.5).
            let size = try ProtocolControl.parseUInt32(message)
            if size != lastWindowSent {
                lastWindowSent = size
                publisher.noteWireBytes(
                    try await sender.send([(ProtocolControl.windowAcknowledgementSize(size), ChunkStreamID.control)]))
            }
        case .userControl:
            let (event, value) = try ProtocolControl.parseUserControl(message.payload)
            if event == ProtocolControl.UserControlEvent.pingRequest.rawValue {
                publisher.noteWireBytes(
                    try await sender.send([(ProtocolControl.userControl(.pingResponse, value), ChunkStreamID.control)]))
            }
        default:
            break
        }
    }

    /// The command a message carries (AMF0 or AMF3, read leniently: see ``RTMPCommand/init(message:)``), or nil
    /// for other messages and commands with nothing to act on. (Synchronous and untyped on purpose: Swift 6.3's
    /// optimizer crashes splitting the async functions below when they call the typed-throwing initializer
    /// directly.)
    private static func command(in message: RTMPMessage) throws -> RTMPCommand? {
        try RTMPCommand(message: message)
    }

    private var logger: Logger { publisher.configuration.logger }

    /// A server's status text with the stream key hidden (some servers quote the stream name).
    private func statusText(_ command: RTMPCommand) -> String { publisher.url.hidingKey(in: command.statusText) }

    /// Notes, at debug level, a command this client has nothing to do with (onBWDone, onFCPublish, _checkbw, …).
    private func noteIgnored(_ command: RTMPCommand) {
        logger.debug(
            "ignored '\(publisher.url.hidingKey(in: command.name))' (transaction \(formatNumber(command.transactionID))) from the server at \(publisher.url) during \(phase)")
    }

    /// Notes, at debug level, a message other than a command that is not protocol control (data, a command with
    /// no name or damaged AMF).
    private func noteIgnored(_ message: RTMPMessage) {
        guard !message.type.isProtocolControl else { return }
        let name = RTMPCommand.values(in: message).values.first?.stringValue.map { " '\(publisher.url.hidingKey(in: $0))'" } ?? ""
        logger.debug("ignored a \(message.type) message\(name) from the server at \(publisher.url) during \(phase)")
    }

    /// Waits for `_result` or `_error` with `transaction`, skipping everything else.
    private mutating func awaitResult(transaction: Double) async throws -> RTMPCommand {
        while true {
            guard let message = try await nextMessage() else { throw closedDuring() }
            guard let command = try Self.command(in: message) else {
                noteIgnored(message)
                continue
            }
            if (command.name == "_result" || command.name == "_error"), command.transactionID == transaction {
                return command
            }
            noteIgnored(command)
        }
    }

    /// Waits for onStatus NetStream.Publish.Start; an onStatus of level "error" or `_error` for publish is a
    /// rejection. A server that has sent neither within ``RTMPPublisher/Configuration/publishStatusWait`` is taken
    /// to publish on createStream's result alone (some servers never send onStatus); a refusal that comes later
    /// still ends the stream (see `exchange`).
    private mutating func awaitPublishStart() async throws {
        let url = publisher.url
        let wait = min(publisher.configuration.publishStatusWait, publisher.configuration.responseTimeout / 2)
        let quietUntil = monotonicNanoseconds() + UInt64(wait * 1e9)
        let alarm = channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(wait * 1e9))) { [inbound] in inbound.wake() }
        defer { alarm.cancel() }
        while true {
            let message: RTMPMessage
            switch try await nextInbound() {
            case .closed: throw closedDuring()
            case .woken:
                guard monotonicNanoseconds() >= quietUntil else { continue }
                logger.debug(
                    "the server at \(url) sent no onStatus within \(formatSeconds(wait)) of publish: publishing on createStream's result alone")
                return
            case .message(let m): message = m
            }
            guard let command = try Self.command(in: message) else {
                noteIgnored(message)
                continue
            }
            if command.name == "onStatus" {
                let code = command.info?["code"]?.stringValue ?? ""
                if code == "NetStream.Publish.Start" { return }
                if command.info?["level"]?.stringValue == "error" || code.hasSuffix("BadName") || code.hasSuffix("Failed") {
                    throw AudioError(.rejected, "the server at \(url) refused to publish: \(statusText(command))")
                }
            } else if command.name == "_error", command.transactionID == Self.transactionPublish {
                throw AudioError(.rejected, "the server at \(url) refused to publish: \(statusText(command))")
            }
            noteIgnored(command)
        }
    }

    private func closedDuring(detail: String? = nil) -> AudioError {
        let url = publisher.url
        let hint =
            switch phase {
            case "publish": " (it may not allow publishing this stream from here)"
            case "connect": " (check the application name '\(url.app)')"
            default: ""
            }
        return AudioError(
            .rejected, "the server at \(url) closed the connection during \(phase)\(hint)" + (detail.map { ": \($0)" } ?? ""))
    }
}

/// Closes a channel when a timeout passes, and remembers that it did.
final class Deadline: Sendable {
    private let state = Locked<(task: Scheduled<Void>?, fired: Bool)>((nil, false))

    var fired: Bool { state.withLock { $0.fired } }

    func arm(channel: any Channel, seconds: Double) {
        let task = channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(seconds * 1e9))) { [self] in
            state.withLock { $0.fired = true }
            channel.close(promise: nil)
        }
        state.withLock { $0.task = task }
    }

    func disarm() {
        state.withLock { s in
            s.task?.cancel()
            s.task = nil
        }
    }
}

/// A number as a person writes it: 4, not 4.0.
func formatNumber(_ n: Double) -> String {
    n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
}

func formatSeconds(_ s: Double) -> String {
    s == s.rounded() ? "\(Int(s)) s" : "\((s * 10).rounded() / 10) s"
}
