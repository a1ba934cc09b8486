import AudioCore

extension IOUnit {
    /// What an I/O unit opens and how: the backend, each bus's client format (nil disables it), the devices, the
    /// buffering, and what to do when the device fails or runs at another rate. Given to ``IOUnit/init(_:)``, which
    /// checks it; fixed from then on.
    public struct Configuration: Sendable {
        /// The sound system to open the device through (default ALSA).
        public var backend: DeviceBackend
        /// Bus 1's client format (what capture handlers receive); nil disables capture.
        public var inputFormat: StreamFormat?
        /// Bus 0's client format (what a client render callback fills); nil disables playback. With a graph, its
        /// rate and channel count must match the graph's output.
        public var outputFormat: StreamFormat?
        /// The capture device's name (ALSA PCM, JACK client, or the WAV file for `.virtual`); nil: the default.
        public var inputDevice: String?
        /// The playback device's name (ALSA PCM, JACK client, or the WAV file for `.virtual`); nil: the default.
        public var outputDevice: String?
        /// Frames per period asked of the device: the block each cycle handles (default 1024).
        public var periodFrames: Int
        /// Periods in the device buffer asked for (ALSA; default 3, at least 2).
        public var periodCount: Int
        /// Reopen the device after a fault, with backoff, until it returns (not for virtual devices).
        public var reconnect: Bool
        /// Seconds after a fault that reconnecting gives up: the device has stopped for good, and ``failure``
        /// says why (0 < seconds ≤ 86400; default 30).
        public var reconnectTimeout: Double = 30
        /// When the device grants another rate than the client formats' (a JACK server at 44.1 kHz, an ALSA `hw:`
        /// device), convert between the two (the default) instead of failing. The grant says the device's rate;
        /// ``conversionLatency`` what the conversion adds (measured when the device opens).
        public var convertsRates = true
        /// libsoxr's quality for that conversion. `.high` (the default: 20-bit precision, flat within 0.01 dB to
        /// 91 % of the lower Nyquist frequency) adds about 41 ms to a round trip at 44.1 ↔ 48 kHz, since libsoxr's
        /// long filters work in large blocks; `.low` (16-bit; at 44.1 kHz flat to 15 kHz, −3 dB at 18 kHz) about
        /// 12 ms — what `liveaudio monitor` uses; `.quick` (cubic interpolation) about 1.5 ms.
        public var conversionQuality: SampleRateConverter.Quality = .high
        /// Whether capture and playback run on one clock or two (``DeviceClocks``; default: decided from the
        /// devices). On two, the unit bridges their drift; ``clockBridgeLatency`` says what that adds.
        public var clocks: DeviceClocks = .automatic
        /// The application's name as PipeWire shows it (`application.name` of our client, and our streams' node
        /// names: `NAME.capture`, `NAME.playback`); default `liveaudio`. Other backends ignore it.
        public var applicationName = "liveaudio"
        /// The PipeWire server's socket: a name in `$PIPEWIRE_RUNTIME_DIR` or `$XDG_RUNTIME_DIR`, or an absolute path
        /// (nil: `$PIPEWIRE_REMOTE`, else `pipewire-0`). Other backends ignore it.
        public var pipeWireRemote: String?
        /// The JACK server's name (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        /// How a virtual device behaves (used only with the `.virtual` backend).
        public var virtual: VirtualDeviceOptions

        /// A configuration from its main settings; the others (``reconnectTimeout``, ``convertsRates``,
        /// ``conversionQuality``, ``clocks``) start at their defaults and can be set after.
        /// - Parameters:
        ///   - backend: the sound system (default ALSA).
        ///   - inputFormat: bus 1's client format; nil (the default) disables capture.
        ///   - outputFormat: bus 0's client format; nil (the default) disables playback.
        ///   - inputDevice: the capture device's name; nil: the default.
        ///   - outputDevice: the playback device's name; nil: the default.
        ///   - periodFrames: frames per period (default 1024).
        ///   - periodCount: periods in the device buffer (default 3).
        ///   - reconnect: whether to reopen the device after a fault (default true).
        ///   - jackServer: the JACK server's name (nil: `JACK_DEFAULT_SERVER` or the default).
        ///   - virtual: how a virtual device behaves.
        public init(
            backend: DeviceBackend = .alsa, inputFormat: StreamFormat? = nil, outputFormat: StreamFormat? = nil,
            inputDevice: String? = nil, outputDevice: String? = nil, periodFrames: Int = 1024, periodCount: Int = 3,
            reconnect: Bool = true, jackServer: String? = nil, virtual: VirtualDeviceOptions = VirtualDeviceOptions()
        ) {
            self.backend = backend
            self.inputFormat = inputFormat
            self.outputFormat = outputFormat
            self.inputDevice = inputDevice
            self.outputDevice = outputDevice
            self.periodFrames = periodFrames
            self.periodCount = periodCount
            self.reconnect = reconnect
            self.jackServer = jackServer
            self.virtual = virtual
        }

        /// The device request these settings make.
        public func request() throws(AudioError) -> DeviceRequest {
            guard reconnectTimeout > 0, reconnectTimeout <= 86_400 else {
                throw AudioError(.invalidParameter, "the reconnect timeout must be more than 0 and at most 86400 seconds, got \(reconnectTimeout)")
            }
            guard let rate = inputFormat?.sampleRate ?? outputFormat?.sampleRate else {
                throw AudioError(.invalidFormat, "enable a bus: give bus 1 (input) or bus 0 (output) a client format")
            }
            if let i = inputFormat, let o = outputFormat, i.sampleRate != o.sampleRate {
                throw AudioError(
                    .formatMismatch,
                    "input and output run on one clock: their rates must agree (input \(formatHz(i.sampleRate)), "
                        + "output \(formatHz(o.sampleRate)))")
            }
            var request = DeviceRequest(
                inputDevice: inputDevice, outputDevice: outputDevice, inputChannels: inputFormat?.channelCount ?? 0,
                outputChannels: outputFormat?.channelCount ?? 0, sampleRate: rate, periodFrames: periodFrames,
                periodCount: periodCount)
            request.acceptsOtherRates = convertsRates && backend != .virtual
            request.clocks = clocks
            return request
        }
    }
}
