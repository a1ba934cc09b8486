import AudioCore
import AudioGraph
import CRubberBand
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Changes speed and pitch independently: NewTimePitch's role (the key of an accompaniment, a slower tempo to
/// practise), through librubberband 3 in its real-time mode.
///
/// - Parameters (all changeable while running): `rate` (playback speed, 1/32 … 32, default 1: 2 plays twice as fast,
///   half the duration), `pitch` (cents, −2400 … +2400, default 0), `formant` (0/1, default 0: 1 keeps the
///   voice's formants where they were, so a shifted voice does not sound smaller or bigger). Rate and pitch move
///   to a new value over 50 ms, in steps of one render cycle, and the library crossfades inside each step.
/// - ``Quality``: `.finer` (the R3 engine, default: the better sound, about three times the CPU) or `.faster` (R2:
///   less CPU, a shorter look-ahead).
/// - Timing: the output is aligned with the input as a file plays it — output frame n is the input at frame
///   n × rate (with a constant rate since the last reset); the library's start pad and start delay are applied
///   at reset. To do that the unit reads its input ahead of its output: ``latency`` is that look-ahead, what the
///   unit adds when its input is live (a microphone): found at prepare for the current rate and pitch by running
///   the engine on silence (once per configuration in the process, on two threads when there are two cores; a
///   second unit set up alike reuses the figures), and raised (never lowered until reset) if a later cycle needs
///   more — a higher rate needs more. A unit told it renders offline before it is prepared (``willRender(_:)``;
///   `liveaudio render` does) skips that run and finds the look-ahead as it renders. A live input cannot be played
///   faster than it arrives: rates above 1 are for files.
///
/// Thread safety: as every unit. The library is called from the render thread only (and from prepare/reset on
/// the control thread, never while rendering); in real-time mode it neither allocates nor locks inside its
/// process call with the block sizes given here (the allocation probe checks this with the parameters moving).
public final class TimePitchUnit: RenderUnit {
    public let core: UnitCore
    /// Which of librubberband's engines: the library's own quality choice (NewTimePitch's `overlap` role).
    public enum Quality: String, Sendable, CaseIterable {
        /// R2: lower CPU and look-ahead; phase-vocoder artefacts more audible on large shifts.
        case faster
        /// R3: the better sound (the default).
        case finer
    }

    /// `rate`: playback speed, 1/32 … 32 (2 plays twice as fast), default 1, ramped over 50 ms.
    public static let rateSpec = ParameterSpec(
        "rate", name: "Rate", range: 1.0 / 32...32, unit: .generic, default: 1, smoothingTime: 0.05)
    /// `pitch`: the shift in cents, −2400 … +2400 (two octaves each way), default 0, ramped over 50 ms.
    public static let pitchSpec = ParameterSpec(
        "pitch", name: "Pitch", range: -2400...2400, unit: .cents, default: 0, smoothingTime: 0.05)
    /// `formant`: formant preservation, 0 (off, the default) … 1 (on from 0.5); applied at the next cycle, unramped.
    public static let formantSpec = ParameterSpec(
        "formant", name: "Formant preservation", range: 0...1, unit: .boolean, default: 0, smoothingTime: 0)

    /// The librubberband engine, fixed at init (``Quality/finer`` by default).
    public let quality: Quality
    /// The playback speed (``rateSpec``); set it from any thread.
    public let rate: Parameter
    /// The pitch shift in cents (``pitchSpec``); set it from any thread.
    public let pitch: Parameter
    /// Formant preservation, 0 or 1 (``formantSpec``); set it from any thread.
    public let formant: Parameter

    /// Frames the FIFO holds beyond the graph's largest cycle: the look-ahead of the highest rates.
    public static let readAheadCapacity = 1 << 18

    /// The stretcher, the FIFO and the ramps: the render thread's (the control side's in prepare and reset).
    private let kernel: RenderThreadBound<TimePitchKernel>
    /// The look-ahead in frames: raised by the kernel (render thread, or prepare and reset), read from any thread.
    private let lookahead = Atomic<Int>(0)
    /// The rate ramp's value (log2, the bits of a `Float`) after the last render call, prepare or reset: for
    /// ``currentRate`` on any thread.
    private let playingRateLog = Atomic<UInt32>(Float(0).bitPattern)
    /// False: prepare measures on the calling thread alone (tests comparing the two ways).
    let measuresOnTwoThreads = Atomic<Bool>(true)
    /// False once the host has said it renders offline (``willRender(_:)``): prepare then skips the look-ahead runs.
    private let preparesForRealTime = Atomic<Bool>(true)

