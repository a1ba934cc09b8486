import AudioCore

/// What the I/O unit's supervisor decides, with nothing of its own to wait on: opening the device, reconnecting
/// after a fault with backoff until ``Configuration/reconnectTimeout`` and then giving up, falling back to capture
/// alone when the output device is away (any backend; whether a driver can capture alone is the driver's to say, by
/// opening or failing), looking for the output again while capturing alone, and the route lost and back.
///
/// A value type in the manner of swift-nio's state machines (`NIOAsyncWriter`'s, `NIOTypedHTTPServerUpgraderStateMachine`):
/// one enum of states; each input is a mutating method that returns the ``Action``s its caller performs, in order.
/// It never sleeps, reads a clock or touches a driver: time comes in as `now` (CLOCK_MONOTONIC nanoseconds, or a
/// test's virtual clock), ``nextWakeup`` says when it next wants a ``tick(now:)``, and the randomness of the backoff's
/// jitter comes from a seeded ``SplitMix64`` it keeps, so a test replays it exactly.
///
/// Two actions ask for a result: ``Action/open(_:)`` (answer with ``opened(_:now:)``) and
/// ``Action/probeOutput(like:)`` (answer with ``outputProbed(found:now:)``). Either is always the last action of a
/// list, so a caller can perform a list front to back and feed the answer in at its end.
///
/// Sample time is not here: placing the sample time across an outage needs the render thread's last cycle and the
/// device's rate, and only the I/O unit sees those. The supervisor tells it when an outage began
/// (``Open/Purpose/reconnect(attempt:since:)``) and the unit puts its estimate of the gap into the
/// ``Opened/gapFrames`` it reports, which ``DeviceEvent/reconnected(_:gapFrames:)`` carries.
///
/// Not thread-safe by itself (a value): the I/O unit keeps it under its supervisor's lock.
struct DeviceSupervisor: Sendable {
    // MARK: Settings

    struct Configuration: Hashable, Sendable {
        var backend: DeviceBackend
        /// Reopen the device after a fault (never for virtual devices: ``reconnects``).
        var reconnect: Bool
        /// Seconds after an outage began that reconnecting gives up (0 < seconds ≤ 86400, as the I/O unit checks).
        var reconnectTimeout: Double
        /// Whether the request captures (bus 1) and plays (bus 0).
        var capturing: Bool
        var playing: Bool

        init(backend: DeviceBackend, reconnect: Bool, reconnectTimeout: Double = 30, inputChannels: Int, outputChannels: Int) {
            self.backend = backend
            self.reconnect = reconnect
            self.reconnectTimeout = reconnectTimeout
            capturing = inputChannels > 0
            playing = outputChannels > 0
        }

        /// Whether a fault is followed by attempts to reopen (a virtual device's fault is its file's: final).
        var reconnects: Bool { reconnect && backend != .virtual }
        /// Whether a failed full reopen is followed by an attempt to capture alone.
        var fallsBackToCaptureOnly: Bool { capturing && playing }
        var reconnectTimeoutNanoseconds: UInt64 { DeviceSupervisor.nanoseconds(reconnectTimeout) }
    }

    /// The backoff between attempts: 0.1 s, doubling to 2 s, each drawn within ±25 %, never past the timeout.
    static let firstRetryDelay = 0.1
    static let longestRetryDelay = 2.0
    static let retryJitter = 0.25
    /// Seconds between looks for the output device while capturing alone: 1, doubling (to 30) after a look that
    /// found it but could not reopen capture and playback together.
    static let firstProbeInterval = 1.0
    static let longestProbeInterval = 30.0

    // MARK: Inputs and outputs

    /// Names each driver the supervisor asks for, so that a fault is taken only from the driver that runs (a driver
    /// being closed, or closed already, may still report one). Later drivers compare greater: a caller that holds
    /// one pending fault keeps the latest driver's.
    struct DriverID: Hashable, Comparable, Sendable, CustomStringConvertible {
        let rawValue: UInt64
        var description: String { "driver \(rawValue)" }
        static func < (a: DriverID, b: DriverID) -> Bool { a.rawValue < b.rawValue }
    }

