import AudioCore
import Foundation
import Synchronization
import Testing
import TestSupport

/// A few threads for many background jobs: turns when woken, delays asked for, a last call on finish, no thread
/// while there is no job, and jobs spread over the threads.
@Suite struct WorkerPoolTests {
    /// Waits up to 2 s for `condition`.
    func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(2)
        while !condition() {
            if Date() > deadline { return false }
            usleep(1000)
        }
        return true
    }

    @Test func theThreadRunsWhileThereAreJobsAndServesThemAll() throws {
        let pool = WorkerPool(name: "la-pool-a", threads: 1)
        #expect(!threadNames().contains("la-pool-a"), "no thread before a job")
        let turns = Mutex([Int](repeating: 0, count: 4))
        let last = Mutex([Int](repeating: 0, count: 4))
        let threads = Mutex<Set<String>>([])
        let jobs = try (0..<4).map { i in
            try pool.add("job \(i)") { isLast in
                let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
                threads.withLock { _ = $0.insert(name.trimmingCharacters(in: .whitespacesAndNewlines)) }
                if isLast { last.withLock { $0[i] += 1 } } else { turns.withLock { $0[i] += 1 } }
                return .idle
            }
        }
        #expect(pool.jobCount == 4)
        #expect(threadNames().filter { $0 == "la-pool-a" }.count == 1, "one thread for four jobs")
        // Woken, every job has a turn.
        let before = turns.withLock { $0 }
        jobs[2].wake()
        #expect(eventually { zip(turns.withLock { $0 }, before).allSatisfy { $0 > $1 } })
        for (i, job) in jobs.enumerated() {
            job.finish()
            #expect(job.hasFinished && last.withLock { $0[i] } == 1, "job \(i): one last call")
            job.finish()  // again: nothing more
            #expect(last.withLock { $0[i] } == 1)
        }
        #expect(pool.jobCount == 0)
        #expect(threads.withLock { $0 } == ["la-pool-a"])
        #expect(eventually { !threadNames().contains("la-pool-a") }, "the thread ends with the last job")
        // And comes back with the next.
        let again = try pool.add("again") { _ in .idle }
        #expect(threadNames().contains("la-pool-a"))
        again.finish()
        #expect(eventually { !threadNames().contains("la-pool-a") })
    }

    @Test func aJobAskingForATurnLaterIsNotCalledSooner() throws {
        let pool = WorkerPool(name: "la-pool-b", threads: 1)
        let calls = Mutex<[UInt64]>([])
        let job = try pool.add("slow") { isLast in
            if !isLast { calls.withLock { $0.append(monotonicNanoseconds()) } }
            return .after(0.05)
        }
        // Woken often meanwhile: the delay holds.
        let began = monotonicNanoseconds()
        for _ in 0..<50 {
            job.wake()
            usleep(4000)
        }
        let elapsed = monotonicNanoseconds() - began
        job.finish()
        let times = calls.withLock { $0 }
        // One turn at once, then one per 50 ms at most (however long the machine took over the 50 wakes).
        let most = 1 + Int(elapsed / 50_000_000) + 1
        #expect(times.count >= 2 && times.count <= most, "\(times.count) turns in \(Double(elapsed) / 1e6) ms at one per 50 ms")
        for (a, b) in zip(times, times.dropFirst()) { #expect(b - a >= 49_000_000, "\(Double(b - a) / 1e6) ms apart") }
    }

    @Test func aJobWithMoreToDoGetsTurnsWithoutBeingWoken() throws {
        let pool = WorkerPool(name: "la-pool-c", threads: 1)
        let left = Atomic<Int>(1000)
        let job = try pool.add("busy") { _ in
            left.subtract(1, ordering: .relaxed).newValue > 0 ? .again : .idle
        }
        #expect(eventually { left.load(ordering: .relaxed) <= 0 })
        job.finish()
    }

    /// Two threads: jobs go to the one with fewer, each job's calls stay on one thread, and two busy jobs run at the
    /// same time (what a hundred encoders, more than a core's work, need).
    @Test func jobsAreSpreadOverThePoolsThreads() throws {
        let pool = WorkerPool(name: "la-pool-d", threads: 2)
        let threadOf = Mutex([Int: Set<Int>]())
        let inside = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        let jobs = try (0..<4).map { i in
            try pool.add("job \(i)") { isLast in
                threadOf.withLock { _ = $0[i, default: []].insert(Int(bitPattern: UInt(pthread_self()))) }
                if isLast { return .idle }
                // 5 ms of work a turn: two jobs on two threads are inside at once sooner or later.
                if inside.add(1, ordering: .relaxed).newValue > 1 { overlapped.store(true, ordering: .relaxed) }
                let end = monotonicNanoseconds() + 5_000_000
                while monotonicNanoseconds() < end {}
                inside.subtract(1, ordering: .relaxed)
                return .again
            }
        }
        #expect(eventually { threadNames().filter { $0 == "la-pool-d" }.count == 2 }, "two threads for four jobs")
        #expect(eventually { overlapped.load(ordering: .relaxed) }, "two jobs ran at the same time")
        for job in jobs { job.finish() }
        let seen = threadOf.withLock { $0 }
        #expect(seen.values.allSatisfy { $0.count == 1 }, "each job on one thread: \(seen)")
        #expect(Set(seen.values.flatMap { $0 }).count == 2, "the jobs on both threads: \(seen)")
        #expect(eventually { !threadNames().contains("la-pool-d") })
    }
}
