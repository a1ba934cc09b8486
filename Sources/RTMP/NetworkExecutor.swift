import AudioCore
import NIOCore
import NIOPosix

/// The one thread every publisher runs on, `la-rtmp`: a SwiftNIO event loop that does the publishers' socket work
/// and, as a task executor, runs their tasks too — the connection loop, the sender, the statistics ticker.
///
/// Swift's default executor is a cooperative pool with one thread per core. A program that blocks a pool thread
/// (a synchronous wait, a long computation without a suspension point) holds back every task behind it, and on a
/// two-core machine two such calls stop the pool. A live stream cannot wait for that: its frames would queue up,
/// its timeouts fire. The publishers' tasks therefore prefer this executor (`Task(executorPreference:)`, inherited by
/// their child tasks), and their channels live on the same loop, so a frame goes from the queue to the socket
/// without changing threads.
///
/// One thread, whatever the core count (NIO's shared group would start one event loop per core): the work per frame
/// is small (framing a few hundred bytes into chunks), so one thread serves many streams — the benchmark in
/// docs/benchmarks.md publishes 100 from one process.
final class NetworkExecutor: TaskExecutor, Sendable {
    /// The executor every publisher uses.
    static let shared = NetworkExecutor(name: "la-rtmp")

    /// The group of one loop the publishers' channels are made on; made once, never shut down.
    let group: MultiThreadedEventLoopGroup
    let loop: any EventLoop

    init(name: String) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        loop = group.next()
        // The loop's thread is named like the library's other threads (NIO names it after itself).
        loop.execute { nameCurrentThread(name) }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        loop.execute { unowned.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
