import Foundation
import LiveAudio
import Testing
import TestSupport

/// Largest |y[n] − y[n−1]| over `range`.
func largestStep(_ y: [Float], _ range: Range<Int>) -> Float {
    var m: Float = 0
    for i in max(range.lowerBound, 1)..<range.upperBound { m = max(m, abs(y[i] - y[i - 1])) }
    return m
}

/// A unit and a change to make while it runs.
struct LiveChange: CustomStringConvertible, Sendable {
    var name: String
    var make: @Sendable () throws -> RenderUnit
    var change: @Sendable (RenderUnit) throws -> Void
    var description: String { name }
}

func setting(_ values: [String: Float]) -> @Sendable (RenderUnit) throws -> Void {
    { unit in for (k, v) in values { try unit.setParameter(k, v) } }
}

/// Gain-like parameters stepped by 20 dB (or 0 → 100 % of a mix) mid-stream, every unit's bypass switched on and
/// off, and the time-like parameters moved.
let liveChanges: [LiveChange] = [
    LiveChange(name: "eq gain.0 0 → +20 dB", make: { try EQUnit(format: stereo, bands: [EQBand(.peak, frequency: 440, gain: 0, q: 1)]) },
               change: setting(["gain.0": 20])),
    LiveChange(name: "eq frequency.0 and q.0", make: { try EQUnit(format: stereo, bands: [EQBand(.peak, frequency: 2000, gain: 12, q: 4)]) },
               change: setting(["frequency.0": 440, "q.0": 0.5])),
    LiveChange(name: "eq bypass.0", make: { try EQUnit(format: stereo, bands: [EQBand(.peak, frequency: 440, gain: 12, q: 1)]) },
               change: setting(["bypass.0": 1])),
    LiveChange(name: "lowpass cutoff and resonance", make: { try LowPassUnit(format: stereo, cutoff: 300) },
               change: setting(["cutoff": 5000, "resonance": 12])),
    LiveChange(name: "dynamics makeupGain 0 → +20 dB", make: { try DynamicsUnit(format: stereo) }, change: setting(["makeupGain": 20])),
    LiveChange(name: "dynamics threshold and ratio", make: { try DynamicsUnit(format: stereo) },
               change: setting(["threshold": -60, "ratio": 50])),
    LiveChange(name: "limiter ceiling −20 → 0 dB", make: {
        let u = try LimiterUnit(format: stereo); try u.setParameter("ceiling", -20); return u
    }, change: setting(["ceiling": 0])),
    LiveChange(name: "limiter preGain 0 → +20 dB", make: { try LimiterUnit(format: stereo) }, change: setting(["preGain": 20])),
    LiveChange(name: "limiter attackTime (lookahead) 5 → 20 ms", make: { try LimiterUnit(format: stereo) },
               change: setting(["attackTime": 0.02])),
    LiveChange(name: "delay wetDryMix 0 → 100 %", make: {
        let u = try DelayUnit(format: stereo); try u.setParameter("wetDryMix", 0); try u.setParameter("delayTime", 0.05); return u
    }, change: setting(["wetDryMix": 100])),
    LiveChange(name: "delay delayTime 50 → 80 ms", make: {
        let u = try DelayUnit(format: stereo); try u.setParameter("delayTime", 0.05); return u
    }, change: setting(["delayTime": 0.08])),
    LiveChange(name: "reverb gain −10 → +10 dB", make: {
        let u = try ReverbUnit(format: stereo); try u.setParameter("gain", -10); return u
    }, change: setting(["gain": 10])),
    LiveChange(name: "reverb wetDryMix 0 → 100 %", make: {
        let u = try ReverbUnit(format: stereo); try u.setParameter("wetDryMix", 0); return u
    }, change: setting(["wetDryMix": 100])),
]

