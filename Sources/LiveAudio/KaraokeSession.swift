import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Singing along to a song: the accompaniment plays, the voice goes through its chain, the singer hears both in the
/// headphones within the device's periods (ear monitoring), the volumes change live, and the song and its stems are
/// recorded with the voice where it was sung.
///
/// ```swift
/// var configuration = KaraokeSession.Configuration(song: "song.m4a")
/// configuration.voiceChain = "Examples/graphs/voice-chain.json"
/// configuration.stemsDirectory = "take1"          // accompaniment.wav, voice-dry.wav, voice-wet.wav, song.wav
/// let session = try KaraokeSession(configuration)
/// try await session.start()
/// session.voiceVolume = -3                          // dB, live, click-free
/// try session.unit(named: "room")?.parameter("wetDryMix").set(35)
/// …
/// let summary = await session.stop()
/// ```
///
/// The graph. The song needs no live input, so it is rendered ahead on a worker (`la-song`, ``songLookAhead``
/// ahead of the device: 20 ms, or two periods when they are longer); everything else runs on the device's thread,
/// one graph, one cycle:
///
/// ```
/// la-song:  song (filePlayer) ─ [timePitch] ─▶ ring
/// device:   ring ─ accompaniment ─┬──────────────── monitor mix ── headphones
///                                 └─ delay R ─┐        ▲
/// microphone ─ dry ─ voice chain ─ wet ───────┴ song mix ─ song     │ (monitor voice volume)
///                                      └────────────────────────────┘
/// ```
///
/// Volumes and mutes act after the ring: at once. A key or tempo change is made in the song's path and heard after
/// the look-ahead (and the time-pitch's own). ``pauseSong()``, ``resumeSong()``, ``seekSong(toSeconds:)`` and
/// ``playSong(_:)`` drop what is queued (faded over 5 ms), so they are heard at once.
///
/// **The sync rule.** The singer sings to what they hear, which left the device one output latency after it was
/// rendered; their voice reaches the graph one input latency after that. So the voice that arrives at sample time
/// t + R belongs with the accompaniment rendered at t, R being the round trip. The voice stems are recorded R frames
/// shifted (their frame k is what arrived at k + R), and the song mixes the accompaniment delayed by R with the voice
/// and is shifted the same way: in every file frame k is the accompaniment rendered at k and the voice sung to it.
/// R comes from ``Configuration/roundTrip``: the latencies the device reports, a calibration click played before
/// the song (as `liveaudio latency` does; it needs the output to reach the input), or a figure given; the session
/// says which in ``roundTripSource``. Voice processing on the capture adds its latency to R.
///
/// Recording and the song start together at one sample time half a second after the device starts.
public final class KaraokeSession: Sendable {
    /// Where the round trip comes from.
    public enum RoundTrip: Sendable, Hashable {
        /// The input and output latencies the device reports (JACK's port latencies, ALSA's delay).
        case device
        /// Measured with clicks played before the session starts: the output must reach the input.
        case calibrate
        /// As given.
        case milliseconds(Double)
    }

    /// A region of the song in seconds: from `start`, to `end` (nil: the file's end), `loopCount` more times.
    public struct RegionInSeconds: Hashable, Sendable {
        /// Seconds of the file the region starts at (default 0).
        public var start: Double
        /// Seconds of the file the region ends at; nil (the default): the file's end.
        public var end: Double?
        /// Times the region plays again after the first (default 0: once; ``/AudioUnits/FilePlayerUnit/Region/endless``
        /// for a loop that never runs out).
        public var loopCount: Int

        /// A region from `start` to `end`, played `loopCount` more times.
        /// - Parameters:
        ///   - start: Seconds of the file the region starts at (default 0).
        ///   - end: Seconds of the file it ends at; nil (the default): the file's end.
        ///   - loopCount: Times it plays again after the first (default 0: once).
        public init(start: Double = 0, end: Double? = nil, loopCount: Int = 0) {
            self.start = start
            self.end = end
            self.loopCount = loopCount
        }

        /// The region in frames at `sampleRate`.
        public func frames(at sampleRate: Double) -> FilePlayerUnit.Region {
            FilePlayerUnit.Region(
                startFrame: Int64((start * sampleRate).rounded()),
                frameCount: end.map { Int64((($0 - start) * sampleRate).rounded()) }, loopCount: loopCount)
        }
    }

