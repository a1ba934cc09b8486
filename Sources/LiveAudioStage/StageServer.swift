import LiveAudio
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where and how the stage listens (what `--web` and `--web-token` give).
public struct StageConfiguration: Sendable, Equatable {
    /// Where to listen: 127.0.0.1 unless told (see ``StageAccess``); port 0 takes a free one.
    public var host = "127.0.0.1"
    /// The port to listen on, 0 … 65535; 0 (the default) takes a free one, which ``StageServer/url`` then shows.
    public var port = 0
    /// The controls' token; nil: none on loopback, a generated one elsewhere.
    public var token: String?
    /// Pages served at once; more are refused.
    public var maximumClients = 128
    /// A page whose socket has not taken what was written to it for this long is disconnected.
    public var slowClientTimeout = 5.0
    /// The join address's token, for phones (guests: ``StageRole/guest``); nil: no join address. An evening's
    /// stage sets one (and a stage token, on loopback too, so that the host and the phones differ).
    public var guestToken: String?
    /// Requests a guest may make in a burst (more are refused until it slows down).
    public var guestRequestBurst = 30
    /// Requests a guest may make a second after its burst.
    public var guestRequestsPerSecond = 10.0
    /// The certificate and key HTTPS is served with; nil: plain HTTP, which only a stage on 127.0.0.1, ::1 or
    /// localhost may serve (anywhere else its token would cross the network in the clear, and a phone's browser gives
    /// its microphone only to HTTPS pages).
    public var tls: StageTLS?

    /// The defaults: 127.0.0.1 on a free port, no token given, at most 128 pages, and a 5-second slow-page timeout.
    public init() {}

    /// A new token: 128 random bits as 32 hex digits (for ``token`` or ``guestToken``).
    public static func randomToken() -> String { StageServer<KaraokeStagePresenter>.newToken() }

    /// The addresses and names a certificate for this stage must name: the host it is bound to, or — bound to every
    /// address — this computer's addresses and names.
    public var certificateNames: [String] {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard bare == "0.0.0.0" || bare == "::" else { return [bare] }
        let addresses = StageServer<KaraokeStagePresenter>.networkAddresses()
        return (addresses.isEmpty ? ["127.0.0.1"] : addresses) + StageServer<KaraokeStagePresenter>.localNames()
    }

    /// `PORT`, `HOST:PORT` or `[IPv6]:PORT` (what `--web` takes).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` with what was wrong.
    public init(parsing text: String) throws(AudioError) {
        var host = "127.0.0.1"
        var portText = Substring(text)
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw AudioError(.invalidParameter, "--web takes [HOST:]PORT (an IPv6 host in brackets: [::1]:8080), got '\(text)'")
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
            guard !host.contains(":") else {
                throw AudioError(.invalidParameter, "--web: an IPv6 host goes in brackets ([::1]:8080), got '\(text)'")
            }
        }
        guard !host.isEmpty, let port = Int(portText), (0...65_535).contains(port) else {
            throw AudioError(.invalidParameter, "--web takes [HOST:]PORT with a port 0 … 65535, got '\(text)'")
        }
        self.init()
        self.host = host
        self.port = port
    }
}

/// The certificate and private key a stage serves HTTPS with, PEM (a certificate chain: the server's first).
public struct StageTLS: Sendable, Equatable {
    /// The certificate chain, PEM.
    public var certificatePEM: String
    /// The private key, PEM.
    public var keyPEM: String

    /// A certificate chain and its key, PEM (checked when the server starts).
    public init(certificatePEM: String, keyPEM: String) {
        self.certificatePEM = certificatePEM
        self.keyPEM = keyPEM
    }

    /// The server side of TLS 1.2 and 1.3 with them.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` when they cannot be read.
    func serverContext() throws(AudioError) -> NIOSSLContext {
        do {
            let chain = try NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8))
            guard !chain.isEmpty else { throw AudioError(.invalidParameter, "the stage's certificate file holds no certificate") }
            let key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
            var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            tls.minimumTLSVersion = .tlsv12
            return try NIOSSLContext(configuration: tls)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.invalidParameter, "the stage's certificate or key cannot be used: \(error)")
        }
    }
}

