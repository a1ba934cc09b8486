import AudioCore
import Testing

@testable import AudioDevices

private typealias Supervisor = DeviceSupervisor
private typealias Action = DeviceSupervisor.Action

/// Nanoseconds of virtual time.
private func ns(_ seconds: Double) -> UInt64 { DeviceSupervisor.nanoseconds(seconds) }

/// A grant as the fake devices give it: 48 kHz, 960-frame periods; capture alone has no playback.
private func fakeGrant(_ mode: Supervisor.Mode, backend: DeviceBackend = .alsa, capturing: Bool = true, playing: Bool = true)
    -> DeviceGrant
{
    let plays = playing && mode == .full
    return DeviceGrant(
        backend: backend, inputDevice: capturing ? "mic" : nil, outputDevice: plays ? "spk2" : nil,
        inputChannels: capturing ? 2 : 0, outputChannels: plays ? 2 : 0, sampleRate: 48_000, periodFrames: 960,
        periodCount: 4, deviceSampleType: .float32, inputLatencyFrames: capturing ? 960 : 0,
        outputLatencyFrames: plays ? 3840 : 0)
}

/// What the fake devices say when they are not there.
private enum Says {
    static let serverGone = AudioError(.deviceUnavailable, "cannot open ALSA device 'default' for capture: Connection refused")
    static let outputGone = AudioError(.deviceUnavailable, "cannot open ALSA device 'spk2' for playback: No such device")
    static let busy = AudioError(.deviceUnavailable, "cannot open ALSA device 'spk2' for playback: Device or resource busy")
    static let stalled = AudioError(.deviceUnavailable, "ALSA device 'default' (capture) stalled: no period for 1.2 s")
    static let playbackGone = AudioError(.deviceUnavailable, "ALSA device 'spk2' (playback): writing failed: No such device")
}

/// The scripted devices behind the fake driver, on the virtual clock: whether the sound server and the output device
/// are there, opens that fail whatever the time, and how long an open takes.
private struct FakeDevices {
    static let never = UInt64.max
    var backend: DeviceBackend = .alsa
    var capturing = true
    var playing = true
    /// The server answers from this time on (`never`: it stays away).
    var serverBackAt: UInt64 = 0
    /// The output device is there from this time on.
    var outputBackAt: UInt64 = 0
    /// The next opens of any kind that fail (the server refusing them), whatever the time.
    var failingOpens = 0
    /// The next full opens that fail although the output device is there (the probe finds it, yet capture and
    /// playback will not open together).
    var failingFullOpens = 0
    /// Virtual nanoseconds each open takes.
    var openTakes: UInt64 = 0

    func outputPresent(at now: UInt64) -> Bool { now >= serverBackAt && now >= outputBackAt }

    mutating func open(_ open: Supervisor.Open, at now: UInt64) -> Result<Supervisor.Opened, AudioError> {
        if failingOpens > 0 {
            failingOpens -= 1
            return .failure(Says.serverGone)
        }
        guard now >= serverBackAt else { return .failure(Says.serverGone) }
        if open.mode == .full, playing {
            guard now >= outputBackAt else { return .failure(Says.outputGone) }
            if failingFullOpens > 0 {
                failingFullOpens -= 1
                return .failure(Says.busy)
            }
        }
        var gap: Int64 = 0
        if case .reconnect(_, let since) = open.purpose { gap = Int64(Double(now - since) * 48_000 / 1e9) }
        return .success(
            Supervisor.Opened(
                grant: fakeGrant(open.mode, backend: backend, capturing: capturing, playing: playing), gapFrames: gap))
    }
}

/// The supervisor run as the I/O unit runs it, on a virtual clock: actions performed in order against the fake
/// devices, opens and probes answered at once (or after `openTakes`), every wake-up it asks for given on time.
private struct Rig {
    var supervisor: Supervisor
    var devices: FakeDevices
    /// The virtual clock (its origin is arbitrary, not 0).
    var now: UInt64 = ns(1000)
    /// Every action performed, described.
    var log: [String] = []
    var timeline: [(at: UInt64, event: DeviceEvent)] = []
    var opens: [(open: Supervisor.Open, at: UInt64)] = []
    var probes: [(like: DeviceGrant, at: UInt64)] = []
    /// The driver the unit holds (set when one opens, cleared when closed).
    var driver: Supervisor.DriverID?
    var closes = 0
    var startError: AudioError?

    init(
        backend: DeviceBackend = .alsa, capturing: Bool = true, playing: Bool = true, reconnect: Bool = true,
        timeout: Double = 30, seed: UInt64 = 7, devices: FakeDevices = FakeDevices()
    ) {
        supervisor = Supervisor(
            Supervisor.Configuration(
                backend: backend, reconnect: reconnect, reconnectTimeout: timeout, inputChannels: capturing ? 2 : 0,
                outputChannels: playing ? 2 : 0),
            random: SplitMix64(seed: seed))
        self.devices = devices
        self.devices.backend = backend
        self.devices.capturing = capturing
        self.devices.playing = playing
    }

    var events: [DeviceEvent] { timeline.map(\.event) }
    var eventLines: [String] { timeline.map { "\($0.event)" } }

