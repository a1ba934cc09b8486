import AudioCore
import Synchronization

/// Hands compiled render schedules from the control thread to the render thread without locks, and hands the
/// replaced ones back so that they are freed on the control thread, never on the render thread.
///
/// The control thread ``publish(_:)``es a retained schedule into a one-slot mailbox (replacing, and itself
/// releasing, one the render thread never picked up). At the start of each cycle the render thread ``acquire()``s:
/// if the mailbox holds a schedule it becomes the active one, and the previous active one goes into a fixed-size
/// retire queue that the control thread drains in ``collect()``. The render thread never releases the last
/// reference to anything, so nothing is deallocated on it.
final class ScheduleExchange<Schedule: AnyObject>: Sendable {
    private let mailbox = Atomic<Int>(0)  // bit pattern of a retained Unmanaged<Schedule>, 0 when empty
    private let active = RenderThreadBound<Unmanaged<Schedule>?>(nil)
    private let retired: PointerQueue

    init(retireCapacity: Int = 64) {
        retired = PointerQueue(capacity: retireCapacity)
    }

    deinit {
        collect()
        if let a = active.whileStopped { a.release() }
        let p = mailbox.exchange(0, ordering: .acquiring)
        if p != 0 { Unmanaged<Schedule>.fromOpaque(UnsafeRawPointer(bitPattern: p)!).release() }
    }

    /// Control thread: offers `schedule` to the render thread.
    func publish(_ schedule: Schedule) {
        collect()
        let p = Int(bitPattern: Unmanaged.passRetained(schedule).toOpaque())
        let old = mailbox.exchange(p, ordering: .acquiringAndReleasing)
        if old != 0 { Unmanaged<Schedule>.fromOpaque(UnsafeRawPointer(bitPattern: old)!).release() }
    }

    /// Control thread: frees schedules the render thread has retired.
    func collect() {
        while let p = retired.pop() { Unmanaged<Schedule>.fromOpaque(p).release() }
    }

    /// Render thread: the schedule to run this cycle, swapping in a newly published one first.
    /// The result is valid until the next `acquire` on this thread.
    @inline(__always)
    func acquire() -> Unmanaged<Schedule>? {
        if mailbox.load(ordering: .relaxed) != 0, retired.hasRoom {
            let p = mailbox.exchange(0, ordering: .acquiringAndReleasing)
            if p != 0 {
                if let a = active.onRenderThread { retired.push(a.toOpaque()) }
                active.onRenderThread = Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: p)!)
            }
        }
        return active.onRenderThread
    }

    /// Control thread, while no render call is in progress: the active schedule is retired at once.
    func deactivate() {
        if let a = active.whileStopped {
            active.whileStopped = nil
            a.release()
        }
        let p = mailbox.exchange(0, ordering: .acquiring)
        if p != 0 { Unmanaged<Schedule>.fromOpaque(UnsafeRawPointer(bitPattern: p)!).release() }
        collect()
    }
}

/// A fixed-capacity single-producer/single-consumer queue of pointers (render thread → control thread).
final class PointerQueue: @unchecked Sendable {
    // Unchecked Sendable: SPSC: a slot is written before `tail` (releasing) and read after it (acquiring)
    private let slots: UnsafeMutablePointer<UnsafeRawPointer?>
    private let capacity: Int
    private let head = Atomic<Int>(0)  // next to pop (consumer)
    private let tail = Atomic<Int>(0)  // next to push (producer)

    init(capacity: Int) {
        self.capacity = capacity
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: nil, count: capacity)
    }

    deinit { slots.deallocate() }

    var hasRoom: Bool { tail.load(ordering: .relaxed) - head.load(ordering: .acquiring) < capacity }

    /// Producer only; the caller checked ``hasRoom``.
    func push(_ p: UnsafeRawPointer) {
        let t = tail.load(ordering: .relaxed)
        slots[t % capacity] = p
        tail.store(t + 1, ordering: .releasing)
    }

    /// Consumer only.
    func pop() -> UnsafeRawPointer? {
        let h = head.load(ordering: .relaxed)
        guard h < tail.load(ordering: .acquiring) else { return nil }
        let p = slots[h % capacity]
        head.store(h + 1, ordering: .releasing)
        return p
    }
}
