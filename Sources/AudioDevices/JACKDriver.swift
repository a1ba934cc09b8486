#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import CJACK
import Synchronization

/// The JACK backend: a JACK client with one port per channel, driven by JACK's process callback.
///
/// Devices are JACK clients: capture connects the client's output ports (`system:capture_1`, …) to ours, playback
/// ours to its input ports. With no device named, the physical ports are used. Two names are special: `self`
/// connects our outputs to our inputs (a loopback through the JACK graph: a round trip of one period), `none`
/// leaves the ports unconnected (for connecting them by hand). The rate and period are the server's: a request for
/// another rate is an error unless the request accepts other rates (the I/O unit then converts), the period is reported in the grant. A server that shuts down (or a buffer-size
/// change, which would need new buffers) is a fault reported off the real-time thread.
final class JACKDriver: AudioDriver, @unchecked Sendable {
    // Unchecked Sendable: `handler` set before jack_activate; `sampleTime` the process thread's; `closed` control's
    private(set) var grant: DeviceGrant
    private let client: OpaquePointer
    private let clientName: String
    private let inputPorts: [OpaquePointer]
    private let outputPorts: [OpaquePointer]
    private let inputPortBuffer: UnsafeMutableBufferPointer<OpaquePointer>
    private let outputPortBuffer: UnsafeMutableBufferPointer<OpaquePointer>
    private let inputFloat: PCMBuffer?
    private let outputFloat: PCMBuffer?
    private let request: DeviceRequest
    private let counters = DriverCounters()
    private var handler: DeviceCycleHandler?
    private let faultMessage = Atomic<Int>(0)  // 0 none, 1 server shut down, 2 buffer size changed
    private let active = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private var sampleTime: Int64 = 0
    private var closed = false
    /// The period and rate, for the process callback: `grant` is rewritten on the control side once the ports
    /// are connected, so the real-time thread never reads it.
    private let periodFrames: Int
    private let sampleRate: Double

    var xrunCount: Int { counters.xruns.load(ordering: .relaxed) }

    /// Opens a client on `server` (nil: `JACK_DEFAULT_SERVER` or the default) and registers its ports.
    init(request: DeviceRequest, server: String?, clientName: String = "liveaudio") throws(AudioError) {
        try request.validate()
        let client = try Self.open(name: clientName, server: server)
        let ports: (inputs: [OpaquePointer], outputs: [OpaquePointer])
        let rate = Double(jack_get_sample_rate(client))
        let period = Int(jack_get_buffer_size(client))
        do throws(AudioError) {
            guard rate == request.sampleRate || (request.acceptsOtherRates && SampleRateConverter.rateRange.contains(rate)) else {
                throw AudioError(
                    .unsupportedSampleRate,
                    "the JACK server runs at \(formatHz(rate)), not \(formatHz(request.sampleRate)); ask for "
                        + "\(Int(rate)) Hz or restart jackd with -r \(Int(request.sampleRate))")
            }
            ports = (
                try Self.register(client, "in", request.inputChannels, input: true),
                try Self.register(client, "out", request.outputChannels, input: false)
            )
        } catch {
            jack_client_close(client)
            throw error
        }
        self.client = client
        self.request = request
        self.clientName = String(cString: jack_get_client_name(client))
        inputPorts = ports.inputs
        outputPorts = ports.outputs
        periodFrames = period
        sampleRate = rate
        inputPortBuffer = .allocate(capacity: max(1, inputPorts.count))
        _ = inputPortBuffer.initialize(from: inputPorts)
        outputPortBuffer = .allocate(capacity: max(1, outputPorts.count))
        _ = outputPortBuffer.initialize(from: outputPorts)
        inputFloat = inputPorts.isEmpty ? nil : PCMBuffer(channelCount: inputPorts.count, capacity: period)
        outputFloat = outputPorts.isEmpty ? nil : PCMBuffer(channelCount: outputPorts.count, capacity: period)
        grant = DeviceGrant(
            backend: .jack, inputDevice: request.inputChannels > 0 ? (request.inputDevice ?? "system") : nil,
            outputDevice: request.outputChannels > 0 ? (request.outputDevice ?? "system") : nil,
            inputChannels: request.inputChannels, outputChannels: request.outputChannels, sampleRate: rate,
            periodFrames: period, periodCount: 1, deviceSampleType: .float32, inputLatencyFrames: 0,
            outputLatencyFrames: 0)
    }

