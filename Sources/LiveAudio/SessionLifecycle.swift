import AudioCore

/// The lifecycle both sessions run, as a state machine: `idle → starting → running → stopping → stopped`. The session
/// feeds it events (a start asked for, a start's step done, a start ended, a stop asked for, a stop done) and does
/// what each answer says; every case of a stop arriving during a start is written here once, for both sessions.
///
/// - A start is refused once started or stopped; after a start that failed the session is idle again and may start
///   once more.
/// - A stop during a start interrupts it: the session breaks off what the start is waiting for (a server's answer,
///   a calibration), the start gives up at its next step and undoes what it opened, and the stop waits for that
///   before it returns — so when `stop()` returns, nothing the start opened is left running.
/// - A stop while another stop works waits for it to end, so every caller returns with the work done.
/// - A stop before any start, or after another stop, does nothing but leave the session stopped.
///
/// Value type, no locks of its own: the session keeps it under its lock and resumes the returned waiters outside it.
struct SessionLifecycle {
    enum State: Equatable, Sendable {
        /// Made, or back after a start that failed.
        case idle
        /// A start in progress; `stopRequested` once a stop has come.
        case starting(stopRequested: Bool)
        case running
        /// A stop in progress (the session's own work: devices, files, servers).
        case stopping
        case stopped
    }

    private(set) var state = State.idle
    /// Stops that wait for a start in progress to end.
    private var waiters: [CheckedContinuation<Void, Never>] = []
    /// Stops that wait for another stop's work to end.
    private var stopWaiters: [CheckedContinuation<Void, Never>] = []
    /// What the session is called in messages ("the live stream", "the karaoke session").
    let name: String

    init(name: String) { self.name = name }

    // MARK: Start

    /// A start is asked for.
    /// - Throws: ``AudioError`` `.invalidState` when started (or starting) already, or stopped.
    mutating func startRequested() throws(AudioError) {
        switch state {
        case .idle: state = .starting(stopRequested: false)
        case .starting, .running: throw AudioError(.invalidState, "\(name) was already started")
        case .stopping, .stopped: throw AudioError(.invalidState, "\(name) was stopped")
        }
    }

    /// Between two steps of a start: goes on, or gives up because a stop came.
    /// - Throws: ``AudioError`` `.invalidState` when a stop came meanwhile.
    func checkStarting() throws(AudioError) {
        if case .starting(stopRequested: true) = state {
            throw AudioError(.invalidState, "\(name) was stopped while it started")
        }
    }

    /// The start ended, having `succeeded` (everything opened) or not (everything it opened undone).
    /// - Returns: the stops to resume (outside the lock): they go on with the state this leaves.
    mutating func startEnded(succeeded: Bool) -> [CheckedContinuation<Void, Never>] {
        guard case .starting(let stopRequested) = state else { return [] }
        switch (succeeded, stopRequested) {
        case (true, false): state = .running
        case (true, true): state = .stopping  // the waiting stop stops what the start opened
        case (false, false): state = .idle
        case (false, true): state = .stopped
        }
        defer { waiters = [] }
        guard state == .stopped else { return waiters }
        defer { stopWaiters = [] }
        return waiters + stopWaiters
    }

    // MARK: Stop

    enum StopAction: Equatable {
        /// Running: stop it (and call ``stopEnded()``).
        case stop
        /// A start is in progress: break off what it waits for, then ``waitForStart(_:)``.
        case interruptStart
        /// Another stop is at work: ``waitForStop(_:)``.
        case waitForStop
        /// Never started, or stopped already: nothing to do.
        case nothing
    }

    /// A stop is asked for.
    mutating func stopRequested() -> StopAction {
        switch state {
        case .idle:
            state = .stopped
            return .nothing
        case .starting(stopRequested: false):
            state = .starting(stopRequested: true)
            return .interruptStart
        case .starting(stopRequested: true):
            return .waitForStop  // the first stop interrupts the start, and stops what it may have started
        case .running:
            state = .stopping
            return .stop
        case .stopping:
            return .waitForStop
        case .stopped:
            return .nothing
        }
    }

    /// Registers a stop that waits for another stop's work to end.
    /// - Returns: false when it has ended already (then do not wait).
    mutating func waitForStop(_ continuation: CheckedContinuation<Void, Never>) -> Bool {
        switch state {
        case .stopping, .starting(stopRequested: true): break
        default: return false
        }
        stopWaiters.append(continuation)
        return true
    }

    /// Registers a stop that waits for the start in progress to end.
    /// - Returns: false when the start has ended already (then do not wait).
    mutating func waitForStart(_ continuation: CheckedContinuation<Void, Never>) -> Bool {
        guard case .starting = state else { return false }
        waiters.append(continuation)
        return true
    }

    /// After an interrupted start ended: whether it succeeded anyway, so that the stop has a running session to stop.
    var mustStopAfterStart: Bool { state == .stopping }

    /// The stop's own work is done.
    /// - Returns: the stops that waited for it, to resume (outside the lock).
    mutating func stopEnded() -> [CheckedContinuation<Void, Never>] {
        state = .stopped
        defer { stopWaiters = [] }
        return stopWaiters
    }
}

/// A session's lifecycle under a lock, with the waiting a stop during a start needs.
final class LockedLifecycle: Sendable {
    private let lifecycle: Locked<SessionLifecycle>

    init(name: String) {
        self.name = name
        lifecycle = Locked(SessionLifecycle(name: name))
    }
    /// What the session is called in messages.
    let name: String

    var state: SessionLifecycle.State { lifecycle.withLock { $0.state } }

    func startRequested() throws(AudioError) {
        try lifecycle.withLock { (l: inout SessionLifecycle) throws(AudioError) in try l.startRequested() }
    }

    func checkStarting() throws(AudioError) {
        try lifecycle.withLock { (l: inout SessionLifecycle) throws(AudioError) in try l.checkStarting() }
    }

    /// The start ended; returns whether a stop had come meanwhile (a failed start then reports the stop).
    @discardableResult
    func startEnded(succeeded: Bool) -> Bool {
        let (waiters, stopped) = lifecycle.withLock { l in
            let stopped = l.state == .starting(stopRequested: true)
            return (l.startEnded(succeeded: succeeded), stopped)
        }
        for waiter in waiters { waiter.resume() }
        return stopped
    }

    func stopRequested() -> SessionLifecycle.StopAction { lifecycle.withLock { $0.stopRequested() } }

    /// Waits until the start in progress has ended; true when it succeeded anyway (then stop what it opened).
    func waitForStart() async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !lifecycle.withLock({ $0.waitForStart(continuation) }) { continuation.resume() }
        }
        return lifecycle.withLock { $0.mustStopAfterStart }
    }

    /// Waits until the stop at work has ended.
    func waitForStop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !lifecycle.withLock({ $0.waitForStop(continuation) }) { continuation.resume() }
        }
    }

    func stopEnded() {
        for waiter in lifecycle.withLock({ $0.stopEnded() }) { waiter.resume() }
    }
}
