import AudioCore
#if canImport(Glibc)
import Glibc
#endif
import AudioGraph
import MediaContainers
import Synchronization

/// Passes its input through unchanged and records it to a WAV file: the render thread copies each cycle into a fixed
/// ring, and a writer — a job on a ``/AudioCore/WorkerPool`` (the shared `la-work` threads by default) — drains the
/// ring into the file. What a session uses for stems (the accompaniment, the dry and the wet voice) taken at points
/// of a graph that runs on a device thread.
///
/// - **Alignment**: recorders in one graph see the same cycles, so their files line up frame for frame from the first
///   cycle each renders. ``skipFrames`` drops that many frames from the start of the file (a round-trip shift: a
///   voice recorded one round trip late lands where it was sung). A writer that falls behind by more than the ring
///   (``bufferedSeconds``) loses frames; they are written as silence, in place, so the file keeps its length and its
///   alignment, and counted in ``droppedFrames``.
/// - **Gaps in time**: a cycle whose sample time comes later than the last one's end (the device was away, or the
///   sound server stopped the graph for a while) has the frames between written as silence before it, so the file
///   keeps the wall time; they are counted in ``gapFrames``, apart from the losses.
/// - **Offline** (no deadline: ``/AudioGraph/RenderUnit/willRender(_:)`` told ``/AudioGraph/RenderingMode/offline``,
///   or never told) the render waits for the writer when the ring is full, so an offline render records every frame
///   whatever the disk's speed.
/// - **The file** is valid while recording: its header is brought up to date every half second; ``finish()`` drains
///   the ring and completes it. A write error (a full disk) stops the writing and is ``failure``; what was written
///   before stays valid. The render thread never allocates, locks, waits or does I/O: it copies and posts a
///   semaphore.
/// - **Threads**: the file, and the buffer it is written from, are the writer job's from its start to its last call
///   in ``finish()``; the ring hands the frames over; counts and flags are atomic, ``failure`` is under a lock.
public final class RecorderUnit: RenderUnit {
    public let core: UnitCore
    /// The WAV file written, as given at init.
    public let path: String
    /// Frames dropped from the start of what is recorded: as given at init, or as the last
    /// ``startRecording(atSampleTime:skipFrames:)`` asked.
    public var skipFrames: Int64 { skip.load(ordering: .relaxed) }
    private let skip: Atomic<Int64>
    /// How far the writer may fall behind before frames are lost, in seconds (0.1 … 60, default 2): the ring's
    /// length (at least 16,384 frames, whatever the rate).
    public let bufferedSeconds: Double

    private let shared: Shared
    private let job: WorkerPool.Job
    /// Held for the whole of ``finish()``: a second caller waits for the first and gets its outcome.
    private let finished = Locked<(done: Bool, error: AudioError?)>((false, nil))

    /// What the render thread and the writer share; the writer job owns it too, so it outlives the unit if need be.
    private final class Shared: Sendable {
        let ring: FrameRingBuffer
        /// The writer job's from its start to its last call in ``RecorderUnit/finish()``; the control side's before
        /// and after.
        let writing: RenderThreadBound<Writing>
        struct Writing {
            let writer: WAVFileWriter
            var toSkip: Int64
            /// What the writer drains the ring into.
            let scratch: PCMBuffer
            /// The frames written at the last header commit.
            var lastCommit: Int64 = 0
            /// When the last pass began (monotonic nanoseconds): a writer delay counts from there.
            var lastPass = monotonicNanoseconds()
            /// Frames read from the ring so far (where the gaps are placed).
            var read: Int64 = 0
        }
        /// The render thread's: frames put in the ring so far, and the sample time after the last cycle recorded.
        struct Rendering {
            var put: Int64 = 0
            var next: Int64 = .min
        }
        let rendering = RenderThreadBound(Rendering())
        let stopping = Atomic<Bool>(false)
        /// Frames the render could not put in the ring: silence the writer owes the file, after what the ring holds.
        let owed = Atomic<Int>(0)
        let dropped = Atomic<Int64>(0)
        /// Gaps in the sample time, put by the render thread and taken by the writer.
        let gaps = GapQueue()
        let gapTotal = Atomic<Int64>(0)
        let written = Atomic<Int64>(0)
        let failed = Atomic<Bool>(false)
        /// True unless told real-time cycles are coming: the render then waits for room in the ring.
        let waits = Atomic<Bool>(true)
        let failure = Locked<AudioError?>(nil)
        /// A skip asked for by ``startRecording(atSampleTime:skipFrames:)`` (-1: none), taken by the writer.
        let skipRequest = Atomic<Int64>(-1)
        /// The first sample time recorded (`Int64.min`: from the first cycle).
        let recordFrom = Atomic<Int64>(.min)
        /// The first sample time not recorded (`.max`: none).
        let recordUntil = Atomic<Int64>(.max)
        /// Seconds the writer waits between passes (tests make it fall behind with it).
        let delayBits = Atomic<UInt64>(0)
        let commitEvery: Int64

