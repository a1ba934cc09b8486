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

    /// Chirps heard a fraction of a millisecond off their spacing (a phone clock 300 ppm off the room's over the
    /// signal, the second 0.17 ms and the third 0.38 ms late) are found, at the mean of their lags: their correlations
    /// against the whole signal cancel there (a chirp to 4 kHz is undone by a tenth of a millisecond), their envelopes
    /// do not.
    @Test func chirpsAFractionOfAMillisecondOffTheirSpacingAreFound() throws {
        let signal = PhoneCalibration.signal(sampleRate: Self.rate)
        let delay = 0.1
        var recording = [Float](repeating: 0, count: signal.count + Int(1.2 * Self.rate))
        var shifts: [Double] = []
        for start in PhoneCalibration.chirpStarts {
            // Each chirp on its own, late by 300 ppm of its start: a fractional delay by linear interpolation of the
            // analytic chirp itself (the signal's formula at t − shift).
            let shift = 300e-6 * start
            shifts.append(shift)
            let n = Int(PhoneCalibration.chirpSeconds * Self.rate)
            let sweep = (PhoneCalibration.frequencies.high - PhoneCalibration.frequencies.low) / PhoneCalibration.chirpSeconds
            let first = Int(((delay + start) * Self.rate).rounded(.down))
            for k in 0..<(n + 2) {
                let t = Double(first + k) / Self.rate - delay - start - shift
                guard t >= 0, t < PhoneCalibration.chirpSeconds else { continue }
                let phase = 2 * Double.pi * (PhoneCalibration.frequencies.low * t + 0.5 * sweep * t * t)
                recording[first + k] = Float(0.3 * sin(phase))
            }
        }
        let m = try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: Self.rate, maximumLag: Int(1.0 * Self.rate))
        let expected = delay + shifts.reduce(0, +) / Double(shifts.count)
        let error = Double(m.lagFrames) / Self.rate - expected
        #expect(abs(error) <= 0.0005, "found \(Double(m.lagFrames) / Self.rate) s for \(expected) s (chirps \(m.chirpLags), clarity \(m.correlation))")
        #expect(m.correlation > 0.9, "the chirps' match: \(m.correlation)")
    }

    /// A phone's packets (20 ms, at 48 and 44.1 kHz) whose stamps wander by up to ±0.4 ms each are laid as one stream on
    /// the line through them: the recording is the phone's audio where it belongs within a few hundredths of a
    /// millisecond (not torn every 20 ms), and the calibration finds its offset; a packet that starts a new run, or
    /// one whose stamp steps by more than 10 ms, starts a line of its own.
    @Test(arguments: [48_000.0, 44_100.0])
    func packetsWithWanderingStampsAreLaidAsOneStream(phoneRate: Double) throws {
        let signal = PhoneCalibration.signal(sampleRate: Self.rate)
        let delay = 0.137
        // What the phone heard, at its own rate: the signal `delay` late (the formula of each chirp at its rate).
        let seconds = Double(signal.count) / Self.rate + 1.2
        let sweep = (PhoneCalibration.frequencies.high - PhoneCalibration.frequencies.low) / PhoneCalibration.chirpSeconds
        func heard(_ t: Double) -> Float {
            for start in PhoneCalibration.chirpStarts {
                let u = t - delay - start
                if u >= 0, u < PhoneCalibration.chirpSeconds {
                    return Float(0.5 * sin(2 * Double.pi * (PhoneCalibration.frequencies.low * u + 0.5 * sweep * u * u)))
                }
            }
            return 0
        }
        let phone = (0..<Int(seconds * phoneRate)).map { heard(Double($0) / phoneRate) }
        var rng = SplitMix64(seed: UInt64(phoneRate))
        let start = 1_000_000.0  // the recording's frame 0, room sample time
        let per = Int(0.02 * phoneRate), ratio = Self.rate / phoneRate
        var packets: [PhoneCalibration.Packet] = []
        for first in stride(from: 0, to: phone.count - per, by: per) {
            let jitter = Double.random(in: -0.0004...0.0004, using: &rng) * Self.rate
            packets.append(
                PhoneCalibration.Packet(
                    position: start + Double(first) * ratio + jitter, samples: Array(phone[first..<(first + per)]), framesPerSample: ratio,
                    newRun: first == 0))
        }
        let recording = PhoneCalibration.recording(packets, start: start, length: signal.count + Int(1.0 * Self.rate), sampleRate: Self.rate)
        // Against the truth at the room's rate, over the chirps' stretch: one stream matches it at a single lag (the
        // line's own error, a frame or so: 0.95 at the nearest whole frame), where packets torn apart by their stamps'
        // ±0.4 ms would match it at about none.
        let from = Int(delay * Self.rate), to = from + signal.count
        let truth = (from - 10..<to + 10).map { Double(heard(Double($0) / Self.rate)) }
        let truthEnergy = truth.map { $0 * $0 }.reduce(0, +)
        let matches = (-5...5).map { lag -> Double in
            var c = 0.0, e = 0.0
            for k in from..<to {
                c += Double(recording[k + lag]) * truth[k - from + 10]
                e += Double(recording[k + lag]) * Double(recording[k + lag])
            }
            return e > 0 ? c / (e * truthEnergy).squareRoot() : 0
        }
        #expect((matches.max() ?? 0) > 0.9, "the recording against the phone's audio, lags −5 … 5: \(matches)")
        let m = try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: Self.rate, maximumLag: Int(1.0 * Self.rate))
        #expect(abs(Double(m.lagFrames) / Self.rate - delay) <= 0.0002, "found \(Double(m.lagFrames) / Self.rate) s for \(delay) s (chirps \(m.chirpLags))")

        // A new run half-way, 5 ms later than the first's line (a packet lost, a capture restarted), and a step of
        // 30 ms within a run: each part is laid at its own stamps.
        var split = packets.enumerated().map { i, p in
            PhoneCalibration.Packet(position: start + Double(i * per) * ratio, samples: p.samples, framesPerSample: ratio, newRun: i == 0)
        }
        // Inside the second chirp and the third.
        let half = Int((delay + PhoneCalibration.chirpStarts[1]) / 0.02) + 1, third = Int((delay + PhoneCalibration.chirpStarts[2]) / 0.02) + 1
        for i in half..<split.count { split[i].position += 0.005 * Self.rate }
        split[half].newRun = true
        for i in third..<split.count { split[i].position += 0.030 * Self.rate }
        let laid = PhoneCalibration.recording(split, start: start, length: Int(seconds * Self.rate) + 4_000, sampleRate: Self.rate)
        for (i, shift) in [(half + 2, 0.005), (third + 2, 0.035)] {
            // A packet's audio where its part's stamps put it: its frame at the middle of the packet.
            let k = Int(Double(i * per) * ratio + 0.01 * Self.rate + shift * Self.rate)
            let truth = (k - 40..<k + 40).map { Double(heard((Double($0) / Self.rate) - shift)) }
            let got = (k - 40..<k + 40).map { Double(laid[$0]) }
            let d = zip(truth, got).map { ($0 - $1) * ($0 - $1) }.reduce(0, +), e = truth.map { $0 * $0 }.reduce(0, +)
            #expect(e > 0 && d / e < 0.1, "packet \(i): laid \(shift * 1000) ms later (\(d / e))")
        }
    }

    /// A capture that moves by 3 ms half-way through a run (in sequence: no break the placer would see) is laid on two
    /// lines, each side where its stamps say, not both 1.5 ms off on one line through them.
    @Test func aStepInsideARunSplitsItsLine() {
        let rate = Self.rate, per = 960, start = 500_000.0
        var rng = SplitMix64(seed: 3)
        // Noise below 3 kHz (a moving sum), 3 s: where each frame belongs is checked by correlation.
        let white = (0..<(150 * per + 8)).map { _ in Float.random(in: -1...1, using: &rng) }
        let phone = (0..<(150 * per)).map { i in white[i..<(i + 8)].reduce(0, +) / 4 }
        let step = 0.003 * rate
        let packets = (0..<150).map { k in
            PhoneCalibration.Packet(
                position: start + Double(k * per) + (k >= 75 ? step : 0) + Double.random(in: -10...10, using: &rng),
                samples: Array(phone[(k * per)..<((k + 1) * per)]), framesPerSample: 1, newRun: k == 0)
        }
        let laid = PhoneCalibration.recording(packets, start: start, length: 150 * per + 1_000, sampleRate: rate)
        for (name, from, shift) in [("before the step", 20 * per, 0), ("after it", 100 * per, Int(step))] {
            // The lag at which the laid audio matches the phone's, around where its stamps say.
            let best = (-100...100).max { a, b in
                func c(_ lag: Int) -> Double {
                    (0..<9_600).reduce(0.0) { $0 + Double(laid[from + shift + lag + $1]) * Double(phone[from + $1]) }
                }
                return c(a) < c(b)
            }!
            #expect(abs(best) <= 6, "\(name): laid \(best) frames from where its stamps say")
        }
    }

    /// Nothing a packet can say crashes the laying: positions and rates that are not finite numbers (left out), empty
    /// and one-frame packets, a run far outside the recording; and `measure` refuses a rate or a signal it cannot use.
    @Test func badPacketsAndSettingsAreLeftOutOrRefused() {
        let ok = [Float](repeating: 0.1, count: 960)
        let packets = [
            PhoneCalibration.Packet(position: .nan, samples: ok, framesPerSample: 1, newRun: true),
            PhoneCalibration.Packet(position: 100, samples: ok, framesPerSample: .infinity, newRun: false),
            PhoneCalibration.Packet(position: 100, samples: ok, framesPerSample: 0, newRun: false),
            PhoneCalibration.Packet(position: 200, samples: [], framesPerSample: 1, newRun: false),
            PhoneCalibration.Packet(position: 300, samples: [0.5], framesPerSample: 1, newRun: false),
            PhoneCalibration.Packet(position: 1e300, samples: ok, framesPerSample: 1, newRun: true),
            PhoneCalibration.Packet(position: -1e12, samples: ok, framesPerSample: 1, newRun: true),
            PhoneCalibration.Packet(position: 1_000, samples: ok, framesPerSample: 1e300, newRun: true),
            PhoneCalibration.Packet(position: 2_000, samples: ok, framesPerSample: 1, newRun: true),
        ]
        let laid = PhoneCalibration.recording(packets, start: 0, length: 4_000, sampleRate: Self.rate)
        #expect(laid.count == 4_000)
        #expect(laid[2_000...2_959].allSatisfy { $0 == 0.1 } && laid[0..<2_000].allSatisfy { $0 == 0 }, "only the good packet laid")
        #expect(PhoneCalibration.recording(packets, start: .nan, length: 10, sampleRate: Self.rate) == [Float](repeating: 0, count: 10))
        #expect(PhoneCalibration.recording(packets, start: 0, length: -5, sampleRate: Self.rate).isEmpty)
        let signal = PhoneCalibration.signal(sampleRate: Self.rate)
        let recording = [Float](repeating: 0, count: signal.count + 48_000)
        for (rate, lag, what) in [(Double.nan, 100, "a rate"), (0, 100, "a rate"), (Self.rate, Int.max, "a lag"), (Self.rate, -1, "a lag")] {
            #expect(throws: AudioError.self, "\(what): \(rate) Hz, lag \(lag)") {
                try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: rate, maximumLag: lag)
            }
        }
        #expect(throws: AudioError.self, "a signal shorter than the chirps") {
            try PhoneCalibration.measure(recording: recording, signal: Array(signal.prefix(1_000)), sampleRate: Self.rate, maximumLag: 100)
        }
    }
}
