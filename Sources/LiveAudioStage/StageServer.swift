import FoundationEssentials
import Hummingbird
import HummingbirdWebSocket
import LiveAudio
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The web stage: a page for the room — lyrics, the pitch lane, meters and the controls — served while a session
/// runs, kept live over a WebSocket. Hummingbird on SwiftNIO's event loops; it reads the session only through a
/// ``SnapshotMonitor`` (the snapshots the terminal screen reads) and controls it through the presenter: nothing it
/// does touches the render thread.
///
/// Each page gets `hello`, then a `tick` for every snapshot (30 a second) and the `status`, `lyrics` and `score`
/// events when they change (``StageMessages``). A page that does not read is never buffered for without bound: its
/// messages waiting to go are one of each kind (a newer replaces an older), the socket's own buffer is NIO's (64 KiB
/// before writes wait), and a page whose write has waited ``Configuration/slowClientTimeout`` is disconnected.
///
/// Thread safety: any thread; ``start(_:presenter:monitor:)`` and ``stop()`` from the session's owner.
public struct StageConfiguration: Sendable, Equatable {
    /// Where to listen: 127.0.0.1 unless told (see ``StageAccess``); port 0 takes a free one.
    public var host = "127.0.0.1"
    public var port = 0
    /// The controls' token; nil: none on loopback, a generated one elsewhere.
    public var token: String?
    /// Pages served at once; more are refused.
    public var maximumClients = 128
    /// A page whose socket has not taken a message for this long is disconnected.
    public var slowClientTimeout = 5.0

    public init() {}

    /// `PORT`, `HOST:PORT` or `[IPv6]:PORT` (what `--web` takes).
    /// - Throws: ``AudioError`` `.invalidParameter` with what was wrong.
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

public final class StageServer<Presenter: StagePresenter>: Sendable {
    public typealias Configuration = StageConfiguration

    /// The page's address (with the token when one is needed).
    public let url: String
    public let access: StageAccess
    private let hub: StageHub<Presenter>
    private let group: ServiceGroup
    private let running: Task<Void, Never>
    private let broadcast: Task<Void, Never>

    private init(
        url: String, access: StageAccess, hub: StageHub<Presenter>, group: ServiceGroup, running: Task<Void, Never>,
        broadcast: Task<Void, Never>
    ) {
        self.url = url
        self.access = access
        self.hub = hub
        self.group = group
        self.running = running
        self.broadcast = broadcast
    }

    /// Pages connected now, and pages disconnected for not reading.
    public var clientCount: Int { hub.clientCount }
    public var droppedSlowClients: Int { hub.droppedSlowClients }

