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
}
