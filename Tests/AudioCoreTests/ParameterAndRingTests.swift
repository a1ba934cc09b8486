import AudioCore
import Foundation
import Testing

@Suite struct ParameterTests {
    @Test func rangeErrorsNameUnitParameterAndRange() {
        let p = Parameter(ParameterSpec("gain", name: "Gain", range: -96...24, unit: .decibels, default: 0), owner: "gain")
        #expect(p.value == 0)
        do {
            try p.set(40)
            Issue.record("out-of-range value accepted")
        } catch {
            #expect(error.code == .invalidParameter)
            #expect(error.message == "gain: parameter 'gain' = 40 dB is out of range -96 dB … 24 dB")
        }
        #expect(throws: AudioError.self) { try p.set(.nan) }
        #expect(p.value == 0, "a rejected value leaves the parameter unchanged")
        #expect(throws: Never.self) { try p.set(-12) }
        #expect(p.value == -12)
    }

    @Test func smoothedValueRampsLinearlyAndLandsExactly() {
        var s = SmoothedValue(0, rampFrames: 4)
        s.setTarget(1)
        #expect([s.next(), s.next(), s.next(), s.next(), s.next()] == [0.25, 0.5, 0.75, 1, 1])
        #expect(!s.isRamping)
        // Retargeting mid-ramp continues from where the ramp is.
        s.setTarget(0)
        _ = s.next()
        s.setTarget(2)
        let values = (0..<4).map { _ in s.next() }
        #expect(abs(values[0] - (0.75 + (2 - 0.75) / 4)) < 1e-6)
        #expect(values[3] == 2)
        var instant = SmoothedValue(3, rampFrames: 0)
        instant.setTarget(5)
        #expect(instant.next() == 5)
    }

    @Test func decibels() {
        #expect(abs(decibelsToGain(-6.0206) - 0.5) < 1e-5)
        #expect(decibelsToGain(0) == 1)
        #expect(decibelsToGain(-200) == 0)
        #expect(abs(gainToDecibels(0.1) + 20) < 1e-5)
    }
}

@Suite struct RingBufferTests {
    @Test func wrapsAroundAndReportsFullAndEmpty() {
        let ring = FrameRingBuffer(channelCount: 2, capacity: 10)
        let input = PCMBuffer(channels: [(0..<7).map(Float.init), (0..<7).map { -Float($0) }])
        #expect(ring.write(input.view) == 7)
        #expect(ring.write(input.view) == 3, "only 3 frames fit")
        #expect(ring.availableToWrite == 0)
        let out = PCMBuffer(channelCount: 2, capacity: 10)
        #expect(ring.read(into: out.view(frames: 6)) == 6)
        #expect(Array(out.view(frames: 6)[0]) == [0, 1, 2, 3, 4, 5])
        #expect(ring.write(input.view) == 6)  // wraps
        #expect(ring.read(into: out.view(frames: 10)) == 10)
        #expect(Array(out.view(frames: 10)[0]) == [6, 0, 1, 2, 0, 1, 2, 3, 4, 5])
        #expect(Array(out.view(frames: 10)[1]) == [-6, 0, -1, -2, 0, -1, -2, -3, -4, -5])
        #expect(ring.read(into: out.view(frames: 10)) == 0, "empty ring gives nothing")
    }

    @Test func producerAndConsumerThreadsKeepEveryFrameInOrder() async {
        let ring = FrameRingBuffer(channelCount: 1, capacity: 257)
        let total = 300_000
        let producer = Thread {
            let block = PCMBuffer(channelCount: 1, capacity: 100)
            var next = 0
            while next < total {
                let n = min(100, total - next)
                for i in 0..<n { block.view(frames: n)[0][i] = Float(next + i) }
                var offset = 0
                while offset < n { offset += ring.write(block.view(frames: n).slice(from: offset, frames: n - offset)) }
                next += n
            }
        }
        producer.start()
        let out = PCMBuffer(channelCount: 1, capacity: 64)
        var expected = 0
        var mismatches = 0
        while expected < total {
            let got = ring.read(into: out.view(frames: 64))
            for i in 0..<got where out.view(frames: got)[0][i] != Float(expected + i) { mismatches += 1 }
            expected += got
        }
        #expect(mismatches == 0)
        #expect(expected == total)
    }
}