    /// Makes a unit with every parameter at its default (rate 1, pitch 0, formant off).
    ///
    /// - Parameters:
    ///   - format: The input and output format (a graph format, 8 kHz … 192 kHz).
    ///   - quality: The librubberband engine; ``Quality/finer`` by default.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry,
    ///   `.unsupportedSampleRate` for a rate outside 8 kHz … 192 kHz.
    public init(format: StreamFormat, quality: Quality = .finer) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        guard f.sampleRate >= 8_000, f.sampleRate <= 192_000 else {
            throw AudioError(.unsupportedSampleRate, "timePitch: rates must be 8000 … 192000 Hz, got \(f.sampleRate)")
        }
        self.quality = quality
        rate = Parameter(Self.rateSpec, owner: "timePitch")
        pitch = Parameter(Self.pitchSpec, owner: "timePitch")
        formant = Parameter(Self.formantSpec, owner: "timePitch")
        kernel = RenderThreadBound(
            TimePitchKernel(channelCount: f.channelCount, rate: rate, pitch: pitch, formant: formant))
        core = UnitCore(kind: "timePitch", inputs: [f], outputs: [f], parameters: [rate, pitch, formant])
    }

    public var pullsInput: Bool { true }

    /// Seconds the unit reads its input ahead of its output (see the type's documentation).
    public var latency: Double {
        Double(lookahead.load(ordering: .relaxed)) / (outputFormats[0].sampleRate)
    }

    /// Output frames per input frame at the rate set now (1 / rate).
    public var outputFramesPerInputFrame: Double { 1 / Double(rate.value) }

    /// Input frames pulled per output frame now: the rate the unit is playing at (the render thread's view, as of
    /// its last cycle). Any thread.
    public var currentRate: Double { exp2(Double(Float(bitPattern: playingRateLog.load(ordering: .relaxed)))) }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        let ramps = (rate: rampFrames(for: rate), pitch: rampFrames(for: pitch))
        try kernel.whileStopped.allocate(
            spec, quality: quality, rampFrames: ramps, helper: measuresOnTwoThreads.load(ordering: .relaxed),
            realTime: preparesForRealTime.load(ordering: .relaxed))
        publishRate(kernel.whileStopped.rateLog.value)
    }

    /// Offline (said before the unit is prepared) the look-ahead is not measured: the input is pulled as the engine
    /// asks, and ``latency`` rises from 0 to what it takes within the first cycles. A render skips most of what
    /// preparing costs, and its output is what a unit prepared for real time renders (R2 exactly; R3 within
    /// −55 dB: its analysis depends a little on where its input is cut). Told of real-time cycles afterwards, a unit
    /// prepared offline measures the look-ahead then.
    public func willRender(_ mode: RenderingMode) {
        let realTime = mode != .offline
        preparesForRealTime.store(realTime, ordering: .relaxed)
        guard realTime, let spec, !kernel.whileStopped.preparedForRealTime else { return }
        // Only librubberband failing to make a stretcher can throw here (this hook cannot): the look-ahead is then
        // found as the unit renders, as offline.
        try? kernel.whileStopped.measureLookahead(spec, quality: quality, helper: measuresOnTwoThreads.load(ordering: .relaxed))
        let prepared = kernel.whileStopped.preparedLookahead
        if prepared > lookahead.load(ordering: .relaxed) { lookahead.store(prepared, ordering: .relaxed) }
    }

    public func reset() {
        kernel.whileStopped.restart(lookahead: lookahead)
        publishRate(kernel.whileStopped.rateLog.value)
    }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        kernel.onRenderThread.produce(frames: context.frameCount, into: output, lookahead: lookahead) { n in
            context.pull(frames: n)[0]
        }
        publishRate(kernel.onRenderThread.rateLog.value)
    }

    /// Makes the rate ramp's value (log2) what ``currentRate`` answers.
    private func publishRate(_ rateLog: Float) {
        playingRateLog.store(rateLog.bitPattern, ordering: .relaxed)
    }

    /// The largest denominator ``simpleRatio(_:)`` uses.
    static let ratioDenominator = 4000.0

    /// `x` as the nearest fraction with a denominator of at most 4000 (continued fractions, with the last
    /// semiconvergent): within 0.2 cents of it over ±2400 cents. librubberband's pitch resampler works on
    /// 1 / pitch as a fraction and sizes a table by its numerator — here the denominator, at most 4000, within what
    /// it reserves when it is made (twice the sample rate). An arbitrary ratio has numerators in the tens of
    /// thousands, and the resampler would allocate on the render thread the first time it met a larger one than
    /// before: the allocation probe caught it doing so.
    static func simpleRatio(_ x: Double) -> Double {
        guard x > 0, x.isFinite else { return x }
        var (p0, q0, p1, q1) = (0.0, 1.0, 1.0, 0.0)
        var value = x
        for _ in 0..<40 {
            let a = value.rounded(.down)
            let q2 = a * q1 + q0
            if q2 > ratioDenominator {
                // The best semiconvergent within the bound, against the last convergent.
                let k = ((ratioDenominator - q0) / q1).rounded(.down)
                let semi = (k * p1 + p0) / (k * q1 + q0)
                let last = p1 / q1
                return abs(semi - x) < abs(last - x) ? semi : last
            }
            (p0, q0, p1, q1) = (p1, q1, a * p1 + p0, q2)
            let fraction = value - a
            if fraction < 1e-12 { break }
            value = 1 / fraction
        }
        return p1 / q1
    }
}

