import AudioCore
import Synchronization

/// Runs an ``AACEncoder`` off the real-time thread, the way an iOS app's capture callback hands PCM to
/// AudioConverter on a queue of its own.
///
/// The capture or render side calls ``push(_:sampleTime:)-(RawBufferView,_)`` with each buffer it has — any
/// number of frames, in the encoder's input format or as Float32 planar. The buffer is copied into the slots of a
/// single-producer/single-consumer ring — consecutive buffers packed into the same slot until it holds
/// `slotFrames` — and the worker thread is woken for each full slot; the push never allocates, locks or waits.
/// When the ring is full the buffer is dropped and counted (``droppedFrames``, ``overflows``): the worker then
/// sees a gap in the sample times, and the encoder fills it with silence so later packets stay on the input's
/// clock.
///
/// The worker — a job on a ``/AudioCore/WorkerPool`` (the shared `la-work` threads by default) — encodes each slot
/// and gives the packets to `handler` on the job's thread. ``finish()`` drains what is queued, flushes the encoder
/// and hands over the tail.
///
/// Thread safety: ``push(_:sampleTime:)-(RawBufferView,_)`` from one producer thread at a time (the real-time
/// thread); ``start()`` and ``finish()`` from a control thread; the counters from any thread.
public final class AACEncodingWorker: @unchecked Sendable {
    // Unchecked Sendable: open slot (`open*`) the producer's, `job`/`finished` control's (start, finish); ring SPSC; rest atomic
    /// Takes each batch of packets, in order, on the job's pool thread; an error it throws stops the encoding.
    public typealias Handler = @Sendable ([AACPacket]) throws -> Void

    /// The encoder the worker runs: used only by the worker from ``start()`` on (its constants — settings, formats,
    /// priming — may be read from any thread).
    public let encoder: AACEncoder
    /// Frames each slot holds. Pushes that follow one another in time share slots; longer ones take several.
    public let slotFrames: Int
    /// Slots in the ring.
    public var slotCount: Int { ring.slotCount }

    private let ring: SlotRingBuffer
    private let handler: Handler
    private let pool: WorkerPool
    private let dropped = Atomic<Int64>(0)
    private let overflowCount = Atomic<Int>(0)
    private let pushedFrames = Atomic<Int64>(0)
    private let packetCount = Atomic<Int>(0)
    private let failed = Locked<AudioError?>(nil)
    private var job: WorkerPool.Job?
    /// The pool thread the job runs on (−1 before ``start()``): what a push wakes, read on the render thread.
    private let jobThread = Atomic<Int>(-1)
    private var finished = false
    /// Bytes between planes in a slot (non-interleaved formats).
    private let slotPlaneStride: Int
    // Producer state: the slot being filled, not yet published.
    private var open: UnsafeMutableRawPointer?
    private var openStart: Int64 = 0
    private var openFrames = 0

    /// Creates a worker and its ring (allocated here); nothing runs until ``start()``. Control thread.
    /// - Parameters:
    ///   - encoder: used only by the worker from ``start()`` on.
    ///   - bufferedSeconds: how much audio the ring holds before pushes are dropped (default 2 s).
    ///   - slotFrames: frames per slot; a device cycle of up to this size takes one slot.
    ///   - pool: where the encoding runs (``/AudioCore/WorkerPool/shared`` by default).
    ///   - handler: gets each batch of packets, in order, on the job's pool thread. An error it throws stops the
    ///     encoding; ``finish()`` rethrows it (an error that is not an ``/AudioCore/AudioError`` is wrapped in
    ///     one).
    public init(
        encoder: AACEncoder, bufferedSeconds: Double = 2, slotFrames: Int = 1024, pool: WorkerPool = .shared,
        handler: @escaping Handler
    ) {
        precondition(slotFrames > 0 && bufferedSeconds > 0)
        self.encoder = encoder
        self.slotFrames = slotFrames
        let slots = max(2, Int((bufferedSeconds * encoder.settings.sampleRate / Double(slotFrames)).rounded(.up)))
        // bytesPerFrame counts one channel of a non-interleaved format: a slot holds every plane.
        let format = encoder.inputFormat
        ring = SlotRingBuffer(slotCount: slots, slotBytes: slotFrames * format.bytesPerFrame * format.bufferCount)
        slotPlaneStride = format.isInterleaved ? 0 : slotFrames * format.sampleType.bytesPerSample
        self.handler = handler
        self.pool = pool
    }

    deinit {
        job?.finish()
    }

    /// Frames pushed and queued.
    public var framesPushed: Int64 { pushedFrames.load(ordering: .relaxed) }
    /// Frames that found the ring full and were dropped.
    public var droppedFrames: Int64 { dropped.load(ordering: .relaxed) }
    /// Pushes (or parts of pushes) that found the ring full.
    public var overflows: Int { overflowCount.load(ordering: .relaxed) }
    /// Packets handed to the handler so far.
    public var packetsEncoded: Int { packetCount.load(ordering: .relaxed) }
    /// The error that stopped the worker, if one did.
    public var failure: AudioError? { failed.withLock { $0 } }
    /// Slots published and not yet encoded: how far the worker is behind. A producer that is not real-time (a
    /// file read as fast as possible) waits while this nears ``slotCount`` instead of overflowing.
    public var pendingSlots: Int { ring.committedCount }

    /// Adds the encoding to the pool.
    public func start() throws(AudioError) {
        guard job == nil, !finished else { throw AudioError(.invalidState, "the encoding worker has already run; make a new one") }
        let ring = ring
        job = try pool.add("AAC encoder") { [weak self] last in
            // Gone: finished in its deinit, with nothing more to encode.
            guard let self else { return .idle }
            // 16 slots a turn (the pool's other jobs wait meanwhile); the last turn encodes all.
            drain(upTo: last ? .max : 16)
            return ring.committedCount > 0 ? .again : .idle
        }
        jobThread.store(job!.threadIndex, ordering: .releasing)
    }