/// Every effect, for the bypass switch.
let allEffects: [(String, @Sendable () throws -> RenderUnit)] = [
    ("eq", { try EQUnit(format: stereo, bands: [EQBand(.peak, frequency: 440, gain: 12), EQBand(.lowShelf, frequency: 200, gain: -6)]) }),
    ("lowpass", { try LowPassUnit(format: stereo, cutoff: 300) }),
    ("highpass", { try HighPassUnit(format: stereo, cutoff: 1000) }),
    ("bandpass", { try BandPassUnit(format: stereo, frequency: 3000) }),
    ("dynamics", { let u = try DynamicsUnit(format: stereo); try u.setParameter("makeupGain", 12); return u }),
    ("reverb", { try ReverbUnit(format: stereo) }),
    ("delay", { let u = try DelayUnit(format: stereo); try u.setParameter("delayTime", 0.03); return u }),
    ("limiter", { let u = try LimiterUnit(format: stereo); try u.setParameter("ceiling", -12); return u }),
]

@Suite struct SmoothingTests {
    /// A 440 Hz sine at −12 dBFS. The reference for "no click" is the signal's own largest step: the largest
    /// sample-to-sample change of the same unit's output, unchanged, in the steady state before the change and
    /// after it has settled (a hard 20 dB step would jump by up to 9 × 0.25 = 2.25, fifteen times that).
    @Test(arguments: liveChanges)
    func parameterChangesDoNotClick(_ c: LiveChange) throws {
        let x = sine(440, amplitude: 0.25, frames: 48_000)
        let at = 24_000
        let unit = try c.make()
        let out = try renderEffect(unit, format: stereo, input: [x], frames: x.count, blockSizes: [128]) { done in
            if done == at { try c.change(unit) }
        }
        // After: the unit built with the change already made, rendered alone.
        let settled = try c.make()
        try c.change(settled)
        let after = try renderEffect(settled, format: stereo, input: [x], frames: x.count, blockSizes: [128])
        let own = max(largestStep(out[0], 12_000..<at), largestStep(after[0], 12_000..<48_000))
        let during = largestStep(out[0], at..<(at + 12_000))
        #expect(during <= own * 1.05, "\(c): largest step \(during) while changing, signal's own \(own)")
        #expect(out.allSatisfy { $0.allSatisfy(\.isFinite) })
    }

    /// Bypass on and off mid-stream: no step larger than the signal's own (processed or dry), and while bypassed
    /// the output is the input bit for bit.
    @Test(arguments: allEffects.map(\.0))
    func bypassSwitchesWithoutAClickAndPassesInputExactly(name: String) throws {
        let make = allEffects.first { $0.0 == name }!.1
        let x = sine(440, amplitude: 0.25, frames: 48_000)
        let unit = try make()
        let out = try renderEffect(unit, format: stereo, input: [x], frames: x.count, blockSizes: [128]) { done in
            if done == 12_032 { unit.isBypassed = true }
            if done == 36_096 { unit.isBypassed = false }
        }
        // Bypassed from 12 032 + 480 (the 10 ms fade) until 36 096: the input exactly.
        #expect(Array(out[0][12_512..<36_096]) == Array(x[12_512..<36_096]), "\(name): bypass is bit-exact")
        let processed = try renderEffect(make(), format: stereo, input: [x], frames: x.count, blockSizes: [128])
        let own = max(largestStep(processed[0], 6000..<48_000), largestStep(x, 0..<48_000))
        // A linear crossfade over 480 frames adds at most |processed − dry| / 480 per step on top of the two
        // signals' own steps; a click would be a jump of the order of the signal itself.
        let fadeSlope = zip(processed[0], x).map { abs($0 - $1) }.max()! / 480
        for at in [12_032, 36_096] {
            let during = largestStep(out[0], at..<(at + 2000))
            #expect(during <= own + fadeSlope + 1e-6, "\(name) at \(at): step \(during), signal's own \(own) + fade \(fadeSlope)")
        }
    }
}
