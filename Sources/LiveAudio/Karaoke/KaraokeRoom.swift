import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import FoundationEssentials
import Synchronization

/// A karaoke room: what lasts the evening while songs come and go. The room holds the device and its supervisor,
/// the voice with its chain and ear monitoring, the encoded outputs (files and RTMP servers: one connection for the
/// whole evening), the room's meters and loudness; a ``KaraokeTake`` holds one song. Takes start at a sample time
/// and end while the room runs: the device stays open, the singer goes on hearing their voice, and the stream goes
/// on with continuous timestamps (between takes it carries the voice, and an interlude when one is given).
///
/// ```swift
/// var room = KaraokeRoom.Configuration()
/// room.voiceChain = "Examples/graphs/voice-chain.json"
/// room.outputs = [try .init(parsing: "rtmp://127.0.0.1/live/room")]
/// let k = try KaraokeRoom(room)
/// try await k.start()
/// for song in ["one.m4a", "two.m4a"] {
///     var c = KaraokeTake.Configuration(song: song)
///     c.stemsDirectory = "stems-\(song)"
///     let take = try KaraokeTake(c, room: k)
///     try await k.play(take, after: 5)
///     while !take.songHasEnded { try await Task.sleep(nanoseconds: 100_000_000) }
///     let summary = await k.finish(take)
///     print(summary.score?.total ?? 0)
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
/// chain's latency), and every recording and the encoder start as much later as what they take is late. It is found
/// once, when the room starts, and holds for every take.
public final class KaraokeRoom: Sendable {
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
        /// The timeline's gaps (the device away, an interruption by the sound server), from the room's start: silence
        /// in the recording and the stream, which keep the wall time.
        public let gaps: [TimelineGap]
    }

    /// The configuration the room was made with.
    public let configuration: Configuration
    /// The room's background work — its takes' stems, pitch trackers and chart followers, the encoder and its files,
    /// the room's recording — on one thread of its own (`la-work`), whatever the core count: a few percent of a core,
    /// and a take then runs at most six threads of the library's on any backend (four on JACK; see
    /// docs/architecture.md).
    let workers: WorkerPool
    /// The room's rate in Hz: the voice chain's, or ``Configuration/sampleRate`` without one.
    public let sampleRate: Double
    let graph: RenderGraph
    /// Each voice's chain as loaded (empty without a voice chain).
    let loaded: [LoadedGraph]
    /// The room's voices: their channels of the microphone and their chains.
    let voices: Voices
    /// The microphone's unit: every voice's channels.
    let microphone: InputUnit
    let monitor: MixerUnit
    /// Takes' songs come in here, take n on bus n mod 2 (one ends while the next is made).
    let accompaniment: MixerUnit
    /// The wet voice (every voice's, mixed) before any volume.
    let voiceMeter: MeterUnit
    /// Each voice's wet voice (the one ``voiceMeter`` with one voice).
    let voiceMeters: [MeterUnit]
    let songLoudness: LoudnessMeterUnit
    let songMix: MixerUnit
    let songDelay: SampleDelayUnit
    /// The room's parts by name: takes connect to "mic" (the first voice's dry voice), "voice-N-dry",
    /// "voice-N-wet", "wet" (every voice), "accompaniment" and "song-mix".
    let parts: [String: NodeID]
    let wetVoice: NodeID
    let timeline: TimelineTap
    let routeGate: RouteGate
    /// The voices into the output, as ``Configuration/offHeadphones`` says (the wired voices', the phones').
    let headphonesGates: [HeadphonesGate]
    let calibration: CalibrationClicks?
    let voiceProcessingUnit: VoiceProcessingUnit?
    let echoReference: CaptureReferenceTap?
    let encoderTap: EncoderTap?
    /// The phone voices (``Configuration/phoneVoices``), the room's voices after the wired ones.
    public let phoneVoices: [PhoneVoice]
    /// The wired voices delayed to meet the phones' in the song mix (nil without phones).
    let wiredLate: SampleDelayUnit?
    /// What the phone voices need of the room (nil without phones).
    let phoneHost: PhoneVoiceHost?
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
    }

    struct RoomState {
        var started = false
        var roundTrip = 0, source = "", startTime: Int64 = 0, calibrations = 0
        /// What each signal is shifted by: the round trip above, and the voice chain's latency.
        var alignment = Alignment()
        /// The device's cycle at the room's rate, as first granted (``KaraokeRoom/cycleFrames`` follows a reopened
        /// device's).
        var cycleFrames = 0
        /// Takes played so far.
        var takes = 0
        /// Where the last take's song ended on the room's timeline (its last frame's sample time): the gap before the
        /// next take runs from there.
        var lastSongEnd: Int64 = 0
        /// Held weakly: the take's owner keeps it (a take holds its room); one dropped unfinished leaves the graph.
        weak var current: KaraokeTake?
        /// The stop has begun: no take is scheduled any more.
        var closed = false
        /// The interlude playing in the gap, until the next take's start (see ``Interlude``).
        var interlude: Interlude?
        /// The interlude fading out by the next take's start (`until`), until it leaves the graph.
        var retiring: (interlude: Interlude, until: Int64)?
        /// The first gap's interlude, made with the room (which checks its file).
        var preparedInterlude: Interlude?
        /// Interludes played so far.
        var interludes = 0
    }

    /// Checks and builds everything that can be before the device opens.
    /// - Throws: ``/AudioCore/AudioError``: a voice chain without exactly one input node, a volume out of range, a
    ///   record path that is neither `.wav` nor an AAC file, an output given twice or in a folder that does not
    ///   exist, a bad URL; a part of the graph that cannot be built names itself.
    public convenience init(_ configuration: Configuration) throws(AudioError) {
        try self.init(configuration, lifecycleName: "the karaoke room")
    }

    /// - Parameter lifecycleName: what the room is called in lifecycle errors ("the karaoke session" for a session's).
    init(_ configuration: Configuration, lifecycleName: String) throws(AudioError) {
        self.configuration = configuration
        let workers = WorkerPool(name: "la-work", threads: 1)
        self.workers = workers
        lifecycle = LockedLifecycle(name: lifecycleName)
        let (outputs, wavRecord) = try Self.checkedOutputs(configuration)
        if configuration.voiceProcessing, configuration.voiceCount > 1 {
            throw AudioError(.invalidParameter, "voice processing takes one voice; the room has \(configuration.voiceCount)")
        }
        let chain = try Voices(configuration, maximumFrames: Self.maximumFrames)
        let format = chain.graph.format
        let rate = format.sampleRate
        graph = chain.graph
        loaded = chain.loaded
        voices = chain
        microphone = chain.microphone
        sampleRate = rate
        chainLatencyFrames = Int((chain.latency * rate).rounded())
        roomOutputs = outputs
        let encoded = outputs.isEmpty ? nil : try Self.encodedOutputs(outputs, configuration, format, pool: workers)
        self.encoded.withLock { $0 = encoded }
        let io = try Self.device(configuration, input: chain.microphone, format: format)
        self.io = io
        try io.setInputUnit(chain.microphone)
        try io.setOutputGraph(chain.graph)
        let canceller = try configuration.voiceProcessing ? io.enableVoiceProcessing(reference: .graphTap) : nil
        try canceller?.echoCancellation.set(1)
        voiceProcessingUnit = canceller
        echoReference = try canceller == nil ? nil : CaptureReferenceTap(format: format, io: io, maximumFrames: Self.maximumFrames)
        // The takes' buses, and the interlude's.
        accompaniment = try MixerUnit(format: format, inputs: configuration.interlude == nil ? 2 : 3)
        songDelay = try SampleDelayUnit(format: format, maximumDelayFrames: Int(((Self.maximumShift + (chain.phones.isEmpty ? 0 : configuration.phoneDelay)) * rate).rounded()))
        songMix = try MixerUnit(format: format, inputs: 2)
        monitor = try MixerUnit(format: format, inputs: !chain.phones.isEmpty && configuration.phoneVoicesInOutput ? 3 : 2)
        voiceMeter = try MeterUnit(format: chain.wetFormat)
        voiceMeters = chain.wet.count == 1 ? [voiceMeter] : try chain.wet.map { _ throws(AudioError) in try MeterUnit(format: chain.wetFormat) }
        // Several voices are mixed into one wet voice for the song and the headphones; one is that voice. The phone voices
        // are mixed apart: into the song mix (the wired voices delayed to meet them), not the headphones.
        let wired = chain.wiredCount
        let voiceMix = wired == 1 ? nil : try MixerUnit(format: chain.wetFormat, inputs: wired)
        let phoneMix = chain.phones.isEmpty ? nil : try MixerUnit(format: chain.wetFormat, inputs: chain.phones.count)
        let songVoices = chain.phones.isEmpty ? nil : try MixerUnit(format: chain.wetFormat, inputs: 2)
        let phoneDelayFrames = Int((configuration.phoneDelay * rate).rounded())
        wiredLate = chain.phones.isEmpty ? nil : try SampleDelayUnit(format: chain.wetFormat, maximumDelayFrames: phoneDelayFrames)
        let chirpSignal = PhoneCalibration.signal(sampleRate: rate)
        let chirps = chain.phones.isEmpty ? nil : SignalInjector(format: format, signal: chirpSignal)
        songLoudness = try LoudnessMeterUnit(format: format)
        encoderTap = encoded == nil ? nil : EncoderTap(format: format)
        let timeline = TimelineTap(format: format)
        self.timeline = timeline
        let host = chirps.map { PhoneVoiceHost(sampleRate: rate, timeline: timeline, chirps: $0, signal: chirpSignal) }
        phoneHost = host
        phoneVoices = chain.phones.enumerated().map { i, source in
            PhoneVoice(room: host!, voice: wired + i + 1, source: source)
        }
        calibration = try configuration.roundTrip == .calibrate
            ? CalibrationClicks(format: format, micChannels: chain.dryFormat.channelCount) : nil
        routeGate = RouteGate(format: format, route: io.outputRoute)
        let voiceGate = HeadphonesGate(format: chain.wetFormat, route: io.outputRoute, policy: configuration.offHeadphones)
        let phoneGate = monitor.busCount == 3
            ? HeadphonesGate(format: chain.wetFormat, route: io.outputRoute, policy: configuration.offHeadphones) : nil
        headphonesGates = [voiceGate] + (phoneGate.map { [$0] } ?? [])
        recorder = try wavRecord.map { path throws(AudioError) in
            try RecorderUnit(format: format, path: path, waitsForStart: true, pool: workers)
        }
        let interlude = try configuration.interlude.map { path throws(AudioError) in
            try Interlude(path: path, format: format, level: VolumeRange.gain(configuration.interludeVolume))
        }
        state.withLock { $0.preparedInterlude = interlude }

        // The graph, a part an entry. The accompaniment is what the takes bring (silence between them); the song mix
        // is the accompaniment delayed by the round trip and the wet voice; the monitor is the accompaniment and the
        // wet voice; the encoder's tap, the loudness and the voice meter lead nowhere (sinks, rendered every cycle).
        var known: [String: NodeID] = ["mic": chain.dry[0]]
        for (i, (dry, wet)) in zip(chain.dry, chain.wet).enumerated() {
            known["voice-\(i + 1)-dry"] = dry
            known["voice-\(i + 1)-wet"] = wet
        }
        if voiceMix == nil { known["wet"] = chain.wet[0] }
        var g = GraphParts(chain.graph, known: known)
        if let voiceMix { try g.add("wet", voiceMix, from: (0..<wired).map { "voice-\($0 + 1)-wet" }) }
        if let phoneMix, let songVoices, let wiredLate {
            try g.add("phone-wet", phoneMix, from: chain.phones.indices.map { "voice-\(wired + $0 + 1)-wet" })
            try g.add("wired-late", wiredLate, from: ["wet"])
            try g.add("song-voices", songVoices, from: ["wired-late", "phone-wet"])
        }
        if voiceMeters.count > 1 {
            for (i, meter) in voiceMeters.enumerated() { try g.add("voice-\(i + 1)-meter", meter, from: ["voice-\(i + 1)-wet"], sink: true) }
        }
        try g.add("accompaniment", accompaniment)
        try g.add("song-delay", songDelay, from: ["accompaniment"])
        try g.add("song-mix", songMix, from: ["song-delay", songVoices == nil ? "wet" : "song-voices"])
        if let recorder { try g.add("record", recorder, from: ["song-mix"], sink: true) }
        if let encoderTap { try g.add("song-encoder", encoderTap, from: ["song-mix"], sink: true) }
        try g.add("voice-meter", voiceMeter, from: ["wet"], sink: true)
        try g.add("song-loudness", songLoudness, from: ["song-mix"], sink: true)
        if let echoReference { try g.add("echo-reference", echoReference, from: ["accompaniment"]) }
        try g.add("monitor-voice", voiceGate, from: ["wet"])
        if let phoneGate { try g.add("monitor-phones", phoneGate, from: ["phone-wet"]) }
        try g.add(
            "monitor", monitor,
            from: [echoReference == nil ? "accompaniment" : "echo-reference", "monitor-voice"] + (phoneGate == nil ? [] : ["monitor-phones"]))
        try g.add("timeline", timeline, from: ["monitor"])
        if let chirps { try g.add("phone-chirps", chirps, from: ["timeline"]) }
        let played = chirps == nil ? "timeline" : "phone-chirps"
        if let calibration { try g.add("calibration", calibration, from: [played, "mic"]) }
        try g.add("route-gate", routeGate, from: [calibration == nil ? played : "calibration"])
        try g.output(from: "route-gate")
        parts = g.nodes
        wetVoice = g["wet"]!
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
                    let made = try Self.encodedOutputs(roomOutputs, configuration, graph.format, pool: workers)
                    e = made
                    return made
                }
                try await outputs.start()
                opened = outputs
                try lifecycle.checkStarting()
                tap.outputs = outputs  // the device is stopped: its thread starts after this
            }
            try await startDevice()
            if let take {
                try schedule(take, at: state.withLock { $0.startTime })
            } else {
                startInterlude(at: state.withLock { $0.startTime })
            }
        } catch {
            io.stop()
            io.holdCapture()
            // What was started at this start's times waits again: a retry finds them anew (its calibration runs on
            // the timeline past them, and the encoder must not see that, nor time go back).
            encoderTap?.start(atSampleTime: .max)
            recorder?.startRecording(atSampleTime: .max)
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
        var alignment = Alignment(dry: dry, wet: dry + chainLatencyFrames)
        if let wiredLate {
            alignment.phone = wiredLate.maximumDelayFrames
            try wiredLate.setDelayFrames(alignment.phone)
            for v in phoneVoices { try v.source.setDelayFrames(alignment.phone) }
        }
        let wet = alignment.wet + alignment.phone
        guard wet <= songDelay.maximumDelayFrames else {
            throw AudioError(
                .invalidParameter,
                "the round trip and the voice's processing come to \(wet * 1000 / Int(sampleRate)) ms: more than the \(Int(Self.maximumShift)) s the song can be shifted by")
        }
        // Exact from the next cycle: the accompaniment is still silent.
        try songDelay.setDelayFrames(wet)
        try lifecycle.checkStarting()
        let startTime = timeline.sampleTime + Int64(sampleRate * Self.startLead)
        phoneHost?.started(roundTrip: dry, startTime: startTime)
        recorder?.startRecording(atSampleTime: alignment.start(.songMix, at: startTime), skipFrames: 0)
        encoderTap?.start(atSampleTime: alignment.start(.songMix, at: startTime))
        // A recorded singer (a virtual device holding its capture) sings frame 0 to the room's first frame: it arrives
        // one round trip later, where the dry stem's frame 0 is taken.
        io.startCapture(atSampleTime: Int64((Double(alignment.start(.dryVoice, at: startTime)) * grant.sampleRate / sampleRate).rounded()))
        state.withLock {
            $0.roundTrip = dry
            $0.alignment = alignment
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
            let playing = state.withLock { s -> KaraokeTake? in
                s.closed = true
                return s.current
            }
            io.stop()
            stopInterlude()
            if let take = playing { takeSummary = await finish(take, deviceStopped: true) }
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
            outputs: outputs?.statistics ?? [], error: failure ?? io.failure, loudness: songLoudness.read(),
            gaps: s.started ? timeline.gaps(from: s.startTime, to: .max) : [])
        if first {
            finalSummary.withLock { $0 = (summary, takeSummary) }
            lifecycle.stopEnded()
        }
        return (summary, takeSummary)
    }


    /// The device's cycle at the room's rate now: the grant's (a device reopened after a loss may have another period),
    /// else the first.
    var cycleFrames: Int {
        guard let grant = io.grant, grant.sampleRate > 0 else { return state.withLock { $0.cycleFrames } }
        return Int((Double(grant.periodFrames) * sampleRate / grant.sampleRate).rounded(.up))
    }

    /// The round trip the recordings are shifted by, in frames (known once started; with the capture processing's
    /// latency).
    public var roundTripFrames: Int { state.withLock { $0.roundTrip } }
    /// Where ``roundTripFrames`` came from: "device", "calibration" or "given" (empty until started).
    public var roundTripSource: String { state.withLock { $0.source } }
    /// The calibrations the start played: 1, or more when one saw an xrun or its clicks disagreed; 0 without one.
    public var calibrations: Int { state.withLock { $0.calibrations } }
    /// The sample time of the room's first frame (where its recording and outputs begin), once started.
    public var firstFrame: Int64? {
        let s = state.withLock { $0 }
        return s.started ? s.startTime : nil
    }

    /// Seconds of the room's timeline since its first frame (0 before it).
    public var elapsed: Double {
        let s = state.withLock { $0 }
        return s.started ? Double(max(0, timeline.sampleTime - s.startTime)) / sampleRate : 0
    }
}
