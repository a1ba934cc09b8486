import FoundationEssentials

/// The fields of one node in a graph file, with typed accessors whose errors name the node and the field.
public struct NodeFields {
    /// The node's `id` in the file, unique in the graph.
    public let id: String
    /// The node's `type`: the name its factory is registered under in the ``UnitRegistry``.
    public let type: String
    /// The graph's format: sample rate and default channel count.
    public let format: StreamFormat
    /// Folder that relative paths resolve against (the graph file's).
    public let baseDirectory: String
    let values: [String: JSONValue]
    private(set) var consumed: Set<String> = ["id", "type", "bypass"]

    /// True when the node names a rate of its own ("sampleRate"), which ``format`` then has.
    public let hasOwnRate: Bool

    /// The format of what the file connects to this node's input bus 0, when that node is made first (a graph file
    /// makes a node after the one feeding it): a converter takes its input rate from it.
    public let sourceFormat: StreamFormat?

    init(
        id: String, type: String, values: [String: JSONValue], format: StreamFormat, baseDirectory: String, hasOwnRate: Bool = false,
        sourceFormat: StreamFormat? = nil
    ) {
        self.id = id
        self.type = type
        self.values = values
        self.format = format
        self.baseDirectory = baseDirectory
        self.hasOwnRate = hasOwnRate
        self.sourceFormat = sourceFormat
        if hasOwnRate { consumed.insert("sampleRate") }
    }

    /// An error about field `key` of this node.
    public func error(_ key: String, _ problem: String) -> AudioError {
        AudioError(.invalidGraphDescription, "node '\(id)' (\(type)): field '\(key)' \(problem)")
    }

    /// Whether the node gives field `key` (any value); does not count it as read.
    public func has(_ key: String) -> Bool { values[key] != nil }

    /// A number in `range`, or `defaultValue` when absent (required when `defaultValue` is nil).
    public mutating func number(_ key: String, default defaultValue: Double? = nil, in range: ClosedRange<Double>, unit: String = "")
        throws(AudioError) -> Double
    {
        consumed.insert(key)
        guard let v = values[key] else {
            if let defaultValue { return defaultValue }
            throw error(key, "is required")
        }
        guard case .number(let d) = v else { throw error(key, "must be a number, got \(v.kindName)") }
        guard range.contains(d) else {
            throw error(key, "must be between \(Self.show(range.lowerBound))\(unit) and \(Self.show(range.upperBound))\(unit), got \(Self.show(d))")
        }
        return d
    }

    /// A whole number in `range`.
    public mutating func integer(_ key: String, default defaultValue: Int? = nil, in range: ClosedRange<Int>) throws(AudioError) -> Int {
        let d = try number(key, default: defaultValue.map(Double.init), in: Double(range.lowerBound)...Double(range.upperBound))
        guard d == d.rounded() else { throw error(key, "must be a whole number, got \(d)") }
        return Int(d)
    }

    /// A `true` or `false` field, or `defaultValue` when absent; counts `key` as read.
    /// - Parameters:
    ///   - key: the field's name.
    ///   - defaultValue: the value when the node does not give the field.
    /// - Returns: the field's value.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when the field is not a boolean.
    public mutating func bool(_ key: String, default defaultValue: Bool) throws(AudioError) -> Bool {
        consumed.insert(key)
        guard let v = values[key] else { return defaultValue }
        guard case .bool(let b) = v else { throw error(key, "must be true or false, got \(v.kindName)") }
        return b
    }

    /// The required non-empty string in field `key`; counts `key` as read.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when the field is absent, not a string or empty.
    public mutating func string(_ key: String) throws(AudioError) -> String {
        consumed.insert(key)
        guard let v = values[key] else { throw error(key, "is required") }
        guard case .string(let s) = v, !s.isEmpty else { throw error(key, "must be a non-empty string, got \(v)") }
        return s
    }

    /// A path, resolved against the graph file's folder when relative.
    public mutating func path(_ key: String) throws(AudioError) -> String {
        let p = try string(key)
        return p.hasPrefix("/") ? p : FilePath.join(baseDirectory, p)
    }

