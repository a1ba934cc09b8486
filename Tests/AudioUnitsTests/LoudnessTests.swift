import Foundation
import LiveAudio
import Testing
import TestSupport

/// The EBU's own test signals (EBU Tech 3341 "Loudness Metering: 'EBU Mode' metering to supplement EBU R 128
/// loudness normalization", and Tech 3342 "Loudness Range"), generated here: stereo 1 kHz sines at 48 kHz, the same
/// signal in both channels, each segment's level its peak in dBFS. A stereo sine at −23 dBFS is −23 LUFS: its mean
/// square is 3.01 dB under its peak, the two channels add 3.01 dB, and K-weighting gains +0.69 dB at 1 kHz, which the
/// −0.691 of BS.1770's formula takes back.
@Suite struct LoudnessTests {
    static let rate = 48_000.0

    /// Feeds `segments` (level dBFS, seconds) of a 1 kHz sine to a kernel in blocks of changing size.
    static func measure(
        _ segments: [(Double, Double)], frequency: Double = 1000, rate: Double = rate, channels: Int = 2,
        phase: Double = 0
    ) -> LoudnessReading {
        var kernel = LoudnessKernel(sampleRate: rate, channelCount: channels)
        let buffer = PCMBuffer(channelCount: channels, capacity: 4096)
        let sizes = [4096, 1, 511, 2048, 64, 1000]
        var n = 0
        var s = 0
        for (level, seconds) in segments {
            let amplitude = pow(10, level / 20)
            var left = Int((seconds * rate).rounded())
            while left > 0 {
                let frames = min(left, sizes[s % sizes.count])
                s += 1
                let view = buffer.view(frames: frames)
                for i in 0..<frames {
                    let v = Float(amplitude * sin(2 * Double.pi * frequency * Double(n + i) / rate + phase))
                    for c in 0..<channels { view[c][i] = v }
                }
                kernel.process(view)
                n += frames
                left -= frames
            }
        }
        return kernel.reading
    }

    @Test func tech3341Cases1And2SteadyTones() {
        for level in [-23.0, -33.0] {
            let r = Self.measure([(level, 20)])
            #expect(abs(r.momentary - level) <= 0.1, "M \(r.momentary) for \(level) dBFS")
            #expect(abs(r.shortTerm - level) <= 0.1, "S \(r.shortTerm) for \(level) dBFS")
            #expect(abs(r.integrated - level) <= 0.1, "I \(r.integrated) for \(level) dBFS")
            #expect(abs(r.duration - 20) < 1e-9)
        }
    }

    @Test func tech3341Cases3To5TheGatesKeepTheProgramme() {
        let cases: [[(Double, Double)]] = [
            [(-36, 10), (-23, 60), (-36, 10)],
            [(-72, 10), (-36, 10), (-23, 60), (-36, 10), (-72, 10)],
            [(-26, 20), (-20, 20.1), (-26, 20)],
        ]
        for (k, segments) in cases.enumerated() {
            let r = Self.measure(segments)
            #expect(abs(r.integrated + 23) <= 0.1, "case \(k + 3): I \(r.integrated)")
        }
    }

    @Test func tech3342Cases1To4LoudnessRange() {
        let cases: [([(Double, Double)], Double)] = [
            ([(-20, 20), (-30, 20)], 10),
            ([(-20, 20), (-15, 20)], 5),
            ([(-40, 20), (-20, 20)], 20),
            ([(-50, 20), (-35, 20), (-20, 20), (-35, 20), (-50, 20)], 15),
        ]
        for (k, (segments, expected)) in cases.enumerated() {
            let r = Self.measure(segments)
            #expect(abs(r.loudnessRange - expected) <= 1, "Tech 3342 case \(k + 1): LRA \(r.loudnessRange), expected \(expected)")
        }
    }

    /// A 12 kHz sine at 48 kHz has four samples a period; started 45° off its peak, every sample is at ±sin 45°,
    /// 3.01 dB under the amplitude. The oversampled peak must find the amplitude (Tech 3341's tolerance: +0.2/−0.4 dB).
    @Test func truePeakFindsThePeakBetweenSamples() {
        for amplitude in [-6.0, -1.0, 0.0] {
            let r = Self.measure([(amplitude, 2)], frequency: 12_000, phase: Double.pi / 4)
            #expect(abs(r.samplePeak - (amplitude - 3.0103)) < 0.01, "sample peak \(r.samplePeak)")
            #expect(r.truePeak <= amplitude + 0.2 && r.truePeak >= amplitude - 0.4, "true peak \(r.truePeak) for \(amplitude)")
        }
        // Other rates oversample 4× (44.1 kHz), 2× (96 kHz): a sine a quarter of the rate, same test.
        for rate in [44_100.0, 96_000.0] {
            let r = Self.measure([(-1, 2)], frequency: rate / 4, rate: rate, phase: Double.pi / 4)
            #expect(r.truePeak <= -1 + 0.2 && r.truePeak >= -1 - 0.4, "true peak \(r.truePeak) at \(rate) Hz")
        }
    }

