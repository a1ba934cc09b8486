import Dispatch
import LiveAudio
import NIOCore
import NIOWebSocket
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
        var joined = 0
        var closed = false
    }
    private let state = Locked(State())
    /// The evening's requests (SQLite) run here, one at a time and in order, never on the event loop that every
    /// page's socket shares.
    private let library = DispatchQueue(label: "la-stage-library")
    /// A guest's requests by its address: a bucket of `burst` that fills at `perSecond` (a reconnect gets no new
    /// burst; the host is not counted).
    private struct Bucket {
        var tokens: Double
        var at: UInt64
    }
    private let buckets = Locked<[String: Bucket]>([:])
    let burst: Double
    let perSecond: Double
    /// The pages singing into the room's phone voices.
    let phones: StagePhones
    /// A look at whose turn it is (``StagePhones/endTurns(why:mayUsePhone:)``) waits on the library's queue.
    private let turnLookWaiting = Atomic<Bool>(false)

    init(presenter: Presenter, monitor: SnapshotMonitor<Presenter.Snapshot>, maximumClients: Int, burst: Int = 30, perSecond: Double = 10) {
        self.presenter = presenter
        self.monitor = monitor
        self.maximumClients = maximumClients
        self.burst = Double(max(1, burst))
        self.perSecond = max(0.1, perSecond)
        phones = StagePhones(voices: presenter.phoneVoices)
    }

    /// Whether a request from `client` may be taken now (a guest's: one token of its address's bucket).
    func takeRequest(_ client: StageClient) -> Bool {
        guard client.role == .guest else { return true }
        let now = monotonicNanoseconds()
        return buckets.withLock { all in
            if all.count > 4096, all[client.address] == nil { all.removeAll() }
            var b = all[client.address] ?? Bucket(tokens: burst, at: now)
            b.tokens = min(burst, b.tokens + Double(now &- b.at) / 1e9 * perSecond)
            b.at = now
            let taken = b.tokens >= 1
            if taken { b.tokens -= 1 }
            all[client.address] = b
            return taken
        }
    }

    var clientCount: Int { state.withLock { $0.clients.count } }
    var droppedSlowClients: Int { state.withLock { $0.droppedSlow } }
    var pagesServed: Int { state.withLock { $0.joined } }
    var hasRoom: Bool { state.withLock { !$0.closed && $0.clients.count < maximumClients } }

    /// Until cancelled: every snapshot becomes a tick for every page and, where they changed, events; a page whose
    /// write has waited longer than `slowClientTimeout` is closed.
    func broadcast(slowClientTimeout: Double) async {
        var nextTurnLook: UInt64 = 0
        for await snapshot in monitor.updates() {
            send(snapshot, slowClientTimeout: slowClientTimeout)
            phones.pings()
            // Once a second: a phone sings for the singer whose song is on or next, not after (the library is read
            // on its own queue).
            let now = monotonicNanoseconds()
            // One look waiting at most: behind a slow evening request, looks queued one a second would run back to
            // back, three "in a row" within milliseconds.
            if now >= nextTurnLook, turnLookWaiting.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
                nextTurnLook = now + 1_000_000_000
                library.async { [self] in
                    phones.endTurns(why: Self.turnOver) { presenter.mayUsePhone(role: $0, singer: $1) }
                    turnLookWaiting.store(false, ordering: .relaxed)
                }
            }
            if Task.isCancelled { break }
        }
        // The session's last state (the owner refreshed the monitor before stopping the stage).
        send(monitor.latest, slowClientTimeout: slowClientTimeout)
    }

    private func send(_ snapshot: Presenter.Snapshot, slowClientTimeout: Double) {
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
                client.abort()
                remove(client, slow: true)
                continue
            }
            for e in changed { client.post(type: e.type, e.json) }
            client.post(type: "tick", tick)
        }
    }

    /// A page joins: `hello` and what is known now go to it first. False when the stage is full or closed.
    func join(_ client: StageClient) -> Bool {
        let joined: Bool = state.withLock { s in
            guard !s.closed, s.clients.count < maximumClients else { return false }
            client.id = s.nextID
            s.nextID += 1
            s.joined += 1
            s.clients[client.id] = client
            var hello = presenter.hello(role: client.role)
            // The phone voices the room has: a page offers its microphone when there are any.
            if !phones.voices.isEmpty, hello.hasSuffix("}") { hello = String(hello.dropLast()) + ",\"phones\":\(phones.voices.count)}" }
            client.post(type: "hello", hello)
            for e in s.events { client.post(type: e.type, e.json) }
            if let tick = s.tick { client.post(type: "tick", tick) }
            return true
        }
        return joined
    }

    /// Why a guest's phone stopped singing when its singer's song was over.
    static var turnOver: String { "your turn is over: a phone sings for the singer whose song is on or next" }

    /// A page's connection ended.
    func leave(_ client: StageClient) {
        // Its voice kept a while for the page, which reconnects by itself.
        phones.release(client, keep: true)
        client.finish()
        remove(client, slow: false)
    }

    /// A binary message: a phone's audio (see ``StagePhones/audio(_:_:)``).
    func audio(_ bytes: [UInt8], client: StageClient) -> StagePhones.Taken { phones.audio(client, bytes) }

    /// A phone message: take or give back a phone voice, calibrate it, or a clock answer (no reply).
    private func phone(_ text: String, client: StageClient) -> String? {
        let parsed: (id: String?, request: PhoneRequest)
        do throws(StageMessages.Refusal) {
            parsed = try StageMessages.phone(text)
        } catch {
            return StageMessages.reply(id: error.id, error: error.message)
        }
        switch parsed.request {
        case .calibrate, .offset:
            // A guest's asks count as its evening requests do (a calibration plays chirps into the room). Not a
            // `sing`: a page sings again, with its claim, every time its connection comes back, and a refusal then
            // would stop its singing.
            guard takeRequest(client) else { return StageMessages.reply(id: parsed.id, error: "too many requests: wait a moment") }
        case .clock, .stop, .sing:
            break
        }
        switch parsed.request {
        case .clock(let room, let phone):
            phones.clock(client, room: room, phone: phone)
            return nil
        case .stop:
            phones.release(client)
            return StageMessages.reply(id: parsed.id, error: nil)
        case .sing(let offset, let claim):
            guard presenter.mayUsePhone(role: client.role, singer: client.singer) else {
                return StageMessages.reply(id: parsed.id, error: "only the singer whose song is on or next may sing with a phone")
            }
            let taken: (voice: Int, new: Bool, resumed: Bool)
            do throws(AudioError) { taken = try phones.take(client, offset: offset, claim: claim) } catch { return StageMessages.reply(id: parsed.id, error: error.message) }
            let voice = taken.voice
            if offset == nil, taken.resumed, let known = phones.voice(of: client)?.report.offset {
                // Back before its offset reached it: the one the room has, not another calibration mid-song.
                client.post(type: "phone", StageMessages.phoneCalibrated(voice: voice, offset: known))
            } else if offset == nil, taken.new {
                // Calibrated once its clock has been read and its audio comes: two seconds on.
                calibrate(client, id: nil, after: 2)
            }
            return StageMessages.reply(id: parsed.id, answer: EveningAnswer(data: "{\"voice\":\(voice)}"))
        case .calibrate:
            guard phones.voice(of: client) != nil else { return StageMessages.reply(id: parsed.id, error: "this page sings with no phone voice") }
            calibrate(client, id: parsed.id, after: 0)
            return nil
        case .offset(let seconds):
            guard let voice = phones.setOffset(client, seconds: seconds) else {
                return StageMessages.reply(id: parsed.id, error: "this page sings with no phone voice")
            }
            client.post(type: "phone", StageMessages.phoneCalibrated(voice: voice.voice, offset: seconds))
            return StageMessages.reply(id: parsed.id, error: nil)
        }
    }

    /// Calibrates `client`'s voice after `seconds`; the result goes to the page as a `phone` message (and a reply
    /// when asked for with `id`).
    private func calibrate(_ client: StageClient, id: String?, after seconds: Double) {
        Task.detached { [phones] in
            if seconds > 0 { try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9)) }
            guard let voice = phones.voice(of: client) else { return }
            do throws(AudioError) {
                let offset = try await voice.calibrate()
                client.post(type: "phone", StageMessages.phoneCalibrated(voice: voice.voice, offset: offset))
                if id != nil { client.post(type: "reply", StageMessages.reply(id: id, error: nil)) }
            } catch {
                client.post(type: "phone", StageMessages.phoneCalibrated(voice: voice.voice, error: error.message))
                if id != nil { client.post(type: "reply", StageMessages.reply(id: id, error: error.message)) }
            }
        }
    }

    /// The reply to a page's message, or nil when it comes later (an evening request, answered off the event loop).
    func handle(_ text: String, client: StageClient) -> String? {
        if StageMessages.isPhone(text) { return phone(text, client: client) }
        if StageMessages.isEvening(text) {
            let parsed: (id: String?, request: EveningRequest)
            do throws(StageMessages.Refusal) {
                parsed = try StageMessages.evening(text)
            } catch {
                return StageMessages.reply(id: error.id, error: error.message)
            }
            guard takeRequest(client) else {
                return StageMessages.reply(id: parsed.id, error: "too many requests: wait a moment")
            }
            library.async { [self] in
                let answer = presenter.evening(parsed.request, role: client.role, singer: client.singer)
                if let singer = answer.singer { client.singer = singer }
                // Shown at once on every page, not at the next tick.
                if answer.error == nil { monitor.refresh() }
                client.post(type: "reply", StageMessages.reply(id: parsed.id, answer: answer))
            }
            return nil
        }
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
        for c in clients { c.close() }
    }

    static func wallMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// One page: its messages still to send — one of each type, a newer replacing an older (replies each kept, at most
