#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import CPipeWire
import Synchronization

/// The PipeWire backend: a client of the server's with a capture and a playback stream (`pw_stream`s in one node
/// group: the capture's cycle triggers the playback's, so one call of the engine handles both, on PipeWire's
/// real-time data thread, with no hop of ours between).
///
/// Devices are PipeWire's sinks and sources by node name (`wpctl status`, `pw-dump`); with none named, a stream
/// follows the default, and the session manager (WirePlumber) moves it when the default changes or its node goes. A
/// named device holds its stream (`node.dont-reconnect`): when it goes, the route is lost until it is back. The period
/// is asked of the graph as `node.latency` (the graph runs the smallest period its nodes ask for; a longer cycle is
/// split into calls of at most the period). The streams run at the request's rate; PipeWire converts to the graph's.
///
/// What happens to the streams is read from the registry (links, nodes, the "default" metadata) on the client's loop
/// thread and turned into events on the control side (``takeEvents()``): route changes, the route lost and back,
/// interruptions (the stream paused by the server, the graph's driver paused or suspended) — none of them a fault. The
/// server going away is a fault.
final class PipeWireDriver: AudioDriver, @unchecked Sendable {
    // Unchecked Sendable: `handler` set before the streams start; `observed` the control side's, under its lock; the
    // data thread reads only `handler`, `sampleRate` and the counters.
    private(set) var grant: DeviceGrant
    private let client: OpaquePointer
    private let request: DeviceRequest
    private var handler: DeviceCycleHandler?
    private let sampleRate: Double
    private let periodFrames: Int
    private let closed = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let wake = Locked<(@Sendable () -> Void)?>(nil)
    private let observed = Locked<Observation>(Observation())
    private let applicationName: String

    /// How long `start` waits for the streams to run, and a client for the server to answer.
    static let timeoutMilliseconds: Int32 = 3000

    var xrunCount: Int { Int(status().xruns) }

    /// Connects to the server and checks the request's devices; the streams are made by ``start(handler:onFault:)``.
    init(request: DeviceRequest, applicationName: String = "liveaudio", remote: String? = nil) throws(AudioError) {
        try request.validate()
        client = try Self.connect(applicationName, remote: remote)
        self.applicationName = applicationName
        self.request = request
        sampleRate = request.sampleRate
        periodFrames = request.periodFrames
        do throws(AudioError) {
            let graph = PipeWireGraph(snapshotOf: client)
            if request.inputChannels > 0, let name = request.inputDevice, graph.source(named: name) == nil {
                throw AudioDevices.unknownDevice(
                    name, backend: .pipewire, devices: graph.devices, detail: "PipeWire has no source by that node name")
            }
            if request.outputChannels > 0, let name = request.outputDevice, graph.sink(named: name) == nil {
                throw AudioDevices.unknownDevice(
                    name, backend: .pipewire, devices: graph.devices, detail: "PipeWire has no sink by that node name")
            }
            grant = DeviceGrant(
                backend: .pipewire,
                inputDevice: request.inputChannels > 0 ? (request.inputDevice ?? graph.defaults.source ?? "default") : nil,
                outputDevice: request.outputChannels > 0 ? (request.outputDevice ?? graph.defaults.sink ?? "default") : nil,
                inputChannels: request.inputChannels, outputChannels: request.outputChannels, sampleRate: request.sampleRate,
                periodFrames: request.periodFrames, periodCount: 1, deviceSampleType: .float32,
                inputLatencyFrames: 0,
                outputLatencyFrames: request.outputChannels > 0 ? request.periodFrames : 0)
        } catch {
            la_pw_client_free(client)
            throw error
        }
    }

    deinit {
        stop()
        la_pw_client_free(client)
    }

