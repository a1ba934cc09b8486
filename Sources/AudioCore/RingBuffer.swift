import Synchronization

/// A single-producer, single-consumer ring of multi-channel Float32 frames with fixed capacity.
///
/// One thread writes, one thread reads; neither ever waits, allocates or locks. A full ring takes fewer frames
/// than offered and an empty one gives fewer than asked: the caller counts that, never waits on it.
///
/// Thread safety: ``write(_:)`` from the producer thread only, ``read(into:)`` from the consumer thread only;
/// ``availableToRead``, ``availableToWrite`` and ``reset()`` as documented on each.
public final class FrameRingBuffer: @unchecked Sendable {
    public let channelCount: Int
    public let capacity: Int
    private let storage: PCMBuffer
    // Monotonic frame counters; index = counter % capacity.
    private let written = Atomic<Int>(0)
    private let consumed = Atomic<Int>(0)

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