    /// What a karaoke session is made from: the song, the voice chain, the device, the volumes, key and tempo, the
    /// round trip, the recordings and encoded outputs, and a chart. Read once by ``KaraokeSession/init(_:)``; the
    /// session keeps it as ``KaraokeSession/configuration``.
    public struct Configuration: Sendable {
        /// The accompaniment: any file the decoder reads.
        public var song: String
        /// A graph file with one `input` node (the microphone) whose output is the wet voice; nil: the voice as it is.
        public var voiceChain: String?
        /// The node types the voice chain may use (custom units registered by the app).
        public var unitRegistry = UnitRegistry.standard
        /// The session's rate when there is no voice chain (the chain's rate otherwise).
        public var sampleRate = 48_000.0
        /// The output's channels when there is no voice chain.
        public var channelCount = 2
        /// The sound system the device is opened through (``/AudioDevices/DeviceBackend``; default `.alsa`).
        public var backend: DeviceBackend = .alsa
        /// The microphone: an ALSA PCM, a JACK client, or for `.virtual` a WAV file played as the microphone (nil:
        /// the backend's default).
        public var inputDevice: String?
        /// The headphones: an ALSA PCM, a JACK client, or for `.virtual` the WAV file written (nil: the backend's
        /// default).
        public var outputDevice: String?
        /// Frames per device period, the block the device's thread renders each cycle (default 256): with
        /// ``periodCount``, what the voice in the headphones is late by.
        public var periodFrames = 256
        /// Periods in the device buffer (ALSA), at least 2 (default 2).
        public var periodCount = 2
        /// The JACK server's name for the `.jack` backend (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        /// How a `.virtual` device runs: its pacing and cycle sizes (``/AudioDevices/VirtualDeviceOptions``).
        public var virtual = VirtualDeviceOptions()
        /// Reopen the device when it goes away, for up to ``reconnectTimeout`` seconds (default true).
        public var reconnect = true
        /// Seconds a device that went away is reopened for before the session gives up (0 < seconds ≤ 86400;
        /// default 30); then ``KaraokeSession/failure`` says why.
        public var reconnectTimeout = 30.0
        /// Whether capture and playback run on one clock or two (``/AudioDevices/DeviceClocks``; default
        /// `.automatic`: decided from the devices). On two the I/O unit bridges their drift, which adds its latency
        /// to the round trip.
        public var clocks = DeviceClocks.automatic
        /// What of the song plays, in frames at the session's rate.
        public var region = FilePlayerUnit.Region.wholeFile
        /// What of the song plays, in seconds: when given, taken instead of ``region``, at the session's rate (the
        /// voice chain's, known once the session has read its file).
        public var regionInSeconds: RegionInSeconds?
        /// Key change in cents (+200: two semitones up), −2400 … 2400 (default 0); a time-pitch unit is added when it
        /// or ``tempo`` differs.
        public var keyCents = 0.0
        /// The song's tempo, a rate 1/32 … 32 (default 1: as it is; 0.9: 10 % slower), kept for the whole session; a
        /// time-pitch unit is added when it differs from 1.
        public var tempo = 1.0
        /// Put the time-pitch unit in even at key 0 and tempo 1, so ``KaraokeSession/keyCents`` can change while
        /// singing (it adds the unit's look-ahead, about 79 ms, between the song and the headphones; the sync rule
        /// accounts for it).
        public var keyAdjustable = false
        /// The accompaniment's volume at the start, in the headphones and the song: dB, −96 … +12 (default 0);
        /// `-.infinity` for none.
        public var accompanimentVolume = 0.0
        /// The voice's volume in the song at the start: dB, −96 … +12 (default 0); `-.infinity` for none.
        public var voiceVolume = 0.0
        /// The voice in the singer's headphones, dB (`-.infinity`: the accompaniment only).
        public var monitorVoiceVolume = 0.0
        /// Echo cancellation, noise suppression and gain control on the microphone (default false): the
        /// ``/AudioDevices/IOUnit``'s `enableVoiceProcessing(reference:)`, referenced to the accompaniment.
        public var voiceProcessing = false
        /// A folder for `accompaniment.wav`, `voice-dry.wav`, `voice-wet.wav` and `song.wav`.
        public var stemsDirectory: String?
        /// The song as a file: `.wav` (as rendered), or `.m4a`/`.mp4`, `.flv` or `.aac` (ADTS), encoded to AAC-LC.
        public var recordPath: String?
        /// The song, encoded to AAC-LC, to any number of places at once: RTMP servers (the live room) and FLV, M4A or
        /// ADTS files. Their timestamps start at the song's first sample.
        public var outputs: [LiveStreamSession.Output] = []
        /// The AAC bit rate of the encoded song.
        public var bitRate = 128_000
        /// The RTMP outputs' settings (queue, TLS trust, logger).
        public var rtmp = RTMPPublisher.Configuration()
        /// Where the round trip the voice is shifted by comes from (``KaraokeSession/RoundTrip``; default `.device`).
        public var roundTrip = RoundTrip.device
        /// Cycles of the device to record the timing of (``cycleTimings``): 0, none.
        public var cycleTimingCapacity = 0
        /// A chart to sing along to: its lyrics shown (``KaraokeSession/singAlong``) and, when it has notes (an
        /// UltraStar chart), the voice's pitch tracked on the dry voice and scored against ``part`` at
        /// ``difficulty``; `pitch.csv` joins the stems. The song to play is still ``song`` (a chart's is
        /// `SongChart.songPath()`).
        public var chart: SongChart?
        /// The duet part sung (`P1` is 1).
        public var part = 1
        /// How strictly the sung pitch is scored against the chart's notes (``/SingAlong/SingingDifficulty``;
        /// default `.medium`).
        public var difficulty = SingingDifficulty.medium
        /// Plays the accompaniment at this integrated loudness, LUFS (EBU R128; −18 is `--normalize`'s default):
        /// the song is measured on a worker before the start (``FileLoudness``) and its gain set so that every song
        /// plays equally loud; the accompaniment volume moves around it. The gain stops where the song's true peak
        /// would pass ``accompanimentTruePeak``. nil: the song as it is.
        public var accompanimentLoudness: Double?
        /// The ceiling for the accompaniment's true peak under ``accompanimentLoudness``, dBTP.
        public var accompanimentTruePeak = -1.0
        /// Where songs' measurements are kept between runs, keyed by path, size and modification time (the user's
        /// cache folder by default; nil: measured every time).
        public var loudnessCache: LoudnessCache? = LoudnessCache()

        /// A configuration that plays `song` (any file the decoder reads), everything else at its default.
        public init(song: String) { self.song = song }
    }

    /// How the accompaniment was brought to ``Configuration/accompanimentLoudness``.
    public struct AccompanimentNormalization: Sendable, Hashable {
        /// The song file's integrated loudness, LUFS (−inf for silence).
        public let measured: Double
        /// The song file's true peak, dBTP.
        public let truePeak: Double
        /// Taken from the cache rather than measured now.
        public let cached: Bool
        /// The gain applied to the accompaniment, dB (0 for silence).
        public let gain: Double
        /// The target, LUFS.
        public let target: Double
        /// True when the gain stopped short of the target at the true-peak ceiling.
        public let limitedByTruePeak: Bool
        /// True when the gain stopped short of the target at +12 dB, a mixer's most.
        public let limitedByMixer: Bool

        /// The gain for a song `wanted` dB from the target with `room` dB under its true-peak ceiling: up to the
        /// target, or as far up as the ceiling allows — a song over the ceiling already is left as loud as it is, not
        /// turned down below the target for a peak of its own; one too loud goes down to the target — and at most
        /// +12 dB.
        static func gain(wanted: Double, room: Double) -> (gain: Double, byTruePeak: Bool, byMixer: Bool) {
            let peaked = wanted > room ? max(room, min(wanted, 0)) : wanted
            let gain = min(peaked, 12)
            return (gain, peaked < wanted, gain < peaked)
        }
    }

    /// What the session did.
    public struct Summary: Sendable {
        /// Seconds from the song's start (where the recordings begin) to the stop, on the device's timeline.
        public let seconds: Double
        /// The round trip the voice was shifted by, in frames at ``KaraokeSession/sampleRate`` (with the capture
        /// processing's latency); 0 when the session never started.
        public let roundTripFrames: Int
        /// Where the round trip came from: "device", "calibration" or "given" (empty when the session never started).
        public let roundTripSource: String
        /// The device's under- and overruns over the session.
        public let xruns: Int
        /// Cycles that found the accompaniment short: its file reader behind (the frames it lacked skipped), or its
        /// look-ahead ring not filled in time (silence in their place).
        public let accompanimentUnderruns: Int
        /// Frames in the longest recording made (the stems, the song's WAV); 0 without one.
        public let recordedFrames: Int64
        /// Frames the recorders' or the encoder's writer fell too far behind for.
        public let droppedFrames: Int64
        /// The encoded song's outputs and what each did.
        public let outputs: [LiveStreamSession.OutputStatistics]
        /// What went wrong, if anything: the first error completing a recording or an encoded output, else the error
        /// that stopped the device or the song's worker; nil when all went well.
        public let error: AudioError?
        /// The score of the take, with a chart that has notes.
        public let score: SingingScore.Result?
        /// The song's loudness (the accompaniment and the voice as encoded and recorded in `song.wav`): integrated,
        /// range and true peak over the session.
        public let loudness: LoudnessReading
    }

