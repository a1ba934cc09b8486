import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import CSystemCalls
import FoundationEssentials
import Synchronization

/// A karaoke room: what lasts the evening while songs come and go. The room holds the device and its supervisor,
/// the voice with its chain and ear monitoring, the encoded outputs (files and RTMP servers: one connection for the
/// whole evening), the room's meters and loudness; a ``KaraokeTake`` holds one song. Takes start at a sample time
/// and end while the room runs: the device stays open, the singer goes on hearing their voice, and the stream goes
/// on with continuous timestamps (between takes it carries the voice alone).
///
/// ```swift
/// var room = KaraokeRoom.Configuration()
/// room.voiceChain = "Examples/graphs/voice-chain.json"
/// room.outputs = [try .init(parsing: "rtmp://127.0.0.1/live/room")]
/// let k = try KaraokeRoom(room)
/// try await k.start()
/// for song in ["one.m4a", "two.m4a"] {
///     var c = KaraokeTake.Configuration(song: song)
///     c.stemsDirectory = "stems-\(FilePath.lastComponent(song))"
///     let take = try KaraokeTake(c, room: k)
///     try await k.play(take, after: 5)
///     while !take.songHasEnded { try await Task.sleep(nanoseconds: 100_000_000) }
///     let summary = await k.finish(take)
/// }
/// _ = await k.stop()
/// ```
///
/// The room's graph runs on the device's thread, one cycle; a take adds its song (rendered ahead on a worker),
/// its stem recorders and its pitch tracker, and takes them away at its end:
///
/// ```
/// take:     song (filePlayer) ─ [timePitch] ─▶ ring ─▶ accompaniment bus (take n on bus n mod 2)
/// device:   accompaniment ─┬──────────────────── monitor mix ── headphones
///                          └─ delay R ─┐            ▲
/// microphone ─ dry ─ voice chain ─ wet ┴ song mix ─ encoder, song.wav, loudness
/// ```
///
/// **The sync rule** is ``KaraokeSession``'s: the voice that arrives at sample time t + R belongs with the
/// accompaniment rendered at t, R being the round trip; the song mix delays the accompaniment by R (and the voice
/// chain's latency), and every recording and the encoder drop that much of the voice's start. It is found once,
/// when the room starts, and holds for every take.
public final class KaraokeRoom: Sendable {
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

