import Synchronization

/// A single-producer, single-consumer ring of multi-channel Float32 frames with fixed capacity.
///
/// One thread writes, one thread reads; neither ever waits, allocates or locks. A full ring takes fewer frames
/// than offered and an empty one gives fewer than asked: the caller counts that, never waits on it.
///
/// Thread safety: ``write(_:)`` from the producer thread only, ``read(into:)`` from the consumer thread only;
/// ``availableToRead``, ``availableToWrite`` and ``reset()`` as documented on each.
public final class FrameRingBuffer: Sendable {
    /// Channels per frame. ``write(_:)`` takes this many channels or mono (copied into every channel);
    /// ``read(into:)`` fills any number, repeating the last channel into extra ones.
    public let channelCount: Int
    /// The most frames the ring holds.
    public let capacity: Int
    private let storage: PCMBuffer
    // Monotonic frame counters; index = counter % capacity.
    private let written = Atomic<Int>(0)
    private let consumed = Atomic<Int>(0)

    /// Creates an empty ring, allocating its storage: make it on a control thread, before either side runs.
    /// - Parameters:
    ///   - channelCount: channels per frame, at least 1.
    ///   - capacity: the most frames the ring holds, at least 1.
    public init(channelCount: Int, capacity: Int) {
        precondition(capacity > 0)
        self.channelCount = channelCount
        self.capacity = capacity
        storage = PCMBuffer(channelCount: channelCount, capacity: capacity)
    }

    /// Frames the consumer can read now (exact for the consumer, a lower bound elsewhere).
    public var availableToRead: Int {
        written.load(ordering: .acquiring) - consumed.load(ordering: .acquiring)
    }

    /// Frames the producer can write now (exact for the producer, a lower bound elsewhere).
    public var availableToWrite: Int { capacity - availableToRead }

    /// Writes as many frames of `source` as fit; returns how many. Producer thread only.
    @discardableResult
    public func write(_ source: BufferView) -> Int {
        let w = written.load(ordering: .relaxed)
        let r = consumed.load(ordering: .acquiring)
        let count = min(source.frameCount, capacity - (w - r))
        guard count > 0 else { return 0 }
        copy(count: count, ringStart: w % capacity) { ring, offset, frames in
            for c in 0..<channelCount {
                (ring.base + c * ring.channelStride).update(
                    from: source[source.channelCount == 1 ? 0 : c].baseAddress! + offset, count: frames)
            }
        }
        written.store(w + count, ordering: .releasing)
        return count
    }

    /// Reads up to `destination.frameCount` frames; returns how many. Consumer thread only.
    @discardableResult
    public func read(into destination: BufferView) -> Int {
        let r = consumed.load(ordering: .relaxed)
        let w = written.load(ordering: .acquiring)
        let count = min(destination.frameCount, w - r)
        guard count > 0 else { return 0 }
        copy(count: count, ringStart: r % capacity) { ring, offset, frames in
            for c in 0..<destination.channelCount {
                (destination[c].baseAddress! + offset).update(
                    from: ring.base + min(c, channelCount - 1) * ring.channelStride, count: frames)
            }
        }
        consumed.store(r + count, ordering: .releasing)
        return count
    }

    /// Frames written since the ring was made or reset (exact for the producer; a lower bound elsewhere, and
    /// loading it acquires what the producer did before writing them).
    public var framesWritten: Int { written.load(ordering: .acquiring) }

    /// Frames read or discarded since the ring was made or reset (exact for the consumer).
    public var framesRead: Int { consumed.load(ordering: .acquiring) }

    /// Drops up to `count` of the oldest frames unread; returns how many. Consumer thread only.
    @discardableResult
    public func discard(_ count: Int) -> Int {
        let r = consumed.load(ordering: .relaxed)
        let n = min(max(count, 0), written.load(ordering: .acquiring) - r)
        if n > 0 { consumed.store(r + n, ordering: .releasing) }
        return n
    }

    /// Empties the ring. Only while neither side is running.
    public func reset() {
        written.store(0, ordering: .releasing)
        consumed.store(0, ordering: .releasing)
    }

    /// Calls `body` once or twice (when the region wraps) with the ring region as a view, the offset into the
    /// caller's buffer, and the frame count.
    @inline(__always)
    private func copy(count: Int, ringStart: Int, _ body: (BufferView, Int, Int) -> Void) {
        let first = min(count, capacity - ringStart)
        let view = storage.view(frames: capacity)
        body(view.slice(from: ringStart, frames: first), 0, first)
        if first < count { body(view.slice(from: 0, frames: count - first), first, count - first) }
    }
}

