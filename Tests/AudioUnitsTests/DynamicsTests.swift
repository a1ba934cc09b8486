import Foundation
import LiveAudio
import Testing
import TestSupport

/// The static curve of a feed-forward compressor with a quadratic soft knee and a downward expander, in dB
/// (Giannoulis, Massberg & Reiss, "Digital Dynamic Range Compressor Design", JAES 2012, eq. 4), plus makeup.
func staticCurveGain(level L: Double, threshold T: Double, ratio R: Double, knee W: Double, expansionThreshold Te: Double = -200,
                     expansionRatio Re: Double = 1, makeup: Double = 0) -> Double {
    var out: Double
    if 2 * (L - T) < -W {
        out = L
    } else if 2 * abs(L - T) <= W && W > 0 {
        out = L + (1 / R - 1) * pow(L - T + W / 2, 2) / (2 * W)
    } else {
        out = T + (L - T) / R
    }
    if L < Te { out += (L - Te) * (Re - 1) }
    return out - L + makeup
}

func sine(_ frequency: Double, amplitude: Double, frames: Int, rate: Double = 48_000) -> [Float] {
    (0..<frames).map { Float(amplitude * sin(2 * Double.pi * frequency * Double($0) / rate)) }
}

func rms(_ x: ArraySlice<Float>) -> Double { (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count)).squareRoot() }

@Suite struct DynamicsTests {
    @Test(arguments: [(0.0, 1.0, -200.0), (12.0, 1.0, -200.0), (6.0, 3.0, -42.0)])
    func staticCurveOnSteadySines(knee: Double, expansionRatio: Double, expansionThreshold: Double) throws {
        // Ten peak levels from −48 to +6 dBFS of a 1 kHz sine (48 samples a period, so the sampled peak is exact).
        for level in stride(from: -48.0, through: 6, by: 6) {
            let unit = try DynamicsUnit(format: stereo)
            try unit.setParameter("threshold", -20)
            try unit.setParameter("ratio", 4)
            try unit.setParameter("knee", Float(knee))
            try unit.setParameter("makeupGain", 3)
            try unit.setParameter("expansionRatio", Float(expansionRatio))
            try unit.setParameter("expansionThreshold", Float(max(expansionThreshold, -120)))
            let x = sine(1000, amplitude: pow(10, level / 20), frames: 48_000)
            let out = try render(unit, inputs: [[x]], frames: 48_000)
            // Settled: the last 0.25 s, after 3 release time constants of 0.1 s. Gain = output RMS / input RMS.
            let measured = 20 * log10(rms(out[0][36_000...]) / rms(x[36_000...]))
            let expected = staticCurveGain(
                level: level, threshold: -20, ratio: 4, knee: knee, expansionThreshold: expansionThreshold,
                expansionRatio: expansionRatio, makeup: 3)
            #expect(abs(measured - expected) <= 0.25, "level \(level) dB knee \(knee): \(measured) dB, curve \(expected) dB")
            #expect(abs(Double(unit.gainReduction) - (3 - expected)) < 0.3, "meter reads the reduction")
        }
    }

    /// A square wave has a constant |x|, so the gain the unit applies is out/in at every sample.
    func gainTrajectory(attack: Float, release: Float, high: [Float]) throws -> [Double] {
        let unit = try DynamicsUnit(format: stereo)
        try unit.setParameter("attack", attack)
        try unit.setParameter("release", release)
        let out = try render(unit, inputs: [[high]], frames: high.count, blockSizes: [128])
        return zip(out[0], high).map { 20 * log10(Double(abs($0)) / Double(abs($1))) }
    }

    /// Samples from `start` until the gain has covered 1 − 1/e of its way from `from` to `to`.
    func timeConstant(_ g: [Double], start: Int, from: Double, to: Double) -> Double {
        let mark = from + (to - from) * (1 - exp(-1))
        for i in start..<g.count where (to < from ? g[i] <= mark : g[i] >= mark) { return Double(i - start) / 48_000 }
        return .infinity
    }

