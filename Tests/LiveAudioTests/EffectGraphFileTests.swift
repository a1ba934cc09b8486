import Foundation
import LiveAudio
import Testing
import TestSupport

@Suite struct EffectGraphFileTests {
    func load(_ node: String) throws -> RenderUnit {
        let json = #"{"sampleRate": 48000, "channels": 2, "nodes": [\#(node)], "connections": [{"from": "fx", "to": "output"}]}"#
        return try GraphFile.load(json: json).units["fx"]!
    }

    func message(_ node: String) -> String {
        do { _ = try load(node) } catch let error as AudioError { return error.message } catch { return "\(error)" }
        return "accepted"
    }

    @Test func everyEffectTypeLoadsWithItsParameters() throws {
        let eq = try load(#"{"id": "fx", "type": "eq", "bands": [{"type": "highPass", "frequency": 90}, {"type": "peak", "frequency": 3000, "gain": 3, "bandwidth": 1.5}, {"type": "highShelf", "frequency": 9000, "gain": -2, "q": 1.1, "bypass": true}]}"#)
        #expect(try eq.property("bandCount") == .int(3))
        #expect(try eq.property("type.1") == .string("peak"))
        #expect(try eq.parameter("bandwidth.1").value == 1.5)
        #expect(try eq.parameter("q.2").value == 1.1)
        #expect(try eq.parameter("bypass.2").value == 1)
        #expect(try eq.parameter("q.0").value == 0.70710677)

        let cases: [(String, String, Float)] = [
            (#"{"id": "fx", "type": "lowpass", "cutoff": 2000, "resonance": 3}"#, "resonance", 3),
            (#"{"id": "fx", "type": "highpass", "cutoff": 120}"#, "cutoff", 120),
            (#"{"id": "fx", "type": "bandpass", "frequency": 700, "bandwidth": 0.5}"#, "bandwidth", 0.5),
            (#"{"id": "fx", "type": "dynamics", "threshold": -30, "ratio": 8, "knee": 6, "expansionRatio": 2}"#, "ratio", 8),
            (#"{"id": "fx", "type": "reverb", "wetDryMix": 30, "decayTimeAt0Hz": 2.5}"#, "decayTimeAt0Hz", 2.5),
            (#"{"id": "fx", "type": "delay", "delayTime": 0.3, "feedback": -40}"#, "feedback", -40),
            (#"{"id": "fx", "type": "limiter", "ceiling": -3, "attackTime": 0.002, "bypass": true}"#, "ceiling", -3),
        ]
        for (json, name, value) in cases {
            let unit = try load(json)
            #expect(try unit.parameter(name).value == value, "\(json)")
        }
        #expect(try load(#"{"id": "fx", "type": "limiter", "bypass": true}"#).isBypassed)
    }

    @Test func badEffectFieldsNameNodeFieldAndRange() {
        let cases: [(String, [String])] = [
            (#"{"id": "fx", "type": "dynamics", "ratio": 80}"#, ["node 'fx' (dynamics)", "field 'ratio'", "1 … 50", "80"]),
            (#"{"id": "fx", "type": "limiter", "ceiling": 2}"#, ["(limiter)", "'ceiling'", "-40 dB … 0 dB"]),
            (#"{"id": "fx", "type": "reverb", "decayTimeAt0Hz": 0}"#, ["(reverb)", "'decayTimeAt0Hz'"]),
            (#"{"id": "fx", "type": "delay", "delayTime": 3}"#, ["(delay)", "'delayTime'", "0 s … 2 s"]),
            (#"{"id": "fx", "type": "delay", "dleayTime": 1}"#, ["'dleayTime' is not known", "delayTime"]),
            (#"{"id": "fx", "type": "lowpass", "cutoff": 30000}"#, ["(lowpass)", "'cutoff'"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "bell", "frequency": 100}]}"#, ["'bands[0].type'", "peak, lowShelf"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "peak"}]}"#, ["'bands[0].frequency' is required"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "peak", "frequency": 100}, {"type": "peak", "frequency": 5, "gain": 2}]}"#, ["'bands[1].frequency'", "between 10 Hz"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "lowPass", "frequency": 100, "bandwidth": 1}]}"#, ["'bands[0].bandwidth'", "takes q"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "peak", "frequency": 100, "q": 1, "bandwidth": 1}]}"#, ["both q and bandwidth"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "peak", "frequency": 100, "gain": 30}]}"#, ["'bands[0].gain'", "24 dB"]),
            (#"{"id": "fx", "type": "eq", "bands": [{"type": "peak", "frequency": 100, "slope": 1}]}"#, ["'bands[0].slope' is not a band field"]),
            (#"{"id": "fx", "type": "eq", "bands": {"type": "peak"}}"#, ["'bands' must be an array"]),
            (#"{"id": "fx", "type": "eq", "bands": [\#(Array(repeating: #"{"type": "peak", "frequency": 100}"#, count: 17).joined(separator: ","))]}"#, ["at most 16"]),
        ]
        for (json, fragments) in cases {
            let m = message(json)
            for f in fragments { #expect(m.contains(f), "\(json): \(m)") }
        }
    }

    /// The example voice chains (the live chain over a file, and the longer vocal chain the benchmarks also time)
    /// load, render through `liveaudio render`, and FFmpeg decodes the result.
    @Test(arguments: [
        ("voice-file-chain.json", ["voice", "eq", "comp", "room", "echo", "limit"]),
        ("vocal-file-chain.json", ["voice", "rumble", "eq", "comp", "echo", "room", "limit"]),
    ])
    func voiceChainExampleRenders(_ name: String, nodes: [String]) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Examples/graphs/\(name)").standardized.path
        try FileManager.default.copyItem(atPath: example, toPath: dir.file(name))
        // Two seconds of a voice-like signal: a 180 Hz buzz with a syllable envelope, −12 dBFS peaks.
        let voice = (0..<96_000).map { i -> Float in
            let t = Double(i) / 48_000
            let env = max(0, sin(2 * Double.pi * 3 * t))
            return Float(0.25 * env * (sin(2 * Double.pi * 180 * t) + 0.5 * sin(2 * Double.pi * 360 * t)))
        }
        try writeWAV(dir.file("voice.wav"), channels: [voice])
        let loaded = try GraphFile.load(path: dir.file(name))
        #expect(loaded.nodeIDs == nodes)
        let r = try runProcess(productsDirectory + "/liveaudio", ["render", dir.file(name), "-o", dir.file("out.wav")])
        #expect(r.status == 0, "\(r.stderr)")
        let decoded = try FFmpeg.decode(dir.file("out.wav"), channels: 2)
        #expect(decoded[0].count == 96_000)
        let peak = decoded.flatMap { $0 }.map(abs).max() ?? 0
        #expect(peak <= pow(10, -1 / 20) + 1e-6, "the limiter's −1 dB ceiling holds")
        #expect(peak > 0.1, "the voice comes through")
        #expect(decoded[0] != decoded[1], "the reverb makes the mono voice stereo")
    }
}

@Suite struct EffectDocumentationTests {
    /// docs/effects.md has a table row for every parameter of every effect, with its lower bound and default.
    @Test func everyParameterIsDocumentedWithRangeAndDefault() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/effects.md").standardized.path
        let doc = try String(contentsOfFile: path, encoding: .utf8).replacingOccurrences(of: "−", with: "-")
        let rows = doc.split(separator: "\n").filter { $0.hasPrefix("| `") }
        func show(_ v: Float) -> String { v == v.rounded() ? String(Int(v)) : String(v) }
        for type in ["lowpass", "highpass", "bandpass", "dynamics", "reverb", "delay", "limiter"] {
            let json = #"{"nodes": [{"id": "fx", "type": "\#(type)"}]}"#
            let unit = try GraphFile.load(json: json).units["fx"]!
            #expect(doc.contains("## `\(type)`") || doc.contains("`\(type)`,"), "a section for \(type)")
            for p in unit.parameters {
                let candidates = rows.filter { $0.hasPrefix("| `\(p.identifier)` |") }
                let ok = candidates.contains { row in
                    row.contains(show(p.spec.range.lowerBound)) && row.contains(show(p.spec.defaultValue))
                }
                #expect(ok, "\(type).\(p.identifier): range from \(show(p.spec.range.lowerBound)), default \(show(p.spec.defaultValue))")
            }
        }
    }
}