    private static func connect(_ name: String, remote: String?) throws(AudioError) -> OpaquePointer {
        var message = [CChar](repeating: 0, count: 512)
        let client = remote.withOptionalCString { remote in
            la_pw_client_new(name, remote, timeoutMilliseconds, &message, message.count)
        }
        guard let client else {
            throw AudioError(.deviceUnavailable, cText(message) + "; is pipewire running? (see docs/devices.md)")
        }
        return client
    }

    /// Whether a PipeWire server answers here (its library loads and a client connects within a second).
    static func serverAnswers(remote: String? = nil) -> Bool {
        guard la_pw_load_failure() == nil else { return false }
        var message = [CChar](repeating: 0, count: 256)
        let client = remote.withOptionalCString { la_pw_client_new("liveaudio-probe", $0, 1000, &message, message.count) }
        guard let client else { return false }
        la_pw_client_free(client)
        return true
    }

    // MARK: Start and stop

    func start(handler: DeviceCycleHandler, onFault: @escaping @Sendable (AudioError) -> Void) throws(AudioError) -> [String] {
        precondition(self.handler == nil, "a PipeWire driver starts once")
        self.handler = handler
        // The server's going away is noted on the loop thread and taken by the I/O unit's supervisor (``fault``).
        _ = onFault
        var message = [CChar](repeating: 0, count: 512)
        let user = Unmanaged.passUnretained(self).toOpaque()
        let result: Int32 = request.inputDevice.withOptionalCString { input in
            request.outputDevice.withOptionalCString { output in
                var config = la_pw_stream_config()
                config.input_channels = Int32(request.inputChannels)
                config.output_channels = Int32(request.outputChannels)
                config.rate = UInt32(request.sampleRate)
                config.quantum = UInt32(request.periodFrames)
                config.max_frames = Int32(request.periodFrames)
                config.input_target = input
                config.output_target = output
                return "Production".withCString { role in
                    "LiveAudio".withCString { media in
                        applicationName.withCString { node in
                            config.role = role
                            config.media_name = media
                            config.node_name = node
                            return la_pw_client_start(
                                client, &config, pipeWireProcess, pipeWireNotify, user, Self.timeoutMilliseconds,
                                &message, message.count)
                        }
                    }
                }
            }
        }
        guard result == 0 else { throw AudioError(.deviceUnavailable, cText(message)) }
        started.store(true, ordering: .releasing)
        let now = status()
        observed.withLock { $0.begin(with: now, at: monotonicNanoseconds()) }
        refreshLatency(now)
        var warnings: [String] = []
        if request.outputChannels > 0, now.output.state != Int32(LA_PW_STATE_STREAMING) {
            warnings.append("the playback stream is not running yet (no sink to play to?)")
        }
        if request.inputChannels > 0, now.input.state != Int32(LA_PW_STATE_STREAMING) {
            warnings.append("the capture stream is not running yet (no source to capture from?)")
        }
        if let thread = Self.dataThreadPolicy(), thread != SCHED_FIFO && thread != SCHED_RR {
            warnings.append("PipeWire's data thread runs without real-time priority (no module-rt, rtkit or CAP_SYS_NICE)")
        }
        return warnings
    }