    @Test(arguments: [(Float(0.005), Float(0.1)), (Float(0.02), Float(0.5)), (Float(0.001), Float(0.05))])
    func attackAndReleaseTimeConstants(attack: Float, release: Float) throws {
        // −10 dBFS square wave for 1.5 s (over a −20 dB threshold at 4:1 the curve asks −7.5 dB), then −40 dBFS
        // (below the threshold: 0 dB) for 1.5 s.
        let n = 72_000
        let square = (0..<(2 * n)).map { i -> Float in
            let a: Float = i < n ? 0.316_227_77 : 0.01
            return (i / 24) % 2 == 0 ? a : -a
        }
        let g = try gainTrajectory(attack: attack, release: release, high: square)
        #expect(abs(g[n - 1] + 7.5) < 0.01, "settled at the static curve")
        let measuredAttack = timeConstant(g, start: 0, from: 0, to: -7.5)
        let measuredRelease = timeConstant(g, start: n, from: -7.5, to: 0)
        #expect(abs(measuredAttack / Double(attack) - 1) <= 0.2, "attack \(measuredAttack) s for \(attack) s")
        #expect(abs(measuredRelease / Double(release) - 1) <= 0.2, "release \(measuredRelease) s for \(release) s")
    }
}

@Suite struct LimiterTests {
    func limit(_ x: [Float], ceiling: Float = -1, attack: Float = 0.005, preGain: Float = 0) throws -> (out: [[Float]], unit: LimiterUnit) {
        let unit = try LimiterUnit(format: stereo)
        try unit.setParameter("ceiling", ceiling)
        try unit.setParameter("attackTime", attack)
        try unit.setParameter("preGain", preGain)
        let out = try render(unit, inputs: [[x]], frames: x.count, blockSizes: [128, 7, 333])
        return (out, unit)
    }

    @Test func nothingExceedsTheCeilingOnHotMaterial() throws {
        var generator = SplitMix64(seed: 97)  // seeded: a failure can be replayed
        let n = 48_000
        // Noise peaking at +12 dBFS with bursts, a +12 dB square wave, and single-sample impulses of +18 dB in silence.
        let noise = (0..<n).map { i -> Float in Float.random(in: -1...1, using: &generator) * (i % 9600 < 2400 ? 4 : 0.5) }
        let square = (0..<n).map { i -> Float in (i / 60) % 2 == 0 ? 4 : -4 }
        var impulses = [Float](repeating: 0, count: n)
        for k in stride(from: 1000, to: n, by: 4321) { impulses[k] = k % 2 == 0 ? 8 : -8 }
        for (name, x) in [("noise", noise), ("square", square), ("impulses", impulses)] {
            for (ceiling, attack) in [(Float(-1), Float(0.005)), (-6, 0.001), (-0.1, 0.03)] {
                let (out, unit) = try limit(x, ceiling: ceiling, attack: attack)
                let top = pow(10, ceiling / 20)
                let peak = out.flatMap { $0 }.map(abs).max()!
                #expect(peak <= top, "\(name): peak \(20 * log10(peak)) dB over the ceiling \(ceiling) dB")
                #expect(unit.safetyClips == 0, "\(name): the lookahead gain alone kept the peaks down")
                #expect(peak > top * 0.9, "\(name): the limiter does not over-limit")
            }
        }
    }

    @Test func unityGainBelowTheCeilingAfterTheLatency() throws {
        let x = sine(440, amplitude: 0.8, frames: 24_000)  // −1.9 dBFS, under a −1 dB ceiling
        let (out, unit) = try limit(x, attack: 0.004)
        let lag = Int((unit.latency * 48_000).rounded())
        #expect(lag == 192)
        #expect(try unit.property("latencyFrames") == .int(192))
        #expect(Array(out[0][lag...]) == Array(x[..<(x.count - lag)]), "the input, delayed, bit for bit")
        #expect(out[0][..<lag].allSatisfy { $0 == 0 })
    }