    /// What a driver is opened for: capture and playback as configured, or capture alone (the output device away).
    enum Mode: Hashable, Sendable, CustomStringConvertible {
        case full
        case captureOnly

        var description: String {
            switch self {
            case .full: "full"
            case .captureOnly: "capture only"
            }
        }
    }

    /// A driver to open and start.
    struct Open: Hashable, Sendable, CustomStringConvertible {
        enum Purpose: Hashable, Sendable {
            /// ``start(now:)``: a failure is the start's error, never retried.
            case start
            /// Attempt `attempt` (from 1) of the outage that began at `since`. The I/O unit places the sample time
            /// before the full open of each attempt (the capture-only fallback of the same attempt reuses it) and
            /// reads where the stream ended before attempt 1.
            case reconnect(attempt: Int, since: UInt64)
        }

        var mode: Mode
        /// The name the driver's faults are to be reported with.
        var driver: DriverID
        var purpose: Purpose

        /// True for the capture-only attempt that follows a failed full one within the same attempt.
        var isFallback: Bool { mode == .captureOnly }

        var description: String {
            switch purpose {
            case .start: "open \(mode) to start"
            case .reconnect(let attempt, _): "open \(mode), attempt \(attempt)"
            }
        }
    }

    /// A driver that opened and started.
    struct Opened: Sendable {
        var grant: DeviceGrant
        /// The driver's and the negotiation's warnings (no real-time priority, a rate converted, two clocks).
        var warnings: [String]
        /// Reconnecting: frames of time the stream was away, as the I/O unit estimated it (0 at start).
        var gapFrames: Int64

        init(grant: DeviceGrant, warnings: [String] = [], gapFrames: Int64 = 0) {
            self.grant = grant
            self.warnings = warnings
            self.gapFrames = gapFrames
        }
    }

    /// What the caller does, in the order given.
    enum Action: Sendable, CustomStringConvertible {
        /// Opens and starts a driver (its faults reported with `open.driver`), then reports the outcome with
        /// ``opened(_:now:)``. Capture only: the request without playback (0 output channels, no output device).
        case open(Open)
        /// Stops the running driver and lets it go (its xruns join the unit's count).
        case closeDriver
        /// Looks whether the output device would open now — alone, at `like`'s rate and period and no other — closes
        /// it again, and reports with ``outputProbed(found:now:)``.
        case probeOutput(like: DeviceGrant)
        /// Reports an event (the counters, ``grant``, ``failure`` and ``isOutputRouted`` already say what it says).
        case emit(DeviceEvent)
        /// ``start(now:)`` fails with this error: nothing runs and nothing was reported.
        case startFailed(AudioError)

        var description: String {
            switch self {
            case .open(let open): open.description
            case .closeDriver: "close the driver"
            case .probeOutput: "probe the output"
            case .emit(let event): "emit \(event)"
            case .startFailed(let error): "start failed: \(error.message)"
            }
        }
    }

    // MARK: State

    /// An outage: no driver runs, and attempts to reopen follow until ``giveUpAt``.
    struct Outage: Sendable {
        /// When it began: the fault (or the output device found back).
        let since: UInt64
        let giveUpAt: UInt64
        /// It began as the output device's return (capture-only), not as a fault: nothing was reported as a fault,
        /// and falling back to capture alone again doubles the interval between looks instead of warning anew.
        let restoring: Bool
        /// Attempts made so far.
        var attempt = 0
        /// The next attempt's nominal delay, before jitter.
        var delay = DeviceSupervisor.firstRetryDelay
        /// What the last full attempt said (the fault itself before the first).
        var lastError: AudioError
        var nextAttemptAt: UInt64
    }

    /// A driver asked for and not yet reported.
    struct Opening: Sendable {
        let open: Open
        /// Nil when starting.
        var outage: Outage?
        /// stop() came meanwhile: whatever opens is closed at once.
        var stopRequested = false
        /// A fault of this driver reported before its open was (a caller that reports out of order).
        var earlyFault: AudioError?
    }

    /// Capture alone, the output device away.
    struct CaptureOnly: Sendable {
        var nextProbeAt: UInt64
        /// A ``Action/probeOutput(like:)`` not yet answered.
        var probing = false
    }