    private static func register(_ client: OpaquePointer, _ prefix: String, _ count: Int, input: Bool) throws(AudioError)
        -> [OpaquePointer]
    {
        var ports: [OpaquePointer] = []
        let flags = UInt(input ? JackPortIsInput.rawValue : JackPortIsOutput.rawValue)
        var n = 1
        while n <= count {
            guard let port = jack_port_register(client, "\(prefix)_\(n)", JACK_DEFAULT_AUDIO_TYPE, flags, 0) else {
                throw AudioError(.deviceUnavailable, "JACK refused to register port \(prefix)_\(n)")
            }
            ports.append(port)
            n += 1
        }
        return ports
    }

    deinit {
        stop()
        inputPortBuffer.deallocate()
        outputPortBuffer.deallocate()
    }

    private static func open(name: String, server: String?) throws(AudioError) -> OpaquePointer {
        silenceLibrary()
        var status = jack_status_t(0)
        let options = Int32(JackNoStartServer.rawValue)
        let client = server.map { s in la_jack_client_open(name, options, &status, s) }
            ?? la_jack_client_open(name, options, &status, nil)
        guard let client else {
            let which = server ?? (getenv("JACK_DEFAULT_SERVER").map { String(cString: $0) } ?? "default")
            throw AudioError(
                .deviceUnavailable,
                "cannot reach the JACK server '\(which)' (status 0x\(String(status.rawValue, radix: 16))); "
                    + "is jackd running? (e.g. jackd -d dummy -r 48000 -p 256)")
        }
        return client
    }

    private static let silenced = Atomic<Bool>(false)
    static func silenceLibrary() {
        if !silenced.exchange(true, ordering: .acquiringAndReleasing) { la_jack_silence_messages() }
    }

    // MARK: Start and stop

    func start(handler: DeviceCycleHandler, onFault: @escaping @Sendable (AudioError) -> Void) throws(AudioError) -> [String] {
        precondition(self.handler == nil, "a JACK driver starts once")
        self.handler = handler
        // JACK's notices come on threads of its own, where nothing may be done but note them: the I/O unit's
        // supervisor looks for them (``fault``), so `onFault` is not called.
        _ = onFault
        let context = Unmanaged.passUnretained(self).toOpaque()
        jack_set_process_callback(client, jackProcess, context)
        jack_set_xrun_callback(client, jackXrun, context)
        jack_set_buffer_size_callback(client, jackBufferSize, context)
        jack_on_info_shutdown(client, jackShutdown, context)
        guard jack_activate(client) == 0 else {
            throw AudioError(.deviceUnavailable, "JACK refused to activate client '\(clientName)'")
        }
        active.store(true, ordering: .releasing)
        try connectPorts()
        refreshLatency()
        return []
    }

    func stop() {
        guard !closed else { return }
        closed = true
        stopping.store(true, ordering: .releasing)
        if active.exchange(false, ordering: .acquiringAndReleasing), faultMessage.load(ordering: .acquiring) != 1 {
            jack_deactivate(client)
        }
        jack_client_close(client)
    }

    /// Whether the client the playback is to be connected to has input ports now (`self` and `none`: always).
    var playbackReachable: Bool {
        let device = request.outputDevice ?? "system"
        if outputPorts.isEmpty || device == "self" || device == "none" { return true }
        return (try? ports(of: device, output: false, forInput: false)) != nil
    }

    /// True while one of the output ports is connected somewhere (the route: a port of the system, another client's,
    /// or our own input's). Without output ports, or once the server has gone (its fault says so), true: nothing
    /// is asked of a server that is not there.
    var outputRouted: Bool {
        if outputPorts.isEmpty || closed || !active.load(ordering: .acquiring) { return true }
        if faultMessage.load(ordering: .acquiring) != 0 { return true }
        return outputPorts.contains { jack_port_connected($0) > 0 }
    }

    /// A shutdown or buffer-size notice JACK gave (on a thread of its own, where nothing may be done but note it):
    /// the I/O unit's supervisor looks for it every 100 ms and handles it as a fault.
    var fault: AudioError? {
        switch faultMessage.load(ordering: .acquiring) {
        case 1: AudioError(.deviceUnavailable, "the JACK server shut down (or dropped this client)")
        case 2: AudioError(.deviceUnavailable, "the JACK server changed its buffer size; reopening")
        default: nil
        }
    }

    private func connectPorts() throws(AudioError) {
        let mine = { (port: OpaquePointer) in String(cString: jack_port_name(port)) }
        if !inputPorts.isEmpty {
            let device = request.inputDevice ?? "system"
            let sources: [String]
            switch device {
            case "none": sources = []
            case "self": sources = outputPorts.map(mine)
            default: sources = try ports(of: device, output: true, forInput: true)
            }
            for (i, port) in inputPorts.enumerated() where !sources.isEmpty {
                try connect(sources[min(i, sources.count - 1)], mine(port))
            }
        }
        if !outputPorts.isEmpty {
            let device = request.outputDevice ?? "system"
            if device != "none" && device != "self" {
                let sinks = try ports(of: device, output: false, forInput: false)
                for (i, port) in outputPorts.enumerated() where i < sinks.count {
                    try connect(mine(port), sinks[i])
                }
            }
        }
    }

