import AudioCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Bridges a capture device and a playback device that run on two clocks (a USB microphone and a headset): the
/// capture, arriving at its own pace, is resampled by a variable-rate converter whose ratio tracks the drift, so
/// each playback cycle gets exactly its frames and the capture FIFO between them holds its level for as long as the
/// devices run — the approach of zita-ajbridge and PipeWire's adapters.
///
/// The control loop: after each cycle the FIFO's level (frames of capture not yet converted) is compared with its
/// target; the error, in seconds of capture, is low-pass filtered and drives a proportional-integral correction of
/// the converter's ratio, at most ±2 %. Its gains are per second, and each cycle applies them over its own duration
/// (the filter discretised exactly), so the loop is the same whatever the period, cycle or sample rate: closed-loop
/// poles at 0.26 rad/s with damping 0.5 and at 0.0875/s. A 0.1 % drift is taken up within about 23 s (to 5 % of
/// it, after a 37 % overshoot); the level then holds within a frame or two of the target. The filter (2.9 s) keeps
/// a sound server's bursts of capture (a period or two at a time, at shifting moments) out of the ratio: at
/// 960-frame bursts it stays within about ±3·10⁻⁴ of the drift once settled. A faster loop lets more of the bursts
/// through (three times as fast: ±2.4·10⁻³).
///
/// Thread safety: made and reset on the control side; ``push(_:)`` and ``pull(frames:)`` on the device thread
/// (neither allocates nor locks); the counters and ``correction`` from any thread.
final class DriftBridge: @unchecked Sendable {
    // Unchecked Sendable: FIFO, converter and loop state the device thread's; made and reset while stopped; level, drift, counters atomic
    let period: Int
    /// Frames of capture the FIFO aims to hold.
    let target: Int
    /// Above this level the bridge drops the oldest capture down to its target (see ``recentres``).
    let highest: Int
    private let converter: SampleRateConverter
    private var fifo: PlanarFIFO
    private let output: PCMBuffer
    private var filtered = 0.0
    private var integral = 0.0
    /// Input frames consumed per output frame, minus 1: what the capture clock runs fast by, as estimated.
    private var drift = 0.0
    /// False until the capture's first frames arrive (again, after running dry).
    private var captureStarted = false
    /// The FIFO ran dry and the bridge waits for capture.
    private var ranDry = false
    private let driftBits = Atomic<UInt64>(0)
    /// Cycles that found the FIFO dry (silence given; one for each stop of the capture, whose silence is then
    /// waited through uncounted), and captures dropped because the FIFO was full.
    let underruns = Atomic<Int>(0)
    let overflows = Atomic<Int>(0)
    /// Times the level was put back on its target at once, after one side stopped for a while (an xrun restart,
    /// a stall): the FIFO ran dry (the bridge then waits for capture as at the start, its target in silence), or
    /// the playback restarted after a gap or the level rose past ``highest`` (the excess dropped, or it would stay
    /// as latency). Either way the loop's filtered error starts over and its integral, the drift it has learnt, is
    /// kept, so the correction does not wind up on an error no drift caused.
    let recentres = Atomic<Int>(0)

    /// Frames handed to the converter at a time.
    static let feedChunk = 16
    static let maximumCorrection = 0.02
    /// The loop's closed-loop poles, whatever the period, cycle or rate: a pair at `naturalFrequency` (rad/s) with
    /// `damping`, and a real one at `realPole` (1/s).
    static let naturalFrequency = 0.2625
    static let damping = 0.5
    static let realPole = 0.0875
    /// The level filter's time constant and the PI gains that place those poles: the loop's characteristic
    /// polynomial τs³ + s² + kₚs + kᵢ is τ·(s + p)(s² + 2ζωs + ω²). 2.9 s.
    static let filterSeconds = 1 / (realPole + 2 * damping * naturalFrequency)
    /// Correction per second of level error (0.26).
    static let proportionalGain =
        filterSeconds * (naturalFrequency * naturalFrequency + 2 * damping * naturalFrequency * realPole)
    /// Correction per second of level error, per second (0.017).
    static let integralGain = filterSeconds * realPole * naturalFrequency * naturalFrequency

    let sampleRate: Double

    init(sampleRate: Double, channelCount: Int, period: Int, maximumCycle: Int) throws(AudioError) {
        self.period = period
        self.sampleRate = sampleRate
        converter = try SampleRateConverter(
            inputRate: sampleRate, outputRate: sampleRate, channelCount: channelCount, quality: .high, variableRate: true)
        target = max(2 * period, 1024)
        highest = 3 * target
        fifo = PlanarFIFO(channelCount: channelCount, capacity: 8 * target + 4 * maximumCycle + 8192)
        output = PCMBuffer(channelCount: channelCount, capacity: maximumCycle)
        // Prime libsoxr's working memory here rather than on the device thread.
        let probe = PCMBuffer(channelCount: channelCount, capacity: 1024)
        let sink = PCMBuffer(channelCount: channelCount, capacity: 4096)
        for _ in 0..<8 { converter.process(input: probe.view(frames: 1024), output: sink.view(frames: 4096)) }
        reset()
        latencyFrames = measureLatency()
        latencyNanoseconds = UInt64(Double(latencyFrames) * 1e9 / sampleRate)
        reset()
    }

    /// Frames from a capture frame entering the bridge to its leaving, at a steady ratio of 1: the FIFO's target
    /// plus the converter's delay. Measured when the bridge is made, by sending a click through it a period at a
    /// time.
    private(set) var latencyFrames = 0
    /// ``latencyFrames`` in nanoseconds, for the device thread's time stamps.
    private(set) var latencyNanoseconds: UInt64 = 0

