import AudioCore
import AudioUnits
import Foundation
import TestSupport
import Testing

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
        estimator.flush { out.append($0) }
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
        // Handed out (fed a sample at a time) at most `emissionDelay` after its stamp: half the frame and the
        // look-ahead; with the half hop to the stamp nearest a change, within 30 ms. Without the look-ahead, half a
        // hop sooner.
        func latestHandOut(_ configuration: PitchEstimator.Configuration) throws -> (Double, PitchEstimator) {
            let estimator = try PitchEstimator(sampleRate: 48_000, configuration: configuration)
            var fed = 0
            var latest = 0.0
            singer.samples.withUnsafeBufferPointer { all in
                for i in all.indices {
                    estimator.process(all.baseAddress! + i, count: 1) { e in latest = max(latest, Double(fed + 1) / 48_000 - e.time) }
                    fed += 1
                }
            }
            return (latest, estimator)
        }
        let (latest, estimator) = try latestHandOut(.init())
        #expect(latest <= estimator.emissionDelay + 1 / 48_000, "\(latest) against \(estimator.emissionDelay)")
        #expect(estimator.emissionDelay + 0.005 <= 0.030, "\(estimator.emissionDelay)")
        var sooner = PitchEstimator.Configuration()
        sooner.lookAhead = false
        let (latestSooner, estimatorSooner) = try latestHandOut(sooner)
        #expect(abs(estimatorSooner.emissionDelay - (estimator.emissionDelay - 0.005)) < 1e-9)
        #expect(abs(latest - latestSooner - 0.005) < 0.0005, "the look-ahead's half hop: \(latest) against \(latestSooner)")
        let estimates = try Self.estimates(singer)
        // The step from A3 (220 Hz) to E4 (329.6 Hz) is at 0.5 s: the first estimate nearer the new note.
        let first = try #require(estimates.first { $0.voiced && $0.frequency > 275 })
        #expect(abs(first.time - 0.5) <= 0.01, "step seen at \(first.time) s")
        #expect(estimates.filter { $0.time > 0.55 && $0.time < 0.95 }.allSatisfy { $0.voiced && abs(1200 * log2($0.frequency / 329.63)) < 20 })
    }

    @Test("An unvoiced estimate's best guess: across a breath the voice's pitch, before a start the starting pitch, nothing carried half a second on")
    func bestGuess() throws {
        // A3 (220 Hz) with a 60 ms breath in it, then silence, then E4 (329.6 Hz).
        let singer = GeneratedSinger(rate: 48_000, segments: [(0.1, 0.6, 57), (0.66, 1.1, 57), (1.8, 2.3, 64)], length: 2.5,
                                     vibrato: 0, snr: 40)
        let estimates = try Self.estimates(singer)
        func cents(_ e: PitchEstimate, _ f: Double) -> Double { abs(1200 * log2(e.frequency / f)) }
        let breath = estimates.filter { $0.time > 0.615 && $0.time < 0.645 }
        #expect(!breath.isEmpty && breath.allSatisfy { !$0.voiced && cents($0, 220) < 50 }, "\(breath)")
        // The voice ended at 1.1 s: from 1.65 s (half a second and a frame on) nothing is carried.
        let late = estimates.filter { $0.time > 1.65 && $0.time < 1.75 }
        #expect(!late.isEmpty && late.allSatisfy { !$0.voiced } && late.filter { cents($0, 220) < 50 }.count <= late.count / 4, "\(late)")
        // A voice starting: the estimate before its first voiced one carries its pitch when the analysis between
        // them (half a hop on) finds the voice — for about half the times a voice may start at.
        var carried = 0
        for k in 0..<8 {
            let onset = 0.5 + Double(k) * 0.00125
            let starting = GeneratedSinger(rate: 48_000, segments: [(onset, 1.0, 64)], length: 1.2, vibrato: 0, snr: 40)
            let e = try Self.estimates(starting)
            let first = try #require(e.firstIndex { $0.voiced })
            #expect(abs(e[first].time - onset) < 0.02)
            if cents(e[first - 1], 329.63) < 50 { carried += 1 }
        }
        #expect(carried >= 3, "\(carried) of 8")
        // Without the look-ahead the same starts carry nothing of the new pitch (it is the look-ahead, not the
        // estimate's own frame, that found it).
        var sooner = PitchEstimator.Configuration()
        sooner.lookAhead = false
        var carriedSooner = 0
        for k in 0..<8 {
            let starting = GeneratedSinger(rate: 48_000, segments: [(0.5 + Double(k) * 0.00125, 1.0, 64)], length: 1.2, vibrato: 0, snr: 40)
            let e = try Self.estimates(starting, configuration: sooner)
            let first = try #require(e.firstIndex { $0.voiced })
            if cents(e[first - 1], 329.63) < 50 { carriedSooner += 1 }
        }
        #expect(carriedSooner <= 1, "\(carriedSooner) of 8 without the look-ahead")
    }

    @Test("The estimate waiting for its look-ahead is handed out by flush, once; the stream goes on after it")
    func flush() throws {
        let singer = GeneratedSinger(notes: [57], noteLength: 0.5, gap: 0, vibrato: 0, snr: 40)
        let estimator = try PitchEstimator(sampleRate: 48_000)
        var out: [PitchEstimate] = []
        // Up to the first estimate (handed out at the analysis after its own), then half a hop more: the next
        // estimate's analysis is made and waits for its look-ahead.
        var cut = 0
        singer.samples.withUnsafeBufferPointer { all in
            while out.isEmpty {
                estimator.process(all.baseAddress! + cut, count: 1) { out.append($0) }
                cut += 1
            }
            estimator.process(all.baseAddress! + cut, count: 240) { out.append($0) }
            cut += 240
        }
        #expect(out.count == 1)
        var flushed: [PitchEstimate] = []
        estimator.flush { flushed.append($0) }
        estimator.flush { flushed.append($0) }
        #expect(flushed.count == 1, "\(flushed)")
        if let last = out.last, let f = flushed.first { #expect(abs(f.time - last.time - 0.01) < 0.004 && f.voiced) }
        singer.samples.withUnsafeBufferPointer { estimator.process($0.baseAddress! + cut, count: $0.count - cut) { out.append($0) } }
        let all = out.count + flushed.count
        #expect(abs(Double(all) - (0.5 - 0.031) / 0.01) <= 2, "\(all) estimates over 0.5 s")
        let times = (out + flushed).map(\.time).sorted()
        #expect(zip(times, times.dropFirst()).allSatisfy { $1 - $0 > 0.005 }, "no estimate twice")
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