    /// An array of `count` numbers in `range`, or `count` copies of `defaultValue` when absent.
    public mutating func numbers(
        _ key: String, count: Int, default defaultValue: Double, in range: ClosedRange<Double>, each: String = "input"
    ) throws(AudioError) -> [Double]
    {
        consumed.insert(key)
        guard let v = values[key] else { return Array(repeating: defaultValue, count: count) }
        guard case .array(let items) = v else { throw error(key, "must be an array of \(count) numbers, got \(v.kindName)") }
        guard items.count == count else { throw error(key, "must have \(count) entries (one per \(each)), got \(items.count)") }
        var result: [Double] = []
        for (i, item) in items.enumerated() {
            guard case .number(let d) = item, range.contains(d) else {
                throw error(key, "entry \(i) must be a number between \(Self.show(range.lowerBound)) and \(Self.show(range.upperBound)), got \(item)")
            }
            result.append(d)
        }
        return result
    }

    /// The array of objects in `key` (empty when absent), each checked by `body` with a label like `bands[2]`.
    public mutating func objects<T>(_ key: String, maximumCount: Int, _ body: (_ label: String, _ object: [String: JSONValue]) throws(AudioError) -> T)
        throws(AudioError) -> [T]
    {
        consumed.insert(key)
        guard let v = values[key] else { return [] }
        guard case .array(let items) = v else { throw error(key, "must be an array of objects, got \(v.kindName)") }
        guard items.count <= maximumCount else { throw error(key, "holds at most \(maximumCount) entries, got \(items.count)") }
        var result: [T] = []
        for (i, item) in items.enumerated() {
            guard case .object(let o) = item else { throw error("\(key)[\(i)]", "must be an object, got \(item.kindName)") }
            result.append(try body("\(key)[\(i)]", o))
        }
        return result
    }

    /// Counts `key` as read (a factory that reads the node's fields itself, other than through these accessors).
    public mutating func markConsumed(_ key: String) { consumed.insert(key) }

    /// Fields not read by the factory.
    var unconsumed: [String] { values.keys.filter { !consumed.contains($0) }.sorted() }

    static func show(_ d: Double) -> String { d == d.rounded() && abs(d) < 1e15 ? "\(Int(d))" : "\(d)" }
}

/// Creates units from graph-file nodes by `type`. ``standard`` knows every unit LiveAudio ships; add your own with
/// ``register(_:factory:)``. After the factory, any remaining numeric field that names a parameter of the unit
/// sets it (range-checked), so `{"type": "gain", "gain": -6}` works for any unit; other leftover fields are errors.
public struct UnitRegistry: Sendable {
    /// Makes the unit for one node: reads its fields through the ``NodeFields`` accessors (each counts its field as
    /// read) and returns the unit, or throws ``/AudioCore/AudioError`` (best made with ``NodeFields/error(_:_:)``).
    /// Called on the thread loading the graph file.
    public typealias Factory = @Sendable (inout NodeFields) throws(AudioError) -> RenderUnit
    private var factories: [String: Factory] = [:]

    /// An empty registry, with no types; ``standard`` has LiveAudio's.
    public init() {}

    /// Makes `factory` the one for nodes whose `type` is `type`, replacing any registered under that name.
    /// - Parameters:
    ///   - type: the `type` string in the graph file.
    ///   - factory: makes the unit for each such node.
    public mutating func register(_ type: String, factory: @escaping Factory) { factories[type] = factory }

    /// The registered type names, sorted.
    public var types: [String] { factories.keys.sorted() }

    func make(_ fields: inout NodeFields) throws(AudioError) -> RenderUnit {
        guard let factory = factories[fields.type] else {
            throw AudioError(
                .invalidGraphDescription,
                "node '\(fields.id)': unknown type '\(fields.type)' (known: \(types.joined(separator: ", ")))")
        }
        let unit = try factory(&fields)
        for key in fields.unconsumed {
            guard let p = unit.parameters.first(where: { $0.identifier == key }) else {
                throw fields.error(key, "is not known for \(fields.type) (parameters: \(unit.parameters.map(\.identifier).joined(separator: ", ")))")
            }
            guard case .number(let d)? = fields.values[key] else {
                throw fields.error(key, "must be a number, got \(fields.values[key]!.kindName)")
            }
            do throws(AudioError) {
                try p.set(Float(d))
            } catch {
                throw fields.error(key, "must be in \(p.spec.rangeDescription), got \(NodeFields.show(d))")
            }
        }
        unit.isBypassed = try fields.bool("bypass", default: false)
        return unit
    }

