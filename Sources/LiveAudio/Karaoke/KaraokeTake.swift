import AudioCore
import AudioGraph
import AudioUnits
import FoundationEssentials
import SingAlong
import Synchronization

/// One song sung in a ``KaraokeRoom``: its song path (rendered ahead on a worker: the player, a key or tempo change,
/// the region, the loudness gain), its chart follower and score, its stems. Made for a room, played by
/// ``KaraokeRoom/play(_:after:)``, ended by ``KaraokeRoom/finish(_:)``; a take plays once.
///
/// Its stems are the session's (`accompaniment.wav`, `voice-dry.wav`, `voice-wet.wav`, `song.wav` and with a chart
/// `pitch.csv`), in frame k the accompaniment rendered at the take's frame k and the voice sung to it.
public final class KaraokeTake: Sendable {
    /// What a take is made from: the song, its region, key and tempo, its chart, its loudness and its stems.
    public struct Configuration: Sendable {
        /// The accompaniment: any file the decoder reads.
        public var song: String
        /// What of the song plays, in frames at the room's rate.
        public var region = FilePlayerUnit.Region.wholeFile
        /// What of the song plays, in seconds: when given, taken instead of ``region``.
        public var regionInSeconds: KaraokeSession.RegionInSeconds?
        /// Key change in cents, −2400 … 2400 (default 0).
        public var keyCents = 0.0
        /// The song's tempo, a rate 1/32 … 32 (default 1).
        public var tempo = 1.0
        /// Put the time-pitch unit in even at key 0 and tempo 1, so the key can change while singing.
        public var keyAdjustable = false
        /// A chart to sing along to: lyrics shown and, with notes, the voice scored against ``part``.
        public var chart: SongChart?
        /// The duet part sung (`P1` is 1) — by the room's one voice, or by every voice that ``parts`` and the chart
        /// give no part of its own.
        public var part = 1
        /// The part each voice sings (`[1, 2]`: voice 1 sings P1, voice 2 P2); nil: with several voices, voice N sings
        /// PN when the chart has it (else ``part``), with one voice ``part``.
        public var parts: [Int]?
        /// How strictly the sung pitch is scored (default `.medium`).
        public var difficulty = SingingDifficulty.medium
        /// Plays the accompaniment at this integrated loudness, LUFS; nil: the song as it is.
        public var accompanimentLoudness: Double?
        /// The ceiling for the accompaniment's true peak under ``accompanimentLoudness``, dBTP.
        public var accompanimentTruePeak = -1.0
        /// Where songs' measurements are kept between runs (nil: measured every time).
        public var loudnessCache: LoudnessCache? = LoudnessCache()
        /// A folder (that exists) for the take's stems.
        public var stemsDirectory: String?

        /// A take of `song`, everything else at its default.
        public init(song: String) { self.song = song }
    }

    /// What a take did.
    public struct Summary: Sendable {
        /// The take's number in its room, from 1.
        public let number: Int
        /// The song played.
        public let song: String
        /// Seconds from the take's start (where its stems begin) to its end, on the room's timeline.
        public let seconds: Double
        /// The room's sample time the take started at (its stems' frame 0), or 0 when it never played.
        public let startTime: Int64
        /// Cycles that found the accompaniment short.
        public let accompanimentUnderruns: Int
        /// Frames in the longest stem (0 without stems).
        public let recordedFrames: Int64
        /// Frames the stems' writers fell too far behind for.
        public let droppedFrames: Int64
        /// The first error completing a stem, or the song's worker's.
        public let error: AudioError?
        /// The score, with a chart that has notes: the first voice's.
        public let score: SingingScore.Result?
        /// Each voice's score, with a chart (nil for a chart without notes); empty without a chart.
        public let scores: [SingingScore.Result?]
        /// The part each voice sang, with a chart.
        public let parts: [Int]
        /// How the accompaniment was normalised, with ``Configuration/accompanimentLoudness``.
        public let normalization: KaraokeSession.AccompanimentNormalization?
        /// The room's timeline's gaps during the take (the device away, an interruption by the sound server), from
        /// its start: silence in the stems, which keep the wall time; the song resumed where it stopped.
        public let gaps: [TimelineGap]
    }

