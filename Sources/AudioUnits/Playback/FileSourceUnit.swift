import AudioCodecs
import AudioCore
import AudioGraph
import MediaContainers
import Synchronization

/// Plays an audio file — WAV, MP3, AAC, M4A, FLAC, Ogg, anything FFmpeg reads (``AudioFile/open(path:sampleRate:channelCount:)``)
/// — read incrementally: memory stays the same however long the file is.
///
/// File reading never happens on the render thread. A reader fills a fixed ring buffer ahead of it: a
/// ``ReadAheadWorker`` on a thread of its own, or — when rendering offline without one — ``OfflineRenderer``
/// calling ``prefetch(frames:)`` on its own thread before each cycle. If the ring runs dry before the end of the
/// file the render outputs silence for the missing frames and counts an underrun.
///
/// The output has the file's channel count (a mono file feeding a stereo bus is copied to both channels) and runs
/// at the rate given when it is made: files at another rate are resampled while they are read. A graph at
/// another rate than the unit's rejects the node when it is added.
public final class FileSourceUnit: RenderUnit, FiniteSource, @unchecked Sendable {
    // Unchecked Sendable: RenderUnit subclass; ring SPSC (reader → render), reset in prepare; `reader` the reader's, `scratch` render's
    public let path: String
    /// What reads the file (on the reader thread only).
    public let reader: any AudioFileReader
    /// The frames the file holds at the unit's rate (an estimate when ``AudioFileReader/isFrameCountExact`` is
    /// false).
    public let frameCount: Int64
    public let sampleRate: Double
    private var ring: FrameRingBuffer
    private var scratch: PCMBuffer
    /// Set by the reader at the end of the file, read by the render side.
    private let readerAtEnd = Atomic<Bool>(false)
    private let framesRendered = Atomic<Int64>(0)
    private let underrunCount = Atomic<Int>(0)

    /// Opens `path` and reads its header.
    /// - Parameter sampleRate: the rate to play at, resampling when the file's differs (nil: the file's rate).
    /// - Throws: ``AudioError`` from ``AudioFile/open(path:sampleRate:channelCount:)`` (missing, unreadable,
    ///   unsupported or corrupt file).
    public convenience init(path: String, sampleRate: Double? = nil) throws(AudioError) {
        try self.init(reader: AudioFile.open(path: path, sampleRate: sampleRate))
    }

    /// Plays what `reader` reads; the unit owns it from here.
    public init(reader: any AudioFileReader) throws(AudioError) {
        self.path = reader.path
        self.reader = reader
        frameCount = reader.frameCount
        sampleRate = reader.sampleRate
        let f = try StreamFormat.graph(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        ring = FrameRingBuffer(channelCount: f.channelCount, capacity: 1)
        scratch = PCMBuffer(channelCount: f.channelCount, capacity: 1)
        super.init(kind: "file", inputs: [], outputs: [f])
    }

    public var totalFrames: Int64? { frameCount }
    /// True once the reader has reached the end of the file and everything it read has been rendered (or, when
    /// the length is exact, once that many frames have been rendered).
    public var hasFinished: Bool {
        if reader.isFrameCountExact, framesRendered.load(ordering: .acquiring) >= frameCount { return true }
        return readerAtEnd.load(ordering: .acquiring) && ring.availableToRead == 0
    }
    /// Render cycles that found the ring short of frames before the end of the file.
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    override public var propertyNames: [String] {
        super.propertyNames + ["path", "frameCount", "duration", "hasFinished", "underruns"]
    }

    override public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "path": .string(path)
        case "frameCount": .int(Int(frameCount))
        case "duration": .double(Double(frameCount) / sampleRate)
        case "hasFinished": .bool(hasFinished)
        case "underruns": .int(underruns)
        default: try super.property(name)
        }
    }

    override public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        // Room for many cycles ahead, at least ~0.68 s at 48 kHz, read in pieces of up to 16384 frames.
        let capacity = max(16 * spec.maximumFrames, 32768)
        ring = FrameRingBuffer(channelCount: reader.channelCount, capacity: capacity)
        scratch = PCMBuffer(channelCount: reader.channelCount, capacity: 16384)
    }

    override public func reset() {
        // A decoder that cannot reopen its file reports it on the next read.
        try? reader.seek(toFrame: 0)
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
        return ended || ring.availableToRead >= frames || ring.availableToWrite == 0
    }

    override public var wantsReadAhead: Bool {
        !readerAtEnd.load(ordering: .relaxed) && ring.availableToWrite >= ring.capacity / 2
    }

    /// Tops the ring up completely: what a worker thread calls periodically in real time.
    public func fillRing() throws(AudioError) { try prefetch(frames: ring.capacity) }

    override public func render(_ context: RenderContext) {
        let output = context.output(0)
        // The end flag before the read: frames the reader wrote before setting it are in the ring by now.
        let ended = readerAtEnd.load(ordering: .acquiring)
        let got = ring.read(into: output)
        if got < context.frameCount {
            output.slice(from: got, frames: context.frameCount - got).clear()
        }
        let rendered = framesRendered.load(ordering: .relaxed) + Int64(got)
        if got < context.frameCount && !ended {
            underrunCount.add(1, ordering: .relaxed)
        }
        framesRendered.store(rendered, ordering: .releasing)
    }
}