/// The web stage: a page for the room — lyrics, the pitch lane, meters and the controls — served while a session
/// runs, kept live over a WebSocket. An HTTP/1.1 and WebSocket server on SwiftNIO (its own HTTP/1 codec, WebSocket
/// upgrader, frame codec and aggregator) on one event-loop thread of its own. It reads the session only through a
/// ``/LiveAudio/SnapshotMonitor`` (the snapshots the terminal screen reads) and acts only through the presenter:
/// nothing it does touches the render thread.
///
/// Each page gets `hello`, then a `tick` for every snapshot (30 a second) and the `status`, `lyrics` and `score`
/// events when they change (``StageMessages``). A page that does not read is never buffered for without
/// bound: what waits for it is one message of each kind (a newer replaces an older) and at most 32 replies, writes
/// to its connection stop while 16 KiB wait unsent (beside the kernel's send buffer, fixed at 32 KiB), and a page
/// whose socket has not drained for ``StageConfiguration/slowClientTimeout`` is disconnected.
///
/// Why not a web framework: Hummingbird (tried first) added 26 MB to the executable and 2.2 MB to the resident
/// memory of every command, `render` included, whose goal is under 20 MB; SwiftNIO's own HTTP and WebSocket
/// handlers, in the package the RTMP publisher already links, do the protocol work here.
///
/// Thread safety: any thread; ``start(_:presenter:monitor:)`` and ``stop()`` from the session's owner.
public final class StageServer<Presenter: StagePresenter>: Sendable {
    /// Where and how the server listens: ``StageConfiguration``.
    public typealias Configuration = StageConfiguration

    /// The page's address (with the token when one is needed).
    public let url: String
    /// The phones' address (`/join` with the guest token), when the stage has guests.
    public let joinURL: String?
    /// The rules the server applies to every request, with the port it listens on.
    public let access: StageAccess
    private let hub: StageHub<Presenter>
    private let group: MultiThreadedEventLoopGroup
    private let listener: any Channel
    private let broadcast: Task<Void, Never>

    private init(
        url: String, joinURL: String?, access: StageAccess, hub: StageHub<Presenter>, group: MultiThreadedEventLoopGroup, listener: any Channel,
        broadcast: Task<Void, Never>
    ) {
        self.url = url
        self.joinURL = joinURL
        self.access = access
        self.hub = hub
        self.group = group
        self.listener = listener
        self.broadcast = broadcast
    }

    /// Pages connected now (their WebSockets open).
    public var clientCount: Int { hub.clientCount }
    /// Pages that have connected since the server started (WebSockets taken), in all.
    public var pagesServed: Int { hub.pagesServed }
    /// Pages disconnected for not reading (see ``StageConfiguration/slowClientTimeout``).
    public var droppedSlowClients: Int { hub.droppedSlowClients }