    /// The configuration the take was made with.
    public let configuration: Configuration
    /// The room the take plays in.
    public let room: KaraokeRoom
    /// The take's rate: its room's.
    public var sampleRate: Double { room.sampleRate }
    /// The accompaniment's player, rendered ahead on the song's worker.
    public let player: FilePlayerUnit
    /// What of the song plays, in frames.
    public let region: FilePlayerUnit.Region
    /// The time-pitch unit, when the key or tempo changes (or may).
    public let timePitch: TimePitchUnit?
    /// The song's path, rendered ahead of the device on a worker.
    let song: RenderAheadSource
    /// Each voice's follower (lyrics, pitch, score), with a chart.
    let followers: [SingAlongFollower]
    /// The first voice's follower.
    var follower: SingAlongFollower? { followers.first }
    let recorders: [Recorder]
    let normalized = Locked<KaraokeSession.AccompanimentNormalization?>(nil)
    let state = Locked<TakeState>(TakeState())

    struct TakeState {
        var number = 0
        var scheduled = false
        var startTime: Int64 = 0
        var roundTrip = 0
        /// How late each signal is (the room's, when the take was attached).
        var alignment = Alignment()
        var endSeen: Int64?
        /// The take's end on the accompaniment's timeline, and when the latest stem has reached it (fixed at the first
        /// look after the song's end).
        var endAt: Int64?
        var completeAt: Int64?
        /// The first file frame of the region playing (the pause does not go back before it).
        var songRegionStart: Int64 = 0
        /// The region playing: the take's, or the last ``KaraokeTake/playSong(_:)`` asked for.
        var regionPlaying: FilePlayerUnit.Region?
        /// The song was paused, sought or given another region: its end is no longer its start plus its length.
        var moved = false
        /// The take's parts in the room's graph.
        var nodes: [NodeID] = []
        var summary: Summary?
        /// A finish has begun.
        var finishing = false
    }

    /// A stem recorder: its name, the signal it records (which says what it is shifted by), and the room's part it
    /// records (nil: the take's song).
    struct Recorder {
        let name: String
        let unit: RecorderUnit
        let signal: Alignment.Signal
        let stage: String?
    }

    /// Checks and builds the take for `room`: the song opened, the region, the time-pitch, the stems created.
    /// - Throws: ``/AudioCore/AudioError``: a song that cannot be played (the message names it), a region outside
    ///   it, a stems folder that does not exist, a chart part it does not have.
    public init(_ configuration: Configuration, room: KaraokeRoom) throws(AudioError) {
        self.configuration = configuration
        self.room = room
        if let dir = configuration.stemsDirectory { try Preflight.checkFolder(dir, role: "stems folder") }
        let format = room.graph.format
        player = try Self.songPlayer(configuration, format: format)
        let songFormat = player.outputFormats[0]
        region = configuration.regionInSeconds?.frames(at: format.sampleRate) ?? configuration.region
        try player.schedule(region, at: .max)
        timePitch = try Self.timePitch(configuration, format: songFormat)
        song = try Self.songAhead(player, timePitch, format: songFormat)
        recorders = try Self.recorders(configuration, room: room)
        let playing = region
        let dryFormat = room.voices.dryFormat
        let voiceCount = room.voices.dry.count
        var followers: [SingAlongFollower] = []
        if let chart = configuration.chart {
            for voice in 1...voiceCount {
                let part = Self.part(of: voice, configuration, voices: voiceCount)
                if chart.hasNotes, chart.voice(part) == nil {
                    throw AudioError(
                        .invalidParameter,
                        "voice \(voice) sings P\(part), which the chart has not (it has \(chart.voices.map { "P\($0.number)" }.joined(separator: ", ")))")
                }
                let pitch = voiceCount == 1 ? "pitch.csv" : "pitch-\(voice).csv"
                followers.append(
                    try SingAlongFollower(
                        chart: chart, part: part, difficulty: configuration.difficulty, format: dryFormat, region: playing,
                        pitchPath: configuration.stemsDirectory.map { FilePath.join($0, pitch) },
                        phone: voice > room.voices.wiredCount ? room.phoneVoices[voice - room.voices.wiredCount - 1].source : nil,
                        pool: room.workers))
            }
        }
        self.followers = followers
        for f in followers { f.setKey(cents: configuration.keyCents, fromGraphFrame: .min) }
    }

