import Foundation
import LiveAudio
import Testing
import TestSupport

/// Renders `unit` (built for `format`) fed by `input` (one array per channel, or one for all channels) for
/// `frames` frames, in blocks of `blockSizes`, through a graph at the format's rate.
func renderEffect(
    _ unit: RenderUnit, format: StreamFormat, input: [[Float]], frames: Int, blockSizes: [Int] = [256],
    whileRendering change: ((Int) throws -> Void)? = nil
) throws -> [[Float]] {
    let graph = try RenderGraph(format: format, maximumFrames: 4096)
    let node = try graph.addNode(unit)
    let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: input), sampleRate: format.sampleRate))
    try graph.connect(player, to: node)
    try graph.connect(node, to: graph.output)
    try graph.initialize()
    let renderer = OfflineRenderer(graph: graph)
    var out = Array(repeating: [Float](), count: format.channelCount)
    var done = 0, k = 0
    while done < frames {
        try change?(done)
        let n = min(blockSizes[k % blockSizes.count], frames - done)
        let view = try renderer.render(frames: n)
        for c in 0..<format.channelCount { out[c] += view[c] }
        done += n
        k += 1
    }
    return out
}

/// A complex number, for the analog references.
struct C {
    var re: Double, im: Double
    static func + (a: C, b: C) -> C { C(re: a.re + b.re, im: a.im + b.im) }
    static func * (a: C, b: C) -> C { C(re: a.re * b.re - a.im * b.im, im: a.re * b.im + a.im * b.re) }
    static func * (a: Double, b: C) -> C { C(re: a * b.re, im: a * b.im) }
    var abs: Double { (re * re + im * im).squareRoot() }
}

/// The analog prototype of each cookbook shape, in s normalized to the corner frequency (from the cookbook's
/// derivation). The cookbook's digital filter is this prototype under the bilinear transform pre-warped at ω0, so
/// its response at ω is the prototype's at s = j·tan(ω/2)/tan(ω0/2). That is the reference: computed here from
/// the prototype, independently of the coefficient formulas the unit uses.
func cookbookReference(_ type: BiquadType, f0: Double, gain: Double, q: Double, sampleRate: Double, at f: Double) -> Double {
    let s = C(re: 0, im: tan(Double.pi * f / sampleRate) / tan(Double.pi * f0 / sampleRate))
    let s2 = s * s, one = C(re: 1, im: 0)
    let A = pow(10, gain / 40), rA = A.squareRoot()
    func poly(_ a2: Double, _ a1: Double, _ a0: Double) -> C { a2 * s2 + a1 * s + C(re: a0, im: 0) }
    let den = poly(1, 1 / q, 1)
    let h: Double
    switch type {
    case .lowPass: h = one.abs / den.abs
    case .highPass: h = s2.abs / den.abs
    case .bandPass: h = ((1 / q) * s).abs / den.abs
    case .notch: h = poly(1, 0, 1).abs / den.abs
    case .allPass: h = poly(1, -1 / q, 1).abs / den.abs
    case .peak: h = poly(1, A / q, 1).abs / poly(1, 1 / (A * q), 1).abs
    case .lowShelf: h = A * poly(1, rA / q, A).abs / poly(A, rA / q, 1).abs
    case .highShelf: h = A * poly(A, rA / q, 1).abs / poly(1, rA / q, A).abs
    }
    return h
}

/// The cookbook's bandwidth as a Q: α = sin ω0 · sinh(ln2/2 · BW · ω0/sin ω0) = sin ω0 / 2Q.
func qForBandwidth(_ bw: Double, f0: Double, sampleRate: Double) -> Double {
    let w0 = 2 * Double.pi * f0 / sampleRate
    return 1 / (2 * sinh(log(2) / 2 * bw * w0 / sin(w0)))
}

