import AudioCore

extension IOUnit {
    public struct Configuration: Sendable {
        public var backend: DeviceBackend
        /// Bus 1's client format (what capture handlers receive); nil disables capture.
        public var inputFormat: StreamFormat?
        /// Bus 0's client format (what a client render callback fills); nil disables playback. With a graph, its
        /// rate and channel count must match the graph's output.
        public var outputFormat: StreamFormat?
        public var inputDevice: String?
        public var outputDevice: String?
        public var periodFrames: Int
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
        /// The JACK server's name (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        public var virtual: VirtualDeviceOptions

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