    @Test func gainRecoversWithTheDecayTime() throws {
        // A +6 dB burst then a −20 dB tone: afterwards the gain returns toward 1 with time constant decayTime.
        let n = 24_000
        let x = (0..<(2 * n)).map { i -> Float in (i / 24) % 2 == 0 ? (i < n ? 2 : 0.1) : (i < n ? -2 : -0.1) }
        let unit = try LimiterUnit(format: stereo)
        try unit.setParameter("decayTime", 0.05)
        let out = try render(unit, inputs: [[x]], frames: 2 * n, blockSizes: [128])
        let lag = 240
        let gains = (n..<(2 * n - lag)).map { Double(abs(out[0][$0 + lag])) / 0.1 }
        // From the first frame after the burst the recovered gain is 1 − (1 − g0)·e^(−t/τ), smoothed by the 5 ms
        // average; find where it covered 63 % of the way up.
        let g0 = gains[0], mark = 1 - (1 - g0) * exp(-1)
        let t = Double(gains.firstIndex { $0 >= mark }!) / 48_000
        #expect(abs(t - 0.05) < 0.05 * 0.2 + 0.0025, "decay time \(t) s")
    }
}

@Suite struct DelayTests {
    @Test(arguments: [Float(50), Float(-70), Float(95)])
    func echoesComeBackAtExactOffsetsWithFeedbackPowers(feedback: Float) throws {
        let unit = try DelayUnit(format: stereo)
        try unit.setParameter("delayTime", 0.0123)  // 590.4 → 590 samples
        try unit.setParameter("feedback", feedback)
        try unit.setParameter("lowpassCutoff", 24_000)  // wide open
        try unit.setParameter("wetDryMix", 100)
        var x = [Float](repeating: 0, count: 12_000)
        x[10] = 1
        let out = try render(unit, inputs: [[x]], frames: x.count, blockSizes: [128, 1, 500])
        let fb = Double(feedback) / 100
        var expected = [Float](repeating: 0, count: x.count)
        for k in 1... {
            let at = 10 + 590 * k
            guard at < x.count else { break }
            expected[at] = Float(pow(fb, Double(k - 1)))
        }
        #expect(maxAbsDifference(out[0], expected) < 1e-6)
        #expect(out[0] == out[1])
    }

    @Test func dryOnlyIsTheInputAndTheLowPassDarkensEachEcho() throws {
        var generator = SplitMix64(seed: 166)
        let noise = (0..<9600).map { _ in Float.random(in: -0.5...0.5, using: &generator) }
        let dry = try DelayUnit(format: stereo)
        try dry.setParameter("wetDryMix", 0)
        #expect(try render(dry, inputs: [[noise]], frames: 9600)[0] == noise)

        // Cutoff 1 kHz: the echo of an impulse is the bilinear one-pole's impulse response (its DC gain is 1).
        let dark = try DelayUnit(format: stereo)
        try dark.setParameter("delayTime", 0.01)
        try dark.setParameter("feedback", 0)
        try dark.setParameter("lowpassCutoff", 1000)
        try dark.setParameter("wetDryMix", 100)
        var x = [Float](repeating: 0, count: 4800)
        x[0] = 1
        let out = try render(dark, inputs: [[x]], frames: 4800)[0]
        let k = tan(Double.pi * 1000 / 48_000), b = k / (1 + k), a = (k - 1) / (k + 1)
        var previous = (x: 0.0, y: 0.0)
        for n in 0..<200 {
            let input = n == 0 ? 1.0 : 0.0
            let y = b * (input + previous.x) - a * previous.y
            previous = (input, y)
            #expect(abs(Double(out[480 + n]) - y) < 1e-6)
        }
        #expect(abs(out[480...].reduce(0, +) - 1) < 1e-3, "unity DC gain")
    }
}