    func stop() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        la_pw_client_stop(client)
    }

    func setWake(_ wake: @escaping @Sendable () -> Void) { self.wake.withLock { $0 = wake } }

    fileprivate func notified() {
        if let wake = wake.withLock({ $0 }) { wake() }
    }

    /// The scheduling policy of PipeWire's data thread ("data-loop.0"), nil when it is not found.
    private static func dataThreadPolicy() -> Int32? {
        guard let tasks = opendir("/proc/self/task") else { return nil }
        defer { closedir(tasks) }
        while let entry = readdir(tasks) {
            let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard let id = Int32(tid), let file = fopen("/proc/self/task/\(tid)/comm", "r") else { continue }
            var name = [CChar](repeating: 0, count: 64)
            let read = fgets(&name, Int32(name.count), file) != nil
            fclose(file)
            if read, cText(name).hasPrefix("data-loop") { return sched_getscheduler(id) }
        }
        return nil
    }

    // MARK: What the control side reads

    private func status() -> la_pw_status {
        var status = la_pw_status()
        la_pw_client_status(client, &status)
        return status
    }

    /// The latency the graph reports for our streams (`pw_stream_get_time_n`'s delay: the ports' and nodes' latency
    /// between the stream and its device), in frames of the graph's rate converted to ours. The playback's is at
    /// least the one graph cycle it takes to leave the graph: a device's reported latency includes it, a virtual
    /// sink (a null sink, whose monitor gives its input back a cycle later) reports none.
    private func refreshLatency(_ status: la_pw_status) {
        let scale = status.graph_rate > 0 ? sampleRate / Double(status.graph_rate) : 1
        let quantum = status.quantum > 0 ? Int((Double(status.quantum) * scale).rounded()) : periodFrames
        let input = request.inputChannels > 0 ? Int((Double(max(0, status.input.delay_frames)) * scale).rounded()) : 0
        let output = request.outputChannels > 0 ? max(quantum, Int((Double(max(0, status.output.delay_frames)) * scale).rounded())) : 0
        grant = DeviceGrant(
            backend: .pipewire, inputDevice: grant.inputDevice, outputDevice: grant.outputDevice,
            inputChannels: grant.inputChannels, outputChannels: grant.outputChannels, sampleRate: grant.sampleRate,
            periodFrames: grant.periodFrames, periodCount: 1, deviceSampleType: .float32, inputLatencyFrames: input,
            outputLatencyFrames: output)
    }

    /// True while the playback stream is linked to a sink (or there is no playback).
    var outputRouted: Bool {
        guard request.outputChannels > 0, started.load(ordering: .acquiring), !closed.load(ordering: .acquiring) else {
            return true
        }
        let now = status()
        return now.fault.0 != 0 || now.output.peer_id != 0
    }

    /// Why the output is not routed, in the words of the supervisor's route-lost event.
    var routeLossReason: String {
        let now = status()
        let old = observed.withLock { $0.lastOutputPeer } ?? "its sink"
        switch now.output.peer_lost_reason {
        case 1: return "the sink '\(old)' was removed"
        case 2: return "the playback stream was unlinked from '\(old)'"
        default: return "the playback stream is linked to no sink"
        }
    }

    /// From the form factor of the sink the playback is linked to (`device.form-factor`).
    var outputIsHeadphones: Bool? {
        guard request.outputChannels > 0, started.load(ordering: .acquiring), !closed.load(ordering: .acquiring) else {
            return nil
        }
        let now = status()
        return now.output.peer_id == 0 ? nil : PipeWireGraph.isHeadphones(now.output)
    }

    var playbackReachable: Bool {
        guard let name = request.outputDevice else { return true }
        return PipeWireGraph(snapshotOf: client).sink(named: name) != nil
    }

    /// The server went away, or failed our streams.
    var fault: AudioError? {
        let now = status()
        guard now.fault.0 != 0 else { return nil }
        return AudioError(.deviceUnavailable, withUnsafeBytes(of: now.fault) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) })
    }

    /// What happened since the last call: the defaults, the nodes our streams are linked to, interruptions.
    func takeEvents() -> [DeviceEvent] {
        guard started.load(ordering: .acquiring), !closed.load(ordering: .acquiring) else { return [] }
        let now = status()
        return observed.withLock { $0.update(with: now, at: monotonicNanoseconds(), period: Double(periodFrames) / sampleRate) }
    }

    // MARK: The data thread

    fileprivate func process(
        input: UnsafeMutablePointer<Float>?, inputChannels: Int, output: UnsafeMutablePointer<Float>?, outputChannels: Int,
        stride: Int, frames: Int, time: la_pw_cycle_time
    ) {
        guard let handler else { return }
        let inputView = input.map { BufferView(base: $0, channelStride: stride, channelCount: inputChannels, frameCount: frames) }
        let outputView = output.map { BufferView(base: $0, channelStride: stride, channelCount: outputChannels, frameCount: frames) }
        let period = UInt64(Double(frames) * 1e9 / sampleRate)
        let inputHost = time.now_ns > period + time.input_delay_ns ? time.now_ns - period - time.input_delay_ns : 0
        handler.deviceCycle(
            input: inputView, output: outputView,
            time: DeviceCycleTime(
                sampleTime: time.sample_time, inputHostTime: inputHost, outputHostTime: time.now_ns + period + time.output_delay_ns))
    }

    // MARK: Listing

    static func listDevices(remote: String?) throws(AudioError) -> [AudioDeviceInfo] {
        let client = try connect("liveaudio-list", remote: remote)
        defer { la_pw_client_free(client) }
        return PipeWireGraph(snapshotOf: client).devices
    }
}

