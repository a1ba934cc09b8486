import AudioCore
import AudioGraph
@testable import AudioUnits
import Foundation
import LiveAudio
import Testing
import TestSupport

/// The material the voice-processing tests run on, made once: near-end and far-end speech from espeak-ng (two
/// voices), far-end music (notes with harmonics and drum hits), rooms as impulse responses, all at 48 kHz.
enum VoiceMaterial {
    static let rate = 48_000.0

    /// espeak-ng's speech, resampled to 48 kHz by FFmpeg, scaled to `level` dBFS RMS over its voiced 10 ms frames.
    static func speech(voice: String, level: Double, text: String) throws -> [Float] {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let raw = dir.file("speech.wav")
        let r = try runProcess("espeak-ng", ["-v", voice, "-s", "150", "-w", raw, text])
        guard r.status == 0 else { throw FFmpegError(message: "espeak-ng failed: \(r.stderr)") }
        try FFmpeg.run(["-i", raw, "-ar", "48000", "-ac", "1", "-c:a", "pcm_f32le", dir.file("speech48.wav")])
        let x = try FFmpeg.decode(dir.file("speech48.wav"), channels: 1)[0]
        let scale = Float(pow(10, (level - activeLevel(x)) / 20))
        return x.map { $0 * scale }
    }

    /// dBFS RMS over the 10 ms frames within 40 dB of the loudest (the voiced ones).
    static func activeLevel(_ x: [Float], from: Int = 0, to: Int? = nil) -> Double {
        let frames = stride(from: from, to: (to ?? x.count) - 480, by: 480).map { i in
            x[i..<(i + 480)].reduce(0.0) { $0 + Double($1 * $1) } / 480
        }
        let loudest = frames.max() ?? 0
        let voiced = frames.filter { $0 > loudest * 1e-4 }
        return 10 * log10(voiced.reduce(0, +) / Double(max(voiced.count, 1)) + 1e-20)
    }

    static func power(_ x: ArraySlice<Float>) -> Double { x.reduce(0.0) { $0 + Double($1 * $1) } / Double(max(x.count, 1)) }

    /// Music: notes of three harmonics on a changing pitch, with drum hits (noise bursts), −20 dBFS RMS.
    static func music(seconds: Double, seed: UInt64) -> [Float] {
        var generator = SplitMix64(seed: seed)
        let n = Int(seconds * rate)
        var x = [Float](repeating: 0, count: n)
        var start = 0
        while start < n - 4_800 {
            let f = 110 * pow(2, Double(Int.random(in: 0...30, using: &generator)) / 12)
            let drum = Int.random(in: 0...3, using: &generator) == 0
            let length = min(Int.random(in: 6_000...18_000, using: &generator), n - start)
            for k in 0..<length {
                let t = Double(k) / rate
                let envelope = min(t / 0.01, 1) * exp(-t / (drum ? 0.05 : 0.3))
                let v = drum
                    ? Double.random(in: -1...1, using: &generator) * 0.4
                    : 0.2 * (sin(2 * .pi * f * t) + 0.5 * sin(4 * .pi * f * t) + 0.3 * sin(6 * .pi * f * t))
                x[start + k] += Float(v * envelope)
            }
            start += max(length / 2, 1)
        }
        let scale = Float(pow(10, (-20 - 10 * log10(power(x[...]))) / 20))
        return x.map { $0 * scale }
    }

