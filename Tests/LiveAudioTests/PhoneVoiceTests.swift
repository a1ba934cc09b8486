import AudioCore
import AudioGraph
import Foundation
import LiveAudio
import Testing

/// A phone's voice from its packets to the device thread, offline and exact: a singer whose signal is known at every
/// instant, captured by a phone whose audio clock and timestamps run 200 ppm fast, in 20 ms packets over a network
/// of 20 ms plus queueing, placed through the clock fits (``ClockFit``, fed NTP-style readings over the same
/// network) by a ``PhoneVoicePlacer`` into a ``PhoneVoiceFeed``, and read by a ``PhoneVoiceSource`` 300 ms behind
/// the device in cycles of 256 frames. What comes out is compared with the singer's signal at the room time it was
/// sung.
@Suite struct PhoneVoiceTests {
    static let rate = 48_000.0

    /// The singer: eight partials of random frequencies (120 Hz … 3.5 kHz) and phases — no period in sight, so the
    /// correlation has one clear peak.
    struct Singer {
        let partials: [(frequency: Double, phase: Double, amplitude: Double)]
        init(seed: UInt64) {
            var rng = SplitMix64(seed: seed)
            partials = (0..<8).map { _ in
                (Double.random(in: 120...3500, using: &rng), Double.random(in: 0...(2 * .pi), using: &rng), Double.random(in: 0.02...0.1, using: &rng))
            }
        }
        func value(at t: Double) -> Double { partials.reduce(0) { $0 + $1.amplitude * sin(2 * .pi * $1.frequency * t + $1.phase) } }
    }

    struct Outcome {
        var windows: [(position: Int64, samples: [Float])] = []
        var counters = PhoneVoiceSource.Counters()
        var runs = 0
        var correction = 0.0
        var drift = 0.0
    }

    /// Runs a take of `seconds`: the phone's packets (`dropped` sequence numbers never sent), the network's delays,
    /// the room's cycles; keeps 100 ms of output at each of `windows` (room seconds).
    static func take(
        seconds: Double, ppm: Double, delay: Double = 0.3, dropped: Set<Int> = [], queueMean: Double = 0.015, windows: [Double],
        exactClock: Bool = false
    ) throws -> Outcome {
        let singer = Singer(seed: 11)
        let feed = PhoneVoiceFeed()
        let placer = try PhoneVoicePlacer(inputRate: rate, roomRate: rate, feed: feed)
        let source = try PhoneVoiceSource(sampleRate: rate, feed: feed)
        try source.setDelayFrames(Int(delay * rate))
        var rng = SplitMix64(seed: 5)
        func queue() -> Double { min(0.2, -queueMean * log(Double.random(in: 1e-9...1, using: &rng))) }
        // The phone: its audio clock and its timestamps one crystal, `ppm` fast; it started a quarter of a second
        // before the room's frame 0 and its clock reads 1000 s then.
        let phoneRate = rate * (1 + ppm * 1e-6)
        let phoneStart = -0.25
        func phoneClock(_ t: Double) -> Double { (1000 + (t - phoneStart) * (1 + ppm * 1e-6)) * 1e6 }
        // The room reads the phone's clock ten times a second for its first three seconds (the page's greeting), then
        // four times a second, as the stage does; the best of each 2 s span is kept.
        var fit = ClockFit(bucketSpan: 2_000_000)
        var nextReading = -3.0
        // Packets: 960 of the phone's frames each, from its start.
        var packet = 0
        var lastArrival = -Double.infinity
        var pending: [(arrival: Double, samples: [Float], stamp: Double, sequence: Int, first: Double)] = []
        var previousSequence: Int?
        var outcome = Outcome()
        let out = PCMBuffer(channelCount: 1, capacity: 256)
        let cycles = Int(seconds * rate) / 256
        let wanted = windows.map { Int64($0 * rate) }
        for cycle in 0..<cycles {
            let s = Int64(cycle * 256)
            let now = Double(s) / rate
            // The room's clock readings of the phone, once a second.
            while nextReading <= now {
                let there = 0.004 + queue(), back = 0.004 + queue()
                fit.add(ClockFit.Reading(x: phoneClock(nextReading + there), y: (nextReading + (there + back) / 2) * 1e6, error: (there + back) / 2 * 1e6))
                nextReading += nextReading < 0 ? 0.1 : 0.25
            }
            // The phone's packets captured by now, sent when their last frame is in, arriving in order.
            while true {
                let first = phoneStart + Double(packet * 960) / phoneRate
                let end = first + 960 / phoneRate
                guard end <= now + 0.5 else { break }
                var samples = [Float](repeating: 0, count: 960)
                for i in 0..<960 { samples[i] = Float(singer.value(at: first + Double(i) / phoneRate)) }
                lastArrival = max(lastArrival, end + 0.016 + queue())
                if !dropped.contains(packet) { pending.append((lastArrival, samples, phoneClock(first), packet, first)) }
                packet += 1
            }
            while let p = pending.first, p.arrival <= now {
                pending.removeFirst()
                // The clocks' fit, or (for what is not about the clocks) the truth.
                guard let fitted = fit.y(at: p.stamp) else { continue }
                let roomMicros = exactClock ? p.first * 1e6 : fitted
                let newRun = previousSequence.map { p.sequence != $0 + 1 } ?? true
                previousSequence = p.sequence
                p.samples.withUnsafeBufferPointer { placer.place($0, at: roomMicros * rate / 1e6, newRun: newRun) }
            }
            let views = [out.view(frames: 256)]
            views.withUnsafeBufferPointer { outputs in
                source.render(
                    RenderContext(
                        frameCount: 256, timeStamp: RenderTimeStamp(sampleTime: s, hostTime: 0), inputs: UnsafeBufferPointer(start: nil, count: 0),
                        outputs: outputs))
            }
            // What was read: positions s − delay … s − delay + 255.
            let position = s - Int64(source.delayFrames)
            for w in wanted where position + 256 > w && position < w + 4800 + 256 {
                if outcome.windows.last?.position != w { outcome.windows.append((w, [])) }
                let from = max(0, Int(w - position)), to = min(256, Int(w + 4800 - position))
                if from < to { outcome.windows[outcome.windows.count - 1].samples += out.view(frames: 256)[0][from..<to] }
            }
        }
        outcome.counters = source.counters
        outcome.runs = placer.runs
        outcome.correction = placer.correctionPPM
        outcome.drift = placer.driftPPM
        return outcome
    }

