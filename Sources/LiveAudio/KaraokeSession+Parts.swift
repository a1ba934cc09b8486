import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import FoundationEssentials

/// The parts ``KaraokeSession/init(_:)`` builds the session from, each checked where it is made.
extension KaraokeSession {
    /// The largest cycle the graph renders.
    static let maximumFrames = max(DeviceRequest.maximumPeriodFrames, 4096)

    /// A stem recorder: its name, what it is shifted by, and the stage it records (nil: the accompaniment, which is
    /// the time-pitch's output when there is one).
    struct Recorder {
        let name: String
        let unit: RecorderUnit
        let shift: Shift
        let stage: String?

        func source(_ accompaniment: String) -> String { stage ?? accompaniment }
    }

    /// The voice chain loaded from its graph file (its output disconnected: the session wires the wet voice), or a
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
            // The wet voice: what the file connects to its output.
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

    /// Checks the volumes, the stems folder and the record path; the encoded outputs (the configuration's, and the
    /// record path when it is not a WAV), and the WAV the song is recorded to.
    static func checkedOutputs(_ configuration: Configuration) throws(AudioError)
        -> (outputs: [LiveStreamSession.Output], wavRecord: String?)
    {
        for (name, value) in [
            ("accompaniment", configuration.accompanimentVolume), ("voice", configuration.voiceVolume),
            ("monitor voice", configuration.monitorVoiceVolume),
        ] where !(value == -.infinity || (-96...12).contains(value)) {
            throw AudioError(.invalidParameter, "the \(name) volume must be between -96 and +12 dB (or -inf), got \(value)")
        }
        if let dir = configuration.stemsDirectory { try Preflight.checkFolder(dir, role: "stems folder") }
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

    /// The accompaniment's player, at the session's rate and channel count.
    static func songPlayer(_ configuration: Configuration, format: StreamFormat) throws(AudioError) -> FilePlayerUnit {
        do throws(AudioError) {
            return try FilePlayerUnit(path: configuration.song, sampleRate: format.sampleRate, channelCount: format.channelCount)
        } catch {
            throw AudioError(error.code, "the song '\(configuration.song)' cannot be played: \(error.message)")
        }
    }

    /// The song's time-pitch, when the key or the tempo changes (or may, on the screen).
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
            return try RenderAheadSource(graph: graph, maximumCycleFrames: maximumFrames)
        } catch {
            throw AudioError(error.code, "stage 'song' (renderAhead): \(error.message)")
        }
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

    /// The stem recorders the configuration asks for (in the stems folder: the accompaniment, the dry and the wet
    /// voice, the song) and the song's WAV, each with what it is shifted by and the stage it records.
    static func recorders(_ configuration: Configuration, wavRecord: String?, chain: VoiceChain) throws(AudioError) -> [Recorder] {
        let graph = chain.graph
        let rate = graph.format.sampleRate
        let stems = configuration.stemsDirectory.map { folder in { FilePath.join(folder, $0) } }
        let wanted: [(name: String, path: String?, shift: Shift, stage: String?, channels: Int)] = [
            ("accompaniment", stems?("accompaniment.wav"), .none, nil, graph.format.channelCount),
            ("voice-dry", stems?("voice-dry.wav"), .roundTrip, "mic", chain.input.outputFormats[0].channelCount),
            ("voice-wet", stems?("voice-wet.wav"), .roundTripAndChain, "wet", try graph.unit(chain.wet).outputFormats[0].channelCount),
            ("song", stems?("song.wav"), .roundTripAndChain, "song-mix", graph.format.channelCount),
            (stems == nil ? "song" : "song-1", wavRecord, .roundTripAndChain, "song-mix", graph.format.channelCount),
        ]
        var made: [Recorder] = []
        for w in wanted {
            guard let path = w.path else { continue }
            let unit = try RecorderUnit(format: try .graph(sampleRate: rate, channelCount: w.channels), path: path, waitsForStart: true)
            made.append(Recorder(name: w.name, unit: unit, shift: w.shift, stage: w.stage))
        }
        return made
    }
}