        init(ring: FrameRingBuffer, writer: WAVFileWriter, skip: Int64, sampleRate: Double) {
            self.ring = ring
            let scratch = PCMBuffer(channelCount: ring.channelCount, capacity: 8192)
            scratch.view(frames: 8192).clear()
            writing = RenderThreadBound(Writing(writer: writer, toSkip: skip, scratch: scratch))
            commitEvery = Int64(sampleRate / 2)
        }

        /// Render thread: `frames` of silence go in the file before what comes next. Written in place when the
        /// writer is up to date with the ring; owed (after what the ring holds) when it is already behind, or when
        /// the ring of gaps is full.
        func noteGap(_ frames: Int64) {
            gapTotal.add(frames, ordering: .relaxed)
            if owed.load(ordering: .acquiring) > 0 || !gaps.put(at: rendering.onRenderThread.put, frames: frames) {
                owedGaps.add(frames, ordering: .relaxed)
                owed.add(Int(frames), ordering: .releasing)
            }
        }
        /// Of the owed frames, those that were gaps in time rather than losses.
        let owedGaps = Atomic<Int64>(0)
        /// One pass of the writer: drains the ring, writes the silence owed, brings the header up to date now and
        /// then. The last pass (`last`) comes after the render has stopped taking frames.
        func pass(last: Bool) -> WorkerPool.Turn {
            let now = monotonicNanoseconds()
            let delay = UInt64(Double(bitPattern: delayBits.load(ordering: .relaxed)) * 1e9)
            let since = now - writing.onWorkerThread.lastPass
            if !last, since < delay { return .after(Double(delay - since) / 1e9) }
            writing.onWorkerThread.lastPass = now
            // A turn writes at most ``passFrames`` (the pool's other jobs wait meanwhile); the last writes all.
            return pass(&writing.onWorkerThread, upTo: last ? .max : Self.passFrames) ? .again : .idle
        }

        /// Frames one turn writes at most: 0.7 s at 48 kHz.
        static let passFrames = 32_768

        /// Returns true when frames are left in the ring.
        private func pass(_ w: inout Writing, upTo limit: Int) -> Bool {
            // The debt first: every frame the render wrote before owing is in the ring by now.
            let debt = owed.load(ordering: .acquiring)
            let more = drain(&w, upTo: limit)
            if more { return true }
            if debt > 0 {
                owed.subtract(debt, ordering: .releasing)
                let gapped = owedGaps.exchange(0, ordering: .relaxed)
                dropped.add(max(0, Int64(debt) - gapped), ordering: .relaxed)
                writeSilence(debt, &w)
            }
            if !failed.load(ordering: .relaxed), w.writer.framesWritten - w.lastCommit >= commitEvery {
                do throws(AudioError) { try w.writer.commitHeader() } catch { fail(error) }
                w.lastCommit = w.writer.framesWritten
            }
            return false
        }

