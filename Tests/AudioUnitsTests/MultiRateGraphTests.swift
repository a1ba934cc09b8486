import AudioCore
import AudioGraph
import AudioUnits
import Foundation
import LiveAudio
import Testing
import TestSupport

/// Graphs that mix sample rates: a node at 44.1 kHz reaches a 48 kHz output through a `converter`, which pulls it
/// at its own rate and pace.
@Suite("Multi-rate graphs and the converter unit")
struct MultiRateGraphTests {
    /// 2 s of a 44.1 kHz stereo file: a chirp on the left, two tones on the right.
    static func song(_ dir: TemporaryDirectory) throws -> (path: String, channels: [[Float]]) {
        let n = 88_200
        let channels: [[Float]] = [
            (0..<n).map { i in let t = Double(i) / 44_100; return Float(0.4 * sin(2 * .pi * (150 + 2_000 * t) * t)) },
            (0..<n).map { i in let t = Double(i) / 44_100; return Float(0.3 * sin(2 * .pi * 440 * t) + 0.1 * sin(2 * .pi * 7_000 * t)) },
        ]
        let path = dir.file("song44.wav")
        try writeWAV(path, channels: channels, sampleRate: 44_100)
        return (path, channels)
    }

    static func graphJSON(_ path: String, extra: String = "") -> String {
        """
        {"sampleRate": 48000, "channels": 2,
         "nodes": [{"id": "song", "type": "file", "path": "\(path)", "resample": false, "sampleRate": 44100},
                   {"id": "to48", "type": "converter", "inputRate": 44100\(extra)}],
         "connections": [{"from": "song", "to": "to48"}, {"from": "to48", "to": "output"}]}
        """
    }