    /// The configuration the session was made with.
    public let configuration: Configuration
    /// The session's rate in Hz: the voice chain's, or ``Configuration/sampleRate`` without one (a device at another
    /// rate is converted).
    public let sampleRate: Double
    /// The accompaniment's player, rendered ahead on the song's worker: its position, state and length. Pause,
    /// seek and schedule through the session (``pauseSong()``, ``seekSong(toSeconds:)``, ``playSong(_:)``), which
    /// drop what is queued; made on the player directly they are heard after ``songLookAhead``.
    public let player: FilePlayerUnit
    /// What of the song plays, in frames at ``sampleRate``.
    public let region: FilePlayerUnit.Region
    /// The time-pitch unit, when the key or tempo changes.
    public let timePitch: TimePitchUnit?
    /// The song's path (player, time-pitch), rendered ahead of the device on a worker: the accompaniment.
    private let song: RenderAheadSource
    private let loaded: LoadedGraph?
    private let graph: RenderGraph
    private let monitor: MixerUnit
    /// The wet voice's level, before any volume (a sink).
    private let voiceMeter: MeterUnit
    /// The song's loudness: the mix that is encoded (a sink).
    private let songLoudness: LoudnessMeterUnit
    private let songMix: MixerUnit
    private let songDelay: SampleDelayUnit
    /// The voice chain's last node (the microphone's without a chain).
    private let wetVoice: NodeID
    private let timeline: TimelineTap
    /// Whether the headphones are reached: the I/O unit's route, read by the gate on the render thread.
    private let routeGate: RouteGate
    /// The clicks of a calibration (``RoundTrip/calibrate``).
    private let calibration: CalibrationClicks?
    private let voiceProcessingUnit: VoiceProcessingUnit?
    /// The echo canceller's reference: the accompaniment, scaled by its headphone volume.
    private let echoReference: CaptureReferenceTap?
    /// Where the song goes to the encoder (when it has outputs), and the encoder and its outputs: made again after a
    /// start that failed (an RTMP publisher runs once).
    private let encoderTap: EncoderTap?
    private let encoded = Locked<EncodedOutputs?>(nil)
    private let songOutputs: [LiveStreamSession.Output]
    /// Each recorder and what it is shifted by: nothing (the accompaniment), the round trip (the dry voice), or the
    /// round trip and the chain's latency (the wet voice, the song).
    private let recorders: [Recorder]
    enum Shift { case none, roundTrip, roundTripAndChain }
    /// Frames from the microphone to the wet voice (the chain's latency): the wet stem and the song are shifted by
    /// it too.
    private let chainLatencyFrames: Int
    /// The chart's lyrics, and the voice's pitch and score, with ``Configuration/chart``.
    private let follower: SingAlongFollower?
    private let io: IOUnit
    private let volumes = Locked<Volumes>(Volumes())
    /// Set by ``KaraokeControl/stop`` (a display asked the owner to stop the session).
    let stopRequest = Atomic<Bool>(false)
    struct Volumes {
        var accompaniment = 0.0, voice = 0.0, monitorVoice = 0.0
        var accompanimentMuted = false, voiceMuted = false
        /// The accompaniment's loudness normalisation, linear (``Configuration/accompanimentLoudness``).
        var normalization: Float = 1
    }
    private let normalized = Locked<AccompanimentNormalization?>(nil)
    private let state = Locked<SessionState>(SessionState())
    private let lifecycle = LockedLifecycle(name: "the karaoke session")
    /// What the stop that did the work returned: what later (and concurrent) stops return too.
    private let finalSummary = Locked<Summary?>(nil)
    struct SessionState {
        var scheduled = false
        var roundTrip = 0, source = "", startTime: Int64 = 0, calibrations = 0
        var endSeen: Int64?
        /// The first file frame of the region playing (the pause does not go back before it).
        var songRegionStart: Int64 = 0
    }

    /// Checks and builds everything that can be before the device opens.
    /// - Throws: ``/AudioCore/AudioError``: a song that cannot be played, a voice chain without exactly one input node,
    ///   a volume out of range, a stems folder that does not exist, a record path that is neither `.wav` nor an AAC
    ///   file (`.m4a`, `.mp4`, `.flv`, `.aac`), an output given twice or in a folder that does not exist, a bad URL; a
    ///   stage of the graph that cannot be built names itself.
    public init(_ configuration: Configuration) throws(AudioError) {
        self.configuration = configuration
        let (outputs, wavRecord) = try Self.checkedOutputs(configuration)
        let chain = try VoiceChain(configuration, maximumFrames: Self.maximumFrames)
        let format = chain.graph.format
        let rate = format.sampleRate
        graph = chain.graph
        loaded = chain.loaded
        wetVoice = chain.wet
        sampleRate = rate
        chainLatencyFrames = Int((chain.latency * rate).rounded())
        songOutputs = outputs
        // Checked now (an output twice, a folder missing, encoder settings); made again at each start.
        let encoded = outputs.isEmpty ? nil : try Self.encodedOutputs(outputs, configuration, format)
        self.encoded.withLock { $0 = encoded }
        player = try Self.songPlayer(configuration, format: format)
        let songFormat = player.outputFormats[0]
        // The region checked now; the start time is set by start().
        region = configuration.regionInSeconds?.frames(at: rate) ?? configuration.region
        try player.schedule(region, at: .max)
        timePitch = try Self.timePitch(configuration, format: songFormat)
        song = try Self.songAhead(player, timePitch, format: songFormat)
        let io = try Self.device(configuration, input: chain.input, format: format)
        self.io = io
        try io.setInputUnit(chain.input)
        try io.setOutputGraph(chain.graph)
        // Referenced to the accompaniment alone, as it goes to the headphones: the canceller takes the song out of the
        // microphone, not the voice the singer hears back.
        let canceller = try configuration.voiceProcessing ? io.enableVoiceProcessing(reference: .graphTap) : nil
        try canceller?.echoCancellation.set(1)
        voiceProcessingUnit = canceller
        echoReference = try canceller == nil ? nil : CaptureReferenceTap(format: songFormat, io: io, maximumFrames: Self.maximumFrames)
        songDelay = try SampleDelayUnit(format: songFormat, maximumDelayFrames: Int((Self.maximumShift * rate).rounded()))
        songMix = try MixerUnit(format: format, inputs: 2)
        monitor = try MixerUnit(format: format, inputs: 2)
        voiceMeter = try MeterUnit(format: try chain.graph.unit(chain.wet).outputFormats[0])
        songLoudness = try LoudnessMeterUnit(format: format)
        encoderTap = encoded == nil ? nil : EncoderTap(format: format)
        timeline = TimelineTap(format: format)
        calibration = try configuration.roundTrip == .calibrate
            ? CalibrationClicks(format: format, micChannels: chain.input.outputFormats[0].channelCount) : nil
        // The route lost: the headphones go silent at once (the speaker must not feed the microphone); the rest of
        // the graph — the recordings, the song, the outputs — goes on.
        routeGate = RouteGate(format: format, route: io.outputRoute)
        recorders = try Self.recorders(configuration, wavRecord: wavRecord, chain: chain)
        let playing = region
        follower = try configuration.chart.map { chart throws(AudioError) in
            try SingAlongFollower(
                chart: chart, part: configuration.part, difficulty: configuration.difficulty,
                format: chain.input.outputFormats[0], region: playing,
                pitchPath: configuration.stemsDirectory.map { FilePath.join($0, "pitch.csv") })
        }
        follower?.setKey(cents: configuration.keyCents, fromGraphFrame: .min)

        // The graph, a stage an entry: the microphone and the wet voice come from the voice chain. The song is the
        // accompaniment delayed by the round trip and the wet voice; the monitor is the accompaniment and the wet
        // voice; recorders, the encoder's tap and the voice meter lead nowhere (sinks, rendered every cycle).
        var g = StageGraph(chain.graph, known: ["mic": chain.mic, "wet": chain.wet])
        let accompaniment = "song"
        try g.add("song", song)
        try g.add("song-delay", songDelay, from: [accompaniment])
        try g.add("song-mix", songMix, from: ["song-delay", "wet"])
        for r in recorders { try g.add("record-\(r.name)", r.unit, from: [r.source(accompaniment)], sink: true) }
        if let encoderTap { try g.add("song-encoder", encoderTap, from: ["song-mix"], sink: true) }
        try g.add("voice-meter", voiceMeter, from: ["wet"], sink: true)
        try g.add("song-loudness", songLoudness, from: ["song-mix"], sink: true)
        // The dry voice's pitch, for the score (after any voice processing, before the chain's effects).
        if let tracker = follower?.tracker { try g.add("pitch", tracker, from: ["mic"], sink: true) }
        if let echoReference { try g.add("echo-reference", echoReference, from: [accompaniment]) }
        try g.add("monitor", monitor, from: [echoReference == nil ? accompaniment : "echo-reference", "wet"])
        try g.add("timeline", timeline, from: ["monitor"])
        // A calibration plays its clicks into the headphones and records the microphone, before the song.
        if let calibration { try g.add("calibration", calibration, from: ["timeline", "mic"]) }
        try g.add("route-gate", routeGate, from: [calibration == nil ? "timeline" : "calibration"])
        try g.output(from: "route-gate")
        volumes.withLock {
            $0.accompaniment = configuration.accompanimentVolume
            $0.voice = configuration.voiceVolume
            $0.monitorVoice = configuration.monitorVoiceVolume
            apply($0)
        }
    }

