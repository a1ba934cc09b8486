import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The live stream's graph, wired as the karaoke room's is: the input node, the graph file's chain when there is one,
/// then the stream's own parts — its volume, and as sinks the meters, the loudness and the encoder's tap. A device
/// renders it each capture cycle (``/AudioDevices/IOUnit/setCaptureGraph(_:)``); a file input's pacer renders it a
/// block at a time. Nothing is rendered inside a capture handler.
///
/// ```
/// input ─ [the graph file's chain] ─ stream-volume ─┬─ stream-output-meter
///   └─ stream-input-meter                           ├─ stream-loudness
///                                                   └─ stream-encoder ─▶ AAC: RTMP, files
/// ```
struct StreamGraph {
    let graph: RenderGraph
    /// The graph file as loaded, for its units by id; nil without one.
    let loaded: LoadedGraph?
    /// Where the microphone or the file enters.
    let input: InputUnit
    let inputMeter: MeterUnit
    let volume: StreamVolume
    let outputMeter: MeterUnit
    let loudness: LoudnessMeterUnit
    let encoder: EncoderTap

    /// - Throws: ``/AudioCore/AudioError`` from the graph file (no or several input nodes, nothing connected to its
    ///   output), or `.invalidParameter` for an input whose channels the stream cannot take.
    init(_ configuration: LiveStreamSession.Configuration, maximumFrames: Int) throws(AudioError) {
        let inputNode: NodeID
        let last: NodeID
        if let path = configuration.graphPath {
            let loaded = try GraphFile.load(path: path, maximumFrames: maximumFrames, registry: configuration.unitRegistry)
            let (id, unit) = try loaded.onlyInput(as: "a live-stream graph", meaning: "where the microphone or file enters", source: path)
            let end = try loaded.lastNode(of: path, carrying: "what is streamed")
            try loaded.graph.disconnect(loaded.graph.output)
            graph = loaded.graph
            self.loaded = loaded
            input = unit
            inputNode = loaded.nodes[id]!
            last = end
        } else {
            let format = try StreamFormat.graph(sampleRate: configuration.sampleRate, channelCount: configuration.channelCount)
            let defaultChannels = if case .device = configuration.input { 1 } else { format.channelCount }
            let channels = configuration.inputChannels ?? defaultChannels
            guard channels == format.channelCount || channels == 1 else {
                throw AudioError(
                    .invalidParameter,
                    "the input has \(channels) channels but the stream \(format.channelCount): without a graph they must match (or the input be mono)")
            }
            graph = try RenderGraph(format: format, maximumFrames: maximumFrames)
            loaded = nil
            input = try InputUnit(sampleRate: format.sampleRate, channelCount: channels)
            inputNode = try graph.addNode(input, name: "input")
            last = inputNode
        }
        let format = graph.format
        inputMeter = try MeterUnit(format: input.outputFormats[0])
        volume = StreamVolume(format: format)
        outputMeter = try MeterUnit(format: format)
        loudness = try LoudnessMeterUnit(format: format)
        encoder = EncoderTap(format: format)
        var g = GraphParts(graph, known: ["input": inputNode, "chain": last])
        try g.add("stream-input-meter", inputMeter, from: ["input"], sink: true)
        try g.add("stream-volume", volume, from: ["chain"])
        try g.add("stream-output-meter", outputMeter, from: ["stream-volume"], sink: true)
        try g.add("stream-loudness", loudness, from: ["stream-volume"], sink: true)
        try g.add("stream-encoder", encoder, from: ["stream-volume"], sink: true)
        try g.output(from: "stream-volume")
    }
}

/// A file input's pacer: reads the file a block at a time and renders the stream's graph with it, at the pace of the
/// clock or as fast as the encoder takes it. Its thread (`la-stream-file`) is the graph's render thread.
final class FilePacer: Sendable {
    /// Frames read and rendered at a time.
    static let block = 1024

    private let reader: any AudioFileReader & Sendable
    private let graph: StreamGraph
    private let realTime: Bool
    private let stopRequest = Atomic<Bool>(false)
    private let ended = Atomic<Bool>(false)
    private let failures = Atomic<Int>(0)
    private let readFailure = Locked<AudioError?>(nil)
    private let thread = Locked<WorkerThread?>(nil)

    init(reader: any AudioFileReader & Sendable, graph: StreamGraph, realTime: Bool) {
        self.reader = reader
        self.graph = graph
        self.realTime = realTime
    }

    /// Starts the thread, rendering with `readAhead` serving the graph's file sources (if any) and `worker` the
    /// encoder whose ring it waits for when not in real time.
    func start(readAhead: ReadAheadWorker?, worker: AACEncodingWorker) throws(AudioError) {
        let made = try WorkerThread(name: "la-stream-file") { [self] in run(readAhead: readAhead, worker: worker) }
        thread.withLock { $0 = made }
    }

    /// Stops the thread and waits for it. Idempotent.
    func stop() {
        stopRequest.store(true, ordering: .relaxed)
        thread.withLock { t in defer { t = nil }; return t }?.join()
    }

    /// True once the file has been played to its end (or could not be read on).
    var hasEnded: Bool { ended.load(ordering: .relaxed) }
    /// Blocks the graph could not render (nothing reached its sinks).
    var renderFailures: Int { failures.load(ordering: .relaxed) }
    /// Why the file stopped early (a decoding error), if it did.
    var failure: AudioError? { readFailure.withLock { $0 } }

    private func run(readAhead: ReadAheadWorker?, worker: AACEncodingWorker) {
        let block = Self.block
        let buffer = PCMBuffer(channelCount: reader.channelCount, capacity: block)
        let rate = graph.graph.format.sampleRate
        let start = monotonicNanoseconds()
        var sampleTime: Int64 = 0
        while !stopRequest.load(ordering: .relaxed) {
            let n: Int
            do throws(AudioError) { n = try reader.read(into: buffer.view(frames: block)) } catch {
                readFailure.withLock { $0 = error }
                break
            }
            if n == 0 { break }
            let due = start + UInt64(Double(sampleTime) / rate * 1e9)
            if realTime {
                let now = monotonicNanoseconds()
                if due > now { sleepNanoseconds(due - now) }
            }
            let stamp = RenderTimeStamp(sampleTime: sampleTime, hostTime: realTime ? due : monotonicNanoseconds())
            let view = buffer.view(frames: n)
            let output = try? graph.input.feeding(view) { () throws(AudioError) -> BufferView? in
                graph.graph.renderCycle(frames: n, timeStamp: stamp)
            }
            if output == nil { failures.add(1, ordering: .relaxed) }
            readAhead?.requestIfNeeded()
            sampleTime += Int64(n)
            // As fast as possible, but never faster than the encoder: wait while its ring is nearly full.
            while !realTime, worker.pendingSlots >= worker.slotCount - 2, worker.failure == nil,
                !stopRequest.load(ordering: .relaxed)
            {
                sleepNanoseconds(1_000_000)
            }
        }
        ended.store(true, ordering: .relaxed)
    }
}

private func sleepNanoseconds(_ ns: UInt64) {
    var request = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}