/// The render-side state of a ``TimePitchUnit``: the Rubber Band stretcher (owned: deleted when the kernel goes
/// away), the FIFO of input pulled ahead, the ramps. Used by one thread at a time: the render thread while the unit
/// renders, the control side in prepare and reset.
private struct TimePitchKernel: ~Copyable {
    let channelCount: Int
    let rate: Parameter
    let pitch: Parameter
    let formant: Parameter

    var state: OpaquePointer?
    let inputPointers: UnsafeMutablePointer<UnsafePointer<Float>?>
    let outputPointers: UnsafeMutablePointer<UnsafeMutablePointer<Float>?>
    /// Where discarded output (the start delay) and the prepare-time run's output go; silence for padding.
    var scratch = PCMBuffer(channelCount: 1, capacity: 0)
    var zeros = PCMBuffer(channelCount: 1, capacity: 0)
    var maximumChunk = 0
    /// Input pulled ahead and not yet given to the engine: frames `fifoStart..<fifoEnd`.
    var fifo = PCMBuffer(channelCount: 1, capacity: 0)
    var fifoStart = 0
    var fifoEnd = 0

    var rateLog = SmoothedValue(0, rampFrames: 0)
    var cents = SmoothedValue(0, rampFrames: 0)
    var appliedTimeRatio = 1.0
    var appliedPitchScale = 1.0
    var formantPreserved = false
    var discardLeft = 0
    /// The input frame the output has reached (output frames × rate, summed cycle by cycle).
    var inputPosition = 0.0
    var pulled: Int64 = 0
    /// The look-ahead at prepare (the floor after a reset); the largest seen since is the unit's `lookahead`.
    var preparedLookahead = 0
    /// Prepared for real-time cycles: the look-ahead measured. Offline it is found as the unit renders.
    var preparedForRealTime = true
    /// Frames added to the library's start delay so the output lines up with the input: 0 for R3; R2's start
    /// delay misses its resampler's delay when the pitch is shifted (about 90 frames at +300 cents, 48 kHz).
    var alignment = 0

    init(channelCount: Int, rate: Parameter, pitch: Parameter, formant: Parameter) {
        self.channelCount = channelCount
        self.rate = rate
        self.pitch = pitch
        self.formant = formant
        inputPointers = .allocate(capacity: channelCount)
        inputPointers.initialize(repeating: nil, count: channelCount)
        outputPointers = .allocate(capacity: channelCount)
        outputPointers.initialize(repeating: nil, count: channelCount)
    }

    deinit {
        if let state { rubberband_delete(state) }
        inputPointers.deallocate()
        outputPointers.deallocate()
    }