    /// One `eq` band object: `type`, `frequency`, `gain`, `q` or `bandwidth`, `bypass`.
    static func eqBand(_ f: NodeFields, _ label: String, _ o: [String: JSONValue]) throws(AudioError) -> EQBand {
        let known = ["type", "frequency", "gain", "q", "bandwidth", "bypass"]
        for key in o.keys.sorted() where !known.contains(key) {
            throw f.error("\(label).\(key)", "is not a band field (known: \(known.joined(separator: ", ")))")
        }
        func number(_ key: String, _ range: ClosedRange<Double>, _ unit: String) throws(AudioError) -> Double? {
            guard let v = o[key] else { return nil }
            guard case .number(let d) = v else { throw f.error("\(label).\(key)", "must be a number, got \(v.kindName)") }
            guard range.contains(d) else {
                throw f.error("\(label).\(key)", "must be between \(NodeFields.show(range.lowerBound))\(unit) and \(NodeFields.show(range.upperBound))\(unit), got \(NodeFields.show(d))")
            }
            return d
        }
        let types = BiquadType.allCases.map(\.rawValue)
        guard case .string(let name)? = o["type"], let type = BiquadType(rawValue: name) else {
            throw f.error("\(label).type", "must be one of \(types.joined(separator: ", ")), got \(o["type"]?.description ?? "nothing")")
        }
        let top = Double(EQUnit.maximumFrequency(f.format.sampleRate))
        guard let frequency = try number("frequency", 10...top, " Hz") else { throw f.error("\(label).frequency", "is required") }
        let gain = try number("gain", -96...24, " dB") ?? 0
        let q = try number("q", 0.05...40, "")
        let bandwidth = try number("bandwidth", 0.05...5, " octaves")
        if bandwidth != nil {
            guard q == nil else { throw f.error(label, "gives both q and bandwidth; give one") }
            guard type.acceptsBandwidth else {
                throw f.error("\(label).bandwidth", "is for peak, bandPass and notch bands; a \(name) band takes q")
            }
        }
        var bypass = false
        if let v = o["bypass"] {
            guard case .bool(let b) = v else { throw f.error("\(label).bypass", "must be true or false, got \(v.kindName)") }
            bypass = b
        }
        return EQBand(type, frequency: frequency, gain: gain, q: q ?? 0.5.squareRoot(), bandwidth: bandwidth, bypass: bypass)
    }

