#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import CALSA
import CSystemCalls
import Synchronization

/// One open ALSA PCM (capture or playback), configured for interleaved read/write.
final class ALSAPCM: @unchecked Sendable {
    // Unchecked Sendable: format fields set by `configure` in ALSADriver.init, read-only after; `handle` used by one thread at a time
    let handle: OpaquePointer
    let name: String
    let isCapture: Bool
    private(set) var sampleType: SampleType = .float32
    private(set) var channels = 0
    private(set) var periodFrames = 0
    private(set) var bufferFrames = 0
    /// The rate granted by ``configure(rate:channels:periodFrames:periodCount:acceptingOtherRates:)``.
    private(set) var rate = 0.0
    /// The sound card the PCM is on (`snd_pcm_info`), or -1: a plugin with no card of its own (a sound server's
    /// PCM). Tells whether two PCMs share a clock.
    let card: Int
    private let closedFlag = Atomic<Bool>(false)
    var isClosed: Bool { closedFlag.load(ordering: .acquiring) }

    /// Opens `name` in non-blocking mode (waits go through `snd_pcm_wait` with a time limit, so a vanished server
    /// can never hang the thread).
    init(name: String, capture: Bool) throws(AudioError) {
        ALSADriver.silenceLibrary()
        var pcm: OpaquePointer?
        let stream = capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK
        let result = snd_pcm_open(&pcm, name, stream, SND_PCM_NONBLOCK)
        guard result == 0, let pcm else {
            let what = capture ? "capture" : "playback"
            if result == -ENOENT || result == -ENODEV || result == -EINVAL {
                let devices = ALSADriver.listDevices()
                throw AudioDevices.unknownDevice(
                    name, backend: .alsa, devices: devices,
                    detail: "opening it for \(what): \(ALSADriver.describe(result))")
            }
            throw AudioError(
                .deviceUnavailable, "cannot open ALSA device '\(name)' for \(what): \(ALSADriver.describe(result))"
                    + (result == -EBUSY ? " (another program holds it; try 'default' or 'pulse')" : ""))
        }
        handle = pcm
        self.name = name
        isCapture = capture
        var info: OpaquePointer?
        var card = -1
        if snd_pcm_info_malloc(&info) == 0, let info {
            if snd_pcm_info(pcm, info) == 0 { card = Int(snd_pcm_info_get_card(info)) }
            snd_pcm_info_free(info)
        }
        self.card = card
    }

    deinit { close() }

    func close() {
        guard !closedFlag.exchange(true, ordering: .acquiringAndReleasing) else { return }
        snd_pcm_drop(handle)
        snd_pcm_close(handle)
    }

    private var what: String { "ALSA device '\(name)' (\(isCapture ? "capture" : "playback"))" }