    /// The unit's allocateRenderResources: a new stretcher that meets the extreme ratios (so that it never
    /// allocates on a render thread), buffers for `spec`, the alignment, and for real-time cycles the look-ahead
    /// (``measure(_:quality:helper:meetingExtremeRatios:)``).
    mutating func allocate(
        _ spec: RenderSpec, quality: TimePitchUnit.Quality, rampFrames: (rate: Int, pitch: Int),
        helper helperAllowed: Bool, realTime: Bool
    ) throws(AudioError) {
        try makeStretcher(spec, quality: quality)
        rateLog = SmoothedValue(0, rampFrames: rampFrames.rate)
        cents = SmoothedValue(0, rampFrames: rampFrames.pitch)
        preparedForRealTime = realTime
        preparedLookahead = 0
        alignment = 0
        try measure(spec, quality: quality, helper: helperAllowed, meetingExtremeRatios: true)
    }

    /// A unit prepared offline, made ready for real-time cycles: the look-ahead measured. Its stretcher is left as
    /// it is (the runs go through stretchers of their own).
    mutating func measureLookahead(_ spec: RenderSpec, quality: TimePitchUnit.Quality, helper: Bool) throws(AudioError) {
        preparedForRealTime = true
        do throws(AudioError) {
            try measure(spec, quality: quality, helper: helper, meetingExtremeRatios: false)
        } catch {
            preparedForRealTime = false
            throw error
        }
    }

    /// The alignment and, for real-time cycles, the look-ahead: measured once per configuration in the process
    /// (``TimePitchMeasurements``). The runs go through stretchers of their own, set up as the unit's, never
    /// through the unit's: what a stretcher has been through stays with it after a reset (the R3 engine's output
    /// starts otherwise), so every unit's own stretcher has the same past. With two cores a helper thread measures
    /// the alignment while this one meets the extreme ratios (when `meetingExtremeRatios`), then both take the
    /// look-ahead runs in turn.
    private mutating func measure(
        _ spec: RenderSpec, quality: TimePitchUnit.Quality, helper helperAllowed: Bool, meetingExtremeRatios: Bool
    ) throws(AudioError) {
        let key = measurementKey(spec, quality: quality)
        if let known = TimePitchMeasurements.shared.lookUp(key) {
            if meetingExtremeRatios { meetExtremeRatios() }
            alignment = known.alignment
            preparedLookahead = known.lookahead
            return
        }
        let cycles = preparedForRealTime ? Self.lookaheadCycles(spec) : []
        let plan = MeasurementPlan(jobs: cycles.count)
        let (rate, pitch, formant, channels) = (self.rate, self.pitch, self.formant, channelCount)
        let helper: WorkerThread? =
            onlineProcessorCount < 2 || !helperAllowed
            ? nil
            : try? WorkerThread(name: "la-tp-measure") {
                let local = Atomic<Int>(0)
                guard
                    var probe = try? Self.probe(
                        spec, quality: quality, rate: rate, pitch: pitch, formant: formant, channels: channels)
                else {
                    plan.publish(alignment: nil)
                    return
                }
                probe.alignment = probe.measureAlignment(spec, lookahead: local)
                plan.publish(alignment: probe.alignment)
                while let job = plan.next() { plan.record(probe.lookaheadRun(cycle: cycles[job], spec, lookahead: local)) }
            }
        defer { helper?.join() }
        if meetingExtremeRatios { meetExtremeRatios() }
        var measuredAlignment = cycles.isEmpty ? helper.flatMap { _ in plan.waitForAlignment() } : nil
        if measuredAlignment == nil || !cycles.isEmpty {
            let local = Atomic<Int>(0)
            var probe = try Self.probe(
                spec, quality: quality, rate: rate, pitch: pitch, formant: formant, channels: channels)
            let found = measuredAlignment ?? helper.flatMap { _ in plan.waitForAlignment() }
                ?? probe.measureAlignment(spec, lookahead: local)
            measuredAlignment = found
            probe.alignment = found
            while let job = plan.next() { plan.record(probe.lookaheadRun(cycle: cycles[job], spec, lookahead: local)) }
        }
        helper?.join()  // its runs recorded
        alignment = measuredAlignment ?? 0
        preparedLookahead = plan.largest
        // Kept only if the parameters did not move while measuring (the figures would be for neither setting).
        if measurementKey(spec, quality: quality) == key {
            TimePitchMeasurements.shared.store(key, .init(alignment: alignment, lookahead: preparedLookahead))
        }
    }