    /// Starts serving; returns once listening.
    /// - Throws: ``AudioError`` `.invalidParameter` for a bad port, `.connectionFailed` when the address cannot be
    ///   bound (in use, not this computer's), `.fileIO` when the page's files are not beside the executable.
    public static func start(
        _ configuration: Configuration, presenter: Presenter, monitor: SnapshotMonitor<Presenter.Snapshot>
    ) async throws(AudioError) -> StageServer {
        guard (0...65_535).contains(configuration.port) else {
            throw AudioError(.invalidParameter, "--web: the port must be 0 … 65535, got \(configuration.port)")
        }
        let host = configuration.host.hasPrefix("[") && configuration.host.hasSuffix("]")
            ? String(configuration.host.dropFirst().dropLast()) : configuration.host
        guard !host.isEmpty else { throw AudioError(.invalidParameter, "--web: the host is empty") }
        let token = configuration.token ?? (StageAccess.isLoopback(host) ? nil : Self.newToken())
        let assets = try StageAssets.load()
        var logger = Logger(label: "liveaudio.stage")
        logger.logLevel = .critical
        let hub = StageHub(presenter: presenter, monitor: monitor, maximumClients: configuration.maximumClients)
        let accessBox = SharedValue(StageAccess(host: host, port: configuration.port, token: token, localNames: Self.localNames()))
        let access: @Sendable () -> StageAccess = { accessBox.value }

        // Plain requests: the page and its files, for this server's own Host only.
        let router = Router(context: StageContext.self)
        router.add(middleware: StageHeaders(access: access))
        for (path, asset) in assets.files {
            let body = ByteBuffer(bytes: asset.bytes)
            let type = asset.contentType
            router.get(RouterPath(stringLiteral: path)) { _, _ in
                Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: body))
            }
        }
        // The WebSocket: Host and Origin checked, the token read, a place among the clients taken.
        let wsRouter = Router(context: StageContext.self)
        wsRouter.ws("/ws") { request, _ in
            let a = access()
            guard a.allowsHost(request.head.authority),
                a.allowsOrigin(request.headers[.origin], authority: request.head.authority),
                hub.hasRoom
            else { return .dontUpgrade }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            let token = context.request.uri.queryParameters["token"].map(String.init)
            await hub.serve(
                inbound: inbound, outbound: outbound, channel: context.requestContext.channel,
                canControl: access().mayControl(token: token))
        }
        let (ports, portsContinuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                webSocketRouter: wsRouter,
                configuration: .init(
                    http1: .init(idleTimeout: .seconds(60)),
                    ws: .init(maxFrameSize: 65_536, autoPing: .enabled(timePeriod: .seconds(15)), closeTimeout: .seconds(2)))),
            configuration: .init(address: .hostname(host, port: configuration.port), serverName: nil),
            onServerRunning: { channel in
                portsContinuation.yield(channel.localAddress?.port ?? -1)
                portsContinuation.finish()
            },
            logger: logger)
        var groupConfiguration = ServiceGroupConfiguration(services: [app], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(3)
        let group = ServiceGroup(configuration: groupConfiguration)
        let failure = SharedValue<String?>(nil)
        let running = Task {
            do { try await group.run() } catch { failure.value = "\(error)" }
            portsContinuation.finish()
        }
        var port = -1
        for await p in ports {
            port = p
            break
        }
        guard port > 0 else {
            running.cancel()
            let why = failure.value ?? "the server did not start"
            throw AudioError(.connectionFailed, "--web: cannot listen on \(host):\(configuration.port): \(why)")
        }
        accessBox.value.port = port
        let broadcast = Task.detached { await hub.broadcast(slowClientTimeout: configuration.slowClientTimeout) }
        let shownHost = host.contains(":") ? "[\(host)]" : (host == "0.0.0.0" ? (Self.localNames().first ?? host) : host)
        let url = "http://\(shownHost):\(port)/" + (token.map { "?token=" + $0 } ?? "")
        return StageServer(url: url, access: access(), hub: hub, group: group, running: running, broadcast: broadcast)
    }

    /// Stops serving: pages get a close, the listener shuts (at most 3 s).
    public func stop() async {
        broadcast.cancel()
        await hub.closeAll()
        await group.triggerGracefulShutdown()
        await running.value
    }

    /// 128 random bits as 32 hex digits.
    static func newToken() -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
        return bytes.map { b in
            let h = String(b, radix: 16)
            return h.count == 1 ? "0" + h : h
        }.joined()
    }

    /// This computer's name (and name.local), for a page reached by it.
    static func localNames() -> [String] {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return [] }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? [] : [name, name + ".local"]
    }
}

/// The request context: a WebSocket upgrade's, and the channel, to close a page that does not read.
struct StageContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<StageContext>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
    }
}

/// Every response: only for this server's own Host (else 421), never cached, no other site's scripts, frames or
/// referrers.
struct StageHeaders: RouterMiddleware {
    typealias Context = StageContext
    let access: @Sendable () -> StageAccess

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard access().allowsHost(request.head.authority) else {
            return Response(
                status: .misdirectedRequest, headers: [.contentType: "text/plain; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: "This stage answers to its own address only.\n")))
        }
        var response = try await next(request, context)
        let authority = request.head.authority ?? ""
        response.headers[.contentSecurityPolicy] =
            "default-src 'self'; connect-src 'self' ws://\(authority); img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        response.headers[.cacheControl] = "no-store"
        response.headers[.init("Referrer-Policy")!] = "no-referrer"
        response.headers[.init("X-Content-Type-Options")!] = "nosniff"
        return response
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
