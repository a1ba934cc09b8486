import FoundationEssentials

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
