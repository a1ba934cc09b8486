import AudioCore
import Foundation
import Testing

@testable import AudioDevices

/// The bridge between a device at one rate and a client at another, run without a device: device cycles whose
/// playback comes back as the next cycle's capture (a loopback one period long).
@Suite struct RateBridgeTests {
    /// Runs `cycles` device cycles of `period` frames; the client plays `play(clientFrame)` and its capture is
    /// returned, frame by frame in client time.
    static func loop(deviceRate: Double, clientRate: Double, period: Int, cycles: Int, quality: SampleRateConverter.Quality = .high, play: (Int) -> Float) throws -> (captured: [Float], bridge: RateBridge) {
        let bridge = try RateBridge(
            deviceRate: deviceRate, clientRate: clientRate, inputChannels: 1, outputChannels: 1, devicePeriod: period,
            clientMaximum: 4096, quality: quality)
        var deviceIn = PCMBuffer(channelCount: 1, capacity: period)
        let deviceOut = PCMBuffer(channelCount: 1, capacity: period)
        let clientOut = PCMBuffer(channelCount: 1, capacity: 4096)
        var captured: [Float] = []
        var clientFrame = 0
        for _ in 0..<cycles {
            bridge.capture(deviceIn.view(frames: period))
            // As the I/O unit runs it, with the same bound on client cycles.
            for _ in 0..<RateBridge.maximumClientCycles {
                let k = bridge.framesToRender(deviceFrames: period)
                if k == 0 { break }
                let input = bridge.takeCapture(k)
                for i in 0..<k { captured.append(input[0][i]) }
                let out = clientOut.view(frames: k)
                for i in 0..<k { out[0][i] = play(clientFrame + i) }
                clientFrame += k
                bridge.play(out)
            }
            bridge.takePlayback(into: deviceOut.view(frames: period))
            // Loopback: this cycle's playback is the next cycle's capture.
            let next = PCMBuffer(channelCount: 1, capacity: period)
            next.view(frames: period).copy(from: deviceOut.view(frames: period))
            deviceIn = next
        }
        return (captured, bridge)
    }

    @Test("A 1 kHz tone through 48 → 44.1 kHz playback, a loopback and 44.1 → 48 kHz capture comes back at 1 kHz")
    func toneRoundTrip() throws {
        let (captured, bridge) = try Self.loop(deviceRate: 44_100, clientRate: 48_000, period: 512, cycles: 1000) { n in
            Float(0.25 * sin(2 * Double.pi * 1_000 * Double(n) / 48_000))
        }
        let part = captured[48_000..<96_000]
        var crossings: [Double] = []
        var i = part.startIndex + 1
        while i < part.endIndex {
            if part[i - 1] < 0, part[i] >= 0 { crossings.append(Double(i - 1) + Double(-part[i - 1] / (part[i] - part[i - 1]))) }
            i += 1
        }
        let f = Double(crossings.count - 1) / (crossings.last! - crossings.first!) * 48_000
        #expect(abs(f - 1_000) < 0.01, "\(f) Hz")
        // No glitch anywhere once the tone runs: the second difference of a 0.25 sine at 1 kHz is at most 0.0043.
        var worst: Float = 0
        var at = 0
        for n in 10_000..<captured.count where abs(captured[n] - 2 * captured[n - 1] + captured[n - 2]) > worst {
            worst = abs(captured[n] - 2 * captured[n - 1] + captured[n - 2])
            at = n
        }
        #expect(worst < 0.006, "a glitch of \(worst) at client frame \(at) of \(captured.count)")
        #expect(bridge.shortfalls.load(ordering: .relaxed) == 0 && bridge.playShortfalls.load(ordering: .relaxed) == 0)
    }

    @Test("A click comes back one loopback period plus the reported latency later, within a millisecond")
    func latencyIsWhatItSays() throws {
        for quality in SampleRateConverter.Quality.allCases {
        for (deviceRate, clientRate, period) in [(44_100.0, 48_000.0, 512), (48_000, 44_100, 256), (96_000, 48_000, 1024), (44_100, 48_000, 64)] {
            let (captured, bridge) = try Self.loop(deviceRate: deviceRate, clientRate: clientRate, period: period, cycles: 200 * 512 / period, quality: quality) { n in
                n == 24_000 ? 0.9 : 0
            }
            let peak = captured.indices.max { abs(captured[$0]) < abs(captured[$1]) }!
            let expected = 24_000 + Double(period) * clientRate / deviceRate + (bridge.captureLatency + bridge.playLatency) * clientRate
            #expect(abs(Double(peak) - expected) <= clientRate / 1000, "\(deviceRate) → \(clientRate): \(peak) vs \(expected)")
        }
        }
    }
}
