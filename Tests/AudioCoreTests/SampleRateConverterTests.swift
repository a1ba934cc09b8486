import AudioCore
import Foundation
import Testing
import TestSupport

/// A sine's amplitude and what is left of `x` once the best-fitting sine at `frequency` (and DC) is taken out,
/// by least squares over `x` — the analytic reference for a converter: a pure tone in must be the same pure tone
/// out, anything else being passband error, images or aliases.
func fitSine(_ x: ArraySlice<Float>, frequency: Double, sampleRate: Double) -> (amplitude: Double, residualRMS: Double) {
    // Normal equations for a·sin + b·cos + c.
    var m = [[Double]](repeating: [Double](repeating: 0, count: 3), count: 3)
    var v = [Double](repeating: 0, count: 3)
    let w = 2 * Double.pi * frequency / sampleRate
    for (k, sample) in zip(x.indices, x) {
        let basis = [sin(w * Double(k)), cos(w * Double(k)), 1]
        for i in 0..<3 {
            v[i] += basis[i] * Double(sample)
            for j in 0..<3 { m[i][j] += basis[i] * basis[j] }
        }
    }
    // Gaussian elimination, 3×3.
    for col in 0..<3 {
        let pivot = m[col][col]
        for j in 0..<3 { m[col][j] /= pivot }
        v[col] /= pivot
        for row in 0..<3 where row != col {
            let f = m[row][col]
            for j in 0..<3 { m[row][j] -= f * m[col][j] }
            v[row] -= f * v[col]
        }
    }
    var residual = 0.0
    for (k, sample) in zip(x.indices, x) {
        let fit = v[0] * sin(w * Double(k)) + v[1] * cos(w * Double(k)) + v[2]
        residual += (Double(sample) - fit) * (Double(sample) - fit)
    }
    return ((v[0] * v[0] + v[1] * v[1]).squareRoot(), (residual / Double(x.count)).squareRoot())
}

func tone(_ frequency: Double, amplitude: Double = 0.5, seconds: Double, rate: Double) -> [Float] {
    (0..<Int(seconds * rate)).map { Float(amplitude * sin(2 * .pi * frequency * Double($0) / rate)) }
}

func dB(_ x: Double) -> Double { 20 * log10(x) }

@Suite("Sample-rate converter (libsoxr)")
struct SampleRateConverterTests {
    static let rates: [Double] = [8_000, 16_000, 22_050, 32_000, 44_100, 48_000, 88_200, 96_000, 192_000]

    @Test("Every pair of 8, 16, 22.05, 32, 44.1, 48, 88.2, 96 and 192 kHz: a stream in random pieces gives exactly round(n × out/in) frames")
    func exactLengths() throws {
        var generator = SplitMix64(seed: 17)
        let n = 10_007
        let input = PCMBuffer(channels: [tone(440, seconds: Double(n) / 8_000, rate: 8_000).prefix(n).map { $0 }, [Float](repeating: 0.1, count: n)])
        for from in Self.rates {
            for to in Self.rates {
                let converter = try SampleRateConverter(inputRate: from, outputRate: to, channelCount: 2)
                let expected = converter.outputFrames(forInput: n)
                let output = PCMBuffer(channelCount: 2, capacity: expected + 4096)
                var consumed = 0
                var produced = 0
                var stuck = 0
                while consumed < n, stuck < 1000 {
                    let take = min(n - consumed, Int.random(in: 1...700, using: &generator))
                    let room = Int.random(in: 1...900, using: &generator)
                    let r = converter.process(
                        input: input.view(frames: n).slice(from: consumed, frames: take),
                        output: output.view(frames: output.capacity).slice(from: produced, frames: min(room, output.capacity - produced)))
                    consumed += r.consumed
                    produced += r.produced
                    stuck = r.consumed == 0 && r.produced == 0 ? stuck + 1 : 0
                }
                while true {
                    let more = converter.flush(into: output.view(frames: output.capacity).slice(from: produced, frames: min(333, output.capacity - produced)))
                    if more == 0 { break }
                    produced += more
                }
                #expect(produced == expected, "\(from) → \(to): \(produced) frames, expected \(expected)")
            }
        }
    }

    @Test("Rates outside 8–192 kHz and channel counts outside 1–64 are typed errors naming the value")
    func badSettings() {
        for (i, o) in [(7_999.0, 48_000.0), (48_000, 200_000), (.nan, 48_000), (44_100, .infinity)] {
            #expect(throws: AudioError.self) { _ = try SampleRateConverter(inputRate: i, outputRate: o, channelCount: 2) }
        }
        do {
            _ = try SampleRateConverter(inputRate: 44_100, outputRate: 48_000, channelCount: 0)
            Issue.record("0 channels accepted")
        } catch {
            #expect(error.code == .invalidParameter && error.message.contains("got 0"))
        }
    }

    @Test("44.1 → 48 kHz, high quality: tones from 20 Hz to 20 kHz keep their level within 0.01 dB, and nothing else (images, aliases, noise) comes within 100 dB of them")
    func passbandAndImages() throws {
        for f in [20.0, 100, 997, 5_000, 10_000, 15_000, 18_000, 19_500, 20_000] {
            let out = try SampleRateConverter.convert([tone(f, seconds: 1, rate: 44_100)], from: 44_100, to: 48_000)[0]
            // The middle 0.8 s: away from the start and end, where the stream begins and ends abruptly.
            let fit = fitSine(out[4_800..<43_200], frequency: f, sampleRate: 48_000)
            #expect(abs(dB(fit.amplitude / 0.5)) <= 0.01, "\(f) Hz: level \(dB(fit.amplitude / 0.5)) dB")
            #expect(dB(fit.residualRMS / (0.5 / 2.0.squareRoot())) <= -100, "\(f) Hz: residual \(dB(fit.residualRMS / (0.5 / 2.0.squareRoot()))) dB")
        }
    }