    /// The best lag (frames, within ±20 ms) of a window against the singer at the room time its frames stand for,
    /// and the correlation there — refined to a tenth of a frame (the singer is known between the samples too), so
    /// that a placement between two frames is not taken for a poor match.
    static func alignment(_ window: (position: Int64, samples: [Float])) -> (lag: Int, correlation: Double) {
        let singer = Singer(seed: 11)
        let span = 960
        let reference = (0..<(window.samples.count + 2 * span)).map { singer.value(at: Double(window.position - Int64(span) + Int64($0)) / rate) }
        let x = window.samples.map(Double.init)
        let ex = x.reduce(0) { $0 + $1 * $1 }
        var best = (lag: 0, correlation: -1.0)
        for lag in -span...span {
            var c = 0.0, e = 0.0
            for i in x.indices {
                let r = reference[i + span + lag]
                c += x[i] * r
                e += r * r
            }
            let v = ex > 0 && e > 0 ? c / (ex * e).squareRoot() : 0
            if v > best.correlation { best = (lag, v) }
        }
        var refined = best.correlation
        for tenth in -10...10 {
            let shift = Double(best.lag) + Double(tenth) / 10
            var c = 0.0, e = 0.0
            for i in x.indices {
                let r = singer.value(at: (Double(window.position) + Double(i) + shift) / rate)
                c += x[i] * r
                e += r * r
            }
            if ex > 0 && e > 0 { refined = max(refined, c / (ex * e).squareRoot()) }
        }
        return (best.lag, refined)
    }

    /// Five minutes at 200 ppm: every window from the first seconds to the last lies within ±10 ms of where it was
    /// sung, with correlation ≥ 0.99 against the singer; from the first minute on within 1 ms (what is left is the
    /// clock fit's error: the loop's integral has learnt the drift); nothing lost, nothing late, one run, and the
    /// drift the loop learnt is the phone's within 10 %.
    @Test func fiveMinutesOfADriftingPhoneLandWhereTheyWereSung() throws {
        let windows = [5.0, 60, 120, 180, 240, 295]
        let outcome = try Self.take(seconds: 300, ppm: 200, windows: windows)
        #expect(outcome.windows.count == windows.count)
        for w in outcome.windows {
            #expect(w.samples.count == 4800)
            let a = Self.alignment(w)
            #expect(abs(a.lag) <= 480 && a.correlation >= 0.99, "at \(Double(w.position) / Self.rate) s: lag \(a.lag) frames, correlation \(a.correlation)")
            if w.position >= Int64(60 * Self.rate) {
                #expect(abs(a.lag) <= 48, "at \(Double(w.position) / Self.rate) s: \(a.lag) frames off (more than 1 ms)")
            }
        }
        #expect(outcome.counters.holes == 0 && outcome.counters.late == 0 && outcome.counters.early == 0, "\(outcome.counters)")
        #expect(outcome.runs == 1, "one run: the loop kept up with the drift (\(outcome.correction) ppm now)")
        #expect(abs(outcome.drift - 200) < 20, "the loop learnt a drift of \(outcome.drift) ppm")
        let margin = try #require(outcome.counters.margin)
        #expect(margin > 0 && margin < Int64(0.3 * Self.rate), "the newest frame \(margin) frames ahead of the one played")
    }

