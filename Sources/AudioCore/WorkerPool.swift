import CSystemCalls
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Background work shared by a few threads: recorders' writers, encoders' queues — jobs that each wake now and
/// then, do a little and wait again (in the spirit of JUCE's `TimeSliceThread`). A process with four stem recorders
/// and an encoder runs one or two such threads, not five.
///
/// A job is a closure a pool thread calls in turns: it does what is waiting (drains its ring, writes a file) and
/// says when it wants its next turn (``Turn``). ``Job/wake()`` — a semaphore post, real-time safe — asks for a turn
/// at once; without it each job is called at least every 50 ms. ``Job/finish()`` has the pool make the job's last
/// call (`last` true: drain everything and return) and waits for it.
///
/// The pool has up to one thread per processor (or as many as it is made with; ``shared``: two at most), each
/// serving its own list of jobs: a job is given, when it is added, to the thread with the fewest, and stays there, so
/// its calls never overlap. A thread starts with its first job and ends when its last has finished, so an idle
/// process keeps none. A hundred encoders, more than one core's work, are spread over the threads rather than queued
/// behind each other on one.
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
        /// The pool that runs the job.
        public let pool: WorkerPool
        /// What the job is, as given to ``WorkerPool/add(_:_:)``: for errors and debugging.
        public let name: String
        /// Which of the pool's threads runs the job: for ``WorkerPool/wake(thread:)``.
        public let threadIndex: Int
        fileprivate let lane: Lane
        fileprivate let body: @Sendable (_ last: Bool) -> Turn
        fileprivate let finishRequested = Atomic<Bool>(false)
        fileprivate let ended = WakeSignal()
        fileprivate let isEnded = Atomic<Bool>(false)
        fileprivate let finishing = Mutex(false)
        /// Monotonic nanoseconds before which an ``Turn/after(_:)`` keeps the job from its turn.
        fileprivate let due = Atomic<UInt64>(0)

        fileprivate init(pool: WorkerPool, lane: Lane, index: Int, name: String, body: @escaping @Sendable (Bool) -> Turn) {
            self.pool = pool
            self.lane = lane
            threadIndex = index
            self.name = name
            self.body = body
        }

        /// Asks for a turn at once: an atomic increment and, when the job's thread sleeps, a futex wake — no lock,
        /// no allocation. Real-time safe.
        @inline(__always)
        public func wake() { lane.wake() }

        /// Has the pool make the job's last call (`last` true) and waits for it; the pool forgets the job after.
        /// Idempotent: a second caller waits for the first. Control threads, or another job (an object whose last
        /// reference a job dropped, finishing its job in its deinit): from a job on the same thread the last call
        /// is made at once; from a job on another of the pool's threads it waits for that thread's next pass (two
        /// threads' jobs finishing each other's at the same moment would wait for each other: don't). Never from the
        /// job's own turn.
        public func finish() {
            finishing.withLock { done in
                guard !done else { return }
                done = true
                if lane.threadID.load(ordering: .relaxed) == la_thread_id() {
                    // Between the turns of the thread's other jobs: this one is not running now.
                    _ = body(true)
                    lane.forget(self)
                    return
                }
                finishRequested.store(true, ordering: .releasing)
                lane.wake()
                while !isEnded.load(ordering: .acquiring) { ended.wait(timeout: 1) }
            }
        }

        /// True once the last call has returned.
        public var hasFinished: Bool { isEnded.load(ordering: .acquiring) }
    }

    /// The pool most of the library's jobs share: its threads are `la-work`, one per processor and
    /// ``sharedThreadLimit`` at most.
    public static let shared = WorkerPool(name: "la-work", threads: min(onlineProcessorCount, sharedThreadLimit))

    /// The most threads ``shared`` runs, whatever the core count: 2, so the library's thread count stays the same
    /// on a 2-core laptop and a 64-core server (docs/architecture.md counts them; a karaoke room keeps a pool of one
    /// thread of its own). A program that needs more jobs in parallel than that (hundreds of encoders) makes a pool of
    /// its own and hands it to what takes one (a unit's or an encoder's `pool:`, a live stream's `workerPool`).
    public static let sharedThreadLimit = 2

    /// The name of the pool's threads (the system shows at most 15 bytes of it).
    public let name: String
    private let lanes: [Lane]

    /// Creates a pool; it starts no thread until a job is added.
    /// - Parameters:
    ///   - name: the threads' name (at most 15 bytes are shown).
    ///   - threads: the most threads the pool runs; nil: one per processor online.
    public init(name: String, threads: Int? = nil) {
        self.name = name
        let count = max(1, threads ?? onlineProcessorCount)
        lanes = (0..<count).map { _ in Lane(name: name) }
    }

    /// Wakes the pool's thread `index` (a job's ``Job/threadIndex``): each of its jobs has a turn. Real-time safe.
    @inline(__always)
    public func wake(thread index: Int) { lanes[index].wake() }

    /// Jobs added and not finished.
    public var jobCount: Int { lanes.reduce(0) { $0 + $1.jobCount } }

    /// Adds a job to the thread with the fewest; its first turn comes at once. Starts that thread if it is not
    /// running.
    /// - Parameters:
    ///   - name: what the job is, for errors and debugging.
    ///   - body: called on the job's thread, one call at a time: `last` is true for the final call, made once
    ///     ``Job/finish()`` is asked for.
    /// - Throws: ``AudioError`` `.resourceUnavailable` when the thread cannot be started.
    public func add(_ name: String, _ body: @escaping @Sendable (_ last: Bool) -> Turn) throws(AudioError) -> Job {
        var index = 0
        var fewest = Int.max
        for (i, candidate) in lanes.enumerated() {
            let count = candidate.jobCount
            if count < fewest {
                fewest = count
                index = i
            }
        }
        let lane = lanes[index]
        let job = Job(pool: self, lane: lane, index: index, name: name, body: body)
        try lane.add(job)
        return job
    }
}

