import Synchronization

/// The standard library's `Mutex` with critical sections ThreadSanitizer can see: every lock in LiveAudio is one.
///
/// `Mutex` waits in the kernel when the lock is contended (a futex), in `libswiftSynchronization`, which sanitizer
/// builds do not instrument: ThreadSanitizer then sees two threads touch the protected value with nothing ordering
/// them, and reports a race that is none (four threads appending to an array under one `Mutex` are enough). Here each
/// critical section also begins with an acquiring load of an atomic and ends with a releasing increment of it, which
/// the sanitizer does see; they add two uncontended atomic operations to a lock that is never taken on a render
/// thread anyway.
public struct Locked<Value: ~Copyable>: ~Copyable, Sendable {
    @usableFromInline let mutex: Mutex<Value>
    @usableFromInline let order = Atomic<Int>(0)

    /// Creates a lock protecting `initialValue`.
    public init(_ initialValue: consuming sending Value) {
        mutex = Mutex(initialValue)
    }

    /// Runs `body` with the value, the lock held (as `Mutex.withLock`).
    @inlinable
    public borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
            _ = order.load(ordering: .acquiring)
            defer { order.add(1, ordering: .releasing) }
            return try body(&value)
        }
    }
}

/// A weak reference any thread may read and set, under a lock: a link that must not keep its target alive (a stream
/// back to its source, a worker's handler back to its owner). Never on a render thread.
public final class WeakReference<Object: AnyObject & Sendable>: Sendable {
    private struct Box { weak var value: Object? }
    private let box = Locked(Box())

    /// Creates a reference to nothing: ``value`` is nil until set.
    public init() {}

    /// The target, or nil when none was set or it has been deallocated. Reading and setting take a lock: any
    /// thread but a render thread.
    public var value: Object? {
        get { box.withLock { $0.value } }
        set { box.withLock { $0.value = newValue } }
    }
}