    /// A lost packet (a gap in the sequence) is 20 ms of silence where it belonged — counted as a hole — and the
    /// packets after it land where they were sung (the clock here the truth: what is tested is the runs, to the
    /// frame).
    @Test func aLostPacketIsSilenceWhereItBelonged() throws {
        // Packet 3000 was captured from −0.25 s + 3000 × 960 / 48 009.6 Hz = 59.738 s of room time, for 20 ms: a
        // minute in, when the drift loop has settled.
        let outcome = try Self.take(seconds: 64, ppm: 200, dropped: [3000], windows: [59.69, 61.5], exactClock: true)
        #expect(outcome.runs == 2, "the packet after the gap starts a run")
        #expect(abs(outcome.counters.holes - 960) <= 8, "\(outcome.counters.holes) frames of silence")
        // From 59.69 s: 48 ms of voice, the hole (frames 2304 … 3264 of the window), then voice again.
        let around = outcome.windows[0].samples
        #expect(around[2_312..<3_256].allSatisfy { $0 == 0 }, "the lost packet's time is silent")
        #expect(around[2_200..<2_296].allSatisfy { $0 != 0 } && around[3_272..<3_400].allSatisfy { $0 != 0 }, "voice on either side")
        let a = Self.alignment(outcome.windows[1])
        #expect(abs(a.lag) <= 4 && a.correlation >= 0.99, "after the gap: lag \(a.lag), correlation \(a.correlation)")
    }

    /// What the pitch track marks as a gap: the source keeps, frame by frame of the device's time, whether the
    /// phone's audio was there — 1 where it came, 0 where it did not (a lost stretch, or before the phone sang), and
    /// nothing known of frames not rendered yet or rendered longer ago than it keeps (9.9 s at 48 kHz).
    @Test func theSourceKnowsWhereThePhonesAudioWas() throws {
        let feed = PhoneVoiceFeed()
        let source = try PhoneVoiceSource(sampleRate: Self.rate, feed: feed)
        try source.setDelayFrames(960)
        let voice = [Float](repeating: 0.25, count: 4_800)
        // Audio for [1000, 5800) and [10600, 15400) of the phone's time: heard 960 frames later on the device.
        for start in [Int64(1_000), 10_600] { voice.withUnsafeBufferPointer { _ = feed.push(position: start, samples: $0) } }
        let out = PCMBuffer(channelCount: 1, capacity: 256)
        func render(cycles: Range<Int>) {
            for cycle in cycles {
                let views = [out.view(frames: 256)]
                views.withUnsafeBufferPointer { outputs in
                    source.render(
                        RenderContext(
                            frameCount: 256, timeStamp: RenderTimeStamp(sampleTime: Int64(cycle * 256), hostTime: 0),
                            inputs: UnsafeBufferPointer(start: nil, count: 0), outputs: outputs))
                }
            }
        }
        render(cycles: 0..<100)  // 25,600 frames
        #expect(source.shareHeard(from: 1_960, to: 6_760) == 1)
        #expect(source.shareHeard(from: 0, to: 1_960) == 0, "before the phone sang")
        #expect(source.shareHeard(from: 6_760, to: 11_560) == 0, "the stretch that never came")
        #expect(source.shareHeard(from: 4_360, to: 9_160) == 0.5)
        #expect(source.shareHeard(from: 11_560, to: 16_360) == 1)
        #expect(source.shareHeard(from: 25_000, to: 26_000) == nil, "not rendered yet")
        render(cycles: 100..<2_200)  // 563,200 frames: 11.7 s
        #expect(source.shareHeard(from: 1_960, to: 6_760) == nil, "rendered 11.7 s ago")
        #expect(source.shareHeard(from: 500_000, to: 501_000) == 0)
    }

    /// A network slower than the delay: what comes after its time has been played is counted late and dropped, and
    /// what comes in time still lands where it was sung.
    @Test func whatComesTooLateIsCountedAndDropped() throws {
        // Queues of 150 ms on average (capped at 200) against a delay of 120 ms.
        let outcome = try Self.take(seconds: 10, ppm: 0, delay: 0.12, queueMean: 0.15, windows: [8])
        #expect(outcome.counters.late > 0, "\(outcome.counters)")
        #expect(outcome.counters.placed > 0)
    }
}