/// One thread of a ``WorkerPool`` and the jobs it serves.
private final class Lane: Sendable {
    let name: String
    private let wakeSignal = WakeSignal()
    /// The kernel's id of the thread running the jobs now (0: none).
    let threadID = Atomic<Int>(0)
    /// True while the thread runs: a wake for a lane without one posts nothing (posts would pile up in the
    /// semaphore and make the next thread loop through them).
    private let active = Atomic<Bool>(false)
    private struct State {
        var jobs: [WorkerPool.Job] = []
        var running = false
        var thread: WorkerThread?
    }
    private let state = Mutex(State())

    init(name: String) { self.name = name }

    @inline(__always)
    func wake() { if active.load(ordering: .relaxed) { wakeSignal.signal() } }

    var jobCount: Int { state.withLock { $0.jobs.count } }

    func add(_ job: WorkerPool.Job) throws(AudioError) {
        try state.withLock { (s: inout State) throws(AudioError) in
            if !s.running {
                // A thread that found no jobs has ended or is about to (it no longer looks at the list).
                s.thread = try WorkerThread(name: self.name) { [self] in run() }
                s.running = true
                active.store(true, ordering: .relaxed)
            }
            s.jobs.append(job)
        }
        wakeSignal.signal()
    }

    /// Takes a job off the list once its last call has returned.
    func forget(_ job: WorkerPool.Job) {
        state.withLock { s in s.jobs.removeAll { $0 === job } }
        job.isEnded.store(true, ordering: .releasing)
        job.ended.signal()
    }

    private func run() {
        threadID.store(la_thread_id(), ordering: .relaxed)
        while true {
            guard let jobs = state.withLock({ s -> [WorkerPool.Job]? in
                if s.jobs.isEmpty {
                    s.running = false
                    active.store(false, ordering: .relaxed)
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
