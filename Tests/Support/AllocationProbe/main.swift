// Counts heap allocations on the render thread, run with the malloc interposer preloaded:
//   LD_PRELOAD=.build/debug/libMallocInterposerSwift.so .build/debug/AllocationProbe render-cycles DIR
//   LD_PRELOAD=... AllocationProbe render-file DIR SECONDS
// Prints one JSON object; the tests in LiveAudioTests run it and judge the numbers.
import CAllocationProbe
import Foundation
import LiveAudio
import MallocInterposerSwift

func writeTestFile(_ path: String, seconds: Double, channels: Int) throws {
    let format = try StreamFormat(sampleRate: 48_000, channelCount: channels, sampleType: .int16, interleaved: true)
    let writer = try WAVFileWriter(path: path, format: format)
    let block = PCMBuffer(channelCount: channels, capacity: 4800)
    var n = 0
    let total = Int(seconds * 48_000)
    while n < total {
        let frames = min(4800, total - n)
        for c in 0..<channels {
            for i in 0..<frames { block.view(frames: frames)[c][i] = 0.3 * Float(sin(2 * Double.pi * 330 * Double(n + i) / 48_000)) }
        }
        try writer.write(block.view(frames: frames))
        n += frames
    }
    try writer.finish()
}

func emit(_ fields: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}

func maxRSSKiB() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss
}

/// Every unit and every effect, with callback inputs and a mono source on a stereo bus; the control thread keeps
/// changing the graph, the parameters and the bypasses.
func renderCycles(directory: String) throws {
    let filePath = directory + "/probe-voice.wav"
    try writeTestFile(filePath, seconds: 2, channels: 1)
    let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let graph = try RenderGraph(format: format, maximumFrames: 512)
    let mixer = try MixerUnit(format: format, inputs: 7)
    let m = try graph.addNode(mixer, name: "mix")
    let file = try graph.addNode(FileSourceUnit(path: filePath), name: "file")
    let tone = try graph.addNode(ToneUnit(format: format, frequency: 440, amplitude: 0.2), name: "tone")
    let noise = try graph.addNode(NoiseUnit(format: format, amplitude: 0.05, seed: 3), name: "noise")
    let loop = PCMBuffer(channels: [(0..<1000).map { Float($0) / 1000 }])
    let player = try graph.addNode(BufferPlayerUnit(buffer: loop, sampleRate: 48_000, loop: true), name: "player")
    let gainUnit = try GainUnit(format: format, gain: -6)
    let gain = try graph.addNode(gainUnit, name: "trim")
    try graph.connect(file, to: m, inputBus: 0)
    try graph.connect(tone, to: m, inputBus: 1)
    try graph.connect(noise, to: m, inputBus: 2)
    try graph.connect(player, to: m, inputBus: 3)
    try graph.setInputCallback(m, inputBus: 4) { view, _ in
        for c in 0..<view.channelCount { view[c].update(repeating: 0.01) }
    }
    let client = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
    try graph.setInputCallback(m, inputBus: 5, format: client) { raw, _ in
        let p = raw.base.assumingMemoryBound(to: Int16.self)
        for i in 0..<(raw.frameCount * 2) { p[i] = 100 }
    }
    try graph.connect(m, to: gain)
    // Every effect, in series after the trim; the control thread moves their parameters and bypasses.
    let effects: [RenderUnit] = [
        try EQUnit(format: format, bands: [
            EQBand(.highPass, frequency: 90), EQBand(.peak, frequency: 3000, gain: 3, bandwidth: 1),
            EQBand(.highShelf, frequency: 9000, gain: -2),
        ]),
        try LowPassUnit(format: format, cutoff: 12_000), try HighPassUnit(format: format, cutoff: 40),
        try BandPassUnit(format: format, frequency: 1000, bandwidth: 4),
        try DynamicsUnit(format: format), try ReverbUnit(format: format), try DelayUnit(format: format),
        try LimiterUnit(format: format),
    ]
    var previous = gain
    for (i, unit) in effects.enumerated() {
        let node = try graph.addNode(unit, name: "effect\(i)")
        try graph.connect(previous, to: node)
        previous = node
    }
    try graph.connect(previous, to: graph.output)
    try graph.initialize()
    try graph.start()
    let renderer = OfflineRenderer(graph: graph)
    let sizes = [1, 0, 17, 64, 128, 129, 256, 511, 512]
    // Warm up every path, including parameter ramps, glides and bypass fades: a debug build instantiates generic
    // metadata the first time a path runs (a one-time runtime cache entry, not a per-cycle allocation).
    for i in 0..<2000 {
        if i % 100 == 0 {
            for (u, unit) in effects.enumerated() {
                for (j, p) in unit.parameters.enumerated() {
                    let r = p.spec.range
                    try p.set(r.lowerBound + (r.upperBound - r.lowerBound) * Float((i / 100 + u + j) % 5) / 4)
                }
                unit.isBypassed = (i / 100 + u) % 3 == 0
            }
        }
        _ = try renderer.render(frames: sizes[i % sizes.count])
    }

    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    allocation_probe_reset()
    MallocInterposerSwift.hook()
    let stop = Atomic(false)
    let changes = Atomic(0)
    // Control thread: reconfigure, add and remove nodes, move parameters.
    let control = Thread {
        var k = 0
        while !stop.load() {
            do {
                switch k % 4 {
                case 0: try graph.disconnect(m, inputBus: 1)
                case 1: try graph.connect(tone, to: m, inputBus: 1)
                case 2:
                    let extra = try graph.addNode(ToneUnit(format: format, frequency: 220, amplitude: 0.1), name: "extra")
                    try graph.connect(extra, to: m, inputBus: 6)
                    try graph.removeNode(extra)
                default:
                    try gainUnit.setParameter("gain", Float(k % 12) - 12)
                    try mixer.setPan(Float(k % 3) - 1, bus: 0)
                    // Every effect parameter somewhere new in its range; every so often a bypass flips.
                    for (i, unit) in effects.enumerated() {
                        for (j, p) in unit.parameters.enumerated() {
                            let r = p.spec.range
                            let t = Float((k * 7 + i * 3 + j * 5) % 11) / 10
                            try p.set(r.lowerBound + (r.upperBound - r.lowerBound) * t)
                        }
                        if (k / 4 + i) % 5 == 0 { unit.isBypassed.toggle() }
                    }
                }
            } catch { fatalError("control thread: \(error)") }
            k += 1
            changes.add(1)
            usleep(20)
        }
    }
    let generationBefore = graph.scheduleGeneration
    var cycles = 0
    allocation_probe_watch_this_thread(1)
    while cycles < 12_000 {
        _ = try renderer.render(frames: sizes[cycles % sizes.count])
        cycles += 1
    }
    allocation_probe_watch_this_thread(0)
    control.start()
    allocation_probe_watch_this_thread(1)
    var swapped = 0
    while cycles < 24_000 || changes.load() < 1000 {
        _ = try renderer.render(frames: sizes[cycles % sizes.count])
        cycles += 1
        if cycles > 5_000_000 { break }
    }
    swapped = graph.scheduleGeneration - generationBefore
    allocation_probe_watch_this_thread(0)
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    emit([
        "cycles": cycles, "renderThreadAllocations": allocation_probe_count(),
        "renderThreadBytes": allocation_probe_bytes(), "schedulesPublished": swapped, "changes": changes.load(),
    ])
}