    mutating func perform(_ actions: [Action]) {
        var queue = actions[...]
        while let action = queue.popFirst() {
            log.append(action.description)
            switch action {
            case .emit(let event):
                timeline.append((now, event))
            case .closeDriver:
                #expect(driver != nil, "a driver to close")
                driver = nil
                closes += 1
            case .startFailed(let error):
                startError = error
            case .open(let open):
                #expect(queue.isEmpty, "an open is the last action")
                #expect(driver == nil, "no driver runs while another opens")
                opens.append((open, now))
                now += devices.openTakes
                let result = devices.open(open, at: now)
                if case .success = result { driver = open.driver }
                queue = supervisor.opened(result, now: now)[...]
            case .probeOutput(let like):
                #expect(queue.isEmpty, "a probe is the last action")
                probes.append((like, now))
                queue = supervisor.outputProbed(found: devices.outputPresent(at: now), now: now)[...]
            }
        }
    }

    mutating func start() { perform(supervisor.start(now: now)) }
    mutating func stop() { perform(supervisor.stop()) }
    /// The running driver fails.
    mutating func fault(_ error: AudioError) {
        guard let driver else {
            Issue.record("no driver runs to fault")
            return
        }
        perform(supervisor.fault(error, driver: driver, now: now))
    }
    /// The unit's route poll.
    mutating func route(_ routed: Bool) { perform(supervisor.routeObserved(outputRouted: routed)) }

    /// Gives every wake-up the supervisor asks for up to `time`, on time, as the unit's thread does; then the clock
    /// reads `time`.
    mutating func run(until time: UInt64) {
        var steps = 0
        while let wake = supervisor.nextWakeup, wake <= time {
            steps += 1
            guard steps < 100_000 else {
                Issue.record("the supervisor keeps asking for wake-ups at \(wake)")
                return
            }
            now = max(now, wake)
            perform(supervisor.tick(now: now))
        }
        now = max(now, time)
    }

    mutating func run(for seconds: Double) { run(until: now + ns(seconds)) }

    /// Started and running, the log and events of the start cleared.
    mutating func started() {
        start()
        #expect(supervisor.phase == .running(.full))
        timeline = []
        log = []
        opens = []
    }

    var reconnectFailures: [(attempt: Int, error: AudioError, retryIn: Double)] {
        events.compactMap { if case .reconnectFailed(let n, let e, let wait) = $0 { (n, e, wait) } else { nil } }
    }
}

/// The waits the supervisor draws for `count` failed attempts from `seed`, as it draws them (exactly, in whole
/// nanoseconds, before any clipping to the timeout).
private func expectedWaits(seed: UInt64, count: Int) -> [UInt64] {
    var generator = SplitMix64(seed: seed)
    var delay = 0.1
    var waits: [UInt64] = []
    for _ in 0..<count {
        waits.append(ns(delay * Double.random(in: 0.75...1.25, using: &generator)))
        delay = min(2, delay * 2)
    }
    return waits
}

/// The nominal backoff before jitter: 0.1, 0.2, 0.4, 0.8, 1.6, 2, 2, …
private func nominalDelay(attempt: Int) -> Double { min(2, 0.1 * Double(1 << min(attempt - 1, 20))) }

@Suite struct DeviceSupervisorTests {
    // MARK: Start

    @Test func startOpensCaptureAndPlaybackAndReportsTheGrant() {
        var rig = Rig()
        let actions = rig.supervisor.start(now: rig.now)
        #expect(actions.map(\.description) == ["open full to start"])
        #expect(rig.supervisor.phase == .opening(.full))
        #expect(rig.supervisor.nextWakeup == nil)
        guard case .open(let open) = actions.first else { return }
        rig.driver = open.driver
        let grant = fakeGrant(.full)
        let reported = rig.supervisor.opened(.success(.init(grant: grant, warnings: ["no real-time priority"])), now: rig.now)
        #expect(reported.map(\.description) == ["emit warning: no real-time priority", "emit started: \(grant)"])
        #expect(rig.supervisor.phase == .running(.full))
        #expect(rig.supervisor.grant == grant && rig.supervisor.isOutputRouted && !rig.supervisor.isCaptureOnly)
        #expect(rig.supervisor.nextWakeup == nil, "nothing to wake for while the device runs")
        #expect(rig.supervisor.faultCount == 0 && rig.supervisor.reconnectCount == 0 && rig.supervisor.failure == nil)
    }

    /// A start that cannot open is the start's error: no fallback, no retry, no event, nothing to stop.
    @Test func aStartThatCannotOpenFailsAtOnce() {
        var rig = Rig(devices: FakeDevices(outputBackAt: FakeDevices.never))
        rig.start()
        #expect(rig.log == ["open full to start", "start failed: \(Says.outputGone.message)"])
        #expect(rig.startError == Says.outputGone)
        #expect(rig.supervisor.phase == .idle && rig.events.isEmpty && rig.supervisor.nextWakeup == nil)
        #expect(rig.supervisor.failure == nil, "a start's error is thrown, not the unit's failure")
        rig.stop()
        #expect(rig.events.isEmpty, "stop after a failed start does nothing")
        // It can start again.
        rig.devices.outputBackAt = 0
        rig.start()
        #expect(rig.supervisor.phase == .running(.full))
    }

