import AudioCore
import AudioGraph

/// The kernel of the units built on ``FilterBank`` (EQ, low-, high- and band-pass): the graph format in, the same
/// format out; the bank's biquad states are the render thread's.
struct FilterBankKernel: Sendable {
    let format: StreamFormat
    let bank: RenderThreadBound<FilterBank>

    init(format: StreamFormat, bands: [FilterBand]) throws(AudioError) {
        self.format = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        bank = RenderThreadBound(FilterBank(bands: bands, channelCount: self.format.channelCount))
    }

    func prepare(_ spec: RenderSpec) {
        bank.whileStopped.prepare(sampleRate: spec.sampleRate, rampFrames: Int((0.02 * spec.sampleRate).rounded()))
    }

    func reset() { bank.whileStopped.reset() }

    func render(_ context: RenderContext) {
        bank.onRenderThread.render(input: context.input(0), output: context.output(0), frames: context.frameCount)
    }
}

/// One band of an ``EQUnit``.
public struct EQBand: Sendable, Hashable {
    /// The band's shape, fixed once the unit is made.
    public var type: BiquadType
    /// Centre or corner frequency in Hz.
    public var frequency: Double
    /// Gain in dB for peak and shelves (ignored by the other shapes).
    public var gain: Double
    /// Quality factor; ignored when ``bandwidth`` is set.
    public var q: Double
    /// Width in octaves instead of Q (peak, band-pass and notch only).
    public var bandwidth: Double?
    /// True to start with the band bypassed (its `bypass.N` parameter at 1); false by default.
    public var bypass: Bool

    /// Describes a band; ``EQUnit/init(format:bands:)`` checks the values against its parameters' ranges.
    ///
    /// - Parameters:
    ///   - type: The band's shape.
    ///   - frequency: Centre or corner frequency in Hz (10 Hz … 0.49 × the sample rate).
    ///   - gain: Gain in dB (−96 … +24) for peak and shelves; 0 by default.
    ///   - q: Quality factor (0.05 … 40); 0.7071 (Butterworth) by default.
    ///   - bandwidth: Width in octaves (0.05 … 5) instead of `q`, for peak, band-pass and notch only; nil by default.
    ///   - bypass: True to start with the band bypassed; false by default.
    public init(_ type: BiquadType, frequency: Double, gain: Double = 0, q: Double = 0.5.squareRoot(), bandwidth: Double? = nil, bypass: Bool = false) {
        self.type = type
        self.frequency = frequency
        self.gain = gain
        self.q = q
        self.bandwidth = bandwidth
        self.bypass = bypass
    }
}

/// A parametric equalizer of up to 16 cookbook bands in series: the NBandEQ role.
///
/// Per band `N` (from 0): `frequency.N` (10 Hz … 0.49 × sample rate), `gain.N` (−96 … +24 dB, peak and shelves),
/// `q.N` (0.05 … 40) or, for bands created with a bandwidth, `bandwidth.N` (0.05 … 5 octaves), and `bypass.N`
/// (0 or 1; the band fades out and in over 10 ms). A band's shape is fixed when the unit is created.
/// Responses are exactly the cookbook's at the graph's sample rate.
public final class EQUnit: RenderUnit {
    /// The most bands a unit takes: 16.
    public static let maximumBands = 16
    /// Each band's shape, in order (band N is `bandTypes[N]`); fixed when the unit is made.
    public let bandTypes: [BiquadType]
    public let core: UnitCore
    let filters: FilterBankKernel