    /// A stretcher to measure with, set up as a unit's: the same options and parameters, the extreme ratios met
    /// (one that has not met them measures other figures: its buffers are sized otherwise).
    private static func probe(
        _ spec: RenderSpec, quality: TimePitchUnit.Quality, rate: Parameter, pitch: Parameter, formant: Parameter,
        channels: Int
    ) throws(AudioError) -> TimePitchKernel {
        var probe = TimePitchKernel(channelCount: channels, rate: rate, pitch: pitch, formant: formant)
        try probe.makeStretcher(spec, quality: quality)
        probe.meetExtremeRatios()
        return probe
    }

    /// What the measurements depend on: real time or not, the engine, the format, the largest cycle and the
    /// parameters now.
    private func measurementKey(_ spec: RenderSpec, quality: TimePitchUnit.Quality) -> TimePitchMeasurements.Key {
        TimePitchMeasurements.Key(
            realTime: preparedForRealTime, quality: quality, sampleRate: spec.sampleRate, channelCount: channelCount, maximumFrames: spec.maximumFrames,
            rate: rate.value, pitchScale: TimePitchUnit.simpleRatio(exp2(Double(pitch.value) / 1200)),
            formant: formant.value >= 0.5)
    }

    /// A new stretcher for `spec` and the buffers around it.
    mutating func makeStretcher(_ spec: RenderSpec, quality: TimePitchUnit.Quality) throws(AudioError) {
        if let state { rubberband_delete(state) }
        state = nil
        var options = RubberBandOptionProcessRealTime.rawValue | RubberBandOptionPitchHighConsistency.rawValue
            | RubberBandOptionThreadingNever.rawValue
        options |= quality == .finer ? RubberBandOptionEngineFiner.rawValue : RubberBandOptionEngineFaster.rawValue
        if channelCount > 1 { options |= RubberBandOptionChannelsTogether.rawValue }
        guard
            let made = rubberband_new(
                UInt32(spec.sampleRate), UInt32(channelCount), Int32(bitPattern: options), 1, 1)
        else {
            throw AudioError(.invalidState, "timePitch: librubberband could not create a stretcher")
        }
        maximumChunk = spec.maximumFrames
        rubberband_set_max_process_size(made, UInt32(maximumChunk))
        state = made
        scratch = PCMBuffer(channelCount: channelCount, capacity: max(spec.maximumFrames, 1024))
        zeros = PCMBuffer(channelCount: channelCount, capacity: spec.maximumFrames)
        fifo = PCMBuffer(channelCount: channelCount, capacity: TimePitchUnit.readAheadCapacity + 2 * spec.maximumFrames)
    }

    /// The corners of the parameter range, a few hops each: librubberband sizes some buffers for the most extreme
    /// ratios it has met, so it meets them here rather than on the render thread (pitch ratios are kept to simple
    /// fractions, see simpleRatio).
    private mutating func meetExtremeRatios() {
        guard let made = state else { return }
        for timeRatio in [1.0 / 32, 32.0] {
            for pitchScale in [0.25, 4.0] {
                rubberband_set_time_ratio(made, timeRatio)
                rubberband_set_pitch_scale(made, pitchScale)
                for _ in 0..<8 {
                    let n = min(max(Int(rubberband_get_samples_required(made)), 1), maximumChunk)
                    feed(zeros.view(frames: n), frames: n)
                    while rubberband_available(made) > 0 {
                        let got = min(Int(rubberband_available(made)), scratch.capacity)
                        retrieve(made, into: scratch.view(frames: got), frames: got)
                    }
                }
            }
        }
    }

    /// The cycle sizes the look-ahead is measured at: 1 frame up to the largest.
    static func lookaheadCycles(_ spec: RenderSpec) -> [Int] {
        var cycles = [1, 32, 128, 512, spec.maximumFrames].filter { $0 <= spec.maximumFrames }
        if cycles.last != spec.maximumFrames { cycles.append(spec.maximumFrames) }
        return cycles
    }

