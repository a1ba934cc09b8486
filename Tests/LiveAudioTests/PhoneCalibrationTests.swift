import AudioCore
import Foundation
import LiveAudio
import Testing

/// A phone's calibration measured from the room's chirps as a phone hears them: through a speaker (a band of 150 Hz
/// to 8 kHz), a room (the direct sound and forty reflections from 2 to 300 ms, decaying by 60 dB in 0.4 s, as loud in
/// all as the direct sound), a phone's microphone (its gain and a noise floor 30 dB under the chirps), and the delays
/// a phone adds, 80, 250 and 500 ms — within ±5 ms each, and refused when nothing was heard.
@Suite struct PhoneCalibrationTests {
    static let rate = 48_000.0

    /// What the phone records, from where the signal was played: `delay` seconds later, through all the above.
    static func heard(_ signal: [Float], delay: Double, seed: UInt64, noise: Double = 0.0316, gain: Double = 0.3) -> [Float] {
        var rng = SplitMix64(seed: seed)
        // The speaker: one-pole high-pass at 150 Hz, one-pole low-pass at 8 kHz.
        var x = signal.map(Double.init)
        let hp = exp(-2 * .pi * 150 / rate), lp = exp(-2 * .pi * 8_000 / rate)
        var prevIn = 0.0, prevOut = 0.0, low = 0.0
        for i in x.indices {
            let h = hp * (prevOut + x[i] - prevIn)
            prevIn = x[i]
            prevOut = h
            low = (1 - lp) * h + lp * low
            x[i] = low
        }
        // The room.
        var taps: [(Int, Double)] = [(0, 1)]
        var tail = 0.0
        for _ in 0..<40 {
            let at = Double.random(in: 0.002...0.3, using: &rng)
            let g = pow(10, -3 * at / 0.4) * (Bool.random(using: &rng) ? 1 : -1)
            taps.append((Int(at * rate), g))
            tail += g * g
        }
        // The reflections' energy equal to the direct sound's.
        let scale = 1 / tail.squareRoot()
        let length = x.count + Int(1.5 * rate)
        var out = [Double](repeating: 0, count: length)
        let d = Int((delay * rate).rounded())
        for (at, g) in taps {
            let w = at == 0 ? 1 : g * scale
            for i in x.indices { out[d + at + i] += w * x[i] }
        }
        let peak = signal.map { abs(Double($0)) }.max() ?? 1
        return out.map { Float(gain * $0 + noise * peak * gain * Double.random(in: -1.732...1.732, using: &rng)) }
    }

    @Test(arguments: [0.080, 0.250, 0.500])
    func theOffsetIsFoundWithin5Milliseconds(delay: Double) throws {
        let signal = PhoneCalibration.signal(sampleRate: Self.rate)
        let recording = Self.heard(signal, delay: delay, seed: UInt64(delay * 1000))
        let m = try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: Self.rate, maximumLag: Int(1.0 * Self.rate))
        let error = Double(m.lagFrames) / Self.rate - delay
        #expect(abs(error) <= 0.005, "found \(Double(m.lagFrames) / Self.rate) s for \(delay) s (correlation \(m.correlation), chirps \(m.chirpLags))")
        #expect(m.chirpLags.count == 3)
    }

    /// Nothing heard — silence, or only noise — is refused with what to do, never taken for an offset.
    @Test func nothingHeardIsRefused() {
        let signal = PhoneCalibration.signal(sampleRate: Self.rate)
        let silence = [Float](repeating: 0, count: signal.count + 48_000)
        var rng = SplitMix64(seed: 1)
        let noise = (0..<(signal.count + 48_000)).map { _ in Float.random(in: -0.1...0.1, using: &rng) }
        for (name, recording) in [("silence", silence), ("noise", noise)] {
            do {
                _ = try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: Self.rate, maximumLag: 48_000)
                Issue.record("\(name) gave an offset")
            } catch {
                #expect(error.code == .invalidParameter && error.message.contains("did not hear"), "\(name): \(error.message)")
            }
        }
        #expect(throws: AudioError.self) {
            try PhoneCalibration.measure(recording: Array(silence.prefix(1000)), signal: signal, sampleRate: Self.rate, maximumLag: 48_000)
        }
    }
}
