import AudioCore
import NIOCore

/// A task executor with a thread of its own, on which every publisher's tasks run: the connection loop, the
/// sender, the statistics ticker.
///
/// Swift's default executor is a cooperative pool with one thread per core. A program that blocks a pool thread
/// (a synchronous wait, a long computation without a suspension point) holds back every task behind it, and on a
/// two-core machine two such calls stop the pool. A live stream cannot wait for that: its frames would queue up,
/// its timeouts fire. The publishers' tasks therefore prefer this executor (`Task(executorPreference:)`,
/// inherited by their child tasks); NIO's event loops do the socket work as before.
///
/// The work per frame is small (framing a few hundred bytes into chunks), so one thread serves many streams: the
/// benchmark in docs/benchmarks.md publishes 100 from one process.
final class NetworkExecutor: TaskExecutor, @unchecked Sendable {
    // Unchecked Sendable: `jobs` under `condition`; `thread` set once in init, before any enqueue, only read after
    /// The executor every publisher uses.
    static let shared = NetworkExecutor(name: "la-rtmp")

    private let condition = BlockingCondition()
    /// Guarded by `condition`.
    private var jobs = CircularBuffer<UnownedJob>(initialCapacity: 256)
    /// Nil when the system refused a thread: jobs then go to the default executor.
    private var thread: WorkerThread?

    init(name: String) {
        thread = try? WorkerThread(name: name) { [unowned self] in runJobs() }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        guard thread != nil else {
            globalConcurrentExecutor.enqueue(job)
            return
        }
        let unowned = UnownedJob(job)
        condition.lock()
        jobs.append(unowned)
        condition.broadcast()
        condition.unlock()
    }

    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