    /// Negotiates hardware and software parameters. The rate and channel count must be granted exactly; the
    /// period and period count are granted as near as the device allows and read back.
    func configure(
        rate: Double, channels wanted: Int, periodFrames wantedPeriod: Int, periodCount: Int, acceptingOtherRates: Bool = false
    ) throws(AudioError) {
        var params: OpaquePointer?
        guard snd_pcm_hw_params_malloc(&params) == 0, let params else {
            throw AudioError(.resourceUnavailable, "out of memory configuring \(what)")
        }
        defer { snd_pcm_hw_params_free(params) }
        try check(snd_pcm_hw_params_any(handle, params), "reading its capabilities")
        try check(snd_pcm_hw_params_set_access(handle, params, SND_PCM_ACCESS_RW_INTERLEAVED), "asking for interleaved access")

        let formats: [(snd_pcm_format_t, SampleType)] = [
            (SND_PCM_FORMAT_FLOAT_LE, .float32), (SND_PCM_FORMAT_S32_LE, .int32), (SND_PCM_FORMAT_S16_LE, .int16),
        ]
        guard let format = formats.first(where: { snd_pcm_hw_params_test_format(handle, params, $0.0) == 0 }) else {
            throw AudioError(.deviceUnavailable, "\(what) supports none of Float32, Int32, Int16 samples")
        }
        try check(snd_pcm_hw_params_set_format(handle, params, format.0), "setting the sample format")
        sampleType = format.1

        if snd_pcm_hw_params_set_channels(handle, params, UInt32(wanted)) != 0 {
            var low: UInt32 = 0
            var high: UInt32 = 0
            snd_pcm_hw_params_get_channels_min(params, &low)
            snd_pcm_hw_params_get_channels_max(params, &high)
            throw AudioError(
                .deviceUnavailable,
                "\(what) cannot run \(wanted) channel(s); it supports \(low)…\(high)"
                    + (name.hasPrefix("hw:") ? " (plughw:… converts channel counts)" : ""))
        }
        channels = wanted

        self.rate = rate
        if snd_pcm_hw_params_set_rate(handle, params, UInt32(rate), 0) != 0 {
            var near = UInt32(rate)
            var direction: Int32 = 0
            let nearOK = snd_pcm_hw_params_set_rate_near(handle, params, &near, &direction) == 0
            guard acceptingOtherRates, nearOK, SampleRateConverter.rateRange.contains(Double(near)) else {
                throw AudioError(
                    .unsupportedSampleRate,
                    "\(what) cannot run at \(formatHz(rate)); the nearest it offers is \(formatHz(Double(near)))"
                        + (name.hasPrefix("hw:") ? " (plughw:… resamples)" : ""))
            }
            self.rate = Double(near)
        }

        var period = snd_pcm_uframes_t(wantedPeriod)
        var direction: Int32 = 0
        try check(snd_pcm_hw_params_set_period_size_near(handle, params, &period, &direction), "setting the period size")
        var count = UInt32(periodCount)
        direction = 0
        try check(snd_pcm_hw_params_set_periods_near(handle, params, &count, &direction), "setting the period count")
        try check(snd_pcm_hw_params(handle, params), "applying the parameters")
        var grantedPeriod: snd_pcm_uframes_t = 0
        direction = 0
        snd_pcm_hw_params_get_period_size(params, &grantedPeriod, &direction)
        var grantedBuffer: snd_pcm_uframes_t = 0
        snd_pcm_hw_params_get_buffer_size(params, &grantedBuffer)
        periodFrames = Int(grantedPeriod)
        bufferFrames = Int(grantedBuffer)
        guard periodFrames > 0, bufferFrames >= periodFrames else {
            throw AudioError(.deviceUnavailable, "\(what) granted an unusable buffer (\(bufferFrames) frames)")
        }

        var sw: OpaquePointer?
        guard snd_pcm_sw_params_malloc(&sw) == 0, let sw else {
            throw AudioError(.resourceUnavailable, "out of memory configuring \(what)")
        }
        defer { snd_pcm_sw_params_free(sw) }
        try check(snd_pcm_sw_params_current(handle, sw), "reading its software parameters")
        try check(snd_pcm_sw_params_set_avail_min(handle, sw, grantedPeriod), "setting the wake-up threshold")
        // Started explicitly (both directions together), never by a fill threshold.
        var boundary: snd_pcm_uframes_t = 0
        snd_pcm_sw_params_get_boundary(sw, &boundary)
        try check(snd_pcm_sw_params_set_start_threshold(handle, sw, boundary), "setting the start threshold")
        try check(snd_pcm_sw_params(handle, sw), "applying the software parameters")
    }

    private func check(_ result: Int32, _ doing: String) throws(AudioError) {
        if result < 0 {
            throw AudioError(.deviceUnavailable, "\(what): \(doing) failed: \(ALSADriver.describe(result))")
        }
    }
}

/// The ALSA backend: capture and/or playback PCMs driven from a thread of our own at real-time priority.
///
/// Each cycle reads one period from the capture PCM (waiting with a time limit), hands it and an output buffer
/// to the handler, and writes the output to the playback PCM. Duplex streams are linked (`snd_pcm_link`) where the
/// device allows, and run on one clock either way: a cycle is driven by the capture side, and playback is kept
/// `periodCount` periods ahead. Under- and overruns (`-EPIPE`) and suspends (`-ESTRPIPE`) are counted and
/// recovered by re-preparing both streams (one, on two clocks); any other error, or no progress for ``stallTimeout``
/// seconds, is a fault: the thread leaves its loop and the I/O unit is told off the real-time path.
///
/// The recovery runs on a thread of its own (`la-alsa-recover`), where waiting is allowed: through a sound server's
/// plugin (PulseAudio's), dropping, preparing and starting a stream are requests to the server, each waited for
/// without a time limit. The real-time thread hands the job over and waits for it in `poll` with a time limit, as it
/// waits for its device, so a server that never answers is a stall, not a hung thread. That thread also closes the
/// streams at the end, so every call that restarts or closes them comes from one thread.
final class ALSADriver: AudioDriver, @unchecked Sendable {
    // Unchecked Sendable: loop vars the la-alsa-io thread's; recovery outcome published by `recoveriesDone`; `closed` under `closing`
    let grant: DeviceGrant
    private let capture: ALSAPCM?
    private let playback: ALSAPCM?
    private let counters = DriverCounters()
    private let running = Atomic<Bool>(false)
    private var thread: WorkerThread?
    private let inputRaw: RawPCMBuffer?
    private let outputRaw: RawPCMBuffer?
    private let inputFloat: PCMBuffer?
    private let outputFloat: PCMBuffer?
    private var linked = false
    // The recovery thread's: a job the real-time thread stores (``RecoveryJob``) and the count of jobs done, whose
    // outcome is `recoveryFailure` (written before the count is, read after it). `recoveryDoneFD` (an eventfd) tells
    // the real-time thread a job is done.
    private let recoveryJob = Atomic<Int>(0)
    private let recoveriesDone = Atomic<Int>(0)
    private var recoveriesAsked = 0
    private var recoveryFailure: LoopFailure?
    private let recoveryWake = WakeSignal()
    private let recoveryDoneFD: Int32
    private var recoveryThread: WorkerThread?
    /// The recovery thread's own silence to prime playback with (the real-time thread's buffer is its own).
    private let silence: RawPCMBuffer?
    private let closing = BlockingCondition()
    private var closed = false
    /// Capture and playback on two clocks: the loop follows playback and reads capture as it arrives.
    private let independentClocks: Bool
    /// The real-time priority the thread asks for (SCHED_FIFO).
    static let realtimePriority: Int32 = 70

