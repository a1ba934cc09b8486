import Foundation
import LiveAudio
import Testing
import TestSupport

let stereo = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
let mono = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 1)

/// Renders `unit` alone (fed by `inputs` players) for `frames` frames.
func render(_ unit: RenderUnit, inputs: [[[Float]]] = [], frames: Int, blockSizes: [Int] = [256]) throws -> [[Float]] {
    let graph = try RenderGraph(format: stereo, maximumFrames: 1024)
    let node = try graph.addNode(unit)
    for (bus, channels) in inputs.enumerated() {
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: channels), sampleRate: 48_000))
        try graph.connect(player, to: node, inputBus: bus)
    }
    try graph.connect(node, to: graph.output)
    return try renderOffline(graph, frames: frames, blockSizes: blockSizes)
}

@Suite struct GeneratorTests {
    @Test func toneIsTheAnalyticSine() throws {
        for (f, a) in [(440.0, 0.5), (1000.0, 0.25), (23_999.0, 1.0), (0.0, 1.0)] {
            let out = try render(ToneUnit(format: stereo, frequency: Float(f), amplitude: Float(a)), frames: 48_000)
            // Reference: a · sin(2π f n / fs); the phase is accumulated in Double, so the error stays at Float rounding.
            let reference = (0..<48_000).map { Float(a * sin(2 * Double.pi * f * Double($0) / 48_000)) }
            #expect(maxAbsDifference(out[0], reference) < 2e-5, "f = \(f)")
            #expect(out[0] == out[1])
        }
        #expect(throws: AudioError.self) { try ToneUnit(format: stereo, frequency: 30_000) }
        #expect(throws: AudioError.self) { try ToneUnit(format: stereo, amplitude: 1.5) }
    }

    @Test func noiseIsSeededWhiteAndUniform() throws {
        let frames = 200_000
        let a = try render(NoiseUnit(format: stereo, amplitude: 0.5, seed: 7), frames: frames)
        let b = try render(NoiseUnit(format: stereo, amplitude: 0.5, seed: 7), frames: frames, blockSizes: [1, 99, 1000])
        let c = try render(NoiseUnit(format: stereo, amplitude: 0.5, seed: 8), frames: frames)
        #expect(a == b, "same seed, same samples, whatever the block size")
        #expect(a[0] != c[0])
        for ch in a {
            let mean = ch.reduce(0, +) / Float(frames)
            let rms = (ch.reduce(0) { $0 + Double($1 * $1) } / Double(frames)).squareRoot()
            // Uniform on [−A, A): mean 0, RMS A/√3; standard error of the mean A/√(3N) ≈ 0.00065.
            #expect(abs(mean) < 0.004)
            #expect(abs(rms - 0.5 / 3.0.squareRoot()) < 0.003)
            #expect(ch.allSatisfy { abs($0) <= 0.5 })
            // White: lag-1 autocorrelation near 0 (standard error 1/√N ≈ 0.0022).
            var lag1 = 0.0
            for i in 1..<frames { lag1 += Double(ch[i] * ch[i - 1]) }
            #expect(abs(lag1 / Double(frames) / (rms * rms)) < 0.012)
        }
        var cross = 0.0
        for i in 0..<frames { cross += Double(a[0][i] * a[1][i]) }
        #expect(abs(cross / Double(frames) / (0.25 / 3)) < 0.012, "channels are independent")
    }
}

