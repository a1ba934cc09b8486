import Foundation
import LiveAudio
import Testing
import TestSupport

@Suite struct GraphFileTests {
    func expectGraphError(_ json: String, _ fragments: [String], baseDirectory: String = ".", sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try GraphFile.load(json: json, baseDirectory: baseDirectory)
            Issue.record("accepted: \(json)", sourceLocation: sourceLocation)
        } catch {
            for f in fragments { #expect(error.message.contains(f), "\(error.message)", sourceLocation: sourceLocation) }
        }
    }

    func graph(_ nodes: String, _ connections: String = "") -> String {
        #"{"sampleRate": 48000, "channels": 2, "nodes": [\#(nodes)], "connections": [\#(connections)]}"#
    }

    @Test func errorsNameTheNodeAndTheField() {
        expectGraphError(graph(#"{"id": "x", "type": "wobble"}"#), ["node 'x'", "unknown type 'wobble'", "tone"])
        expectGraphError(graph(#"{"id": "beep", "type": "tone", "frequency": -5}"#), ["node 'beep' (tone)", "field 'frequency'", "between 0 Hz and 24000 Hz", "-5"])
        expectGraphError(graph(#"{"id": "beep", "type": "tone", "frequency": "high"}"#), ["node 'beep'", "'frequency' must be a number"])
        expectGraphError(graph(#"{"id": "t", "type": "gain", "gain": 99}"#), ["node 't' (gain)", "field 'gain'"])
        expectGraphError(graph(#"{"id": "t", "type": "gain", "gian": 1}"#), ["node 't' (gain)", "field 'gian' is not known"])
        expectGraphError(graph(#"{"id": "m", "type": "mixer", "inputs": 2, "volume": [1]}"#), ["node 'm' (mixer)", "'volume' must have 2 entries"])
        expectGraphError(graph(#"{"id": "m", "type": "mixer", "inputs": 2, "pan": [0, 3]}"#), ["node 'm'", "'pan' entry 1"])
        expectGraphError(graph(#"{"id": "m", "type": "mixer"}"#), ["node 'm'", "'inputs' is required"])
        expectGraphError(graph(#"{"id": "n", "type": "noise", "seed": 1.5}"#), ["node 'n'", "'seed' must be a whole number"])
        expectGraphError(graph(#"{"id": "v", "type": "file", "path": "nowhere.wav"}"#), ["node 'v' (file)", "field 'path'", "nowhere.wav"])
        expectGraphError(graph(#"{"id": "a", "type": "tone"}, {"id": "a", "type": "tone"}"#), ["'a' is used twice"])
        expectGraphError(graph(#"{"id": "output", "type": "tone"}"#), ["reserved"])
        expectGraphError(graph(#"{"id": "a", "type": "tone"}"#, #"{"from": "a", "to": "mixx"}"#), ["connections[0]", "unknown node 'mixx'"])
        expectGraphError(graph(#"{"id": "a", "type": "tone"}"#, #"{"from": "b", "to": "output"}"#), ["connections[0]", "unknown node 'b'"])
        expectGraphError(
            graph(#"{"id": "g1", "type": "gain"}, {"id": "g2", "type": "gain"}"#, #"{"from": "g1", "to": "g2"}, {"from": "g2", "to": "g1"}"#),
            ["connections[1]", "cycle", "g2 → g1 → g2"])
        expectGraphError(graph(#"{"id": "a", "type": "tone"}"#, #"{"from": "a", "to": "output", "bus": 3}"#), ["connections[0]", "one input bus"])
        expectGraphError(#"{"sampleRate": 0, "nodes": []}"#, ["sampleRate"])
        expectGraphError(#"{"sampleRate": 48000, "channels": 2, "nodes": [], "extra": 1}"#, ["unknown top-level field 'extra'"])
        expectGraphError(#"{"nodes": [ {"id": "a", "type": "tone"} "#, ["not valid JSON"])
        expectGraphError(#"[1, 2]"#, ["JSON object"])
        expectGraphError(graph(#"{"id": "t", "type": "gain", "bypass": 1}"#), ["node 't' (gain): field 'bypass' must be true or false"])
    }

    @Test func relativePathsResolveAgainstTheGraphFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("voice.wav"), channels: [(0..<4800).map { Float($0) / 4800 }])
        let json = graph(
            #"{"id": "voice", "type": "file", "path": "voice.wav"}, {"id": "t", "type": "gain", "gain": -6, "bypass": true}"#,
            #"{"from": "voice", "to": "t"}, {"from": "t", "to": "output"}"#)
        try json.write(toFile: dir.file("g.json"), atomically: true, encoding: .utf8)
        let loaded = try GraphFile.load(path: dir.file("g.json"))
        #expect(loaded.nodeIDs == ["voice", "t"])
        #expect(loaded.units["t"]!.isBypassed)
        #expect(try FileRenderer(loaded: loaded).framesUntilSourcesEnd() == 4800)
    }
}
