import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import FoundationEssentials

/// The parts ``KaraokeRoom/init(_:)`` builds the room from, each checked where it is made.
extension KaraokeRoom {
    static func encodedOutputs(
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