    /// The units LiveAudio ships: sources `input` (the microphone), `file`, `filePlayer`, `player`, `tone`, `noise`;
    /// `mixer`, `gain`, `sampleDelay`; effects `eq`, `lowpass`, `highpass`, `bandpass`, `dynamics`, `reverb`, `delay`,
    /// `limiter`; `converter` and `timePitch`; `voiceProcessing`; `pitchTracker`.
    public static let standard: UnitRegistry = {
        var r = UnitRegistry()
        r.register("file") { (f: inout NodeFields) throws(AudioError) in
            let path = try f.path("path")
            // "resample": false keeps the file's own rate (a converter node takes it to the graph's).
            let resample = try f.bool("resample", default: true)
            let unit: FileSourceUnit
            do throws(AudioError) {
                unit = try FileSourceUnit(path: path, sampleRate: resample ? f.format.sampleRate : nil)
            } catch {
                throw f.error("path", "cannot be played: \(error.message)")
            }
            if !resample, f.hasOwnRate, let rate = unit.busSampleRate, rate != f.format.sampleRate {
                throw f.error("sampleRate", "is \(NodeFields.show(f.format.sampleRate)) but the file runs at \(NodeFields.show(rate)) and \"resample\" is false")
            }
            return unit
        }
        r.register("filePlayer") { (f: inout NodeFields) throws(AudioError) in
            // A region of the file at a time on the graph's timeline: "startFrame", "frameCount" (absent: to the
            // end), "loopCount" (more passes; "loopForever" for no end), "startTime" (seconds).
            let path = try f.path("path")
            let startFrame = try f.integer("startFrame", default: 0, in: 0...Int(Int32.max) * 1024)
            let frameCount = f.has("frameCount") ? try f.integer("frameCount", in: 1...Int(Int32.max) * 1024) : nil
            let loopCount = try f.integer("loopCount", default: 0, in: 0...1_000_000)
            let forever = try f.bool("loopForever", default: false)
            let startTime = try f.number("startTime", default: 0, in: 0...86_400, unit: " s")
            let unit: FilePlayerUnit
            do throws(AudioError) {
                unit = try FilePlayerUnit(path: path, sampleRate: f.format.sampleRate)
            } catch {
                throw f.error("path", "cannot be played: \(error.message)")
            }
            if unit.reader.isFrameCountExact {
                if Int64(startFrame) >= unit.fileFrames {
                    throw f.error("startFrame", "is outside the file (\(unit.fileFrames) frames at \(NodeFields.show(f.format.sampleRate)) Hz)")
                }
                if let frameCount, Int64(startFrame + frameCount) > unit.fileFrames {
                    throw f.error("frameCount", "runs past the file's end: \(startFrame) + \(frameCount) > \(unit.fileFrames) frames")
                }
            }
            do throws(AudioError) {
                try unit.schedule(
                    FilePlayerUnit.Region(
                        startFrame: Int64(startFrame), frameCount: frameCount.map(Int64.init),
                        loopCount: forever ? FilePlayerUnit.Region.endless : loopCount),
                    at: Int64((startTime * f.format.sampleRate).rounded()))
            } catch {
                throw f.error("frameCount", error.message)
            }
            return unit
        }
        r.register("converter") { (f: inout NodeFields) throws(AudioError) in
            // The output runs at the node's rate (the graph's unless "sampleRate" says otherwise) and channel count;
            // the input at "inputRate" (by default the rate of what feeds it) and "inputChannels".
            let channels = try f.integer("channels", default: f.format.channelCount, in: 1...64)
            let inputRate = try f.number(
                "inputRate", default: f.sourceFormat?.sampleRate ?? f.format.sampleRate, in: 8_000...192_000, unit: "Hz")
            let inputChannels = try f.integer("inputChannels", default: channels, in: 1...64)
            let qualityName = f.has("quality") ? try f.string("quality") : "high"
            guard let quality = SampleRateConverter.Quality(rawValue: qualityName) else {
                let names = SampleRateConverter.Quality.allCases.map(\.rawValue).joined(separator: ", ")
                throw f.error("quality", "must be one of \(names), got '\(qualityName)'")
            }
            let map: [Int]? =
                f.has("channelMap")
                ? try f.numbers("channelMap", count: channels, default: 0, in: -1...Double(inputChannels - 1), each: "output channel").map { Int($0) } : nil
            do throws(AudioError) {
                return try ConverterUnit(
                    inputFormat: StreamFormat.graph(sampleRate: inputRate, channelCount: inputChannels),
                    outputFormat: StreamFormat.graph(sampleRate: f.format.sampleRate, channelCount: channels), quality: quality,
                    channelMap: map)
            } catch {
                throw AudioError(.invalidGraphDescription, "node '\(f.id)' (converter): \(error.message)")
            }
        }
        r.register("timePitch") { (f: inout NodeFields) throws(AudioError) in
            // "rate" and "pitch" are parameters (the leftover-field rule sets them); "formant" a switch.
            let qualityName = f.has("quality") ? try f.string("quality") : TimePitchUnit.Quality.finer.rawValue
            guard let quality = TimePitchUnit.Quality(rawValue: qualityName) else {
                let names = TimePitchUnit.Quality.allCases.map(\.rawValue).joined(separator: ", ")
                throw f.error("quality", "must be one of \(names), got '\(qualityName)'")
            }
            let unit = try TimePitchUnit(format: f.format, quality: quality)
            try unit.formant.set(try f.bool("formant", default: false) ? 1 : 0)
            return unit
        }
        r.register("pitchTracker") { (f: inout NodeFields) throws(AudioError) in
            // Passes its input on; estimates the voice's pitch every "hop" seconds between "minimumFrequency" and
            // "maximumFrequency" (Hz).
            var c = PitchEstimator.Configuration()
            c.minimumFrequency = try f.number("minimumFrequency", default: c.minimumFrequency, in: 40...1_000, unit: " Hz")
            c.maximumFrequency = try f.number("maximumFrequency", default: c.maximumFrequency, in: 80...2_000, unit: " Hz")
            c.hop = try f.number("hop", default: c.hop, in: 0.001...0.05, unit: " s")
            guard c.minimumFrequency * 2 <= c.maximumFrequency else {
                throw f.error("maximumFrequency", "must be at least an octave above minimumFrequency (\(NodeFields.show(c.minimumFrequency)) Hz)")
            }
            return try PitchTrackerUnit(format: f.format, configuration: c)
        }
        r.register("voiceProcessing") { (f: inout NodeFields) throws(AudioError) in
            // Bus 0 the microphone, bus 1 the reference ("referenceChannels", default the graph's). Parameters are
            // fields: numbers, true/false for the switches, names for the enumerated ones ("noiseSuppression":
            // "high"), or their numbers.
            let referenceChannels = try f.integer("referenceChannels", default: min(f.format.channelCount, 2), in: 1...2)
            let unit: VoiceProcessingUnit
            do throws(AudioError) {
                unit = try VoiceProcessingUnit(format: f.format, referenceChannelCount: referenceChannels)
            } catch {
                throw AudioError(error.code, "node '\(f.id)' (voiceProcessing): \(error.message)")
            }
            for p in unit.parameters {
                guard let v = f.values[p.identifier] else { continue }
                switch v {
                case .bool(let b) where p.spec.unit == .boolean:
                    try p.set(b ? 1 : 0)
                case .string(let name):
                    guard let names = VoiceProcessingUnit.choices[p.identifier], let i = names.firstIndex(of: name) else {
                        let known = VoiceProcessingUnit.choices[p.identifier].map { "one of \($0.joined(separator: ", "))" }
                        throw f.error(p.identifier, "must be \(known ?? "a number in \(p.spec.rangeDescription)"), got '\(name)'")
                    }
                    try p.set(Float(i))
                case .number(let d):
                    guard d == d.rounded() || VoiceProcessingUnit.choices[p.identifier] == nil else {
                        throw f.error(p.identifier, "must be a whole number or a name, got \(NodeFields.show(d))")
                    }
                    do throws(AudioError) {
                        try p.set(Float(d))
                    } catch {
                        throw f.error(p.identifier, "must be in \(p.spec.rangeDescription), got \(NodeFields.show(d))")
                    }
                default:
                    throw f.error(p.identifier, "must be a number\(p.spec.unit == .boolean ? ", true or false" : VoiceProcessingUnit.choices[p.identifier] != nil ? " or a name" : ""), got \(v.kindName)")
                }
                f.markConsumed(p.identifier)
            }
            return unit
        }
        r.register("player") { (f: inout NodeFields) throws(AudioError) in
            let path = try f.path("path")
            let loop = try f.bool("loop", default: false)
            do throws(AudioError) {
                let reader = try AudioFile.open(path: path, sampleRate: f.format.sampleRate)
                guard reader.frameCount <= Int64(f.format.sampleRate * 3600) else {
                    throw AudioError(.unsupportedFile, "is longer than an hour; use a 'file' node to stream it")
                }
                // Room for an estimated length that falls a little short.
                let capacity = Int(reader.frameCount) + (reader.isFrameCountExact ? 0 : Int(f.format.sampleRate))
                let buffer = PCMBuffer(channelCount: reader.channelCount, capacity: max(capacity, 1))
                buffer.frameLength = try reader.read(into: buffer.view(frames: capacity))
                return try BufferPlayerUnit(buffer: buffer, sampleRate: reader.sampleRate, loop: loop)
            } catch {
                throw f.error("path", "cannot be loaded: \(error.message)")
            }
        }
        r.register("input") { (f: inout NodeFields) throws(AudioError) in
            // The microphone: fed by the I/O unit that runs the graph (`liveaudio monitor`).
            let channels = try f.integer("channels", default: 1, in: 1...64)
            return try InputUnit(sampleRate: f.format.sampleRate, channelCount: channels)
        }
        r.register("tone") { (f: inout NodeFields) throws(AudioError) in
            let nyquist = f.format.sampleRate / 2
            let channels = try f.integer("channels", default: f.format.channelCount, in: 1...64)
            return try ToneUnit(
                format: f.format.with(channelCount: channels),
                frequency: Float(try f.number("frequency", default: 440, in: 0...nyquist, unit: " Hz")),
                amplitude: Float(try f.number("amplitude", default: 0.5, in: 0...1)))
        }
        r.register("noise") { (f: inout NodeFields) throws(AudioError) in
            let channels = try f.integer("channels", default: f.format.channelCount, in: 1...64)
            return try NoiseUnit(
                format: f.format.with(channelCount: channels),
                amplitude: Float(try f.number("amplitude", default: 0.1, in: 0...1)),
                seed: UInt64(try f.integer("seed", default: 1, in: 0...Int(Int32.max))))
        }
        r.register("mixer") { (f: inout NodeFields) throws(AudioError) in
            let inputs = try f.integer("inputs", in: 1...64)
            let mixer = try MixerUnit(format: f.format, inputs: inputs)
            let volumes = try f.numbers("volume", count: inputs, default: 1, in: 0...4)
            let pans = try f.numbers("pan", count: inputs, default: 0, in: -1...1)
            let enabled = try f.numbers("enable", count: inputs, default: 1, in: 0...1)
            for i in 0..<inputs {
                try mixer.setVolume(Float(volumes[i]), bus: i)
                try mixer.setPan(Float(pans[i]), bus: i)
                try mixer.setEnabled(enabled[i] >= 0.5, bus: i)
            }
            try mixer.setMasterVolume(Float(try f.number("masterVolume", default: 1, in: 0...4)))
            return mixer
        }
        r.register("gain") { (f: inout NodeFields) throws(AudioError) in
            let r = GainUnit.gainSpec.range
            return try GainUnit(
                format: f.format,
                gain: Float(try f.number("gain", default: 0, in: Double(r.lowerBound)...Double(r.upperBound), unit: " dB")))
        }
        r.register("eq") { (f: inout NodeFields) throws(AudioError) in
            let node = f
            let bands = try f.objects("bands", maximumCount: EQUnit.maximumBands) { (label, o) throws(AudioError) in
                try eqBand(node, label, o)
            }
            return try EQUnit(format: f.format, bands: bands)
        }
        // The other effects take their parameters as fields, range-checked by the leftover-field rule.
        r.register("lowpass") { (f: inout NodeFields) throws(AudioError) in try LowPassUnit(format: f.format) }
        r.register("highpass") { (f: inout NodeFields) throws(AudioError) in try HighPassUnit(format: f.format) }
        r.register("bandpass") { (f: inout NodeFields) throws(AudioError) in try BandPassUnit(format: f.format) }
        r.register("dynamics") { (f: inout NodeFields) throws(AudioError) in try DynamicsUnit(format: f.format) }
        r.register("reverb") { (f: inout NodeFields) throws(AudioError) in try ReverbUnit(format: f.format) }
        r.register("delay") { (f: inout NodeFields) throws(AudioError) in try DelayUnit(format: f.format) }
        r.register("limiter") { (f: inout NodeFields) throws(AudioError) in
            // "truePeak": true holds the oversampled peaks under the ceiling (a loudness normaliser's dBTP).
            try LimiterUnit(format: f.format, truePeak: try f.bool("truePeak", default: false))
        }
        r.register("sampleDelay") { (f: inout NodeFields) throws(AudioError) in
            let maximum = try f.integer("maximumDelayFrames", default: Int((2 * f.format.sampleRate).rounded()), in: 0...(1 << 26))
            let frames = try f.integer("delayFrames", default: 0, in: 0...maximum)
            return try SampleDelayUnit(format: f.format, delayFrames: frames, maximumDelayFrames: maximum)
        }
        return r
    }()
}