/// |DTFT| of `h` at `f` Hz, with the phasor advanced by complex multiplication (renormalized every 1024 steps).
func spectrumMagnitude(_ h: [Float], at f: Double, sampleRate: Double) -> Double {
    let w = 2 * Double.pi * f / sampleRate
    let (c, s) = (cos(w), -sin(w))
    var pr = 1.0, pi = 0.0, re = 0.0, im = 0.0
    for (n, x) in h.enumerated() {
        re += Double(x) * pr
        im += Double(x) * pi
        (pr, pi) = (pr * c - pi * s, pr * s + pi * c)
        if n & 1023 == 1023 { let m = (pr * pr + pi * pi).squareRoot(); pr /= m; pi /= m }
    }
    return (re * re + im * im).squareRoot()
}

/// The phase of the DTFT of `h` at `f` Hz, in radians.
func spectrumPhase(_ h: [Float], at f: Double, sampleRate: Double) -> Double {
    let w = 2 * Double.pi * f / sampleRate
    var re = 0.0, im = 0.0
    for (n, x) in h.enumerated() {
        re += Double(x) * cos(w * Double(n))
        im -= Double(x) * sin(w * Double(n))
    }
    return atan2(im, re)
}

/// The phase of the all-pass prototype (s² − s/Q + 1)/(s² + s/Q + 1) at the pre-warped s for `f`, in radians:
/// numerator and denominator are conjugates on the jω axis, so the phase is −2·arg(denominator).
func allPassReferencePhase(f0: Double, q: Double, sampleRate: Double, at f: Double) -> Double {
    let x = tan(Double.pi * f / sampleRate) / tan(Double.pi * f0 / sampleRate)
    return -2 * atan2(x / q, 1 - x * x)
}

/// 60 log-spaced frequencies from 20 Hz to 20 kHz.
let auditFrequencies = (0..<60).map { 20 * pow(1000, Double($0) / 59) }

struct BandCase: CustomStringConvertible {
    var band: EQBand
    var description: String { "\(band.type) \(band.frequency) Hz \(band.gain) dB q \(band.q) bw \(band.bandwidth.map { "\($0)" } ?? "-")" }
}

let bandCases: [BandCase] = [
    BandCase(band: EQBand(.peak, frequency: 1000, gain: 9, q: 2)),
    BandCase(band: EQBand(.peak, frequency: 150, gain: -12, bandwidth: 1.5)),
    BandCase(band: EQBand(.lowShelf, frequency: 200, gain: -6)),
    BandCase(band: EQBand(.highShelf, frequency: 6000, gain: 5, q: 1)),
    BandCase(band: EQBand(.lowPass, frequency: 2500, q: 0.7071)),
    BandCase(band: EQBand(.highPass, frequency: 120, q: 1.5)),
    BandCase(band: EQBand(.bandPass, frequency: 1000, q: 3)),
    BandCase(band: EQBand(.bandPass, frequency: 4000, bandwidth: 0.5)),
    BandCase(band: EQBand(.notch, frequency: 3000, q: 4)),
    BandCase(band: EQBand(.notch, frequency: 440, bandwidth: 0.3)),
    BandCase(band: EQBand(.allPass, frequency: 1000, q: 0.9)),
]

/// The impulse response of `unit` in a stereo graph at `rate`; both channels must agree.
func impulseResponse(_ unit: RenderUnit, rate: Double, frames: Int) throws -> [Float] {
    let format = try StreamFormat.graph(sampleRate: rate, channelCount: 2)
    var impulse = [Float](repeating: 0, count: frames)
    impulse[0] = 1
    let out = try renderEffect(unit, format: format, input: [impulse], frames: frames, blockSizes: [128, 77, 300])
    #expect(out[0] == out[1], "both channels filter alike")
    return out[0]
}

