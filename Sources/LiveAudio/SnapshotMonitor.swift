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
    }
    private let state: Locked<State>
    private let sampler = Locked<Task<Void, Never>?>(nil)

    /// Takes a first snapshot now, then one every `interval` seconds (at least 5 ms).
    public init(interval: Double = 1.0 / 30, take: @escaping @Sendable () -> Snapshot) {
        self.interval = max(0.005, interval)
        self.take = take
        state = Locked(State(latest: take()))
        let nanoseconds = UInt64(self.interval * 1e9)
        let task = Task.detached { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: nanoseconds)
                guard !Task.isCancelled, let self else { return }
                self.publish(self.take())
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
        let s = take()
        publish(s)
        return s
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

    private func publish(_ snapshot: Snapshot) {
        let followers = state.withLock { s -> [AsyncStream<Snapshot>.Continuation] in
            s.latest = snapshot
            return s.stopped ? [] : Array(s.followers.values)
        }
        for c in followers { c.yield(snapshot) }
    }
}