/// A single-producer, single-consumer ring of fixed-size slots, each holding up to `slotBytes` bytes and a time
/// stamp: how a real-time thread hands whole buffers (captured audio in a client format) to a worker.
///
/// The producer ``beginWrite()``s a slot, fills it and ``commitWrite(byteCount:frames:timeStamp:)``s it; when
/// every slot is taken, ``beginWrite()`` returns nil and the producer counts an overflow — it never waits. The
/// consumer reads committed slots in order with ``peek()`` and frees them with ``release()``.
public final class SlotRingBuffer: @unchecked Sendable {
    // Unchecked Sendable: SPSC: a slot's bytes, length and stamp written before `written` (releasing), read after it (acquiring)
    /// One committed slot, seen by the consumer; valid until ``SlotRingBuffer/release()``.
    public struct Slot {
        /// The slot's committed bytes: the `byteCount` given to
        /// ``SlotRingBuffer/commitWrite(byteCount:frames:timeStamp:)``.
        public let bytes: UnsafeRawBufferPointer
        /// The frame count given when the slot was committed.
        public let frames: Int
        /// The time stamp given when the slot was committed.
        public let timeStamp: RenderTimeStamp
    }

    /// Number of slots: the most buffers committed and not yet released.
    public let slotCount: Int
    /// Bytes each slot can hold.
    public let slotBytes: Int
    private let storage: UnsafeMutableRawPointer
    private let lengths: UnsafeMutablePointer<Int>
    private let frameCounts: UnsafeMutablePointer<Int>
    private let stamps: UnsafeMutablePointer<RenderTimeStamp>
    private let written = Atomic<Int>(0)
    private let consumed = Atomic<Int>(0)

    /// Creates a ring of free slots, allocating their zeroed, 16-byte aligned storage: make it on a control thread,
    /// before either side runs.
    /// - Parameters:
    ///   - slotCount: number of slots, at least 1.
    ///   - slotBytes: bytes each slot can hold, at least 1.
    public init(slotCount: Int, slotBytes: Int) {
        precondition(slotCount > 0 && slotBytes > 0)
        self.slotCount = slotCount
        self.slotBytes = slotBytes
        storage = .allocate(byteCount: slotCount * slotBytes, alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: slotCount * slotBytes)
        lengths = .allocate(capacity: slotCount)
        lengths.initialize(repeating: 0, count: slotCount)
        frameCounts = .allocate(capacity: slotCount)
        frameCounts.initialize(repeating: 0, count: slotCount)
        stamps = .allocate(capacity: slotCount)
        stamps.initialize(repeating: RenderTimeStamp(sampleTime: 0), count: slotCount)
    }

    deinit {
        storage.deallocate()
        lengths.deallocate()
        frameCounts.deallocate()
        stamps.deallocate()
    }

    /// Slots committed and not yet released (exact for the consumer, a lower bound elsewhere).
    public var committedCount: Int { written.load(ordering: .acquiring) - consumed.load(ordering: .acquiring) }

    /// Producer: the next free slot's memory (`slotBytes` long), or nil when every slot is taken.
    @inline(__always)
    public func beginWrite() -> UnsafeMutableRawPointer? {
        let w = written.load(ordering: .relaxed)
        guard w - consumed.load(ordering: .acquiring) < slotCount else { return nil }
        return storage + (w % slotCount) * slotBytes
    }

    /// Producer: publishes the slot ``beginWrite()`` returned.
    @inline(__always)
    public func commitWrite(byteCount: Int, frames: Int, timeStamp: RenderTimeStamp) {
        let w = written.load(ordering: .relaxed)
        let index = w % slotCount
        lengths[index] = byteCount
        frameCounts[index] = frames
        stamps[index] = timeStamp
        written.store(w + 1, ordering: .releasing)
    }

    /// Consumer: the oldest committed slot, or nil when there is none.
    public func peek() -> Slot? {
        let r = consumed.load(ordering: .relaxed)
        guard written.load(ordering: .acquiring) > r else { return nil }
        let index = r % slotCount
        return Slot(
            bytes: UnsafeRawBufferPointer(start: storage + index * slotBytes, count: lengths[index]),
            frames: frameCounts[index], timeStamp: stamps[index])
    }

    /// Consumer: frees the slot ``peek()`` returned.
    public func release() {
        consumed.store(consumed.load(ordering: .relaxed) + 1, ordering: .releasing)
    }

    /// Empties the ring. Only while neither side is running.
    public func reset() {
        written.store(0, ordering: .releasing)
        consumed.store(0, ordering: .releasing)
    }
}
