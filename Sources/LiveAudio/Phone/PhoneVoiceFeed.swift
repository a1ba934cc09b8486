import AudioCore
import Synchronization

/// Placed audio from the network to the device thread: chunks of mono samples, each with the room sample time of its
/// first frame, through a fixed ring of slots — one producer (the thread that decodes a phone's packets), one
/// consumer (the device thread, in ``PhoneVoiceSource``). Neither side waits, locks or allocates: a full feed refuses
/// a chunk (the producer counts it), an empty one gives nothing.
///
/// Thread safety: ``push(position:samples:)`` from the producer only, ``pop(_:)`` from the consumer only.
public final class PhoneVoiceFeed: @unchecked Sendable {
    // Unchecked Sendable: the slots' memory is written by the producer before `tail` is released and read by the
    // consumer after acquiring it (and the other way for `head`): the ring's two indices order every access.
    /// Frames a slot holds; longer chunks are pushed in several slots.
    public static let slotFrames = 1024
    /// Slots in the ring.
    public let slotCount: Int
    private let samples: UnsafeMutablePointer<Float>
    private let positions: UnsafeMutablePointer<Int64>
    private let counts: UnsafeMutablePointer<Int>
    private let head = Atomic<Int>(0)  // next slot the consumer reads (monotonic)
    private let tail = Atomic<Int>(0)  // next slot the producer writes (monotonic)

    /// A feed of `slotCount` slots (the default holds 2.7 s at 48 kHz in full slots; a phone's 20 ms packets take a
    /// slot each, 2.5 s of them).
    public init(slotCount: Int = 128) {
        precondition(slotCount >= 2)
        self.slotCount = slotCount
        samples = .allocate(capacity: slotCount * Self.slotFrames)
        samples.initialize(repeating: 0, count: slotCount * Self.slotFrames)
        positions = .allocate(capacity: slotCount)
        positions.initialize(repeating: 0, count: slotCount)
        counts = .allocate(capacity: slotCount)
        counts.initialize(repeating: 0, count: slotCount)
    }

    deinit {
        samples.deallocate()
        positions.deallocate()
        counts.deallocate()
    }

    /// Chunks waiting (exact on the consumer's side, a bound elsewhere).
    public var waiting: Int { tail.load(ordering: .acquiring) - head.load(ordering: .acquiring) }

    /// Pushes `samples`, its first frame at room sample time `position`; returns the frames taken (fewer when the
    /// feed is full: the rest is lost, and the caller counts it). Producer only.
    @discardableResult
    public func push(position: Int64, samples source: UnsafeBufferPointer<Float>) -> Int {
        var done = 0
        var t = tail.load(ordering: .relaxed)
        while done < source.count {
            guard t - head.load(ordering: .acquiring) < slotCount else { break }
            let slot = t % slotCount
            let n = min(Self.slotFrames, source.count - done)
            (samples + slot * Self.slotFrames).update(from: source.baseAddress! + done, count: n)
            positions[slot] = position + Int64(done)
            counts[slot] = n
            done += n
            t += 1
            tail.store(t, ordering: .releasing)
        }
        return done
    }

    /// Takes the oldest chunk, if any, handing `body` its position and samples (valid during the call). Consumer
    /// only; never allocates.
    @inline(__always)
    public func pop(_ body: (Int64, UnsafeBufferPointer<Float>) -> Void) -> Bool {
        let h = head.load(ordering: .relaxed)
        guard h < tail.load(ordering: .acquiring) else { return false }
        let slot = h % slotCount
        body(positions[slot], UnsafeBufferPointer(start: samples + slot * Self.slotFrames, count: counts[slot]))
        head.store(h + 1, ordering: .releasing)
        return true
    }
}