    /// The look-ahead for the current rate and pitch at cycles of `cycle` frames: the engine runs on silence and
    /// the largest excess of input taken over output position × rate is kept. The run goes on until the excess has
    /// not grown for 0.1 s (after 0.15 s at least, 0.5 s at most): it settles within the engine's first windows,
    /// and the runs are most of what preparing costs.
    mutating func lookaheadRun(cycle: Int, _ spec: RenderSpec, lookahead: borrowing Atomic<Int>) -> Int {
        let silence = zeros  // a local: the closure must not reach `self` while `produce` mutates it
        let (least, settled, most) = (Int(spec.sampleRate * 0.15), Int(spec.sampleRate * 0.1), Int(spec.sampleRate / 2))
        restart(lookahead: lookahead)
        var done = 0
        var grewAt = 0
        var seen = lookahead.load(ordering: .relaxed)
        while done < most, done < least || done - grewAt < settled {
            produce(frames: cycle, into: nil, lookahead: lookahead) { n in silence.view(frames: n) }
            done += cycle
            let now = lookahead.load(ordering: .relaxed)
            if now > seen {
                seen = now
                grewAt = done
            }
        }
        return seen
    }

    /// Clears the engine, jumps to the parameters' values, feeds the start pad and arms the start-delay discard.
    mutating func restart(lookahead: borrowing Atomic<Int>) {
        guard let state else { return }
        rubberband_reset(state)
        rateLog.reset(to: log2(rate.value))
        cents.reset(to: pitch.value)
        appliedTimeRatio = 1 / Double(exp2(rateLog.value))
        appliedPitchScale = TimePitchUnit.simpleRatio(exp2(Double(cents.value) / 1200))
        rubberband_set_time_ratio(state, appliedTimeRatio)
        rubberband_set_pitch_scale(state, appliedPitchScale)
        formantPreserved = formant.value >= 0.5
        rubberband_set_formant_option(state, Int32(bitPattern: formantOption))
        var pad = Int(rubberband_get_preferred_start_pad(state))
        discardLeft = max(0, Int(rubberband_get_start_delay(state)) + alignment)
        while pad > 0 {
            let n = min(pad, zeros.capacity)
            feed(zeros.view(frames: n), frames: n)
            pad -= n
        }
        inputPosition = 0
        pulled = 0
        fifoStart = 0
        fifoEnd = 0
        lookahead.store(preparedLookahead, ordering: .relaxed)
    }