/// 32) — written on its channel's event loop while the socket takes them, and since when it has not.
final class StageClient: Sendable {
    let channel: any Channel
    let role: StageRole
    var canControl: Bool { role == .host }
    /// The page's IP address (a guest's requests are counted by it).
    let address: String
    private let idBox = Atomic<Int>(-1)
    private let singerBox = Atomic<Int64>(0)
    /// The singer a guest's page joined as (nil before).
    var singer: Int64? {
        get { let s = singerBox.load(ordering: .relaxed); return s == 0 ? nil : s }
        set { singerBox.store(newValue ?? 0, ordering: .relaxed) }
    }

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
    /// Monotonic ns since when messages have waited for a socket that takes no more; 0 while it takes them.
    private let blockedSince = Atomic<UInt64>(0)

    init(channel: any Channel, role: StageRole) {
        self.channel = channel
        self.role = role
        address = channel.remoteAddress?.ipAddress ?? "?"
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
        if posted { channel.eventLoop.execute { self.pump() } }
    }

    /// Writes what waits while the socket takes it (on the channel's event loop).
    func pump() {
        guard channel.eventLoop.inEventLoop else {
            channel.eventLoop.execute { self.pump() }
            return
        }
        guard channel.isActive else { return }
        var wrote = false
        while channel.isWritable {
            let next = outbox.withLock { o -> (type: String, json: String)? in
                guard !o.pending.isEmpty else { return nil }
                let m = o.pending.removeFirst()
                if m.type == "reply" { o.replies -= 1 }
                return m
            }
            guard let next else { break }
            let buffer = channel.allocator.buffer(string: next.json)
            channel.write(WebSocketFrame(fin: true, opcode: .text, data: buffer), promise: nil)
            wrote = true
        }
        if wrote { channel.flush() }
        let waiting = outbox.withLock { !$0.pending.isEmpty }
        if channel.isWritable || !waiting {
            blockedSince.store(0, ordering: .relaxed)
        } else if blockedSince.load(ordering: .relaxed) == 0 {
            blockedSince.store(max(1, monotonicNanoseconds()), ordering: .relaxed)
        }
    }

    func isStuck(now: UInt64, limit: UInt64) -> Bool {
        let since = blockedSince.load(ordering: .relaxed)
        return since != 0 && now > since && now - since > limit
    }

    /// No more messages: the page has gone.
    func finish() {
        outbox.withLock { $0.finished = true }
    }

    /// A close frame (1000, ``StageMessages/endedReason``: the session is over, a page stops reconnecting), then the
    /// connection's end.
    func close() {
        finish()
        let channel = channel
        channel.eventLoop.execute {
            // A page whose socket takes nothing more gets no close frame: it would wait behind the rest.
            guard channel.isWritable else { return channel.close(promise: nil) }
            var data = channel.allocator.buffer(capacity: 32)
            data.write(webSocketErrorCode: .normalClosure)
            data.writeString(StageMessages.endedReason)
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }

    /// The connection ended at once (a page that does not read gets no close frame through a full socket).
    func abort() {
        finish()
        channel.close(promise: nil)
    }
}
