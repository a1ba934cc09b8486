import AudioCore
import Synchronization

/// The sound systems LiveAudio talks to.
public enum DeviceBackend: String, Sendable, CaseIterable, CustomStringConvertible {
    /// ALSA through libasound: PCM names such as `default`, `pulse`, `hw:0,0`, `plughw:1` (this reaches
    /// PulseAudio, PipeWire and hardware).
    case alsa
    /// A JACK server through libjack: devices are JACK clients (`system`), connected port by port.
    case jack
    /// A PipeWire server through libpipewire-0.3 (loaded when first needed): devices are its sinks and sources, by
    /// node name; our capture and playback are streams of the application's name, which follow the default device
    /// unless one is named, and whose route changes and interruptions are reported as events.
    case pipewire
    /// WAV files: one as the microphone, one as the speaker; paced in real time or as fast as possible.
    case virtual

    public var description: String { rawValue }

    /// The backend a tool uses when none is named: PipeWire where a PipeWire server answers (its library loads and a
    /// client connects within a second), ALSA otherwise.
    public static var standard: DeviceBackend { AudioDevices.pipeWireAnswers() ? .pipewire : .alsa }
}

/// Which way audio flows through a device.
public struct DeviceDirections: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Capture (the I/O unit's bus 1).
    public static let input = DeviceDirections(rawValue: 1)
    /// Playback (the I/O unit's bus 0).
    public static let output = DeviceDirections(rawValue: 2)
    /// Capture and playback both.
    public static let duplex: DeviceDirections = [.input, .output]

    public var description: String {
        switch self {
        case .duplex: "input+output"
        case .input: "input"
        case .output: "output"
        default: "none"
        }
    }
}

/// A device a backend offers.
public struct AudioDeviceInfo: Hashable, Sendable {
    /// The backend that offers it.
    public let backend: DeviceBackend
    /// The name to open it by (`--device`).
    public let name: String
    /// A readable description, when the backend has one.
    public let description: String
    /// Whether it captures, plays, or both.
    public let directions: DeviceDirections
    /// True for the device opened when none is named, in the directions it supports.
    public let isDefault: Bool

    /// A device entry from its parts.
    /// - Parameters:
    ///   - backend: the backend that offers it.
    ///   - name: the name to open it by.
    ///   - description: a readable description (empty when the backend has none).
    ///   - directions: whether it captures, plays, or both.
    ///   - isDefault: whether it is the device opened when none is named.
    public init(backend: DeviceBackend, name: String, description: String, directions: DeviceDirections, isDefault: Bool) {
        self.backend = backend
        self.name = name
        self.description = description
        self.directions = directions
        self.isDefault = isDefault
    }
}

/// Whether a device's capture and playback run on one clock or on two (``DeviceRequest/clocks``).
public enum DeviceClocks: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Decided from the devices. ALSA: two clocks when capture and playback are on two different sound cards (a
    /// USB microphone and a headset); one when they share a card, or when either is a sound server's PCM
    /// (`default`, `pulse`, `pipewire`), whose clocks ALSA cannot see — say ``two`` for a server that drives two
    /// cards without bridging them. JACK: always one (the server's). Virtual: two when the input runs at another
    /// clock ratio (``VirtualDeviceOptions/inputClockRatio``), even if ``one`` is asked.
    case automatic = "auto"
    /// One clock: each cycle captures and plays one period (the lowest latency).
    case one
    /// Two clocks: playback paces the cycles, capture is read as it arrives, and the I/O unit resamples it to
    /// follow the drift (adds the bridge's latency, about two periods and at least 1024 frames). Ignored by JACK.
    case two

    public var description: String { rawValue }

    /// The decision for two ALSA PCMs, from the sound cards they are on (-1: not on a card, e.g. a server's PCM).
    public func independent(inputCard: Int, outputCard: Int) -> Bool {
        switch self {
        case .one: false
        case .two: true
        case .automatic: inputCard >= 0 && outputCard >= 0 && inputCard != outputCard
        }
    }
}

/// What a caller asks of a device when opening it. Every field is a wish; ``DeviceGrant`` says what was granted.
public struct DeviceRequest: Hashable, Sendable {
    /// The capture device (nil: the backend's default). Ignored when ``inputChannels`` is 0.
    public var inputDevice: String?
    /// The playback device (nil: the backend's default). Ignored when ``outputChannels`` is 0.
    public var outputDevice: String?
    /// Capture channels; 0 disables capture (bus 1).
    public var inputChannels: Int
    /// Playback channels; 0 disables playback (bus 0).
    public var outputChannels: Int
    /// The sample rate. A backend that runs at a fixed rate (JACK), or a device that cannot run at it (ALSA
    /// `hw:`), refuses it with a clear error — unless ``acceptsOtherRates``.
    public var sampleRate: Double
    /// When the device cannot run at ``sampleRate``, open it at the rate it offers (JACK: the server's; ALSA: the
    /// nearest) and say so in the grant, for a caller that converts (the ``IOUnit`` does). Off by default.
    public var acceptsOtherRates = false
    /// Frames per period: the block the real-time thread handles each cycle.
    public var periodFrames: Int
    /// Periods in the device buffer (ALSA), at least 2.
    public var periodCount: Int
    /// Whether capture and playback run on one clock or two (default: decided from the devices).
    public var clocks: DeviceClocks = .automatic