    var xrunCount: Int { counters.xruns.load(ordering: .relaxed) }

    /// Seconds without a period after which the device counts as gone (at least four buffers' time).
    let stallTimeout: Double
    /// Extra seconds allowed for the first period.
    static let startupGrace = 4.0
    /// The limit in force: longer until the first period has arrived. Driver thread only.
    private var stallLimit = 0.0
    /// On two clocks, the same for capture, which the loop does not wait on.
    private var captureStallLimit = 0.0

    init(request: DeviceRequest) throws(AudioError) {
        try request.validate()
        var cap: ALSAPCM?
        var play: ALSAPCM?
        if request.inputChannels > 0 {
            let c = try ALSAPCM(name: request.inputDevice ?? "default", capture: true)
            try c.configure(
                rate: request.sampleRate, channels: request.inputChannels, periodFrames: request.periodFrames,
                periodCount: request.periodCount, acceptingOtherRates: request.acceptsOtherRates)
            cap = c
        }
        var twoClocks = false
        if request.outputChannels > 0 {
            let p = try ALSAPCM(name: request.outputDevice ?? "default", capture: false)
            if let cap { twoClocks = request.clocks.independent(inputCard: cap.card, outputCard: p.card) }
            // Playback follows the capture side's granted period so one cycle moves one period each way.
            // …and its rate, when the capture granted another than asked (on two clocks too: the drift bridge
            // works at one nominal rate).
            try p.configure(
                rate: cap?.rate ?? request.sampleRate, channels: request.outputChannels,
                periodFrames: cap?.periodFrames ?? request.periodFrames, periodCount: request.periodCount,
                acceptingOtherRates: request.acceptsOtherRates && cap == nil)
            // On two clocks the cycles follow playback and capture is read as it comes: periods may differ.
            if let cap, cap.periodFrames != p.periodFrames, !twoClocks {
                throw AudioError(
                    .deviceUnavailable,
                    "capture '\(cap.name)' granted \(cap.periodFrames)-frame periods but playback '\(p.name)' "
                        + "granted \(p.periodFrames); pick a period both accept")
            }
            play = p
        }
        capture = cap
        playback = play
        independentClocks = twoClocks
        let period = twoClocks ? play!.periodFrames : cap?.periodFrames ?? play!.periodFrames
        let rate = cap?.rate ?? play!.rate
        let deviceType = cap?.sampleType ?? play!.sampleType
        let periodCount = max(cap.map { $0.bufferFrames / $0.periodFrames } ?? 0, play.map { $0.bufferFrames / $0.periodFrames } ?? 0)
        grant = DeviceGrant(
            backend: .alsa, inputDevice: cap?.name, outputDevice: play?.name, inputChannels: cap?.channels ?? 0,
            outputChannels: play?.channels ?? 0, sampleRate: rate, periodFrames: period,
            periodCount: periodCount, deviceSampleType: deviceType,
            inputLatencyFrames: cap?.periodFrames ?? 0, outputLatencyFrames: play?.bufferFrames ?? 0,
            independentClocks: twoClocks)
        func interleaved(_ pcm: ALSAPCM) throws(AudioError) -> StreamFormat {
            try StreamFormat(sampleRate: rate, channelCount: pcm.channels, sampleType: pcm.sampleType, interleaved: true)
        }
        // On two clocks a cycle reads whatever capture holds: up to its whole buffer.
        let captureRead = twoClocks ? max(cap?.bufferFrames ?? 0, period) : period
        inputRaw = try cap.map { (c) throws(AudioError) in RawPCMBuffer(format: try interleaved(c), capacity: captureRead) }
        silence = try play.map { (p) throws(AudioError) in RawPCMBuffer(format: try interleaved(p), capacity: period) }
        // Without an eventfd (none left to the process) the real-time thread still sees each recovery done, on its
        // next look, 100 ms at most later.
        recoveryDoneFD = la_eventfd()
        outputRaw = try play.map { (p) throws(AudioError) in RawPCMBuffer(format: try interleaved(p), capacity: period) }
        inputFloat = cap.map { PCMBuffer(channelCount: $0.channels, capacity: captureRead) }
        outputFloat = play.map { PCMBuffer(channelCount: $0.channels, capacity: period) }
        let bufferSeconds = Double(max(cap?.bufferFrames ?? 0, play?.bufferFrames ?? 0)) / rate
        stallTimeout = max(1.0, 4 * bufferSeconds)
    }