/// A graph built from a graph file: the graph, and its nodes by id.
public final class LoadedGraph: Sendable {
    /// The graph, uninitialized, with every node added and connected as the file says.
    public let graph: RenderGraph
    /// Node ids from the file, in file order.
    public let nodeIDs: [String]
    /// Each node's id in ``graph``, by the node's id in the file.
    public let nodes: [String: NodeID]
    /// Each node's unit, by the node's id in the file.
    public let units: [String: RenderUnit]

    /// The file's connections by node id (`to` may be `"output"`).
    let edges: [(from: String, to: String)]

    init(graph: RenderGraph, nodeIDs: [String], nodes: [String: NodeID], units: [String: RenderUnit], edges: [(from: String, to: String)] = []) {
        self.graph = graph
        self.nodeIDs = nodeIDs
        self.nodes = nodes
        self.units = units
        self.edges = edges
    }

    /// Graph-output frames per frame of node `id`: the product of what the units between it and the output do to
    /// time (a converter's rate ratio, a time-pitch's rate at its current setting), the largest over every path;
    /// 1 for a node with no path to the output.
    public func outputFramesPerFrame(of id: String) -> Double {
        var best: Double?
        var visiting: Set<String> = []
        func walk(_ node: String, _ scale: Double) {
            guard visiting.insert(node).inserted else { return }
            defer { visiting.remove(node) }
            for edge in edges where edge.from == node {
                if edge.to == "output" {
                    best = max(best ?? 0, scale)
                } else if let unit = units[edge.to] {
                    walk(edge.to, scale * unit.outputFramesPerInputFrame)
                }
            }
        }
        walk(id, 1)
        return best ?? 1
    }

