import AudioCodecs
import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import FoundationEssentials

/// The parts ``KaraokeRoom/init(_:)`` builds the room from, each checked where it is made.
extension KaraokeRoom {
    static func encodedOutputs(
        _ outputs: [LiveStreamSession.Output], _ c: Configuration, _ format: StreamFormat, pool: WorkerPool
    ) throws(AudioError) -> EncodedOutputs {
        try EncodedOutputs(
            outputs: outputs, sampleRate: format.sampleRate, channelCount: format.channelCount, bitRate: c.bitRate,
            rtmp: c.rtmp, bufferedSeconds: 2, pool: pool)
    }

    /// Checks the volumes and the record path; the encoded outputs (the configuration's, and the record path when
    /// it is not a WAV), and the WAV the song is recorded to.
    static func checkedOutputs(_ configuration: Configuration) throws(AudioError)
        -> (outputs: [LiveStreamSession.Output], wavRecord: String?)
    {
        for (name, value) in [
            ("accompaniment", configuration.accompanimentVolume), ("voice", configuration.voiceVolume),
            ("monitor voice", configuration.monitorVoiceVolume), ("interlude", configuration.interludeVolume),
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
        device.pipeWireRemote = configuration.pipeWireRemote
        device.clocks = configuration.clocks
        device.conversionQuality = .low
        let io = try IOUnit(device)
        try io.recordCycleTimings(capacity: configuration.cycleTimingCapacity)
        return io
    }

    /// The room's voices: the microphone (one input unit, every wired voice's channels), and for each voice its
    /// channels picked out of it (the dry voice) and its copy of the voice chain (its last node: the wet voice). The
    /// first voice's chain makes the graph, as a graph file does; the others join it, their nodes named `voice-N/…`.
    /// The phone voices come after the wired ones: their dry voice is a ``PhoneVoiceSource`` (what the network
    /// brings, placed where it was sung), their chain a copy like the others'.
    struct Voices {
        let graph: RenderGraph
        /// Each voice's chain as loaded (empty without a voice chain).
        let loaded: [LoadedGraph]
        let microphone: InputUnit
        /// Each voice's channels of the microphone.
        let dry: [NodeID]
        /// Each voice's chain's last node (its dry node without a chain).
        let wet: [NodeID]
        let dryFormat: StreamFormat
        let wetFormat: StreamFormat
        /// Seconds from the microphone to the wet voice.
        let latency: Double
        /// The phone voices' sources: the voices after the wired ones.
        let phones: [PhoneVoiceSource]
        /// The wired voices (the first of ``dry`` and ``wet``).
        var wiredCount: Int { dry.count - phones.count }

        init(_ configuration: Configuration, maximumFrames: Int) throws(AudioError) {
            let count = configuration.voiceCount
            let phoneCount = configuration.phoneVoices
            guard (1...Configuration.maximumVoices).contains(count) else {
                throw AudioError(.invalidParameter, "a room has 1 … \(Configuration.maximumVoices) voices, got \(count)")
            }
            guard phoneCount >= 0, count + phoneCount <= Configuration.maximumVoices else {
                throw AudioError(
                    .invalidParameter,
                    "a room has at most \(Configuration.maximumVoices) voices, wired and phones: \(count) wired and \(phoneCount) phones")
            }
            guard phoneCount == 0 || (0.1...1.5).contains(configuration.phoneDelay) else {
                throw AudioError(.invalidParameter, "the phones' delay must be 0.1 … 1.5 s, got \(configuration.phoneDelay)")
            }
            let maximumDelay = configuration.phoneDelay + 0.5
            guard let path = configuration.voiceChain else {
                let rate = configuration.sampleRate
                graph = try RenderGraph(
                    format: try .graph(sampleRate: rate, channelCount: configuration.channelCount), maximumFrames: maximumFrames)
                loaded = []
                microphone = try InputUnit(sampleRate: rate, channelCount: count)
                let mic = try graph.addNode(microphone, name: "microphone")
                var picked: [NodeID] = []
                for i in 0..<count {
                    let pick = try graph.addNode(
                        try ChannelPickUnit(sampleRate: rate, inputChannels: count, first: i, count: 1), name: "voice-\(i + 1)")
                    try graph.connect(mic, to: pick)
                    picked.append(pick)
                }
                var phones: [PhoneVoiceSource] = []
                for i in 0..<phoneCount {
                    let source = try PhoneVoiceSource(sampleRate: rate, feed: PhoneVoiceFeed(), maximumDelay: maximumDelay)
                    picked.append(try graph.addNode(source, name: "voice-\(count + i + 1)"))
                    phones.append(source)
                }
                self.phones = phones
                dry = picked
                wet = picked
                dryFormat = try .graph(sampleRate: rate, channelCount: 1)
                wetFormat = dryFormat
                latency = 0
                return
            }
            var loaded: [LoadedGraph] = []
            var picks: [(node: NodeID, unit: ChannelPickUnit)] = []
            var phoneNodes: [(node: NodeID, unit: PhoneVoiceSource)] = []
            var wet: [NodeID] = []
            var latency = 0.0
            for i in 0..<(count + phoneCount) {
                let phone = i >= count
                // The chain's input node is this voice's channels of the one microphone, or a phone.
                var registry = configuration.unitRegistry
                registry.register("input") { (f: inout NodeFields) throws(AudioError) -> any RenderUnit in
                    let channels = try f.integer("channels", default: 1, in: 1...64)
                    if phone {
                        return try PhoneVoiceSource(sampleRate: f.format.sampleRate, feed: PhoneVoiceFeed(), channelCount: channels, maximumDelay: maximumDelay)
                    }
                    return try ChannelPickUnit(
                        sampleRate: f.format.sampleRate, inputChannels: count * channels, first: i * channels, count: channels)
                }
                let chain = try GraphFile.load(
                    path: path, maximumFrames: maximumFrames, registry: registry, into: loaded.first?.graph,
                    prefix: i == 0 ? "" : "voice-\(i + 1)/")
                let inputs = chain.nodeIDs.compactMap { id -> NodeID? in
                    chain.units[id] is ChannelPickUnit || chain.units[id] is PhoneVoiceSource ? chain.nodes[id]! : nil
                }
                guard inputs.count == 1 else {
                    throw AudioError(
                        .invalidGraphDescription,
                        "a voice chain needs exactly one node of type \"input\" (the microphone); '\(path)' has \(inputs.count)")
                }
                let last = try chain.lastNode(of: path, carrying: "the wet voice")
                if i == 0 {
                    latency = chain.graph.latency
                    try chain.graph.disconnect(chain.graph.output)
                }
                loaded.append(chain)
                for id in chain.nodeIDs {
                    if let unit = chain.units[id] as? ChannelPickUnit { picks.append((chain.nodes[id]!, unit)) }
                    if let unit = chain.units[id] as? PhoneVoiceSource { phoneNodes.append((chain.nodes[id]!, unit)) }
                }
                wet.append(last)
            }
            graph = loaded[0].graph
            let perVoice = picks[0].unit.outputFormats[0].channelCount
            microphone = try InputUnit(sampleRate: graph.format.sampleRate, channelCount: count * perVoice)
            let mic = try graph.addNode(microphone, name: "microphone")
            for p in picks { try graph.connect(mic, to: p.node) }
            self.loaded = loaded
            self.wet = wet
            self.latency = latency
            phones = phoneNodes.map(\.unit)
            dry = picks.map(\.node) + phoneNodes.map(\.node)
            dryFormat = picks[0].unit.outputFormats[0]
            wetFormat = try graph.unit(wet[0]).outputFormats[0]
        }
    }
}