        /// Writes what the ring holds, up to `limit` frames; true when frames are left.
        private func drain(_ w: inout Writing, upTo limit: Int) -> Bool {
            let skip = skipRequest.exchange(-1, ordering: .acquiring)
            if skip >= 0 { w.toSkip = skip }
            let scratch = w.scratch
            var done = 0
            while done < limit {
                // The next gap, when the ring has been read up to it: its silence first.
                var upTo = Int64.max
                if let gap = gaps.next {
                    if gap.at <= w.read {
                        writeSilence(Int(gap.frames), &w)
                        gaps.take()
                        continue
                    }
                    upTo = gap.at - w.read
                }
                let got = ring.read(into: scratch.view(frames: Int(min(Int64(min(scratch.capacity, limit - done)), upTo))))
                if got == 0 { return false }
                write(scratch.view(frames: got), &w)
                w.read += Int64(got)
                done += got
            }
            return ring.availableToRead > 0 || gaps.next != nil
        }

        private func writeSilence(_ frames: Int, _ w: inout Writing) {
            // The scratch is the ring's reader: it was drained, so it may hold silence now.
            let scratch = w.scratch
            scratch.view(frames: scratch.capacity).clear()
            var left = frames
            while left > 0 {
                let n = min(left, scratch.capacity)
                write(scratch.view(frames: n), &w)
                left -= n
            }
        }

        private func write(_ view: BufferView, _ w: inout Writing) {
            var view = view
            if w.toSkip > 0 {
                let skip = Int(min(w.toSkip, Int64(view.frameCount)))
                w.toSkip -= Int64(skip)
                view = view.slice(from: skip, frames: view.frameCount - skip)
            }
            guard view.frameCount > 0, !failed.load(ordering: .relaxed) else { return }
            do throws(AudioError) {
                try w.writer.write(view)
                written.store(w.writer.framesWritten, ordering: .relaxed)
            } catch {
                fail(error)
            }
        }

        private func fail(_ error: AudioError) {
            failure.withLock { if $0 == nil { $0 = error } }
            failed.store(true, ordering: .releasing)
        }
    }

    /// Creates `path` (truncating it) and adds the writer to `pool`.
    /// - Parameters:
    ///   - format: the bus format (the recorder's input and output); the file has its rate and channels.
    ///   - path: the WAV file to write; created, or truncated if it exists.
    ///   - sampleType: the file's samples (Float32 keeps every sample exact).
    ///   - skipFrames: frames dropped from the start (0 or more).
    ///   - bufferedSeconds: how far the writer may fall behind before frames are lost (0.1 … 60).
    ///   - waitsForStart: record nothing until ``startRecording(atSampleTime:skipFrames:)`` (false: from the first
    ///     cycle).
    ///   - pool: where the writer runs (``/AudioCore/WorkerPool/shared``: a few threads for every recorder and
    ///     encoder).
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the file cannot be created, `.invalidParameter` for bad
    ///   buffering or skip, `.invalidFormat` for a format a file or the graph cannot carry, `.resourceUnavailable`
    ///   when no thread can be started.
    public init(
        format: StreamFormat, path: String, sampleType: SampleType = .float32, skipFrames: Int64 = 0,
        bufferedSeconds: Double = 2, waitsForStart: Bool = false, pool: WorkerPool = .shared
    ) throws(AudioError) {
        guard skipFrames >= 0 else { throw AudioError(.invalidParameter, "skipFrames must be 0 or more, got \(skipFrames)") }
        guard (0.1...60).contains(bufferedSeconds) else {
            throw AudioError(.invalidParameter, "bufferedSeconds must be between 0.1 and 60, got \(bufferedSeconds)")
        }
        let file = try StreamFormat(
            sampleRate: format.sampleRate, channelCount: format.channelCount, sampleType: sampleType, interleaved: true)
        let writer = try WAVFileWriter(path: path, format: file)
        self.path = path
        skip = Atomic(skipFrames)
        self.bufferedSeconds = bufferedSeconds
        // At least four of the largest cycles a graph renders, whatever the rate.
        let ring = FrameRingBuffer(
            channelCount: format.channelCount, capacity: max(Int(bufferedSeconds * format.sampleRate), 16_384))
        let shared = Shared(ring: ring, writer: writer, skip: skipFrames, sampleRate: format.sampleRate)
        if waitsForStart { shared.recordFrom.store(.max, ordering: .relaxed) }
        self.shared = shared
        let bus: StreamFormat
        do throws(AudioError) {
            bus = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
            job = try pool.add("recorder \(path)") { last in shared.pass(last: last) }
        } catch {
            writer.abandon()
            throw error
        }
        core = UnitCore(kind: "recorder", inputs: [bus], outputs: [bus])
    }

