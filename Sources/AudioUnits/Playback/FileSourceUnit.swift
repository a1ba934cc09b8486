import AudioCore
import AudioGraph
import MediaContainers
import Synchronization

/// Plays a PCM WAV file (16/24/32-bit integer, 32-bit float), read incrementally: memory stays the same however
/// long the file is.
///
/// File reading never happens on the render thread. A reader fills a fixed ring buffer ahead of it: a
/// ``ReadAheadWorker`` on a thread of its own, or — when rendering offline without one — ``OfflineRenderer``
/// calling ``prefetch(frames:)`` on its own thread before each cycle. If the ring runs dry before the end of the
/// file the render outputs silence for the missing frames and counts an underrun.
///
/// The output has the file's channel count (a mono file feeding a stereo bus is copied to both channels) and runs
/// at the file's rate: a graph at another rate rejects the node when it is added.
public final class FileSourceUnit: RenderUnit, FiniteSource, @unchecked Sendable {
    public let path: String
    public let fileInfo: WAVFileInfo
    private let reader: WAVFileReader
    private var ring: FrameRingBuffer
    private var scratch: PCMBuffer
    /// Set by the reader at the end of the file, read by the render side.
    private let readerAtEnd = Atomic<Bool>(false)
    private let framesRendered = Atomic<Int64>(0)
    private let underrunCount = Atomic<Int>(0)

    /// Opens `path` and reads its header.
    /// - Throws: ``AudioError`` from ``WAVFileReader`` (missing, unreadable, unsupported or corrupt file).
    public init(path: String) throws(AudioError) {
        self.path = path
        reader = try WAVFileReader(path: path)
        fileInfo = reader.info
        let f = try StreamFormat.graph(sampleRate: fileInfo.format.sampleRate, channelCount: fileInfo.format.channelCount)
        ring = FrameRingBuffer(channelCount: f.channelCount, capacity: 1)
        scratch = PCMBuffer(channelCount: f.channelCount, capacity: 1)
        super.init(kind: "file", inputs: [], outputs: [f])
    }

    public var totalFrames: Int64? { fileInfo.frameCount }
    public var hasFinished: Bool { framesRendered.load(ordering: .acquiring) >= fileInfo.frameCount }
    /// Render cycles that found the ring short of frames before the end of the file.
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    override public var propertyNames: [String] {
        super.propertyNames + ["path", "frameCount", "duration", "hasFinished", "underruns"]
    }

    override public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "path": .string(path)
        case "frameCount": .int(Int(fileInfo.frameCount))
        case "duration": .double(fileInfo.duration)
        case "hasFinished": .bool(hasFinished)
        case "underruns": .int(underruns)
        default: try super.property(name)
        }
    }

    override public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        // Room for many cycles ahead, at least ~0.68 s at 48 kHz, read in pieces of up to 16384 frames.
        let capacity = max(16 * spec.maximumFrames, 32768)
        ring = FrameRingBuffer(channelCount: fileInfo.format.channelCount, capacity: capacity)
        scratch = PCMBuffer(channelCount: fileInfo.format.channelCount, capacity: 16384)
    }

    override public func reset() {
        reader.seek(toFrame: 0)
        ring.reset()
        readerAtEnd.store(false, ordering: .releasing)
        framesRendered.store(0, ordering: .releasing)
        underrunCount.store(0, ordering: .relaxed)
    }

    /// Reads from the file until the ring holds `frames` frames (or the file ends). Reader thread; does not allocate.
    override public var prefetchesAhead: Bool { true }

    override public func prefetch(frames: Int) throws(AudioError) {
        while !readerAtEnd.load(ordering: .relaxed), ring.availableToRead < frames {
            let want = min(ring.availableToWrite, scratch.capacity)
            if want == 0 { break }
            let got = try reader.read(into: scratch.view(frames: want))
            if got == 0 {
                readerAtEnd.store(true, ordering: .releasing)
                break
            }
            ring.write(scratch.view(frames: got))
        }
    }

    override public func isReadyAhead(frames: Int) -> Bool {
        // The end flag first: once it is seen, everything the reader wrote before it is counted too.
        let ended = readerAtEnd.load(ordering: .acquiring)
        return ended || ring.availableToRead >= frames
    }

    override public var wantsReadAhead: Bool {
        !readerAtEnd.load(ordering: .relaxed) && ring.availableToWrite >= ring.capacity / 2
    }

    /// Tops the ring up completely: what a worker thread calls periodically in real time.
    public func fillRing() throws(AudioError) { try prefetch(frames: ring.capacity) }

    override public func render(_ context: RenderContext) {
        let output = context.output(0)
        let got = ring.read(into: output)
        if got < context.frameCount {
            output.slice(from: got, frames: context.frameCount - got).clear()
        }
        let rendered = framesRendered.load(ordering: .relaxed) + Int64(got)
        if got < context.frameCount && rendered < fileInfo.frameCount {
            underrunCount.add(1, ordering: .relaxed)
        }
        framesRendered.store(rendered, ordering: .releasing)
    }
}
