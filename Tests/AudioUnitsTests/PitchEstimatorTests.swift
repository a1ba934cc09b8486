import AudioCore
import AudioUnits
import Foundation
import Testing

/// Generated singing with a known pitch: a glottal-like harmonic source (harmonics falling 12 dB an octave) shaped by
/// three vowel formants, a 5.5 Hz vibrato of ±`vibrato` cents, breath noise, and white noise at `snr` dB below the
/// voice. The melody steps through notes with gaps of silence; `truth` is the pitch (Hz, 0 in the gaps) every 10 ms.
struct GeneratedSinger {
    let rate: Double
    var samples: [Float] = []
    var truth: [(time: Double, frequency: Double)] = []

    init(rate: Double = 48_000, notes: [Double], noteLength: Double = 0.6, gap: Double = 0.15, vibrato: Double = 30,
         snr: Double = 30, seed: UInt64 = 1) {
        self.rate = rate
        var random = SplitMix64(seed: seed)
        func noise() -> Double { Double(random.next() >> 11) / Double(1 << 53) * 2 - 1 }
        // Formants of an open vowel /a/: 800, 1150, 2900 Hz with bandwidths 80, 90, 120 Hz.
        let formants: [(f: Double, b: Double, g: Double)] = [(800, 80, 1), (1150, 90, 0.5), (2900, 120, 0.15)]
        func formantGain(_ f: Double) -> Double {
            formants.reduce(0.05) { sum, r in
                sum + r.g / sqrt(1 + pow((f - r.f) / (r.b / 2), 2))
            }
        }
        var voice: [Double] = []
        var phase = 0.0
        var time = 0.0
        var frequencies: [Double] = []
        for midi in notes {
            let base = 440 * pow(2, (midi - 69) / 12)
            let count = Int(noteLength * rate)
            for i in 0..<count {
                let t = time + Double(i) / rate
                let f = base * pow(2, vibrato / 1200 * sin(2 * .pi * 5.5 * t))
                let envelope = min(1, Double(i) / (0.02 * rate), Double(count - i) / (0.02 * rate))
                phase += f / rate
                var v = 0.0
                var k = 1.0
                while k * f < min(rate / 2 - 500, 8_000) {
                    v += formantGain(k * f) / (k * k) * sin(2 * .pi * k * phase)
                    k += 1
                }
                voice.append(envelope * (v + 0.02 * noise()))
                frequencies.append(f)
            }
            let silent = Int(gap * rate)
            voice += [Double](repeating: 0, count: silent)
            frequencies += [Double](repeating: 0, count: silent)
            time += Double(count + silent) / rate
        }
        let peak = voice.map(abs).max() ?? 1
        let voicePower = voice.reduce(0) { $0 + $1 * $1 } / Double(voice.count) / (peak * peak) * 0.25
        let noiseAmplitude = sqrt(voicePower / pow(10, snr / 10) * 3)  // uniform noise: power a²/3
        samples = voice.map { Float($0 / peak * 0.5 + noiseAmplitude * noise()) }
        var t = 0.0
        while t < Double(frequencies.count) / rate {
            truth.append((t, frequencies[Int(t * rate)]))
            t += 0.01
        }
    }
}

/// Raw pitch accuracy (estimates within 50 cents of the truth, over frames the truth is voiced and steady) and
/// octave errors (within 50 cents of double or half), the measures of the MIREX melody task.
struct PitchAccuracy {
    var voicedFrames = 0
    var correct = 0
    var octaveErrors = 0
    var unvoicedCalls = 0
    var rawPitchAccuracy: Double { Double(correct) / Double(max(voicedFrames, 1)) }
    var octaveErrorRate: Double { Double(octaveErrors) / Double(max(voicedFrames, 1)) }

    init(estimates: [PitchEstimate], truth: [(time: Double, frequency: Double)], shift: Double = 0) {
        for e in estimates {
            let t = e.time - shift
            let index = Int((t / 0.01).rounded())
            // Judged where the truth is voiced 30 ms either side (not across a note's edges).
            guard index >= 3, index + 3 < truth.count, (index - 3...index + 3).allSatisfy({ truth[$0].frequency > 0 }) else { continue }
            let f = truth[index].frequency
            voicedFrames += 1
            guard e.voiced else {
                unvoicedCalls += 1
                continue
            }
            let cents = 1200 * log2(e.frequency / f)
            if abs(cents) <= 50 { correct += 1 } else if abs(abs(cents) - 1200) <= 50 { octaveErrors += 1 }
        }
    }
}