        /// A room with every setting at its default.
        public init() {}
    }

    /// What the room did over the evening.
    public struct Summary: Sendable {
        /// Seconds from the room's start (where its recording and outputs begin) to the stop, on the device's timeline.
        public let seconds: Double
        /// The round trip the voice was shifted by, in frames (with the capture processing's latency).
        public let roundTripFrames: Int
        /// Where the round trip came from: "device", "calibration" or "given" (empty when the room never started).
        public let roundTripSource: String
        /// The device's under- and overruns.
        public let xruns: Int
        /// Takes played.
        public let takes: Int
        /// Frames in the room's WAV recording (0 without one).
        public let recordedFrames: Int64
        /// Frames the room's recording or the encoder's writer fell too far behind for.
        public let droppedFrames: Int64
        /// The encoded outputs and what each did.
        public let outputs: [LiveStreamSession.OutputStatistics]
        /// The first error completing the recording or an output, else the error that stopped the device.
        public let error: AudioError?
        /// The loudness of what was encoded over the evening.
        public let loudness: LoudnessReading
    }

    /// The configuration the room was made with.
    public let configuration: Configuration
    /// The room's rate in Hz: the voice chain's, or ``Configuration/sampleRate`` without one.
    public let sampleRate: Double
    let graph: RenderGraph
    let loaded: LoadedGraph?
    /// The microphone's unit (its channels are the dry voice's).
    let microphone: InputUnit
    let monitor: MixerUnit
    /// Takes' songs come in here, take n on bus n mod 2 (one ends while the next is made).
    let accompaniment: MixerUnit
    let voiceMeter: MeterUnit
    let songLoudness: LoudnessMeterUnit
    let songMix: MixerUnit
    let songDelay: SampleDelayUnit
    /// The stages takes connect to: "mic", "wet", "accompaniment", "song-mix".
    let stages: [String: NodeID]
    let wetVoice: NodeID
    let timeline: TimelineTap
    let routeGate: RouteGate
    let calibration: CalibrationClicks?
    let voiceProcessingUnit: VoiceProcessingUnit?
    let echoReference: CaptureReferenceTap?
    let encoderTap: EncoderTap?
    let encoded = Locked<EncodedOutputs?>(nil)
    private let roomOutputs: [LiveStreamSession.Output]
    /// The room's own WAV recording of the song mix (``Configuration/recordPath`` ending in `.wav`).
    private let recorder: RecorderUnit?
    /// Frames from the microphone to the wet voice.
    let chainLatencyFrames: Int
    let io: IOUnit
    let volumes = Locked<Volumes>(Volumes())
    let state = Locked<RoomState>(RoomState())
    let lifecycle: LockedLifecycle
    private let finalSummary = Locked<(Summary, KaraokeTake.Summary?)?>(nil)
    /// Set by ``KaraokeControl/stop``.
    let stopRequest = Atomic<Bool>(false)
    /// Set by ``KaraokeControl/skip``, taken by ``takeSkipRequest()``.
    let skipRequest = Atomic<Bool>(false)

    struct Volumes {
        var accompaniment = 0.0, voice = 0.0, monitorVoice = 0.0
        var accompanimentMuted = false, voiceMuted = false
        /// The playing take's loudness normalisation, linear.
        var normalization: Float = 1
    }

    struct RoomState {
        var started = false
        var roundTrip = 0, source = "", startTime: Int64 = 0, calibrations = 0
        /// The device's cycle at the room's rate.
        var cycleFrames = 0
        /// Takes played so far.
        var takes = 0
        /// Where the last take's song ended on the room's timeline (its last frame's sample time): the gap before the
        /// next take runs from there.
        var lastSongEnd: Int64 = 0
        /// Held weakly: the take's owner keeps it (a take holds its room).
        weak var current: KaraokeTake?
    }

    /// Checks and builds everything that can be before the device opens.
    /// - Throws: ``/AudioCore/AudioError``: a voice chain without exactly one input node, a volume out of range, a
    ///   record path that is neither `.wav` nor an AAC file, an output given twice or in a folder that does not
    ///   exist, a bad URL; a stage of the graph that cannot be built names itself.
    public convenience init(_ configuration: Configuration) throws(AudioError) {
        try self.init(configuration, lifecycleName: "the karaoke room")
    }

    /// - Parameter lifecycleName: what the room is called in lifecycle errors ("the karaoke session" for a session's).
    init(_ configuration: Configuration, lifecycleName: String) throws(AudioError) {
        self.configuration = configuration
        lifecycle = LockedLifecycle(name: lifecycleName)
        let (outputs, wavRecord) = try Self.checkedOutputs(configuration)
        let chain = try VoiceChain(configuration, maximumFrames: Self.maximumFrames)
        let format = chain.graph.format
        let rate = format.sampleRate
        graph = chain.graph
        loaded = chain.loaded
        wetVoice = chain.wet
        microphone = chain.input
        sampleRate = rate
        chainLatencyFrames = Int((chain.latency * rate).rounded())
        roomOutputs = outputs
        let encoded = outputs.isEmpty ? nil : try Self.encodedOutputs(outputs, configuration, format)
        self.encoded.withLock { $0 = encoded }
        let io = try Self.device(configuration, input: chain.input, format: format)
        self.io = io
        try io.setInputUnit(chain.input)
        try io.setOutputGraph(chain.graph)
        let canceller = try configuration.voiceProcessing ? io.enableVoiceProcessing(reference: .graphTap) : nil
        try canceller?.echoCancellation.set(1)
        voiceProcessingUnit = canceller
        echoReference = try canceller == nil ? nil : CaptureReferenceTap(format: format, io: io, maximumFrames: Self.maximumFrames)
        accompaniment = try MixerUnit(format: format, inputs: 2)
        songDelay = try SampleDelayUnit(format: format, maximumDelayFrames: Int((Self.maximumShift * rate).rounded()))
        songMix = try MixerUnit(format: format, inputs: 2)
        monitor = try MixerUnit(format: format, inputs: 2)
        voiceMeter = try MeterUnit(format: try chain.graph.unit(chain.wet).outputFormats[0])
        songLoudness = try LoudnessMeterUnit(format: format)
        encoderTap = encoded == nil ? nil : EncoderTap(format: format)
        timeline = TimelineTap(format: format)
        calibration = try configuration.roundTrip == .calibrate
            ? CalibrationClicks(format: format, micChannels: chain.input.outputFormats[0].channelCount) : nil
        routeGate = RouteGate(format: format, route: io.outputRoute)
        recorder = try wavRecord.map { path throws(AudioError) in
            try RecorderUnit(format: format, path: path, waitsForStart: true)
        }

        // The graph, a stage an entry. The accompaniment is what the takes bring (silence between them); the song mix
        // is the accompaniment delayed by the round trip and the wet voice; the monitor is the accompaniment and the
        // wet voice; the encoder's tap, the loudness and the voice meter lead nowhere (sinks, rendered every cycle).
        var g = StageGraph(chain.graph, known: ["mic": chain.mic, "wet": chain.wet])
        try g.add("accompaniment", accompaniment)
        try g.add("song-delay", songDelay, from: ["accompaniment"])
        try g.add("song-mix", songMix, from: ["song-delay", "wet"])
        if let recorder { try g.add("record", recorder, from: ["song-mix"], sink: true) }
        if let encoderTap { try g.add("song-encoder", encoderTap, from: ["song-mix"], sink: true) }
        try g.add("voice-meter", voiceMeter, from: ["wet"], sink: true)
        try g.add("song-loudness", songLoudness, from: ["song-mix"], sink: true)
        if let echoReference { try g.add("echo-reference", echoReference, from: ["accompaniment"]) }
        try g.add("monitor", monitor, from: [echoReference == nil ? "accompaniment" : "echo-reference", "wet"])
        try g.add("timeline", timeline, from: ["monitor"])
        if let calibration { try g.add("calibration", calibration, from: ["timeline", "mic"]) }
        try g.add("route-gate", routeGate, from: [calibration == nil ? "timeline" : "calibration"])
        try g.output(from: "route-gate")
        stages = ["mic": chain.mic, "wet": chain.wet, "accompaniment": g["accompaniment"]!, "song-mix": g["song-mix"]!]
        volumes.withLock {
            $0.accompaniment = configuration.accompanimentVolume
            $0.voice = configuration.voiceVolume
            $0.monitorVoice = configuration.monitorVoiceVolume
            apply($0)
        }
    }

    deinit {
        io.stop()
        _ = try? recorder?.finish()
    }

    /// The largest cycle the graph renders.
    static let maximumFrames = max(DeviceRequest.maximumPeriodFrames, 4096)
    /// Seconds the song can be shifted by at most: the round trip, the capture processing and the voice chain.
    static let maximumShift = 2.0
    /// Seconds between the device's start and the room's first frame (the streams settle, the song fills its ring).
    static let startLead = 0.5

    // MARK: Lifecycle

    /// Finds the round trip (a calibration plays clicks first), opens the device and the outputs, and starts the
    /// room's recording and outputs half a second later — with `take`'s song, when given, on that same frame (its
    /// loudness measured first, before the device opens).
    /// - Throws: ``/AudioCore/AudioError`` from the calibration, the device, the outputs or the take; `.invalidState`
    ///   once started, stopped, or stopped meanwhile. After a failure the device is stopped again, nothing has been
    ///   recorded, and (but for a stop) `start()` may be called again.
    public func start(playing take: KaraokeTake? = nil) async throws(AudioError) {
        try lifecycle.startRequested()
        var opened: EncodedOutputs?
        do throws(AudioError) {
            if let take {
                let lifecycle = self.lifecycle
                try await take.measureLoudness(stopped: { lifecycle.state == .starting(stopRequested: true) })
                try lifecycle.checkStarting()
            }
            if let tap = encoderTap {
                let outputs = try encoded.withLock { e throws(AudioError) -> EncodedOutputs in
                    if let e { return e }
                    let made = try Self.encodedOutputs(roomOutputs, configuration, graph.format)
                    e = made
                    return made
                }
                try await outputs.start()
                opened = outputs
                try lifecycle.checkStarting()
                tap.outputs = outputs  // the device is stopped: its thread starts after this
            }
            try await startDevice()
            if let take { try schedule(take, at: state.withLock { $0.startTime }) }
        } catch {
            io.stop()
            calibration?.disarm()
            if let take { unschedule(take) }
            await opened?.abandon()
            if encoderTap != nil { encoded.withLock { $0 = nil } }
            let interrupted = lifecycle.startEnded(succeeded: false)
            throw interrupted ? AudioError(.invalidState, "\(lifecycle.name) was stopped while it started") : error
        }
        lifecycle.startEnded(succeeded: true)
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
                (Int(
                    ((Double(grant.inputLatencyFrames + grant.outputLatencyFrames) / grant.sampleRate
                        + io.conversionLatency + io.clockBridgeLatency) * sampleRate).rounded()), "device")
            }
        let dry = roundTrip + processing
        let wet = dry + chainLatencyFrames
        guard wet <= songDelay.maximumDelayFrames else {
            throw AudioError(
                .invalidParameter,
                "the round trip and the voice's processing come to \(wet * 1000 / Int(sampleRate)) ms: more than the \(Int(Self.maximumShift)) s the song can be shifted by")
        }
        // Exact from the next cycle: the accompaniment is still silent.
        try songDelay.setDelayFrames(wet)
        try lifecycle.checkStarting()
        let startTime = timeline.sampleTime + Int64(sampleRate * Self.startLead)
        recorder?.startRecording(atSampleTime: startTime, skipFrames: Int64(wet))
        encoderTap?.start(atSampleTime: startTime, skipFrames: Int64(wet))
        // A recorded singer (a virtual device holding its capture) sings frame 0 to the room's first frame: it arrives
        // one round trip later, where the dry stem's frame 0 is taken.
        io.startCapture(atSampleTime: Int64((Double(startTime + Int64(dry)) * grant.sampleRate / sampleRate).rounded()))
        state.withLock {
            $0.roundTrip = dry
            $0.source = source
            $0.startTime = startTime
            $0.cycleFrames = Int((Double(grant.periodFrames) * sampleRate / grant.sampleRate).rounded(.up))
            $0.started = true
        }
    }

    /// Stops the device, ends the take playing (its stems complete), completes the room's recording and outputs and
    /// unpublishes. During a start, breaks it off and returns once it has undone what it opened. Safe to call more
    /// than once.
    @discardableResult
    public func stop() async -> Summary { await stopRoom().room }

    /// ``stop()``, with the summary of the take that was playing.
    func stopRoom() async -> (room: Summary, take: KaraokeTake.Summary?) {
        let first: Bool
        switch lifecycle.stopRequested() {
        case .waitForStop:
            await lifecycle.waitForStop()
            if let s = finalSummary.withLock({ $0 }) { return s }
            first = false
        case .nothing:
            if let s = finalSummary.withLock({ $0 }) { return s }
            first = false
        case .interruptStart:
            await encoded.withLock({ $0 })?.interrupt()
            first = await lifecycle.waitForStart()
        case .stop:
            first = true
        }
        var failure: AudioError?
        var recorded: Int64 = 0
        var takeSummary: KaraokeTake.Summary?
        if first {
            io.stop()
            if let take = state.withLock({ $0.current }) { takeSummary = await finish(take, deviceStopped: true) }
            if let recorder {
                do throws(AudioError) { recorded = try recorder.finish() } catch { failure = error }
            }
            if let outputs = encoded.withLock({ $0 }) {
                if let error = await outputs.finish(), failure == nil { failure = error }
            }
        }
        let outputs = encoded.withLock { $0 }
        let s = state.withLock { $0 }
        let summary = Summary(
            seconds: s.started ? Double(max(0, timeline.sampleTime - s.startTime)) / sampleRate : 0,
            roundTripFrames: s.roundTrip, roundTripSource: s.source, xruns: io.xrunCount, takes: s.takes,
            recordedFrames: recorded, droppedFrames: (recorder?.droppedFrames ?? 0) + (outputs?.droppedFrames ?? 0),
            outputs: outputs?.statistics ?? [], error: failure ?? io.failure, loudness: songLoudness.read())
        if first {
            finalSummary.withLock { $0 = (summary, takeSummary) }
            lifecycle.stopEnded()
        }
        return (summary, takeSummary)
    }

    // MARK: Takes

    /// Plays `take` `gap` seconds after the last take's song ended (its last frame; with no take before, from now),
    /// or a quarter of a second from now when that is later (the song's worker fills its ring meanwhile) — at the
    /// room's first frame when that is later still (a take given right after the start begins with the room). Its
    /// loudness is measured first when it asks for normalisation. The take playing before must have been finished
    /// (``finish(_:)``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` before the start, after the stop, while another take plays
    ///   or for a take played before; from the loudness measurement or the graph.
    public func play(_ take: KaraokeTake, after gap: Double = 0) async throws(AudioError) {
        guard gap.isFinite, gap >= 0, gap <= 3600 else {
            throw AudioError(.invalidParameter, "the gap before a take is 0 … 3600 s, got \(gap)")
        }
        try checkRunning()
        // What the takes before made and freed (a stretcher, a decoder, a pitch tracker) goes back to the system: the
        // allocator would keep it, and an evening of takes would grow by what each left in its arenas.
        _ = la_release_free_memory()
        try await take.measureLoudness(stopped: { [lifecycle] in lifecycle.state != .running })
        try checkRunning()
        let s = state.withLock { $0 }
        // The song's worker needs a moment to fill its ring: a quarter of a second at least.
        let now = timeline.sampleTime
        let afterLast = (s.takes == 0 ? now : s.lastSongEnd) + Int64((gap * sampleRate).rounded())
        do throws(AudioError) {
            try schedule(take, at: max(s.startTime, now + Int64(sampleRate / 4), afterLast))
        } catch {
            unschedule(take)
            throw error
        }
    }

    private func checkRunning() throws(AudioError) {
        switch lifecycle.state {
        case .running: return
        case .idle, .starting: throw AudioError(.invalidState, "a take plays in a room that has started")
        case .stopping, .stopped: throw AudioError(.invalidState, "the karaoke room was stopped")
        }
    }

    /// Adds the take's stages to the running graph and starts them at `startTime`.
    private func schedule(_ take: KaraokeTake, at startTime: Int64) throws(AudioError) {
        guard take.room === self else { throw AudioError(.invalidParameter, "the take was made for another room") }
        let number = try state.withLock { s throws(AudioError) -> Int in
            guard s.current == nil else {
                throw AudioError(.invalidState, "take \(s.takes) is still playing: finish it before the next")
            }
            s.takes += 1
            s.current = take
            return s.takes
        }
        let s = state.withLock { $0 }
        try take.attach(to: self, number: number, startTime: startTime, roundTrip: s.roundTrip, cycleFrames: s.cycleFrames)
        volumes.withLock {
            $0.normalization = take.normalizationGain
            apply($0)
        }
    }

    /// Takes a take that failed to start out of the graph.
    private func unschedule(_ take: KaraokeTake) {
        take.detach()
        state.withLock { if $0.current === take { $0.current = nil } }
    }

    /// The take playing (from ``play(_:after:)`` to ``finish(_:)``), if any.
    public var currentTake: KaraokeTake? { state.withLock { $0.current } }

    /// Takes played so far, the one playing included.
    public var takeCount: Int { state.withLock { $0.takes } }

    /// Ends `take` where it is: its song stops (what is queued plays out), its stages leave the graph, its stems
    /// and score are completed. The room, its voice and its outputs go on. Safe to call more than once.
    public func finish(_ take: KaraokeTake) async -> KaraokeTake.Summary {
        await finish(take, deviceStopped: false)
    }

    private func finish(_ take: KaraokeTake, deviceStopped: Bool) async -> KaraokeTake.Summary {
        if let done = take.finalSummary { return done }
        let removedAt = timeline.sampleTime
        take.detach()
        // The render thread takes the new schedule at its next cycle: once two cycles have passed, nothing renders
        // the take's units (a stopped device renders nothing).
        if !deviceStopped, io.isStarted {
            let cycle = Int64(max(1, state.withLock { $0.cycleFrames }))
            let deadline = monotonicNanoseconds() + 500_000_000
            while timeline.sampleTime < removedAt + 2 * cycle, monotonicNanoseconds() < deadline, io.isStarted {
                try? await Task.sleep(nanoseconds: 2_000_000)
            }
        }
        // The schedules that held the take's units, freed now rather than at the next change of the graph.
        graph.collectGarbage()
        let now = timeline.sampleTime
        let summary = take.complete(at: now)
        let ended = take.nominalSongEnd ?? take.seenSongEnd ?? now
        state.withLock {
            if $0.current === take { $0.current = nil }
            $0.lastSongEnd = min(ended, now)
        }
        return summary
    }

    /// ``KaraokeSession``'s start lead, for tests.
    var startTime: Int64 { state.withLock { $0.startTime } }

    /// The round trip the recordings are shifted by, in frames (known once started; with the capture processing's
    /// latency).
    public var roundTripFrames: Int { state.withLock { $0.roundTrip } }
    /// Where ``roundTripFrames`` came from: "device", "calibration" or "given" (empty until started).
    public var roundTripSource: String { state.withLock { $0.source } }
    /// The calibrations the start played: 1, or more when one saw an xrun or its clicks disagreed; 0 without one.
    public var calibrations: Int { state.withLock { $0.calibrations } }
    /// Seconds of the room's timeline since its first frame (0 before it).
    public var elapsed: Double {
        let s = state.withLock { $0 }
        return s.started ? Double(max(0, timeline.sampleTime - s.startTime)) / sampleRate : 0
    }

    // MARK: Parts

    private static func encodedOutputs(
        _ outputs: [LiveStreamSession.Output], _ c: Configuration, _ format: StreamFormat
    ) throws(AudioError) -> EncodedOutputs {
        try EncodedOutputs(
            outputs: outputs, sampleRate: format.sampleRate, channelCount: format.channelCount, bitRate: c.bitRate,
            rtmp: c.rtmp, bufferedSeconds: 2)
    }

    /// Checks the volumes and the record path; the encoded outputs (the configuration's, and the record path when
    /// it is not a WAV), and the WAV the song is recorded to.
    static func checkedOutputs(_ configuration: Configuration) throws(AudioError)
        -> (outputs: [LiveStreamSession.Output], wavRecord: String?)
    {
        for (name, value) in [
            ("accompaniment", configuration.accompanimentVolume), ("voice", configuration.voiceVolume),
            ("monitor voice", configuration.monitorVoiceVolume),
        ] where !VolumeRange.contains(value) {
            throw AudioError(.invalidParameter, "the \(name) volume must be between -96 and +12 dB (or -inf), got \(value)")
        }
        var outputs = configuration.outputs
        guard let path = configuration.recordPath else { return (outputs, nil) }
        let wav = path.lowercased().hasSuffix(".wav")
        if !wav {
            do throws(AudioError) {
                outputs.append(try LiveStreamSession.Output(parsing: path))
            } catch {
                throw AudioError(
                    .unsupportedFile, "the song is recorded as .wav, .m4a, .mp4, .flv or .aac (ADTS); '\(path)' is none of those")
            }
        }
        try Preflight.checkFolder(forWriting: path)
        return (outputs, wav ? path : nil)
    }

    /// The device: the microphone in, the graph's format out, ear-monitoring conversion.
    static func device(_ configuration: Configuration, input: InputUnit, format: StreamFormat) throws(AudioError) -> IOUnit {
        var device = IOUnit.Configuration(
            backend: configuration.backend, inputFormat: input.outputFormats[0], outputFormat: format,
            inputDevice: configuration.inputDevice, outputDevice: configuration.outputDevice,
            periodFrames: configuration.periodFrames, periodCount: configuration.periodCount, reconnect: configuration.reconnect,
            jackServer: configuration.jackServer, virtual: configuration.virtual)
        device.reconnectTimeout = configuration.reconnectTimeout
        device.clocks = configuration.clocks
        device.conversionQuality = .low
        let io = try IOUnit(device)
        try io.recordCycleTimings(capacity: configuration.cycleTimingCapacity)
        return io
    }

    /// The voice chain loaded from its graph file (its output disconnected: the room wires the wet voice), or a
    /// graph that is the microphone alone.
    struct VoiceChain {
        let graph: RenderGraph
        let loaded: LoadedGraph?
        let input: InputUnit
        let mic: NodeID
        /// The chain's last node: the wet voice.
        let wet: NodeID
        /// Seconds from the microphone to the wet voice.
        let latency: Double

        init(_ configuration: Configuration, maximumFrames: Int) throws(AudioError) {
            guard let path = configuration.voiceChain else {
                graph = try RenderGraph(
                    format: try .graph(sampleRate: configuration.sampleRate, channelCount: configuration.channelCount),
                    maximumFrames: maximumFrames)
                loaded = nil
                input = try InputUnit(sampleRate: configuration.sampleRate, channelCount: 1)
                mic = try graph.addNode(input, name: "mic")
                wet = mic
                latency = 0
                return
            }
            let loaded = try GraphFile.load(path: path, maximumFrames: maximumFrames, registry: configuration.unitRegistry)
            let only = try loaded.onlyInput(as: "a voice chain", meaning: "the microphone", source: path)
            guard let last = loaded.edges.first(where: { $0.to == "output" }).flatMap({ loaded.nodes[$0.from] }) else {
                throw AudioError(.invalidGraphDescription, "'\(path)' connects nothing to its output: the wet voice goes there")
            }
            self.loaded = loaded
            graph = loaded.graph
            input = only.unit
            mic = loaded.nodes[only.id]!
            wet = last
            latency = graph.latency
            try graph.disconnect(graph.output)
        }
    }
}