    /// The highest settable frequency at `sampleRate`, for every filter unit: just under Nyquist, where the
    /// cookbook formulas degenerate.
    public static func maximumFrequency(_ sampleRate: Double) -> Float { Float(sampleRate * 0.49) }

    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` naming the band parameter and its range, or when
    ///   there are more than 16 bands or a bandwidth is given for a shape that has none; `.invalidFormat` for a
    ///   format the graph cannot carry.
    public init(format: StreamFormat, bands: [EQBand]) throws(AudioError) {
        guard bands.count <= Self.maximumBands else {
            throw AudioError(.invalidParameter, "eq: at most \(Self.maximumBands) bands, got \(bands.count)")
        }
        let top = EQUnit.maximumFrequency(format.sampleRate)
        var filterBands: [FilterBand] = []
        var parameters: [Parameter] = []
        for (n, band) in bands.enumerated() {
            func make(_ spec: ParameterSpec, _ value: Double) throws(AudioError) -> Parameter {
                let p = Parameter(spec, owner: "eq")
                try p.set(Float(value))
                parameters.append(p)
                return p
            }
            let frequency = try make(
                ParameterSpec("frequency.\(n)", name: "Band \(n) frequency", range: 10...top, unit: .hertz, default: min(1000, top)),
                band.frequency)
            let gain = try make(
                ParameterSpec("gain.\(n)", name: "Band \(n) gain", range: -96...24, unit: .decibels, default: 0), band.gain)
            let width: Parameter
            let kind: BandWidthKind
            if let bw = band.bandwidth {
                guard band.type.acceptsBandwidth else {
                    throw AudioError(
                        .invalidParameter, "eq: band \(n) (\(band.type.rawValue)) takes q, not bandwidth (bandwidth is for peak, bandPass and notch)")
                }
                width = try make(
                    ParameterSpec("bandwidth.\(n)", name: "Band \(n) bandwidth", range: 0.05...5, unit: .generic, default: 1), bw)
                kind = .bandwidth
            } else {
                width = try make(
                    ParameterSpec("q.\(n)", name: "Band \(n) Q", range: 0.05...40, unit: .generic, default: 0.70710677), band.q)
                kind = .q
            }
            let bypass = try make(
                ParameterSpec("bypass.\(n)", name: "Band \(n) bypass", range: 0...1, unit: .boolean, default: 0),
                band.bypass ? 1 : 0)
            filterBands.append(
                FilterBand(type: band.type, widthKind: kind, frequency: frequency, gain: gain, width: width, bypass: bypass))
        }
        bandTypes = bands.map(\.type)
        filters = try FilterBankKernel(format: format, bands: filterBands)
        core = UnitCore(kind: "eq", inputs: [filters.format], outputs: [filters.format], parameters: parameters)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) { filters.prepare(spec) }
    public func reset() { filters.reset() }
    public func render(_ context: RenderContext) { filters.render(context) }

    public var propertyNames: [String] { commonPropertyNames + bandTypes.indices.map { "type.\($0)" } + ["bandCount"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        if name == "bandCount" { return .int(bandTypes.count) }
        if name.hasPrefix("type."), let n = Int(name.dropFirst(5)), bandTypes.indices.contains(n) {
            return .string(bandTypes[n].rawValue)
        }
        return try commonProperty(name)
    }
}

/// A resonant second-order low-pass: `cutoff` (10 Hz … 0.49 × sample rate, default 6900 Hz) and `resonance`
/// (−20 … +40 dB, default 0): the response at the cutoff relative to Butterworth's −3 dB, so 0 dB is Q = 0.7071.
public final class LowPassUnit: RenderUnit {
    public let core: UnitCore
    let filters: FilterBankKernel

    /// Makes a low-pass with its parameters set to `cutoff` and `resonance`.
    ///
    /// - Parameters:
    ///   - format: The input and output format; only its rate and channel count are used.
    ///   - cutoff: The cutoff in Hz (10 Hz … 0.49 × the sample rate); 6900 by default.
    ///   - resonance: The gain at the cutoff relative to Butterworth, in dB (−20 … +40); 0 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a value outside its range, `.invalidFormat` for a
    ///   format the graph cannot carry.
    public init(format: StreamFormat, cutoff: Double = 6900, resonance: Double = 0) throws(AudioError) {
        let (parameters, band) = try resonantBand(kind: "lowpass", type: .lowPass, format: format, cutoff: cutoff, defaultCutoff: 6900, resonance: resonance)
        filters = try FilterBankKernel(format: format, bands: [band])
        core = UnitCore(kind: "lowpass", inputs: [filters.format], outputs: [filters.format], parameters: parameters)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) { filters.prepare(spec) }
    public func reset() { filters.reset() }
    public func render(_ context: RenderContext) { filters.render(context) }
}

/// A resonant second-order high-pass: `cutoff` (10 Hz … 0.49 × sample rate, default 80 Hz) and `resonance`
/// (−20 … +40 dB, default 0, Butterworth).
public final class HighPassUnit: RenderUnit {
    public let core: UnitCore
    let filters: FilterBankKernel

    /// Makes a high-pass with its parameters set to `cutoff` and `resonance`.
    ///
    /// - Parameters:
    ///   - format: The input and output format; only its rate and channel count are used.
    ///   - cutoff: The cutoff in Hz (10 Hz … 0.49 × the sample rate); 80 by default.
    ///   - resonance: The gain at the cutoff relative to Butterworth, in dB (−20 … +40); 0 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a value outside its range, `.invalidFormat` for a
    ///   format the graph cannot carry.
    public init(format: StreamFormat, cutoff: Double = 80, resonance: Double = 0) throws(AudioError) {
        let (parameters, band) = try resonantBand(kind: "highpass", type: .highPass, format: format, cutoff: cutoff, defaultCutoff: 80, resonance: resonance)
        filters = try FilterBankKernel(format: format, bands: [band])
        core = UnitCore(kind: "highpass", inputs: [filters.format], outputs: [filters.format], parameters: parameters)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) { filters.prepare(spec) }
    public func reset() { filters.reset() }
    public func render(_ context: RenderContext) { filters.render(context) }
}

/// A second-order band-pass with 0 dB at its centre: `frequency` (10 Hz … 0.49 × sample rate, default 1000 Hz)
/// and `bandwidth` (0.05 … 5 octaves between the −3 dB points, default 1).
public final class BandPassUnit: RenderUnit {
    public let core: UnitCore
    let filters: FilterBankKernel

    /// Makes a band-pass with its parameters set to `frequency` and `bandwidth`.
    ///
    /// - Parameters:
    ///   - format: The input and output format; only its rate and channel count are used.
    ///   - frequency: The centre frequency in Hz (10 Hz … 0.49 × the sample rate); 1000 by default.
    ///   - bandwidth: The width in octaves between the −3 dB points (0.05 … 5); 1 by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a value outside its range, `.invalidFormat` for a
    ///   format the graph cannot carry.
    public init(format: StreamFormat, frequency: Double = 1000, bandwidth: Double = 1) throws(AudioError) {
        let top = EQUnit.maximumFrequency(format.sampleRate)
        let f = Parameter(ParameterSpec("frequency", name: "Centre frequency", range: 10...top, unit: .hertz, default: min(1000, top)), owner: "bandpass")
        let bw = Parameter(ParameterSpec("bandwidth", name: "Bandwidth (octaves)", range: 0.05...5, unit: .generic, default: 1), owner: "bandpass")
        try f.set(Float(frequency))
        try bw.set(Float(bandwidth))
        let band = FilterBand(type: .bandPass, widthKind: .bandwidth, frequency: f, gain: nil, width: bw, bypass: nil)
        filters = try FilterBankKernel(format: format, bands: [band])
        core = UnitCore(kind: "bandpass", inputs: [filters.format], outputs: [filters.format], parameters: [f, bw])
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) { filters.prepare(spec) }
    public func reset() { filters.reset() }
    public func render(_ context: RenderContext) { filters.render(context) }
}

private func resonantBand(kind: String, type: BiquadType, format: StreamFormat, cutoff: Double, defaultCutoff: Float, resonance: Double)
    throws(AudioError) -> ([Parameter], FilterBand)
{
    let top = EQUnit.maximumFrequency(format.sampleRate)
    let c = Parameter(ParameterSpec("cutoff", name: "Cutoff frequency", range: 10...top, unit: .hertz, default: min(defaultCutoff, top)), owner: kind)
    let r = Parameter(ParameterSpec("resonance", name: "Resonance", range: -20...40, unit: .decibels, default: 0), owner: kind)
    try c.set(Float(cutoff))
    try r.set(Float(resonance))
    return ([c, r], FilterBand(type: type, widthKind: .resonance, frequency: c, gain: nil, width: r, bypass: nil))
}