    /// A room: silence for `delay` seconds, a direct path, then a tail of Gaussian noise decaying exponentially to
    /// −60 dB at `tail` seconds; its total energy gain `gain` dB (−6: the echo 6 dB under what is played).
    static func room(delay: Double, tail: Double, gain: Double = -6, seed: UInt64) -> [Float] {
        var generator = SplitMix64(seed: seed)
        let d = Int(delay * rate)
        let length = Int(tail * rate)
        var h = [Double](repeating: 0, count: d + length)
        let tau = tail / log(1000)  // amplitude e^(−t/τ) is −60 dB at `tail`
        for k in 0..<length {
            // Box–Muller.
            let u1 = max(Double(generator.next() >> 11) / Double(1 << 53), 1e-300)
            let u2 = Double(generator.next() >> 11) / Double(1 << 53)
            let g = (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
            h[d + k] = 0.3 * g * exp(-Double(k) / rate / tau)
        }
        h[d] += 1
        let energy = h.reduce(0) { $0 + $1 * $1 }
        let scale = pow(10, gain / 20) / energy.squareRoot()
        return h.map { Float($0 * scale) }
    }

    /// x convolved with h (overlap-add through the FFT), as long as x.
    static func convolve(_ x: [Float], _ h: [Float]) -> [Float] {
        var size = 1
        while size < 2 * h.count { size *= 2 }
        let block = size - h.count + 1
        let fft = FFT(size: size)
        let hr = UnsafeMutablePointer<Double>.allocate(capacity: size)
        let hi = UnsafeMutablePointer<Double>.allocate(capacity: size)
        let xr = UnsafeMutablePointer<Double>.allocate(capacity: size)
        let xi = UnsafeMutablePointer<Double>.allocate(capacity: size)
        defer { [hr, hi, xr, xi].forEach { $0.deallocate() } }
        hr.initialize(repeating: 0, count: size)
        hi.initialize(repeating: 0, count: size)
        for i in 0..<h.count { hr[i] = Double(h[i]) }
        fft.forward(hr, hi)
        var y = [Float](repeating: 0, count: x.count)
        var start = 0
        while start < x.count {
            let n = min(block, x.count - start)
            xr.initialize(repeating: 0, count: size)
            xi.initialize(repeating: 0, count: size)
            for i in 0..<n { xr[i] = Double(x[start + i]) }
            fft.forward(xr, xi)
            for k in 0..<size {
                let r = xr[k] * hr[k] - xi[k] * hi[k]
                let i = xr[k] * hi[k] + xi[k] * hr[k]
                xr[k] = r
                xi[k] = i
            }
            fft.inverse(xr, xi)
            for i in 0..<min(size, x.count - start) { y[start + i] += Float(xr[i]) }
            start += block
        }
        return y
    }

    /// What a microphone hears of `far` through a small loudspeaker (soft clipping) in `room`, with −65 dBFS of
    /// noise, plus `near` (the talker in front of it).
    static func microphone(far: [Float], room: [Float], near: [Float]? = nil, seed: UInt64 = 7) -> (mic: [Float], echo: [Float]) {
        let played = far.map { Float(tanh(1.5 * Double($0)) / 1.5) }
        let echo = convolve(played, room)
        var generator = SplitMix64(seed: seed)
        var mic = echo
        let noise = pow(10, -65.0 / 20) * 3.0.squareRoot()
        for i in 0..<mic.count {
            mic[i] += Float(Double.random(in: -1...1, using: &generator) * noise)
            if let near, i < near.count { mic[i] += near[i] }
        }
        return (mic, echo)
    }

    static let nearSpeech: [Float] = try! speech(
        voice: "en-us", level: -26,
        text: "The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore. "
            + "Peter Piper picked a peck of pickled peppers. How much wood would a woodchuck chuck.")
    static let farSpeech: [Float] = try! speech(
        voice: "en-gb+m3", level: -20,
        text: "Welcome to the karaoke night. Tonight we sing the songs you love, with the band behind you "
            + "and the crowd in front of you. Take the microphone and sing along with the music.")

    /// Far end: 20 s of music with speech over it from 6 s.
    static let farEnd: [Float] = {
        var x = music(seconds: 20, seed: 3)
        for i in 0..<min(farSpeech.count, x.count - 6 * 48_000) { x[6 * 48_000 + i] += farSpeech[i] }
        return x
    }()
}


@Suite(.serialized) struct VoiceProcessingTests {
    static let rate = VoiceMaterial.rate

