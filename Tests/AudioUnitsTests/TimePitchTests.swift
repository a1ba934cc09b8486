import AudioCore
import AudioGraph
@testable import AudioUnits
import Foundation
import LiveAudio
import Testing
import TestSupport

/// A source that behaves as a live input does when pulled: frames arrive one cycle at a time (``arrive(_:)``),
/// and a pull for more than has arrived gets the rest as silence, the signal coming later (the underrun delays it,
/// as a capture FIFO running dry does).
final class ArrivingSource: RenderUnit {
    let core: UnitCore
    let signal: [Float]
    /// Offline: the test arrives frames between renders on the one thread that renders.
    private let counts = RenderThreadBound((arrived: 0, read: 0))
    init(signal: [Float]) throws {
        self.signal = signal
        core = UnitCore(kind: "arriving", inputs: [], outputs: [try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)])
    }
    func arrive(_ frames: Int) { counts.whileStopped.arrived += frames }
    func render(_ context: RenderContext) {
        let y = context.output(0)[0]
        for i in 0..<context.frameCount {
            let read = counts.onRenderThread.read
            if read < counts.onRenderThread.arrived {
                y[i] = read < signal.count ? signal[read] : 0
                counts.onRenderThread.read += 1
            } else {
                y[i] = 0
            }
        }
    }
}

