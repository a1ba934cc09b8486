import CSystemCalls
import Synchronization

/// Background work shared by one thread: recorders' writers, encoders' queues — jobs that each wake now and then,
/// do a little and wait again (in the spirit of JUCE's `TimeSliceThread`). A process with four stem recorders and
/// an encoder runs one such thread, not five.
///
/// A job is a closure the pool's thread calls in turns: it does what is waiting (drains its ring, writes a file)
/// and says when it wants its next turn (``Turn``). ``Job/wake()`` — a semaphore post, real-time safe — asks for
/// a turn at once; without it each job is called at least every 50 ms. ``Job/finish()`` has the pool make the
/// job's last call (`last` true: drain everything and return) and waits for it. The thread starts with the first
/// job and ends when the last has finished, so an idle process keeps no thread for it.
///
/// A job must not wait for long inside its turn (it delays the others) and must not call ``Job/finish()`` on
/// itself. Jobs that may block for seconds (network connects, file reads that must keep pace with a device) keep
/// threads of their own.
public final class WorkerPool: Sendable {
    /// What a job wants after its turn.
    public enum Turn: Sendable, Equatable {
        /// Nothing left: call again when woken (or within 50 ms).
        case idle
        /// More is waiting: call again as soon as the others have had their turn.
        case again
        /// Not before `seconds` from now (unless finished meanwhile).
        case after(Double)
    }

    /// One job: its closure, and how it is woken and finished.
    public final class Job: Sendable {
        public let pool: WorkerPool
        public let name: String
        fileprivate let body: @Sendable (_ last: Bool) -> Turn
        fileprivate let finishRequested = Atomic<Bool>(false)
        fileprivate let ended = WakeSignal()
        fileprivate let isEnded = Atomic<Bool>(false)
        fileprivate let finishing = Mutex(false)
        /// Monotonic nanoseconds before which an ``Turn/after(_:)`` keeps the job from its turn.
        fileprivate let due = Atomic<UInt64>(0)

        fileprivate init(pool: WorkerPool, name: String, body: @escaping @Sendable (Bool) -> Turn) {
            self.pool = pool
            self.name = name
            self.body = body
        }

        /// Asks for a turn at once: an atomic increment and, when the thread sleeps, a futex wake — no lock, no
        /// allocation. Real-time safe.
        @inline(__always)
        public func wake() { pool.wake() }

        /// Has the pool make the job's last call (`last` true) and waits for it; the pool forgets the job after.
        /// Idempotent: a second caller waits for the first. Control threads, or another job on the pool's thread (an
        /// object whose last reference a job dropped, finishing its job in its deinit): there the last call is made
        /// at once. Never from the job's own turn.
        public func finish() {
            finishing.withLock { done in
                guard !done else { return }
                done = true
                if pool.threadID.load(ordering: .relaxed) == la_thread_id() {
                    // Between the turns of the pool's other jobs: this one is not running now.
                    _ = body(true)
                    pool.forget(self)
                    return
                }
                finishRequested.store(true, ordering: .releasing)
                pool.wake()
                while !isEnded.load(ordering: .acquiring) { ended.wait(timeout: 1) }
            }
        }

        /// True once the last call has returned.
        public var hasFinished: Bool { isEnded.load(ordering: .acquiring) }
    }

    /// The pool most of the library's jobs share: its thread is `la-work`.
    public static let shared = WorkerPool(name: "la-work")

    public let name: String
    private let wakeSignal = WakeSignal()
    /// The kernel's id of the thread running the jobs now (0: none).
    fileprivate let threadID = Atomic<Int>(0)
    private struct State {
        var jobs: [Job] = []
        var running = false
        var thread: WorkerThread?
    }
    private let state = Mutex(State())

    /// - Parameter name: the thread's name (at most 15 bytes are shown).
    public init(name: String) { self.name = name }

    /// Wakes the pool's thread: every job has a turn. Real-time safe (a semaphore post).
    @inline(__always)
    public func wake() { wakeSignal.signal() }

    /// Takes a job off the list once its last call has returned.
    fileprivate func forget(_ job: Job) {
        state.withLock { s in s.jobs.removeAll { $0 === job } }
        job.isEnded.store(true, ordering: .releasing)
        job.ended.signal()
    }

    /// Jobs added and not finished.
    public var jobCount: Int { state.withLock { $0.jobs.count } }

    /// Adds a job; its first turn comes at once. Starts the pool's thread if it is not running.
    /// - Parameters:
    ///   - name: what the job is, for errors and debugging.
    ///   - body: called on the pool's thread, one call at a time: `last` is true for the final call, made once
    ///     ``Job/finish()`` is asked for.
    /// - Throws: ``AudioError`` `.resourceUnavailable` when the thread cannot be started.
    public func add(_ name: String, _ body: @escaping @Sendable (_ last: Bool) -> Turn) throws(AudioError) -> Job {
        let job = Job(pool: self, name: name, body: body)
        try state.withLock { (s: inout State) throws(AudioError) in
            if !s.running {
                // A thread that found no jobs has ended or is about to (it no longer looks at the list).
                s.thread = try WorkerThread(name: self.name) { [self] in run() }
                s.running = true
            }
            s.jobs.append(job)
        }
        wakeSignal.signal()
        return job
    }

    private func run() {
        threadID.store(la_thread_id(), ordering: .relaxed)
        while true {
            guard let jobs = state.withLock({ s -> [Job]? in
                if s.jobs.isEmpty {
                    s.running = false
                    threadID.store(0, ordering: .relaxed)
                    // Released here, on this thread, which it detaches: nothing joins a pool's thread.
                    s.thread = nil
                    return nil
                }
                return s.jobs
            }) else { return }
            var again = false
            var wait: UInt64 = 50_000_000
            let now = monotonicNanoseconds()
            for job in jobs where !job.isEnded.load(ordering: .acquiring) {
                if job.finishRequested.load(ordering: .acquiring) {
                    _ = job.body(true)
                    forget(job)
                    continue
                }
                let due = job.due.load(ordering: .relaxed)
                if due > now {
                    wait = min(wait, due - now)
                    continue
                }
                switch job.body(false) {
                case .idle: break
                case .again: again = true
                case .after(let seconds):
                    let delay = UInt64(max(0, seconds) * 1e9)
                    job.due.store(monotonicNanoseconds() + delay, ordering: .relaxed)
                    wait = min(wait, delay)
                }
            }
            if !again { wakeSignal.wait(timeout: Double(wait) / 1e9) }
        }
    }
}