    deinit {
        io.stop()
        song.stop()
        for r in recorders { _ = try? r.unit.finish() }
        // The score's job ends with the session, stopped or not.
        _ = follower?.finish()
    }

    // MARK: Control

    /// Finds the round trip (a calibration plays clicks first), opens the device, and starts the song and the
    /// recording together half a second later.
    /// - Throws: ``/AudioCore/AudioError`` from the calibration (no click came back) or the device, `.invalidParameter`
    ///   for a round trip over 2 s, `.invalidState` once started, stopped, or stopped meanwhile (a ``stop()`` breaks a
    ///   start off at once: a server that has not answered, a calibration). After a failure the device is stopped
    ///   again, nothing has been recorded, and (but for a stop) `start()` may be called again.
    public func start() async throws(AudioError) {
        try lifecycle.startRequested()
        var opened: EncodedOutputs?
        do throws(AudioError) {
            if let target = configuration.accompanimentLoudness, normalized.withLock({ $0 }) == nil {
                let n = try await normalizeAccompaniment(to: target)
                normalized.withLock { $0 = n }
                try lifecycle.checkStarting()
                volumes.withLock {
                    $0.normalization = Self.linear(n.gain)
                    apply($0)
                }
            }
            if let tap = encoderTap {
                let outputs = try encoded.withLock { e throws(AudioError) -> EncodedOutputs in
                    if let e { return e }
                    let made = try Self.encodedOutputs(songOutputs, configuration, graph.format)
                    e = made
                    return made
                }
                try await outputs.start()
                opened = outputs
                try lifecycle.checkStarting()
                tap.outputs = outputs  // the device is stopped: its thread starts after this
            }
            try await startDevice()
        } catch {
            io.stop()
            calibration?.disarm()
            // The outputs undone and made again by the next start (a publisher runs once).
            await opened?.abandon()
            if encoderTap != nil { encoded.withLock { $0 = nil } }
            let interrupted = lifecycle.startEnded(succeeded: false)
            throw interrupted ? AudioError(.invalidState, "the karaoke session was stopped while it started") : error
        }
        lifecycle.startEnded(succeeded: true)
    }

    /// How the accompaniment was normalised (after a ``start()`` with ``Configuration/accompanimentLoudness``).
    public var accompanimentNormalization: AccompanimentNormalization? { normalized.withLock { $0 } }