@Suite("The timePitch unit (librubberband, real-time)")
struct TimePitchTests {
    static let rate = 48_000.0
    static let mono = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 1)

    /// The frequency of a steady tone from its upward zero crossings (interpolated), over `x`.
    static func frequency(_ x: ArraySlice<Float>) -> Double {
        var first: Double?
        var last = 0.0
        var count = 0
        var i = x.startIndex + 1
        while i < x.endIndex {
            if x[i - 1] < 0, x[i] >= 0 {
                let t = Double(i - 1) + Double(-x[i - 1] / (x[i] - x[i - 1]))
                if first == nil { first = t } else { count += 1 }
                last = t
            }
            i += 1
        }
        guard let first, count > 0 else { return 0 }
        return Double(count) / (last - first) * rate
    }

    /// A graph: `source` → timePitch → output (mono).
    static func graph(_ source: RenderUnit, _ unit: TimePitchUnit, maximumFrames: Int = 4096) throws -> RenderGraph {
        let graph = try RenderGraph(format: mono, maximumFrames: maximumFrames)
        let s = try graph.addNode(source, name: "source")
        let t = try graph.addNode(unit, name: "timePitch")
        try graph.connect(s, to: t)
        try graph.connect(t, to: graph.output)
        return graph
    }

    @Test(
        "A 440 Hz tone shifted +300 cents measures 523.25 Hz within 1 cent (both engines; other shifts with the default engine)",
        // The faster (R2) engine misses other shifts of a pure tone by up to ~40 cents in real-time mode (+700:
        // −7 cents, −500: +25 cents, −1200: −24 cents, measured with the library alone): documented, and held to
        // that.
        arguments: [
            (TimePitchUnit.Quality.finer, 300.0, 1.0), (.faster, 300, 1), (.faster, 700, 40), (.faster, -500, 40), (.finer, -1200, 1),
            (.finer, 700, 1), (.finer, -500, 1), (.finer, 2400, 1), (.finer, -2400, 1),
        ])
    func pitchShift(quality: TimePitchUnit.Quality, cents: Double, tolerance: Double) throws {
        let unit = try TimePitchUnit(format: Self.mono, quality: quality)
        try unit.pitch.set(Float(cents))
        let graph = try Self.graph(ToneUnit(format: Self.mono, frequency: 440, amplitude: 0.5), unit)
        let out = try renderOffline(graph, frames: 144_000, blockSizes: [256])[0]
        let expected = 440 * pow(2, cents / 1200)
        let measured = Self.frequency(out[48_000..<144_000])
        let error = 1200 * log2(measured / expected)
        #expect(abs(error) < tolerance, "\(quality) \(cents) cents: \(measured) Hz, expected \(expected) Hz (\(error) cents)")
        // The rate stays 1: the tone's level holds (no gaps, no doubling).
        let rms = (out[48_000..<144_000].reduce(0) { $0 + Double($1 * $1) } / 96_000).squareRoot()
        #expect(abs(20 * log10(rms / (0.5 / 2.0.squareRoot()))) < 1, "level \(rms)")
    }

    /// A 150 Hz voice-like tone whose harmonics follow one formant (a Gaussian envelope at 1 kHz), shifted up a
    /// fifth (+700 cents): the amplitude-weighted mean frequency of the output's harmonics — where the formant
    /// sits — moves up by the fifth (to about 1.5 kHz) with formants shifted, and stays near 1 kHz with formants
    /// preserved.
    @Test("Formant preservation keeps a formant where it was; without it the formant moves with the pitch", arguments: TimePitchUnit.Quality.allCases)
    func formants(quality: TimePitchUnit.Quality) throws {
        let f0 = 150.0
        let n = 144_000
        var voice = [Float](repeating: 0, count: n)
        for k in 1...60 {
            let f = Double(k) * f0
            let a = 0.2 * exp(-0.5 * pow((f - 1_000) / 250, 2))
            guard a > 1e-5 else { continue }
            for i in 0..<n { voice[i] += Float(a * sin(2 * .pi * f * Double(i) / Self.rate)) }
        }
        let shifted = f0 * pow(2, 700.0 / 1200)
        for preserve in [false, true] {
            let unit = try TimePitchUnit(format: Self.mono, quality: quality)
            try unit.pitch.set(700)
            try unit.formant.set(preserve ? 1 : 0)
            let graph = try Self.graph(BufferPlayerUnit(buffer: PCMBuffer(channels: [voice]), sampleRate: Self.rate), unit)
            let out = Array(try renderOffline(graph, frames: n, blockSizes: [512])[0][48_000..<144_000])
            // Each harmonic's amplitude by correlation with a sine and a cosine over the 2 s (a whole number of
            // periods within a fraction of a percent).
            var weighted = 0.0
            var total = 0.0
            for k in 1...40 {
                let f = Double(k) * shifted
                var s = 0.0
                var c = 0.0
                for (i, v) in out.enumerated() {
                    let phase = 2 * .pi * f * Double(i) / Self.rate
                    s += Double(v) * sin(phase)
                    c += Double(v) * cos(phase)
                }
                let a = (s * s + c * c).squareRoot()
                weighted += a * f
                total += a
            }
            let centre = weighted / total
            let expected = preserve ? 1_000 : 1_000 * pow(2, 700.0 / 1200)
            #expect(abs(centre - expected) < 150, "\(quality), formants \(preserve ? "preserved" : "shifted"): formant at \(centre) Hz, expected about \(expected)")
        }
    }

    /// Ten seconds of synthesized music (a pad chord from 0.5 s to a hard stop at 10 s, notes and drum hits over
    /// it, a seeded generator): played at rate 1.25 through a graph file and `FileRenderer`, the render lasts 8 s,
    /// and the music starts at 0.4 s and stops at 8 s (half-level points of a centred 10 ms RMS), each within
    /// 10 ms.
    @Test("Rate 1.25 on 10 s of music gives 8 s within 10 ms, its start and end where they belong", arguments: TimePitchUnit.Quality.allCases)
    func rateChangesDuration(quality: TimePitchUnit.Quality) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let n = 480_000
        var left = [Float](repeating: 0, count: n)
        var generator = SplitMix64(seed: 2026)
        for i in 24_000..<n {
            let t = Double(i) / Self.rate
            left[i] = Float(0.12 * (sin(2 * .pi * 220 * t) + sin(2 * .pi * 277.18 * t) + sin(2 * .pi * 329.63 * t)))
        }
        var start = 24_000
        while start < n - 4_800 {
            let f = 220 * pow(2, Double(Int.random(in: 0...24, using: &generator)) / 12)
            let drum = Int.random(in: 0...3, using: &generator) == 0
            let length = min(Int.random(in: 6_000...18_000, using: &generator), n - start)
            for k in 0..<length {
                let t = Double(k) / Self.rate
                let envelope = min(t / 0.01, 1) * exp(-t / (drum ? 0.04 : 0.25))
                let v = drum
                    ? Double.random(in: -1...1, using: &generator) * 0.3
                    : 0.15 * (sin(2 * .pi * f * t) + 0.5 * sin(4 * .pi * f * t) + 0.25 * sin(6 * .pi * f * t))
                left[start + k] += Float(v * envelope)
            }
            start += length
        }
        let path = dir.file("music.wav")
        try writeWAV(path, channels: [left], sampleRate: Self.rate)
        let json = """
            {"sampleRate": 48000, "channels": 1,
             "nodes": [{"id": "song", "type": "file", "path": "\(path)"},
                       {"id": "tempo", "type": "timePitch", "rate": 1.25, "quality": "\(quality.rawValue)"}],
             "connections": [{"from": "song", "to": "tempo"}, {"from": "tempo", "to": "output"}]}
            """
        let loaded = try GraphFile.load(json: json)
        let result = try FileRenderer(loaded: loaded).render(to: dir.file("out.wav"))
        #expect(abs(result.duration - 8) <= 0.010, "\(quality): the render lasts \(result.duration) s")
        let out = try FFmpeg.decode(dir.file("out.wav"), channels: 1)[0]
        // Centred 10 ms RMS every millisecond; the level is its median over the middle of the music.
        let window = 480
        var envelope: [Double] = []
        var t = window / 2
        while t + window / 2 <= out.count {
            envelope.append((out[(t - window / 2)..<(t + window / 2)].reduce(0) { $0 + Double($1 * $1) } / Double(window)).squareRoot())
            t += 48
        }
        let level = envelope[1_000..<7_000].sorted()[3_000]
        guard let on = envelope.firstIndex(where: { $0 > level / 2 }), let off = envelope.lastIndex(where: { $0 > level / 2 }) else {
            Issue.record("no music in the output")
            return
        }
        let onset = (Double(on * 48 + window / 2)) / Self.rate
        let end = (Double(off * 48 + window / 2)) / Self.rate
        #expect(abs(onset - 0.4) <= 0.010, "\(quality): the music starts at \(onset) s")
        #expect(abs(end - 8) <= 0.010, "\(quality): the music stops at \(end) s")
    }

    /// A file through a time-pitch at rate 8, rendered offline in 4096-frame blocks: every cycle pulls eight
    /// blocks, and the file source's reader keeps it full, so it never runs dry.
    @Test("Fast rates: a file through timePitch at rate 8 renders an eighth as long with no underrun")
    func fastRateReadsAhead() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<480_000).map { Float(0.3 * sin(2 * .pi * 330 * Double($0) / Self.rate)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone])
        let loaded = try GraphFile.load(
            json: """
                {"sampleRate": 48000, "channels": 1,
                 "nodes": [{"id": "song", "type": "file", "path": "\(dir.file("tone.wav"))"}, {"id": "tempo", "type": "timePitch", "rate": 8}],
                 "connections": [{"from": "song", "to": "tempo"}, {"from": "tempo", "to": "output"}]}
                """, maximumFrames: 4096)
        let result = try FileRenderer(loaded: loaded, blockFrames: 4096).render(to: dir.file("out.wav"))
        #expect(abs(result.duration - 1.25) < 0.001)
        let source = try #require(loaded.units["song"] as? FileSourceUnit)
        #expect(source.underruns == 0)
        let out = try FFmpeg.decode(dir.file("out.wav"), channels: 1)[0]
        let body = out[6_000..<(out.count - 6_000)]
        let rms = (body.reduce(0) { $0 + Double($1 * $1) } / Double(body.count)).squareRoot()
        #expect(abs(20 * log10(rms / (0.3 / 2.0.squareRoot()))) < 1, "the tone plays throughout: \(rms)")
    }

    @Test("Rate, pitch and formants changed while a tone plays: no sample-to-sample step above the tone's own", arguments: TimePitchUnit.Quality.allCases)
    func changesDoNotClick(quality: TimePitchUnit.Quality) throws {
        let unit = try TimePitchUnit(format: Self.mono, quality: quality)
        let graph = try Self.graph(ToneUnit(format: Self.mono, frequency: 440, amplitude: 0.5), unit)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        var out: [Float] = []
        // Every 0.5 s something moves: up a fifth, slower, down, faster with formants kept, back home.
        let changes: [(Float, Float, Float)] = [(700, 1, 0), (700, 0.8, 0), (-500, 0.8, 0), (-500, 1.5, 1), (0, 1, 0), (1200, 0.5, 1)]
        for k in 0..<(7 * 48_000 / 256) {
            if k % 94 == 0, k > 0, (k / 94 - 1) < changes.count {
                let (cents, rate, formant) = changes[k / 94 - 1]
                try unit.pitch.set(cents)
                try unit.rate.set(rate)
                try unit.formant.set(formant)
            }
            out += try renderer.render(frames: 256)[0]
        }
        // The tone's own largest step at the highest frequency it reaches (440 Hz up an octave), at its peak level.
        let body = out[24_000...]
        let peak = body.reduce(0) { max($0, abs($1)) }
        let own = 2 * Double(peak) * sin(.pi * 880 / Self.rate)
        var worst: Float = 0
        var at = 0
        for i in body.indices.dropFirst() where abs(out[i] - out[i - 1]) > worst {
            worst = abs(out[i] - out[i - 1])
            at = i
        }
        #expect(Double(worst) <= own, "\(quality): a step of \(worst) at \(Double(at) / Self.rate) s; the tone's own is at most \(own)")
        #expect(peak < 0.75, "\(quality): peak \(peak) for a 0.5 tone")
    }

    /// A 150 ms Hann-shaped 2.5 kHz burst centred at 1.075 s, shifted +300 cents. From a file-like source the
    /// burst's energy centroid stays at 1.075 s (the unit aligns its output with its input); from a source whose
    /// frames arrive a cycle at a time, as a microphone's do, it comes `latency` later — the look-ahead the unit
    /// reports. Within 1 ms with the default engine; the faster (R2) engine's own timing wanders by a few
    /// milliseconds with frequency and with where the signal falls against its hops (4.5 ms at 2.5 kHz for a
    /// calibration at 1 kHz), so it is held to 5 ms.
    @Test("Reported latency equals the measured lag of a live input within 1 ms; a file's timing is kept", arguments: TimePitchUnit.Quality.allCases)
    func latencyIsMeasured(quality: TimePitchUnit.Quality) throws {
        var signal = [Float](repeating: 0, count: 144_000)
        for i in 0..<7_200 {
            let w = 0.5 - 0.5 * cos(2 * .pi * Double(i) / 7_200)
            signal[48_000 + i] = Float(0.5 * w * sin(2 * .pi * 2_500 * Double(i) / Self.rate))
        }
        func centroid(_ x: [Float]) -> Double {
            var sum = 0.0
            var weighted = 0.0
            for (i, v) in x.enumerated() {
                sum += Double(v * v)
                weighted += Double(i) * Double(v * v)
            }
            return weighted / sum / Self.rate
        }
        let reference = centroid(signal)
        for live in [false, true] {
            for cycle in [256, 1024] {
                let unit = try TimePitchUnit(format: Self.mono, quality: quality)
                try unit.pitch.set(300)
                let source: RenderUnit =
                    live ? try ArrivingSource(signal: signal) : try BufferPlayerUnit(buffer: PCMBuffer(channels: [signal]), sampleRate: Self.rate)
                let graph = try Self.graph(source, unit, maximumFrames: 4096)
                try graph.initialize()
                let reported = unit.latency
                let renderer = OfflineRenderer(graph: graph)
                var out: [Float] = []
                while out.count < signal.count {
                    (source as? ArrivingSource)?.arrive(cycle)
                    out += try renderer.render(frames: cycle)[0]
                }
                let lag = centroid(out) - reference
                let expected = live ? unit.latency : 0
                let tolerance = quality == .finer ? 0.001 : 0.005
                #expect(abs(lag - expected) <= tolerance, "\(quality), \(live ? "live" : "file") at \(cycle): lag \(lag * 1000) ms, expected \(expected * 1000) ms")
                #expect(abs(unit.latency - reported) <= 0.001, "the look-ahead found at prepare held: \(reported) → \(unit.latency)")
                #expect(reported > 0.005 && reported < 0.2, "\(reported) s")
            }
        }
    }

    /// The look-ahead found at prepare (a short run of the engine on silence) is the one a long render needs, at
    /// rates and pitches across the range and cycles of many sizes: it does not grow while 3 s of music play.
    @Test("The look-ahead found at prepare holds through a render, at any rate, pitch and cycle", arguments: TimePitchUnit.Quality.allCases)
    func lookAheadHoldsAcrossSettings(quality: TimePitchUnit.Quality) throws {
        let music = (0..<144_000).map { i -> Float in
            let t = Double(i) / Self.rate
            return Float(0.2 * sin(2 * .pi * 220 * t) + 0.1 * sin(2 * .pi * 3_300 * t + sin(7 * t)) + 0.05 * sin(2 * .pi * 41 * t))
        }
        let settings: [(rate: Float, cents: Float, cycle: Int)] = [
            (1, 0, 64), (1, 200, 4096), (1, -700, 512), (0.5, 0, 256), (0.8, 300, 1024), (1.25, -200, 128),
            (2, 500, 4096), (1.5, 1200, 31), (0.75, -1200, 2000), (3, 0, 512),
        ]
        for s in settings {
            let unit = try TimePitchUnit(format: Self.mono, quality: quality)
            try unit.rate.set(s.rate)
            try unit.pitch.set(s.cents)
            let source = try BufferPlayerUnit(buffer: PCMBuffer(channels: [music]), sampleRate: Self.rate)
            let graph = try Self.graph(source, unit, maximumFrames: 4096)
            try graph.initialize()
            let reported = unit.latency
            let renderer = OfflineRenderer(graph: graph)
            var done = 0
            while Double(done) * Double(s.rate) < Double(music.count) {
                _ = try renderer.render(frames: s.cycle)
                done += s.cycle
            }
            #expect(abs(unit.latency - reported) <= 0.001, "\(quality) rate \(s.rate), \(s.cents) cents, cycles of \(s.cycle): \(reported * 1000) → \(unit.latency * 1000) ms")
        }
    }

    /// Preparing measures the alignment and the look-ahead once per configuration (engine, format, largest cycle,
    /// rate, pitch, formant) in the process: a second unit set up like the first prepares without measuring, and a
    /// third, with the measurement forgotten and made on one thread instead of two, measures the same figures again.
    @Test("Alignment and look-ahead are measured once per configuration, the same on one thread as on two", arguments: TimePitchUnit.Quality.allCases)
    func measurementsAreKept(quality: TimePitchUnit.Quality) throws {
        // A configuration no other test uses: 44.1 kHz stereo, cycles of up to 2048, rate 0.9, +350 cents.
        let format = try StreamFormat.graph(sampleRate: 44_100, channelCount: 2)
        let spec = RenderSpec(sampleRate: 44_100, maximumFrames: 2048)
        let key = TimePitchMeasurements.Key(
            realTime: true, quality: quality, sampleRate: 44_100, channelCount: 2, maximumFrames: 2048, rate: 0.9,
            pitchScale: TimePitchUnit.simpleRatio(exp2(350.0 / 1200)), formant: false)
        let measurements = TimePitchMeasurements.shared
        func prepared(twoThreads: Bool = true) throws -> TimePitchUnit {
            let unit = try TimePitchUnit(format: format, quality: quality)
            try unit.rate.set(0.9)
            try unit.pitch.set(350)
            unit.measuresOnTwoThreads.store(twoThreads, ordering: .relaxed)
            try unit.prepare(spec)
            return unit
        }
        measurements.forget(key)
        let first = try prepared()
        let measured = try #require(measurements.lookUp(key), "kept after the first prepare")
        #expect(measurements.timesMeasured(key) == 1)
        #expect(Double(measured.lookahead) / 44_100 == first.latency)
        let second = try prepared()
        #expect(measurements.timesMeasured(key) == 1, "the second unit measured nothing")
        #expect(second.latency == first.latency)
        measurements.forget(key)
        let third = try prepared(twoThreads: false)
        let again = try #require(measurements.lookUp(key))
        #expect(measurements.timesMeasured(key) == 1)
        #expect(again.alignment == measured.alignment && again.lookahead == measured.lookahead,
                "two threads: \(measured), one: \(again)")
        #expect(third.latency == first.latency)
    }

    /// Offline the look-ahead is not needed ahead of the first cycle: a unit told so before it is prepared skips
    /// the runs that measure it (the alignment is still measured), renders what one that measured it renders (R2
    /// exactly, R3 within −55 dB of the peak), and its latency rises to the measured one as it plays; told
    /// real-time afterwards, it measures it then.
    @Test("Told offline before prepare, the look-ahead is not measured; the output is the same (R3 within −55 dB); real-time measures it then", arguments: TimePitchUnit.Quality.allCases)
    func offlineSkipsTheLookAheadRun(quality: TimePitchUnit.Quality) throws {
        // A configuration no other test uses: 48 kHz mono, cycles of up to 2048, rate 1.1, +250 cents.
        func key(realTime: Bool) -> TimePitchMeasurements.Key {
            TimePitchMeasurements.Key(
                realTime: realTime, quality: quality, sampleRate: Self.rate, channelCount: 1, maximumFrames: 2048,
                rate: 1.1, pitchScale: TimePitchUnit.simpleRatio(exp2(250.0 / 1200)), formant: false)
        }
        let measurements = TimePitchMeasurements.shared
        let music = (0..<96_000).map { i -> Float in
            let t = Double(i) / Self.rate
            return Float(0.3 * sin(2 * .pi * 330 * t) * (0.6 + 0.4 * sin(2 * .pi * 3 * t)) + 0.1 * sin(2 * .pi * 2_100 * t))
        }
        func made(offline: Bool) throws -> (TimePitchUnit, RenderGraph) {
            let unit = try TimePitchUnit(format: Self.mono, quality: quality)
            // On one thread: the figures do not depend on how the runs were shared out.
            unit.measuresOnTwoThreads.store(false, ordering: .relaxed)
            try unit.rate.set(1.1)
            try unit.pitch.set(250)
            let source = try BufferPlayerUnit(buffer: PCMBuffer(channels: [music]), sampleRate: Self.rate)
            let graph = try Self.graph(source, unit, maximumFrames: 2048)
            if offline { graph.willRender(.offline) }
            try graph.initialize()
            return (unit, graph)
        }
        func rendered(_ graph: RenderGraph) throws -> [Float] {
            let renderer = OfflineRenderer(graph: graph)
            var out: [Float] = []
            while out.count < 80_000 { out += try renderer.render(frames: 512)[0] }
            return out
        }
        measurements.forget(key(realTime: false))
        measurements.forget(key(realTime: true))
        let (skipping, skippingGraph) = try made(offline: true)
        #expect(skipping.latency == 0, "nothing measured: \(skipping.latency)")
        #expect(measurements.timesMeasured(key(realTime: false)) == 1, "the alignment is measured")
        #expect(measurements.timesMeasured(key(realTime: true)) == 0)
        let (measuring, measuringGraph) = try made(offline: false)
        let measured = measuring.latency
        #expect(measured > 0.005)
        let a = try rendered(skippingGraph)
        let b = try rendered(measuringGraph)
        // A unit prepared from the kept measurement renders exactly what the one that measured did (the runs go
        // through stretchers of their own, so the units' own have the same past).
        let (_, cachedGraph) = try made(offline: false)
        let c = try rendered(cachedGraph)
        #expect(zip(b, c).allSatisfy { $0 == $1 }, "\(quality): the measuring unit and the one prepared from its figures differ")
        // Offline the input is pulled as the engine asks, not a look-ahead ahead; R2 takes it the same, R3's
        // output depends a little on where its input is cut into process calls (−58 dB of the 0.4 peak here).
        let worst = zip(a, b).map { abs($0 - $1) }.max() ?? 0
        #expect(worst <= (quality == .faster ? 1e-6 : 0.4 * pow(10, -55.0 / 20)), "\(quality): outputs differ by up to \(worst)")
        #expect(skipping.latency > 0 && skipping.latency <= measured + 0.001,
                "found while rendering: \(skipping.latency * 1000) ms, measured \(measured * 1000) ms")

        measurements.forget(key(realTime: true))
        let (late, lateGraph) = try made(offline: true)
        #expect(late.latency == 0)
        lateGraph.willRender(.realTime(maximumCycleFrames: 512))
        #expect(measurements.timesMeasured(key(realTime: true)) == 1, "measured for real time")
        #expect(late.latency == measured, "measured when told real-time: \(late.latency * 1000) ms, \(measured * 1000) ms")
        #expect(try rendered(lateGraph) == b, "renders as a unit prepared for real time")
    }

    @Test("Graph files: timePitch with rate, pitch, formant and quality; bad values are errors naming the field")
    func graphFileNode() throws {
        func load(_ fields: String) throws(AudioError) -> LoadedGraph {
            try GraphFile.load(json: """
                {"sampleRate": 48000, "channels": 2,
                 "nodes": [{"id": "tone", "type": "tone"}, {"id": "key", "type": "timePitch"\(fields)}],
                 "connections": [{"from": "tone", "to": "key"}, {"from": "key", "to": "output"}]}
                """)
        }
        let loaded = try load(#", "rate": 0.8, "pitch": -200, "formant": true, "quality": "faster""#)
        let unit = try #require(loaded.units["key"] as? TimePitchUnit)
        #expect(unit.rate.value == 0.8 && unit.pitch.value == -200 && unit.formant.value == 1 && unit.quality == .faster)
        #expect(try load("").units["key"].map { ($0 as? TimePitchUnit)?.quality } == .finer)
        for (fields, field) in [(#", "rate": 40"#, "rate"), (#", "pitch": 2500"#, "pitch"), (#", "quality": "best""#, "quality"), (#", "formant": 2"#, "formant")] {
            do {
                _ = try load(fields)
                Issue.record("\(fields) was accepted")
            } catch {
                #expect(error.message.contains("'key'") && error.message.contains(field), "\(error)")
            }
        }
    }

    /// Pitch ratios reach the engine as fractions with denominators of at most 4000 (so its resampler never
    /// needs a table larger than it reserved), within 0.2 cents of the ratio asked for, over the whole ±2400-cent
    /// range — checked against the definition: the smallest q with q·r a whole number, searched directly.
    @Test func pitchRatiosAreSimpleFractions() {
        var worstCents = 0.0
        for cents in stride(from: -2400.0, through: 2400.0, by: 7.31) + [-2400, 0, 1, 100, 2400] {
            let exact = exp2(cents / 1200)
            let r = TimePitchUnit.simpleRatio(exact)
            worstCents = max(worstCents, abs(1200 * log2(r / exact)))
            let q = (1...4000).first { abs(Double($0) * r - (Double($0) * r).rounded()) < 1e-9 * Double($0) }
            #expect(q != nil, "\(cents) cents: \(r) is not p/q with q ≤ 4000")
        }
        #expect(worstCents < 0.2, "worst \(worstCents) cents")
        #expect(TimePitchUnit.simpleRatio(1) == 1 && TimePitchUnit.simpleRatio(2) == 2 && TimePitchUnit.simpleRatio(0.25) == 0.25)
    }
}