    @Test("48 → 44.1 kHz, high quality: a tone above the output's Nyquist frequency (23 kHz) is removed to −100 dB, not folded back")
    func aliasesRemoved() throws {
        let out = try SampleRateConverter.convert([tone(23_000, seconds: 1, rate: 48_000)], from: 48_000, to: 44_100)[0]
        let rms = (out[4_410..<39_690].reduce(0.0) { $0 + Double($1) * Double($1) } / 35_280).squareRoot()
        #expect(dB(rms / (0.5 / 2.0.squareRoot())) <= -100, "alias at \(dB(rms / (0.5 / 2.0.squareRoot()))) dB")
    }

    @Test("44.1 → 48 → 44.1 kHz, high quality: a mix of tones up to 12 kHz comes back at 100 dB SNR or better, at lag 0; tones up to 20 kHz come back pure to −100 dB, their level within the two passes' roll-off")
    func roundTrip() throws {
        let n = 44_100
        let x: [Float] = (0..<n).map { i in
            let t = Double(i) / 44_100
            return Float(0.3 * sin(2 * .pi * 261.63 * t) + 0.2 * sin(2 * .pi * 3_520 * t + 1) + 0.1 * sin(2 * .pi * 12_345 * t + 2))
        }
        let up = try SampleRateConverter.convert([x], from: 44_100, to: 48_000)
        let back = try SampleRateConverter.convert(up, from: 48_000, to: 44_100)[0]
        #expect(back.count == n)
        var signal = 0.0
        var noise = 0.0
        for i in 4_410..<(n - 4_410) {
            signal += Double(x[i]) * Double(x[i])
            noise += (Double(back[i]) - Double(x[i])) * (Double(back[i]) - Double(x[i]))
        }
        #expect(10 * log10(signal / noise) >= 100, "SNR \(10 * log10(signal / noise)) dB")
        // Towards 20 kHz the filters' roll-off (at most 0.01 dB a pass: see passbandAndImages) is the error: a
        // level, not noise. What is left once the level is fitted must still be 100 dB down.
        for f in [17_000.0, 19_000, 20_000] {
            let y = tone(f, seconds: 1, rate: 44_100)
            let there = try SampleRateConverter.convert([y], from: 44_100, to: 48_000)
            let fit = fitSine(try SampleRateConverter.convert(there, from: 48_000, to: 44_100)[0][4_410..<39_690], frequency: f, sampleRate: 44_100)
            #expect(abs(dB(fit.amplitude / 0.5)) <= 0.02, "\(f) Hz: level \(dB(fit.amplitude / 0.5)) dB")
            #expect(dB(fit.residualRMS / (0.5 / 2.0.squareRoot())) <= -100, "\(f) Hz: residual \(dB(fit.residualRMS / (0.5 / 2.0.squareRoot()))) dB")
        }
    }

    @Test("The output does not depend on how the stream is cut: whole versus random pieces agree to the last bit")
    func blockSizeIndependence() throws {
        let x = tone(1_000, seconds: 0.5, rate: 44_100)
        let whole = try SampleRateConverter.convert([x], from: 44_100, to: 48_000)[0]
        var generator = SplitMix64(seed: 3)
        let converter = try SampleRateConverter(inputRate: 44_100, outputRate: 48_000, channelCount: 1)
        let input = PCMBuffer(channels: [x])
        let output = PCMBuffer(channelCount: 1, capacity: whole.count + 4096)
        var consumed = 0
        var produced = 0
        while consumed < x.count {
            let r = converter.process(
                input: input.view(frames: x.count).slice(from: consumed, frames: min(x.count - consumed, Int.random(in: 1...512, using: &generator))),
                output: output.view(frames: output.capacity).slice(from: produced, frames: Int.random(in: 1...512, using: &generator)))
            consumed += r.consumed
            produced += r.produced
        }
        while true {
            let more = converter.flush(into: output.view(frames: output.capacity).slice(from: produced, frames: 256))
            if more == 0 { break }
            produced += more
        }
        #expect(produced == whole.count)
        #expect(Array(output.view(frames: produced)[0]) == whole)
    }

    @Test("A variable-rate converter set 0.1 % fast produces 0.1 % more output than one at the nominal ratio, within 0.01 %")
    func variableRate() throws {
        let x = tone(440, seconds: 10, rate: 48_000)
        let input = PCMBuffer(channels: [x])
        let output = PCMBuffer(channelCount: 1, capacity: 1024)
        func produced(ratio: Double) throws -> Int {
            let converter = try SampleRateConverter(inputRate: 48_000, outputRate: 48_000, channelCount: 1, variableRate: true)
            converter.setRatio(ratio)
            var consumed = 0
            var produced = 0
            while consumed < x.count {
                let r = converter.process(
                    input: input.view(frames: x.count).slice(from: consumed, frames: min(512, x.count - consumed)),
                    output: output.view(frames: 1024))
                consumed += r.consumed
                produced += r.produced
            }
            return produced
        }
        // Both hold back the same few hundred frames; the difference is the correction: 0.1 % of 480 000.
        let extra = try produced(ratio: 1.001) - produced(ratio: 1)
        #expect(abs(extra - 480) <= 48, "\(extra) more frames")
        let fewer = try produced(ratio: 1) - produced(ratio: 0.999)
        #expect(abs(fewer - 480) <= 48, "\(fewer) fewer frames")
    }
}