    /// The song's loudness from the cache, or measured on a thread of its own (decoding a song takes a second or
    /// two); the gain for `target`, stopped at the true-peak ceiling.
    private func normalizeAccompaniment(to target: Double) async throws(AudioError) -> AccompanimentNormalization {
        try LoudnessNormalization.check(target: target, ceiling: configuration.accompanimentTruePeak)
        let path = configuration.song
        let cache = configuration.loudnessCache
        var measured: (integrated: Double, truePeak: Double)
        var cached = false
        if let hit = cache?.lookUp(path) {
            measured = hit
            cached = true
        } else {
            let lifecycle = self.lifecycle
            let result: Result<FileLoudness, AudioError> = await withCheckedContinuation { continuation in
                do throws(AudioError) {
                    _ = try WorkerThread(name: "la-loudness") {
                        continuation.resume(returning: Result { () throws(AudioError) in
                            try FileLoudness.measure(path: path, stopped: { lifecycle.state == .starting(stopRequested: true) })
                        })
                    }
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
            let m = try result.get()
            measured = (m.reading.integrated, m.reading.truePeak)
            cache?.store(path, integrated: measured.integrated, truePeak: measured.truePeak)
        }
        guard measured.integrated.isFinite else {
            return AccompanimentNormalization(
                measured: measured.integrated, truePeak: measured.truePeak, cached: cached, gain: 0, target: target,
                limitedByTruePeak: false, limitedByMixer: false)
        }
        let g = AccompanimentNormalization.gain(
            wanted: target - measured.integrated, room: configuration.accompanimentTruePeak - measured.truePeak)
        return AccompanimentNormalization(
            measured: measured.integrated, truePeak: measured.truePeak, cached: cached, gain: g.gain, target: target,
            limitedByTruePeak: g.byTruePeak, limitedByMixer: g.byMixer)
    }

    /// Calibrations played at most before the session goes on with what it has (and warns).
    static let maximumCalibrations = 3
    /// Seconds the song can be shifted by at most: the round trip, the capture processing and the voice chain.
    static let maximumShift = 2.0
    /// Seconds within which the clicks of a calibration must agree (2 ms).
    static let calibrationAgreement = 0.002
    /// Plays the calibration clicks on the running device and waits for them to come back: the median round trip.
    /// The echo canceller is off meanwhile (it would take the clicks out of the microphone). A calibration that saw
    /// an xrun, lost a click or whose clicks disagree by more than ``calibrationAgreement`` is played again, up to
    /// ``maximumCalibrations`` times; then the median of the last is used and a warning says so.
    private func calibrate(_ clicks: CalibrationClicks, _ grant: DeviceGrant) async throws(AudioError) -> Int {
        // Half a second for the streams to settle, then a click every half second at least (four device buffers, so
        // an echo of one is not taken for the next).
        let interval = max(Int(sampleRate / 2), 4 * Int(Double(grant.periodFrames * max(1, grant.periodCount)) * sampleRate / grant.sampleRate), 512)
        let cancelling = voiceProcessingUnit.map { $0.echoCancellation.value } ?? 0
        try? voiceProcessingUnit?.echoCancellation.set(0)
        // The voice out of the headphones meanwhile: through a loop each click would come back again and again, and
        // a late copy of one click would be taken for the next (the search goes by shape, not level).
        try? monitor.setVolume(0, bus: 1)
        defer {
            try? voiceProcessingUnit?.echoCancellation.set(cancelling)
            volumes.withLock { apply($0) }
        }
        // A calibration with an xrun in it, or whose clicks disagree, is played again: a sound server may settle on
        // another latency when a stream restarts (PulseAudio at small periods: an underrun while the monitor source
        // wakes up, and the loop is 600 frames longer after it), and a median over both regimes is neither.
        let agreement = Int((sampleRate * Self.calibrationAgreement).rounded())
        // The best attempt so far if none is clean: steady first, then the most clicks, then the smallest spread.
        var best: (steady: Bool, found: [Int])?
        var xrunsSeen = false
        state.withLock { $0.calibrations = 0 }
        for attempt in 1...Self.maximumCalibrations {
            let xruns = io.xrunCount
            clicks.arm(at: timeline.sampleTime + Int64(sampleRate / 2), interval: interval)
            let deadline = monotonicNanoseconds() + 30_000_000_000
            while !clicks.isComplete {
                if let failure = io.failure { throw failure }
                try checkNotStopped()
                guard monotonicNanoseconds() < deadline else {
                    throw AudioError(.deviceUnavailable, "the device stalled during the calibration: \(timeline.sampleTime) frames in 30 s")
                }
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
            state.withLock { $0.calibrations = attempt }
            let found = clicks.roundTrips().sorted()
            let steady = io.xrunCount == xruns
            xrunsSeen = xrunsSeen || !steady
            if steady, found.count == CalibrationClicks.clicks, found.last! - found.first! <= agreement {
                return found[found.count / 2]
            }
            func better(_ a: (steady: Bool, found: [Int]), than b: (steady: Bool, found: [Int])) -> Bool {
                if a.steady != b.steady { return a.steady }
                if a.found.count != b.found.count { return a.found.count > b.found.count }
                return (a.found.last ?? 0) - (a.found.first ?? 0) < (b.found.last ?? 0) - (b.found.first ?? 0)
            }
            if best == nil || better((steady, found), than: best!) { best = (steady, found) }
            // Nothing came back on a steady device: no loop, and playing again will not make one.
            if found.isEmpty, steady, best!.found.isEmpty { break }
        }
        guard let best, !best.found.isEmpty else {
            throw AudioError(
                .deviceUnavailable,
                "none of the \(CalibrationClicks.clicks) calibration clicks came back within \(interval) frames"
                    + (xrunsSeen ? " (the device had xruns meanwhile)" : "") + ": the output does not reach "
                    + "the input (connect them: a JACK loopback, a PulseAudio monitor source, or a cable), or give --latency-ms")
        }
        io.report(
            warning: "the calibration clicks came back \(best.found.map(String.init).joined(separator: ", ")) frames late "
                + "in the best of \(Self.maximumCalibrations) tries (xruns, lost clicks or clicks more than "
                + "\(Int(Self.calibrationAgreement * 1000)) ms apart): the device's latency did not hold still, and the voice may be "
                + "off by their spread; their median is used (give --latency-ms to set it)")
        return best.found[best.found.count / 2]
    }

    /// start() gives up when stop() is called meanwhile (stop() waits for it, then finds nothing started).
    private func checkNotStopped() throws(AudioError) {
        try lifecycle.checkStarting()
    }

    private static func encodedOutputs(
        _ outputs: [LiveStreamSession.Output], _ c: Configuration, _ format: StreamFormat
    ) throws(AudioError) -> EncodedOutputs {
        try EncodedOutputs(
            outputs: outputs, sampleRate: format.sampleRate, channelCount: format.channelCount, bitRate: c.bitRate,
            rtmp: c.rtmp, bufferedSeconds: 2)
    }

    private func startDevice() async throws(AudioError) {
        let grant = try io.start()
        var processing = Int((io.captureProcessingLatency * sampleRate).rounded())
        var measured: Int?
        if let calibration {
            // Measured through the capture processing: its latency is in the figure.
            measured = try await calibrate(calibration, grant)
            processing = 0
        }
        let (roundTrip, source): (Int, String) =
            switch configuration.roundTrip {
            case .calibrate: (measured!, "calibration")
            case .milliseconds(let ms): (Int((ms * sampleRate / 1000).rounded()), "given")
            case .device:
                // What the device reports, and what the I/O unit adds between it and the graph.
                (Int(
                    ((Double(grant.inputLatencyFrames + grant.outputLatencyFrames) / grant.sampleRate
                        + io.conversionLatency + io.clockBridgeLatency) * sampleRate).rounded()), "device")
            }
        // The dry voice arrives one round trip and the capture processing late; the wet one the chain's latency later.
        let dry = roundTrip + processing
        let wet = dry + chainLatencyFrames
        guard wet <= songDelay.maximumDelayFrames else {
            throw AudioError(
                .invalidParameter,
                "the round trip and the voice's processing come to \(wet * 1000 / Int(sampleRate)) ms: more than the \(Int(Self.maximumShift)) s the song can be shifted by")
        }
        // Exact from the next cycle: the song's accompaniment is still silent.
        try songDelay.setDelayFrames(wet)
        try checkNotStopped()
        // Half a second on, every recorder starts on the same frame.
        let now = timeline.sampleTime
        let startTime = now + Int64(sampleRate / 2)
        for r in recorders {
            let skip: Int = switch r.shift {
                case .none: 0
                case .roundTrip: dry
                case .roundTripAndChain: wet
                }
            r.unit.startRecording(atSampleTime: startTime, skipFrames: Int64(skip))
        }
        encoderTap?.start(atSampleTime: startTime, skipFrames: Int64(wet))
        // The song's path renders on its own timeline from 0, ahead; its frame 0 plays at the start time.
        try player.schedule(region, at: 0)
        state.withLock { $0.songRegionStart = region.startFrame }
        try song.start(
            atSampleTime: startTime, cycleFrames: Int((Double(grant.periodFrames) * sampleRate / grant.sampleRate).rounded(.up)))
        state.withLock {
            $0.roundTrip = dry
            $0.source = source
            $0.startTime = startTime
            $0.scheduled = true
        }
        try follower?.start(graphFrame: startTime, songFrame: region.startFrame, tempo: configuration.tempo, roundTrip: Int64(dry))
    }

    /// Stops the device, completes the recordings, encodes what is buffered, completes the encoded files and
    /// unpublishes. During a start, breaks it off (servers not waited for, a calibration cut short) and returns
    /// once it has undone what it opened. Safe to call more than once.
    @discardableResult
    public func stop() async -> Summary {
        let first: Bool
        switch lifecycle.stopRequested() {
        case .waitForStop:
            await lifecycle.waitForStop()
            if let summary = finalSummary.withLock({ $0 }) { return summary }
            first = false
        case .nothing:
            if let summary = finalSummary.withLock({ $0 }) { return summary }
            first = false
        case .interruptStart:
            await encoded.withLock({ $0 })?.interrupt()
            // The start gives up at its next step (the calibration looks every 10 ms) and undoes what it opened; if
            // it got through anyway, what it started is stopped here.
            first = await lifecycle.waitForStart()
        case .stop:
            first = true
        }
        var failure: AudioError?
        var recorded: Int64 = 0
        var dropped: Int64 = 0
        if first {
            io.stop()
            song.stop()
            for r in recorders {
                do throws(AudioError) { recorded = max(recorded, try r.unit.finish()) } catch { if failure == nil { failure = error } }
                dropped += r.unit.droppedFrames
            }
            if let outputs = encoded.withLock({ $0 }) {
                if let error = await outputs.finish(), failure == nil { failure = error }
            }
        }
        let encodedOutputs = encoded.withLock { $0 }
        dropped += encodedOutputs?.droppedFrames ?? 0
        let score = first ? follower?.finish() : nil
        let s = state.withLock { $0 }
        let summary = Summary(
            seconds: Double(max(0, timeline.sampleTime - s.startTime)) / sampleRate, roundTripFrames: s.roundTrip,
            roundTripSource: s.source, xruns: io.xrunCount, accompanimentUnderruns: player.underruns + song.underruns,
            recordedFrames: recorded, droppedFrames: dropped, outputs: encodedOutputs?.statistics ?? [],
            error: failure ?? io.failure ?? song.failure, score: score, loudness: songLoudness.read())
        if first {
            finalSummary.withLock { $0 = summary }
            lifecycle.stopEnded()
        }
        return summary
    }

    /// Frames the recorders' or the encoder's writer fell too far behind for, so far (silence in their place).
    public var droppedFrames: Int64 {
        recorders.reduce(0) { $0 + $1.unit.droppedFrames } + (encoded.withLock { $0 }?.droppedFrames ?? 0)
    }

    /// The encoded song's outputs now (RTMP connections, files), in the order given; empty without any.
    public var outputStatistics: [LiveStreamSession.OutputStatistics] { encoded.withLock { $0 }?.statistics ?? [] }

    /// The publishers of the RTMP outputs, for their statistics streams (made again by a start that follows a
    /// failed one).
    public var rtmpPublishers: [RTMPPublisher] { encoded.withLock { $0 }?.publishers.map(\.1) ?? [] }

    /// The round trip the recordings are shifted by, in frames (known once started; with the capture processing's
    /// latency), and where it came from (``roundTripSource``).
    public var roundTripFrames: Int { state.withLock { $0.roundTrip } }
    /// Where ``roundTripFrames`` came from: "device", "calibration" or "given" (empty until started).
    public var roundTripSource: String { state.withLock { $0.source } }
    /// The calibrations the start played: 1, or more when one saw an xrun or its clicks disagreed; 0 without one.
    public var calibrations: Int { state.withLock { $0.calibrations } }

    /// True once the song has played to its end and what follows it has passed: the song's look-ahead and the
    /// time-pitch's, the round trip the recordings are shifted by (the voice sung to the last frames), the voice
    /// chain's tail time (its reverb and echoes), and 0.1 s. Poll it.
    public var songHasEnded: Bool {
        guard player.hasFinished else { return false }
        let now = timeline.sampleTime
        // The voice chain's tail too (a reverb's decay, a delay's echoes of the last words sung), at its settings now;
        // an echo that never dies away (feedback 100 %) is cut after the longest reverb decay there is.
        let chainTail = min(graph.tailTime(of: wetVoice), Double(ReverbUnit.decayTimeAt0HzSpec.range.upperBound))
        let tail = Int64((song.lookAhead + (timePitch?.latency ?? 0) + chainTail + 0.1) * sampleRate)
        return state.withLock { s -> Bool in
            guard s.scheduled else { return false }
            if s.endSeen == nil { s.endSeen = now }
            return now >= s.endSeen! + tail + Int64(s.roundTrip + chainLatencyFrames)
        }
    }

    /// A unit of the voice chain by its id in the graph file, for live control (`"room"` → its reverb).
    public func unit(named id: String) -> RenderUnit? { loaded?.units[id] }

    /// The accompaniment's live volume in dB, in the headphones and the song (`-.infinity` for none; clamped to −96 …
    /// +12), click-free, on top of any loudness gain (``accompanimentNormalization``). Any thread but the render
    /// thread.
    public var accompanimentVolume: Double {
        get { volumes.withLock { $0.accompaniment } }
        set { volumes.withLock { $0.accompaniment = Self.clamp(newValue); apply($0) } }
    }
    /// The voice's live volume in the song in dB (`-.infinity` for none; clamped to −96 … +12), click-free; the voice
    /// stems are recorded before it. Any thread but the render thread.
    public var voiceVolume: Double {
        get { volumes.withLock { $0.voice } }
        set { volumes.withLock { $0.voice = Self.clamp(newValue); apply($0) } }
    }
    /// The voice's live volume in the singer's headphones in dB (`-.infinity`: the accompaniment only; clamped to
    /// −96 … +12), click-free. Any thread but the render thread.
    public var monitorVoiceVolume: Double {
        get { volumes.withLock { $0.monitorVoice } }
        set { volumes.withLock { $0.monitorVoice = Self.clamp(newValue); apply($0) } }
    }

    /// Mutes the accompaniment in the headphones and the song, click-free like the volumes, which it leaves as they
    /// are (the accompaniment stem is recorded before it). Any thread but the render thread.
    public var isAccompanimentMuted: Bool {
        get { volumes.withLock { $0.accompanimentMuted } }
        set { volumes.withLock { $0.accompanimentMuted = newValue; apply($0) } }
    }
    /// Mutes the voice in the headphones and the song, click-free, the volumes left as they are (the voice stems are
    /// recorded before it). Any thread but the render thread.
    public var isVoiceMuted: Bool {
        get { volumes.withLock { $0.voiceMuted } }
        set { volumes.withLock { $0.voiceMuted = newValue; apply($0) } }
    }

    /// How far ahead of the device the song is rendered, in seconds: a key or tempo change is heard this much later
    /// (and the time-pitch's own look-ahead). 20 ms, or two device periods when they are longer; known once started.
    public var songLookAhead: Double { song.lookAhead }

    /// The file frame the ears are at: the player's position less what is rendered ahead of them — the frames
    /// queued and the time-pitch's look-ahead, at the rate it plays — never before the region's start. Exact on the
    /// song's worker between blocks; elsewhere a snapshot.
    private func heardFrame() -> Int64 {
        // Held by a pause where it was heard.
        if player.state == .paused { return player.position }
        let rate = timePitch?.currentRate ?? 1
        let ahead = Double(song.queuedFrames) + (timePitch?.latency ?? 0) * sampleRate
        let start = state.withLock { $0.songRegionStart }
        return max(start, player.position - Int64((ahead * rate).rounded()))
    }

    /// Where the song is as heard, in seconds of the file (the player's ``/AudioUnits/FilePlayerUnit/currentTime`` is
    /// ahead by what is rendered ahead: ``songLookAhead`` and the time-pitch's).
    public var songPosition: Double { Double(heardFrame()) / sampleRate }

    /// Makes a change to the song's player where it plays — on the song's worker, between two blocks — so that it is
    /// heard at once: what was rendered ahead is dropped (crossfaded over 5 ms), and the time-pitch starts again from
    /// the player (nothing of before the change stays in it).
    private func changeSong(_ body: @escaping @Sendable () throws(AudioError) -> Void) throws(AudioError) {
        let timePitch = timePitch
        try song.perform { () throws(AudioError) in
            try body()
            timePitch?.reset()
        }
    }

    /// Holds the song where it is heard (at once, faded); the recordings and the voice go on. Paused already: nothing.
    public func pauseSong() {
        let player = player
        try? changeSong { [self] () throws(AudioError) in
            guard player.state != .paused else { return }
            // The player is ahead of the ears: held where they are, it resumes where it was heard.
            let heard = heardFrame()
            player.pause()
            try? player.seek(toFrame: heard)
        }
        songMoved()
    }

    /// Goes on from where ``pauseSong()`` held the song (at once, faded in).
    public func resumeSong() {
        let player = player
        try? changeSong { player.resume() }
        songMoved()
    }

    /// Tells the score where the song is from now on (after a pause, resume, seek or new region).
    private func songMoved() {
        follower?.moved(
            graphFrame: timeline.sampleTime, songFrame: heardFrame(),
            rate: player.state == .paused ? 0 : (timePitch?.currentRate ?? configuration.tempo))
    }

    /// The chart's lyrics where the song is, the voice's pitch and the note to sing, and the score so far; nil
    /// without ``Configuration/chart``. Any thread (a screen reads it every frame).
    public var singAlong: SingAlongReadout? { follower?.readout(at: songPosition) }

    /// Moves the song to `seconds` of the file, inside the region playing (at once, faded).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` outside the region, `.invalidState` before the start or
    ///   once the song has finished.
    public func seekSong(toSeconds seconds: Double) throws(AudioError) {
        try checkSongStarted()
        let player = player
        let frame = Int64((seconds * sampleRate).rounded())
        try changeSong { () throws(AudioError) in try player.seek(toFrame: frame) }
        songMoved()
    }

    /// Plays `region` of the song from now on (at once, faded), replacing what plays: a loop, another part.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a region outside the file, `.invalidState` before
    ///   the start.
    public func playSong(_ region: RegionInSeconds) throws(AudioError) {
        try checkSongStarted()
        let player = player
        let frames = region.frames(at: sampleRate)
        try changeSong { () throws(AudioError) in try player.schedule(frames) }
        state.withLock { $0.songRegionStart = frames.startFrame }
        songMoved()
    }

    /// The song starts with the session (``Configuration/region``, ``Configuration/regionInSeconds``).
    private func checkSongStarted() throws(AudioError) {
        guard state.withLock({ $0.scheduled }) else {
            throw AudioError(.invalidState, "the song starts with the session: seek or play a part once it has started")
        }
    }

    /// The key change in cents (−2400 … 2400), live when the session has a time-pitch unit (a key or tempo change
    /// given, or ``Configuration/keyAdjustable``); 0 and unchangeable without one.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` without a time-pitch unit, `.invalidParameter` out of range.
    public func setKey(cents: Double) throws(AudioError) {
        guard let timePitch else {
            throw AudioError(.invalidState, "the key can change while singing only with keyAdjustable (or a key or tempo change) set")
        }
        try timePitch.pitch.set(Float(cents))
        // The singer hears the new key once what is rendered ahead has played: from then on it is scored in it.
        let heard = timeline.sampleTime + Int64(((song.lookAhead + timePitch.latency) * sampleRate).rounded())
        follower?.setKey(cents: cents, fromGraphFrame: heard)
    }
    /// The key change in cents now (+200: two semitones up): the time-pitch unit's pitch, 0 without one. Changed by
    /// ``setKey(cents:)``.
    public var keyCents: Double { timePitch.map { Double($0.pitch.value) } ?? 0 }

    /// Peak and RMS levels (linear) since the previous reading.
    public struct Meters: Sendable, Hashable {
        /// The wet voice as sung, before any volume (a muted or silent monitor voice does not hide it).
        public let voice: MeterReading
        /// The wet voice as the headphones get it (after the monitor voice volume).
        public let monitorVoice: MeterReading
        /// The accompaniment (after its volume).
        public let accompaniment: MeterReading
        /// The headphones' mix, as they get it (silence while the route is lost).
        public let output: MeterReading
        /// The song's loudness (what is encoded and recorded as `song.wav`: the accompaniment and the voice): the
        /// meter's latest, not a reading since the previous one.
        public let loudness: LoudnessReading
    }

    /// Levels for a VU display; each reading covers what passed since the previous one.
    public var meters: Meters {
        Meters(
            voice: voiceMeter.read(), monitorVoice: monitor.meter(bus: 1), accompaniment: monitor.meter(bus: 0),
            output: routeGate.meter.read(), loudness: songLoudness.read())
    }

    /// The device's cycles so far, as ``Configuration/cycleTimingCapacity`` asked: when each started, how long it
    /// took, and how much of that the device's thread ran.
    public var cycleTimings: [CycleTiming] { io.cycleTimings }

    /// The error that stopped the device for good (reconnect off, or not back within the timeout), or the encoder
    /// or an encoded file.
    public var failure: AudioError? { io.failure ?? song.failure ?? encoded.withLock { $0 }?.failure }

    /// False while the route is lost (``/AudioDevices/DeviceEvent/routeLost(_:)``): the headphones are silent, the
    /// recordings and outputs go on; true again when it returns (``/AudioDevices/DeviceEvent/routeReturned``).
    public var isOutputRouted: Bool { io.isOutputRouted }

    /// True while the device is open: from a start that got that far to the stop.
    public var isDeviceOpen: Bool { io.isStarted }

    /// Device events: start, xruns, faults, reconnects, route changes.
    public var deviceEvents: AsyncStream<DeviceEvent> { io.events }
    /// The device's under- and overruns since the session was made, those before reconnects included.
    public var xruns: Int { io.xrunCount }
    /// What the device granted (its rate, period and latencies) while it runs; nil before the start, while it is
    /// reconnecting and after the stop.
    public var deviceGrant: DeviceGrant? { io.grant }

    private static func clamp(_ dB: Double) -> Double { dB == -.infinity || dB.isNaN ? -.infinity : min(12, max(-96, dB)) }
    private static func linear(_ dB: Double) -> Float { dB == -.infinity ? 0 : Float(pow(10.0, dB / 20)) }

    /// Under the volumes' lock, so the mixers end with the last values set.
    private func apply(_ v: Volumes) {
        // A mixer's volume is at most 4 (+12 dB): a loud volume on a normalisation gain stops there.
        let accompaniment = v.accompanimentMuted ? 0 : min(4, Self.linear(v.accompaniment) * v.normalization)
        try? monitor.setVolume(accompaniment, bus: 0)
        echoReference?.gain = accompaniment
        try? monitor.setVolume(v.voiceMuted ? 0 : Self.linear(v.monitorVoice), bus: 1)
        try? songMix.setVolume(accompaniment, bus: 0)
        try? songMix.setVolume(v.voiceMuted ? 0 : Self.linear(v.voice), bus: 1)
    }
}

/// Passes its input through and keeps the sample time after the last cycle: the graph's timeline, read by the control
/// thread to schedule on it.
final class TimelineTap: RenderUnit {
    let core: UnitCore
    private let end = Atomic<Int64>(0)

    init(format: StreamFormat) {
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "timeline", inputs: [f], outputs: [f])
    }

    var sampleTime: Int64 { end.load(ordering: .acquiring) }

    func render(_ context: RenderContext) {
        context.output(0).copy(from: context.input(0))
        end.store(context.timeStamp.sampleTime + Int64(context.frameCount), ordering: .releasing)
    }
}

/// Passes the song through and hands it to the encoder from a sample time on, dropping a skip first (the same start
/// and shift as the song's recorders): frame 0 of the encoded song is frame 0 of `song.wav`. Real-time safe.
final class EncoderTap: RenderUnit {
    let core: UnitCore
    private let from = Atomic<Int64>(.max)
    private let skipRequest = Atomic<Int64>(0)
    private struct State {
        /// Set by the control thread while the device is stopped.
        var outputs: EncodedOutputs?
        var armed = false
        var toSkip: Int64 = 0
        var encodedFrames: Int64 = 0
    }
    private let state = RenderThreadBound(State())
    private let sampleRate: Double

    init(format: StreamFormat) {
        sampleRate = format.sampleRate
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "encoderTap", inputs: [f], outputs: [f])
    }

    /// Where the song goes. Control thread, while the device is stopped.
    var outputs: EncodedOutputs? {
        get { state.whileStopped.outputs }
        set { state.whileStopped.outputs = newValue }
    }

    /// Encodes from `sampleTime` on, the first `skipFrames` of it dropped. Once, before that time comes.
    func start(atSampleTime sampleTime: Int64, skipFrames: Int64) {
        skipRequest.store(max(0, skipFrames), ordering: .releasing)
        from.store(sampleTime, ordering: .releasing)
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        context.output(0).copy(from: input)
        guard let outputs = state.onRenderThread.outputs else { return }
        let start = from.load(ordering: .acquiring)
        let t0 = context.timeStamp.sampleTime
        let frames = context.frameCount
        if t0 + Int64(frames) <= start { return }
        if !state.onRenderThread.armed {
            state.onRenderThread.armed = true
            state.onRenderThread.toSkip = skipRequest.load(ordering: .acquiring)
        }
        var offset = start > t0 ? Int(start - t0) : 0
        let toSkip = state.onRenderThread.toSkip
        if toSkip > 0 {
            let skip = Int(min(toSkip, Int64(frames - offset)))
            state.onRenderThread.toSkip -= Int64(skip)
            offset += skip
        }
        guard offset < frames else { return }
        let block = input.slice(from: offset, frames: frames - offset)
        let lead = UInt64(Double(offset) / sampleRate * 1e9)
        outputs.push(block, sampleTime: state.onRenderThread.encodedFrames, hostTime: context.timeStamp.hostTime + lead)
        state.onRenderThread.encodedFrames += Int64(block.frameCount)
    }
}

/// Passes the headphones' mix while the route is there; when it is lost, fades to silence within 5 ms, and when it
/// returns fades back in over 20 ms; meters what the headphones get. Real-time safe (an atomic load a cycle).
final class RouteGate: RenderUnit {
    let core: UnitCore
    /// The headphones' level, after the gate.
    let meter = LevelMeter()
    private let route: OutputRoute
    private let fadeOutFrames: Int
    private let fadeInFrames: Int
    private let gain = RenderThreadBound(SmoothedValue(1, rampFrames: 0))