    /// Runs a microphone and a reference through a voiceProcessing unit (as set up by `configure`) in blocks of
    /// `blockSizes` (cycled); returns the output with the unit's latency taken off, and the unit.
    static func process(
        mic: [Float], reference: [Float], blockSizes: [Int] = [480], configure: (VoiceProcessingUnit) throws -> Void = { _ in }
    ) throws -> (out: [Float], unit: VoiceProcessingUnit) {
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: 1)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let unit = try VoiceProcessingUnit(format: format)
        try configure(unit)
        let micNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [mic]), sampleRate: rate))
        let referenceNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [reference]), sampleRate: rate))
        let node = try graph.addNode(unit)
        try graph.connect(micNode, to: node, inputBus: 0)
        try graph.connect(referenceNode, to: node, inputBus: 1)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let latency = Int((unit.latency * rate).rounded())
        let out = try renderOffline(graph, frames: mic.count + latency, blockSizes: blockSizes)[0]
        return (Array(out[latency...]), unit)
    }

    /// ERLE over `range`: how much weaker the output is than the microphone, in dB.
    static func erle(mic: [Float], out: [Float], _ range: Range<Int>) -> Double {
        10 * log10(VoiceMaterial.power(mic[range]) / max(VoiceMaterial.power(out[range]), 1e-20))
    }

    @Test(
        "Single talk: the echo of music and speech through rooms with 10 … 300 ms of delay and 100 … 400 ms tails is cancelled by 25 dB or more after the first 2 s, and the unit finds the delay",
        arguments: [(0.010, 0.1), (0.050, 0.4), (0.150, 0.2), (0.300, 0.3)])
    func singleTalk(delay: Double, tail: Double) throws {
        let far = VoiceMaterial.farEnd
        let room = VoiceMaterial.room(delay: delay, tail: tail, seed: UInt64(delay * 1000))
        let (mic, _) = VoiceMaterial.microphone(far: far, room: room)
        let (out, unit) = try Self.process(mic: mic, reference: far)
        let erle = Self.erle(mic: mic, out: out, 2 * 48_000..<mic.count)
        print("voiceProcessing single talk, delay \(delay) s, tail \(tail) s: ERLE \(erle) dB, delay found \(unit.estimatedDelay) s, ERLE read-out \(unit.echoReturnLossEnhancement ?? .nan) dB")
        #expect(erle >= 25, "ERLE \(erle) dB")
        // The delay found: the direct path or a strong reflection just after it (the room's first 20 ms: the unit
        // gives the canceller the reference 40 ms ahead of what it finds, so that much later is harmless).
        #expect(unit.estimatedDelay >= delay - 0.002 && unit.estimatedDelay <= delay + 0.020, "found \(unit.estimatedDelay) s")
        // The unit's own read-out agrees with the test's measure within 6 dB (its window is the last second).
        let last = Self.erle(mic: mic, out: out, (mic.count - 48_000)..<mic.count)
        if let readOut = unit.echoReturnLossEnhancement {
            #expect(abs(readOut - last) <= 6 || (readOut > 40 && last > 40), "read-out \(readOut) dB, last second \(last) dB")
        } else {
            Issue.record("no ERLE read-out")
        }
    }

    @Test("Double talk: while a singer 6 dB over the echo and the music both sound, the near-end speech in the output stays within 6 dB of its level without echo and correlates with the clean near end at 0.8 or more")
    func doubleTalk() throws {
        let far = VoiceMaterial.farEnd
        let room = VoiceMaterial.room(delay: 0.050, tail: 0.2, seed: 50)
        // The near end at −20 dBFS while voiced: a singer close to the microphone, about 6 dB over the echo of the
        // −20 dBFS music through the −6 dB room.
        var near = [Float](repeating: 0, count: far.count)
        let nearStart = 4 * 48_000
        let gain = Float(pow(10, 6.0 / 20))
        for i in 0..<min(VoiceMaterial.nearSpeech.count, far.count - nearStart) { near[nearStart + i] = VoiceMaterial.nearSpeech[i] * gain }
        let (mic, _) = VoiceMaterial.microphone(far: far, room: room, near: near)
        let (out, _) = try Self.process(mic: mic, reference: far)
        // Without echo: the same near end (and noise) alone, through the same settings.
        let (alone, _) = VoiceMaterial.microphone(far: [Float](repeating: 0, count: far.count), room: room, near: near)
        let (outAlone, _) = try Self.process(mic: alone, reference: [Float](repeating: 0, count: far.count))
        // The 10 ms frames where the near end speaks (within 30 dB of its loudest).
        let frames = stride(from: nearStart, to: min(nearStart + VoiceMaterial.nearSpeech.count, out.count) - 480, by: 480)
        let loudest = frames.map { VoiceMaterial.power(near[$0..<($0 + 480)]) }.max() ?? 0
        let speaking = frames.filter { VoiceMaterial.power(near[$0..<($0 + 480)]) > loudest * 1e-3 }
        var nearPower = 0.0
        var outPower = 0.0
        var alonePower = 0.0
        var cross = 0.0
        for i in speaking {
            for k in i..<(i + 480) {
                nearPower += Double(near[k] * near[k])
                outPower += Double(out[k] * out[k])
                alonePower += Double(outAlone[k] * outAlone[k])
                cross += Double(near[k] * out[k])
            }
        }
        let level = 10 * log10(outPower / alonePower)
        let correlation = cross / (nearPower * outPower).squareRoot()
        print("voiceProcessing double talk: near end \(level) dB against its level without echo, correlation \(correlation)")
        #expect(abs(level) <= 6, "the near end comes out \(level) dB from its level without echo")
        #expect(correlation >= 0.8, "correlation \(correlation)")
    }

    @Test("Noise suppression (high): −40 dBFS of stationary noise under speech falls by 12 dB or more in the pauses, the speech level moves by less than 2 dB")
    func noiseSuppression() throws {
        let speech = VoiceMaterial.nearSpeech.map { $0 * Float(pow(10, 6.0 / 20)) }  // −20 dBFS while voiced
        let n = speech.count + 4 * 48_000
        var clean = [Float](repeating: 0, count: n)
        for i in 0..<speech.count { clean[2 * 48_000 + i] = speech[i] }
        var generator = SplitMix64(seed: 11)
        let noise = (0..<n).map { _ in Float(Double.random(in: -1...1, using: &generator) * pow(10, -40.0 / 20) * 3.0.squareRoot()) }
        let mic = zip(clean, noise).map { $0 + $1 }
        let (out, _) = try Self.process(mic: mic, reference: [Float](repeating: 0, count: n)) { unit in
            try unit.echoCancellation.set(0)
            try unit.gainControl.set(0)
            try unit.noiseSuppression.set(3)
        }
        // Pauses: 10 ms frames more than 100 ms from any voiced frame of the clean speech, after the first second.
        let frameCount = n / 480
        let voiced = (0..<frameCount).map { f in VoiceMaterial.power(clean[(f * 480)..<(f * 480 + 480)]) > 1e-5 }
        var pauseIn = 0.0
        var pauseOut = 0.0
        var speechIn = 0.0
        var speechOut = 0.0
        for f in 100..<frameCount {
            let range = (f * 480)..<(f * 480 + 480)
            let nearVoice = (max(0, f - 10)...min(frameCount - 1, f + 10)).contains { voiced[$0] }
            if !nearVoice {
                pauseIn += VoiceMaterial.power(mic[range])
                pauseOut += VoiceMaterial.power(out[range])
            } else if voiced[f] {
                speechIn += VoiceMaterial.power(mic[range])
                speechOut += VoiceMaterial.power(out[range])
            }
        }
        let reduction = 10 * log10(pauseIn / pauseOut)
        let change = 10 * log10(speechOut / speechIn)
        print("voiceProcessing noise suppression: \(reduction) dB less noise in pauses, speech \(change) dB")
        #expect(reduction >= 12, "noise reduced by \(reduction) dB")
        #expect(abs(change) < 2, "speech level changed by \(change) dB")
    }

    /// The level the gain control aims at, as the library defines `targetLevel`: the level its louder peaks reach —
    /// the 95th percentile of the 10 ms frames' peaks, over the frames that hold sound (peak above −60 dBFS).
    static func peakLevel(_ x: ArraySlice<Float>) -> Double {
        var peaks: [Double] = []
        var i = x.startIndex
        while i + 480 <= x.endIndex {
            let p = x[i..<(i + 480)].reduce(Float(0)) { max($0, abs($1)) }
            if p > 1e-3 { peaks.append(20 * log10(Double(p))) }
            i += 480
        }
        guard !peaks.isEmpty else { return -200 }
        peaks.sort()
        return peaks[Int(Double(peaks.count - 1) * 0.95)]
    }

    @Test(
        "Gain control (adaptiveDigital): speech at −40 dBFS comes out within 3 dB of the target after 3 s, and back at it within 3 s of jumping 20 dB louder",
        arguments: [-3.0, -9.0])
    func gainControl(target: Double) throws {
        let one = VoiceMaterial.nearSpeech
        let quiet = Float(pow(10, (-40 - VoiceMaterial.activeLevel(one)) / 20))
        var x: [Float] = []
        while x.count < 6 * 48_000 { x += one.map { $0 * quiet } }
        x = Array(x[0..<(6 * 48_000)])
        // At 6 s the singer comes 20 dB closer.
        var loud: [Float] = []
        while loud.count < 6 * 48_000 { loud += one.map { $0 * quiet * 10 } }
        x += loud[0..<(6 * 48_000)]
        let silence = [Float](repeating: 0, count: x.count)
        let (out, _) = try Self.process(mic: x, reference: silence) { unit in
            try unit.gainControl.set(1)
            try unit.targetLevel.set(Float(target))
        }
        let levels = (0..<12).map { s in Self.peakLevel(out[(s * 48_000)..<((s + 1) * 48_000)]) }
        print("voiceProcessing gain control, target \(target) dBFS: peaks by second \(levels.map { (($0 * 10).rounded() / 10) })")
        for s in [3, 4, 5, 9, 10, 11] {
            #expect(abs(levels[s] - target) <= 3, "second \(s): \(levels[s]) dBFS against \(target)")
        }
        // The input's own peaks were 22 dB under the target (and 2 dB under after the jump): the gain did that.
        #expect(Self.peakLevel(x[(3 * 48_000)..<(6 * 48_000)]) < target - 15)
        // The jump does not overshoot: the library's limiter holds the target while the gain comes down.
        for s in 6..<12 { #expect(levels[s] <= target + 3, "second \(s): \(levels[s]) dBFS") }
    }

    @Test("The reported latency is where the output lines up with the input, for every mode")
    func latencyIsMeasured() throws {
        // A 100 ms chirp at 0.5 s in 1.5 s of silence.
        let n = 72_000
        var x = [Float](repeating: 0, count: n)
        for t in 0..<4_800 {
            let time = Double(t) / Self.rate
            let w = 0.5 - 0.5 * cos(2 * Double.pi * Double(t) / 4_800)
            x[24_000 + t] = Float(0.3 * w * sin(2 * Double.pi * (300 * time + 13_500 * time * time)))
        }
        for (echo, noise, gain, highPass) in [(1, 2, 1, 1), (0, 0, 0, 1), (0, 0, 0, 0), (1, 0, 0, 0), (0, 3, 2, 1)] {
            let (out, _) = try Self.process(mic: x, reference: [Float](repeating: 0, count: n)) { unit in
                try unit.echoCancellation.set(Float(echo))
                try unit.noiseSuppression.set(Float(noise))
                try unit.gainControl.set(Float(gain))
                try unit.highPassFilter.set(Float(highPass))
                try unit.compressionGain.set(0)
            }
            // The output (latency already taken off) correlates best with the input at lag 0.
            func correlation(_ lag: Int) -> Double {
                var s = 0.0
                for t in 20_000..<30_000 { s += Double(x[t]) * Double(out[t + lag]) }
                return s
            }
            let best = (-200...200).max { correlation($0) < correlation($1) }!
            #expect(best == 0, "echo \(echo), noise \(noise), gain \(gain), high-pass \(highPass): the output lines up \(best) frames off")
        }
    }

    @Test("Any cycle size (1 … 4096, varying) gives the same output as 480-frame cycles")
    func cycleSizes() throws {
        let far = Array(VoiceMaterial.farEnd[0..<(6 * 48_000)])
        let (mic, _) = VoiceMaterial.microphone(far: far, room: VoiceMaterial.room(delay: 0.03, tail: 0.1, seed: 4))
        let (reference, _) = try Self.process(mic: mic, reference: far)
        for sizes in [[1, 7, 480, 4096, 333], [128], [1024, 17]] {
            let (out, _) = try Self.process(mic: mic, reference: far, blockSizes: sizes)
            #expect(out == reference, "cycles \(sizes): the output differs by up to \(maxAbsDifference(out, reference))")
        }
    }

    /// A 440 Hz tone at 0.3 through the unit while every mode switches, half a second apart and then two at a time
    /// 30 ms apart (a switch arriving while the last is still muted). A click is a step in the waveform: the second
    /// difference of a sine of amplitude A is at most A·ω² (0.0025 for A = 0.3 at 440 Hz, ten times that at the
    /// fixed-digital gain's 20 dB, which the limiter keeps under 1: 0.0084), where a step of s adds about s.
    @Test("Switching every mode while running does not click: no second difference above the signal's own")
    func switchingDoesNotClick() throws {
        let n = 9 * 48_000
        let tone = (0..<n).map { Float(0.3 * sin(2 * Double.pi * 440 * Double($0) / Self.rate)) }
        let format = try StreamFormat.graph(sampleRate: Self.rate, channelCount: 1)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let unit = try VoiceProcessingUnit(format: format)
        let micNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [tone]), sampleRate: Self.rate))
        let silence = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [[Float](repeating: 0, count: n)]), sampleRate: Self.rate))
        let node = try graph.addNode(unit)
        try graph.connect(micNode, to: node, inputBus: 0)
        try graph.connect(silence, to: node, inputBus: 1)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        var out: [Float] = []
        // (when, parameter, value): every mode, then pairs 30 ms apart.
        var changes: [(Int, Parameter, Float)] = []
        let singles: [(Parameter, Float)] = [
            (unit.echoCancellation, 0), (unit.noiseSuppression, 4), (unit.gainControl, 2), (unit.highPassFilter, 0),
            (unit.limiter, 0), (unit.compressionGain, 20), (unit.targetLevel, -10), (unit.suppressionLevel, 2),
            (unit.limiter, 1), (unit.gainControl, 0), (unit.noiseSuppression, 0), (unit.echoCancellation, 1),
        ]
        for (i, change) in singles.enumerated() { changes.append((48_000 + i * 24_000, change.0, change.1)) }
        changes.append((7 * 48_000, unit.noiseSuppression, 2))
        changes.append((7 * 48_000 + 1_440, unit.highPassFilter, 1))
        changes.append((7 * 48_000 + 24_000, unit.gainControl, 1))
        changes.append((7 * 48_000 + 24_000 + 1_440, unit.echoCancellation, 0))
        var k = 0
        while out.count < n {
            while k < changes.count, changes[k].0 <= out.count {
                try changes[k].1.set(changes[k].2)
                k += 1
            }
            out += try renderer.render(frames: 480)[0]
        }
        #expect(k == changes.count)
        var worst: Float = 0
        var at = 0
        for i in 2..<out.count where abs(out[i] - 2 * out[i - 1] + out[i - 2]) > worst {
            worst = abs(out[i] - 2 * out[i - 1] + out[i - 2])
            at = i
        }
        #expect(worst <= 0.02, "a step: second difference \(worst) at \(Double(at) / Self.rate) s")
    }

    @Test("Rates other than 8, 16, 32 and 48 kHz, more than two channels and unknown names are errors that say what to do")
    func errors() throws {
        #expect(throws: AudioError.self) { try VoiceProcessingUnit(format: try StreamFormat.graph(sampleRate: 44_100, channelCount: 1)) }
        do {
            _ = try VoiceProcessingUnit(format: try StreamFormat.graph(sampleRate: 44_100, channelCount: 1))
        } catch {
            #expect(error.code == .unsupportedSampleRate && error.message.contains("converter"), "\(error.message)")
        }
        do {
            _ = try VoiceProcessingUnit(format: try StreamFormat.graph(sampleRate: 48_000, channelCount: 3))
            Issue.record("three channels were taken")
        } catch {
            #expect(error.code == .invalidFormat && error.message.contains("1 or 2 channels"), "\(error.message)")
        }
        let json = """
            {"sampleRate": 48000, "channels": 1,
             "nodes": [{"id": "vp", "type": "voiceProcessing", "noiseSuppression": "loud"}],
             "connections": [{"from": "vp", "to": "output"}]}
            """
        do {
            _ = try GraphFile.load(json: json)
            Issue.record("an unknown name loaded")
        } catch {
            #expect(error.message.contains("noiseSuppression") && error.message.contains("veryHigh"), "\(error.message)")
        }
        let named = try GraphFile.load(
            json: """
                {"sampleRate": 16000, "channels": 1,
                 "nodes": [{"id": "vp", "type": "voiceProcessing", "noiseSuppression": "veryHigh", "gainControl": "fixedDigital",
                            "echoCancellation": false, "targetLevel": -9, "referenceDelay": 120}],
                 "connections": [{"from": "vp", "to": "output"}]}
                """)
        let unit = try #require(named.units["vp"] as? VoiceProcessingUnit)
        #expect(unit.noiseSuppression.value == 4 && unit.gainControl.value == 2 && unit.echoCancellation.value == 0)
        #expect(unit.targetLevel.value == -9 && unit.referenceDelay.value == 120)
    }

    /// A stereo microphone and a stereo accompaniment, the echo 150 ms late: centred (both channels the same) and
    /// panned hard right (its left channel silent). The delay is found from the channels' mean either way, and the
    /// echo is 25 dB down in both output channels for both. The library's far-end detection goes by absolute level:
    /// had the unit averaged the channels (as the library does with a stereo reference), the hard-panned one would
    /// reach it 6 dB down and be cancelled to 24 dB only; the unit sums them.
    @Test("Stereo: a stereo microphone against a centred and a hard-panned stereo reference, the echo 150 ms late", arguments: [false, true])
    func stereo(hardPanned: Bool) throws {
        let far = VoiceMaterial.farEnd
        let (mic, _) = VoiceMaterial.microphone(far: far, room: VoiceMaterial.room(delay: 0.15, tail: 0.2, seed: 15))
        let stereo = try StreamFormat.graph(sampleRate: Self.rate, channelCount: 2)
        let graph = try RenderGraph(format: stereo, maximumFrames: 4096)
        let unit = try VoiceProcessingUnit(format: stereo, referenceChannelCount: 2)
        let micNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [mic, mic.map { $0 * 0.8 }]), sampleRate: Self.rate))
        let left = hardPanned ? [Float](repeating: 0, count: far.count) : far
        let referenceNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [left, far]), sampleRate: Self.rate))
        let node = try graph.addNode(unit)
        try graph.connect(micNode, to: node, inputBus: 0)
        try graph.connect(referenceNode, to: node, inputBus: 1)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let latency = Int((unit.latency * Self.rate).rounded())
        let out = try renderOffline(graph, frames: far.count + latency, blockSizes: [512])
        #expect(unit.estimatedDelay >= 0.148 && unit.estimatedDelay <= 0.170, "found \(unit.estimatedDelay) s")
        for c in 0..<2 {
            let channel = Array(out[c][latency...])
            let input = c == 0 ? mic : mic.map { $0 * 0.8 }
            let erle = Self.erle(mic: input, out: channel, 2 * 48_000..<far.count)
            print("voiceProcessing stereo, \(hardPanned ? "hard-panned" : "centred") reference, channel \(c): ERLE \(erle) dB")
            #expect(erle >= 25, "channel \(c): ERLE \(erle) dB")
        }
    }

    /// Examples/graphs/clean-take.json, as a user runs it with `liveaudio render`: a take recorded with the accompaniment
    /// coming out of a speaker, and the accompaniment itself, next to the graph file; the rendered take has the echo
    /// 25 dB down after the first 2 s (the output file starts the unit's latency late).
    @Test("The example graph cleans a recorded take against its accompaniment")
    func exampleGraph() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let far = VoiceMaterial.farEnd
        let (mic, _) = VoiceMaterial.microphone(far: far, room: VoiceMaterial.room(delay: 0.08, tail: 0.25, seed: 80))
        try writeWAV(dir.file("take.wav"), channels: [mic])
        try writeWAV(dir.file("accompaniment.wav"), channels: [far])
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/clean-take.json").standardized.path
        try FileManager.default.copyItem(atPath: example, toPath: dir.file("clean-take.json"))
        let loaded = try GraphFile.load(path: dir.file("clean-take.json"))
        _ = try FileRenderer(loaded: loaded).render(to: dir.file("clean.wav"))
        let unit = try #require(loaded.units["clean"] as? VoiceProcessingUnit)
        let latency = Int((unit.latency * Self.rate).rounded())
        let out = Array(try FFmpeg.decode(dir.file("clean.wav"), channels: 1)[0].dropFirst(latency))
        let n = min(out.count, mic.count)
        let erle = Self.erle(mic: Array(mic[0..<n]), out: Array(out[0..<n]), 2 * 48_000..<n)
        #expect(erle >= 25, "ERLE \(erle) dB")
    }

    @Test("A 44.1 kHz graph runs the unit at 48 kHz between converters, as a graph file says: the echo 25 dB down")
    func otherRatesThroughConverters() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let far48 = VoiceMaterial.farEnd
        let (mic48, _) = VoiceMaterial.microphone(far: far48, room: VoiceMaterial.room(delay: 0.08, tail: 0.25, seed: 81))
        let mic = try SampleRateConverter.convert([mic48], from: 48_000, to: 44_100)[0]
        let far = try SampleRateConverter.convert([far48], from: 48_000, to: 44_100)[0]
        try writeWAV(dir.file("take.wav"), channels: [mic], sampleRate: 44_100)
        try writeWAV(dir.file("accompaniment.wav"), channels: [far], sampleRate: 44_100)
        let json = """
            {"sampleRate": 44100, "channels": 1,
             "nodes": [{"id": "take", "type": "file", "path": "take.wav"},
                       {"id": "accompaniment", "type": "file", "path": "accompaniment.wav"},
                       {"id": "takeUp", "type": "converter", "inputRate": 44100, "sampleRate": 48000},
                       {"id": "accompanimentUp", "type": "converter", "inputRate": 44100, "sampleRate": 48000},
                       {"id": "clean", "type": "voiceProcessing", "sampleRate": 48000, "gainControl": "off"},
                       {"id": "down", "type": "converter", "inputRate": 48000}],
             "connections": [{"from": "take", "to": "takeUp"}, {"from": "accompaniment", "to": "accompanimentUp"},
                             {"from": "takeUp", "to": "clean"}, {"from": "accompanimentUp", "to": "clean", "bus": 1},
                             {"from": "clean", "to": "down"}, {"from": "down", "to": "output"}]}
            """
        try json.write(toFile: dir.file("clean44.json"), atomically: true, encoding: .utf8)
        let loaded = try GraphFile.load(path: dir.file("clean44.json"))
        _ = try FileRenderer(loaded: loaded).render(to: dir.file("clean.wav"))
        let unit = try #require(loaded.units["clean"] as? VoiceProcessingUnit)
        #expect(unit.estimatedDelay >= 0.078 && unit.estimatedDelay <= 0.100, "found \(unit.estimatedDelay) s")
        let out = try FFmpeg.decode(dir.file("clean.wav"), channels: 1)[0]
        let n = min(out.count, mic.count)
        // Power after the first 2 s: the alignment (the unit's and the converters' latency) does not matter.
        let erle = Self.erle(mic: Array(mic[0..<n]), out: Array(out[0..<n]), 2 * 44_100..<n)
        print("voiceProcessing at 44.1 kHz through converters: ERLE \(erle) dB")
        #expect(erle >= 25, "ERLE \(erle) dB")
    }

    @Test("A prepared unit goes away with its graph: its worker thread does not keep it alive")
    func unitIsReleased() throws {
        weak var released: VoiceProcessingUnit?
        do {
            let format = try StreamFormat.graph(sampleRate: Self.rate, channelCount: 1)
            let graph = try RenderGraph(format: format, maximumFrames: 512)
            let unit = try VoiceProcessingUnit(format: format)
            released = unit
            try graph.connect(try graph.addNode(unit), to: graph.output)
            try graph.initialize()
            _ = try renderOffline(graph, frames: 4800)
        }
        #expect(released == nil, "the unit (and its worker) outlived its graph")
    }

    @Test("The FFT the delay estimate uses matches a direct DFT, and its inverse gives the signal back")
    func fftMatchesTheDefinition() {
        let n = 64
        var generator = SplitMix64(seed: 2)
        let xr = (0..<n).map { _ in Double.random(in: -1...1, using: &generator) }
        let xi = (0..<n).map { _ in Double.random(in: -1...1, using: &generator) }
        let re = UnsafeMutablePointer<Double>.allocate(capacity: n)
        let im = UnsafeMutablePointer<Double>.allocate(capacity: n)
        defer {
            re.deallocate()
            im.deallocate()
        }
        re.initialize(from: xr, count: n)
        im.initialize(from: xi, count: n)
        let fft = FFT(size: n)
        fft.forward(re, im)
        var worst = 0.0
        for k in 0..<n {
            var sr = 0.0
            var si = 0.0
            for t in 0..<n {
                let a = -2 * Double.pi * Double(k * t) / Double(n)
                sr += xr[t] * cos(a) - xi[t] * sin(a)
                si += xr[t] * sin(a) + xi[t] * cos(a)
            }
            worst = max(worst, abs(sr - re[k]), abs(si - im[k]))
        }
        #expect(worst < 1e-12, "differs from the DFT by \(worst)")
        fft.inverse(re, im)
        let back = (0..<n).map { max(abs(re[$0] - xr[$0]), abs(im[$0] - xi[$0])) }.max()!
        #expect(back < 1e-14, "round trip off by \(back)")
    }
}