    /// A request for the backend's default playback device in stereo at 48 kHz, 1024 frames × 3 periods, with
    /// capture off, unless told otherwise. ``acceptsOtherRates`` starts off and ``clocks`` automatic; set them after.
    /// Nothing is checked here: ``validate()`` does that.
    /// - Parameters:
    ///   - inputDevice: the capture device (nil: the backend's default).
    ///   - outputDevice: the playback device (nil: the backend's default).
    ///   - inputChannels: capture channels; 0 (the default) disables capture.
    ///   - outputChannels: playback channels (default 2); 0 disables playback.
    ///   - sampleRate: the sample rate in Hz (default 48 kHz).
    ///   - periodFrames: frames per period (default 1024), 16…16384 (``maximumPeriodFrames``).
    ///   - periodCount: periods in the device buffer (default 3), 2…32.
    public init(
        inputDevice: String? = nil, outputDevice: String? = nil, inputChannels: Int = 0, outputChannels: Int = 2,
        sampleRate: Double = 48_000, periodFrames: Int = 1024, periodCount: Int = 3
    ) {
        self.inputDevice = inputDevice
        self.outputDevice = outputDevice
        self.inputChannels = inputChannels
        self.outputChannels = outputChannels
        self.sampleRate = sampleRate
        self.periodFrames = periodFrames
        self.periodCount = periodCount
    }

    /// The most frames per period a request may ask for.
    public static let maximumPeriodFrames = 16_384

    /// Checks the request's own consistency (before any device is asked).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` or `.unsupportedSampleRate` naming the bad field.
    public func validate() throws(AudioError) {
        guard inputChannels > 0 || outputChannels > 0 else {
            throw AudioError(.invalidFormat, "nothing to open: both capture and playback have 0 channels")
        }
        for (what, n) in [("capture", inputChannels), ("playback", outputChannels)]
        where n != 0 && !StreamFormat.supportedChannelCounts.contains(n) {
            throw AudioError(
                .invalidFormat,
                "\(what) channels must be 0 (off) or \(StreamFormat.supportedChannelCounts.lowerBound)…"
                    + "\(StreamFormat.supportedChannelCounts.upperBound), got \(n)")
        }
        guard StreamFormat.supportedSampleRates.contains(sampleRate), sampleRate.rounded() == sampleRate else {
            throw AudioError(
                .unsupportedSampleRate,
                "the sample rate must be a whole number of Hz in 1000…768000, got \(sampleRate)")
        }
        guard (16...Self.maximumPeriodFrames).contains(periodFrames) else {
            throw AudioError(.invalidFormat, "the period must be 16…\(Self.maximumPeriodFrames) frames, got \(periodFrames)")
        }
        guard (2...32).contains(periodCount) else {
            throw AudioError(.invalidFormat, "the period count must be 2…32, got \(periodCount)")
        }
    }
}

/// What a device granted when it was opened.
public struct DeviceGrant: Hashable, Sendable, CustomStringConvertible {
    /// The backend the device was opened through.
    public let backend: DeviceBackend
    /// The capture device's name as opened, nil when capture is off.
    public let inputDevice: String?
    /// The playback device's name as opened, nil when playback is off.
    public let outputDevice: String?
    /// Capture channels granted; 0 when capture is off.
    public let inputChannels: Int
    /// Playback channels granted; 0 when playback is off.
    public let outputChannels: Int
    /// The device's sample rate in Hz: the one asked for, or another when the request accepted other rates.
    public let sampleRate: Double
    /// Frames per cycle. Virtual devices with varying callback sizes report their largest.
    public let periodFrames: Int
    /// Periods in the device buffer.
    public let periodCount: Int
    /// The device's own sample type (the I/O unit converts to and from the client formats).
    public let deviceSampleType: SampleType
    /// Frames between a sound reaching the device and its capture being delivered, as the backend reports it.
    public let inputLatencyFrames: Int
    /// Frames between a cycle's output being handed over and its being heard, as the backend reports it.
    public let outputLatencyFrames: Int