    /// Producer (real-time safe): queues `chunk` — the encoder's input format — whose first frame is at
    /// `sampleTime`. Returns false when some of it was dropped because the ring was full.
    @discardableResult
    public func push(_ chunk: RawBufferView, sampleTime: Int64) -> Bool {
        precondition(chunk.format == encoder.inputFormat, "push the encoder's input format, \(encoder.inputFormat)")
        let format = chunk.format
        let sampleBytes = format.sampleType.bytesPerSample
        return fill(frames: chunk.frameCount, sampleTime: sampleTime) { slot, at, from, n in
            if format.isInterleaved || format.channelCount == 1 {
                (slot + at * format.bytesPerFrame).copyMemory(
                    from: chunk.base + from * format.bytesPerFrame, byteCount: n * format.bytesPerFrame)
            } else {
                for c in 0..<format.channelCount {
                    (slot + c * slotPlaneStride + at * sampleBytes).copyMemory(
                        from: chunk.plane(c) + from * sampleBytes, byteCount: n * sampleBytes)
                }
            }
        }
    }

    /// Producer (real-time safe): queues Float32 planar audio (the graph's format), converting it to the encoder's
    /// input format on the way into the slot.
    @discardableResult
    public func push(_ buffer: BufferView, sampleTime: Int64) -> Bool {
        let format = encoder.inputFormat
        precondition(buffer.channelCount == format.channelCount, "the buffer must have \(format.channelCount) channels")
        let offsetBytes = format.isInterleaved ? format.bytesPerFrame : format.sampleType.bytesPerSample
        return fill(frames: buffer.frameCount, sampleTime: sampleTime) { slot, at, from, n in
            PCMConversion.encode(
                buffer.slice(from: from, frames: n),
                into: RawBufferView(format: format, base: slot + at * offsetBytes, planeStride: slotPlaneStride, frameCount: n))
        }
    }

    /// Packs `frames` into slots: the open slot first while the input continues it, then new ones. A slot is
    /// published (and the worker woken) when it is full or when the input jumps in time.
    @inline(__always)
    private func fill(
        frames: Int, sampleTime: Int64,
        _ copy: (_ slot: UnsafeMutableRawPointer, _ at: Int, _ from: Int, _ count: Int) -> Void
    ) -> Bool {
        if open != nil, sampleTime != openStart + Int64(openFrames) { publishOpenSlot() }
        var done = 0
        while done < frames {
            if open == nil {
                guard let slot = ring.beginWrite() else {
                    drop(frames - done)
                    return false
                }
                open = slot
                openStart = sampleTime + Int64(done)
                openFrames = 0
            }
            let n = min(slotFrames - openFrames, frames - done)
            copy(open!, openFrames, done, n)
            openFrames += n
            done += n
            pushedFrames.add(Int64(n), ordering: .relaxed)
            if openFrames == slotFrames { publishOpenSlot() }
        }
        return true
    }

    private func publishOpenSlot() {
        guard open != nil else { return }
        let format = encoder.inputFormat
        ring.commitWrite(
            byteCount: openFrames * format.bytesPerFrame * format.bufferCount, frames: openFrames,
            timeStamp: RenderTimeStamp(sampleTime: openStart))
        open = nil
        openFrames = 0
        // Before start() nothing runs the job: its first turn, at start, finds what was queued.
        let thread = jobThread.load(ordering: .acquiring)
        if thread >= 0 { pool.wake(thread: thread) }
    }

    private func drop(_ frames: Int) {
        dropped.add(Int64(frames), ordering: .relaxed)
        overflowCount.add(1, ordering: .relaxed)
    }

    /// Publishes the slot being filled, stops taking work once the ring is drained, flushes the encoder and hands
    /// the tail to the handler. Call it after the producer's last push.
    /// - Throws: the first error the encoder or the handler met.
    public func finish() throws(AudioError) {
        guard !finished else { return }
        finished = true
        publishOpenSlot()
        // The last turn drains the ring.
        job?.finish()
        job = nil
        if let failure { throw failure }
        do throws(AudioError) {
            try deliver(try encoder.flush())
        } catch {
            failed.withLock { $0 = error }
            throw error
        }
    }

    /// Encodes what the ring holds, `limit` slots at most (the pool's other jobs wait meanwhile); after an error,
    /// drops it and counts it (the failure is kept for finish()).
    private func drain(upTo limit: Int = .max) {
        let format = encoder.inputFormat
        var done = 0
        while done < limit, let slot = ring.peek() {
            defer { ring.release() }
            done += 1
            if failed.withLock({ $0 != nil }) {
                dropped.add(Int64(slot.frames), ordering: .relaxed)
                continue
            }
            let chunk = RawBufferView(
                format: format, base: UnsafeMutableRawPointer(mutating: slot.bytes.baseAddress!),
                planeStride: slotPlaneStride, frameCount: slot.frames)
            do throws(AudioError) {
                try deliver(try encoder.encode(chunk, sampleTime: slot.timeStamp.sampleTime))
            } catch {
                failed.withLock { $0 = error }
            }
        }
    }

    private func deliver(_ packets: [AACPacket]) throws(AudioError) {
        guard !packets.isEmpty else { return }
        do {
            try handler(packets)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.resourceUnavailable, "the packet handler failed: \(error)")
        }
        packetCount.add(packets.count, ordering: .relaxed)
    }
}