    private func connect(_ source: String, _ destination: String) throws(AudioError) {
        let r = jack_connect(client, source, destination)
        guard r == 0 || r == EEXIST else {
            throw AudioError(.deviceUnavailable, "JACK could not connect \(source) → \(destination) (error \(r))")
        }
    }

    /// The audio ports of client `device` (`system`: the physical ports) in the given direction, sorted by name.
    private func ports(of device: String, output: Bool, forInput: Bool) throws(AudioError) -> [String] {
        let flags = UInt(output ? JackPortIsOutput.rawValue : JackPortIsInput.rawValue)
        let names = Self.portNames(client, pattern: nil, flags: flags).filter { $0.hasPrefix(device + ":") }
        guard !names.isEmpty else {
            let devices = Self.devices(client, excluding: clientName)
            throw AudioDevices.unknownDevice(
                device, backend: .jack, devices: devices,
                detail: "it has no audio \(output ? "output" : "input") ports to \(forInput ? "capture from" : "play to")")
        }
        return names.sorted { $0.compare(numerically: $1) }
    }

    /// Reads the latency JACK reports for our ports once they are connected.
    private func refreshLatency() {
        jack_recompute_total_latencies(client)
        var inputLatency = 0
        var outputLatency = 0
        if let port = inputPorts.first {
            var range = jack_latency_range_t()
            jack_port_get_latency_range(port, JackCaptureLatency, &range)
            inputLatency = Int(range.max)
        }
        if let port = outputPorts.first {
            var range = jack_latency_range_t()
            jack_port_get_latency_range(port, JackPlaybackLatency, &range)
            outputLatency = Int(range.max)
        }
        grant = DeviceGrant(
            backend: .jack, inputDevice: grant.inputDevice, outputDevice: grant.outputDevice,
            inputChannels: grant.inputChannels, outputChannels: grant.outputChannels, sampleRate: grant.sampleRate,
            periodFrames: grant.periodFrames, periodCount: grant.periodCount, deviceSampleType: .float32,
            inputLatencyFrames: inputLatency, outputLatencyFrames: outputLatency)
    }

    // MARK: Callbacks

    /// JACK's real-time thread: copies the input ports in, runs the handler, copies the output ports out.
    fileprivate func process(_ frames: Int) {
        guard let handler, frames <= periodFrames else {
            for i in 0..<outputPortBuffer.count where i < outputPorts.count {
                if let out = jack_port_get_buffer(outputPortBuffer[i], jack_nframes_t(frames)) {
                    memset(out, 0, frames * 4)
                }
            }
            return
        }
        var input: BufferView?
        if let inputFloat {
            let view = inputFloat.view(frames: frames)
            for c in 0..<view.channelCount {
                if let source = jack_port_get_buffer(inputPortBuffer[c], jack_nframes_t(frames)) {
                    view[c].baseAddress!.update(from: source.assumingMemoryBound(to: Float.self), count: frames)
                }
            }
            input = view
        }
        let output = outputFloat?.view(frames: frames)
        output?.clear()
        var currentFrames: jack_nframes_t = 0
        var currentMicroseconds: jack_time_t = 0
        var nextMicroseconds: jack_time_t = 0
        var periodMicroseconds: Float = 0
        let host: UInt64
        if jack_get_cycle_times(client, &currentFrames, &currentMicroseconds, &nextMicroseconds, &periodMicroseconds) == 0 {
            // JACK's times are on JACK's clock (jack_get_time), which is not CLOCK_MONOTONIC everywhere: jackd2 on
            // Linux reads CLOCK_MONOTONIC_RAW, which NTP never slews, so the two part by NTP's frequency correction
            // times the uptime (247 ms on the soak's machine: a stream's latency read 312 ms for 65). The cycle's start is
            // moved onto CLOCK_MONOTONIC by the clocks' difference now (two vDSO reads, no system call).
            let jackNow = Int64(jack_get_time()) * 1000
            let offset = Int64(bitPattern: monotonicNanoseconds()) - jackNow
            host = UInt64(max(0, Int64(currentMicroseconds) * 1000 + offset))
        } else {
            host = monotonicNanoseconds()
        }
        let periodNanoseconds = UInt64(Double(frames) * 1e9 / sampleRate)
        handler.deviceCycle(
            input: input, output: output,
            time: DeviceCycleTime(
                sampleTime: sampleTime, inputHostTime: host > periodNanoseconds ? host - periodNanoseconds : 0,
                outputHostTime: host + periodNanoseconds))
        sampleTime += Int64(frames)
        counters.cycles.add(1, ordering: .relaxed)
        if let output {
            for c in 0..<output.channelCount {
                if let destination = jack_port_get_buffer(outputPortBuffer[c], jack_nframes_t(frames)) {
                    destination.assumingMemoryBound(to: Float.self).update(from: output[c].baseAddress!, count: frames)
                }
            }
        }
    }