    /// A grant from its parts, as a driver makes it when it has opened a device.
    /// - Parameters:
    ///   - backend: the backend the device was opened through.
    ///   - inputDevice: the capture device's name as opened; nil when capture is off.
    ///   - outputDevice: the playback device's name as opened; nil when playback is off.
    ///   - inputChannels: capture channels granted.
    ///   - outputChannels: playback channels granted.
    ///   - sampleRate: the device's sample rate in Hz.
    ///   - periodFrames: frames per cycle (the largest, for varying cycle sizes).
    ///   - periodCount: periods in the device buffer.
    ///   - deviceSampleType: the device's own sample type.
    ///   - inputLatencyFrames: frames from a sound reaching the device to its capture being delivered.
    ///   - outputLatencyFrames: frames from a cycle's output being handed over to its being heard.
    ///   - independentClocks: whether capture and playback run on two clocks (default false).
    public init(
        backend: DeviceBackend, inputDevice: String?, outputDevice: String?, inputChannels: Int, outputChannels: Int,
        sampleRate: Double, periodFrames: Int, periodCount: Int, deviceSampleType: SampleType,
        inputLatencyFrames: Int, outputLatencyFrames: Int, independentClocks: Bool = false
    ) {
        self.independentClocks = independentClocks
        self.backend = backend
        self.inputDevice = inputDevice
        self.outputDevice = outputDevice
        self.inputChannels = inputChannels
        self.outputChannels = outputChannels
        self.sampleRate = sampleRate
        self.periodFrames = periodFrames
        self.periodCount = periodCount
        self.deviceSampleType = deviceSampleType
        self.inputLatencyFrames = inputLatencyFrames
        self.outputLatencyFrames = outputLatencyFrames
    }

    /// True when capture and playback run on two clocks (two devices): a cycle's capture may hold more or fewer
    /// frames than its playback, and the I/O unit bridges the drift between them.
    public let independentClocks: Bool

    /// One period in milliseconds.
    public var periodMilliseconds: Double { Double(periodFrames) * 1000 / sampleRate }

    /// The round trip the buffering implies (input latency + output latency), in milliseconds.
    public var nominalRoundTripMilliseconds: Double {
        Double(inputLatencyFrames + outputLatencyFrames) * 1000 / sampleRate
    }

    public var description: String {
        var parts = ["\(backend)", formatHz(sampleRate)]
        if let inputDevice { parts.append("in '\(inputDevice)' \(inputChannels) ch") }
        if let outputDevice { parts.append("out '\(outputDevice)' \(outputChannels) ch") }
        parts.append("\(periodFrames) frames × \(periodCount) periods (\(String(format2: periodMilliseconds)) ms each)")
        parts.append("device samples \(deviceSampleType)")
        if independentClocks { parts.append("capture and playback on two clocks") }
        return parts.joined(separator: ", ")
    }
}

/// Something that happened to a running device, reported on the control side (never from the render thread).
public enum DeviceEvent: Sendable, CustomStringConvertible {
    /// The device is running with this grant (after start and after each reconnect).
    case started(DeviceGrant)
    /// Under- or overruns were detected and recovered from; `total` counts them since start.
    case xrun(total: Int)
    /// The device or its server went away: what the backend said. With reconnect on, attempts follow.
    case fault(AudioError)
    /// A reconnect attempt failed; another follows after `retryIn` seconds.
    case reconnectFailed(attempt: Int, error: AudioError, retryIn: Double)
    /// Reconnecting gave up after the reconnect timeout: the device has stopped for good (``stopped`` follows).
    case gaveUp(AudioError)
    /// The stream runs again; `gapFrames` frames of time passed while it was down, as estimated when the device
    /// reopened (the sample time of the new stream's first cycle counts the whole time away, its slow start
    /// included, so it may move on a little more).
    case reconnected(DeviceGrant, gapFrames: Int64)
    /// A virtual device's input file has ended (silence follows).
    case inputEnded
    /// The playback reaches nowhere any more (AVAudioSession's route change): the output device went away, or —
    /// on JACK — no output port is connected now. Capture goes on where it can.
    case routeLost(String)
    /// The playback reaches somewhere again.
    case routeReturned
    /// Where a direction plays or captures has changed (PipeWire): the default device changed, the stream was moved to
    /// another node, the node it was linked to was removed, or a port's route changed (headphones, speaker).
    case routeChanged(RouteChange)
    /// Our stream stopped running without a fault (PipeWire): the server paused it, its node or the graph's driver
    /// was suspended or paused, or another client took the device. What is recorded goes on, the time it holds
    /// filled with silence (the sample time moves on by it); ``interruptionEnded(gapFrames:)`` follows.
    case interruptionBegan(String)
    /// The stream runs again after ``interruptionBegan(_:)``; `gapFrames` frames of time passed without cycles.
    case interruptionEnded(gapFrames: Int64)
    /// Something worth a user's attention that does not stop the stream (e.g. no real-time priority).
    case warning(String)
    /// The device has stopped for good (stop() or a fault without reconnect).
    case stopped

