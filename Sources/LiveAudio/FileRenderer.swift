#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import FoundationEssentials

/// Renders a graph offline into a WAV file.
///
/// The file appears only when rendering succeeded: audio goes to a hidden temporary file beside the output (created
/// exclusively, under a name no one can predict), which is written to the disk and renamed over the output at the
/// end, and deleted on any error or when the render is stopped. Rendering does not allocate per cycle, so memory
/// does not grow with the duration.
public struct FileRenderer {
    /// The sample types `liveaudio render --sample-format` offers.
    public enum OutputSampleFormat: String, Sendable, CaseIterable {
        /// `f32`: 32-bit float samples; `s16`: 16-bit signed integer samples, clipped to full scale.
        case f32, s16
        var sampleType: SampleType { self == .f32 ? .float32 : .int16 }
    }

    /// What ``render(to:frames:stopped:progress:)`` wrote.
    public struct Result: Sendable {
        /// The output file's path, as given.
        public let path: String
        /// The file's format: the graph's sample rate and channel count, interleaved, in the chosen sample type.
        public let format: StreamFormat
        /// Frames written.
        public let frames: Int64
        /// Largest absolute sample value rendered (before any integer clipping).
        public let peak: Float
        /// Wall-clock seconds spent rendering and writing.
        public let elapsed: Double
        /// The file's duration, seconds: ``frames`` at the format's sample rate.
        public var duration: Double { Double(frames) / format.sampleRate }
    }

    /// The graph rendered; ``render(to:frames:stopped:progress:)`` initializes and starts it if it is not already.
    public let loaded: LoadedGraph
    /// Frames per render cycle, 1 … the graph's maximum frames (default 1024).
    public var blockFrames: Int
    /// The sample type written (default `.f32`).
    public var sampleFormat: OutputSampleFormat
    /// Read the file sources on a thread of their own (`la-read-ahead`), overlapping reading with rendering. Off by
    /// default: with no device to keep pace with, the rendering thread reads each cycle's input itself, in the
    /// same large pieces, and no two threads wait on each other every cycle (a converter or a time-pitch pulls its
    /// input in uneven steps, and each step would otherwise wake the reader and wait for it).
    public var readsOnAThreadOfItsOwn = false

    /// A renderer for `loaded`; nothing is prepared until ``render(to:frames:stopped:progress:)``.
    /// - Parameters:
    ///   - loaded: a graph from ``GraphFile``, not yet initialized.
    ///   - blockFrames: frames per render cycle (1 … the graph's maximum).
    ///   - sampleFormat: the sample type written.
    public init(loaded: LoadedGraph, blockFrames: Int = 1024, sampleFormat: OutputSampleFormat = .f32) {
        self.loaded = loaded
        self.blockFrames = blockFrames
        self.sampleFormat = sampleFormat
    }

    /// The number of frames a render without an explicit duration produces: until every file source has ended,
    /// at the output's rate (through the converters and time-pitches between a source and the output).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when nothing in the graph ends.
    public func framesUntilSourcesEnd() throws(AudioError) -> Int64 {
        let ends = loaded.finiteSources.compactMap { (id, source) -> Int64? in
            guard let frames = source.totalFrames else { return nil }
            return Int64((Double(frames) * loaded.outputFramesPerFrame(of: id)).rounded())
        }
        guard let longest = ends.max(), !ends.isEmpty else {
            throw AudioError(
                .invalidGraphDescription,
                "the graph has no file source, so it never ends: give a duration (--duration SECONDS)")
        }
        return longest
    }

