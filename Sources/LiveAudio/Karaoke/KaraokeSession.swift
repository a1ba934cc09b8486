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
        /// The PipeWire server's socket for the `.pipewire` backend: a name in the runtime folder or an absolute path
        /// (nil: `$PIPEWIRE_REMOTE`, else `pipewire-0`).
        public var pipeWireRemote: String?
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
        /// What the output plays of the voice once it has moved off headphones (default `.muteVoice`).
        public var offHeadphones = KaraokeRoom.OffHeadphones.muteVoice
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
        /// The timeline's gaps (the device away, an interruption by the sound server), from the recording's start:
        /// silence in the recordings and the stream, which keep the wall time; the song resumed where it stopped.
        public let gaps: [TimelineGap]
    }

    /// The configuration the session was made with.
    public let configuration: Configuration
    /// The room the session's one take plays in.
    public let room: KaraokeRoom
    /// The session's one take.
    public let take: KaraokeTake
    /// The session's rate in Hz: the voice chain's, or ``Configuration/sampleRate`` without one (a device at another
    /// rate is converted).
    public var sampleRate: Double { room.sampleRate }
    /// The accompaniment's player, rendered ahead on the song's worker: its position, state and length. Pause,
    /// seek and schedule through the session (``pauseSong()``, ``seekSong(toSeconds:)``, ``playSong(_:)``), which
    /// drop what is queued; made on the player directly they are heard after ``songLookAhead``.
    public var player: FilePlayerUnit { take.player }
    /// What of the song plays, in frames at ``sampleRate``.
    public var region: FilePlayerUnit.Region { take.region }
    /// The time-pitch unit, when the key or tempo changes.
    public var timePitch: TimePitchUnit? { take.timePitch }

    /// Checks and builds everything that can be before the device opens: a room and its one take.
    /// - Throws: ``/AudioCore/AudioError``: a song that cannot be played, a voice chain without exactly one input node,
    ///   a volume out of range, a stems folder that does not exist, a record path that is neither `.wav` nor an AAC
    ///   file (`.m4a`, `.mp4`, `.flv`, `.aac`), an output given twice or in a folder that does not exist, a bad URL; a
    ///   part of the graph that cannot be built names itself.
    public init(_ configuration: Configuration) throws(AudioError) {
        self.configuration = configuration
        room = try KaraokeRoom(configuration.roomConfiguration, lifecycleName: "the karaoke session")
        take = try KaraokeTake(configuration.takeConfiguration, room: room)
    }

    // MARK: Control

    /// Finds the round trip (a calibration plays clicks first), opens the device, and starts the song and the
    /// recording together half a second later.
    /// - Throws: ``/AudioCore/AudioError`` from the calibration (no click came back) or the device, `.invalidParameter`
    ///   for a round trip over 2 s, `.invalidState` once started, stopped, or stopped meanwhile (a ``stop()`` breaks a
    ///   start off at once: a server that has not answered, a calibration). After a failure the device is stopped
    ///   again, nothing has been recorded, and (but for a stop) `start()` may be called again.
    public func start() async throws(AudioError) {
        try await room.start(playing: take)
    }

    /// How the accompaniment was normalised (after a ``start()`` with ``Configuration/accompanimentLoudness``).
    public var accompanimentNormalization: AccompanimentNormalization? { take.accompanimentNormalization }

    /// Stops the device, completes the recordings, encodes what is buffered, completes the encoded files and
    /// unpublishes. During a start, breaks it off (servers not waited for, a calibration cut short) and returns
    /// once it has undone what it opened. Safe to call more than once.
    @discardableResult
    public func stop() async -> Summary {
        let (r, t) = await room.stopRoom()
        let takeSummary = t ?? take.finalSummary
        return Summary(
            seconds: r.seconds, roundTripFrames: r.roundTripFrames, roundTripSource: r.roundTripSource, xruns: r.xruns,
            accompanimentUnderruns: takeSummary?.accompanimentUnderruns ?? (player.underruns + take.song.underruns),
            recordedFrames: max(r.recordedFrames, takeSummary?.recordedFrames ?? 0),
            droppedFrames: r.droppedFrames + (takeSummary?.droppedFrames ?? 0), outputs: r.outputs,
            error: r.error ?? takeSummary?.error, score: takeSummary?.score, loudness: r.loudness, gaps: r.gaps)
    }

    /// Frames the recorders' or the encoder's writer fell too far behind for, so far (silence in their place).
    public var droppedFrames: Int64 { take.droppedFrames + room.droppedFrames }

    /// The encoded song's outputs now (RTMP connections, files), in the order given; empty without any.
    public var outputStatistics: [LiveStreamSession.OutputStatistics] { room.outputStatistics }

    /// The publishers of the RTMP outputs, for their statistics streams (made again by a start that follows a
    /// failed one).
    public var rtmpPublishers: [RTMPPublisher] { room.rtmpPublishers }

    /// The round trip the recordings are shifted by, in frames (known once started; with the capture processing's
    /// latency), and where it came from (``roundTripSource``).
    public var roundTripFrames: Int { room.roundTripFrames }
    /// Where ``roundTripFrames`` came from: "device", "calibration" or "given" (empty until started).
    public var roundTripSource: String { room.roundTripSource }
    /// The calibrations the start played: 1, or more when one saw an xrun or its clicks disagreed; 0 without one.
    public var calibrations: Int { room.calibrations }

    /// True once the song has played to its end and what follows it has passed: the song's look-ahead and the
    /// time-pitch's, the round trip the recordings are shifted by (the voice sung to the last frames), the voice
    /// chain's tail time (its reverb and echoes), and 0.1 s. Poll it.
    public var songHasEnded: Bool { take.songHasEnded }

    /// A unit of the voice chain by its id in the graph file, for live control (`"room"` → its reverb).
    public func unit(named id: String) -> RenderUnit? { room.unit(named: id) }

    /// The accompaniment's live volume in dB, in the headphones and the song (`-.infinity` for none; clamped to −96 …
    /// +12), click-free, on top of any loudness gain (``accompanimentNormalization``). Any thread but the render
    /// thread.
    public var accompanimentVolume: Double {
        get { room.accompanimentVolume }
        set { room.accompanimentVolume = newValue }
    }
    /// The voice's live volume in the song in dB (`-.infinity` for none; clamped to −96 … +12), click-free; the voice
    /// stems are recorded before it. Any thread but the render thread.
    public var voiceVolume: Double {
        get { room.voiceVolume }
        set { room.voiceVolume = newValue }
    }
    /// The voice's live volume in the singer's headphones in dB (`-.infinity`: the accompaniment only; clamped to
    /// −96 … +12), click-free. Any thread but the render thread.
    public var monitorVoiceVolume: Double {
        get { room.monitorVoiceVolume }
        set { room.monitorVoiceVolume = newValue }
    }
    /// Mutes the accompaniment in the headphones and the song, click-free like the volumes, which it leaves as they
    /// are (the accompaniment stem is recorded before it). Any thread but the render thread.
    public var isAccompanimentMuted: Bool {
        get { room.isAccompanimentMuted }
        set { room.isAccompanimentMuted = newValue }
    }
    /// Mutes the voice in the headphones and the song, click-free, the volumes left as they are (the voice stems are
    /// recorded before it). Any thread but the render thread.
    public var isVoiceMuted: Bool {
        get { room.isVoiceMuted }
        set { room.isVoiceMuted = newValue }
    }

    /// How far ahead of the device the song is rendered, in seconds: a key or tempo change is heard this much later
    /// (and the time-pitch's own look-ahead). 20 ms, or two device periods when they are longer; known once started.
    public var songLookAhead: Double { take.songLookAhead }

    /// Where the song is as heard, in seconds of the file (the player's ``/AudioUnits/FilePlayerUnit/currentTime`` is
    /// ahead by what is rendered ahead: ``songLookAhead`` and the time-pitch's).
    public var songPosition: Double { take.songPosition }

    /// Holds the song where it is heard (at once, faded); the recordings and the voice go on. Paused already: nothing.
    public func pauseSong() { take.pauseSong() }

    /// Goes on from where ``pauseSong()`` held the song (at once, faded in).
    public func resumeSong() { take.resumeSong() }

    /// The chart's lyrics where the song is, the voice's pitch and the note to sing, and the score so far; nil
    /// without ``Configuration/chart``. Any thread (a screen reads it every frame).
    public var singAlong: SingAlongReadout? { take.singAlong }

    /// Moves the song to `seconds` of the file, inside the region playing (at once, faded).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` outside the region, `.invalidState` before the start or
    ///   once the song has finished.
    public func seekSong(toSeconds seconds: Double) throws(AudioError) {
        do throws(AudioError) { try take.seekSong(toSeconds: seconds) } catch { throw Self.sessionWording(error) }
    }

    /// Plays `region` of the song from now on (at once, faded), replacing what plays: a loop, another part.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a region outside the file, `.invalidState` before
    ///   the start.
    public func playSong(_ region: RegionInSeconds) throws(AudioError) {
        do throws(AudioError) { try take.playSong(region) } catch { throw Self.sessionWording(error) }
    }

    private static func sessionWording(_ error: AudioError) -> AudioError {
        error.code == .invalidState && error.message.hasPrefix("the song starts with the take")
            ? AudioError(.invalidState, "the song starts with the session: seek or play a part once it has started") : error
    }

    /// The key change in cents (−2400 … 2400), live when the session has a time-pitch unit (a key or tempo change
    /// given, or ``Configuration/keyAdjustable``); 0 and unchangeable without one.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` without a time-pitch unit, `.invalidParameter` out of range.
    public func setKey(cents: Double) throws(AudioError) { try take.setKey(cents: cents) }
    /// The key change in cents now (+200: two semitones up): the time-pitch unit's pitch, 0 without one. Changed by
    /// ``setKey(cents:)``.
    public var keyCents: Double { take.keyCents }

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
    public var meters: Meters { room.meters }

    /// The device's cycles so far, as ``Configuration/cycleTimingCapacity`` asked: when each started, how long it
    /// took, and how much of that the device's thread ran.
    public var cycleTimings: [CycleTiming] { room.cycleTimings }

    /// The error that stopped the device for good (reconnect off, or not back within the timeout), or the encoder
    /// or an encoded file.
    public var failure: AudioError? { room.io.failure ?? take.failure ?? room.encoded.withLock { $0 }?.failure }

    /// False while the route is lost (``/AudioDevices/DeviceEvent/routeLost(_:)``): the headphones are silent, the
    /// recordings and outputs go on; true again when it returns (``/AudioDevices/DeviceEvent/routeReturned``).
    public var isOutputRouted: Bool { room.isOutputRouted }

    /// True while the device is open: from a start that got that far to the stop.
    public var isDeviceOpen: Bool { room.isDeviceOpen }

    /// Device events: start, xruns, faults, reconnects, route changes.
    public var deviceEvents: AsyncStream<DeviceEvent> { room.deviceEvents }
    /// The device's under- and overruns since the session was made, those before reconnects included.
    public var xruns: Int { room.xruns }
    /// What the device granted (its rate, period and latencies) while it runs; nil before the start, while it is
    /// reconnecting and after the stop.
    public var deviceGrant: DeviceGrant? { room.deviceGrant }
}