@Suite struct MixingTests {
    @Test func gainScalesByDecibels() throws {
        let input: [[Float]] = [(0..<4800).map { Float($0 % 100) / 100 - 0.5 }, (0..<4800).map { Float($0 % 37) / 37 }]
        let out = try render(GainUnit(format: stereo, gain: -6), inputs: [input], frames: 4800)
        let g = Float(pow(10, -6.0 / 20))
        for c in 0..<2 { #expect(maxAbsDifference(out[c], input[c].map { $0 * g }) < 1e-6) }
        #expect(throws: AudioError.self) { try GainUnit(format: stereo, gain: 30) }
    }

    @Test func mixerSumsWithVolumePanEnableAndMaster() throws {
        let mixer = try MixerUnit(format: stereo, inputs: 3)
        try mixer.setVolume(0.5, bus: 0)
        try mixer.setPan(-0.5, bus: 1)  // balance: left 1, right 0.5
        try mixer.setEnabled(false, bus: 2)
        try mixer.setMasterVolume(2)
        let a: [[Float]] = [Array(repeating: 0.1, count: 2000), Array(repeating: 0.2, count: 2000)]
        let b: [[Float]] = [Array(repeating: 0.05, count: 2000), Array(repeating: 0.08, count: 2000)]
        let c: [[Float]] = [Array(repeating: 0.9, count: 2000), Array(repeating: 0.9, count: 2000)]
        let out = try render(mixer, inputs: [a, b, c], frames: 2000)
        let left: Float = 2 * (0.5 * 0.1 + 1 * 0.05)
        let right: Float = 2 * (0.5 * 0.2 + 0.5 * 0.08)
        #expect(out[0].allSatisfy { abs($0 - left) < 1e-6 })
        #expect(out[1].allSatisfy { abs($0 - right) < 1e-6 })
        // Meters: each bus after volume/pan/enable, the master after master volume (constant signals: peak = RMS).
        let bus0 = mixer.meter(bus: 0)
        #expect(abs(bus0.peak - 0.1) < 1e-6)
        #expect(abs(bus0.rms - Float(((0.05 * 0.05 + 0.1 * 0.1) / 2).squareRoot())) < 1e-5)
        #expect(mixer.meter(bus: 2).peak == 0)
        let master = mixer.masterMeter.read()
        #expect(abs(master.peak - max(left, right)) < 1e-6)
        #expect(abs(master.rms - ((left * left + right * right) / 2).squareRoot()) < 1e-5)
        #expect(throws: AudioError.self) { try mixer.setPan(2, bus: 0) }
        #expect(throws: AudioError.self) { try mixer.setVolume(1, bus: 3) }
    }

    @Test func panZeroLeavesStereoUnchangedAndMetersSeeSines() throws {
        let mixer = try MixerUnit(format: stereo, inputs: 1)
        let l = (0..<48_000).map { 0.8 * Float(sin(2 * Double.pi * 1000 * Double($0) / 48_000)) }
        let r = (0..<48_000).map { 0.3 * Float(sin(2 * Double.pi * 250 * Double($0) / 48_000)) }
        let out = try render(mixer, inputs: [[l, r]], frames: 48_000)
        #expect(out[0] == l && out[1] == r)
        let reading = mixer.masterMeter.read()
        // A sine's RMS is its amplitude / √2; over both channels: √((0.8² + 0.3²) / 4).
        #expect(abs(reading.peak - 0.8) < 1e-3)
        #expect(abs(reading.rms - Float(((0.64 + 0.09) / 4).squareRoot())) < 1e-3)
    }

    @Test func disablingABusFadesInsteadOfClicking() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 256)
        let mixer = try MixerUnit(format: stereo, inputs: 1)
        let m = try graph.addNode(mixer)
        let player = try graph.addNode(
            BufferPlayerUnit(buffer: PCMBuffer(channels: [Array(repeating: 1, count: 100)]), sampleRate: 48_000, loop: true))
        try graph.connect(player, to: m)
        try graph.connect(m, to: graph.output)
        _ = try renderOffline(graph, frames: 512, blockSizes: [256])
        try mixer.setEnabled(false, bus: 0)
        let out = try renderOffline(graph, frames: 1024, blockSizes: [256])
        // The largest step is the ramp increment, 1/960 (20 ms at 48 kHz), up to Float rounding.
        for i in 1..<1024 { #expect(out[0][i - 1] - out[0][i] <= 1.0 / 960 * 1.01) }
        #expect(out[0][959] == 0 && out[0][1023] == 0)
    }
}