    /// The graph's microphone nodes (`input`), by node id.
    public var inputUnits: [(id: String, unit: InputUnit)] {
        nodeIDs.compactMap { id in (units[id] as? InputUnit).map { (id, $0) } }
    }

    /// Sources that end (files, non-looping players), by node id.
    public var finiteSources: [(id: String, source: FiniteSource)] {
        nodeIDs.compactMap { id in (units[id] as? FiniteSource).map { (id, $0) } }
    }
}

/// Graph files: JSON descriptions of a graph (see `docs/graph-files.md`).
///
/// ```json
/// {"sampleRate": 48000, "channels": 2,
///  "nodes": [{"id": "beep", "type": "tone", "frequency": 440}],
///  "connections": [{"from": "beep", "to": "output"}]}
/// ```
public enum GraphFile {
    /// Reads and builds the graph in `path`; relative paths inside resolve against the file's folder.
    /// - Throws: ``/AudioCore/AudioError`` naming the node and field at fault (`.invalidGraphDescription`, or the code
    ///   of the underlying file or graph error).
    public static func load(path: String, maximumFrames: Int = 4096, registry: UnitRegistry = .standard)
        throws(AudioError) -> LoadedGraph
    {
        try load(path: path, maximumFrames: maximumFrames, registry: registry, into: nil)
    }

