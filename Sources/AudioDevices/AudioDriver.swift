import AudioCore
import Synchronization

/// When a device cycle happens: the sample time of its first frame (frames since the stream started, on the
/// device clock; capture and playback share it) and two host times (CLOCK_MONOTONIC ns): when the first captured
/// frame reached the device, and when the first output frame will leave it. A host time the backend cannot tell
/// is the cycle's start.
struct DeviceCycleTime: Hashable, Sendable {
    /// The sample time of the cycle's first frame: frames since the driver's stream started, on the device clock.
    var sampleTime: Int64
    /// CLOCK_MONOTONIC nanoseconds when the cycle's first captured frame reached the device.
    var inputHostTime: UInt64
    /// CLOCK_MONOTONIC nanoseconds when the cycle's first output frame will leave the device.
    var outputHostTime: UInt64

    /// A cycle's time from its three parts.
    /// - Parameters:
    ///   - sampleTime: the sample time of the cycle's first frame, in frames.
    ///   - inputHostTime: CLOCK_MONOTONIC nanoseconds when the first captured frame reached the device.
    ///   - outputHostTime: CLOCK_MONOTONIC nanoseconds when the first output frame will leave the device.
    init(sampleTime: Int64, inputHostTime: UInt64, outputHostTime: UInt64) {
        self.sampleTime = sampleTime
        self.inputHostTime = inputHostTime
        self.outputHostTime = outputHostTime
    }
}

/// What a driver calls on its real-time thread once per cycle: `input` holds the captured frames (Float32
/// non-interleaved, the granted capture channels), `output` is to be filled (the granted playback channels).
/// Either is nil when that direction is off. Must not allocate, lock, log or do I/O.
protocol DeviceCycleHandler: AnyObject, Sendable {
    func deviceCycle(input: BufferView?, output: BufferView?, time: DeviceCycleTime)
    /// Called before each cycle by a driver that is not bound to a clock (a virtual device run as fast as
    /// possible), which may wait here until the next `frames` frames can be rendered whole. Never called by a
    /// real-time driver.
    func prepareCycle(frames: Int)
}

extension DeviceCycleHandler {
    func prepareCycle(frames: Int) {}
}

/// A device opened by one backend: opening negotiates (the init), ``start(handler:onFault:)`` begins cycles on
/// the backend's real-time thread, ``stop()`` ends them. A driver runs once; reconnecting opens a new one.
protocol AudioDriver: AnyObject, Sendable {
    var grant: DeviceGrant { get }
    /// Under- and overruns detected and recovered since start. Any thread.
    var xrunCount: Int { get }
    /// Starts cycles. `onFault` is called at most once, never on the real-time thread and never after ``stop()``
    /// returns, when the device fails for good (server gone, device unplugged, stalled). Returns warnings for the
    /// user (e.g. no real-time priority).
    func start(handler: DeviceCycleHandler, onFault: @escaping @Sendable (AudioError) -> Void) throws(AudioError) -> [String]
    /// Stops cycles and releases the device; returns when no cycle runs any more. Idempotent.
    func stop()
    /// True once a file-backed input has been read to its end (virtual devices). Any thread.
    var inputHasEnded: Bool { get }
    /// True while the playback reaches somewhere: for JACK, while an output port is connected. Control thread, while
    /// the driver runs.
    var outputRouted: Bool { get }
    /// Whether the playback device the request names is there to play to, as far as opening the driver does not
    /// already say (for JACK, whose clients open whatever ports exist: whether the named client has input ports).
    /// Control thread, before start.
    var playbackReachable: Bool { get }
    /// A failure the driver noticed where it could not report it (a JACK notification thread, which may do nothing
    /// but note it): the I/O unit's supervisor looks every 100 ms and handles it as a fault. Any thread.
    var fault: AudioError? { get }
    /// Why the playback reaches nowhere, when ``outputRouted`` is false (the route-lost event's words).
    var routeLossReason: String { get }
    /// Whether the playback's device is worn on the head (headphones, a headset), as far as the sound server says:
    /// nil when it does not (ALSA, JACK; a PipeWire node with no form factor). Control thread, while the driver runs.
    var outputIsHeadphones: Bool? { get }
    /// What the driver noticed since the last call that is neither a fault nor the route lost or back (PipeWire: a
    /// default changed, a stream moved, an interruption). Control thread, polled by the supervisor.
    func takeEvents() -> [DeviceEvent]
    /// Gives the driver a way to wake the supervisor when it has something new (``takeEvents()``, ``fault``, the
    /// route): called by the driver on a thread of its own, never the real-time one. After start.
    func setWake(_ wake: @escaping @Sendable () -> Void)
}

extension AudioDriver {
    var inputHasEnded: Bool { false }
    var outputRouted: Bool { true }
    var playbackReachable: Bool { true }
    var fault: AudioError? { nil }
    var routeLossReason: String { "no output port is connected" }
    var outputIsHeadphones: Bool? { nil }
    func takeEvents() -> [DeviceEvent] { [] }
    func setWake(_ wake: @escaping @Sendable () -> Void) {}
}

/// Counters a driver's real-time thread updates and the control side reads.
final class DriverCounters: Sendable {
    let xruns = Atomic<Int>(0)
    let cycles = Atomic<Int>(0)
}

/// The devices of a backend, and opening one.
public enum AudioDevices {
    /// The devices `backend` offers now. For JACK, `jackServer` names the server (nil: the default one); for
    /// PipeWire, `pipeWireRemote` its socket (a name in the runtime directory or an absolute path; nil:
    /// `$PIPEWIRE_REMOTE` or `pipewire-0`).
    /// - Throws: ``/AudioCore/AudioError`` `.deviceUnavailable` when the backend cannot be reached (no JACK server
    ///   running, no PipeWire server answering, or PipeWire's library not installed).
    public static func list(_ backend: DeviceBackend, jackServer: String? = nil, pipeWireRemote: String? = nil) throws(AudioError)
        -> [AudioDeviceInfo]
    {
        switch backend {
        case .alsa: return ALSADriver.listDevices()
        case .jack: return try JACKDriver.listDevices(server: jackServer)
        case .pipewire: return try PipeWireDriver.listDevices(remote: pipeWireRemote)
        case .virtual:
            return [
                AudioDeviceInfo(
                    backend: .virtual, name: "FILE.wav",
                    description: "a WAV file: read as the microphone, written as the speaker",
                    directions: .duplex, isDefault: false)
            ]
        }
    }

    /// Whether a PipeWire server answers (libpipewire-0.3 loads and a client connects within a second): the
    /// command-line tool's default backend is PipeWire then, ALSA otherwise.
    /// - Parameter remote: the server's socket (nil: `$PIPEWIRE_REMOTE` or `pipewire-0`).
    public static func pipeWireAnswers(remote: String? = nil) -> Bool { PipeWireDriver.serverAnswers(remote: remote) }

    /// The error for a device name a backend does not know: it lists the devices there are.
    static func unknownDevice(_ name: String, backend: DeviceBackend, devices: [AudioDeviceInfo], detail: String) -> AudioError {
        let names = devices.map { "\($0.name) (\($0.directions))" }
        return AudioError(
            .unknownDevice,
            "no \(backend) device '\(name)' (\(detail)); the devices there are: "
                + (names.isEmpty ? "none" : names.joined(separator: ", ")))
    }
}