    deinit {
        stop()
        if recoveryDoneFD >= 0 { Glibc.close(recoveryDoneFD) }
    }

    func start(handler: DeviceCycleHandler, onFault: @escaping @Sendable (AudioError) -> Void) throws(AudioError) -> [String] {
        precondition(thread == nil, "an ALSA driver starts once")
        try startStreams()
        running.store(true, ordering: .releasing)
        recoveryThread = try WorkerThread(name: "la-alsa-recover") { [self] in runRecoveryThread() }
        let ready = BlockingCondition()
        let report = Locked<String??>(nil)
        thread = try WorkerThread(name: "la-alsa-io") { [self] in
            let refusal = RealtimeScheduling.promoteCurrentThread(priority: Self.realtimePriority)
            ready.lock()
            report.withLock { $0 = .some(refusal) }
            ready.broadcast()
            ready.unlock()
            // The message is made here, after the loop: nothing on the real-time path allocates, failures included.
            if let failure = runLoop(handler) {
                onFault(failure.error)
            }
        }
        ready.lock()
        while report.withLock({ $0 }) == nil { ready.wait() }
        ready.unlock()
        let refusal = report.withLock { $0 } ?? nil
        return refusal.map { [$0] } ?? []
    }

    /// Seconds ``stop()`` waits for the streams to close.
    static let closeTimeout = 2.0

    func stop() {
        running.store(false, ordering: .releasing)
        thread?.join()  // bounded: each wait of the loop, for the device or a recovery, has a time limit
        // libpulse (behind ALSA's pulse plugin) can deadlock closing a stream whose server was killed: its mainloop
        // thread waits for shared memory the dead server will never release, holding the lock snd_pcm_drop needs.
        // So the streams close on the recovery thread (after any restart it is in); after `closeTimeout` that
        // thread is left behind with them, and the caller carries on.
        let capture = capture
        let playback = playback
        guard capture != nil || playback != nil, !Self.closed(capture, playback) else { return }
        let done: Bool
        if recoveryThread != nil {
            done = finishRecoveryThread(within: Self.closeTimeout)
        } else {
            done = runWithin(Self.closeTimeout, name: "la-alsa-close") {
                capture?.close()
                playback?.close()
            }
        }
        if !done { abandonedCloses.add(1, ordering: .relaxed) }
    }

    /// Asks the recovery thread to close the streams and end; false when it has not within `seconds` (it is then
    /// left behind, holding the driver). Control thread, once the real-time thread has been joined.
    private func finishRecoveryThread(within seconds: Double) -> Bool {
        recoveryJob.store(RecoveryJob.close.rawValue, ordering: .releasing)
        recoveryWake.signal()
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        closing.lock()
        while !closed {
            let now = monotonicNanoseconds()
            if now >= deadline { break }
            closing.wait(timeout: Double(deadline - now) / 1e9)
        }
        let done = closed
        closing.unlock()
        if done {
            recoveryThread?.join()
            recoveryThread = nil
        }
        return done
    }

    /// Closes that did not finish within ``closeTimeout`` (their threads were left behind).
    let abandonedCloses = Atomic<Int>(0)

    private static func closed(_ a: ALSAPCM?, _ b: ALSAPCM?) -> Bool { (a?.isClosed ?? true) && (b?.isClosed ?? true) }

    // MARK: The real-time loop

    /// Why the real-time loop stopped, in values that need no allocation to hold; ``error`` makes the message.
    enum LoopFailure {
        /// An ALSA call on `pcm` failed with `code` while `doing` it.
        case call(code: Int32, pcm: ALSAPCM, doing: StaticString)
        /// Nothing moved on `pcm` for `seconds`.
        case stalled(pcm: ALSAPCM, seconds: Double)

        var error: AudioError {
            switch self {
            case .call(let code, let pcm, let doing):
                AudioError(.deviceUnavailable, "ALSA device '\(pcm.name)' failed\(doing.utf8CodeUnitCount > 0 ? " to \(doing)" : ""): \(ALSADriver.describe(code))")
            case .stalled(let pcm, let seconds):
                AudioError(
                    .deviceUnavailable,
                    "ALSA device '\(pcm.name)' delivered nothing for \(String(format2: seconds)) s (its sound server or "
                        + "hardware has gone away)")
            }
        }
    }