    deinit {
        song.stop()
        // Dropped without a finish: its parts leave the room's graph (the graph holds the units, not the take).
        removeParts()
        for r in recorders { _ = try? r.unit.finish() }
        for f in followers { _ = f.finish() }
    }

    // MARK: In the room

    /// The accompaniment's loudness normalisation, linear (1 without one).
    var normalizationGain: Float { normalized.withLock { $0 }.map { VolumeRange.gain($0.gain) } ?? 1 }

    /// How the accompaniment was normalised (once measured, with ``Configuration/accompanimentLoudness``).
    public var accompanimentNormalization: KaraokeSession.AccompanimentNormalization? { normalized.withLock { $0 } }

    /// Adds the take's parts to `room`'s graph — the song on the accompaniment's bus for its number, the stem
    /// recorders and the pitch tracker as sinks — and starts them at `startTime`.
    func attach(to room: KaraokeRoom, number: Int, startTime: Int64, alignment: Alignment, cycleFrames: Int) throws(AudioError) {
        let graph = room.graph
        var g = GraphParts(graph, known: room.parts)
        let prefix = "take-\(number)"
        // The bus this take plays on, up again after the take before it on the same bus faded out, at the take's
        // loudness normalisation (a mixer's volume is at most 4, +12 dB).
        try? room.accompaniment.setVolume(min(4, normalizationGain), bus: (number - 1) % 2)
        do throws(AudioError) {
            defer {
                // Every part added, the one whose connection failed too, is the take's to take away.
                let added = g.nodes.filter { room.parts[$0.key] == nil }.map(\.value)
                state.withLock { $0.nodes = added }
            }
            // The song's path is "take-N-track" ("take-N-song" is the song.wav stem's recorder).
            try g.add("\(prefix)-track", song)
            try graph.connect(g["\(prefix)-track"]!, to: room.parts["accompaniment"]!, inputBus: (number - 1) % 2)
            for r in recorders {
                try g.add("\(prefix)-\(r.name)", r.unit, from: [r.stage ?? "\(prefix)-track"], sink: true)
            }
            for (i, f) in followers.enumerated() {
                guard let tracker = f.tracker else { continue }
                try g.add("\(prefix)-pitch-\(i + 1)", tracker, from: ["voice-\(i + 1)-dry"], sink: true)
            }
        } catch {
            throw AudioError(error.code, "take \(number) (\(FilePath.lastComponent(configuration.song))): \(error.message)")
        }
        for r in recorders {
            r.unit.startRecording(atSampleTime: alignment.start(r.signal, at: startTime), skipFrames: 0)
        }
        let dry = alignment.dry
        // The song's path renders on its own timeline from 0, ahead; its frame 0 plays at the start time.
        try player.schedule(region, at: 0)
        try song.start(atSampleTime: startTime, cycleFrames: cycleFrames)
        state.withLock {
            $0.number = number
            $0.roundTrip = dry
            $0.alignment = alignment
            $0.startTime = startTime
            $0.songRegionStart = region.startFrame
            $0.scheduled = true
        }
        // A phone voice is read the phones' delay later than a wired one.
        let wired = room.voices.wiredCount
        for (i, f) in followers.enumerated() {
            let shift = i < wired ? alignment.shift(.dryVoice) : alignment.shift(.phoneDry)
            try f.start(graphFrame: startTime, songFrame: region.startFrame, tempo: configuration.tempo, roundTrip: shift)
        }
    }

