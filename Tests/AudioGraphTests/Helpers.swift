import AudioCore
import AudioGraph
import Foundation

let stereo = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
let mono = try! StreamFormat.graph(sampleRate: 48_000, channelCount: 1)

/// Outputs a constant on every channel.
final class ConstantUnit: RenderUnit {
    let core: UnitCore
    let value: Float
    init(_ value: Float, format: StreamFormat = stereo) {
        self.value = value
        core = UnitCore(kind: "constant", inputs: [], outputs: [format])
    }
    func render(_ context: RenderContext) {
        for o in context.outputs { for c in 0..<o.channelCount { o[c].update(repeating: value) } }
    }
}

/// Records the order units render in, and how often.
final class RenderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String] = []
    func append(_ s: String) { lock.withLock { entries.append(s) } }
    var all: [String] { lock.withLock { entries } }
    func clear() { lock.withLock { entries.removeAll() } }
}

/// Sums its inputs plus an offset, logging each render (tests only: it allocates).
final class SumUnit: RenderUnit {
    let core: UnitCore
    let name: String
    let log: RenderLog
    let offset: Float
    init(_ name: String, inputs: Int, log: RenderLog, offset: Float = 0) {
        self.name = name
        self.log = log
        self.offset = offset
        core = UnitCore(kind: "sum", inputs: Array(repeating: stereo, count: inputs), outputs: [stereo])
    }
    func render(_ context: RenderContext) {
        log.append(name)
        let out = context.output(0)
        for c in 0..<out.channelCount {
            for i in 0..<context.frameCount {
                var s = offset
                for b in 0..<context.inputs.count { s += context.input(b)[c][i] }
                out[c][i] = s
            }
        }
    }
}
