import AudioCore
import AudioDevices
import Foundation

/// A PipeWire server of the test's own: `pipewire` and WirePlumber (under `dbus-run-session`: the session manager
/// needs a D-Bus session bus) in a private runtime folder, with null sinks and virtual sources made by
/// `pw-cli create-node adapter '{ factory.name=support.null-audio-sink … }'`. Reached by processes given
/// ``environment`` (and in-process by ``remote``, an absolute socket path). Every process is stopped by its PID,
/// WirePlumber first (its `dbus-run-session` then ends the bus). A missing `pipewire` is an error, not a skip: `make
/// test` installs it.
public final class PipeWireServer: @unchecked Sendable {
    public let root: String
    private var pipewire: ChildProcess?
    private var session: ChildProcess?

    /// The variables a client needs to reach this server (and no other).
    public var environment: [String: String] {
        [
            "XDG_RUNTIME_DIR": root + "/run", "PIPEWIRE_RUNTIME_DIR": root + "/run", "PIPEWIRE_REMOTE": remote,
            "HOME": root + "/home", "XDG_STATE_HOME": root + "/state", "XDG_CONFIG_HOME": root + "/config",
        ]
    }

    /// The server's socket, as an absolute path.
    public var remote: String { root + "/run/pipewire-0" }

    /// Starts the server and WirePlumber, makes `sinks` (Audio/Sink) and `sources` (Audio/Source/Virtual, fed by their
    /// input ports) — each a null-audio-sink node, stereo — and waits until WirePlumber has made the first of each the
    /// default. `properties`: more node properties by node name (`device.form-factor=headphone`).
    public init(sinks: [String], sources: [String] = [], properties: [String: String] = [:]) throws {
        root = NSTemporaryDirectory() + "liveaudio-pipewire-" + UUID().uuidString.prefix(8)
        for d in ["run", "home", "state", "config"] {
            try FileManager.default.createDirectory(atPath: root + "/" + d, withIntermediateDirectories: true)
        }
        chmod(root + "/run", 0o700)
        do {
            try start()
            // Low quanta allowed (a machine taken for a VM gets a minimum of 1024 otherwise).
            try pwMetadata(["-n", "settings", "0", "clock.min-quantum", "16"])
            for sink in sinks { try createNode(sink, mediaClass: "Audio/Sink", properties: properties[sink]) }
            for source in sources { try createNode(source, mediaClass: "Audio/Source/Virtual", properties: properties[source]) }
            try waitUntil("WirePlumber to choose the default devices", seconds: 30, interval: 20_000) {
                let defaults = self.defaults()
                return (sinks.isEmpty || defaults.sink != nil) && (sources.isEmpty || defaults.source != nil)
            }
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    private func start() throws {
        pipewire = try ChildProcess("pipewire", [], environment: environment, log: root + "/pipewire.log")
        let deadline = Date().addingTimeInterval(30)
        while try runProcess("pw-cli", ["info", "0"], environment: environment).status != 0 {
            guard pipewire?.isRunning == true else {
                throw SoundServerError("pipewire exited at start: \(log("pipewire.log"))")
            }
            guard Date() < deadline else { throw SoundServerError("pipewire did not answer within 30 s: \(log("pipewire.log"))") }
            usleep(20_000)
        }
        session = try ChildProcess(
            "dbus-run-session", ["--", "wireplumber"], environment: environment, log: root + "/wireplumber.log")
        // WirePlumber is up once it has made the "default" metadata.
        try waitUntil("WirePlumber to start", seconds: 30, interval: 20_000) {
            (try? runProcess("pw-cli", ["ls", "Metadata"], environment: environment))?.stdout.contains("\"default\"") == true
        }
    }

    private func log(_ name: String) -> String {
        (try? String(contentsOfFile: root + "/" + name, encoding: .utf8)) ?? ""
    }

    /// Makes a stereo null-audio-sink node that stays while the server runs.
    public func createNode(_ name: String, mediaClass: String, properties: String? = nil) throws {
        let spec = "{ factory.name=support.null-audio-sink node.name=\(name) media.class=\(mediaClass) "
            + "object.linger=1 audio.position=[FL FR] \(properties ?? "") }"
        let r = try runProcess("pw-cli", ["create-node", "adapter", spec], environment: environment)
        guard r.status == 0, !r.stdout.contains("Error") else {
            throw SoundServerError("pw-cli create-node \(name) failed: \(r.stdout) \(r.stderr)")
        }
        try waitUntil("node \(name) to appear", seconds: 10, interval: 20_000) { self.nodeID(name) != nil }
    }

    /// `pw-dump`: every object of the graph, as JSON objects.
    public func dump() -> [[String: Any]] {
        guard let r = try? runProcess("pw-dump", ["-N"], environment: environment), r.status == 0,
            let json = try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]]
        else { return [] }
        return json
    }

    /// The nodes of the graph: id and properties.
    public func nodes() -> [(id: Int, props: [String: Any])] {
        dump().compactMap { object in
            guard object["type"] as? String == "PipeWire:Interface:Node", let id = object["id"] as? Int,
                let info = object["info"] as? [String: Any], let props = info["props"] as? [String: Any]
            else { return nil }
            return (id, props)
        }
    }

    /// The id of the node named `name`.
    public func nodeID(_ name: String) -> Int? {
        nodes().first { $0.props["node.name"] as? String == name }?.id
    }

