import AudioCore
import Foundation
import Testing

@testable import AudioDevices

/// Capture on one clock, playback on another: the bridge resamples the capture to follow the drift, without a
/// device (the cycles are simulated frame-exactly).
@Suite struct DriftBridgeTests {
    /// Runs `seconds` of 256-frame playback cycles while the capture clock runs `ratio` times as fast, the capture
    /// a 1 kHz tone on its own clock. Returns what the playback clock got, and the bridge.
    static func run(ratio: Double, seconds: Double, keepFrom: Int) throws -> (out: [Float], bridge: DriftBridge, levels: [Int]) {
        let period = 256
        let bridge = try DriftBridge(sampleRate: 48_000, channelCount: 1, period: period, maximumCycle: period)
        let capture = PCMBuffer(channelCount: 1, capacity: 2 * period)
        var due = 0.0
        var captured = 0
        var out: [Float] = []
        var levels: [Int] = []
        let cycles = Int(seconds * 48_000) / period
        for k in 0..<cycles {
            due += Double(period) * ratio
            let n = Int(due) - captured
            let view = capture.view(frames: n)
            for i in 0..<n { view[0][i] = Float(0.25 * sin(2 * Double.pi * 1_000 * Double(captured + i) / 48_000)) }
            captured += n
            bridge.push(view)
            let got = bridge.pull(frames: period)
            if k * period >= keepFrom { for i in 0..<period { out.append(got[0][i]) } }
            levels.append(bridge.level)
        }
        return (out, bridge, levels)
    }

    @Test(
        "A capture clock 0.1 % fast (for an hour) or slow against the playback: the bridge settles on the drift, holds its level, never runs dry or over, and the tone comes out at its frequency on the playback clock, without a glitch",
        arguments: [(1.001, 3600.0), (0.999, 180), (1.0002, 180)])
    func tracksTheDrift(ratio: Double, seconds: Double) throws {
        let (out, bridge, levels) = try Self.run(ratio: ratio, seconds: seconds, keepFrom: Int(seconds - 60) * 48_000)
        #expect(bridge.underruns.load(ordering: .relaxed) == 0 && bridge.overflows.load(ordering: .relaxed) == 0)
        #expect(abs(bridge.correction - ratio) < 2e-5, "tracked \(bridge.correction), the clocks differ by \(ratio)")
        // After a minute the level stays within a period of the target.
        let settled = levels[(60 * 48_000 / 256)...]
        let worst = settled.map { abs($0 - bridge.target) }.max() ?? 0
        #expect(worst <= bridge.period, "the level strayed \(worst) frames from \(bridge.target)")
        // The tone: 1 kHz on the capture clock is 1 kHz × ratio on the playback clock.
        var crossings: [Double] = []
        for i in 1..<out.count where out[i - 1] < 0 && out[i] >= 0 {
            crossings.append(Double(i - 1) + Double(-out[i - 1] / (out[i] - out[i - 1])))
        }
        let f = Double(crossings.count - 1) / (crossings.last! - crossings.first!) * 48_000
        #expect(abs(f - 1_000 * ratio) < 0.01, "\(f) Hz, expected \(1_000 * ratio)")
        var step: Float = 0
        for i in 2..<out.count { step = max(step, abs(out[i] - 2 * out[i - 1] + out[i - 2])) }
        #expect(step < 0.006, "a glitch: second difference \(step) (a clean 0.25 tone at 1 kHz: 0.0043)")
    }