/// What the control side last saw of the streams, and the events the next look makes of it.
struct PipeWireObservation: Sendable {
    var outputPeer: String? {
        didSet { if let outputPeer { lastOutputPeer = outputPeer } }
    }
    /// The last sink the playback was linked to (named when the route is lost).
    var lastOutputPeer: String?
    var inputPeer: String?
    /// The active route (port) of the card behind each peer: its name ("" when its card reports none).
    var outputPort = ""
    var inputPort = ""
    var defaultSink: String?
    var defaultSource: String?
    var interrupted = false
    var lastCycles: UInt64 = 0
    var cyclesMovedAt: UInt64 = 0
    var gapFramesAtInterruption: Int64 = 0
    var cyclesAtInterruption: UInt64 = 0
    /// The cycles counted when our streams were first seen streaming again after an interruption (nil until then):
    /// a cycle counted since ran after the resume, and accounted for the time the pause held.
    var cyclesAtResume: UInt64?
}

extension PipeWireDriver {
    typealias Observation = PipeWireObservation
}

extension PipeWireObservation {
    /// The state when the streams have started: nothing to report yet.
    mutating func begin(with status: la_pw_status, at now: UInt64) {
        outputPeer = status.output.peer_id != 0 ? text(status.output.peer_name) : nil
        if outputPeer == nil { lastOutputPeer = nil }
        inputPeer = status.input.peer_id != 0 ? text(status.input.peer_name) : nil
        outputPort = text(status.output.peer_port_name)
        inputPort = text(status.input.peer_port_name)
        defaultSink = nonEmpty(text(status.default_sink))
        defaultSource = nonEmpty(text(status.default_source))
        lastCycles = status.cycles
        cyclesMovedAt = now
    }