@Suite struct PlaybackTests {
    @Test func playerLoopsExactlyOrEnds() throws {
        let samples: [Float] = (0..<100).map { Float($0) }
        let looping = try render(
            BufferPlayerUnit(buffer: PCMBuffer(channels: [samples]), sampleRate: 48_000, loop: true), frames: 350, blockSizes: [33])
        #expect(looping[0] == (0..<350).map { Float($0 % 100) })
        let player = try BufferPlayerUnit(buffer: PCMBuffer(channels: [samples]), sampleRate: 48_000)
        #expect(!player.hasFinished)
        let once = try render(player, frames: 350, blockSizes: [64])
        #expect(once[0] == samples + Array(repeating: 0, count: 250))
        #expect(once[1] == once[0], "a mono player feeds both channels")
        #expect(player.hasFinished && player.totalFrames == 100)
        #expect(try player.property("loop") == .bool(false))
        try player.setProperty("loop", .bool(true))
        #expect(player.loops)
        #expect(throws: AudioError.self) { try player.setProperty("loop", .int(1)) }
        #expect(throws: AudioError.self) { try player.property("nonsense") }
    }

    @Test(arguments: [SampleType.int16, .int24, .int32, .float32])
    func fileSourceMatchesFFmpegsDecode(type: SampleType) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("in.wav")
        let codec = ["int16": "pcm_s16le", "int24": "pcm_s24le", "int32": "pcm_s32le", "float32": "pcm_f32le"][type.rawValue]!
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000:duration=3", "-ac", "2", "-c:a", codec, path])
        let reference = try FFmpeg.decode(path, channels: 2)
        let unit = try FileSourceUnit(path: path)
        #expect(unit.totalFrames == 144_000)
        // Render past the end: the file plays once, then silence, and the unit reports it has finished.
        let out = try render(unit, frames: 150_000, blockSizes: [1024, 77, 513])
        for c in 0..<2 {
            #expect(maxAbsDifference(Array(out[c].prefix(144_000)), reference[c]) == 0)
            #expect(out[c].suffix(6000).allSatisfy { $0 == 0 })
        }
        #expect(unit.hasFinished && unit.underruns == 0)
    }

    @Test func fileSourceReadAheadOnAWorkerThreadGivesTheSameAudio() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("in.wav")
        try FFmpeg.run(["-f", "lavfi", "-i", "anoisesrc=color=pink:sample_rate=48000:duration=4:seed=3", "-ac", "2", "-c:a", "pcm_f32le", path])
        let reference = try FFmpeg.decode(path, channels: 2)
        let unit = try FileSourceUnit(path: path)
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let node = try graph.addNode(unit)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let worker = try ReadAheadWorker(units: graph.readingAheadUnits)
        #expect(worker.units.count == 1)
        let renderer = OfflineRenderer(graph: graph, readAhead: worker)
        var out: [[Float]] = [[], []]
        let sizes = [4096, 1, 333, 1024, 4095]
        var k = 0
        while out[0].count < 200_000 {
            let view = try renderer.render(frames: sizes[k % sizes.count])
            for c in 0..<2 { out[c] += view[c] }
            k += 1
        }
        worker.stop()
        worker.stop()  // idempotent
        for c in 0..<2 {
            #expect(maxAbsDifference(Array(out[c].prefix(192_000)), reference[c]) == 0)
            #expect(out[c].dropFirst(192_000).allSatisfy { $0 == 0 })
        }
        #expect(unit.hasFinished && unit.underruns == 0 && worker.failure == nil)
    }

    @Test func fileAtAnotherRateIsAClearError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("cd.wav"), channels: [[0, 0.1, 0.2]], sampleRate: 44_100)
        let graph = try RenderGraph(format: stereo)
        do {
            let voice = try graph.addNode(FileSourceUnit(path: dir.file("cd.wav")), name: "voice")
            try graph.connect(voice, to: graph.output)
            Issue.record("a 44.1 kHz file was connected to a 48 kHz graph's output")
        } catch {
            #expect(error.code == .unsupportedSampleRate)
            #expect(error.message.contains("'voice'") && error.message.contains("44.1 kHz") && error.message.contains("48 kHz"))
        }
    }

    @Test func monoFileFeedsBothChannelsOfAStereoBus() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let samples = (0..<5000).map { Float($0 % 50) / 50 }
        try writeWAV(dir.file("mono.wav"), channels: [samples])
        let out = try render(FileSourceUnit(path: dir.file("mono.wav")), frames: 5000)
        #expect(out[0] == samples && out[1] == samples)
    }
}