    /// The latency the bridge reports is the delay a signal sees: with both clocks equal, a 300 Hz … 3 kHz chirp
    /// pushed and pulled a period at a time (capture starts at once) correlates best with the input
    /// `latencyFrames` earlier, to the nearest frame (the peak, interpolated between its neighbours, is within half
    /// a frame: libsoxr's delay is fractional). The FIFO's target (two periods, at least 1024 frames) is its floor.
    @Test(arguments: [256, 960]) func reportedLatencyIsTheDelay(period: Int) throws {
        let bridge = try DriftBridge(sampleRate: 48_000, channelCount: 1, period: period, maximumCycle: period)
        let latency = bridge.latencyFrames
        #expect(latency >= bridge.target && latency < bridge.target + 480, "\(latency) frames")
        let n = 48_000
        let chirp = (0..<n).map { i -> Float in
            let t = Double(i) / 48_000
            return Float(0.5 * sin(2 * Double.pi * (300 + 1_350 * t) * t))
        }
        let buffer = PCMBuffer(channelCount: 1, capacity: period)
        var out: [Float] = []
        for start in stride(from: 0, to: n - period, by: period) {
            let view = buffer.view(frames: period)
            for i in 0..<period { view[0][i] = chirp[start + i] }
            bridge.push(view)
            out.append(contentsOf: bridge.pull(frames: period)[0])
        }
        func correlation(_ lag: Int) -> Double {
            var sum = 0.0
            for i in (lag + 2_400)..<(out.count - 2_400) { sum += Double(out[i]) * Double(chirp[i - lag]) }
            return sum
        }
        let (before, at, after) = (correlation(latency - 1), correlation(latency), correlation(latency + 1))
        let offset = 0.5 * (before - after) / (before - 2 * at + after)
        #expect(at > before && at > after && abs(offset) <= 0.5, "peak at \(latency) + \(offset)")
    }

    /// Runs 256-frame playback cycles with the capture clock `ratio` times as fast for 60 s (the loop settles),
    /// then one side stops for `gap` seconds, then 20 s more. `captureStops`: the capture delivers nothing for the
    /// gap (a capture xrun and restart: its frames are lost) while playback goes on; otherwise playback stops (no
    /// cycles) and the capture that piled up arrives in one push at the next cycle, as the two-clock loop reads it,
    /// with the bridge told of the gap (`told`, as the I/O unit does from the sample time) or not.
    /// Returns the level and the correction after the gap, cycle by cycle.
    static func interrupted(
        ratio: Double, gap: Double, captureStops: Bool, told: Bool = true, captureLate: Bool = false, period: Int = 256
    ) throws -> (bridge: DriftBridge, levels: [Int], corrections: [Double]) {
        let bridge = try DriftBridge(sampleRate: 48_000, channelCount: 1, period: period, maximumCycle: period)
        let capture = PCMBuffer(channelCount: 1, capacity: Int(gap * 48_000 * ratio) + 2 * period)
        var due = 0.0
        var captured = 0
        var piled = 0
        var levels: [Int] = []
        var corrections: [Double] = []
        let before = 60 * 48_000 / period
        let gapCycles = Int(gap * 48_000) / period
        for k in 0..<(before + gapCycles + 20 * 48_000 / period) {
            due += Double(period) * ratio
            let n = Int(due) - captured
            captured += n
            let stopped = k >= before && k < before + gapCycles
            if stopped && !captureStops {
                piled += n
                continue
            }
            if stopped && captureLate {
                // Capture held back (a late sound server): nothing now, all of it when it comes.
                piled += n
            }
            let frames = stopped ? 0 : n + piled
            if !stopped { piled = 0 }
            let view = capture.view(frames: frames)
            view.clear()
            bridge.push(view)
            _ = bridge.pull(frames: period, resync: told && !captureStops && k == before + gapCycles)
            if k >= before + gapCycles {
                levels.append(bridge.level)
                corrections.append(bridge.correction)
            }
        }
        return (bridge, levels, corrections)
    }

    /// After either side stops for a while, the bridge puts its level back on the target at once and its
    /// correction stays on the drift it had learnt. Without that, a capture restart leaves the FIFO near empty —
    /// four periods under the target, which the loop's proportional term alone answers with a 0.8 % correction,
    /// winding up its integral while the level refills — and a playback stall leaves the capture that piled up as
    /// latency for as long as the loop takes to drain it at a fraction of a percent.
    @Test(
        "A capture restart (0.3 s lost), capture held back 0.2 s and then delivered, and a playback stall (0.2 s, the bridge told of the gap or not) on two clocks: the level is back on its target at once and the correction stays on the drift",
        arguments: ["capture", "capture, late", "playback", "playback, untold"], [32, 128, 256, 1024])
    func recentresAfterOneSideStops(side: String, period: Int) throws {
        let ratio = 1.001
        let captureStops = side.hasPrefix("capture")
        let (bridge, levels, corrections) = try Self.interrupted(
            ratio: ratio, gap: side == "capture" ? 0.3 : 0.2, captureStops: captureStops, told: side == "playback",
            captureLate: side == "capture, late", period: period)
        #expect(bridge.recentres.load(ordering: .relaxed) >= 1)
        #expect(bridge.overflows.load(ordering: .relaxed) == 0)
        // From the first cycle after the gap, the level stays within a period of the target…
        let worst = levels.map { abs($0 - bridge.target) }.max() ?? 0
        #expect(worst <= bridge.period, "the level strayed \(worst) frames from \(bridge.target) after the gap")
        // …and the correction within 1e-4 of the drift (0.1 %); an integral wound up by the gap would be off by
        // several times that for seconds.
        let off = corrections.map { abs($0 - ratio) }.max() ?? 1
        #expect(off < 1e-4, "the correction moved \(off) off the drift after the gap")
    }

