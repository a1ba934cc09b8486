import AudioCodecs
import AudioCore
import AudioGraph
import MediaContainers
import Synchronization

/// Plays an audio file — WAV, MP3, AAC, M4A, FLAC, Ogg, anything FFmpeg reads
/// (``/AudioCodecs/AudioFile/open(path:sampleRate:channelCount:)``) — read incrementally: memory stays the same
/// however long the file is.
///
/// File reading never happens on the render thread. A reader fills a fixed ring buffer ahead of it: a
/// ``/AudioGraph/ReadAheadWorker`` on a thread of its own, or — when rendering offline without one —
/// ``/AudioGraph/OfflineRenderer`` calling ``prefetch(frames:)`` on its own thread before each cycle. If the ring
/// runs dry before the end of the file the render outputs silence for the missing frames and counts an underrun.
///
/// The output has the file's channel count (a mono file feeding a stereo bus is copied to both channels) and runs
/// at the rate given when it is made: files at another rate are resampled while they are read. A graph at
/// another rate than the unit's rejects the node when it is added.
///
/// Threads: the reader and the buffer it decodes into are the reader thread's (``prefetch(frames:)``), the ring's
/// contents pass from it to the render thread through the ring's own counters, and the counts are atomic.
public final class FileSourceUnit: RenderUnit, FiniteSource {
    public let core: UnitCore
    /// The path of the file played, as the reader gives it.
    public let path: String
    /// The frames the file holds at the unit's rate (an estimate when
    /// ``/MediaContainers/AudioFileReader/isFrameCountExact`` is false).
    public let frameCount: Int64
    /// The rate the unit plays at, in Hz: its output's, the file's unless the reader resamples.
    public let sampleRate: Double
    /// The reader's ``AudioFileReader/isFrameCountExact``, taken when the unit is made (as ``frameCount`` is).
    private let frameCountIsExact: Bool
    /// The reader's side: the reader thread's while it reads ahead, the control side's in prepare and reset.
    private let readerState: RenderThreadBound<ReaderState>
    private struct ReaderState {
        let reader: any AudioFileReader
        var scratch: PCMBuffer
    }
    /// The ring, reader → render: made in prepare and emptied by reset, while neither side runs; while they run,
    /// both only read the reference (the reader writes frames, the render thread reads them: the ring's counters
    /// hand them over).
    private let ring: RenderThreadBound<FrameRingBuffer>
    /// Set by the reader at the end of the file, read by the render side.
    private let readerAtEnd = Atomic<Bool>(false)
    private let framesRendered = Atomic<Int64>(0)
    /// Frames the reader has put into the ring since the reset, stored after each write.
    private let framesQueued = Atomic<Int64>(0)
    private let underrunCount = Atomic<Int>(0)

    /// Opens `path` and reads its header.
    /// - Parameters:
    ///   - path: the audio file to play.
    ///   - sampleRate: the rate to play at, resampling when the file's differs (nil: the file's rate).
    /// - Throws: ``/AudioCore/AudioError`` from ``/AudioCodecs/AudioFile/open(path:sampleRate:channelCount:)``
    ///   (missing, unreadable, unsupported or corrupt file).
    public convenience init(path: String, sampleRate: Double? = nil) throws(AudioError) {
        try self.init(reader: AudioFile.open(path: path, sampleRate: sampleRate))
    }