    /// Takes the take's parts out of the room's graph and stops its song's worker.
    func detach() {
        song.stop()
        removeParts()
    }

    /// Takes the take's parts out of the room's graph (the render thread lets them go at its next cycle).
    func removeParts() {
        let nodes = state.withLock { s -> [NodeID] in
            defer { s.nodes = [] }
            return s.nodes
        }
        for node in nodes { try? room.graph.removeNode(node) }
    }

    /// Fades the song out of the room's accompaniment over the mixer's 20 ms (its stem, recorded before, is not).
    func fadeOut() {
        let bus = state.withLock { $0.number } - 1
        if bus >= 0 { try? room.accompaniment.setVolume(0, bus: bus % 2) }
    }

    /// True for the one caller that is to finish the take.
    func claimFinish() -> Bool {
        state.withLock { s in
            defer { s.finishing = true }
            return !s.finishing
        }
    }

    /// The error that stopped the song's worker (a file that could not be read on): the take cannot go on.
    public var failure: AudioError? { song.failure }

    /// The part each voice sings, with a chart (voice 1's first); empty without one.
    public var parts: [Int] { followers.map(\.part) }

    /// Completes the stems and the score, once nothing renders the take any more.
    func complete(at now: Int64) -> Summary {
        if let done = finalSummary { return done }
        var failure: AudioError?
        var recorded: Int64 = 0
        var dropped: Int64 = 0
        for r in recorders {
            do throws(AudioError) { recorded = max(recorded, try r.unit.finish()) } catch { if failure == nil { failure = error } }
            dropped += r.unit.droppedFrames
        }
        let scores = followers.map { $0.finish() }
        let s = state.withLock { $0 }
        let summary = Summary(
            number: s.number, song: configuration.song,
            seconds: s.scheduled ? Double(max(0, now - s.startTime)) / sampleRate : 0, startTime: s.startTime,
            accompanimentUnderruns: accompanimentUnderruns, recordedFrames: recorded, droppedFrames: dropped,
            error: failure ?? song.failure, score: scores.first ?? nil, scores: scores, parts: followers.map { $0.part },
            normalization: accompanimentNormalization,
            gaps: s.scheduled ? room.timeline.gaps(from: s.startTime, to: now) : [])
        state.withLock { $0.summary = summary }
        return summary
    }

    /// Cycles that found the accompaniment short so far: its file reader behind, or its look-ahead ring not filled in
    /// time.
    public var accompanimentUnderruns: Int { player.underruns + song.underruns }

    /// What of the song plays now, in frames: the take's ``region``, or the last ``playSong(_:)`` asked for.
    public var regionPlaying: FilePlayerUnit.Region { state.withLock { $0.regionPlaying } ?? region }

    /// The summary, once the take has ended.
    var finalSummary: Summary? { state.withLock { $0.summary } }

    /// The room's sample time the song's last frame plays at, when the take has played it straight through (its
    /// region, its loops, at its tempo): where the gap before the next take starts. nil otherwise.
    var nominalSongEnd: Int64? {
        let s = state.withLock { $0 }
        guard s.scheduled, !s.moved, region.loopCount != FilePlayerUnit.Region.endless else { return nil }
        let length = region.frameCount ?? max(0, player.fileFrames - region.startFrame)
        let played = Double(length) * Double(region.loopCount + 1) / configuration.tempo
        // Behind a time-pitch the ears hear the song its look-ahead later.
        return s.startTime + Int64((played + (timePitch?.latency ?? 0) * sampleRate).rounded())
    }

    /// Where the song ended as seen by ``songHasEnded``'s first look after it (nil before).
    var seenSongEnd: Int64? { state.withLock { $0.endSeen } }

    /// Seconds until the take starts on its room's timeline: 0 once it plays, or before it is played.
    public var secondsUntilStart: Double {
        guard let start = startTime else { return 0 }
        return Double(max(0, start - room.sampleTime)) / sampleRate
    }

    /// The take's number in its room (from 1), 0 until it plays.
    public var number: Int { state.withLock { $0.number } }