    struct Running: Sendable {
        let driver: DriverID
        let grant: DeviceGrant
        /// Nil: capture and playback as configured.
        var captureOnly: CaptureOnly?
    }

    enum State: Sendable {
        /// Not started, or stopped (``failure`` still says why a run ended for good).
        case idle
        case opening(Opening)
        case running(Running)
        case waitingToReconnect(Outage)
        /// Stopped for good (no reconnect, or given up): ``failure`` says why; waits for ``stop()``.
        case stoppedForGood(AudioError)
    }

    let configuration: Configuration
    private(set) var state: State = .idle
    private var random: SplitMix64
    private var lastDriver: UInt64 = 0

    /// Faults reported (the output device found back is none). Never reset: counted since the unit was made.
    private(set) var faultCount = 0
    /// Successful reopenings after a fault (or after the output came back), capture-only ones included.
    private(set) var reconnectCount = 0
    /// Why the device stopped for good, from then until the next ``start(now:)`` (kept across ``stop()``).
    private(set) var failure: AudioError?
    /// Whether the playback reaches somewhere, as last reported (true from each start).
    private(set) var isOutputRouted = true
    /// Seconds between looks for the output device while capturing alone.
    private(set) var probeInterval = DeviceSupervisor.firstProbeInterval

    /// `random` draws the backoff's jitter: seed it from the system's generator in the unit, from a constant in tests.
    init(_ configuration: Configuration, random: SplitMix64) {
        self.configuration = configuration
        self.random = random
    }

    // MARK: Reading the state

    /// What the running driver granted; nil while none runs.
    var grant: DeviceGrant? {
        if case .running(let running) = state { running.grant } else { nil }
    }

    /// True while a driver runs capturing alone (the unit's graph then renders into nothing).
    var isCaptureOnly: Bool {
        if case .running(let running) = state { running.captureOnly != nil } else { false }
    }

    /// When the supervisor wants ``tick(now:)`` (a reconnect attempt, a look for the output device); nil: only
    /// inputs move it on. A tick earlier does nothing, so a caller may wake as often as it likes.
    var nextWakeup: UInt64? {
        switch state {
        case .waitingToReconnect(let outage): outage.nextAttemptAt
        case .running(let running): running.captureOnly.flatMap { $0.probing ? nil : $0.nextProbeAt }
        case .idle, .opening, .stoppedForGood: nil
        }
    }

    /// Stopped for good: nothing will happen until ``stop()`` (the unit's supervisor thread can end).
    var hasStoppedForGood: Bool {
        if case .stoppedForGood = state { true } else { false }
    }

    /// The state in brief, for tests and logs.
    enum Phase: Hashable, Sendable {
        case idle
        case opening(Mode)
        case running(Mode)
        case waitingToReconnect(attempt: Int)
        case stoppedForGood
    }

    var phase: Phase {
        switch state {
        case .idle: .idle
        case .opening(let opening): .opening(opening.open.mode)
        case .running(let running): .running(running.captureOnly == nil ? .full : .captureOnly)
        case .waitingToReconnect(let outage): .waitingToReconnect(attempt: outage.attempt)
        case .stoppedForGood: .stoppedForGood
        }
    }

    // MARK: Inputs

    /// The unit starts: open capture and playback as configured. Refused unless idle (a run stopped for good waits
    /// for ``stop()``, as the unit's `isRunning` does).
    mutating func start(now: UInt64) -> [Action] {
        guard case .idle = state else {
            return [.startFailed(AudioError(.invalidState, "the I/O unit is already running"))]
        }
        // A start opens capture and playback as configured, whatever the last run ended in.
        failure = nil
        isOutputRouted = true
        probeInterval = Self.firstProbeInterval
        let open = Open(mode: .full, driver: nextDriverID(), purpose: .start)
        state = .opening(Opening(open: open))
        return [.open(open)]
    }

