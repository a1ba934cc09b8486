import AudioCore
import Foundation
import SingAlong

/// Generated singing with a known pitch: a glottal-like harmonic source (harmonics falling 12 dB an octave) shaped by
/// three vowel formants, a 5.5 Hz vibrato of ±`vibrato` cents, breath noise, and white noise at `snr` dB below the
/// voice. The melody steps through notes with gaps of silence; `truth` is the pitch (Hz, 0 in the gaps) every 10 ms.
public struct GeneratedSinger {
    public let rate: Double
    public var samples: [Float] = []
    public var truth: [(time: Double, frequency: Double)] = []

    /// A melody of `notes` (MIDI numbers), each `noteLength` long, `gap` apart.
    public init(rate: Double = 48_000, notes: [Double], noteLength: Double = 0.6, gap: Double = 0.15, vibrato: Double = 30,
         snr: Double = 30, seed: UInt64 = 1) {
        var segments: [(start: Double, end: Double, midi: Double)] = []
        var t = 0.0
        for midi in notes {
            segments.append((t, t + noteLength, midi))
            t += noteLength + gap
        }
        self.init(rate: rate, segments: segments, length: t, vibrato: vibrato, snr: snr, seed: seed)
    }

    /// A singer following a chart's part: each note — rap and freestyle ones too — sung at its pitch moved by
    /// `offset` semitones, `late` seconds after its time; silence between.
    public init(chart: SongChart, part: Int = 1, offset: Double = 0, late: Double = 0, rate: Double = 48_000,
         vibrato: Double = 30, snr: Double = 30, seed: UInt64 = 1) {
        let notes = chart.voice(part)?.syllables ?? []
        let segments = notes.compactMap { s -> (start: Double, end: Double, midi: Double)? in
            guard let note = s.note, s.end > s.start else { return nil }
            return (s.start + late, s.end + late, Double(note.midiNote) + offset)
        }
        self.init(rate: rate, segments: segments, length: (segments.last?.end ?? 0) + 0.5, vibrato: vibrato, snr: snr, seed: seed)
    }

    /// Notes sung over `segments` (seconds, MIDI number), silence elsewhere, `length` seconds in all.
    public init(rate: Double, segments: [(start: Double, end: Double, midi: Double)], length: Double, vibrato: Double = 30,
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
        let total = Int(length * rate)
        var voice = [Double](repeating: 0, count: total)
        var frequencies = [Double](repeating: 0, count: total)
        var phase = 0.0
        for segment in segments {
            let first = max(0, Int(segment.start * rate))
            let last = min(total, Int(segment.end * rate))
            guard last > first else { continue }
            let base = 440 * pow(2, (segment.midi - 69) / 12)
            let count = last - first
            // The harmonics' gains at the note's own pitch (the vibrato moves them by less than a formant's width).
            var gains: [Double] = []
            var k = 1.0
            while k * base * 1.02 < min(rate / 2 - 500, 8_000) {
                gains.append(formantGain(k * base) / (k * k))
                k += 1
            }
            gains.withUnsafeBufferPointer { gains in
                for i in 0..<count {
                    let t = Double(first + i) / rate
                    let f = base * exp2(vibrato / 1200 * sin(2 * .pi * 5.5 * t))
                    let envelope = min(1, Double(i) / (0.02 * rate), Double(count - i) / (0.02 * rate))
                    phase += f / rate
                    // The harmonics by the recurrence sin((h+1)x) = 2 cos x · sin hx − sin((h−1)x): one sine and one
                    // cosine a sample, not one sine a harmonic (five minutes of singing took a minute in the debug build).
                    let x = 2 * Double.pi * phase
                    let twiceCos = 2 * cos(x)
                    var before = 0.0, now = sin(x), v = 0.0
                    for g in gains {
                        v += g * now
                        (before, now) = (now, twiceCos * now - before)
                    }
                    voice[first + i] = envelope * (v + 0.02 * noise())
                    frequencies[first + i] = f
                }
            }
        }
        let peak = max(voice.map(abs).max() ?? 1, 1e-9)
        let voicePower = voice.reduce(0) { $0 + $1 * $1 } / Double(max(voice.count, 1)) / (peak * peak) * 0.25
        let noiseAmplitude = sqrt(voicePower / pow(10, snr / 10) * 3)  // uniform noise: power a²/3
        samples = voice.map { Float($0 / peak * 0.5 + noiseAmplitude * noise()) }
        var t = 0.0
        while t < Double(frequencies.count) / rate {
            truth.append((t, frequencies[Int(t * rate)]))
            t += 0.01
        }
    }

    /// The singer from sample `start` on (its truth too, its times from there).
    public static func tail(of singer: GeneratedSinger, from start: Int) -> GeneratedSinger {
        var tail = singer
        tail.samples = Array(singer.samples[start...])
        let offset = Double(start) / singer.rate
        tail.truth = singer.truth.filter { $0.time >= offset }.map { ($0.time - offset, $0.frequency) }
        return tail
    }

    /// The samples as a 16-bit mono WAV file.
    public func write(to path: String) throws {
        try writeWAV(path, channels: [samples], sampleRate: rate, sampleType: .int16)
    }
}

/// Raw pitch accuracy (estimates within 50 cents of the truth, over frames the truth is voiced and steady) and
/// octave errors (within 50 cents of double or half), the measures of the MIREX melody task.
public struct PitchAccuracy {
    public var voicedFrames = 0
    public var correct = 0
    public var octaveErrors = 0
    public var unvoicedCalls = 0
    public var rawPitchAccuracy: Double { Double(correct) / Double(max(voicedFrames, 1)) }
    public var octaveErrorRate: Double { Double(octaveErrors) / Double(max(voicedFrames, 1)) }

    public init(estimates: [PitchEstimate], truth: [(time: Double, frequency: Double)], shift: Double = 0) {
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