    /// Links the streams (one clock), prepares them, fills the playback buffer with silence, and starts them
    /// together. Control thread (the first start).
    private func startStreams() throws(AudioError) {
        if let capture, let playback, !independentClocks {
            linked = snd_pcm_link(capture.handle, playback.handle) == 0
        }
        if let failure = restartStreams() { throw failure.error }
    }

    /// ``startStreams()`` after the link: also what one-clock xrun recovery runs (on the recovery thread).
    private func restartStreams() -> LoopFailure? {
        // One at a time, not through an array: an array literal allocates.
        if let failure = prepare(capture) ?? prepare(playback) { return failure }
        primePlayback()
        if let capture {
            let r = snd_pcm_start(capture.handle)
            if r < 0 { return .call(code: r, pcm: capture, doing: "start") }
        }
        if let playback, !linked || capture == nil {
            let r = snd_pcm_start(playback.handle)
            if r < 0 { return .call(code: r, pcm: playback, doing: "start") }
        }
        return nil
    }

    private func prepare(_ pcm: ALSAPCM?) -> LoopFailure? {
        guard let pcm, snd_pcm_state(pcm.handle) != SND_PCM_STATE_PREPARED else { return nil }
        let r = snd_pcm_prepare(pcm.handle)
        return r < 0 ? .call(code: r, pcm: pcm, doing: "prepare") : nil
    }

    /// Fills the whole playback buffer with silence, so the first cycle's output lands a buffer ahead of capture.
    /// Control thread (the first start) or recovery thread.
    private func primePlayback() {
        guard let playback, let silence else { return }
        memset(silence.storage, 0, silence.capacity * silence.format.bytesPerFrame)
        var queued = 0
        while queued < playback.bufferFrames {
            let frames = min(silence.capacity, playback.bufferFrames - queued)
            let r = snd_pcm_writei(playback.handle, silence.storage, snd_pcm_uframes_t(frames))
            if r <= 0 { break }
            queued += r
        }
    }

    /// On two clocks, an xrun restarts only the stream that had it: the other runs on.
    private func restartAlone(_ pcm: ALSAPCM) -> LoopFailure? {
        snd_pcm_drop(pcm.handle)
        if let failure = prepare(pcm) { return failure }
        if !pcm.isCapture { primePlayback() }
        let r = snd_pcm_start(pcm.handle)
        return r < 0 ? .call(code: r, pcm: pcm, doing: "start") : nil
    }

    /// Runs cycles until stopped (returns nil) or the device fails (returns why). Allocates nothing, in xrun
    /// recovery and failures too.
    private func runLoop(_ handler: DeviceCycleHandler) -> LoopFailure? {
        if independentClocks, let capture, let playback {
            return runTwoClockLoop(handler, capture: capture, playback: playback)
        }
        var sampleTime: Int64 = 0
        let rate = grant.sampleRate
        let period = grant.periodFrames
        let nsPerFrame = 1e9 / rate
        var lastCycleHost = monotonicNanoseconds()
        // A sound server may take a while to deliver the first period of a new stream (PulseAudio: up to 1.3 s
        // for an idle null sink's monitor), so the stall limit starts longer.
        stallLimit = stallTimeout + Self.startupGrace
        while running.load(ordering: .acquiring) {
            // 1. Capture one period (or, playback only, wait for room for one).
            if let capture, let inputRaw {
                var got = 0
                while got < period {
                    let r = snd_pcm_readi(
                        capture.handle, inputRaw.storage + got * inputRaw.format.bytesPerFrame,
                        snd_pcm_uframes_t(period - got))
                    if r > 0 {
                        got += r
                        continue
                    }
                    if !running.load(ordering: .acquiring) { return nil }
                    if r == -Int(EAGAIN) || r == 0 {
                        if let failure = wait(capture, since: lastCycleHost) { return failure }
                        continue
                    }
                    if let ending = recoverCountingGap(Int32(r), capture, period: period, sampleTime: &sampleTime,
                                                       lastCycleHost: &lastCycleHost).ending { return ending }
                    got = 0
                }
            } else if let playback {
                if let failure = waitForRoom(playback, period: period, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost).ending {
                    return failure
                }
            }
            let now = monotonicNanoseconds()
            lastCycleHost = now
            stallLimit = stallTimeout

            // 2. Times: the first captured frame reached the device `delay` frames before the last one was read;
            //    the first output frame plays after what is queued ahead of it.
            var inputHost = now
            if let capture {
                var delay: snd_pcm_sframes_t = 0
                if snd_pcm_delay(capture.handle, &delay) < 0 { delay = 0 }
                let back = UInt64(Double(max(0, delay) + period) * nsPerFrame)
                inputHost = now > back ? now - back : 0
            }
            var outputHost = now
            if let playback {
                var delay: snd_pcm_sframes_t = 0
                if snd_pcm_delay(playback.handle, &delay) < 0 { delay = 0 }
                outputHost = now + UInt64(Double(max(0, delay)) * nsPerFrame)
            }

            // 3. The handler.
            var input: BufferView?
            if let inputRaw, let inputFloat {
                let floatView = inputFloat.view(frames: period)
                PCMConversion.decode(inputRaw.view(frames: period), into: floatView)
                input = floatView
            }
            let output = outputFloat?.view(frames: period)
            output?.clear()
            handler.deviceCycle(
                input: input, output: output,
                time: DeviceCycleTime(sampleTime: sampleTime, inputHostTime: inputHost, outputHostTime: outputHost))
            counters.cycles.add(1, ordering: .relaxed)
            sampleTime += Int64(period)

            // 4. Playback.
            if let playback, let output,
                let failure = play(output, to: playback, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost).ending
            {
                return failure
            }
        }
        return nil
    }