    @Test func startIsRefusedUnlessIdle() {
        var rig = Rig()
        rig.started()
        let again = rig.supervisor.start(now: rig.now)
        #expect(again.map(\.description) == ["start failed: the I/O unit is already running"])
        #expect(rig.supervisor.phase == .running(.full))
    }

    // MARK: Reconnecting

    /// Opens fail N times, then succeed: each failure is reported with the wait before the next attempt — 0.1 s
    /// doubling to 2 s, each within ±25 %, drawn from the seeded generator — and the attempts come exactly then.
    @Test(arguments: [1, 3, 9]) func openFailsNTimesThenSucceeds(failures: Int) {
        var rig = Rig(capturing: false, seed: 42)
        rig.started()
        let faultAt = rig.now
        rig.devices.failingOpens = failures
        rig.fault(Says.stalled)
        #expect(rig.log == ["emit device fault: \(Says.stalled.message)", "emit route lost: the output device went away", "close the driver"])
        #expect(rig.supervisor.phase == .waitingToReconnect(attempt: 0))
        #expect(rig.supervisor.nextWakeup == faultAt, "the first attempt at once, once the driver is closed")
        #expect(rig.supervisor.grant == nil && rig.supervisor.faultCount == 1)
        rig.run(for: 60)

        let waits = expectedWaits(seed: 42, count: failures)
        let failed = rig.reconnectFailures
        #expect(failed.map(\.attempt) == Array(1...failures))
        #expect(failed.allSatisfy { $0.error == Says.serverGone })
        #expect(failed.map(\.retryIn) == waits.map { Double($0) / 1e9 })
        for (i, f) in failed.enumerated() {
            let nominal = nominalDelay(attempt: i + 1)
            #expect(f.retryIn >= nominal * 0.75 && f.retryIn <= nominal * 1.25, "attempt \(i + 1) waits \(f.retryIn) s")
        }
        // Each attempt when the last one's wait ended: playback only, no capture-only fallback.
        #expect(rig.opens.map(\.open.mode) == Array(repeating: .full, count: failures + 1))
        var expectedAt = [faultAt]
        for wait in waits { expectedAt.append((expectedAt.last ?? 0) + wait) }
        #expect(rig.opens.map(\.at) == expectedAt)
        // Then the device runs again.
        #expect(rig.supervisor.phase == .running(.full))
        #expect(rig.supervisor.reconnectCount == 1 && rig.supervisor.faultCount == 1 && rig.supervisor.failure == nil)
        guard case .reconnected(let grant, let gap) = rig.events.last else {
            Issue.record("no reconnect: \(rig.eventLines)")
            return
        }
        #expect(grant == fakeGrant(.full, capturing: false))
        #expect(gap == Int64(Double((expectedAt.last ?? 0) - faultAt) * 48_000 / 1e9), "the unit's estimate, carried through")
        #expect(rig.supervisor.nextWakeup == nil)
        // The route comes back with the unit's next poll.
        rig.route(true)
        #expect(rig.eventLines.last == "route back: the output plays again")
    }