@Suite("Pitch estimator (YIN)")
struct PitchEstimatorTests {
    static func estimates(_ singer: GeneratedSinger, configuration: PitchEstimator.Configuration = .init(), block: Int = 128) throws -> [PitchEstimate] {
        let estimator = try PitchEstimator(sampleRate: singer.rate, configuration: configuration)
        var out: [PitchEstimate] = []
        singer.samples.withUnsafeBufferPointer { all in
            var i = 0
            while i < all.count {
                let n = min(block, all.count - i)
                estimator.process(all.baseAddress! + i, count: n) { out.append($0) }
                i += n
            }
        }
        return out
    }

    /// Two octaves of a singer's range, C3 … C5 and a few notes beyond.
    static let melody: [Double] = [48, 50, 52, 53, 55, 57, 59, 60, 62, 64, 65, 67, 69, 71, 72, 45, 76, 41]

    @Test("Generated singing at SNR 30 dB and 10 dB: raw pitch accuracy ≥ 98 % / 95 %, octave errors under 1 %", arguments: [(30.0, 0.98), (10.0, 0.95)])
    func accuracy(snr: Double, least: Double) throws {
        for rate in [48_000.0, 44_100, 16_000] {
            let singer = GeneratedSinger(rate: rate, notes: Self.melody, snr: snr)
            let result = PitchAccuracy(estimates: try Self.estimates(singer), truth: singer.truth)
            #expect(result.voicedFrames > 900)
            #expect(result.rawPitchAccuracy >= least, "\(rate) Hz, SNR \(snr): \(result)")
            #expect(result.octaveErrorRate < 0.01, "\(rate) Hz, SNR \(snr): \(result)")
        }
    }

    @Test("Estimates are stamped at the voice they describe: a pitch step shows within 10 ms of its time, handed out ≤ 30 ms later")
    func timing() throws {
        let singer = GeneratedSinger(notes: [57, 64], noteLength: 0.5, gap: 0, vibrato: 0, snr: 40)
        let estimator = try PitchEstimator(sampleRate: 48_000)
        #expect(estimator.emissionDelay <= 0.030, "\(estimator.emissionDelay)")
        let estimates = try Self.estimates(singer)
        // The step from A3 (220 Hz) to E4 (329.6 Hz) is at 0.5 s: the first estimate nearer the new note.
        let first = try #require(estimates.first { $0.voiced && $0.frequency > 275 })
        #expect(abs(first.time - 0.5) <= 0.01, "step seen at \(first.time) s")
        #expect(estimates.filter { $0.time > 0.55 && $0.time < 0.95 }.allSatisfy { $0.voiced && abs(1200 * log2($0.frequency / 329.63)) < 20 })
    }

    @Test("Silence and noise are unvoiced; an estimate a hop; block sizes do not change the estimates")
    func voicingAndBlocks() throws {
        var quiet = GeneratedSinger(notes: [60], noteLength: 0.3, gap: 0.5, snr: 60)
        quiet.samples += (0..<24_000).map { _ in Float.random(in: -0.3...0.3) }
        let estimates = try Self.estimates(quiet)
        let gap = estimates.filter { $0.time > 0.36 && $0.time < 0.76 }
        #expect(!gap.isEmpty && gap.allSatisfy { !$0.voiced }, "silence")
        let noise = estimates.filter { $0.time > 0.86 && $0.time < 1.25 }
        #expect(Double(noise.filter(\.voiced).count) <= 0.05 * Double(noise.count), "white noise: \(noise.filter(\.voiced).count) of \(noise.count) voiced")
        // One estimate a hop, each stamped by the period it found (within half the longest period of the hop).
        let steps = zip(estimates, estimates.dropFirst()).map { $1.time - $0.time }
        #expect(steps.allSatisfy { $0 > 0.002 && $0 < 0.018 }, "\(steps.min()!) … \(steps.max()!)")
        #expect(abs(Double(estimates.count) - (estimates.last!.time - estimates.first!.time) / 0.01) < 2)
        let singer = GeneratedSinger(notes: [55, 67], snr: 20)
        #expect(try Self.estimates(singer, block: 1) == Self.estimates(singer, block: 4096))
    }

    @Test("Bad settings are errors")
    func errors() {
        #expect(throws: AudioError.self) { try PitchEstimator(sampleRate: 8_000) }
        var c = PitchEstimator.Configuration()
        c.minimumFrequency = 600
        #expect(throws: AudioError.self) { try PitchEstimator(sampleRate: 48_000, configuration: c) }
        c = .init()
        c.hop = 0.2
        #expect(throws: AudioError.self) { try PitchEstimator(sampleRate: 48_000, configuration: c) }
    }
}