    @Test("A 44.1 kHz file through a converter to a 48 kHz output: the whole-file conversion's samples, at every block size and at random ones")
    func fileThroughConverter() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let song = try Self.song(dir)
        // The reference: the file converted whole, in one pass, by the same library.
        let reference = try SampleRateConverter.convert(song.channels, from: 44_100, to: 48_000)
        let frames = reference[0].count
        #expect(frames == 96_000)
        var generator = SplitMix64(seed: 11)
        let random = (0..<64).map { _ in Int.random(in: 1...4096, using: &generator) }
        for sizes in [[1024], [64], [4096], [441], [1], random] {
            let loaded = try GraphFile.load(json: Self.graphJSON(song.path), maximumFrames: 4096)
            let count = sizes == [1] ? 9_600 : frames
            let out = try renderOffline(loaded.graph, frames: count, blockSizes: sizes)
            for c in 0..<2 {
                var worst: Float = 0
                for i in 0..<count { worst = max(worst, abs(out[c][i] - reference[c][i])) }
                #expect(worst <= 1e-6, "blocks \(sizes.prefix(4)): channel \(c) differs by \(worst) (\(20 * log10(Double(worst))) dB)")
            }
        }
    }

    @Test("A converter with no inputRate takes the rate of what feeds it, whichever node the file lists first")
    func converterRateFromItsSource() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let song = try Self.song(dir)
        let reference = try SampleRateConverter.convert(song.channels, from: 44_100, to: 48_000)
        let file = "{\"id\": \"song\", \"type\": \"file\", \"path\": \"\(song.path)\", \"resample\": false}"
        let converter = "{\"id\": \"to48\", \"type\": \"converter\"}"
        for nodes in ["\(file), \(converter)", "\(converter), \(file)"] {
            let loaded = try GraphFile.load(json: """
                {"sampleRate": 48000, "channels": 2, "nodes": [\(nodes)],
                 "connections": [{"from": "song", "to": "to48"}, {"from": "to48", "to": "output"}]}
                """)
            #expect(loaded.nodeIDs == (nodes.hasPrefix(file) ? ["song", "to48"] : ["to48", "song"]), "ids stay in file order")
            let unit = try #require(loaded.units["to48"])
            #expect(unit.inputFormats[0].sampleRate == 44_100)
            #expect(unit.outputFormats[0].sampleRate == 48_000)
            let out = try renderOffline(loaded.graph, frames: 48_000, blockSizes: [256])
            var worst: Float = 0
            for c in 0..<2 { for i in 0..<48_000 { worst = max(worst, abs(out[c][i] - reference[c][i])) } }
            #expect(worst <= 1e-6, "the 44.1 kHz file at 48 kHz, as converted whole: differs by \(worst)")
        }
    }

    @Test("Connecting rates without a converter names both; a node pulled from both sides of a converter is refused")
    func rateErrors() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let song = try Self.song(dir)
        let json = """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "song", "type": "file", "path": "\(song.path)", "resample": false}],
             "connections": [{"from": "song", "to": "output"}]}
            """
        do {
            _ = try GraphFile.load(json: json)
            Issue.record("a 44.1 kHz node fed a 48 kHz output")
        } catch {
            #expect(error.message.contains("44.1 kHz") && error.message.contains("48 kHz") && error.message.contains("converter"), "\(error)")
        }
        let graph = try RenderGraph(format: StreamFormat.graph(sampleRate: 48_000, channelCount: 2))
        let tone = try graph.addNode(ToneUnit(format: StreamFormat.graph(sampleRate: 48_000, channelCount: 2)), name: "tone")
        let converter = try graph.addNode(
            ConverterUnit(
                inputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2),
                outputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2)), name: "conv")
        let mixer = try graph.addNode(MixerUnit(format: StreamFormat.graph(sampleRate: 48_000, channelCount: 2), inputs: 2), name: "mix")
        try graph.connect(tone, to: converter)
        try graph.connect(converter, to: mixer, inputBus: 0)
        try graph.connect(mixer, to: graph.output)
        do {
            try graph.connect(tone, to: mixer, inputBus: 1)
            Issue.record("a node was pulled by a converter and by the output's chain")
        } catch {
            #expect(error.code == .invalidNode && error.message.contains("'tone'") && error.message.contains("'conv'"), "\(error)")
        }
    }

    @Test("Channel maps: mono to stereo, stereo to mono (the average), an explicit map with a silent channel; bad maps are errors")
    func channelMaps() throws {
        func render(_ inputChannels: Int, _ outputChannels: Int, map: [Int]?) throws -> [[Float]] {
            let graph = try RenderGraph(format: StreamFormat.graph(sampleRate: 48_000, channelCount: outputChannels))
            let source = try graph.addNode(ConstantsUnit(values: (0..<inputChannels).map { Float($0 + 1) * 0.1 }))
            let converter = try graph.addNode(
                ConverterUnit(
                    inputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: inputChannels),
                    outputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: outputChannels), channelMap: map))
            try graph.connect(source, to: converter)
            try graph.connect(converter, to: graph.output)
            return try renderOffline(graph, frames: 256, blockSizes: [100])
        }
        #expect(try render(1, 2, map: nil).map { Set($0) } == [[0.1], [0.1]])
        let mono = try render(2, 1, map: nil)[0]
        #expect(mono.allSatisfy { abs($0 - 0.15) < 1e-7 })
        #expect(try render(3, 2, map: [2, -1]).map { Set($0) } == [[0.3], [0]])
        #expect(throws: AudioError.self) {
            _ = try ConverterUnit(
                inputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2),
                outputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2), channelMap: [0, 2])
        }
        #expect(throws: AudioError.self) {
            _ = try ConverterUnit(
                inputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2),
                outputFormat: StreamFormat.graph(sampleRate: 48_000, channelCount: 2), channelMap: [0])
        }
    }

    @Test("The converter's latency is its filter's look-ahead: positive, a few milliseconds at high quality, the graph's latency too")
    func latency() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let song = try Self.song(dir)
        let loaded = try GraphFile.load(json: Self.graphJSON(song.path))
        try loaded.graph.initialize()
        let converter = try #require(loaded.units["to48"])
        #expect(converter.latency > 0 && converter.latency < 0.05, "\(converter.latency) s")
        #expect(abs(loaded.graph.latency - converter.latency) < 1e-9)
    }
}

/// A source of constant channels (test helper).
final class ConstantsUnit: RenderUnit {
    let core: UnitCore
    let values: [Float]
    init(values: [Float]) throws {
        self.values = values
        core = UnitCore(kind: "constants", inputs: [], outputs: [try StreamFormat.graph(sampleRate: 48_000, channelCount: values.count)])
    }
    func render(_ context: RenderContext) {
        let out = context.output(0)
        for c in 0..<out.channelCount { out[c].update(repeating: values[c]) }
    }
}