    /// The room's sample time the take starts at (its stems' frame 0); nil until it is played.
    public var startTime: Int64? { state.withLock { $0.scheduled ? $0.startTime : nil } }

    /// Frames the stems' writers fell too far behind for, so far.
    public var droppedFrames: Int64 { recorders.reduce(0) { $0 + $1.unit.droppedFrames } }

    /// True once the song has played to its end and what follows it has passed — the song's look-ahead and the
    /// time-pitch's, the voice chain's tail time, and 0.1 s — on every stem's timeline: each stem (and a phone voice's
    /// score) is late by its signal's shift, the round trip and more (a phone's `--phone-delay` more than a wired
    /// voice's), and stops where the take's end falls on it, so every stem is as long as the take. Poll it.
    public var songHasEnded: Bool {
        guard player.hasFinished else { return false }
        let now = room.timeline.sampleTime
        // The voice chain's tail too (a reverb's decay, a delay's echoes of the last words sung), at its settings now;
        // an echo that never dies away (feedback 100 %) is cut after the longest reverb decay there is.
        let chainTail = min(room.graph.tailTime(of: room.wetVoice), Double(ReverbUnit.decayTimeAt0HzSpec.range.upperBound))
        let tail = Int64((song.lookAhead + (timePitch?.latency ?? 0) + chainTail + 0.1) * sampleRate)
        // The stems', and the voices' the scores follow (a wired voice's, the wet voice's tail, a phone's) with none.
        let signals = recorders.map(\.signal) + [.dryVoice, .wetVoice] + (room.voices.phones.isEmpty ? [] : [Alignment.Signal.phoneDry])
        return state.withLock { s -> Bool in
            guard s.scheduled else { return false }
            if s.endAt == nil {
                // The first look after the song's end fixes the take's end (on the accompaniment's timeline) and
                // where each stem stops, once.
                let end = now + tail
                s.endSeen = now
                s.endAt = end
                s.completeAt = end + (signals.map { s.alignment.shift($0) }.max() ?? 0)
                for r in recorders { r.unit.stopRecording(atSampleTime: end + s.alignment.shift(r.signal)) }
            }
            return now >= s.completeAt!
        }
    }