/// Compares a measured impulse response with the reference over 20 Hz – 20 kHz: within 0.05 dB where the reference
/// is above −60 dB; below that (the bottom of a notch) both must stay below −50 dB.
func expectMatchesReference(_ h: [Float], rate: Double, label: String, reference: (Double) -> Double) {
    var worst = 0.0
    for f in auditFrequencies where f < rate / 2 {
        let measured = 20 * log10(spectrumMagnitude(h, at: f, sampleRate: rate))
        let expected = 20 * log10(reference(f))
        if expected > -60 {
            worst = max(worst, abs(measured - expected))
        } else {
            #expect(measured < -50, "\(label) at \(f) Hz: \(measured) dB, reference \(expected) dB")
        }
    }
    #expect(worst <= 0.05, "\(label): worst deviation \(worst) dB")
}

@Suite struct FilterTests {
    @Test(arguments: [44_100.0, 48_000.0, 96_000.0])
    func everyEQBandMatchesTheCookbook(rate: Double) throws {
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: 2)
        // 0.1 s of impulse response: the slowest band here (120 Hz, Q 1.5) decays with a time constant of
        // 2Q/ω0 = 4 ms, so truncation leaves less than e^-25 of it.
        let frames = Int(rate / 10)
        for c in bandCases {
            let h = try impulseResponse(EQUnit(format: format, bands: [c.band]), rate: rate, frames: frames)
            let q = c.band.bandwidth.map { qForBandwidth($0, f0: c.band.frequency, sampleRate: rate) } ?? c.band.q
            expectMatchesReference(h, rate: rate, label: "\(c) at \(rate)") {
                cookbookReference(c.band.type, f0: c.band.frequency, gain: c.band.gain, q: q, sampleRate: rate, at: $0)
            }
            // An all-pass's magnitude is 1 everywhere, so a filter that does nothing would pass the check above:
            // its phase must follow the prototype too, from 0 through −π at f0 to −2π.
            if c.band.type == .allPass {
                var worst = 0.0
                for f in auditFrequencies where f < rate / 2 {
                    let measured = spectrumPhase(h, at: f, sampleRate: rate)
                    let expected = allPassReferencePhase(f0: c.band.frequency, q: q, sampleRate: rate, at: f)
                    worst = max(worst, abs(remainder(measured - expected, 2 * Double.pi)))
                }
                // Float coefficients and state: the measured phase error is below 1e-4 rad; 1e-3 rad (0.06°)
                // leaves room and still fails any other filter, whose phase is off by radians near f0.
                #expect(worst < 1e-3, "\(c) at \(rate): worst phase error \(worst) rad")
                let atCorner = spectrumPhase(h, at: c.band.frequency, sampleRate: rate)
                #expect(abs(abs(atCorner) - Double.pi) < 1e-3, "−π at the corner frequency: \(atCorner)")
            }
        }
    }

    @Test(arguments: [44_100.0, 48_000.0, 96_000.0])
    func filterUnitsMatchTheCookbook(rate: Double) throws {
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: 2)
        let frames = Int(rate / 10)
        // Resonance r dB: Q = 0.7071 · 10^(r/20), so the response at the cutoff is −3 dB + r.
        for (cutoff, resonance) in [(1000.0, 0.0), (300.0, 6.0), (8000.0, -3.0)] {
            let q = 0.5.squareRoot() * pow(10, resonance / 20)
            let lp = try impulseResponse(LowPassUnit(format: format, cutoff: cutoff, resonance: resonance), rate: rate, frames: frames)
            expectMatchesReference(lp, rate: rate, label: "lowpass \(cutoff) \(resonance)") {
                cookbookReference(.lowPass, f0: cutoff, gain: 0, q: q, sampleRate: rate, at: $0)
            }
            let hp = try impulseResponse(HighPassUnit(format: format, cutoff: cutoff, resonance: resonance), rate: rate, frames: frames)
            expectMatchesReference(hp, rate: rate, label: "highpass \(cutoff) \(resonance)") {
                cookbookReference(.highPass, f0: cutoff, gain: 0, q: q, sampleRate: rate, at: $0)
            }
            let bp = try impulseResponse(BandPassUnit(format: format, frequency: cutoff, bandwidth: 1), rate: rate, frames: frames)
            let bq = qForBandwidth(1, f0: cutoff, sampleRate: rate)
            expectMatchesReference(bp, rate: rate, label: "bandpass \(cutoff)") {
                cookbookReference(.bandPass, f0: cutoff, gain: 0, q: bq, sampleRate: rate, at: $0)
            }
        }
        // Butterworth at the cutoff: exactly −3.01 dB.
        let lp = try impulseResponse(LowPassUnit(format: format, cutoff: 1000), rate: rate, frames: frames)
        #expect(abs(20 * log10(spectrumMagnitude(lp, at: 1000, sampleRate: rate)) + 3.0103) < 0.01)
    }

    @Test func bandsInSeriesMultiplyAndParameterChangesArriveExactly() throws {
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let bands = [EQBand(.highPass, frequency: 100), EQBand(.peak, frequency: 2500, gain: 4, q: 1.2), EQBand(.highShelf, frequency: 8000, gain: -3)]
        let eq = try EQUnit(format: format, bands: bands)
        // Move band 1 while running; once the 20 ms ramp is over, the response is exactly the new one.
        let frames = 48_000 / 10
        var input = [Float](repeating: 0, count: frames * 2)
        input[frames] = 1
        let out = try renderEffect(eq, format: format, input: [input], frames: frames * 2) { done in
            if done == 512 { try eq.setParameter("frequency.1", 1200); try eq.setParameter("gain.1", -8) }
        }
        let h = Array(out[0][frames...])
        expectMatchesReference(h, rate: 48_000, label: "three bands") { f in
            cookbookReference(.highPass, f0: 100, gain: 0, q: 0.70710678, sampleRate: 48_000, at: f)
                * cookbookReference(.peak, f0: 1200, gain: -8, q: 1.2, sampleRate: 48_000, at: f)
                * cookbookReference(.highShelf, f0: 8000, gain: -3, q: 0.70710678, sampleRate: 48_000, at: f)
        }
    }

    @Test func bandBypassRemovesTheBandExactly() throws {
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let eq = try EQUnit(format: format, bands: [EQBand(.peak, frequency: 1000, gain: 12, bypass: true), EQBand(.lowShelf, frequency: 300, gain: 3)])
        let h = try impulseResponse(eq, rate: 48_000, frames: 4800)
        expectMatchesReference(h, rate: 48_000, label: "band 0 bypassed") {
            cookbookReference(.lowShelf, f0: 300, gain: 3, q: 0.70710678, sampleRate: 48_000, at: $0)
        }
        let all = try EQUnit(format: format, bands: [EQBand(.peak, frequency: 1000, gain: 12, bypass: true)])
        var generator = SplitMix64(seed: 235)
        let noise = (0..<4800).map { _ in Float.random(in: -1...1, using: &generator) }
        let out = try renderEffect(all, format: format, input: [noise], frames: 4800)
        #expect(out[0] == noise, "every band bypassed: the input, bit for bit")
    }

    @Test func invalidBandsAreClearErrors() throws {
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        func message(_ body: () throws -> Void) -> String {
            do { try body() } catch let e as AudioError { return e.message } catch { return "\(error)" }
            return ""
        }
        #expect(message { _ = try EQUnit(format: format, bands: [EQBand(.peak, frequency: 30_000)]) }.contains("frequency.0"))
        #expect(message { _ = try EQUnit(format: format, bands: [EQBand(.lowPass, frequency: 100, bandwidth: 1)]) }.contains("bandwidth"))
        #expect(message { _ = try EQUnit(format: format, bands: Array(repeating: EQBand(.peak, frequency: 100), count: 17)) }.contains("16"))
        let lp = try LowPassUnit(format: format)
        let m = message { try lp.setParameter("resonance", 50) }
        #expect(m.contains("lowpass") && m.contains("resonance") && m.contains("40 dB"), "\(m)")
    }
}
