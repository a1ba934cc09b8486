import FoundationEssentials
import HummingbirdWebSocket
import LiveAudio
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The pages connected, what each has still to be sent, and the one task that turns snapshots into messages for
/// all of them.
final class StageHub<Presenter: StagePresenter>: Sendable {
    let presenter: Presenter
    let monitor: SnapshotMonitor<Presenter.Snapshot>
    let maximumClients: Int

    private struct State {
        var clients: [Int: StageClient] = [:]
        var nextID = 0
        /// The newest event of each type, for pages that join.
        var events: [(type: String, json: String)] = []
        var tick: String?
        var droppedSlow = 0
        var closed = false
    }
    private let state = Locked(State())

    init(presenter: Presenter, monitor: SnapshotMonitor<Presenter.Snapshot>, maximumClients: Int) {
        self.presenter = presenter
        self.monitor = monitor
        self.maximumClients = maximumClients
    }

    var clientCount: Int { state.withLock { $0.clients.count } }
    var droppedSlowClients: Int { state.withLock { $0.droppedSlow } }
    var hasRoom: Bool { state.withLock { !$0.closed && $0.clients.count < maximumClients } }

    /// Until cancelled: every snapshot becomes a tick for every page and, where they changed, events; a page whose
    /// write has waited longer than `slowClientTimeout` is closed.
    func broadcast(slowClientTimeout: Double) async {
        for await snapshot in monitor.updates() {
            if Task.isCancelled { return }
            let wall = Double(Self.wallMilliseconds())
            let tick = presenter.tick(snapshot, wallMilliseconds: wall)
            let events = presenter.events(snapshot)
            let (clients, changed) = state.withLock { s -> ([StageClient], [(type: String, json: String)]) in
                var changed: [(type: String, json: String)] = []
                for e in events {
                    if let i = s.events.firstIndex(where: { $0.type == e.type }) {
                        if s.events[i].json != e.json {
                            s.events[i] = e
                            changed.append(e)
                        }
                    } else {
                        s.events.append(e)
                        changed.append(e)
                    }
                }
                s.tick = tick
                return (Array(s.clients.values), changed)
            }
            let now = monotonicNanoseconds()
            let limit = UInt64(slowClientTimeout * 1e9)
            for client in clients {
                if client.isStuck(now: now, limit: limit) {
                    client.channel.close(promise: nil)
                    remove(client, slow: true)
                    continue
                }
                for e in changed { client.post(type: e.type, e.json) }
                client.post(type: "tick", tick)
            }
        }
    }

    /// A page's connection, from its upgrade to its close: `hello` and what is known, then what the broadcast
    /// posts; its controls answered with a `reply` each.
    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, channel: any Channel, canControl: Bool) async {
        let client = StageClient(channel: channel, canControl: canControl)
        let joined: Bool = state.withLock { s in
            guard !s.closed, s.clients.count < maximumClients else { return false }
            client.id = s.nextID
            s.nextID += 1
            s.clients[client.id] = client
            client.post(type: "hello", presenter.hello(canControl: canControl))
            for e in s.events { client.post(type: e.type, e.json) }
            if let tick = s.tick { client.post(type: "tick", tick) }
            return true
        }
        guard joined else {
            try? await outbound.close(.unknown(1013), reason: "the stage is full: try again later")
            return
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await client.send(through: outbound) }
            group.addTask { await self.receive(inbound, client: client) }
            await group.next()
            group.cancelAll()
            client.finish()
        }
        remove(client, slow: false)
    }

    /// A page's messages: controls, each parsed, checked and done, and answered.
    private func receive(_ inbound: WebSocketInboundStream, client: StageClient) async {
        do {
            for try await message in inbound.messages(maxSize: 65_536) {
                let reply: String
                switch message {
                case .text(let text):
                    reply = handle(text, client: client)
                case .binary:
                    reply = StageMessages.reply(id: nil, error: "text messages only")
                }
                client.post(type: "reply", reply)
            }
        } catch {}
    }

    func handle(_ text: String, client: StageClient) -> String {
        let request: StageMessages.Request
        do throws(StageMessages.Refusal) {
            request = try StageMessages.control(text, kind: presenter.kind)
        } catch {
            return StageMessages.reply(id: error.id, error: error.message)
        }
        guard client.canControl else {
            return StageMessages.reply(
                id: request.id, error: "the controls need the stage's token: open the address the command printed")
        }
        do throws(AudioError) {
            try presenter.perform(request.control)
        } catch {
            return StageMessages.reply(id: request.id, error: error.message)
        }
        // Shown at once on every page, not at the next tick.
        monitor.refresh()
        return StageMessages.reply(id: request.id, error: nil)
    }

    private func remove(_ client: StageClient, slow: Bool) {
        state.withLock { s in
            if s.clients.removeValue(forKey: client.id) != nil, slow { s.droppedSlow += 1 }
        }
    }

    /// Every page closed, no new ones.
    func closeAll() async {
        let clients = state.withLock { s -> [StageClient] in
            s.closed = true
            return Array(s.clients.values)
        }
        for c in clients { c.finish() }
    }

    static func wallMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// One page: its messages still to send — one of each type, a newer replacing an older (replies each kept, at most
/// 32) — and when its current write started.
final class StageClient: Sendable {
    let channel: any Channel
    let canControl: Bool
    private let idBox = Atomic<Int>(-1)
    var id: Int {
        get { idBox.load(ordering: .relaxed) }
        set { idBox.store(newValue, ordering: .relaxed) }
    }
    private struct Outbox {
        var pending: [(type: String, json: String)] = []
        var replies = 0
        var finished = false
    }
    private let outbox = Locked(Outbox())
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>
    /// Monotonic ns when the write in progress began; 0 when none is.
    private let writeStarted = Atomic<UInt64>(0)

    init(channel: any Channel, canControl: Bool) {
        self.channel = channel
        self.canControl = canControl
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func post(type: String, _ json: String) {
        let posted: Bool = outbox.withLock { o in
            guard !o.finished else { return false }
            if type == "reply" {
                guard o.replies < 32 else { return false }
                o.replies += 1
                o.pending.append((type, json))
            } else if let i = o.pending.firstIndex(where: { $0.type == type }) {
                o.pending[i].json = json
            } else {
                o.pending.append((type, json))
            }
            return true
        }
        if posted { wake.yield(()) }
    }

    func isStuck(now: UInt64, limit: UInt64) -> Bool {
        let started = writeStarted.load(ordering: .relaxed)
        return started != 0 && now > started && now - started > limit
    }

    /// Writes what is posted until the page goes or ``finish()``.
    func send(through outbound: WebSocketOutboundWriter) async {
        for await _ in wakes {
            let batch = outbox.withLock { o -> [(type: String, json: String)] in
                defer {
                    o.pending.removeAll(keepingCapacity: true)
                    o.replies = 0
                }
                return o.pending
            }
            for message in batch {
                writeStarted.store(max(1, monotonicNanoseconds()), ordering: .relaxed)
                do {
                    try await outbound.write(.text(message.json))
                } catch {
                    writeStarted.store(0, ordering: .relaxed)
                    return
                }
                writeStarted.store(0, ordering: .relaxed)
            }
        }
    }

    func finish() {
        outbox.withLock { $0.finished = true }
        wake.finish()
    }
}