/// The unit on a real-time schedule: paced like a device, so it runs with the serialized real-time suites.
@Suite(.serialized) struct VoiceProcessingRealTimeTests {
    /// A voiceProcessing unit in `graph` between players of `mic` (bus 0) and `reference` (bus 1), feeding the
    /// output; the graph initialized.
    static func unitBetween(mic: [Float], reference: [Float], in graph: RenderGraph) throws -> VoiceProcessingUnit {
        let unit = try VoiceProcessingUnit(format: graph.format)
        let micNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [mic]), sampleRate: VoiceMaterial.rate))
        let referenceNode = try graph.addNode(try BufferPlayerUnit(buffer: PCMBuffer(channels: [reference]), sampleRate: VoiceMaterial.rate))
        let node = try graph.addNode(unit)
        try graph.connect(micNode, to: node, inputBus: 0)
        try graph.connect(referenceNode, to: node, inputBus: 1)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        return unit
    }

    @Test("In real time the library runs on the unit's worker and the render thread never waits: the output is the offline output, a cycle and half a 10 ms frame later, with nothing late")
    func realTimeWorker() throws {
        let far = Array(VoiceMaterial.farEnd[0..<(3 * 48_000)])
        let (mic, _) = VoiceMaterial.microphone(far: far, room: VoiceMaterial.room(delay: 0.03, tail: 0.1, seed: 4))
        let (offline, _) = try VoiceProcessingTests.process(mic: mic, reference: far)
        // The same through a graph told it renders real-time cycles of up to 2048 frames, rendered 1024 frames at a
        // time with 21.3 ms between cycles, as a device would: the worker has a cycle and more for each frame, even
        // on a loaded machine.
        let format = try StreamFormat.graph(sampleRate: VoiceMaterial.rate, channelCount: 1)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        graph.willRender(.realTime(maximumCycleFrames: 2048))
        // Added after the graph was told: told as it is added.
        let unit = try Self.unitBetween(mic: mic, reference: far, in: graph)
        let latency = Int((unit.latency * VoiceMaterial.rate).rounded())
        #expect(latency == 1150 + 2048 + 240, "\(latency) frames")
        // The offline renderer says "no deadline"; this test plays a device, so it says real time again after it.
        let renderer = OfflineRenderer(graph: graph)
        graph.willRender(.realTime(maximumCycleFrames: 2048))
        #expect(Int((unit.latency * VoiceMaterial.rate).rounded()) == latency)
        var out: [Float] = []
        var longest: UInt64 = 0
        while out.count < mic.count + latency {
            let began = monotonicNanoseconds()
            out += try renderer.render(frames: 1024)[0]
            longest = max(longest, monotonicNanoseconds() - began)
            usleep(21_333)
        }
        #expect(unit.workerShortfalls == 0, "\(unit.workerShortfalls) frames late")
        let aligned = Array(out[latency..<(latency + mic.count)])
        #expect(aligned == offline, "the real-time output differs from the offline one")
        print("voiceProcessing in real time: longest cycle \(Double(longest) / 1e6) ms for 21.3 ms of audio")
    }


    @Test("A worker that falls behind in real time: the render thread still never waits, the late frames come out as silence and are counted, and the output is back in line with the offline one once the worker catches up")
    func lateWorker() throws {
        let far = Array(VoiceMaterial.farEnd[0..<(4 * 48_000)])
        let (mic, _) = VoiceMaterial.microphone(far: far, room: VoiceMaterial.room(delay: 0.03, tail: 0.1, seed: 4))
        let (offline, _) = try VoiceProcessingTests.process(mic: mic, reference: far)
        let format = try StreamFormat.graph(sampleRate: VoiceMaterial.rate, channelCount: 1)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let unit = try Self.unitBetween(mic: mic, reference: far, in: graph)
        let renderer = OfflineRenderer(graph: graph)
        // Real time after the offline renderer's "no deadline": cycles of up to 2048 frames, rendered 1024 at a time.
        graph.willRender(.realTime(maximumCycleFrames: 2048))
        let latency = Int((unit.latency * VoiceMaterial.rate).rounded())
        var out: [Float] = []
        var longest: UInt64 = 0
        while out.count < mic.count + latency {
            // From 1 s to 1.5 s the worker takes 30 ms over each 10 ms frame.
            let t = Double(out.count) / 48_000
            unit.workerDelayForTesting.store(t >= 1 && t < 1.5 ? 30_000 : 0, ordering: .relaxed)
            let began = monotonicNanoseconds()
            out += try renderer.render(frames: 1024)[0]
            longest = max(longest, monotonicNanoseconds() - began)
            usleep(21_333)
        }
        print("voiceProcessing, a worker behind: \(unit.workerShortfalls) frames late, longest cycle \(Double(longest) / 1e6) ms")
        #expect(unit.workerShortfalls > 0, "the worker fell behind")
        // Never waited: no cycle took the 30 ms the worker spent on each frame.
        #expect(longest < 25_000_000, "longest cycle \(Double(longest) / 1e6) ms")
        // The last second: the same as offline, sample for sample.
        let tail = (mic.count - 48_000)..<mic.count
        #expect(Array(out[(tail.lowerBound + latency)..<(tail.upperBound + latency)]) == Array(offline[tail]), "out of line after the worker caught up")
    }
}
