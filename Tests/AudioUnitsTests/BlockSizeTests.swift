import Foundation
import LiveAudio
import Testing
import TestSupport

/// The effects' kernels take shortcuts by block — runs between ring wraps, vector steps inside a hold window,
/// steady-gain and nothing-to-limit paths. Their output must not depend on how the stream is cut into render
/// calls: one frame at a time (where no vector step ever runs) gives the reference, bit for bit.
@Suite struct BlockSizeTests {
    /// Stereo noise in bursts that decay by 40 dB over 0.25 s and then stop: loud enough to compress and limit,
    /// and with quiet stretches after loud ones (where a held peak outlasts the current one).
    static func bursts(frames: Int) -> [[Float]] {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next() -> Float {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Float(Double(state >> 11) / Double(1 << 53) * 2 - 1)
        }
        let period = 18_000
        return (0..<2).map { _ in
            (0..<frames).map { i in
                let t = i % period
                let envelope: Float = t < 12_000 ? 2.5 * powf(10, -2 * Float(t) / 12_000) : 0
                return next() * envelope
            }
        }
    }

    static let cases: [String] = ["eq", "lowpass", "dynamics", "limiter", "reverb", "delay"]

    static func unit(_ name: String) throws -> RenderUnit {
        switch name {
        case "eq":
            return try EQUnit(format: stereo, bands: [
                EQBand(.highPass, frequency: 90), EQBand(.peak, frequency: 3000, gain: 3, q: 1),
                EQBand(.highShelf, frequency: 10_000, gain: 2),
            ])
        case "lowpass": return try LowPassUnit(format: stereo, cutoff: 2000, resonance: 6)
        case "dynamics":
            let u = try DynamicsUnit(format: stereo)
            try u.setParameter("threshold", -24)
            try u.setParameter("knee", 6)
            try u.setParameter("makeupGain", 4)
            try u.setParameter("expansionThreshold", -50)
            try u.setParameter("expansionRatio", 2)
            return u
        case "limiter":
            let u = try LimiterUnit(format: stereo)
            try u.setParameter("preGain", 6)
            return u
        case "reverb":
            let u = try ReverbUnit(format: stereo)
            try u.setParameter("minDelayTime", 0.002)  // lines shorter than a render call
            return u
        default:
            let u = try DelayUnit(format: stereo)
            try u.setParameter("delayTime", 0.01)
            try u.setParameter("feedback", 60)
            return u
        }
    }

    @Test(arguments: cases)
    func outputDoesNotDependOnBlockSizes(_ name: String) throws {
        let frames = 40_000
        let input = Self.bursts(frames: frames)
        let reference = try renderEffect(Self.unit(name), format: stereo, input: input, frames: frames, blockSizes: [1])
        #expect(reference[0].contains { $0 != 0 })
        for sizes in [[4096], [1024], [37, 128, 5, 333]] {
            let out = try renderEffect(Self.unit(name), format: stereo, input: input, frames: frames, blockSizes: sizes)
            for c in 0..<2 {
                let first = out[c].indices.first { out[c][$0].bitPattern != reference[c][$0].bitPattern }
                #expect(first == nil, "\(name), blocks \(sizes), channel \(c): first difference at frame \(first ?? -1)")
            }
        }
    }
}