    /// The events between the last look and `status`: a default changed, a stream moved or lost its node, an
    /// interruption began or ended. A graph that runs no cycle for 4 periods (at least 100 ms) while the streams say
    /// they stream is an interruption (its driver paused or suspended): nothing else tells a follower that.
    mutating func update(with status: la_pw_status, at now: UInt64, period: Double) -> [DeviceEvent] {
        var events: [DeviceEvent] = []
        let sink = nonEmpty(text(status.default_sink))
        if sink != defaultSink {
            if status.output.node_id != 0 {
                events.append(.routeChanged(RouteChange(reason: .defaultChanged, direction: .output, from: defaultSink, to: sink)))
            }
            defaultSink = sink
        }
        let source = nonEmpty(text(status.default_source))
        if source != defaultSource {
            if status.input.node_id != 0 {
                events.append(.routeChanged(RouteChange(reason: .defaultChanged, direction: .input, from: defaultSource, to: source)))
            }
            defaultSource = source
        }
        for direction in [DeviceDirections.output, .input] {
            let stream = direction == .output ? status.output : status.input
            guard stream.node_id != 0 else { continue }
            let peer = stream.peer_id != 0 ? text(stream.peer_name) : nil
            let old = direction == .output ? outputPeer : inputPeer
            let port = text(stream.peer_port_name)
            let oldPort = direction == .output ? outputPort : inputPort
            if direction == .output { outputPort = port } else { inputPort = port }
            let headphones = direction == .output ? peer.map { _ in PipeWireGraph.isHeadphones(stream) } ?? nil : nil
            guard peer != old else {
                // The same node, another port of its card (headphones plugged in, the speaker taking over). A port
                // first known (the card's routes read after the link) is no change.
                if let peer, !oldPort.isEmpty, !port.isEmpty, port != oldPort {
                    events.append(.routeChanged(RouteChange(
                        reason: .portChanged, direction: direction, from: "\(peer):\(oldPort)", to: "\(peer):\(port)",
                        toHeadphones: headphones)))
                }
                continue
            }
            let reason: RouteChange.Reason = peer == nil && stream.peer_lost_reason == 1 ? .removed : .moved
            events.append(.routeChanged(RouteChange(reason: reason, direction: direction, from: old, to: peer, toHeadphones: headphones)))
            if direction == .output { outputPeer = peer } else { inputPeer = peer }
        }
        // Interruptions: a stream paused by the server, or no cycles while it streams.
        let streaming = [status.output, status.input].allSatisfy { $0.node_id == 0 || $0.state == Int32(LA_PW_STATE_STREAMING) }
        if status.cycles != lastCycles {
            lastCycles = status.cycles
            cyclesMovedAt = now
        }
        let linked = (status.output.node_id == 0 || status.output.peer_id != 0) && (status.input.node_id == 0 || status.input.peer_id != 0)
        let stalled = Double(now - cyclesMovedAt) / 1e9 > max(0.1, 4 * period)
        if interrupted, streaming, cyclesAtResume == nil { cyclesAtResume = status.cycles }
        if !interrupted, linked, !streaming || stalled {
            interrupted = true
            cyclesAtResume = nil
            gapFramesAtInterruption = status.gap_frames
            cyclesAtInterruption = status.cycles
            let why = !streaming
                ? "the server paused our stream (its node suspended or paused, or the device taken)"
                : "the graph stopped running (its driver paused or suspended)"
            events.append(.interruptionBegan(why))
        } else if interrupted, streaming, !stalled, status.cycles > cyclesAtInterruption,
            status.cycles > cyclesAtResume ?? .max
        {
            // Ended once a cycle has run since the streams stream again: that cycle moved the sample time on by the
            // time the pause held. (Cycles counted while the server was pausing us are not that one.)
            interrupted = false
            events.append(.interruptionEnded(gapFrames: status.gap_frames - gapFramesAtInterruption))
        }
        return events
    }
}

/// The sinks and sources of a PipeWire graph, read from a client's registry.
struct PipeWireGraph: Sendable {
    struct Node: Hashable, Sendable {
        var id: UInt32
        var mediaClass: String
        var name: String
        var description: String
        var formFactor: String
    }

    var nodes: [Node] = []
    var defaults: (sink: String?, source: String?) = (nil, nil)

    init(snapshotOf client: OpaquePointer) {
        guard let text = la_pw_client_snapshot(client) else {
            self.init(snapshot: "")
            return
        }
        defer { free(text) }
        self.init(snapshot: String(cString: text))
    }