    /// Plays what `reader` reads; the unit owns it from here.
    public init(reader: any AudioFileReader) throws(AudioError) {
        self.path = reader.path
        frameCount = reader.frameCount
        frameCountIsExact = reader.isFrameCountExact
        sampleRate = reader.sampleRate
        let f = try StreamFormat.graph(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        readerState = RenderThreadBound(
            ReaderState(reader: reader, scratch: PCMBuffer(channelCount: f.channelCount, capacity: 1)))
        ring = RenderThreadBound(FrameRingBuffer(channelCount: f.channelCount, capacity: 1))
        core = UnitCore(kind: "file", inputs: [], outputs: [f])
    }

    /// What reads the file: the reader thread's; use it elsewhere only while nothing reads ahead or renders.
    public var reader: any AudioFileReader { readerState.whileStopped.reader }

    public var totalFrames: Int64? { frameCount }
    /// True once the reader has reached the end of the file and everything it read has been rendered (or, when
    /// the length is exact, once that many frames have been rendered). Any thread.
    public var hasFinished: Bool {
        if frameCountIsExact, framesRendered.load(ordering: .acquiring) >= frameCount { return true }
        // The end flag first: once it is seen, every frame the reader queued before it is counted too.
        let ended = readerAtEnd.load(ordering: .acquiring)
        return ended && framesRendered.load(ordering: .acquiring) >= framesQueued.load(ordering: .acquiring)
    }
    /// Render cycles that found the ring short of frames before the end of the file.
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    public var propertyNames: [String] {
        commonPropertyNames + ["path", "frameCount", "duration", "hasFinished", "underruns"]
    }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "path": .string(path)
        case "frameCount": .int(Int(frameCount))
        case "duration": .double(Double(frameCount) / sampleRate)
        case "hasFinished": .bool(hasFinished)
        case "underruns": .int(underruns)
        default: try commonProperty(name)
        }
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        // Room for many cycles ahead, at least ~0.68 s at 48 kHz, read in pieces of up to 16384 frames.
        let capacity = max(16 * spec.maximumFrames, 32768)
        let channels = readerState.whileStopped.reader.channelCount
        ring.whileStopped = FrameRingBuffer(channelCount: channels, capacity: capacity)
        readerState.whileStopped.scratch = PCMBuffer(channelCount: channels, capacity: 16384)
    }

    public func reset() {
        // A decoder that cannot reopen its file reports it on the next read.
        try? readerState.whileStopped.reader.seek(toFrame: 0)
        ring.whileStopped.reset()
        readerAtEnd.store(false, ordering: .releasing)
        framesRendered.store(0, ordering: .releasing)
        framesQueued.store(0, ordering: .releasing)
        underrunCount.store(0, ordering: .relaxed)
    }

    /// Reads from the file until the ring holds `frames` frames (or the file ends). Reader thread; does not allocate.
    public var prefetchesAhead: Bool { true }

    public func prefetch(frames: Int) throws(AudioError) {
        let ring = self.ring.onWorkerThread
        // Asked to fill (a reader a time-pitch or converter pulls from, offline; a worker's top-up): in large pieces,
        // once a quarter of the ring is free, not the few frames the last cycle took.
        if frames >= ring.capacity, ring.availableToWrite < Self.topUpFrames(ring) { return }
        let reader = readerState.onWorkerThread.reader
        let scratch = readerState.onWorkerThread.scratch
        while !readerAtEnd.load(ordering: .relaxed), ring.availableToRead < frames {
            let want = min(ring.availableToWrite, scratch.capacity)
            if want == 0 { break }
            let got = try reader.read(into: scratch.view(frames: want))
            if got == 0 {
                readerAtEnd.store(true, ordering: .releasing)
                break
            }
            let queued = ring.write(scratch.view(frames: got))
            framesQueued.add(Int64(queued), ordering: .releasing)
        }
    }

    public func isReadyAhead(frames: Int) -> Bool {
        // The end flag first: once it is seen, everything the reader wrote before it is counted too.
        let ended = readerAtEnd.load(ordering: .acquiring)
        // Asked for a full ring: as full as a fill makes it (a fill waits for a quarter of it to be free).
        let ring = ring.onRenderThread
        return ended || ring.availableToRead >= frames
            || ring.availableToWrite < (frames >= ring.capacity ? Self.topUpFrames(ring) : 1)
    }

    public var wantsReadAhead: Bool {
        !readerAtEnd.load(ordering: .relaxed)
            && ring.onRenderThread.availableToWrite >= ring.onRenderThread.capacity / 2
    }

    /// The free room a fill waits for: a quarter of the ring, at most 16384 frames.
    static func topUpFrames(_ ring: FrameRingBuffer) -> Int { min(16_384, ring.capacity / 4) }

    /// Tops the ring up completely: what a worker thread calls periodically in real time. Reader thread.
    public func fillRing() throws(AudioError) { try prefetch(frames: ring.onWorkerThread.capacity) }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        // The end flag before the read: frames the reader wrote before setting it are in the ring by now.
        let ended = readerAtEnd.load(ordering: .acquiring)
        let got = ring.onRenderThread.read(into: output)
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