    /// K-weighting re-derived for another rate reads the same loudness; mono counts once (−3 LU).
    @Test func otherRatesAndMono() {
        let r44 = Self.measure([(-23, 10)], rate: 44_100)
        #expect(abs(r44.integrated + 23) <= 0.1, "44.1 kHz: \(r44.integrated)")
        let mono = Self.measure([(-23, 10)], channels: 1)
        #expect(abs(mono.integrated + 26.01) <= 0.1, "mono: \(mono.integrated)")
    }

    /// BS.1770's weighting filter at 48 kHz, against the coefficients the recommendation prints (Table 1, 2).
    @Test func kWeightingMatchesTheRecommendationsResponse() {
        // The response of the printed 48 kHz filters at a few frequencies, computed from their coefficients.
        func response(_ f: Double) -> Double {
            func h(_ b: [Double], _ a: [Double]) -> Double {
                let w = 2 * Double.pi * f / 48_000
                var nr = 0.0, ni = 0.0, dr = 0.0, di = 0.0
                for k in 0..<3 {
                    nr += b[k] * cos(Double(k) * w); ni -= b[k] * sin(Double(k) * w)
                    dr += a[k] * cos(Double(k) * w); di -= a[k] * sin(Double(k) * w)
                }
                return (nr * nr + ni * ni) / (dr * dr + di * di)
            }
            let shelf = h([1.53512485958697, -2.69169618940638, 1.19839281085285], [1, -1.69065929318241, 0.73248077421585])
            let highPass = h([1, -2, 1], [1, -1.99004745483398, 0.99007225036621])
            return 10 * log10(shelf * highPass)
        }
        for f in [20.0, 50, 100, 500, 1000, 2000, 5000, 10_000, 16_000] {
            // A stereo sine at amplitude 1 and f: its loudness is −0.691 + 10 log10(2 · ½ · |H(f)|²).
            let r = Self.measure([(0, 4)], frequency: f)
            let expected = -0.691 + response(f)
            #expect(abs(r.integrated - expected) <= 0.05, "\(f) Hz: \(r.integrated), the printed filter gives \(expected)")
        }
    }

    @Test func silenceHasNoLoudness() {
        let r = Self.measure([(-.infinity, 5)])
        #expect(r.integrated == -.infinity && r.momentary == -.infinity && r.shortTerm == -.infinity)
        #expect(r.loudnessRange == 0)
        let nothing = LoudnessKernel(sampleRate: 48_000, channelCount: 2).reading
        #expect(nothing.integrated == -.infinity && nothing.duration == 0 && nothing.truePeak == -.infinity)
        // Under the absolute gate (−70 LUFS): measured, but no block counts.
        let quiet = Self.measure([(-80, 5)])
        #expect(quiet.integrated == -.infinity && quiet.momentary < -79)
    }

    @Test func surroundWeights() {
        let w = LoudnessChannelWeights(channelCount: 6)
        #expect(w.weights == [1, 1, 1, 0, 1.41, 1.41])
        #expect(w.description.contains("LFE not counted") && w.description.contains("Ls 1.41"))
    }

    /// The meter on a graph: its readings reach another thread, and a reset starts again.
    @Test func meterUnitInAGraph() throws {
        let unit = try LoudnessMeterUnit(format: stereo)
        let x = (0..<96_000).map { Float(pow(10, -23.0 / 20) * sin(2 * Double.pi * 1000 * Double($0) / 48_000)) }
        let graph = try RenderGraph(format: stereo, maximumFrames: 1024)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: [x, x]), sampleRate: 48_000))
        let meter = try graph.addNode(unit)
        try graph.connect(player, to: meter)
        try graph.addSink(meter)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        for _ in 0..<(96_000 / 480) { _ = try renderer.render(frames: 480) }
        let r = unit.read()
        #expect(abs(r.integrated + 23) <= 0.1 && abs(r.duration - 2) < 0.11)
        unit.meter.reset()
        #expect(unit.read().integrated != -.infinity, "a reset waits for the next block")
    }

    /// The limiter with true-peak detection holds the oversampled peak at the ceiling: a full-scale 12 kHz sine whose
    /// samples sit 3 dB under its peaks. Sample-peak detection lets the true peak through 3 dB over the ceiling.
    @Test func truePeakLimiterHoldsTheCeiling() throws {
        let x = (0..<48_000).map { Float(sin(2 * Double.pi * 12_000 * Double($0) / 48_000 + Double.pi / 4)) * 1.4 }
        for truePeak in [true, false] {
            let unit = try LimiterUnit(format: stereo, truePeak: truePeak)
            try unit.setParameter("ceiling", -1)
            #expect(abs(unit.latency - (0.005 + (truePeak ? 12.0 / 48_000 : 0))) < 1e-9)
            let out = try renderEffect(unit, format: stereo, input: [x, x], frames: 48_000, blockSizes: [256, 17, 1024])
            var kernel = LoudnessKernel(sampleRate: 48_000, channelCount: 2)
            let buffer = PCMBuffer(channels: [Array(out[0][4800...]), Array(out[1][4800...])])
            kernel.process(buffer.view(frames: buffer.frameLength))
            let tp = kernel.reading.truePeak
            if truePeak {
                #expect(tp <= -1 + 0.2 && tp >= -1.5, "true peak \(tp) dBTP with true-peak detection")
            } else {
                #expect(tp > 1, "sample-peak detection leaves the true peak at \(tp) dBTP")
            }
        }
    }
}