    /// From the snapshot's text (CPipeWire.h: `node` and `default` lines, tab-separated).
    init(snapshot: String) {
        for line in snapshot.split(separator: "\n") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if fields.first == "node", fields.count >= 6, let id = UInt32(fields[1]) {
                nodes.append(Node(id: id, mediaClass: fields[2], name: fields[3], description: fields[4], formFactor: fields[5]))
            } else if fields.first == "default", fields.count >= 3, !fields[2].isEmpty {
                if fields[1] == "default.audio.sink" { defaults.sink = fields[2] }
                if fields[1] == "default.audio.source" { defaults.source = fields[2] }
            }
        }
    }

    /// A sink by node name.
    func sink(named name: String) -> Node? { nodes.first { $0.name == name && Self.plays($0) } }
    /// A source by node name.
    func source(named name: String) -> Node? { nodes.first { $0.name == name && Self.captures($0) } }

    static func plays(_ node: Node) -> Bool { node.mediaClass == "Audio/Sink" || node.mediaClass == "Audio/Duplex" }
    static func captures(_ node: Node) -> Bool {
        node.mediaClass == "Audio/Source" || node.mediaClass == "Audio/Source/Virtual" || node.mediaClass == "Audio/Duplex"
    }

    /// Whether a form factor (`device.form-factor`) is one worn on the head.
    static func isHeadphones(_ formFactor: String) -> Bool? {
        formFactor.isEmpty ? nil : ["headphone", "headset", "hands-free"].contains(formFactor)
    }

    /// Whether a stream's peer is worn on the head: its card's active port where the card reports one (its
    /// `port.type`, else its name: `analog-output-headphones`), else the node's form factor.
    static func isHeadphones(_ stream: la_pw_stream_status) -> Bool? {
        let type = text(stream.peer_port_type), port = text(stream.peer_port_name)
        if !type.isEmpty { return ["headphones", "headset", "handsfree", "earpiece"].contains(type) }
        if !port.isEmpty, port.contains("headphones") || port.contains("headset") { return true }
        if !port.isEmpty, port.contains("speaker") { return false }
        return isHeadphones(text(stream.peer_form_factor))
    }

    /// The sinks and sources, sinks first, as devices (the defaults marked).
    var devices: [AudioDeviceInfo] {
        let sinks = nodes.filter(Self.plays).sorted { $0.id < $1.id }
        let sources = nodes.filter { Self.captures($0) && !Self.plays($0) }.sorted { $0.id < $1.id }
        return (sinks + sources).map { node in
            let directions: DeviceDirections =
                node.mediaClass == "Audio/Duplex" ? .duplex : Self.plays(node) ? .output : .input
            let isDefault = node.name == defaults.sink || node.name == defaults.source
            var description = node.description.isEmpty ? node.mediaClass : "\(node.description) (\(node.mediaClass))"
            if !node.formFactor.isEmpty { description += ", \(node.formFactor)" }
            return AudioDeviceInfo(backend: .pipewire, name: node.name, description: description, directions: directions, isDefault: isDefault)
        }
    }
}

private func text<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
}

/// A NUL-terminated C string held in an array.
private func cText(_ array: [CChar]) -> String {
    array.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

private func nonEmpty(_ s: String) -> String? { s.isEmpty ? nil : s }

extension Optional where Wrapped == String {
    /// The string as a C string for `body`, or NULL.
    func withOptionalCString<R>(_ body: (UnsafePointer<CChar>?) -> R) -> R {
        switch self {
        case .some(let s): s.withCString { body($0) }
        case .none: body(nil)
        }
    }
}

// PipeWire's C callbacks: global functions, the driver passed unretained (it outlives its streams: stop() returns once
// no process call runs).
private func pipeWireProcess(
    _ user: UnsafeMutableRawPointer?, _ input: UnsafeMutablePointer<Float>?, _ inputChannels: Int32,
    _ output: UnsafeMutablePointer<Float>?, _ outputChannels: Int32, _ stride: Int32, _ frames: Int32,
    _ time: UnsafePointer<la_pw_cycle_time>?
) {
    guard let user, let time else { return }
    Unmanaged<PipeWireDriver>.fromOpaque(user).takeUnretainedValue().process(
        input: input, inputChannels: Int(inputChannels), output: output, outputChannels: Int(outputChannels),
        stride: Int(stride), frames: Int(frames), time: time.pointee)
}

private func pipeWireNotify(_ user: UnsafeMutableRawPointer?) {
    guard let user else { return }
    Unmanaged<PipeWireDriver>.fromOpaque(user).takeUnretainedValue().notified()
}