    init(format: StreamFormat, route: OutputRoute) {
        self.route = route
        fadeOutFrames = Int((0.005 * format.sampleRate).rounded())
        fadeInFrames = Int((0.02 * format.sampleRate).rounded())
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "routeGate", inputs: [f], outputs: [f])
    }

    func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        let target: Float = route.isRouted ? 1 : 0
        if target != gain.onRenderThread.targetValue {
            gain.onRenderThread.rampFrames = target == 0 ? fadeOutFrames : fadeInFrames
            gain.onRenderThread.setTarget(target)
        }
        output.copy(from: input, gain: &gain.onRenderThread)
        meter.accumulate(output)
    }
}

/// Calibration on the running device: plays clicks into the headphones' mix and records the microphone meanwhile,
/// both on the graph's timeline, so the round trip is measured with the very streams the song will use (a sound
/// server gives each new stream a latency of its own: a measurement on streams opened for it alone can miss by tens
/// of milliseconds). Real-time safe: the recording is allocated before it is armed.
final class CalibrationClicks: RenderUnit, @unchecked Sendable {
    // Unchecked Sendable: recording/interval/total handed over by the `from` atomic (set before it is stored, read after `rendered`), not by a stop
    let core: UnitCore
    static let clicks = 3
    private let template: UnsafeMutableBufferPointer<Float>
    private let from = Atomic<Int64>(.max)
    /// The sample time after the last cycle this unit rendered, stored after its writes (releasing): the control
    /// thread reads the recording only once this has passed its end (the timeline tap ahead of this unit in the
    /// graph stores its time before this unit has written the cycle).
    private let rendered = Atomic<Int64>(.min)
    // Set by the control thread before `from` is published.
    private var interval = 0
    private var total = 0
    private var recording: UnsafeMutableBufferPointer<Float>?