    private func measureLatency() -> Int {
        let click = PCMBuffer(channelCount: output.channelCount, capacity: period)
        let sentAt = period
        for cycle in 0..<(target / period + 64) {
            let view = click.view(frames: period)
            view.clear()
            if cycle == 1 { view[0][0] = 1 }
            push(view)
            let out = pull(frames: period)[0]
            if let peak = out.indices.max(by: { abs(out[$0]) < abs(out[$1]) }), abs(out[peak]) > 0.3 {
                return cycle * period + peak - sentAt
            }
        }
        return target
    }

    /// The capture clock's rate relative to the playback clock's, as tracked (1.001: capture 0.1 % fast).
    var correction: Double { 1 + Double(bitPattern: driftBits.load(ordering: .relaxed)) }

    /// Frames of capture waiting in the FIFO (the converter holds about its filter's length more).
    var level: Int { levelBits.load(ordering: .relaxed) }
    private let levelBits = Atomic<Int>(0)


    /// Starts over: the FIFO holds its target in silence, the converter is primed with silence up to its delay
    /// (so it holds its steady-state share from the start, and the level does not sag by that much when capture
    /// begins), the correction is 0. Control side.
    func reset() {
        converter.reset()
        let zeros = PCMBuffer(channelCount: output.channelCount, capacity: Self.feedChunk)
        zeros.view(frames: Self.feedChunk).clear()
        for _ in 0..<4096 {
            let r = converter.process(input: zeros.view(frames: Self.feedChunk), output: output.view(frames: min(Self.feedChunk, output.capacity)))
            if r.produced > 0 { break }
        }
        fifo.clear()
        if let room = fifo.reserve(target) {
            room.clear()
            fifo.commit(target)
        }
        filtered = 0
        captureStarted = false
        ranDry = false
        integral = 0
        drift = 0
        driftBits.store(0.0.bitPattern, ordering: .relaxed)
    }

    /// Takes a capture cycle (any number of frames).
    func push(_ input: BufferView) {
        let resuming = !captureStarted && input.frameCount > 0 && ranDry
        if input.frameCount > 0 { captureStarted = true }
        guard let room = fifo.reserve(input.frameCount) else {
            overflows.add(1, ordering: .relaxed)
            return
        }
        room.copy(from: input)
        fifo.commit(input.frameCount)
        if resuming {
            // Back after running dry: capture that was only late arrives on top of the silence the wait put ahead
            // of it; what exceeds the target and a period goes, oldest (that silence) first.
            ranDry = false
            if fifo.count > target + period { fifo.drop(fifo.count - target - period) }
        }
    }

    /// The next `frames` frames of capture on the playback clock; valid until the next call. `resync`: the playback
    /// has just restarted after a gap, so capture beyond the target piled up while it was stopped (dropped, oldest
    /// first, as above ``highest``).
    func pull(frames: Int, resync: Bool = false) -> BufferView {
        let out = output.view(frames: frames)
        // A capture stream may take a while to deliver its first frames (a sound server's: up to a second):
        // silence until then, neither counted as a shortfall nor steered on.
        guard captureStarted else {
            out.clear()
            return out
        }
        if (resync || fifo.count > highest + frames), fifo.count > target + frames {
            // The playback stopped for a while (an xrun, a stall) and capture piled up: drop the oldest of it down
            // to the target after this cycle — what would otherwise stay as latency, and take the loop many seconds
            // to drain.
            fifo.drop(fifo.count - target - frames)
            filtered = 0
            recentres.add(1, ordering: .relaxed)
        }
        var produced = 0
        var rounds = 0
        while produced < frames, rounds < 1024 {
            rounds += 1
            let available = fifo.count
            // Feed a little at a time: libsoxr takes all it is given, so anything beyond what this cycle's output
            // needs would wait inside it, out of the level the loop steers.
            let feed = min(available, Self.feedChunk)
            let r = converter.process(
                input: fifo.held.prefix(feed), output: out.slice(from: produced, frames: frames - produced))
            fifo.drop(r.consumed)
            produced += r.produced
            if r.consumed == 0 && r.produced == 0 && available == 0 { break }
        }
        if produced < frames {
            out.slice(from: produced, frames: frames - produced).clear()
            underruns.add(1, ordering: .relaxed)
            // Dry: the capture stopped (an xrun and restart) or fell far behind. Wait for it as at the start —
            // silence, not steered on, the target in silence ahead of what comes — so what follows is neither
            // played early nor drained again, and the loop does not wind up on the gap.
            fifo.clear()
            if let room = fifo.reserve(target) {
                room.clear()
                fifo.commit(target)
            }
            captureStarted = false
            ranDry = true
            filtered = 0
            recentres.add(1, ordering: .relaxed)
            levelBits.store(fifo.count, ordering: .relaxed)
            return out
        }
        steer(frames: frames)
        return out
    }

    /// One step of the control loop, after a cycle of `frames` output frames.
    private func steer(frames: Int) {
        levelBits.store(fifo.count, ordering: .relaxed)
        // In seconds, the gains per second over the cycle's duration: the same loop at every period, cycle and rate.
        let error = Double(fifo.count - target) / sampleRate
        let seconds = Double(frames) / sampleRate
        filtered += (1 - exp(-seconds / Self.filterSeconds)) * (error - filtered)
        integral += Self.integralGain * seconds * filtered
        integral = min(max(integral, -Self.maximumCorrection), Self.maximumCorrection)
        drift = min(max(Self.proportionalGain * filtered + integral, -Self.maximumCorrection), Self.maximumCorrection)
        driftBits.store(drift.bitPattern, ordering: .relaxed)
        // Output per input: 1 / (1 + drift).
        converter.setRatio(1 / (1 + drift), slewFrames: frames)
    }
}