/// Renders a graph with a file source of `seconds` to a WAV file; reports allocations and peak memory.
func renderFile(directory: String, seconds: Double) throws {
    let input = directory + "/long-\(Int(seconds)).wav"
    try writeTestFile(input, seconds: seconds, channels: 2)
    let graphJSON = """
        {"sampleRate": 48000, "channels": 2,
         "nodes": [{"id": "voice", "type": "file", "path": "\(input)"},
                   {"id": "beep", "type": "tone", "frequency": 440, "amplitude": 0.1},
                   {"id": "mix", "type": "mixer", "inputs": 2},
                   {"id": "trim", "type": "gain", "gain": -3}],
         "connections": [{"from": "voice", "to": "mix", "bus": 0}, {"from": "beep", "to": "mix", "bus": 1},
                         {"from": "mix", "to": "trim"}, {"from": "trim", "to": "output"}]}
        """
    let loaded = try GraphFile.load(json: graphJSON, maximumFrames: 1024)
    let renderer = FileRenderer(loaded: loaded, blockFrames: 1024, sampleFormat: .s16)
    MallocInterposerSwift.initialize()
    MallocInterposerSwift.hook()
    let result = try renderer.render(to: directory + "/out-\(Int(seconds)).wav")
    MallocInterposerSwift.unhook()
    let stats = MallocInterposerSwift.getStatistics()
    emit([
        "frames": result.frames, "allocations": stats.mallocCount, "bytes": stats.mallocBytesCount,
        "maxRSSKiB": maxRSSKiB(),
    ])
}

/// A tiny atomic for the probe's own threads.
final class Atomic<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ v: T) { value = v }
    func load() -> T { lock.withLock { value } }
    func store(_ v: T) { lock.withLock { value = v } }
}
extension Atomic where T == Int {
    func add(_ d: Int) { lock.withLock { value += d } }
}

let args = CommandLine.arguments
do {
    switch args.count > 2 ? args[1] : "" {
    case "render-cycles": try renderCycles(directory: args[2])
    case "render-file" where args.count > 3: try renderFile(directory: args[2], seconds: Double(args[3])!)
    default:
        FileHandle.standardError.write(Data("usage: AllocationProbe render-cycles DIR | render-file DIR SECONDS\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("AllocationProbe: \(error)\n".utf8))
    exit(1)
}