    /// Starts serving; returns once listening.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a bad port or host, `.connectionFailed` when the
    ///   address cannot be bound (in use, not this computer's).
    public static func start(
        _ configuration: Configuration, presenter: Presenter, monitor: SnapshotMonitor<Presenter.Snapshot>
    ) async throws(AudioError) -> StageServer {
        guard (0...65_535).contains(configuration.port) else {
            throw AudioError(.invalidParameter, "--web: the port must be 0 … 65535, got \(configuration.port)")
        }
        let host = configuration.host.hasPrefix("[") && configuration.host.hasSuffix("]")
            ? String(configuration.host.dropFirst().dropLast()) : configuration.host
        guard !host.isEmpty else { throw AudioError(.invalidParameter, "--web: the host is empty") }
        // Guests need a host token beside theirs (without one every page would be the host), on loopback too.
        let token = configuration.token ?? (StageAccess.isLoopback(host) && configuration.guestToken == nil ? nil : Self.newToken())
        // HTTPS wherever a token is needed for being off this computer: plain HTTP only on loopback.
        let tlsContext = try configuration.tls?.serverContext()
        guard tlsContext != nil || StageAccess.isLoopback(host) else {
            throw AudioError(
                .invalidParameter,
                "--web \(host): a stage off 127.0.0.1 is served over HTTPS (its token must not cross the network in the clear, and a phone's browser gives its microphone to HTTPS pages only): give a certificate (--web-cert and --web-key), or let the tool make one")
        }
        let assets = StageAssets.embedded
        let hub = StageHub(
            presenter: presenter, monitor: monitor, maximumClients: configuration.maximumClients,
            burst: configuration.guestRequestBurst, perSecond: configuration.guestRequestsPerSecond)
        var rules = StageAccess(host: host, port: configuration.port, token: token, localNames: Self.localNames())
        rules.guestToken = configuration.guestToken
        rules.secure = tlsContext != nil
        let accessBox = SharedValue(rules)

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // Every connection counts, pages and plain requests alike: beyond the pages' limit and a margin for the page's
        // own files, a new one is closed at once (a flood of connections cannot take the process's descriptors).
        let connections = Atomic<Int>(0)
        let connectionLimit = configuration.maximumClients + 32
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 8 * 1024, high: 16 * 1024))
            // The kernel's send buffer per connection, fixed (Linux doubles it: 32 KiB): ample for a page's 10 KB a
            // second, and a page that stops reading is found in seconds, not after megabytes of autotuned buffer.
            .childChannelOption(.socketOption(.so_sndbuf), value: 16 * 1024)
            .childChannelInitializer { channel in
                let open = connections.add(1, ordering: .relaxed).newValue
                channel.closeFuture.whenComplete { _ in connections.subtract(1, ordering: .relaxed) }
                guard open <= connectionLimit else {
                    return channel.close()
                }
                let access = accessBox.value
                // The page, its files and its WebSocket, after the TLS handler when there is one.
                func page(_ pipeline: ChannelPipeline.SynchronousOperations) throws {
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 65_536, automaticErrorHandling: true,
                        shouldUpgrade: { channel, head in
                            let authority = head.headers["Host"].first
                            let allowed = StageHTTPHandler.path(of: head.uri) == "/ws" && access.allowsHost(authority)
                                && access.allowsOrigin(head.headers["Origin"].first, authority: authority) && hub.hasRoom
                            return channel.eventLoop.makeSucceededFuture(allowed ? HTTPHeaders() : nil)
                        },
                        upgradePipelineHandler: { channel, head in
                            let role = access.role(token: StageHTTPHandler.query(head.uri, "token"), guest: StageHTTPHandler.query(head.uri, "guest"))
                            let client = StageClient(channel: channel, role: role)
                            // On the channel's event loop, as NIO calls this.
                            return channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandlers([
                                    NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: 64, maxAccumulatedFrameSize: 65_536),
                                    StageSocketHandler(hub: hub, client: client),
                                ])
                            }
                        })
                    try pipeline.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
                            context.pipeline.removeHandler(name: StageHTTPHandler.name, promise: nil)
                            context.pipeline.removeHandler(name: "stage-idle", promise: nil)
                        }))
                    try pipeline.addHandler(StageHTTPHandler(assets: assets, access: access), name: StageHTTPHandler.name)
                }
                return channel.eventLoop.makeCompletedFuture {
                    // Until a WebSocket takes over, a connection that sends nothing for 10 s is closed (a request sent
                    // byte by byte, a connection opened and left); a page's WebSocket may be quiet for ever.
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: .seconds(10)), name: "stage-idle")
                    guard let tlsContext else { return try page(channel.pipeline.syncOperations) }
                    // HTTPS and plain HTTP on the one port, told apart by the first byte (a TLS handshake's is 22):
                    // plain HTTP gets a redirect to the HTTPS address, never the page.
                    try channel.pipeline.syncOperations.addHandler(
                        StageSchemeSniffer(
                            tls: { pipeline in
                                try pipeline.addHandler(NIOSSLServerHandler(context: tlsContext))
                                try page(pipeline)
                            },
                            plain: { pipeline in
                                try pipeline.configureHTTPServerPipeline()
                                try pipeline.addHandler(StageHTTPHandler(assets: assets, access: access, redirectsToHTTPS: true), name: StageHTTPHandler.name)
                            }))
                }
            }
        let listener: any Channel
        do {
            listener = try await bootstrap.bind(host: host, port: configuration.port).get()
        } catch {
            try? await group.shutdownGracefully()
            throw AudioError(.connectionFailed, "--web: cannot listen on \(host):\(configuration.port): \(error)")
        }
        let port = listener.localAddress?.port ?? configuration.port
        accessBox.value.port = port
        let broadcast = Task.detached { await hub.broadcast(slowClientTimeout: configuration.slowClientTimeout) }
        // Bound to every address: an address of this computer's network, which a phone can open (its name may not
        // resolve there).
        let wildcard = host == "0.0.0.0" || host == "::"
        let reachable = wildcard ? (Self.networkAddresses().first ?? "127.0.0.1") : host
        let shownHost = reachable.contains(":") ? "[\(reachable)]" : reachable
        let scheme = tlsContext == nil ? "http" : "https"
        let url = "\(scheme)://\(shownHost):\(port)/" + (token.map { "?token=" + $0 } ?? "")
        let joinURL = configuration.guestToken.map { "\(scheme)://\(shownHost):\(port)/join?guest=" + $0 }
        return StageServer(url: url, joinURL: joinURL, access: accessBox.value, hub: hub, group: group, listener: listener, broadcast: broadcast)
    }

    /// Stops serving: the listener closes, every page gets the session's last state and a close frame saying it has
    /// ended (a page then stops reconnecting), and its connection ends.
    public func stop() async {
        broadcast.cancel()
        await broadcast.value
        try? await listener.close()
        await hub.closeAll()
        try? await group.shutdownGracefully()
    }

    /// 128 random bits as 32 hex digits.
    static func newToken() -> String {
        var rng = SystemRandomNumberGenerator()
        return (0..<16).map { _ in
            let h = String(UInt8.random(in: 0...255, using: &rng), radix: 16)
            return h.count == 1 ? "0" + h : h
        }.joined()
    }

    /// This computer's IPv4 addresses other than loopback, then its IPv6 ones (not link-local).
    static func networkAddresses() -> [String] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var v4: [String] = [], v6: [String] = []
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr else { continue }
            let family = Int32(address.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { continue }
            var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
            guard getnameinfo(address, length, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST) == 0 else { continue }
            let name = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if family == AF_INET, !name.hasPrefix("127.") { v4.append(name) }
            if family == AF_INET6, name != "::1", !name.lowercased().hasPrefix("fe80") { v6.append(name) }
        }
        return v4 + v6
    }

    /// This computer's name (and name.local), for a page reached by it.
    static func localNames() -> [String] {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return [] }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? [] : [name, name + ".local"]
    }
}