    /// Reads the graph in `path` and builds it — into `existing` when given (its nodes named `prefix` + id, its
    /// connections to `output` left for the caller: what is connected there is in ``LoadedGraph/edges``), or as a
    /// graph of its own.
    static func load(
        path: String, maximumFrames: Int = 4096, registry: UnitRegistry = .standard, into existing: RenderGraph?, prefix: String = ""
    ) throws(AudioError) -> LoadedGraph {
        guard let data = FileManager.default.contents(atPath: path) else {
            let exists = FileManager.default.fileExists(atPath: path)
            throw AudioError(.fileIO, "cannot read graph file '\(path)'" + (exists ? "" : ": no such file"))
        }
        let base = FilePath.folder(of: path)
        return try build(
            JSONValue.parse(data, source: "graph file '\(path)'"), baseDirectory: base,
            maximumFrames: maximumFrames, registry: registry, into: existing, prefix: prefix)
    }

    /// Builds a graph from JSON text.
    public static func load(json: String, baseDirectory: String = ".", maximumFrames: Int = 4096, registry: UnitRegistry = .standard)
        throws(AudioError) -> LoadedGraph
    {
        try build(
            JSONValue.parse(Data(json.utf8), source: "graph description"), baseDirectory: baseDirectory,
            maximumFrames: maximumFrames, registry: registry)
    }

    static func build(
        _ root: JSONValue, baseDirectory: String, maximumFrames: Int, registry: UnitRegistry, into existing: RenderGraph? = nil,
        prefix: String = ""
    ) throws(AudioError) -> LoadedGraph {
        func fail(_ message: String) -> AudioError { AudioError(.invalidGraphDescription, message) }
        guard case .object(let top) = root else { throw fail("a graph file holds a JSON object, got \(root.kindName)") }
        for key in top.keys where !["sampleRate", "channels", "nodes", "connections"].contains(key) {
            throw fail("unknown top-level field '\(key)' (known: sampleRate, channels, nodes, connections)")
        }
        var rate = 48_000.0
        if let v = top["sampleRate"] {
            guard case .number(let d) = v, StreamFormat.supportedSampleRates.contains(d), d == d.rounded() else {
                throw fail("field 'sampleRate' must be a whole number of Hz between 1000 and 768000, got \(v)")
            }
            rate = d
        }
        var channels = 2
        if let v = top["channels"] {
            guard case .number(let d) = v, (1...64).contains(d), d == d.rounded() else {
                throw fail("field 'channels' must be a whole number between 1 and 64, got \(v)")
            }
            channels = Int(d)
        }
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: channels)
        if let existing, existing.format != format {
            throw fail("the graph is \(formatHz(rate)), \(channels) channels; the one it joins runs at \(existing.format)")
        }
        let graph: RenderGraph
        if let existing { graph = existing } else { graph = try RenderGraph(format: format, maximumFrames: maximumFrames) }

        guard case .array(let nodeList)? = top["nodes"] else { throw fail("field 'nodes' must be an array of nodes") }
        struct Declared {
            let id: String
            let type: String
            let values: [String: JSONValue]
            let format: StreamFormat
        }
        var declared: [Declared] = []
        var seen = Set<String>()
        for (index, item) in nodeList.enumerated() {
            guard case .object(let values) = item else { throw fail("nodes[\(index)] must be an object") }
            guard case .string(let id)? = values["id"], !id.isEmpty else {
                throw fail("nodes[\(index)] needs an 'id' string")
            }
            guard id != "output" else { throw fail("node id 'output' is reserved for the graph's output") }
            guard seen.insert(id).inserted else { throw fail("node id '\(id)' is used twice") }
            guard case .string(let type)? = values["type"] else { throw fail("node '\(id)' needs a 'type' string") }
            // A node may run at a rate of its own; it then reaches other rates through a converter node.
            var nodeFormat = format
            if let v = values["sampleRate"] {
                guard case .number(let r) = v, r == r.rounded(), (1_000...768_000).contains(r) else {
                    throw fail("node '\(id)' (\(type)): field 'sampleRate' must be a whole number of Hz between 1000 and 768000, got \(v)")
                }
                nodeFormat = try StreamFormat.graph(sampleRate: r, channelCount: channels)
            }
            declared.append(Declared(id: id, type: type, values: values, format: nodeFormat))
        }