    /// The song's loudness from the cache, or measured on a thread of its own; the gain for the target, stopped at
    /// the true-peak ceiling. Once: a take measured already keeps its figure. `stopped` breaks a measurement off.
    func measureLoudness(stopped: @escaping @Sendable () -> Bool) async throws(AudioError) {
        guard let target = configuration.accompanimentLoudness, normalized.withLock({ $0 }) == nil else { return }
        try LoudnessNormalization.check(target: target, ceiling: configuration.accompanimentTruePeak)
        let path = configuration.song
        let cache = configuration.loudnessCache
        var measured: (integrated: Double, truePeak: Double)
        var cached = false
        if let hit = cache?.lookUp(path) {
            measured = hit
            cached = true
        } else {
            let result: Result<FileLoudness, AudioError> = await withCheckedContinuation { continuation in
                do throws(AudioError) {
                    _ = try WorkerThread(name: "la-loudness") {
                        continuation.resume(returning: Result { () throws(AudioError) in
                            try FileLoudness.measure(path: path, stopped: stopped)
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
        let n: KaraokeSession.AccompanimentNormalization
        if measured.integrated.isFinite {
            let g = KaraokeSession.AccompanimentNormalization.gain(
                wanted: target - measured.integrated, room: configuration.accompanimentTruePeak - measured.truePeak)
            n = .init(
                measured: measured.integrated, truePeak: measured.truePeak, cached: cached, gain: g.gain, target: target,
                limitedByTruePeak: g.byTruePeak, limitedByMixer: g.byMixer)
        } else {
            n = .init(
                measured: measured.integrated, truePeak: measured.truePeak, cached: cached, gain: 0, target: target,
                limitedByTruePeak: false, limitedByMixer: false)
        }
        normalized.withLock { $0 = n }
    }

    // MARK: Parts

    /// The part voice `voice` (from 1) sings: ``Configuration/parts``' entry, else with several voices the voice's own
    /// number when the chart has that part, else ``Configuration/part``.
    static func part(of voice: Int, _ c: Configuration, voices: Int) -> Int {
        if let parts = c.parts, parts.indices.contains(voice - 1) { return parts[voice - 1] }
        if voices > 1, c.chart?.voice(voice) != nil { return voice }
        return c.part
    }

    /// The accompaniment's player, at the room's rate and channel count.
    static func songPlayer(_ configuration: Configuration, format: StreamFormat) throws(AudioError) -> FilePlayerUnit {
        do throws(AudioError) {
            return try FilePlayerUnit(path: configuration.song, sampleRate: format.sampleRate, channelCount: format.channelCount)
        } catch {
            throw AudioError(error.code, "the song '\(configuration.song)' cannot be played: \(error.message)")
        }
    }

    /// The song's time-pitch, when the key or the tempo changes (or may).
    static func timePitch(_ configuration: Configuration, format: StreamFormat) throws(AudioError) -> TimePitchUnit? {
        guard configuration.keyCents != 0 || configuration.tempo != 1 || configuration.keyAdjustable else { return nil }
        let unit = try TimePitchUnit(format: format)
        try unit.pitch.set(Float(configuration.keyCents))
        try unit.rate.set(Float(configuration.tempo))
        return unit
    }

    /// The song's path — its player and time-pitch — rendered ahead of the device on a worker.
    static func songAhead(_ player: FilePlayerUnit, _ timePitch: TimePitchUnit?, format: StreamFormat) throws(AudioError) -> RenderAheadSource {
        do throws(AudioError) {
            let graph = try RenderGraph(format: format, maximumFrames: 1024)
            let node = try graph.addNode(player, name: "song")
            if let timePitch {
                let shifted = try graph.addNode(timePitch, name: "timePitch")
                try graph.connect(node, to: shifted)
                try graph.connect(shifted, to: graph.output)
            } else {
                try graph.connect(node, to: graph.output)
            }
            return try RenderAheadSource(graph: graph, maximumCycleFrames: KaraokeRoom.maximumFrames)
        } catch {
            throw AudioError(error.code, "part 'song' (renderAhead): \(error.message)")
        }
    }

    /// The stem recorders the configuration asks for, in the stems folder: the accompaniment, the dry and the wet
    /// voice, the song.
    static func recorders(_ configuration: Configuration, room: KaraokeRoom) throws(AudioError) -> [Recorder] {
        guard let folder = configuration.stemsDirectory else { return [] }
        let format = room.graph.format
        let voices = room.voices
        var wanted: [(name: String, file: String, signal: Alignment.Signal, stage: String?, channels: Int)] = [
            ("accompaniment", "accompaniment.wav", .accompaniment, nil, format.channelCount)
        ]
        // One voice: voice-dry.wav and voice-wet.wav; several: voice-1-dry.wav, voice-1-wet.wav, …
        for v in 1...voices.dry.count {
            let name = voices.dry.count == 1 ? "voice" : "voice-\(v)"
            let phone = v > voices.wiredCount
            wanted.append(("\(name)-dry", "\(name)-dry.wav", phone ? .phoneDry : .dryVoice, "voice-\(v)-dry", voices.dryFormat.channelCount))
            wanted.append(("\(name)-wet", "\(name)-wet.wav", phone ? .phoneWet : .wetVoice, "voice-\(v)-wet", voices.wetFormat.channelCount))
        }
        wanted.append(("song", "song.wav", .songMix, "song-mix", format.channelCount))
        var made: [Recorder] = []
        for w in wanted {
            let unit = try RecorderUnit(
                format: try .graph(sampleRate: format.sampleRate, channelCount: w.channels), path: FilePath.join(folder, w.file),
                waitsForStart: true, pool: room.workers)
            made.append(Recorder(name: w.name, unit: unit, signal: w.signal, stage: w.stage))
        }
        return made
    }
}