    /// The outcome of the last ``Action/open(_:)``. A caller keeps a driver that opened as its running one before
    /// reporting it (the ``Action/closeDriver`` that may follow closes it).
    mutating func opened(_ result: Result<Opened, AudioError>, now: UInt64) -> [Action] {
        guard case .opening(let opening) = state else {
            // Nothing was asked: a driver nobody waits for is closed.
            if case .success = result { return [.closeDriver] }
            return []
        }
        switch result {
        case .success(let opened):
            if opening.stopRequested {
                state = .idle
                if opening.outage == nil {
                    return [.closeDriver, .startFailed(AudioError(.invalidState, "the I/O unit was stopped while it started"))]
                }
                return [.closeDriver, .emit(.stopped)]
            }
            var actions: [Action] = opened.warnings.map { .emit(.warning($0)) }
            var running = Running(driver: opening.open.driver, grant: opened.grant)
            if let outage = opening.outage {
                reconnectCount += 1
                if opening.open.mode == .captureOnly {
                    if outage.restoring {
                        // The output opened alone but not with the capture: look again later, less often.
                        probeInterval = min(Self.longestProbeInterval, probeInterval * 2)
                    } else {
                        probeInterval = Self.firstProbeInterval
                        actions.append(
                            .emit(.warning(
                                "the output device is away (\(outage.lastError.message)); capturing on, and looking for it every second")))
                    }
                    running.captureOnly = CaptureOnly(nextProbeAt: now + Self.nanoseconds(probeInterval))
                }
                actions.append(.emit(.reconnected(opened.grant, gapFrames: opened.gapFrames)))
            } else {
                actions.append(.emit(.started(opened.grant)))
            }
            state = .running(running)
            if let fault = opening.earlyFault {
                actions += beginOutage(fault, restoring: false, now: now)
            }
            return actions

        case .failure(let error):
            guard var outage = opening.outage else {
                state = .idle
                return [.startFailed(error)]
            }
            if opening.stopRequested {
                state = .idle
                return [.emit(.stopped)]
            }
            if opening.open.mode == .full {
                outage.lastError = error
                // The output device alone may be away (capture and playback on two devices, or no playback port to
                // connect to): the capture then runs by itself — the output graph rendering into nothing — until
                // the output is back. Whether the driver can is its own to say: it opens or fails.
                if configuration.fallsBackToCaptureOnly {
                    let open = Open(mode: .captureOnly, driver: nextDriverID(), purpose: opening.open.purpose)
                    state = .opening(Opening(open: open, outage: outage))
                    return [.open(open)]
                }
            }
            // A failed capture-only fallback says nothing new: the full attempt's error is the one reported.
            return backOff(outage, now: now)
        }
    }

    /// A driver failed for good (server gone, device unplugged, stalled). Only the running driver's fault counts:
    /// one from a driver closed or being closed is ignored.
    mutating func fault(_ error: AudioError, driver: DriverID, now: UInt64) -> [Action] {
        switch state {
        case .running(let running) where running.driver == driver:
            return beginOutage(error, restoring: false, now: now)
        case .opening(var opening) where opening.open.driver == driver:
            if opening.earlyFault == nil { opening.earlyFault = error }
            state = .opening(opening)
            return []
        default:
            return []
        }
    }

    /// The timer: a reconnect attempt due, the timeout reached, or a look for the output device due.
    mutating func tick(now: UInt64) -> [Action] {
        switch state {
        case .waitingToReconnect(var outage):
            if now >= outage.giveUpAt { return giveUp(outage) }
            guard now >= outage.nextAttemptAt else { return [] }
            outage.attempt += 1
            let open = Open(
                mode: .full, driver: nextDriverID(), purpose: .reconnect(attempt: outage.attempt, since: outage.since))
            state = .opening(Opening(open: open, outage: outage))
            return [.open(open)]

        case .running(var running):
            guard var captureOnly = running.captureOnly, !captureOnly.probing, now >= captureOnly.nextProbeAt else {
                return []
            }
            captureOnly.probing = true
            captureOnly.nextProbeAt = now + Self.nanoseconds(probeInterval)
            running.captureOnly = captureOnly
            state = .running(running)
            return [.probeOutput(like: running.grant)]

        case .idle, .opening, .stoppedForGood:
            return []
        }
    }

    /// The answer to ``Action/probeOutput(like:)``. Found: capture and playback are reopened together, as after a
    /// fault but without reporting one. A fault of the capture that came meanwhile has been taken as one, and the
    /// answer is then ignored.
    mutating func outputProbed(found: Bool, now: UInt64) -> [Action] {
        guard case .running(var running) = state, var captureOnly = running.captureOnly, captureOnly.probing else {
            return []
        }
        captureOnly.probing = false
        running.captureOnly = captureOnly
        state = .running(running)
        guard found else { return [] }
        return beginOutage(AudioError(.deviceUnavailable, "the output device is back"), restoring: true, now: now)
    }