        struct Connection {
            let label: String
            let from: String
            let to: String
            let fromBus: Int
            let toBus: Int
        }
        let connectionList: [JSONValue]
        switch top["connections"] {
        case nil: connectionList = []
        case .array(let a)?: connectionList = a
        case let other?: throw fail("field 'connections' must be an array, got \(other.kindName)")
        }
        var connections: [Connection] = []
        for (index, item) in connectionList.enumerated() {
            let label = "connections[\(index)]"
            guard case .object(let c) = item else { throw fail("\(label) must be an object") }
            for key in c.keys where !["from", "to", "bus", "fromBus"].contains(key) {
                throw fail("\(label): unknown field '\(key)' (known: from, to, bus, fromBus)")
            }
            guard case .string(let from)? = c["from"] else { throw fail("\(label) needs a 'from' node id") }
            guard case .string(let to)? = c["to"] else { throw fail("\(label) needs a 'to' node id") }
            guard seen.contains(from) else { throw fail("\(label): 'from' names unknown node '\(from)'") }
            guard to == "output" || seen.contains(to) else { throw fail("\(label): 'to' names unknown node '\(to)'") }
            func bus(_ key: String) throws(AudioError) -> Int {
                guard let v = c[key] else { return 0 }
                guard case .number(let d) = v, d >= 0, d == d.rounded(), d < 1024 else {
                    throw fail("\(label): field '\(key)' must be a bus number (0, 1, …), got \(v)")
                }
                return Int(d)
            }
            connections.append(Connection(label: label, from: from, to: to, fromBus: try bus("fromBus"), toBus: try bus("bus")))
        }

        // Nodes are made in file order, except that a node whose input format defaults to what feeds it (a converter
        // without "inputRate") waits until that node is made.
        let feeder = Dictionary(
            connections.filter { $0.toBus == 0 && $0.to != "output" }.map { ($0.to, ($0.from, $0.fromBus)) }, uniquingKeysWith: { a, _ in a })
        func waitsForSource(_ d: Declared) -> Bool { d.type == "converter" && d.values["inputRate"] == nil && feeder[d.id] != nil }
        var nodes: [String: NodeID] = [:]
        var units: [String: RenderUnit] = [:]
        var pending = declared
        while !pending.isEmpty {
            // The first node that can be made now; when every node left waits (a loop of converters), the first.
            let next = pending.firstIndex { d in
                !waitsForSource(d) || feeder[d.id].map { units[$0.0] != nil } == true
            } ?? 0
            let d = pending.remove(at: next)
            let sourceFormat = feeder[d.id].flatMap { (id, bus) in units[id].flatMap { $0.outputFormats.indices.contains(bus) ? $0.outputFormats[bus] : nil } }
            var fields = NodeFields(
                id: d.id, type: d.type, values: d.values, format: d.format, baseDirectory: baseDirectory,
                hasOwnRate: d.values["sampleRate"] != nil, sourceFormat: sourceFormat)
            let unit = try registry.make(&fields)
            do throws(AudioError) {
                nodes[d.id] = try graph.addNode(unit, name: prefix + d.id)
            } catch {
                throw AudioError(error.code, "node '\(d.id)' (\(d.type)): \(error.message)")
            }
            units[d.id] = unit
        }
        let ids = declared.map(\.id)

        var edges: [(from: String, to: String)] = []
        for c in connections {
            // Joining another graph: what leads to the output is the caller's to connect.
            if existing != nil, c.to == "output" {
                edges.append((c.from, c.to))
                continue
            }
            let destination = c.to == "output" ? graph.output : nodes[c.to]!
            do throws(AudioError) {
                try graph.connect(nodes[c.from]!, outputBus: c.fromBus, to: destination, inputBus: c.toBus)
            } catch {
                throw AudioError(error.code, "\(c.label) ('\(c.from)' → '\(c.to)'): \(error.message)")
            }
            edges.append((c.from, c.to))
        }
        return LoadedGraph(graph: graph, nodeIDs: ids, nodes: nodes, units: units, edges: edges)
    }
}