    /// Renders `requested` frames (or, when nil, until every file source has ended) into `path`.
    ///
    /// Blocks the calling thread until the file is written; the rendering happens on it, the writing on a thread of
    /// its own.
    /// - Parameters:
    ///   - path: the WAV file to write; replaced only when rendering succeeds.
    ///   - requested: the number of frames to render, or nil for ``framesUntilSourcesEnd()``.
    ///   - stopped: asked between blocks; when it answers true, rendering stops, the temporary file is deleted, `path`
    ///     is left as it was, and ``/AudioCore/AudioError`` `.invalidState` ("stopped") is thrown.
    ///   - progress: told the frames rendered so far and the total after each block (on the rendering thread).
    /// - Returns: what was written.
    /// - Throws: ``/AudioCore/AudioError``: `.invalidGraphDescription` for a graph with a microphone input or nothing
    ///   that ends, `.tooManyFrames` for a ``blockFrames`` outside 1 … the graph's maximum, `.invalidFormat` for a
    ///   negative `requested`, `.fileIO` and the writer's and graph's errors, `.invalidState` when stopped.
    public func render(
        to path: String, frames requested: Int64? = nil, stopped: () -> Bool = { false },
        progress: (_ done: Int64, _ total: Int64) -> Void = { _, _ in }
    ) throws(AudioError) -> Result {
        let graph = loaded.graph
        if let (id, _) = loaded.inputUnits.first {
            throw AudioError(
                .invalidGraphDescription,
                "node '\(id)' (input) is a microphone and needs a device: run the graph with `liveaudio monitor`")
        }
        guard (1...graph.maximumFrames).contains(blockFrames) else {
            throw AudioError(.tooManyFrames, "block size must be between 1 and \(graph.maximumFrames) frames, got \(blockFrames)")
        }
        let total: Int64
        if let requested { total = requested } else { total = try framesUntilSourcesEnd() }
        guard total >= 0 else { throw AudioError(.invalidFormat, "cannot render a negative number of frames") }
        let format = try StreamFormat(
            sampleRate: graph.format.sampleRate, channelCount: graph.format.channelCount,
            sampleType: sampleFormat.sampleType, interleaved: true)

        try Preflight.checkFolder(forWriting: path)
        let directory = FilePath.folder(of: path)
        let writer = try WAVFileWriter(temporaryBeside: path, format: format)
        let temporary = writer.path
        var succeeded = false
        defer {
            if !succeeded {
                writer.abandon()
                unlink(temporary)
            }
        }
        // Said before preparing: units that measure something only a real-time host needs skip it.
        if graph.state == .uninitialized { graph.willRender(.offline) }
        // File sources are read and decoded before each cycle on this thread, or ahead on a thread of their own.
        let readAhead = try graph.prepareToRender(readAhead: readsOnAThreadOfItsOwn ? "la-read-ahead" : nil)
        defer { readAhead?.stop() }
        let renderer = OfflineRenderer(graph: graph, readAhead: readAhead)
        let started = monotonicNanoseconds()
        var peak: Float = 0
        var done: Int64 = 0
        // Writing (sample conversion and the write calls) runs on a thread of its own, a few blocks behind the
        // rendering, so the two overlap; both sides wait on each other only when the queue is full or empty.
        let queue = WriteQueue(writer: writer, channels: graph.format.channelCount, frames: blockFrames)
        try queue.start()
        do throws(AudioError) {
            while done < total {
                if stopped() {
                    throw AudioError(.invalidState, "stopped before the end: nothing was written to '\(path)'")
                }
                let n = Int(min(Int64(blockFrames), total - done))
                let out = try renderer.render(frames: n)
                peak = max(peak, Self.peak(out))
                try queue.push(out)
                done += Int64(n)
                progress(done, total)
            }
            // A cycle of no frames: the file units read once more and hear that what they played has ended (a
            // player's onEnd, hasFinished), as a reader running after the last cycle would.
            _ = try renderer.render(frames: 0)
            try queue.finish()
        } catch {
            queue.cancel()
            throw error
        }
        // On the disk before the rename, and the rename itself on the disk after it: a crash at any moment leaves
        // either the old file or the whole new one under `path`, never an empty or partial one.
        try writer.finish(durably: true)
        try graph.stop()
        try syncDirectory(directory)
        guard rename(temporary, path) == 0 else {
            throw AudioError(.fileIO, "cannot move the rendered file to '\(path)': \(String(cString: strerror(errno)))")
        }
        try syncDirectory(directory)
        succeeded = true
        let elapsed = Double(monotonicNanoseconds() - started) / 1e9
        return Result(path: path, format: format, frames: total, peak: peak, elapsed: elapsed)
    }

