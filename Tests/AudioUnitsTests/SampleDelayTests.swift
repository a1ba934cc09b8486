import Foundation
import LiveAudio
import Testing
import TestSupport

@Suite struct SampleDelayTests {
    /// x[n] = n + 1 on the left, −(n + 1) on the right: exact in Float up to 2²⁴, so every output sample names the
    /// input frame it came from.
    static func ramp(_ frames: Int) -> [[Float]] {
        [(0..<frames).map { Float($0 + 1) }, (0..<frames).map { -Float($0 + 1) }]
    }

    @Test(arguments: [0, 1, 100, 4_800])
    func theOutputIsTheInputLaterByExactlyTheDelayFromTheFirstCycle(delay: Int) throws {
        let frames = 12_000
        let input = Self.ramp(frames)
        for blocks in [[256], [1, 7, 64, 1000]] {
            let out = try render(SampleDelayUnit(format: stereo, delayFrames: delay), inputs: [input], frames: frames, blockSizes: blocks)
            for c in 0..<2 {
                let expected = Array(repeating: Float(0), count: delay) + input[c].prefix(frames - delay)
                #expect(out[c] == expected, "delay \(delay), blocks \(blocks), channel \(c)")
            }
        }
    }

    @Test func aChangeTakesEffectAtTheNextCycleAsAJump() throws {
        let graph = try RenderGraph(format: stereo, maximumFrames: 1024)
        let unit = try SampleDelayUnit(format: stereo, delayFrames: 10, maximumDelayFrames: 500)
        let node = try graph.addNode(unit)
        let player = try graph.addNode(BufferPlayerUnit(buffer: PCMBuffer(channels: Self.ramp(10_000)), sampleRate: 48_000))
        try graph.connect(player, to: node)
        try graph.connect(node, to: graph.output)
        try graph.initialize()
        let renderer = OfflineRenderer(graph: graph)
        let first = Array(try renderer.render(frames: 256)[0])
        try unit.setDelayFrames(300)
        #expect(unit.delayFrames == 300)
        let second = Array(try renderer.render(frames: 256)[0])
        // First cycle: frame n carries input frame n − 10; second: n − 300 (frames before 0 are silence).
        func expected(_ frames: Range<Int>, delay: Int) -> [Float] {
            frames.map { (n: Int) -> Float in n < delay ? 0 : Float(n - delay + 1) }
        }
        #expect(first == expected(0..<256, delay: 10))
        #expect(second == expected(256..<512, delay: 300))
    }

    @Test func itReportsItsDelayAsLatencyAndRefusesWhatItCannotHold() throws {
        let unit = try SampleDelayUnit(format: stereo, delayFrames: 480, maximumDelayFrames: 9_600)
        #expect(unit.latency == 0.01)
        #expect(try unit.property("delayFrames") == .int(480))
        #expect(try unit.property("maximumDelayFrames") == .int(9_600))
        try unit.setProperty("delayFrames", .int(960))
        #expect(unit.latency == 0.02)
        let graph = try RenderGraph(format: stereo)
        let node = try graph.addNode(unit)
        try graph.connect(node, to: graph.output)
        #expect(graph.latency == 0.02, "the graph adds it along the path to the output")
        for bad in [-1, 9_601] {
            #expect(throws: AudioError.self) { try unit.setDelayFrames(bad) }
        }
        #expect(unit.delayFrames == 960, "a refused change leaves the delay as it was")
        #expect(throws: AudioError.self) { try unit.setProperty("delayFrames", .double(1.5)) }
        #expect(throws: AudioError.self) { try SampleDelayUnit(format: stereo, delayFrames: 100, maximumDelayFrames: 50) }
        #expect(throws: AudioError.self) { try SampleDelayUnit(format: stereo, maximumDelayFrames: -1) }
    }

    @Test func aGraphFileMakesOne() throws {
        let json = """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "align", "type": "sampleDelay", "delayFrames": 480, "maximumDelayFrames": 48000}],
             "connections": [{"from": "align", "to": "output"}]}
            """
        let loaded = try GraphFile.load(json: json, maximumFrames: 1024)
        let unit = try #require(loaded.units["align"] as? SampleDelayUnit)
        #expect(unit.delayFrames == 480 && unit.maximumDelayFrames == 48_000)
        let tooLong = json.replacingOccurrences(of: "\"delayFrames\": 480", with: "\"delayFrames\": 48001")
        #expect(throws: AudioError.self) { try GraphFile.load(json: tooLong, maximumFrames: 1024) }
    }
}