    private enum Step {
        case next
        case stop
        case fail(LoopFailure)

        /// Whether the loop ends here: `.some(nil)` stopped, `.some(failure)` failed, nil goes on.
        var ending: LoopFailure?? {
            switch self {
            case .next: nil
            case .stop: .some(nil)
            case .fail(let failure): .some(failure)
            }
        }
    }

    /// Waits for room for a period of playback (the playback clock pacing the loop), recovering xruns: the time
    /// since the last cycle, beyond a period, is then a gap in the stream's sample time.
    private func waitForRoom(_ playback: ALSAPCM, period: Int, sampleTime: inout Int64, lastCycleHost: inout UInt64) -> Step {
        while true {
            let avail = snd_pcm_avail_update(playback.handle)
            if avail >= period { return .next }
            if !running.load(ordering: .acquiring) { return .stop }
            if avail < 0 {
                let step = recoverCountingGap(Int32(avail), playback, period: period, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost)
                if step.ending != nil { return step }
                // Wait before looking again: a stream that is back in an xrun at once must not spin this real-time
                // thread; the stall limit ends it.
            }
            if let failure = wait(playback, since: lastCycleHost) { return .fail(failure) }
        }
    }

    /// Writes a cycle's output to playback, waiting for room as needed.
    /// An underrun found by the write restarts playback (primed with silence): the period is dropped, and the time
    /// since the last cycle, beyond a period, is a gap in the stream's sample time.
    private func play(_ output: BufferView, to playback: ALSAPCM, sampleTime: inout Int64, lastCycleHost: inout UInt64) -> Step {
        guard let outputRaw else { return .next }
        let period = output.frameCount
        PCMConversion.encode(output, into: outputRaw.view(frames: period))
        var put = 0
        while put < period {
            let r = snd_pcm_writei(
                playback.handle, outputRaw.storage + put * outputRaw.format.bytesPerFrame, snd_pcm_uframes_t(period - put))
            if r > 0 {
                put += r
                continue
            }
            if !running.load(ordering: .acquiring) { return .stop }
            if r == -Int(EAGAIN) || r == 0 {
                if let failure = wait(playback, since: lastCycleHost) { return .fail(failure) }
                continue
            }
            return recoverCountingGap(Int32(r), playback, period: period, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost)
        }
        return .next
    }

