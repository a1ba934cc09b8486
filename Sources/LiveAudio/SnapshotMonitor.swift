import AudioCore
import Synchronization

/// One reader of a session's state for every display: it takes a snapshot at a steady rate (30 a second by default)
/// and hands the same one to all — the terminal screen, the web stage, a status line, an app's own view.
///
/// A session's meters are readings "since the previous reading": two displays reading them each would split the
/// peaks between them. So one monitor takes the snapshots and the displays read ``latest`` or follow
/// ``updates()``. Taking a snapshot reads the session's atomics and locks of the control side; nothing here touches
/// the render thread.
///
/// Thread safety: any thread. The sampling runs on a task of its own until ``stop()`` (or deinit).
public final class SnapshotMonitor<Snapshot: Sendable>: Sendable {
    /// Seconds between snapshots.
    public let interval: Double
    private let take: @Sendable () -> Snapshot
    private struct State {
        var latest: Snapshot
        var followers: [Int: AsyncStream<Snapshot>.Continuation] = [:]
        var nextFollower = 0
        var stopped = false
        /// The ticket of the snapshot in `latest`: snapshots are taken on several threads (the sampler, a
        /// refresh), and an older one finishing later must not replace a newer.
        var latestTicket = 0
    }
    private let state: Locked<State>
    private let sampler = Locked<Task<Void, Never>?>(nil)
    private let tickets = Atomic<Int>(1)

    /// Takes a first snapshot now, then one every `interval` seconds (at least 5 ms).
    public init(interval: Double = 1.0 / 30, take: @escaping @Sendable () -> Snapshot) {
        self.interval = max(0.005, interval)
        self.take = take
        state = Locked(State(latest: take()))
        let nanoseconds = UInt64(self.interval * 1e9)
        let task = Task.detached { [weak self] in
            // On a grid from the start (a late wake-up does not push the ones after it): exactly 1 / interval a second.
            var next = monotonicNanoseconds() + nanoseconds
            while !Task.isCancelled {
                let now = monotonicNanoseconds()
                if next > now { try? await Task.sleep(nanoseconds: next - now) }
                next = max(next + nanoseconds, monotonicNanoseconds())
                guard !Task.isCancelled, let self else { return }
                self.takeAndPublish()
            }
        }
        sampler.withLock { $0 = task }
    }

    deinit {
        sampler.withLock { $0?.cancel() }
        state.withLock { s in
            for c in s.followers.values { c.finish() }
        }
    }

    /// The newest snapshot.
    public var latest: Snapshot { state.withLock { $0.latest } }

    /// Every snapshot from now on, the newest first; a follower that falls behind skips to the newest (it never
    /// queues more than one). Ends at ``stop()``.
    public func updates() -> AsyncStream<Snapshot> {
        let (stream, continuation) = AsyncStream.makeStream(of: Snapshot.self, bufferingPolicy: .bufferingNewest(1))
        let id: Int? = state.withLock { s in
            guard !s.stopped else { return nil }
            let id = s.nextFollower
            s.nextFollower += 1
            s.followers[id] = continuation
            continuation.yield(s.latest)
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.followers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Takes a snapshot now, out of turn (after a control, so that displays show it at once), and hands it out.
    @discardableResult
    public func refresh() -> Snapshot {
        takeAndPublish()
    }

    /// Stops sampling and ends every follower's updates; ``latest`` stays.
    public func stop() {
        sampler.withLock { $0?.cancel() }
        let followers = state.withLock { s -> [AsyncStream<Snapshot>.Continuation] in
            s.stopped = true
            defer { s.followers = [:] }
            return Array(s.followers.values)
        }
        for c in followers { c.finish() }
    }

    @discardableResult
    private func takeAndPublish() -> Snapshot {
        let ticket = tickets.add(1, ordering: .relaxed).newValue
        let snapshot = take()
        // Handed out under the lock, so that followers get snapshots in the order they were taken (a yield does not
        // wait).
        state.withLock { s in
            guard ticket > s.latestTicket else { return }
            s.latest = snapshot
            s.latestTicket = ticket
            if !s.stopped { for c in s.followers.values { c.yield(snapshot) } }
        }
        return snapshot
    }
}
