#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CSystemCalls
import Synchronization

/// A thread of our own (POSIX), named, joined when its work is done. For readers, writers and workers that may
/// block — the render thread is the host's or the device's, never one of these.
public final class WorkerThread: Sendable {
    /// The name the thread was given (the system shows at most 15 bytes of it).
    public let name: String
    private let thread: pthread_t
    private let joined = Atomic<Bool>(false)

    private final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts `body` on a new thread named `name` (at most 15 bytes are shown by the system), named when this
    /// returns.
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
        // Named here too, so the name shows as soon as this returns (the thread names itself when it runs).
        name.withCString { la_name_thread(thread, $0) }
    }

    /// Waits until the thread's body has returned. One joiner: later calls return at once, and a call made while
    /// another is waiting does not wait.
    public func join() {
        guard !joined.exchange(true, ordering: .acquiringAndReleasing) else { return }
        pthread_join(thread, nil)
    }

    deinit {
        if !joined.load(ordering: .acquiring) { pthread_detach(thread) }
    }
}

/// Runs `body` on a thread of its own and waits for it at most `seconds`: for calls into libraries that can hang
/// for ever when the other end is gone (closing a stream of a sound server that died). Returns true when `body`
/// finished in time; otherwise the thread is left to finish (or hang) on its own, holding what `body` captured.
/// Control threads only.
public func runWithin(_ seconds: Double, name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    let completion = Completion()
    let worker: WorkerThread
    do {
        worker = try WorkerThread(name: name) {
            body()
            completion.condition.lock()
            completion.finished.store(true, ordering: .relaxed)
            completion.condition.broadcast()
            completion.condition.unlock()
        }
    } catch {
        body()  // no thread to be had: run it here, bounded or not
        return true
    }
    let deadline = monotonicNanoseconds() + UInt64(max(0, seconds) * 1e9)
    completion.condition.lock()
    while !completion.finished.load(ordering: .relaxed), monotonicNanoseconds() < deadline {
        completion.condition.wait(timeout: Double(deadline - monotonicNanoseconds()) / 1e9)
    }
    let finished = completion.finished.load(ordering: .relaxed)
    completion.condition.unlock()
    if finished { worker.join() }  // else the thread is detached when `worker` goes
    return finished
}

private final class Completion: Sendable {
    let condition = BlockingCondition()
    let finished = Atomic<Bool>(false)
}

/// A mutex with a condition variable, for threads that may block. Never use it on a render thread.
public final class BlockingCondition: @unchecked Sendable {
    // Unchecked Sendable: owns a pthread mutex and condvar, allocated once and never moved; the pthread calls are thread-safe
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    /// Creates an unlocked mutex and its condition variable.
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

    /// Takes the lock, waiting while another thread holds it.
    public func lock() { pthread_mutex_lock(mutex) }
    /// Releases the lock; call it on the thread that took it.
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// With the lock held: releases it, sleeps until a broadcast (or spuriously), and takes it again.
    public func wait() { pthread_cond_wait(condition, mutex) }
    /// Wakes every waiting thread; call with the lock held.
    public func broadcast() { pthread_cond_broadcast(condition) }

    fileprivate func timedWait(_ deadline: inout timespec) -> Int32 {
        pthread_cond_timedwait(condition, mutex, &deadline)
    }
}

extension BlockingCondition {
    /// With the lock held: like ``wait()``, but returns after `seconds` at most. Returns false on timeout.
    @discardableResult
    public func wait(timeout seconds: Double) -> Bool {
        var deadline = realtimeDeadline(after: seconds)
        return timedWait(&deadline) == 0
    }
}

/// CLOCK_REALTIME `seconds` from now, as the absolute deadline `pthread_cond_timedwait` and `sem_timedwait` take.
private func realtimeDeadline(after seconds: Double) -> timespec {
    var deadline = timespec()
    clock_gettime(CLOCK_REALTIME, &deadline)
    let total = Int(deadline.tv_nsec) + Int(seconds * 1e9)
    deadline.tv_sec += total / 1_000_000_000
    deadline.tv_nsec = total % 1_000_000_000
    return deadline
}