    /// The loop for capture and playback on two clocks: playback paces the cycles (a period each), and each
    /// cycle takes whatever capture has delivered since the last, without waiting for it — more or fewer frames
    /// than a period as the clocks drift; the I/O unit's drift bridge turns them into the playback's frames. An
    /// xrun on one side restarts that side alone. Allocates nothing.
    private func runTwoClockLoop(_ handler: DeviceCycleHandler, capture: ALSAPCM, playback: ALSAPCM) -> LoopFailure? {
        guard let inputRaw, let inputFloat, let outputFloat else { return nil }
        var sampleTime: Int64 = 0
        let period = grant.periodFrames
        let nsPerFrame = 1e9 / grant.sampleRate
        var lastCycleHost = monotonicNanoseconds()
        var lastCaptureHost = lastCycleHost
        stallLimit = stallTimeout + Self.startupGrace
        captureStallLimit = stallTimeout + Self.startupGrace
        while running.load(ordering: .acquiring) {
            // 1. Room for one period of playback: the playback clock paces the loop.
            if let failure = waitForRoom(playback, period: period, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost).ending {
                return failure
            }
            let now = monotonicNanoseconds()
            lastCycleHost = now
            stallLimit = stallTimeout

            // 2. Whatever capture holds, without waiting.
            var got = 0
            while got < inputRaw.capacity {
                let avail = snd_pcm_avail_update(capture.handle)
                if avail < 0 {
                    switch recover(Int32(avail), capture) {
                    case .failed(let e): return e
                    case .stopped: return nil
                    case .recovered: break
                    }
                    break
                }
                if avail == 0 { break }
                let r = snd_pcm_readi(
                    capture.handle, inputRaw.storage + got * inputRaw.format.bytesPerFrame,
                    snd_pcm_uframes_t(min(avail, inputRaw.capacity - got)))
                if r > 0 {
                    got += r
                    continue
                }
                if r == -Int(EAGAIN) || r == 0 { break }
                switch recover(Int32(r), capture) {
                case .failed(let e): return e
                case .stopped: return nil
                case .recovered: break
                }
                break
            }
            if got > 0 {
                lastCaptureHost = now
                captureStallLimit = stallTimeout
            } else {
                let waited = Double(now &- lastCaptureHost) / 1e9
                if waited > captureStallLimit { return .stalled(pcm: capture, seconds: waited) }
            }

            // 3. Times, as in the one-clock loop: capture's from what it still holds, playback's from its queue.
            var inputDelay: snd_pcm_sframes_t = 0
            if snd_pcm_delay(capture.handle, &inputDelay) < 0 { inputDelay = 0 }
            let back = UInt64(Double(max(0, inputDelay) + got) * nsPerFrame)
            var outputDelay: snd_pcm_sframes_t = 0
            if snd_pcm_delay(playback.handle, &outputDelay) < 0 { outputDelay = 0 }
            let outputHost = now + UInt64(Double(max(0, outputDelay)) * nsPerFrame)

            // 4. The handler: `got` frames of capture, a period of playback.
            let input = inputFloat.view(frames: got)
            PCMConversion.decode(inputRaw.view(frames: got), into: input)
            let output = outputFloat.view(frames: period)
            output.clear()
            handler.deviceCycle(
                input: input, output: output,
                time: DeviceCycleTime(sampleTime: sampleTime, inputHostTime: now > back ? now - back : 0, outputHostTime: outputHost))
            counters.cycles.add(1, ordering: .relaxed)
            sampleTime += Int64(period)

            // 5. Playback.
            if let failure = play(output, to: playback, sampleTime: &sampleTime, lastCycleHost: &lastCycleHost).ending {
                return failure
            }
        }
        return nil
    }

    private enum Recovery {
        case recovered
        /// The driver was stopped while the recovery ran.
        case stopped
        case failed(LoopFailure)
    }

    /// What the recovery thread is asked to do.
    private enum RecoveryJob: Int {
        case idle = 0
        /// One clock: drop both streams and start them again together.
        case restartBoth
        /// Two clocks: restart the stream that had the xrun alone.
        case restartCapture, restartPlayback
        /// A suspend: resume the stream, or restart as above when it cannot yet.
        case resumeCapture, resumePlayback
        /// Close the streams and end (``stop()``).
        case close
    }

    /// The recovery thread: runs jobs until told to close the streams. Real-time too where allowed (below the
    /// device thread), so a busy machine does not lengthen a recovery the device thread waits for.
    private func runRecoveryThread() {
        _ = RealtimeScheduling.promoteCurrentThread(priority: Self.realtimePriority - 10)
        while true {
            let raw = recoveryJob.load(ordering: .acquiring)
            guard let job = RecoveryJob(rawValue: raw), job != .idle else {
                recoveryWake.wait(timeout: 0.1)
                continue
            }
            if job == .close {
                capture?.close()
                playback?.close()
                closing.lock()
                closed = true
                closing.broadcast()
                closing.unlock()
                return
            }
            recoveryFailure = perform(job)
            // Not over a close that stop() stored meanwhile: the next look finds it.
            _ = recoveryJob.compareExchange(expected: raw, desired: RecoveryJob.idle.rawValue, ordering: .acquiringAndReleasing)
            recoveriesDone.add(1, ordering: .releasing)
            var one: UInt64 = 1
            _ = write(recoveryDoneFD, &one, 8)
        }
    }

    /// One recovery job, on the recovery thread.
    private func perform(_ job: RecoveryJob) -> LoopFailure? {
        func restartBoth() -> LoopFailure? {
            if let capture { snd_pcm_drop(capture.handle) }
            if let playback { snd_pcm_drop(playback.handle) }
            return restartStreams()
        }
        switch job {
        case .restartBoth: return restartBoth()
        case .restartCapture: return capture.flatMap { restartAlone($0) }
        case .restartPlayback: return playback.flatMap { restartAlone($0) }
        case .resumeCapture, .resumePlayback:
            guard let pcm = job == .resumeCapture ? capture : playback else { return nil }
            if snd_pcm_resume(pcm.handle) == 0 { return nil }
            return independentClocks ? restartAlone(pcm) : restartBoth()
        case .idle, .close: return nil
        }
    }

