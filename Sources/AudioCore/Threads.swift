#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CSystemCalls

/// A thread of our own (POSIX), named, joined when its work is done. For readers, writers and workers that may
/// block — the render thread is the host's or the device's, never one of these.
public final class WorkerThread: @unchecked Sendable {
    public let name: String
    private var thread: pthread_t
    private var joined = false

    private final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts `body` on a new thread named `name` (at most 15 bytes are shown by the system).
    /// - Throws: ``AudioError`` `.resourceUnavailable` when the system refuses a new thread.
    public init(name: String, _ body: @escaping @Sendable () -> Void) throws(AudioError) {
        self.name = name
        let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        #if canImport(Glibc)
        var handle = pthread_t()
        #else
        var handle: pthread_t?
        #endif
        let result = pthread_create(
            &handle, nil,
            { context in
                let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
                start.name.withCString { la_set_thread_name($0) }
                start.body()
                return nil
            }, start)
        guard result == 0 else {
            Unmanaged<Start>.fromOpaque(start).release()
            throw AudioError(
                .resourceUnavailable, "cannot start thread '\(name)': \(String(cString: strerror(result)))")
        }
        #if canImport(Glibc)
        thread = handle
        #else
        thread = handle!
        #endif
    }

    /// Waits until the thread's body has returned. Call once; later calls return at once.
    public func join() {
        guard !joined else { return }
        joined = true
        pthread_join(thread, nil)
    }

    deinit {
        if !joined { pthread_detach(thread) }
    }
}

/// A mutex with a condition variable, for threads that may block. Never use it on a render thread.
public final class BlockingCondition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// With the lock held: releases it, sleeps until a broadcast (or spuriously), and takes it again.
    public func wait() { pthread_cond_wait(condition, mutex) }
    /// Wakes every waiting thread; call with the lock held.
    public func broadcast() { pthread_cond_broadcast(condition) }
}