    /// Plays a 100 ms Hann-windowed 1 kHz burst through the engine and returns how many frames late (or, below 0,
    /// early) its energy centroid comes out after the start pad and delay.
    mutating func measureAlignment(_ spec: RenderSpec, lookahead: borrowing Atomic<Int>) -> Int {
        let length = Int(spec.sampleRate / 10)
        let at = Int(spec.sampleRate / 5)
        let total = at + length + Int(spec.sampleRate / 5)
        let source = PCMBuffer(channelCount: channelCount, capacity: total)
        let x = source.view(frames: total)
        for i in 0..<length {
            let w = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(length))
            let v = Float(w * sin(2 * Double.pi * 1_000 * Double(i) / spec.sampleRate))
            for c in 0..<channelCount { x[c][at + i] = v }
        }
        let rateNow = Double(rate.value)
        let outFrames = Int(Double(total) / rateNow)
        let sink = PCMBuffer(channelCount: channelCount, capacity: outFrames)
        restart(lookahead: lookahead)
        var read = 0
        var done = 0
        let silence = zeros  // a local: the closure must not reach `self` while `produce` mutates it
        while done < outFrames {
            let n = min(256, outFrames - done)
            let into = sink.view(frames: outFrames).slice(from: done, frames: n)
            produce(frames: n, into: into, lookahead: lookahead) { frames in
                let start = min(read, total)
                read += frames
                if start + frames <= total { return x.slice(from: start, frames: frames) }
                silence.view(frames: frames).clear()
                return silence.view(frames: frames)
            }
            done += n
        }
        func centroid(_ v: BufferView, _ count: Int) -> Double {
            var sum = 0.0
            var weighted = 0.0
            for i in 0..<count {
                let e = Double(v[0][i] * v[0][i])
                sum += e
                weighted += e * Double(i)
            }
            return sum > 0 ? weighted / sum : 0
        }
        let input = centroid(x, total) / rateNow
        let output = centroid(sink.view(frames: outFrames), outFrames)
        guard output > 0 else { return 0 }
        return Int((output - input).rounded())
    }

    private var formantOption: UInt32 {
        formantPreserved ? RubberBandOptionFormantPreserved.rawValue : RubberBandOptionFormantShifted.rawValue
    }

    /// Renders `frames` frames into `output` (or discards them, at prepare), pulling input as the engine asks.
    /// Render thread; the closure is not escaping, so nothing is allocated.
    mutating func produce(
        frames: Int, into output: BufferView?, lookahead: borrowing Atomic<Int>, pull: (Int) -> BufferView
    ) {
        guard let state, frames > 0 else { return }
        applyParameters(frames: frames, state: state)
        var produced = 0
        var rounds = 0
        while produced < frames {
            let available = Int(rubberband_available(state))
            if available > 0 {
                if discardLeft > 0 {
                    let n = min(available, discardLeft, scratch.capacity)
                    retrieve(state, into: scratch.view(frames: n), frames: n)
                    discardLeft -= n
                    continue
                }
                if let output {
                    let n = min(available, frames - produced)
                    retrieve(state, into: output.slice(from: produced, frames: n), frames: n)
                    produced += n
                } else {
                    let n = min(available, frames - produced, scratch.capacity)
                    retrieve(state, into: scratch.view(frames: n), frames: n)
                    produced += n
                }
                continue
            }
            rounds += 1
            // The engine always gives output for enough input; a bound all the same, so a render never spins.
            if rounds > 1 << 16 { break }
            let wanted = min(max(Int(rubberband_get_samples_required(state)), 1), maximumChunk)
            if fifoStart == fifoEnd, !pullIntoFIFO(wanted, pull) { break }
            let n = min(wanted, fifoEnd - fifoStart)
            feed(fifo.view(frames: fifoEnd).slice(from: fifoStart, frames: n), frames: n)
            fifoStart += n
        }
        if produced < frames, let output { output.slice(from: produced, frames: frames - produced).clear() }
        inputPosition += Double(frames) * Double(exp2(rateLog.value))
        // Keep the input pulled exactly the look-ahead past the output's position, so a live input is pulled at
        // an even pace and delayed by exactly ``TimePitchUnit/latency``.
        let position = Int64(inputPosition.rounded(.up))
        let ahead = Int(pulled - position)
        if ahead > lookahead.load(ordering: .relaxed) { lookahead.store(ahead, ordering: .relaxed) }
        var missing = Int(position + Int64(lookahead.load(ordering: .relaxed)) - pulled)
        while missing > 0, pullIntoFIFO(min(missing, maximumChunk), pull) {
            missing -= min(missing, maximumChunk)
        }
    }

    /// Pulls `frames` input frames onto the FIFO's end; false when it has no room (rates near the top of the range
    /// with a large look-ahead: the input is then pulled as the engine asks, less evenly).
    private mutating func pullIntoFIFO(_ frames: Int, _ pull: (Int) -> BufferView) -> Bool {
        if fifoEnd + frames > fifo.capacity, fifoStart > 0 {
            let count = fifoEnd - fifoStart
            let all = fifo.view(frames: fifo.capacity)
            for c in 0..<channelCount {
                let base = all[c].baseAddress!
                memmove(base, base + fifoStart, count * MemoryLayout<Float>.size)
            }
            fifoStart = 0
            fifoEnd = count
        }
        guard fifoEnd + frames <= fifo.capacity else { return false }
        let input = pull(frames)
        let all = fifo.view(frames: fifo.capacity)
        for c in 0..<channelCount {
            let x = input[input.channelCount == 1 ? 0 : min(c, input.channelCount - 1)].baseAddress!
            (all[c].baseAddress! + fifoEnd).update(from: x, count: frames)
        }
        fifoEnd += frames
        pulled += Int64(frames)
        return true
    }

    /// Moves rate and pitch one cycle along their ramps and hands changes to the engine.
    private mutating func applyParameters(frames: Int, state: OpaquePointer) {
        rateLog.setTarget(log2(rate.value))
        cents.setTarget(pitch.value)
        let timeRatio = 1 / Double(exp2(rateLog.advance(by: frames)))
        let pitchScale = TimePitchUnit.simpleRatio(exp2(Double(cents.advance(by: frames)) / 1200))
        if timeRatio != appliedTimeRatio {
            rubberband_set_time_ratio(state, timeRatio)
            appliedTimeRatio = timeRatio
        }
        if pitchScale != appliedPitchScale {
            rubberband_set_pitch_scale(state, pitchScale)
            appliedPitchScale = pitchScale
        }
        let preserve = formant.value >= 0.5
        if preserve != formantPreserved {
            formantPreserved = preserve
            rubberband_set_formant_option(state, Int32(bitPattern: formantOption))
        }
    }

    private func feed(_ input: BufferView, frames: Int) {
        for c in 0..<channelCount {
            inputPointers[c] = UnsafePointer(input[input.channelCount == 1 ? 0 : min(c, input.channelCount - 1)].baseAddress!)
        }
        rubberband_process(state, inputPointers, UInt32(frames), 0)
    }

    private func retrieve(_ state: OpaquePointer, into output: BufferView, frames: Int) {
        for c in 0..<channelCount { outputPointers[c] = output[c].baseAddress! }
        _ = rubberband_retrieve(state, outputPointers, UInt32(frames))
    }
}