/// Tells HTTPS from plain HTTP on one port by a connection's first byte (22 starts a TLS handshake record), sets the
/// pipeline up for the one it is, hands it the bytes and leaves.
final class StageSchemeSniffer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias Configure = (ChannelPipeline.SynchronousOperations) throws -> Void

    private let tls: Configure
    private let plain: Configure

    init(tls: @escaping Configure, plain: @escaping Configure) {
        self.tls = tls
        self.plain = plain
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return }
        do {
            try (first == 22 ? tls : plain)(context.pipeline.syncOperations)
        } catch {
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// A connection that sent nothing for the idle timeout (not even a TLS handshake) is closed.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}

/// The page and its files over HTTP: only for this server's own Host (else 421), never cached, no other site's
/// scripts, frames or referrers. A WebSocket request that was not upgraded (its Host, Origin or the page limit
/// refused it) gets 403. On a stage served over HTTPS, a plain HTTP request gets a redirect (308) to the same path
/// over HTTPS and nothing else.
final class StageHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    static let name = "stage-http"

    let assets: StageAssets
    let access: StageAccess
    /// Plain HTTP to an HTTPS stage: every request is sent on to HTTPS.
    let redirectsToHTTPS: Bool
    private var head: HTTPRequestHead?

    init(assets: StageAssets, access: StageAccess, redirectsToHTTPS: Bool = false) {
        self.assets = assets
        self.access = access
        self.redirectsToHTTPS = redirectsToHTTPS
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break  // requests here have no body worth reading
        case .end:
            if let head { respond(context, head) }
            head = nil
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    private func respond(_ context: ChannelHandlerContext, _ head: HTTPRequestHead) {
        let authority = head.headers["Host"].first
        let path = Self.path(of: head.uri)
        var status = HTTPResponseStatus.ok
        var type = "text/plain; charset=utf-8"
        var body: [UInt8]
        var location: String?
        if !access.allowsHost(authority) {
            status = .misdirectedRequest
            body = Array("This stage answers to its own address only.\n".utf8)
        } else if redirectsToHTTPS, let authority {
            status = .permanentRedirect
            location = "https://\(authority)\(head.uri.hasPrefix("/") ? head.uri : "/")"
            body = Array("This stage is served over HTTPS: \(location!)\n".utf8)
        } else if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            body = Array("GET only.\n".utf8)
        } else if path == "/ws" {
            status = .forbidden
            body = Array("WebSocket refused: the stage takes its own page's origin, its own address, and a limited number of pages.\n".utf8)
        } else if let file = assets.file(at: path) {
            type = file.contentType
            body = file.bytes
        } else {
            status = .notFound
            body = Array("Not found.\n".utf8)
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        headers.add(name: "Referrer-Policy", value: "no-referrer")
        if let location { headers.add(name: "Location", value: location) }
        if let authority, access.allowsHost(authority) {
            headers.add(
                name: "Content-Security-Policy",
                value: "default-src 'self'; connect-src 'self' \(access.secure ? "wss" : "ws")://\(authority); img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
        }

        // One response a connection: a client that sends requests and reads no answers gets one answer, not a
        // queue of them (the page's three files cost three connections, on a local network nothing).
        let keepAlive = false
        headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// The path of a request's target, without its query.
    static func path(of uri: String) -> String {
        String(uri.prefix { $0 != "?" && $0 != "#" })
    }

    /// A query parameter's value (percent-decoding not needed: tokens are letters, digits, - and _).
    static func query(_ uri: String, _ name: String) -> String? {
        guard let q = uri.firstIndex(of: "?") else { return nil }
        for pair in uri[uri.index(after: q)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, parts[0] == name { return String(parts[1]) }
        }
        return nil
    }
}

/// A page's WebSocket once upgraded: its text messages are controls (each answered by a `reply`), pings answered,
/// a close echoed; the hub writes to it through its ``StageClient``.
final class StageSocketHandler<Presenter: StagePresenter>: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let hub: StageHub<Presenter>
    let client: StageClient
    private var closing = false

    init(hub: StageHub<Presenter>, client: StageClient) {
        self.hub = hub
        self.client = client
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if !hub.join(client) {
            close(context, code: .unknown(1013), reason: "the stage is full: try again later")
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            var data = frame.unmaskedData
            let text = data.readString(length: data.readableBytes) ?? ""
            if let reply = hub.handle(text, client: client) { client.post(type: "reply", reply) }
        case .binary:
            // A singing phone's audio. A page that sings no phone is told so; a phone that sends garbage or floods
            // is dropped (its voice given back).
            var data = frame.unmaskedData
            switch hub.audio(data.readBytes(length: data.readableBytes) ?? [], client: client) {
            case .taken: break
            case .notSinging: client.post(type: "reply", StageMessages.reply(id: nil, error: "binary messages are a singing phone's audio only"))
            case .dropped(let why):
                // Told why (the page stops singing until tapped again), then closed as a policy violation.
                client.post(type: "phone-ended", StageMessages.phoneEnded(why))
                // A close frame's reason is at most 123 bytes.
                var reason = ""
                for c in why {
                    guard reason.utf8.count + String(c).utf8.count <= 120 else { break }
                    reason.append(c)
                }
                close(context, code: .policyViolation, reason: reason)
            }
        case .ping:
            // Not to a page that does not read: pings sent without reading would pile pongs up.
            guard context.channel.isWritable else { return }
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            close(context, code: .normalClosure, reason: nil)
        default:
            break
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        client.pump()
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        hub.leave(client)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func close(_ context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String?) {
        guard !closing else { return }
        closing = true
        var data = context.channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        data.write(webSocketErrorCode: code)
        if let reason { data.writeString(reason) }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// A value any thread may read and set, under a lock (for closures that outlive the function making them).
final class SharedValue<Value: Sendable>: Sendable {
    private let lock: Locked<Value>

    init(_ value: Value) { lock = Locked(value) }

    var value: Value {
        get { lock.withLock { $0 } }
        set { lock.withLock { $0 = newValue } }
    }
}