    deinit {
        _ = try? finish()
    }

    /// Frames in the file so far (after ``skipFrames``).
    public var framesWritten: Int64 { shared.written.load(ordering: .relaxed) }
    /// Frames of silence written for gaps in the sample time (the device away, the graph stopped by the server).
    public var gapFrames: Int64 { shared.gapTotal.load(ordering: .relaxed) }
    /// Frames the writer fell too far behind for, written as silence (counted also when they fall in the skipped
    /// start, or after a write error).
    public var droppedFrames: Int64 { shared.dropped.load(ordering: .relaxed) }
    /// Seconds the writer waits between passes over the ring (the pool serves the others meanwhile): for tests that
    /// make it fall behind.
    public var writerDelayForTesting: Double {
        get { Double(bitPattern: shared.delayBits.load(ordering: .relaxed)) }
        set { shared.delayBits.store(max(0, newValue).bitPattern, ordering: .relaxed) }
    }

    /// The write error that stopped the writing, if any.
    public var failure: AudioError? { shared.failure.withLock { $0 } }

    /// Stops recording: what the ring holds is written, the file completed. Frames that pass later are not recorded.
    /// Idempotent. Control thread.
    /// - Returns: the frames in the file.
    /// - Throws: the write error that stopped the writing, or the one completing the file.
    @discardableResult
    public func finish() throws(AudioError) -> Int64 {
        let error = finished.withLock { state -> AudioError? in
            if !state.done {
                state.done = true
                shared.stopping.store(true, ordering: .releasing)
                job.finish()
                // The writer's last pass has returned: the file is the control side's.
                let writer = shared.writing.whileStopped.writer
                if let failure {
                    // The header for what was written first (it takes no new space), then the rest if it can.
                    try? writer.commitHeader()
                    try? writer.finish()
                    state.error = failure
                } else {
                    do throws(AudioError) { try writer.finish() } catch { state.error = error }
                }
                shared.written.store(writer.framesWritten, ordering: .relaxed)
            }
            return state.error
        }
        if let error { throw error }
        return framesWritten
    }

    /// Records from sample time `sampleTime` of the render on (earlier cycles pass through unrecorded), dropping the
    /// first `skipFrames` of what it records: how recorders in a running graph start together, to the sample, with
    /// a shift known only once the device runs. Call once, before that time comes. Control thread.
    public func startRecording(atSampleTime sampleTime: Int64, skipFrames: Int64 = 0) {
        skip.store(max(0, skipFrames), ordering: .relaxed)
        shared.skipRequest.store(max(0, skipFrames), ordering: .releasing)
        shared.recordFrom.store(sampleTime, ordering: .releasing)
    }

    /// Records nothing from sample time `sampleTime` of the render on (the cycle it falls in up to there): how
    /// recorders started at different times end with the same length. ``finish()`` still completes the file.
    /// Control thread.
    public func stopRecording(atSampleTime sampleTime: Int64) {
        shared.recordUntil.store(sampleTime, ordering: .releasing)
    }

    /// Offline (and before any announcement) the render waits for room in the ring, so nothing is lost however fast
    /// the graph renders; in real time it never waits, and what finds no room is silence in the file.
    public func willRender(_ mode: RenderingMode) {
        shared.waits.store(mode == .offline, ordering: .releasing)
    }