/// What preparing a time-pitch measures (the alignment and the look-ahead), kept for the life of the process for
/// each configuration met: a second unit with the same engine, format, largest cycle, rate, pitch and formant
/// setting prepares without measuring again.
final class TimePitchMeasurements: Sendable {
    struct Key: Hashable, Sendable {
        /// Prepared for real-time cycles (the look-ahead measured) or offline (not).
        let realTime: Bool
        let quality: TimePitchUnit.Quality
        let sampleRate: Double
        let channelCount: Int
        let maximumFrames: Int
        let rate: Float
        let pitchScale: Double
        let formant: Bool
    }

    struct Measurement: Sendable {
        let alignment: Int
        /// 0 offline (not measured).
        let lookahead: Int
    }

    static let shared = TimePitchMeasurements()
    private let known = Mutex<[Key: (measurement: Measurement, times: Int)]>([:])

    func lookUp(_ key: Key) -> Measurement? { known.withLock { $0[key]?.measurement } }
    func store(_ key: Key, _ measurement: Measurement) {
        known.withLock { $0[key] = (measurement, ($0[key]?.times ?? 0) + 1) }
    }
    /// How often `key` was measured since it was last forgotten (tests).
    func timesMeasured(_ key: Key) -> Int { known.withLock { $0[key]?.times ?? 0 } }
    /// Forgets one configuration's measurement (tests).
    func forget(_ key: Key) { _ = known.withLock { $0.removeValue(forKey: key) } }
}

/// The look-ahead runs shared out between the preparing thread and its helper: the next run to take, the largest
/// look-ahead found, and the alignment the helper measured first.
private final class MeasurementPlan: @unchecked Sendable {
    // Unchecked Sendable: every field is read and written with `condition`'s lock held.
    private let condition = BlockingCondition()
    private let jobs: Int
    private var taken = 0
    private var found = 0
    private var alignmentState: (published: Bool, value: Int?) = (false, nil)

    init(jobs: Int) { self.jobs = jobs }

    /// The index of the next run, nil when all are taken.
    func next() -> Int? {
        condition.lock()
        defer { condition.unlock() }
        guard taken < jobs else { return nil }
        taken += 1
        return taken - 1
    }

    func record(_ lookahead: Int) {
        condition.lock()
        found = max(found, lookahead)
        condition.unlock()
    }

    var largest: Int {
        condition.lock()
        defer { condition.unlock() }
        return found
    }

    /// The helper's alignment, or nil when it could not make its stretcher.
    func publish(alignment: Int?) {
        condition.lock()
        alignmentState = (true, alignment)
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until the helper has published its alignment; nil when it could not measure one.
    func waitForAlignment() -> Int? {
        condition.lock()
        defer { condition.unlock() }
        while !alignmentState.published { condition.wait() }
        return alignmentState.value
    }
}