    /// What the running driver says of its playback's route (polled, every 100 ms in the unit): on JACK, whether an
    /// output port is connected. Capturing alone, the route is lost whatever the driver says.
    mutating func routeObserved(outputRouted: Bool, reason: String = "no output port is connected") -> [Action] {
        guard configuration.playing, case .running(let running) = state else { return [] }
        let routed = running.captureOnly == nil && outputRouted
        guard routed != isOutputRouted else { return [] }
        isOutputRouted = routed
        return [.emit(routed ? .routeReturned : .routeLost(reason))]
    }

    /// The unit stops. An open in flight is closed when it reports; ``failure`` stays until the next start.
    mutating func stop() -> [Action] {
        switch state {
        case .idle:
            return []
        case .opening(var opening):
            opening.stopRequested = true
            state = .opening(opening)
            return []
        case .running:
            state = .idle
            return [.closeDriver, .emit(.stopped)]
        case .waitingToReconnect, .stoppedForGood:
            state = .idle
            return [.emit(.stopped)]
        }
    }

    // MARK: Transitions

    /// A fault, or the output found back (`restoring`): the driver goes, and — reconnecting — attempts begin at once
    /// (the first on the next tick, which the caller gives after closing the driver: ``nextWakeup`` is `now`).
    private mutating func beginOutage(_ cause: AudioError, restoring: Bool, now: UInt64) -> [Action] {
        var actions: [Action] = []
        if !restoring {
            faultCount += 1
            actions.append(.emit(.fault(cause)))
        }
        if configuration.playing, isOutputRouted {
            isOutputRouted = false
            actions.append(.emit(.routeLost("the output device went away")))
        }
        actions.append(.closeDriver)
        guard configuration.reconnects else {
            failure = cause
            state = .stoppedForGood(cause)
            actions.append(.emit(.stopped))
            return actions
        }
        state = .waitingToReconnect(
            Outage(
                since: now, giveUpAt: now + configuration.reconnectTimeoutNanoseconds, restoring: restoring,
                lastError: cause, nextAttemptAt: now))
        return actions
    }

    /// An attempt failed: wait 0.1 s doubling to 2 s, ±25 %, never past the timeout.
    private mutating func backOff(_ outage: Outage, now: UInt64) -> [Action] {
        var outage = outage
        let factor = Double.random(in: (1 - Self.retryJitter)...(1 + Self.retryJitter), using: &random)
        let left = outage.giveUpAt > now ? outage.giveUpAt - now : 0
        let wait = min(Self.nanoseconds(outage.delay * factor), left)
        outage.nextAttemptAt = now + wait
        outage.delay = min(Self.longestRetryDelay, outage.delay * 2)
        state = .waitingToReconnect(outage)
        return [.emit(.reconnectFailed(attempt: outage.attempt, error: outage.lastError, retryIn: Double(wait) / 1e9))]
    }

    private mutating func giveUp(_ outage: Outage) -> [Action] {
        let attempts = outage.attempt
        let error = AudioError(
            .deviceUnavailable,
            "the device did not come back within \(wholeOrTwoDecimals(configuration.reconnectTimeout)) s "
                + "(\(attempts) attempt\(attempts == 1 ? "" : "s"); the last said: \(outage.lastError.message))")
        failure = error
        state = .stoppedForGood(error)
        return [.emit(.gaveUp(error)), .emit(.stopped)]
    }

    private mutating func nextDriverID() -> DriverID {
        lastDriver += 1
        return DriverID(rawValue: lastDriver)
    }

    /// Seconds (≥ 0) as whole nanoseconds.
    static func nanoseconds(_ seconds: Double) -> UInt64 {
        UInt64((seconds * 1e9).rounded())
    }
}

/// `2` for 2.0, `2.50` for 2.5: seconds as a user typed them, most of the time.
func wholeOrTwoDecimals(_ value: Double) -> String {
    value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format2: value)
}
