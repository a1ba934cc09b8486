import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits

extension KaraokeRoom {
    /// What a room is made from: the voice chain, the device, the volumes, the round trip and the encoded outputs.
    public struct Configuration: Sendable {
        /// A graph file with one `input` node (the microphone) whose output is the wet voice; nil: the voice as it is.
        public var voiceChain: String?
        /// The node types the voice chain may use (custom units registered by the app).
        public var unitRegistry = UnitRegistry.standard
        /// The room's rate when there is no voice chain (the chain's rate otherwise).
        public var sampleRate = 48_000.0
        /// The output's channels when there is no voice chain.
        public var channelCount = 2
        /// The sound system the device is opened through (default `.alsa`).
        public var backend: DeviceBackend = .alsa
        /// The microphone: an ALSA PCM, a JACK client, or for `.virtual` a WAV file played as the microphone.
        public var inputDevice: String?
        /// The headphones: an ALSA PCM, a JACK client, or for `.virtual` the WAV file written.
        public var outputDevice: String?
        /// Frames per device period (default 256).
        public var periodFrames = 256
        /// Periods in the device buffer (ALSA), at least 2 (default 2).
        public var periodCount = 2
        /// The JACK server's name for the `.jack` backend.
        public var jackServer: String?
        /// The PipeWire server's socket for the `.pipewire` backend: a name in the runtime folder or an absolute path
        /// (nil: `$PIPEWIRE_REMOTE`, else `pipewire-0`).
        public var pipeWireRemote: String?
        /// How a `.virtual` device runs: its pacing, cycle sizes and where its microphone file starts.
        public var virtual = VirtualDeviceOptions()
        /// Reopen the device when it goes away, for up to ``reconnectTimeout`` seconds (default true).
        public var reconnect = true
        /// Seconds a device that went away is reopened for before the room gives up (default 30).
        public var reconnectTimeout = 30.0
        /// Whether capture and playback run on one clock or two (default `.automatic`).
        public var clocks = DeviceClocks.automatic
        /// The accompaniment's volume at the start, dB, −96 … +12 (default 0); `-.infinity` for none.
        public var accompanimentVolume = 0.0
        /// The voice's volume in the song at the start, dB, −96 … +12 (default 0); `-.infinity` for none.
        public var voiceVolume = 0.0
        /// The voice in the singer's headphones, dB (`-.infinity`: the accompaniment only).
        public var monitorVoiceVolume = 0.0
        /// What the output plays of the voice once it has moved from headphones to something that is not (a
        /// speaker; PipeWire says which, from the device's form factor): default `.muteVoice`.
        public var offHeadphones = OffHeadphones.muteVoice
        /// Echo cancellation, noise suppression and gain control on the microphone, referenced to the accompaniment.
        public var voiceProcessing = false
        /// The room's sound as a file: `.wav` (as rendered), or `.m4a`/`.mp4`, `.flv` or `.aac`, encoded to AAC-LC.
        public var recordPath: String?
        /// The room's sound, encoded to AAC-LC, to RTMP servers and FLV, M4A or ADTS files: one connection and one
        /// file for the whole evening, their timestamps from the room's start.
        public var outputs: [LiveStreamSession.Output] = []
        /// The AAC bit rate.
        public var bitRate = 128_000
        /// The RTMP outputs' settings (queue, TLS trust, logger).
        public var rtmp = RTMPPublisher.Configuration()
        /// Where the round trip the voice is shifted by comes from (default `.device`).
        public var roundTrip = KaraokeSession.RoundTrip.device
        /// Cycles of the device to record the timing of: 0, none.
        public var cycleTimingCapacity = 0
        /// The voices: each the next channels of the input device (as many as the voice chain's `input` node has,
        /// one without a chain) with a copy of the voice chain, its own stems, pitch and score; 1 … 8 (default 1).
        public var voiceCount = 1
        /// The most voices a room has (wired and phones alike).
        public static let maximumVoices = 8
        /// Phone voices: voices whose microphone is a phone on the network (``PhoneVoice``), after the wired ones,
        /// each with its copy of the voice chain, its stems, pitch and score; 0 … 8 (default 0). The song mix, the
        /// recording and the stream wait ``phoneDelay`` for them.
        public var phoneVoices = 0
        /// Seconds the song mix, the recording and the stream run behind the room when it has phone voices: what a
        /// phone's audio may take to arrive (its offset, the network, the jitter buffer) and still be placed where it
        /// was sung; audio later than that is dropped and counted. 0.1 … 1.5 (default 0.6).
        public var phoneDelay = 0.6
        /// Phone voices in the room's output (the headphones or speakers) too, `phoneDelay` late: off by default (a
        /// voice heard that late is an echo to whoever sings).
        public var phoneVoicesInOutput = false
        /// An audio file played between takes, looped: from the room's first frame to the first take's, and from each
        /// take's end to the next one's, fading in over a second and out over the second before the take; under the
        /// accompaniment's volume, in the headphones, the song mix and the stream, never in a take's stems. nil
        /// (the default): silence between takes.
        public var interlude: String?
        /// The interlude's level, dB, −96 … +12 (default −12: under the songs).
        public var interludeVolume = -12.0

        /// A room with every setting at its default.
        public init() {}
    }

    /// The room's policy when the output moves off headphones (the seeds' route change: headphones pulled out, the
    /// speaker taking over).
    public enum OffHeadphones: String, Sendable, CaseIterable {
        /// The voice out of the output (a 5 ms fade; the accompaniment plays on) until it is headphones again: a voice
        /// from a speaker by surprise is feedback and an embarrassment. A room that started on speakers, or on a
        /// backend that does not say (ALSA, JACK), keeps the voice.
        case muteVoice = "mute-voice"
        /// The voice stays in the output wherever it plays.
        case keepVoice = "keep-voice"
    }
}