    /// Waits (up to 100 ms at a time) for `pcm` to be ready; a fault once nothing has moved for ``stallTimeout``.
    private func wait(_ pcm: ALSAPCM, since lastCycle: UInt64) -> LoopFailure? {
        let r = snd_pcm_wait(pcm.handle, 100)
        if r < 0, r != -EPIPE, r != -ESTRPIPE, r != -EINTR {
            return .call(code: r, pcm: pcm, doing: "")
        }
        let waited = Double(monotonicNanoseconds() &- lastCycle) / 1e9
        if waited > stallLimit { return .stalled(pcm: pcm, seconds: waited) }
        return nil
    }

    /// Counts an under- or overrun or a suspend and has the recovery thread restart the stream(s) (a suspended one
    /// resumed where it can be) while this thread waits for it, up to the stall limit, in `poll` on an eventfd as it
    /// waits for its device; anything else fails. Real-time thread: atomics, a semaphore post, poll and read; no
    /// lock, no allocation.
    private func recover(_ error: Int32, _ pcm: ALSAPCM) -> Recovery {
        guard error == -EPIPE || error == -ESTRPIPE else { return .failed(.call(code: error, pcm: pcm, doing: "")) }
        counters.xruns.add(1, ordering: .relaxed)
        // A restarted stream may take as long as a new one to get going.
        let limit = stallTimeout + Self.startupGrace
        if independentClocks, pcm.isCapture { captureStallLimit = limit } else { stallLimit = limit }
        let job: RecoveryJob =
            if error == -ESTRPIPE { pcm.isCapture ? .resumeCapture : .resumePlayback }
            else if !independentClocks { .restartBoth }
            else { pcm.isCapture ? .restartCapture : .restartPlayback }
        recoveriesAsked += 1
        let ticket = recoveriesAsked
        recoveryJob.store(job.rawValue, ordering: .releasing)
        recoveryWake.signal()
        let asked = monotonicNanoseconds()
        var fd = pollfd(fd: recoveryDoneFD, events: Int16(POLLIN), revents: 0)
        while recoveriesDone.load(ordering: .acquiring) < ticket {
            if !running.load(ordering: .acquiring) { return .stopped }
            let waited = Double(monotonicNanoseconds() &- asked) / 1e9
            if waited > limit { return .failed(.stalled(pcm: pcm, seconds: waited)) }
            _ = poll(&fd, 1, 100)
            var count: UInt64 = 0
            _ = read(recoveryDoneFD, &count, 8)
        }
        if let failure = recoveryFailure { return .failed(failure) }
        return .recovered
    }

    /// ``recover(_:_:)``, and after a recovery the device time lost added to the sample time: the time since the last
    /// cycle beyond one period. The recovery then counts as that cycle, so a recovery found by the next wait measures
    /// from here, not again from the last cycle.
    private func recoverCountingGap(
        _ error: Int32, _ pcm: ALSAPCM, period: Int, sampleTime: inout Int64, lastCycleHost: inout UInt64
    ) -> Step {
        switch recover(error, pcm) {
        case .failed(let e): return .fail(e)
        case .stopped: return .stop
        case .recovered:
            let now = monotonicNanoseconds()
            let elapsed = Double(now &- lastCycleHost) * grant.sampleRate / 1e9
            sampleTime += max(0, Int64(elapsed.rounded()) - Int64(period))
            lastCycleHost = now
            return .next
        }
    }

    // MARK: Library helpers

    private static let silenced = Atomic<Bool>(false)

    /// Turns off libasound's printing to stderr once per process (failures are reported as errors instead).
    static func silenceLibrary() {
        if !silenced.exchange(true, ordering: .acquiringAndReleasing) { la_alsa_silence_errors() }
    }

    static func describe(_ code: Int32) -> String { String(cString: snd_strerror(code)) }

    /// The PCMs ALSA's configuration names (`snd_device_name_hint`), with their directions. `default` is the
    /// default in both directions.
    static func listDevices() -> [AudioDeviceInfo] {
        silenceLibrary()
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) == 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        var devices: [AudioDeviceInfo] = []
        var i = 0
        while let hint = hints[i] {
            i += 1
            func field(_ id: String) -> String? {
                guard let value = snd_device_name_get_hint(hint, id) else { return nil }
                defer { free(value) }
                return String(cString: value)
            }
            guard let name = field("NAME"), name != "null" else { continue }
            let directions: DeviceDirections =
                switch field("IOID") {
                case "Input": .input
                case "Output": .output
                default: .duplex
                }
            let description = (field("DESC") ?? "").split(separator: "\n").joined(separator: " — ")
            devices.append(
                AudioDeviceInfo(
                    backend: .alsa, name: name, description: description, directions: directions,
                    isDefault: name == "default"))
        }
        return devices
    }
}