    static func peak(_ view: BufferView) -> Float {
        var p: Float = 0
        for c in 0..<view.channelCount { p = max(p, VectorOps.peak(view[c].baseAddress!, count: view.frameCount)) }
        return p
    }
}

/// Blocks handed from the rendering thread to a writing thread through a fixed ring of buffers.
/// Offline only: both sides block on semaphores, which a real-time thread must never do.
final class WriteQueue: @unchecked Sendable {
    // Unchecked Sendable: push state (pushed, filling, holding, stopping) the renderer's; slots and `failure` handed over by semaphores
    private let writer: WAVFileWriter
    private let slots: [PCMBuffer]
    private let free: DispatchSemaphore
    private let filled = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    /// Frames in each slot (−1: the end marker). Written before `filled.signal()`, read after `filled.wait()`.
    private let frames: UnsafeMutablePointer<Int>
    private var pushed = 0
    /// Set by the writing thread on failure; read by the rendering thread after a semaphore, which orders it.
    private var failure: AudioError?
    private var stopping = false
    /// The writing thread: joined once it has signalled it is done.
    private var thread: WorkerThread?

    /// - Parameter frames: the largest block pushed. Slots hold at least 32768 frames, filled by several pushes,
    ///   so the file is written in large pieces.
    init(writer: WAVFileWriter, channels: Int, frames: Int, depth: Int = 4) {
        self.writer = writer
        let capacity = max(frames, 32_768)
        slots = (0..<depth).map { _ in PCMBuffer(channelCount: channels, capacity: capacity) }
        self.frames = .allocate(capacity: depth)
        self.frames.initialize(repeating: 0, count: depth)
        free = DispatchSemaphore(value: depth)
    }

    deinit { frames.deallocate() }

    /// - Throws: ``AudioError`` `.resourceUnavailable` when no thread can be started.
    func start() throws(AudioError) {
        thread = try WorkerThread(name: "la-render-write") { [self] in run() }
    }

    private func run() {
        var index = 0
        while true {
            filled.wait()
            let n = frames[index]
            if n < 0 {  // end marker; its slot goes back too, so the semaphore ends where it began
                free.signal()
                break
            }
            if failure == nil {
                do throws(AudioError) {
                    try writer.write(slots[index].view(frames: n))
                } catch {
                    failure = error
                }
            }
            index = (index + 1) % slots.count
            free.signal()
        }
        finished.signal()
    }

    /// Frames already in the slot being filled (not yet handed over), and whether a slot is held.
    private var filling = 0
    private var holding = false

    /// Queues a copy of `view`; waits while every slot is in use. Throws the writing thread's error, if any.
    func push(_ view: BufferView) throws(AudioError) {
        var offset = 0
        while offset < view.frameCount {
            if !holding {
                free.wait()
                holding = true  // the slot is ours even if we stop here: close() puts the end marker in it
                filling = 0
                if let failure { throw failure }
            }
            let slot = slots[pushed % slots.count]
            let n = min(view.frameCount - offset, slot.capacity - filling)
            slot.view(frames: filling + n).slice(from: filling, frames: n).copy(from: view.slice(from: offset, frames: n))
            filling += n
            offset += n
            if filling == slot.capacity { handOver() }
        }
    }

    private func handOver() {
        frames[pushed % slots.count] = filling
        pushed += 1
        holding = false
        filled.signal()
    }

    /// Waits until everything queued is written.
    func finish() throws(AudioError) {
        try close()
        if let failure { throw failure }
    }

    /// Stops the writing thread, dropping nothing already queued; errors are the caller's to report.
    func cancel() { try? close() }

    private func close() throws(AudioError) {
        guard !stopping else { return }
        stopping = true
        if holding && filling > 0 { handOver() }
        if !holding { free.wait() }
        holding = false
        frames[pushed % slots.count] = -1
        filled.signal()
        finished.wait()
        thread?.join()
    }
}