    fileprivate func noteXrun() { counters.xruns.add(1, ordering: .relaxed) }

    fileprivate func noteFault(_ kind: Int) {
        _ = faultMessage.compareExchange(expected: 0, desired: kind, ordering: .acquiringAndReleasing)
    }

    fileprivate func noteBufferSize(_ frames: Int) {
        if active.load(ordering: .acquiring), frames != periodFrames { noteFault(2) }
    }

    // MARK: Listing

    /// The clients with audio ports on `server`, each with the directions it offers us.
    static func listDevices(server: String?) throws(AudioError) -> [AudioDeviceInfo] {
        let client = try open(name: "liveaudio-list", server: server)
        defer { jack_client_close(client) }
        let me = String(cString: jack_get_client_name(client))
        return devices(client, excluding: me)
    }

    fileprivate static func devices(_ client: OpaquePointer, excluding me: String) -> [AudioDeviceInfo] {
        let outputs = portNames(client, pattern: nil, flags: UInt(JackPortIsOutput.rawValue))
        let inputs = portNames(client, pattern: nil, flags: UInt(JackPortIsInput.rawValue))
        let physical = Set(
            portNames(client, pattern: nil, flags: UInt(JackPortIsPhysical.rawValue)).map { $0.jackClientName })
        var order: [String] = []
        var directions: [String: DeviceDirections] = [:]
        var counts: [String: (Int, Int)] = [:]
        for (names, direction) in [(outputs, DeviceDirections.input), (inputs, DeviceDirections.output)] {
            for name in names {
                let owner = name.jackClientName
                guard owner != me else { continue }
                if directions[owner] == nil { order.append(owner) }
                directions[owner, default: []].insert(direction)
                var c = counts[owner, default: (0, 0)]
                if direction == .input { c.0 += 1 } else { c.1 += 1 }
                counts[owner] = c
            }
        }
        return order.map { owner in
            let c = counts[owner]!
            return AudioDeviceInfo(
                backend: .jack, name: owner,
                description: "JACK client: \(c.0) capture port(s), \(c.1) playback port(s)"
                    + (physical.contains(owner) ? ", physical" : ""),
                directions: directions[owner]!, isDefault: physical.contains(owner))
        }
    }

    fileprivate static func portNames(_ client: OpaquePointer, pattern: String?, flags: UInt) -> [String] {
        guard let list = jack_get_ports(client, pattern, JACK_DEFAULT_AUDIO_TYPE, flags) else { return [] }
        defer { jack_free(list) }
        var names: [String] = []
        var i = 0
        while let name = list[i] {
            names.append(String(cString: name))
            i += 1
        }
        return names
    }
}

extension String {
    /// The client part of a JACK port name (`system` of `system:capture_1`).
    var jackClientName: String { String(split(separator: ":", maxSplits: 1).first ?? Substring(self)) }

    /// Orders `capture_2` before `capture_10`.
    func compare(numerically other: String) -> Bool {
        func key(_ s: String) -> (String, Int) {
            let digits = s.reversed().prefix { $0.isNumber }
            return (String(s.dropLast(digits.count)), Int(String(digits.reversed())) ?? 0)
        }
        let a = key(self)
        let b = key(other)
        return a.0 != b.0 ? a.0 < b.0 : a.1 < b.1
    }
}

// JACK's C callbacks: global functions (never closures formed in main-actor code), the driver passed unretained.
private func jackProcess(_ frames: jack_nframes_t, _ context: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<JACKDriver>.fromOpaque(context!).takeUnretainedValue().process(Int(frames))
    return 0
}

private func jackXrun(_ context: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<JACKDriver>.fromOpaque(context!).takeUnretainedValue().noteXrun()
    return 0
}

private func jackBufferSize(_ frames: jack_nframes_t, _ context: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<JACKDriver>.fromOpaque(context!).takeUnretainedValue().noteBufferSize(Int(frames))
    return 0
}

private func jackShutdown(_ code: jack_status_t, _ reason: UnsafePointer<CChar>?, _ context: UnsafeMutableRawPointer?) {
    Unmanaged<JACKDriver>.fromOpaque(context!).takeUnretainedValue().noteFault(1)
}