    /// The loop's step response through the bridge itself: made on one clock (correction 1, the FIFO on its
    /// target), it sees the capture clock run `ratio` times as fast from its first cycle, `period`-frame cycles
    /// frame-exact as in ``run(ratio:seconds:keepFrom:)``. Returns the settling time — when the correction last
    /// stood more than 5 % of the step away from the ratio — and the overshoot, in parts of the step.
    static func stepResponse(period: Int, ratio: Double = 1.001, seconds: Double = 90) throws
        -> (settling: Double, overshoot: Double)
    {
        let bridge = try DriftBridge(sampleRate: 48_000, channelCount: 1, period: period, maximumCycle: period)
        let capture = PCMBuffer(channelCount: 1, capacity: 2 * period)
        let step = ratio - 1
        var due = 0.0
        var captured = 0
        var lastOutside = 0
        var peak = 1.0
        for k in 0..<(Int(seconds * 48_000) / period) {
            due += Double(period) * ratio
            let n = Int(due) - captured
            captured += n
            let view = capture.view(frames: n)
            view.clear()
            bridge.push(view)
            _ = bridge.pull(frames: period)
            let correction = bridge.correction
            peak = max(peak, correction)
            if abs(correction - ratio) > 0.05 * step { lastOutside = k + 1 }
        }
        return (Double(lastOutside * period) / 48_000, (peak - ratio) / step)
    }

    /// The loop's gains are per second: a 0.1 % step in the clock ratio is taken up in the same time, with the same
    /// overshoot, at 32, 128 and 1024-frame cycles (0.67 … 21 ms). The design's continuous-time loop (a filter of
    /// time constant τ and a PI correction, poles at ω = 0.2625 rad/s, ζ = 0.5 and p = 0.0875/s) reaches 5 % of the
    /// step for good after 23.1 s, with a 37 % overshoot; the per-cycle loop comes within a few percent of it at
    /// every period. (A loop scaled to the period settled eleven times as slowly at 1024 frames as at 32.)
    @Test func settlesTheSameWayAtEveryPeriod() throws {
        let periods = [32, 128, 1024]
        let responses = try periods.map { try Self.stepResponse(period: $0) }
        let times = responses.map(\.settling)
        let report = zip(periods, responses).map { "\($0): \($1.settling) s, overshoot \($1.overshoot)" }
        #expect(times.allSatisfy { $0 > 23.1 * 0.9 && $0 < 23.1 * 1.1 }, "\(report)")
        #expect(times.max()! <= 1.2 * times.min()!, "\(report)")
        #expect(responses.allSatisfy { abs($0.overshoot - 0.37) < 0.05 }, "\(report)")
    }

    /// Two clocks or one: asked for, or decided from the ALSA cards the PCMs are on (-1: no card, a server's PCM).
    @Test func clocksAreDecidedFromTheCards() {
        #expect(DeviceClocks.automatic.independent(inputCard: 1, outputCard: 0))
        #expect(!DeviceClocks.automatic.independent(inputCard: 0, outputCard: 0))
        #expect(!DeviceClocks.automatic.independent(inputCard: -1, outputCard: -1))
        #expect(!DeviceClocks.automatic.independent(inputCard: -1, outputCard: 0))
        #expect(DeviceClocks.two.independent(inputCard: -1, outputCard: -1))
        #expect(!DeviceClocks.one.independent(inputCard: 1, outputCard: 0))
    }
}