    /// The default sink and source, from the "default" metadata.
    public func defaults() -> (sink: String?, source: String?) {
        guard let r = try? runProcess("pw-metadata", ["-n", "default", "0"], environment: environment) else { return (nil, nil) }
        func value(_ key: String) -> String? {
            for line in r.stdout.split(separator: "\n") where line.contains("key:'\(key)'") {
                guard let start = line.range(of: "{\"name\":\""), let end = line[start.upperBound...].firstIndex(of: "\"") else { continue }
                return String(line[start.upperBound..<end])
            }
            return nil
        }
        return (value("default.audio.sink"), value("default.audio.source"))
    }

    /// Links `from`'s monitor ports (a sink's) into `to`'s input ports (a virtual source's), FL to FL and FR to FR: the
    /// loop a latency measurement plays through.
    public func linkMonitor(of from: String, into to: String) throws {
        for channel in ["FL", "FR"] {
            let r = try runProcess("pw-link", ["\(from):monitor_\(channel)", "\(to):input_\(channel)"], environment: environment)
            guard r.status == 0 else { throw SoundServerError("pw-link \(from) → \(to) failed: \(r.stderr)") }
        }
    }

    /// The graph's quantum, forced (`clock.force-quantum`; 0 lets the nodes decide again).
    public func forceQuantum(_ frames: Int) throws {
        try pwMetadata(["-n", "settings", "0", "clock.force-quantum", "\(frames)"])
    }

    private func pwMetadata(_ arguments: [String]) throws {
        let r = try runProcess("pw-metadata", arguments, environment: environment)
        guard r.status == 0 else { throw SoundServerError("pw-metadata \(arguments) failed: \(r.stderr)") }
    }

    /// `wpctl set-default` on the node named `name`.
    public func setDefault(_ name: String) throws {
        guard let id = nodeID(name) else { throw SoundServerError("no node \(name) to make the default") }
        let r = try runProcess("wpctl", ["set-default", "\(id)"], environment: environment)
        guard r.status == 0 else { throw SoundServerError("wpctl set-default \(name) failed: \(r.stdout) \(r.stderr)") }
    }

    /// `pw-cli destroy` on the node named `name`.
    public func destroy(_ name: String) throws {
        guard let id = nodeID(name) else { throw SoundServerError("no node \(name) to destroy") }
        let r = try runProcess("pw-cli", ["destroy", "\(id)"], environment: environment)
        guard r.status == 0 else { throw SoundServerError("pw-cli destroy \(name) failed: \(r.stdout) \(r.stderr)") }
    }

    /// `pw-cli send-command ID COMMAND {}` (Pause, Suspend, Start) to the node named `name`.
    public func send(_ command: String, to name: String) throws {
        guard let id = nodeID(name) else { throw SoundServerError("no node \(name) to send \(command) to") }
        let r = try runProcess("pw-cli", ["send-command", "\(id)", command, "{}"], environment: environment)
        guard r.status == 0, !r.stdout.contains("Error") else {
            throw SoundServerError("pw-cli send-command \(name) \(command) failed: \(r.stdout) \(r.stderr)")
        }
    }

    /// Stops WirePlumber (by its PID: the child of `dbus-run-session`, which then ends the bus) and the server, and
    /// removes the folder.
    public func stop() {
        if let session {
            for child in Self.children(of: session.pid) where Self.command(of: child) == "wireplumber" {
                Foundation.kill(child, SIGTERM)
            }
            session.stop()
        }
        session = nil
        pipewire?.stop()
        pipewire = nil
        try? FileManager.default.removeItem(atPath: root)
    }

    private static func children(of pid: pid_t) -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.flatMap { task in
            ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8)) ?? "")
                .split(separator: " ").compactMap { pid_t($0) }
        }
    }

    private static func command(of pid: pid_t) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension PipeWireServer {
    /// A started server, created off the cooperative pool.
    public static func started(sinks: [String], sources: [String] = [], properties: [String: String] = [:]) async throws
        -> PipeWireServer
    {
        try await offPool { try PipeWireServer(sinks: sinks, sources: sources, properties: properties) }
    }

    /// Interrupts node `name` from outside: `Pause` (`pw-cli send-command`), then, once `log` has an interruption
    /// begun, `seconds` held, then `Start`; returns `settle` seconds after `log` has its end. Blocks: call off the
    /// cooperative pool.
    public func interrupt(_ name: String, for seconds: Double, log: EventLog, settle: Double) throws {
        try send("Pause", to: name)
        try waitUntil("the interruption", seconds: 5) { log.contains { if case .interruptionBegan = $0 { true } else { false } } }
        usleep(UInt32(seconds * 1e6))
        try send("Start", to: name)
        try waitUntil("the interruption's end", seconds: 5) { log.contains { if case .interruptionEnded = $0 { true } else { false } } }
        usleep(UInt32(settle * 1e6))
    }
}

/// Events as they arrive, each with when it arrived.
public final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [(DeviceEvent, UInt64)] = []

    public init() {}

    public func add(_ event: DeviceEvent) { lock.withLock { events.append((event, monotonicNanoseconds())) } }
    public var all: [DeviceEvent] { lock.withLock { events.map(\.0) } }
    public func contains(_ match: (DeviceEvent) -> Bool) -> Bool { lock.withLock { events.contains { match($0.0) } } }
    public func first(_ match: (DeviceEvent) -> Bool) -> DeviceEvent? { lock.withLock { events.first { match($0.0) }?.0 } }
    public func firstTime(_ match: (DeviceEvent) -> Bool) -> UInt64? { lock.withLock { events.first { match($0.0) }?.1 } }
}