    /// The server dies mid-run and comes back 3 s later: full and capture-only attempts both fail meanwhile (the
    /// server is gone), the first attempt after its return reopens both. Events in order, counters, and no fallback
    /// left behind.
    @Test func theServerDiesMidRunAndReturns() throws {
        var rig = Rig(backend: .jack, seed: 3)
        rig.started()
        rig.run(for: 2)
        let faultAt = rig.now
        rig.devices.serverBackAt = faultAt + ns(3)
        rig.fault(AudioError(.deviceUnavailable, "the JACK server shut down (or dropped this client)"))
        rig.run(for: 10)

        let failed = rig.reconnectFailures
        #expect(!failed.isEmpty && failed.allSatisfy { $0.error == Says.serverGone })
        // Every failed attempt tried capture alone too (any backend), and said what the full attempt said.
        let modes = rig.opens.map(\.open.mode)
        #expect(modes.dropLast() == ArraySlice((0..<failed.count).flatMap { _ in [Supervisor.Mode.full, .captureOnly] }))
        #expect(modes.last == .full)
        let last = try #require(rig.opens.last)
        #expect(last.at >= faultAt + ns(3) && rig.opens.dropLast().allSatisfy { $0.at < faultAt + ns(3) })
        #expect(rig.eventLines.first == "device fault: the JACK server shut down (or dropped this client)")
        #expect(rig.eventLines.dropFirst().first == "route lost: the output device went away")
        #expect(rig.eventLines.count == 2 + failed.count + 1)
        guard case .reconnected(let grant, _) = rig.events.last else {
            Issue.record("\(rig.eventLines)")
            return
        }
        #expect(grant.outputChannels == 2 && grant.inputChannels == 2)
        #expect(rig.supervisor.phase == .running(.full) && !rig.supervisor.isCaptureOnly)
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 1)
        rig.route(true)
        #expect(rig.eventLines.last == "route back: the output plays again")
        #expect(rig.supervisor.isOutputRouted)
    }

    /// The device never comes back: attempts until the timeout, the last wait clipped so that the supervisor
    /// gives up exactly at the timeout (virtual time), with the message naming the timeout, the attempts and the last
    /// error; then it is stopped for good until stop().
    @Test(arguments: [(5.0, "5"), (2.5, "2.50"), (30.0, "30")]) func itNeverReturns(timeout: Double, shown: String) throws {
        var rig = Rig(timeout: timeout, seed: 11)
        rig.started()
        rig.devices.serverBackAt = FakeDevices.never
        let faultAt = rig.now
        rig.fault(Says.stalled)
        rig.run(for: timeout + 10)

        let failed = rig.reconnectFailures
        let attempts = failed.count
        #expect(attempts >= 3)
        #expect(rig.opens.filter { $0.open.mode == .full }.count == attempts)
        // The drawn waits, the last one clipped to what was left.
        let waits = expectedWaits(seed: 11, count: attempts)
        #expect(failed.dropLast().map(\.retryIn) == waits.dropLast().map { Double($0) / 1e9 })
        let lastAttemptAt = try #require(rig.opens.last).at
        let lastWait = try #require(waits.last)
        let left = faultAt + ns(timeout) - lastAttemptAt
        #expect(try #require(failed.last).retryIn == Double(min(lastWait, left)) / 1e9)
        #expect(lastWait >= left, "the last wait was clipped (seed 11)")
        // Given up exactly at the timeout.
        let message =
            "the device did not come back within \(shown) s (\(attempts) attempts; the last said: \(Says.serverGone.message))"
        let end = rig.timeline.suffix(2)
        #expect(end.map { "\($0.event)" } == ["gave up: \(message)", "stopped"])
        #expect(end.allSatisfy { $0.at == faultAt + ns(timeout) })
        #expect(rig.supervisor.failure == AudioError(.deviceUnavailable, message))
        #expect(rig.supervisor.phase == .stoppedForGood && rig.supervisor.hasStoppedForGood)
        #expect(rig.supervisor.nextWakeup == nil && rig.supervisor.grant == nil)
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 0)
        // Nothing more happens, and a start waits for stop().
        rig.run(for: 100)
        #expect(rig.supervisor.tick(now: rig.now).isEmpty)
        #expect(rig.supervisor.start(now: rig.now).map(\.description) == ["start failed: the I/O unit is already running"])
        // stop() reports stopped once more (as the unit's stop() does) and keeps the failure until the next start.
        rig.stop()
        #expect(rig.eventLines.last == "stopped" && rig.eventLines.filter { $0 == "stopped" }.count == 2)
        #expect(rig.supervisor.phase == .idle && rig.supervisor.failure != nil)
        rig.devices.serverBackAt = 0
        rig.start()
        #expect(rig.supervisor.failure == nil && rig.supervisor.phase == .running(.full))
    }

    /// Opens that take longer than the time left: the wait is 0 and the next tick gives up — one attempt, said in
    /// the singular.
    @Test func anAttemptThatOutlastsTheTimeout() throws {
        var rig = Rig(timeout: 0.05)
        rig.started()
        rig.devices.serverBackAt = FakeDevices.never
        let faultAt = rig.now
        rig.devices.openTakes = ns(0.1)
        rig.fault(Says.stalled)
        rig.run(for: 5)
        #expect(rig.reconnectFailures.map(\.retryIn) == [0])
        #expect(rig.opens.map(\.open.mode) == [.full, .captureOnly])
        let message = "the device did not come back within 0.05 s (1 attempt; the last said: \(Says.serverGone.message))"
        #expect(rig.eventLines.suffix(2) == ["gave up: \(message)", "stopped"])
        #expect(try #require(rig.timeline.last).at == faultAt + ns(0.2), "given up when the attempt had ended")
    }

    /// Seeded jitter: the same seed draws the same waits; another seed, others.
    @Test func theJitterIsTheSeeds() {
        func waits(seed: UInt64) -> [Double] {
            var rig = Rig(capturing: false, timeout: 10, seed: seed)
            rig.started()
            rig.devices.serverBackAt = FakeDevices.never
            rig.fault(Says.stalled)
            rig.run(for: 20)
            return rig.reconnectFailures.map(\.retryIn)
        }
        #expect(waits(seed: 1) == waits(seed: 1))
        #expect(waits(seed: 1) != waits(seed: 2))
        // Capped at 2 s (±25 %) however long it goes on.
        #expect(waits(seed: 5).allSatisfy { $0 <= 2.5 })
    }

    /// A tick before the wake-up asked for (a spurious wake of the unit's thread) does nothing.
    @Test func anEarlyTickDoesNothing() throws {
        var rig = Rig(capturing: false)
        rig.started()
        rig.devices.serverBackAt = FakeDevices.never
        rig.fault(Says.stalled)
        rig.perform(rig.supervisor.tick(now: rig.now))  // attempt 1, failed
        let wake = try #require(rig.supervisor.nextWakeup)
        #expect(rig.supervisor.tick(now: wake - 1).isEmpty)
        #expect(rig.supervisor.nextWakeup == wake && rig.supervisor.phase == .waitingToReconnect(attempt: 1))
        #expect(rig.supervisor.tick(now: wake).map(\.description) == ["open full, attempt 2"])
    }

    // MARK: Capture alone

    /// The output device vanishes while the capture goes on: after the fault, the full reopen fails and capture
    /// alone opens — the warning says so with the full attempt's error — then the output is looked for every second;
    /// once it is back, capture and playback are reopened together without a fault being reported, and the route
    /// comes back with the next poll.
    @Test func theOutputVanishesWhileCaptureGoesOn() throws {
        var rig = Rig(seed: 5)
        rig.started()
        let faultAt = rig.now
        rig.devices.outputBackAt = faultAt + ns(3.5)
        rig.fault(Says.playbackGone)
        rig.run(until: faultAt)  // attempt 1, at once
        let captureGrant = fakeGrant(.captureOnly)
        #expect(
            rig.eventLines == [
                "device fault: \(Says.playbackGone.message)",
                "route lost: the output device went away",
                "warning: the output device is away (\(Says.outputGone.message)); capturing on, and looking for it every second",
                "reconnected after 0.00 s: \(captureGrant)",
            ])
        #expect(rig.opens.map(\.open.description) == ["open full, attempt 1", "open capture only, attempt 1"])
        #expect(try #require(rig.opens.last).open.isFallback)
        #expect(rig.supervisor.phase == .running(.captureOnly) && rig.supervisor.isCaptureOnly)
        #expect(rig.supervisor.grant == captureGrant && !rig.supervisor.isOutputRouted)
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 1)
        #expect(rig.supervisor.nextWakeup == faultAt + ns(1))
        // The route stays lost while capturing alone, whatever the driver says.
        rig.route(true)
        #expect(rig.eventLines.count == 4)

        rig.run(until: faultAt + ns(4.5))
        #expect(rig.probes.map(\.at) == [1, 2, 3, 4].map { faultAt + ns($0) })
        #expect(rig.probes.allSatisfy { $0.like == captureGrant }, "probed at the capture's rate and period")
        #expect(rig.opens.suffix(1).map(\.open.description) == ["open full, attempt 1"])
        #expect(try #require(rig.opens.last).at == faultAt + ns(4))
        let back = fakeGrant(.full)
        #expect(rig.eventLines.suffix(1) == ["reconnected after 0.00 s: \(back)"])
        #expect(rig.eventLines.count == 5, "no fault, no failed attempt, no route change yet: \(rig.eventLines)")
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 2)
        #expect(rig.supervisor.phase == .running(.full) && rig.supervisor.nextWakeup == nil)
        rig.route(true)
        #expect(rig.eventLines.last == "route back: the output plays again" && rig.supervisor.isOutputRouted)
    }

    /// The probe finds the output, but capture and playback will not open together: capture alone again, no
    /// warning, and the looks come less often — 2, 4, 8, 16, 30, 30 s. A later fault of the capture starts again
    /// at every second.
    @Test func aProbeThatFindsTheOutputButCannotReopenBoth() {
        var rig = Rig(seed: 9)
        rig.started()
        let faultAt = rig.now
        // The output is away at the fault (attempt 1 falls back), then there but busy for 6 full opens: the
        // seventh look reopens both.
        rig.devices.outputBackAt = faultAt + ns(0.5)
        rig.fault(Says.playbackGone)
        rig.run(until: faultAt)
        #expect(rig.supervisor.phase == .running(.captureOnly))
        rig.devices.failingFullOpens = 6
        rig.run(until: faultAt + ns(200))
        let times = rig.probes.map(\.at)
        let spacing = zip(times, times.dropFirst()).map { Double($1 - $0) / 1e9 }
        #expect(times.first == faultAt + ns(1))
        #expect(spacing == [2, 4, 8, 16, 30, 30])
        #expect(rig.supervisor.phase == .running(.full), "the seventh look reopened both")
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 1 + 7)
        #expect(rig.eventLines.filter { $0.hasPrefix("warning") }.count == 1, "warned once, at the fault")
        #expect(rig.reconnectFailures.isEmpty)
        #expect(rig.events.filter { if case .fault = $0 { true } else { false } }.count == 1)

        // The looks had come every 30 s; a new fault that falls back warns again and looks every second.
        rig.devices.failingFullOpens = 1
        rig.fault(Says.playbackGone)
        let secondAt = rig.now
        rig.run(until: secondAt)
        #expect(rig.supervisor.phase == .running(.captureOnly) && rig.supervisor.probeInterval == 1)
        #expect(rig.eventLines.filter { $0.hasPrefix("warning") }.count == 2)
        #expect(rig.supervisor.nextWakeup == secondAt + ns(1))
    }

    /// The capture faults while capturing alone, and the whole server is away for 2 s: a fault is reported (no
    /// second route loss), both kinds of attempt fail with the full attempt's error reported, and once the server
    /// is back — the output still away — capture alone resumes with a fresh warning.
    @Test func theCaptureFaultsWhileCapturingAlone() {
        var rig = Rig(seed: 13)
        rig.started()
        rig.devices.outputBackAt = FakeDevices.never
        rig.fault(Says.playbackGone)
        rig.run(for: 2.5)
        #expect(rig.supervisor.phase == .running(.captureOnly) && rig.probes.count == 2)
        let before = rig.eventLines.count
        rig.devices.serverBackAt = rig.now + ns(2)
        rig.fault(Says.stalled)
        #expect(rig.eventLines.dropFirst(before) == ["device fault: \(Says.stalled.message)"])
        #expect(rig.supervisor.faultCount == 2 && rig.closes == 2)
        rig.run(for: 5)
        let failed = rig.reconnectFailures
        #expect(!failed.isEmpty && failed.allSatisfy { $0.error == Says.serverGone })
        #expect(failed.map(\.attempt) == Array(1...failed.count))
        #expect(rig.supervisor.phase == .running(.captureOnly) && rig.supervisor.reconnectCount == 2)
        #expect(
            rig.eventLines.filter { $0.contains("capturing on, and looking for it every second") }.count == 2,
            "\(rig.eventLines)")
        #expect(rig.eventLines.filter { $0.hasPrefix("route") }.count == 1)
    }

    /// The output is found back, but the reopening finds nothing at all (the server refuses both opens): the
    /// attempt fails and backs off as after a fault — yet no fault is reported — and when the next attempt opens
    /// capture alone again it counts as a look that failed: no new warning, the looks less often.
    @Test func aRestoreThatFindsNothingBacksOff() {
        var rig = Rig(seed: 21)
        rig.started()
        let faultAt = rig.now
        rig.devices.outputBackAt = FakeDevices.never
        rig.fault(Says.playbackGone)
        rig.run(until: faultAt)
        #expect(rig.supervisor.phase == .running(.captureOnly))
        let warnings = rig.eventLines.filter { $0.hasPrefix("warning") }.count
        rig.devices.outputBackAt = faultAt + ns(1)
        rig.devices.failingOpens = 2
        rig.devices.failingFullOpens = 1
        let before = rig.eventLines.count
        rig.run(until: faultAt + ns(1))
        #expect(rig.supervisor.phase == .waitingToReconnect(attempt: 1))
        rig.run(for: 0.5)
        let after = Array(rig.eventLines.dropFirst(before))
        #expect(after.count == 2, "\(after)")
        #expect(after.first?.hasPrefix("reconnect attempt 1 failed: \(Says.serverGone.message); retrying in") == true)
        #expect(after.last?.hasPrefix("reconnected") == true)
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.reconnectCount == 2)
        #expect(rig.eventLines.filter { $0.hasPrefix("warning") }.count == warnings, "no new warning")
        #expect(rig.supervisor.phase == .running(.captureOnly) && rig.supervisor.probeInterval == 2)
    }

    /// A fault that comes while the output is being looked for is taken as one; the look's answer is ignored.
    @Test func aFaultDuringAProbeWins() throws {
        var rig = Rig()
        rig.started()
        let faultAt = rig.now
        rig.devices.outputBackAt = faultAt + ns(0.5)
        rig.fault(Says.playbackGone)
        rig.run(until: faultAt)
        let probe = rig.supervisor.tick(now: faultAt + ns(1))
        #expect(probe.map(\.description) == ["probe the output"])
        #expect(rig.supervisor.nextWakeup == nil, "no second look while one is out")
        #expect(rig.supervisor.tick(now: faultAt + ns(5)).isEmpty)
        let driver = try #require(rig.driver)
        let fault = rig.supervisor.fault(Says.stalled, driver: driver, now: faultAt + ns(1))
        #expect(fault.map(\.description) == ["emit device fault: \(Says.stalled.message)", "close the driver"])
        #expect(rig.supervisor.outputProbed(found: true, now: faultAt + ns(1)).isEmpty)
        #expect(rig.supervisor.phase == .waitingToReconnect(attempt: 0) && rig.supervisor.faultCount == 2)
    }

    /// A look that finds nothing leaves capture alone as it was, and asks again a second later.
    @Test func aProbeThatFindsNothing() {
        var rig = Rig()
        rig.started()
        rig.devices.outputBackAt = FakeDevices.never
        rig.fault(Says.playbackGone)
        rig.run(for: 0)
        let at = rig.now + ns(1)
        #expect(rig.supervisor.tick(now: at).map(\.description) == ["probe the output"])
        #expect(rig.supervisor.outputProbed(found: false, now: at).isEmpty)
        #expect(rig.supervisor.nextWakeup == at + ns(1) && rig.supervisor.phase == .running(.captureOnly))
        #expect(rig.supervisor.outputProbed(found: true, now: at).isEmpty, "an answer nobody asked for is ignored")
    }

    /// Capture alone is tried on every backend that captures and plays — the driver says whether it can — and
    /// never when the unit only plays or only captures.
    @Test(arguments: [DeviceBackend.alsa, .jack]) func theFallbackIsEveryBackends(backend: DeviceBackend) {
        var rig = Rig(backend: backend)
        rig.started()
        rig.devices.outputBackAt = FakeDevices.never
        rig.fault(Says.playbackGone)
        rig.run(for: 0)
        #expect(rig.opens.map(\.open.mode) == [.full, .captureOnly])
        #expect(rig.supervisor.phase == .running(.captureOnly))

        var playOnly = Rig(backend: backend, capturing: false)
        playOnly.started()
        playOnly.devices.serverBackAt = FakeDevices.never
        playOnly.fault(Says.playbackGone)
        playOnly.run(for: 1)
        #expect(playOnly.opens.allSatisfy { $0.open.mode == .full } && playOnly.opens.count >= 2)

        var captureOnly = Rig(backend: backend, playing: false)
        captureOnly.started()
        captureOnly.devices.serverBackAt = FakeDevices.never
        captureOnly.fault(Says.stalled)
        captureOnly.run(for: 1)
        #expect(captureOnly.opens.allSatisfy { $0.open.mode == .full })
        #expect(!captureOnly.eventLines.contains { $0.hasPrefix("route") }, "no route without playback")
    }

    // MARK: Route

    /// On JACK the route is whether an output port is connected: lost and back as the polls say, each once.
    @Test func theRouteFollowsThePolls() {
        var rig = Rig(backend: .jack)
        rig.started()
        rig.route(true)
        rig.route(false)
        rig.route(false)
        #expect(!rig.supervisor.isOutputRouted)
        rig.route(true)
        rig.route(true)
        #expect(rig.eventLines == ["route lost: no output port is connected", "route back: the output plays again"])
        // A fault while the route is lost reports no second loss.
        rig.route(false)
        rig.fault(Says.stalled)
        #expect(rig.eventLines.suffix(1) == ["device fault: \(Says.stalled.message)"])
        // Without playback there is no route to report.
        var capture = Rig(backend: .jack, playing: false)
        capture.started()
        capture.route(false)
        #expect(capture.events.isEmpty && capture.supervisor.isOutputRouted)
    }

    // MARK: No reconnect

    /// Reconnect off: a fault stops the device for good, the fault itself the failure.
    @Test func aFaultWithoutReconnectStopsForGood() {
        var rig = Rig(reconnect: false)
        rig.started()
        rig.fault(Says.stalled)
        #expect(
            rig.log == [
                "emit device fault: \(Says.stalled.message)", "emit route lost: the output device went away",
                "close the driver", "emit stopped",
            ])
        #expect(rig.supervisor.failure == Says.stalled && rig.supervisor.phase == .stoppedForGood)
        #expect(rig.supervisor.faultCount == 1 && rig.supervisor.nextWakeup == nil)
        rig.run(for: 60)
        #expect(rig.opens.isEmpty)
        rig.stop()
        #expect(rig.log.suffix(1) == ["emit stopped"] && rig.supervisor.failure == Says.stalled)
    }

    /// A virtual device's fault (its file) is final whatever the configuration says.
    @Test func aVirtualDeviceNeverReconnects() {
        var rig = Rig(backend: .virtual, reconnect: true)
        #expect(!rig.supervisor.configuration.reconnects)
        rig.started()
        let error = AudioError(.fileIO, "cannot write 'out.wav': No space left on device")
        rig.fault(error)
        #expect(rig.supervisor.phase == .stoppedForGood && rig.supervisor.failure == error)
        #expect(rig.eventLines.last == "stopped")
        rig.run(for: 60)
        #expect(rig.opens.isEmpty)
    }

    // MARK: Stale and early faults

    /// A fault from a driver that is no longer the running one (reported while it was being closed) is ignored.
    @Test func aStaleFaultIsIgnored() throws {
        var rig = Rig(capturing: false)
        rig.started()
        let first = try #require(rig.driver)
        rig.fault(Says.stalled)
        rig.run(for: 0)
        #expect(rig.supervisor.phase == .running(.full) && rig.driver != first)
        #expect(rig.supervisor.fault(Says.stalled, driver: first, now: rig.now).isEmpty)
        #expect(rig.supervisor.phase == .running(.full) && rig.supervisor.faultCount == 1)
        // And while waiting to reconnect, any fault is stale.
        rig.devices.serverBackAt = FakeDevices.never
        let second = try #require(rig.driver)
        rig.fault(Says.stalled)
        #expect(rig.supervisor.fault(Says.stalled, driver: second, now: rig.now).isEmpty)
        #expect(rig.supervisor.faultCount == 2)
    }

    /// A fault of the driver being opened, reported before its open was, is taken once the open is.
    @Test func aFaultBeforeTheOpenIsReportedIsKept() {
        var supervisor = Supervisor(
            .init(backend: .alsa, reconnect: true, inputChannels: 0, outputChannels: 2), random: SplitMix64(seed: 1))
        guard case .open(let open) = supervisor.start(now: 0).first else { return }
        #expect(supervisor.fault(Says.stalled, driver: open.driver, now: 1).isEmpty)
        let actions = supervisor.opened(.success(.init(grant: fakeGrant(.full, capturing: false))), now: 2)
        #expect(
            actions.map(\.description) == [
                "emit started: \(fakeGrant(.full, capturing: false))", "emit device fault: \(Says.stalled.message)",
                "emit route lost: the output device went away", "close the driver",
            ])
        #expect(supervisor.phase == .waitingToReconnect(attempt: 0) && supervisor.nextWakeup == 2)
    }

    // MARK: Stop

    @Test func stopWhenIdleDoesNothing() {
        var rig = Rig()
        #expect(rig.supervisor.stop().isEmpty)
        #expect(rig.supervisor.phase == .idle)
    }

    @Test func stopWhileRunningClosesTheDriver() {
        var rig = Rig()
        rig.started()
        rig.stop()
        #expect(rig.log == ["close the driver", "emit stopped"])
        #expect(rig.supervisor.phase == .idle && rig.supervisor.grant == nil && rig.supervisor.failure == nil)
        #expect(rig.supervisor.stop().isEmpty, "a second stop does nothing")
    }

    @Test func stopWhileStartingClosesWhatOpens() {
        var supervisor = Supervisor(
            .init(backend: .alsa, reconnect: true, inputChannels: 2, outputChannels: 2), random: SplitMix64(seed: 1))
        _ = supervisor.start(now: 0)
        #expect(supervisor.stop().isEmpty, "nothing to close yet")
        #expect(supervisor.phase == .opening(.full))
        let opened = supervisor.opened(.success(.init(grant: fakeGrant(.full))), now: 1)
        #expect(opened.map(\.description) == ["close the driver", "start failed: the I/O unit was stopped while it started"])
        #expect(supervisor.phase == .idle)

        _ = supervisor.start(now: 2)
        _ = supervisor.stop()
        let failed = supervisor.opened(.failure(Says.serverGone), now: 3)
        #expect(failed.map(\.description) == ["start failed: \(Says.serverGone.message)"])
        #expect(supervisor.phase == .idle)
    }

    @Test func stopWhileWaitingToReconnect() {
        var rig = Rig(devices: FakeDevices())
        rig.started()
        rig.devices.serverBackAt = FakeDevices.never
        rig.fault(Says.stalled)
        rig.run(for: 0.05)
        #expect(rig.supervisor.phase == .waitingToReconnect(attempt: 1))
        rig.log = []
        rig.stop()
        #expect(rig.log == ["emit stopped"], "no driver to close")
        #expect(rig.supervisor.phase == .idle && rig.supervisor.nextWakeup == nil && rig.supervisor.failure == nil)
        rig.run(for: 60)
        #expect(rig.opens.count == 2, "no attempt after stop")
    }

    @Test func stopWhileReconnectingClosesWhatOpens() {
        var rig = Rig()
        rig.started()
        rig.fault(Says.stalled)
        guard case .open = rig.supervisor.tick(now: rig.now).first else {
            Issue.record("no attempt")
            return
        }
        #expect(rig.supervisor.stop().isEmpty)
        #expect(
            rig.supervisor.opened(.success(.init(grant: fakeGrant(.full))), now: rig.now).map(\.description)
                == ["close the driver", "emit stopped"])
        #expect(rig.supervisor.phase == .idle && rig.supervisor.reconnectCount == 0)

        // A failed full attempt with stop pending: no fallback, just stopped.
        var again = Rig()
        again.started()
        again.fault(Says.stalled)
        _ = again.supervisor.tick(now: again.now)
        _ = again.supervisor.stop()
        #expect(again.supervisor.opened(.failure(Says.outputGone), now: again.now).map(\.description) == ["emit stopped"])
        #expect(again.supervisor.phase == .idle)

        // Stop while the capture-only fallback opens: what opens is closed.
        var fallback = Rig()
        fallback.started()
        fallback.fault(Says.playbackGone)
        _ = fallback.supervisor.tick(now: fallback.now)
        let next = fallback.supervisor.opened(.failure(Says.outputGone), now: fallback.now)
        #expect(next.map(\.description) == ["open capture only, attempt 1"])
        #expect(fallback.supervisor.phase == .opening(.captureOnly))
        #expect(fallback.supervisor.stop().isEmpty)
        #expect(
            fallback.supervisor.opened(.success(.init(grant: fakeGrant(.captureOnly))), now: fallback.now).map(\.description)
                == ["close the driver", "emit stopped"])
        #expect(fallback.supervisor.phase == .idle && fallback.supervisor.reconnectCount == 0)
    }

    @Test func stopWhileCapturingAloneAndProbing() {
        var rig = Rig()
        rig.started()
        rig.devices.outputBackAt = FakeDevices.never
        rig.fault(Says.playbackGone)
        rig.run(for: 0)
        #expect(rig.supervisor.phase == .running(.captureOnly))
        _ = rig.supervisor.tick(now: rig.now + ns(1))  // a look out
        #expect(rig.supervisor.stop().map(\.description) == ["close the driver", "emit stopped"])
        #expect(rig.supervisor.outputProbed(found: true, now: rig.now + ns(1)).isEmpty)
        #expect(rig.supervisor.phase == .idle && rig.supervisor.nextWakeup == nil)
        // The next start opens capture and playback as configured, looking every second again when it falls back.
        rig.devices.outputBackAt = 0
        rig.driver = nil
        rig.start()
        #expect(rig.supervisor.phase == .running(.full) && rig.supervisor.isOutputRouted && rig.supervisor.probeInterval == 1)
    }

    @Test func stopAfterGivingUpKeepsTheFailure() {
        var rig = Rig(timeout: 1, devices: FakeDevices())
        rig.started()
        rig.devices.serverBackAt = FakeDevices.never
        rig.fault(Says.stalled)
        rig.run(for: 2)
        #expect(rig.supervisor.phase == .stoppedForGood)
        rig.log = []
        rig.stop()
        #expect(rig.log == ["emit stopped"])
        #expect(rig.supervisor.phase == .idle && rig.supervisor.failure?.message.hasPrefix("the device did not come back within 1 s") == true)
    }

    /// Counters count since the unit was made, across stops and starts.
    @Test func countersOutliveARun() {
        var rig = Rig(capturing: false)
        rig.started()
        rig.fault(Says.stalled)
        rig.run(for: 0)
        rig.stop()
        rig.start()
        rig.fault(Says.stalled)
        rig.run(for: 0)
        #expect(rig.supervisor.faultCount == 2 && rig.supervisor.reconnectCount == 2)
    }
}