/// A wake-up a real-time thread can give without waiting: a POSIX semaphore. ``signal()`` is an atomic increment
/// plus a futex wake when someone sleeps on it — no lock, no allocation — so a render thread may call it to wake
/// the worker that drains its ring buffer.
public final class WakeSignal: @unchecked Sendable {
    // Unchecked Sendable: wraps a sem_t pointer; sem_post/sem_timedwait are thread-safe
    private let semaphore: UnsafeMutablePointer<sem_t>

    /// Creates a signal with no wake-up pending. Make it off the render thread (it allocates).
    public init() {
        semaphore = .allocate(capacity: 1)
        semaphore.initialize(to: sem_t())
        sem_init(semaphore, 0, 0)
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    /// Wakes one waiter (or the next call to ``wait(timeout:)``). Real-time safe.
    @inline(__always)
    public func signal() { sem_post(semaphore) }

    /// Sleeps until signalled or until `seconds` pass; returns false on timeout. Never on a render thread.
    @discardableResult
    public func wait(timeout seconds: Double) -> Bool {
        var deadline = realtimeDeadline(after: seconds)
        while true {
            if sem_timedwait(semaphore, &deadline) == 0 { return true }
            if errno != EINTR { return false }
        }
    }
}

/// The processors this process may run on (its affinity mask, so `taskset` and cpusets count; at least 1).
package var onlineProcessorCount: Int { Int(la_allowed_cpus()) }

/// CLOCK_MONOTONIC in nanoseconds: the host time of ``RenderTimeStamp``.
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Sleeps until the CLOCK_MONOTONIC time `nanoseconds` (absolute), so a paced loop does not drift.
public func sleepUntil(monotonicNanoseconds nanoseconds: UInt64) {
    var deadline = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
}

/// Real-time scheduling for the calling thread.
public enum RealtimeScheduling {
    /// Asks for SCHED_FIFO at `priority` (clamped to what the policy allows) for the calling thread. Returns nil
    /// when granted, or a sentence saying why not (no permission: no CAP_SYS_NICE and RLIMIT_RTPRIO too low).
    public static func promoteCurrentThread(priority: Int32) -> String? {
        let maximum = sched_get_priority_max(Int32(SCHED_FIFO))
        let minimum = sched_get_priority_min(Int32(SCHED_FIFO))
        var parameter = sched_param()
        parameter.sched_priority = max(minimum, min(maximum, priority))
        let result = pthread_setschedparam(pthread_self(), Int32(SCHED_FIFO), &parameter)
        guard result != 0 else { return nil }
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(14), &limit)  // RLIMIT_RTPRIO (14 on Linux; Glibc imports it under another name)
        return "real-time priority (SCHED_FIFO \(parameter.sched_priority)) was refused: "
            + String(cString: strerror(result))
            + " (RLIMIT_RTPRIO is \(limit.rlim_cur == rlim_t.max ? "unlimited" : String(limit.rlim_cur))); "
            + "the audio thread runs at normal priority and may glitch under load. "
            + "Grant it with CAP_SYS_NICE, or an rtprio limit in /etc/security/limits.d/"
    }

    /// True when the calling thread runs under SCHED_FIFO or SCHED_RR.
    public static var isCurrentThreadRealtime: Bool {
        var policy: Int32 = 0
        var parameter = sched_param()
        pthread_getschedparam(pthread_self(), &policy, &parameter)
        return policy == Int32(SCHED_FIFO) || policy == Int32(SCHED_RR)
    }
}

/// Names the calling thread (the system shows at most 15 bytes): for a thread another library started and the
/// library runs on, such as the publishers' event loop.
package func nameCurrentThread(_ name: String) {
    String(decoding: name.utf8.prefix(15), as: UTF8.self).withCString { la_set_thread_name($0) }
}