    init(format: StreamFormat, micChannels: Int) throws(AudioError) {
        let samples = LatencyMeter.clickSamples(sampleRate: format.sampleRate)
        template = .allocate(capacity: samples.count)
        _ = template.initialize(from: samples)
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let mic = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: micChannels)
        core = UnitCore(kind: "calibration", inputs: [f, mic], outputs: [f])
    }

    deinit {
        template.deallocate()
        recording?.deallocate()
    }

    /// Plays ``clicks`` clicks from sample time `start`, one every `interval` frames, and records the microphone
    /// until a further interval has passed. Control thread: before the device starts, or again with the same
    /// interval once ``isComplete`` (every later cycle lies past the last recording, so none writes to it).
    func arm(at start: Int64, interval: Int) {
        if let recording, interval == self.interval {
            recording.update(repeating: 0)
        } else {
            precondition(recording == nil, "a calibration is armed again with its interval")
            self.interval = interval
            total = (Self.clicks + 1) * interval
            let buffer = UnsafeMutableBufferPointer<Float>.allocate(capacity: total)
            buffer.initialize(repeating: 0)
            recording = buffer
        }
        from.store(start, ordering: .releasing)
    }

    /// Forgets a calibration, with the device stopped (a start that failed; the next arms again).
    func disarm() {
        from.store(.max, ordering: .releasing)
        recording?.deallocate()
        recording = nil
    }

    /// Whether the armed calibration's recording is complete: the cycle that wrote its last sample has returned.
    var isComplete: Bool {
        let start = from.load(ordering: .acquiring)
        return start != .max && rendered.load(ordering: .acquiring) >= start + Int64(total)
    }

    /// Each click's round trip in frames (those found), once ``isComplete``.
    func roundTrips() -> [Int] {
        guard let recording else { return [] }
        let emitted = (0..<Self.clicks).map { $0 * interval }
        return LatencyMeter.locateClicks(
            in: UnsafeBufferPointer(recording), emittedAt: emitted, within: interval, sampleRate: sampleRate
        ).frames
    }

    private var sampleRate: Double { outputFormats[0].sampleRate }

    func render(_ context: RenderContext) {
        defer { rendered.store(context.timeStamp.sampleTime + Int64(context.frameCount), ordering: .releasing) }
        let output = context.output(0)
        output.copy(from: context.input(0))
        let start = from.load(ordering: .acquiring)
        guard start != .max, let recording else { return }
        let t0 = context.timeStamp.sampleTime - start
        let frames = context.frameCount
        if t0 >= Int64(total) || t0 + Int64(frames) <= 0 { return }
        let mic = context.input(1)[0]
        let clickLength = template.count
        for i in 0..<frames {
            let t = Int(t0) + i
            guard t >= 0, t < total else { continue }
            recording[t] = mic[i]
            let k = t % interval
            if t < Self.clicks * interval, k < clickLength {
                for c in 0..<output.channelCount { output[c][i] += template[k] }
            }
        }
    }
}