    public var propertyNames: [String] { commonPropertyNames + ["path", "framesWritten", "droppedFrames", "gapFrames"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "path": .string(path)
        case "framesWritten": .int(Int(framesWritten))
        case "droppedFrames": .int(Int(droppedFrames))
        case "gapFrames": .int(Int(gapFrames))
        default: try commonProperty(name)
        }
    }

    public func render(_ context: RenderContext) {
        let input = context.input(0)
        let output = context.output(0)
        output.copy(from: input)
        let s = shared
        if s.stopping.load(ordering: .relaxed) { return }
        // Before the first sample time recorded: nothing; the cycle it falls in: from there.
        let from = s.recordFrom.load(ordering: .acquiring)
        let until = s.recordUntil.load(ordering: .acquiring)
        let t0 = context.timeStamp.sampleTime
        if t0 + Int64(context.frameCount) <= from || t0 >= until { return }
        let offset = from > t0 ? Int(from - t0) : 0
        let end = until < t0 + Int64(context.frameCount) ? Int(until - t0) : context.frameCount
        guard end > offset else { return }
        let recorded = offset > 0 || end < context.frameCount ? input.slice(from: offset, frames: end - offset) : input
        let n = recorded.frameCount
        let start = t0 + Int64(offset)
        let next = s.rendering.onRenderThread.next
        if next != .min, start > next { s.noteGap(start - next) }
        s.rendering.onRenderThread.next = start + Int64(n)
        if s.waits.load(ordering: .relaxed), s.owed.load(ordering: .relaxed) == 0 {
            // No deadline: wait (sleeping) for the writer to make room, up to a second; then it counts as a drop.
            var slept = 0
            while s.ring.availableToWrite < n, slept < 1_000, !s.stopping.load(ordering: .relaxed) {
                job.wake()
                usleep(1000)
                slept += 1
            }
        }
        if s.owed.load(ordering: .acquiring) > 0 {
            // Owing already: nothing goes in the ring until the writer has written the silence.
            s.owed.add(n, ordering: .releasing)
        } else {
            let put = s.ring.write(recorded)
            s.rendering.onRenderThread.put += Int64(put)
            if put < n { s.owed.add(n - put, ordering: .releasing) }
        }
        if s.ring.availableToRead >= s.ring.capacity / 8 || s.owed.load(ordering: .relaxed) > 0 { job.wake() }
    }
}

/// Where the gaps in a recorder's sample time go in its file: a ring of (frames put in the frame ring before the gap,
/// frames of silence), put by the render thread and taken by the writer.
private final class GapQueue: @unchecked Sendable {
    // Unchecked Sendable: single producer, single consumer: an entry is written before `putCount` is stored
    // (releasing) and read after it is loaded (acquiring); the producer reuses it only once `takenCount` passed it.
    private static let capacity = 16
    private let entries = UnsafeMutablePointer<(at: Int64, frames: Int64)>.allocate(capacity: capacity)
    private let putCount = Atomic<Int>(0)
    private let takenCount = Atomic<Int>(0)

    deinit { entries.deallocate() }

    /// Render thread: false when the ring is full (the gap is then owed, after what the frame ring holds).
    func put(at: Int64, frames: Int64) -> Bool {
        let n = putCount.load(ordering: .relaxed)
        guard n - takenCount.load(ordering: .acquiring) < Self.capacity else { return false }
        entries[n % Self.capacity] = (at, frames)
        putCount.store(n + 1, ordering: .releasing)
        return true
    }

    /// Writer: the oldest gap not taken yet.
    var next: (at: Int64, frames: Int64)? {
        let taken = takenCount.load(ordering: .relaxed)
        return taken < putCount.load(ordering: .acquiring) ? entries[taken % Self.capacity] : nil
    }

    /// Writer: the oldest gap is written.
    func take() { takenCount.add(1, ordering: .releasing) }
}