    public var description: String {
        switch self {
        case .started(let g): "started: \(g)"
        case .xrun(let total): "xrun (\(total) so far), recovered"
        case .fault(let e): "device fault: \(e.message)"
        case .reconnectFailed(let n, let e, let wait):
            "reconnect attempt \(n) failed: \(e.message); retrying in \(String(format2: wait)) s"
        case .reconnected(let g, let gap):
            "reconnected after \(String(format2: Double(gap) / g.sampleRate)) s: \(g)"
        case .gaveUp(let e): "gave up: \(e.message)"
        case .inputEnded: "the input file has ended"
        case .routeLost(let why): "route lost: \(why)"
        case .routeReturned: "route back: the output plays again"
        case .routeChanged(let change): "route changed: \(change)"
        case .interruptionBegan(let why): "interruption began: \(why)"
        case .interruptionEnded(let gap): "interruption ended after \(gap) frames"
        case .warning(let w): "warning: \(w)"
        case .stopped: "stopped"
        }
    }
}

/// A change of where a stream plays or captures (``DeviceEvent/routeChanged(_:)``).
public struct RouteChange: Hashable, Sendable, CustomStringConvertible {
    /// What changed.
    public enum Reason: String, Hashable, Sendable {
        /// The server's default sink or source changed (``RouteChange/from`` and ``RouteChange/to`` are the old and
        /// new default's names).
        case defaultChanged = "default changed"
        /// Our stream now plays to (or captures from) another node.
        case moved
        /// The node our stream was linked to was removed (``RouteChange/to`` is nil).
        case removed
        /// A port's route changed on the same device (headphones plugged or pulled, the speaker taking over).
        case portChanged = "port changed"
    }

    /// What changed.
    public let reason: Reason
    /// `.output` for the playback, `.input` for the capture.
    public let direction: DeviceDirections
    /// The node (or port route) before, nil when there was none.
    public let from: String?
    /// The node (or port route) now, nil when there is none.
    public let to: String?
    /// Whether the output now reaches headphones (from the node's form factor or its port's route), nil when the
    /// device does not say. For the capture, nil.
    public let toHeadphones: Bool?

    /// A change from its parts.
    /// - Parameters:
    ///   - reason: what changed.
    ///   - direction: `.output` or `.input`.
    ///   - from: the node (or route) before, nil for none.
    ///   - to: the node (or route) now, nil for none.
    ///   - toHeadphones: whether the output now reaches headphones, nil when unknown.
    public init(reason: Reason, direction: DeviceDirections, from: String?, to: String?, toHeadphones: Bool? = nil) {
        self.reason = reason
        self.direction = direction
        self.from = from
        self.to = to
        self.toHeadphones = toHeadphones
    }

    public var description: String {
        let which = direction == .input ? "input" : "output"
        let phones = toHeadphones.map { $0 ? " (headphones)" : " (not headphones)" } ?? ""
        return "\(which) \(reason.rawValue): \(from ?? "none") → \(to ?? "none")\(phones)"
    }
}

/// The error codes of devices.
extension AudioError.Code {
    /// A device could not be found, opened or configured as asked, or it went away.
    public static let deviceUnavailable = AudioError.Code(fourCC: "dev!")
    /// A device name that no backend knows.
    public static let unknownDevice = AudioError.Code(fourCC: "dev?")
}

/// Whether an I/O unit's playback reaches somewhere (``IOUnit/outputRoute``): false from a route loss until it
/// returns. Set by the unit's supervisor; read by anything, the render thread included (an atomic load).
public final class OutputRoute: Sendable {
    private let routed = Atomic<Bool>(true)
    /// 1: headphones, 0: not, -1: unknown.
    private let headphones = Atomic<Int8>(-1)

    /// True while the playback reaches somewhere. Any thread, the render thread included.
    public var isRouted: Bool { routed.load(ordering: .acquiring) }

    /// Whether the playback's device is worn on the head (headphones, a headset), as the sound server says: nil
    /// where it does not say (ALSA, JACK, a PipeWire node without a form factor) and while the route is lost. Any
    /// thread, the render thread included.
    public var isHeadphones: Bool? {
        switch headphones.load(ordering: .acquiring) {
        case 1: true
        case 0: false
        default: nil
        }
    }

    func set(_ value: Bool) { routed.store(value, ordering: .releasing) }
    func setHeadphones(_ value: Bool?) { headphones.store(value.map { $0 ? 1 : 0 } ?? -1, ordering: .releasing) }
}
