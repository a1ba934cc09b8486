import AudioCore
import AudioGraph
import CVoiceProcessing
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Echo cancellation, noise suppression and gain control for a voice: VoiceProcessingIO's role, through WebRTC's
/// audio processing module, referenced to exactly what is played rather than to a device loopback.
///
/// - Buses: input 0 the microphone (near end), input 1 the reference (far end: whatever reaches the speaker,
///   typically the accompaniment bus); output 0 the processed microphone, with the microphone's channels.
/// - Rates: 8, 16, 32 or 48 kHz (a `converter` takes other graph rates there); 1 or 2 channels.
/// - Parameters, each changeable while running (see ``VoiceProcessingUnit/choices`` for the named ones):
///   `echoCancellation` (on/off, on), `suppressionLevel` (the echo suppressor's aggressiveness: 0 low, 1 moderate,
///   2 high; low, which keeps the most of a voice sounding over the music), `noiseSuppression` (0 off, 1 low,
///   2 moderate, 3 high, 4 veryHigh; moderate), `gainControl` (0 off, 1 adaptiveDigital, 2 fixedDigital;
///   adaptiveDigital: the library's fixed-digital compressor and limiter with a gain this unit adapts to the
///   voice's peaks), `targetLevel` (where the voice's louder peaks land, −31 … 0 dBFS; −3), `compressionGain`
///   (fixedDigital's gain, 0 … 90 dB; 9; adaptiveDigital starts from 0 dB), `limiter` (on/off, on),
///   `highPassFilter` (on/off, on: removes rumble below about 80 Hz), `referenceDelay` (a hint of the echo's
///   delay, 0 … 500 ms; 0: the unit finds it — a hint is taken at once as the delay until the unit's estimate says
///   otherwise).
///   Switching a mode fades the output out over one 10 ms frame, holds it silent while the library's delays settle
///   (30 ms at 48 kHz) and fades it in over the next frame, so no switch clicks; `targetLevel` and
///   `compressionGain` move 1 dB a frame toward a new value.
/// - Read-outs (properties): `voiceActivity` (the last frame held voice), `estimatedDelay` (the echo's delay as
///   the unit found it), `echoReturnLossEnhancement` (dB: how much weaker the output is than the microphone while
///   the far end plays, measured by this unit over about a second; meaningful while only the far end sounds).
/// - The echo's delay: estimated by GCC-PHAT (`EchoDelayEstimator`) every quarter second; the reference is held
///   back so that it reaches the canceller 40 ms before its echo, where the canceller does best.
/// - Timing: the library works in 10 ms frames; at any cycle size (1 … the graph's largest, varying) the unit
///   collects them through fixed FIFOs, and the library's own delay, which depends on the modes, is made up to its
///   largest: ``latency`` is one frame less a sample plus that, whatever the modes (1,150 frames at 48 kHz), and
///   the output is the same whatever the cycle sizes. Unlike iOS it never ducks other audio.
/// - Threads: the library (which locks a mutex of its own in every call) runs on a worker thread of the unit's
///   own (`la-voice`); the render thread only hands it whole 10 ms frames and takes processed ones back, through
///   fixed single-producer, single-consumer FIFOs — no lock, no allocation. Without a deadline (offline, and until
///   a host says otherwise through ``/AudioGraph/RenderUnit/willRender(_:)``) the render thread waits for the worker
///   each cycle, so the output is exactly the same as if it ran the library itself. In real time it never waits:
///   the output is held back by the largest cycle and half a 10 ms frame more, so the worker has a cycle to
///   process each frame, and ``latency`` counts it (at 256-frame cycles: 1,150 + 496 frames). A frame the worker
///   has not finished in time is given as silence and counted in ``workerShortfalls``.
///
/// Thread safety: as every unit; the worker is the unit's own and stops with it.
public final class VoiceProcessingUnit: RenderUnit {
    public let core: UnitCore
    /// `echoCancellation`: the echo canceller on (1, the default) or off (0).
    public static let echoCancellationSpec = ParameterSpec(
        "echoCancellation", name: "Echo cancellation", range: 0...1, unit: .boolean, default: 1, smoothingTime: 0)
    /// `suppressionLevel`: the echo suppressor's aggressiveness, 0 low (the default), 1 moderate, 2 high.
    public static let suppressionLevelSpec = ParameterSpec(
        "suppressionLevel", name: "Echo suppression level", range: 0...2, unit: .generic, default: 0, smoothingTime: 0)
    /// `noiseSuppression`: 0 off, 1 low, 2 moderate (the default), 3 high, 4 veryHigh.
    public static let noiseSuppressionSpec = ParameterSpec(
        "noiseSuppression", name: "Noise suppression", range: 0...4, unit: .generic, default: 2, smoothingTime: 0)
    /// `gainControl`: 0 off, 1 adaptiveDigital (the default), 2 fixedDigital.
    public static let gainControlSpec = ParameterSpec(
        "gainControl", name: "Gain control", range: 0...2, unit: .generic, default: 1, smoothingTime: 0)
    /// `targetLevel`: where the voice's louder peaks land, −31 … 0 dBFS, default −3; moves 1 dB a frame.
    public static let targetLevelSpec = ParameterSpec(
        "targetLevel", name: "Target level", range: -31...0, unit: .decibels, default: -3, smoothingTime: 0)
    /// `compressionGain`: fixedDigital's gain, 0 … 90 dB, default 9; moves 1 dB a frame.
    public static let compressionGainSpec = ParameterSpec(
        "compressionGain", name: "Compression gain", range: 0...90, unit: .decibels, default: 9, smoothingTime: 0)
    /// `limiter`: the library's limiter on (1, the default) or off (0).
    public static let limiterSpec = ParameterSpec(
        "limiter", name: "Limiter", range: 0...1, unit: .boolean, default: 1, smoothingTime: 0)
    /// `highPassFilter`: the high-pass that removes rumble below about 80 Hz, on (1, the default) or off (0).
    public static let highPassFilterSpec = ParameterSpec(
        "highPassFilter", name: "High-pass filter", range: 0...1, unit: .boolean, default: 1, smoothingTime: 0)
    /// `referenceDelay`: a hint of the echo's delay, 0 … 500 ms; 0 (the default): the unit finds it.
    public static let referenceDelaySpec = ParameterSpec(
        "referenceDelay", name: "Reference delay", range: 0...500, unit: .milliseconds, default: 0, smoothingTime: 0)

    /// The names of the values of the enumerated parameters, by parameter: index = value.
    public static let choices: [String: [String]] = [
        "suppressionLevel": ["low", "moderate", "high"],
        "noiseSuppression": ["off", "low", "moderate", "high", "veryHigh"],
        "gainControl": ["off", "adaptiveDigital", "fixedDigital"],
    ]

    /// The rates the library runs at.
    public static let sampleRates: [Double] = [8_000, 16_000, 32_000, 48_000]

    /// Echo cancellation on or off (``echoCancellationSpec``); set it from any thread.
    public let echoCancellation: Parameter
    /// The echo suppressor's aggressiveness (``suppressionLevelSpec``); set it from any thread.
    public let suppressionLevel: Parameter
    /// The noise suppression level (``noiseSuppressionSpec``); set it from any thread.
    public let noiseSuppression: Parameter
    /// The gain control mode (``gainControlSpec``); set it from any thread.
    public let gainControl: Parameter
    /// The gain control's target level in dBFS (``targetLevelSpec``); set it from any thread.
    public let targetLevel: Parameter
    /// The fixed-digital gain in dB (``compressionGainSpec``); set it from any thread.
    public let compressionGain: Parameter
    /// The limiter on or off (``limiterSpec``); set it from any thread.
    public let limiter: Parameter
    /// The high-pass filter on or off (``highPassFilterSpec``); set it from any thread.
    public let highPassFilter: Parameter
    /// The hint of the echo's delay in milliseconds (``referenceDelaySpec``); set it from any thread.
    public let referenceDelay: Parameter

    private let channelCount: Int
    private let referenceChannelCount: Int
    /// Frames in one of the library's 10 ms frames.
    public let frameLength: Int

    /// The render thread's side: the inbox it fills, the outbox it empties, where it stands in a frame, and what the
    /// host said of its cycles; and the control side's bookkeeping of the worker (never touched by render).
    private let renderState = RenderThreadBound(VoiceRenderState())
    /// The worker's side: the library's processor and everything a frame goes through. The worker, `la-voice`, uses
    /// it (``RenderThreadBound/onWorkerThread``) in `work()` and what that calls. The control side
    /// (``RenderThreadBound/whileStopped``) touches it only while no worker runs — after `stopWorker()` has joined
    /// the thread, or with `worker` nil, before `startWorker()` creates the next (thread creation and join order the
    /// hand-over) — and the render thread never does.
    private let workerState: RenderThreadBound<VoiceWorkerState>

    // The render thread hands whole 10 ms frames to the worker through the inbox and takes processed ones from the
    // outbox: single-producer, single-consumer, fixed, lock-free. The counters order the slots' contents.
    private let slotsWritten = Atomic<Int>(0)
    private let slotsTaken = Atomic<Int>(0)
    /// Slots the worker has processed (and put on the outbox).
    private let slotsDone = Atomic<Int>(0)
    private let lateFrames = Atomic<Int>(0)
    private let droppedFrames = Atomic<Int>(0)
    private let wake = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    /// Tests: microseconds the worker sleeps before each frame (a worker falling behind).
    let workerDelayForTesting = Atomic<Int>(0)
    private let latencyFrames = Atomic<Int>(0)
    /// Worker → control side.
    private let readOuts = VoiceReadOuts()

    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` off 8/16/32/48 kHz, `.invalidFormat` for more
    ///   than two channels.
    public init(format: StreamFormat, referenceChannelCount: Int? = nil) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        guard Self.sampleRates.contains(f.sampleRate) else {
            throw AudioError(
                .unsupportedSampleRate,
                "voiceProcessing runs at 8000, 16000, 32000 or 48000 Hz, not \(formatHz(f.sampleRate)): put a "
                    + "converter in front of it (and after it) to reach one")
        }
        let referenceChannels = referenceChannelCount ?? f.channelCount
        guard (1...2).contains(f.channelCount), (1...2).contains(referenceChannels) else {
            throw AudioError(
                .invalidFormat,
                "voiceProcessing takes a microphone and a reference of 1 or 2 channels, got \(f.channelCount) and "
                    + "\(referenceChannels)")
        }
        channelCount = f.channelCount
        self.referenceChannelCount = referenceChannels
        let referenceFormat = try f.with(channelCount: referenceChannels)
        frameLength = Int(f.sampleRate) / 100
        let owner = "voiceProcessing"
        echoCancellation = Parameter(Self.echoCancellationSpec, owner: owner)
        suppressionLevel = Parameter(Self.suppressionLevelSpec, owner: owner)
        noiseSuppression = Parameter(Self.noiseSuppressionSpec, owner: owner)
        gainControl = Parameter(Self.gainControlSpec, owner: owner)
        targetLevel = Parameter(Self.targetLevelSpec, owner: owner)
        compressionGain = Parameter(Self.compressionGainSpec, owner: owner)
        limiter = Parameter(Self.limiterSpec, owner: owner)
        highPassFilter = Parameter(Self.highPassFilterSpec, owner: owner)
        referenceDelay = Parameter(Self.referenceDelaySpec, owner: owner)
        // Made once nothing can throw: a throwing init does not run deinit (a graph file naming this unit at
        // 24 kHz leaked the worker state's buffers — found by the graph-file fuzz target's leak check).
        workerState = RenderThreadBound(
            VoiceWorkerState(
                channelCount: f.channelCount, referenceChannelCount: referenceChannels, frameLength: frameLength,
                echoCancellation: echoCancellation, suppressionLevel: suppressionLevel,
                noiseSuppression: noiseSuppression, gainControl: gainControl, targetLevel: targetLevel,
                compressionGain: compressionGain, limiter: limiter, highPassFilter: highPassFilter,
                referenceDelay: referenceDelay, readOuts: readOuts))
        core = UnitCore(kind: "voiceProcessing", inputs: [f, referenceFormat], outputs: [f],
            parameters: [
                echoCancellation, suppressionLevel, noiseSuppression, gainControl, targetLevel, compressionGain,
                limiter, highPassFilter, referenceDelay,
            ])
    }

    /// Stops the worker; the worker state (the processor, its buffers) goes with the unit.
    deinit {
        stopWorker()
    }

    /// Seconds the output lags the microphone: one 10 ms frame less a sample, plus the library's largest delay.
    public var latency: Double { Double(latencyFrames.load(ordering: .relaxed)) / outputFormats[0].sampleRate }

    public var propertyNames: [String] {
        commonPropertyNames + ["voiceActivity", "estimatedDelay", "echoReturnLossEnhancement"]
    }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "voiceActivity": return .bool(voiceActivity)
        case "estimatedDelay": return .double(estimatedDelay)
        case "echoReturnLossEnhancement": return .double(echoReturnLossEnhancement ?? .nan)
        default: return try commonProperty(name)
        }
    }

    /// True when the last 10 ms frame held voice (the library's voice activity detector, after the processing).
    public var voiceActivity: Bool { readOuts.voice.load(ordering: .relaxed) }
    /// Seconds of echo delay the unit has found (or was told by `referenceDelay`); 0 until it knows.
    public var estimatedDelay: Double { Double(readOuts.delayMilliseconds.load(ordering: .relaxed)) / 1000 }
    /// Decibels by which the output is weaker than the microphone while the far end plays, averaged over about a
    /// second: the echo return loss enhancement while only the far end sounds (a voice at the microphone lowers
    /// it: it is not echo); nil before the far end has played.
    public var echoReturnLossEnhancement: Double? {
        let v = Double(bitPattern: readOuts.erleBits.load(ordering: .relaxed))
        return v.isNaN ? nil : v
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        // What can fail first, while the worker (if any) still runs on the old resources.
        let delays = (
            split: try measureLibraryDelay(spec.sampleRate, echo: false, noise: false),
            echo: try measureLibraryDelay(spec.sampleRate, echo: true, noise: false),
            noise: try measureLibraryDelay(spec.sampleRate, echo: false, noise: true),
            both: try measureLibraryDelay(spec.sampleRate, echo: true, noise: true)
        )
        let made = try createProcessor(spec.sampleRate)
        stopWorker()
        // Room for two of the largest cycles' frames in flight and at least a second of frames: the inbox fills
        // (and input is dropped) only when the worker has stalled.
        let inboxSlots = max(2 * ((spec.maximumFrames + frameLength - 1) / frameLength) + 4, 100)
        let inbox = PCMBuffer(channelCount: channelCount + referenceChannelCount, capacity: inboxSlots * frameLength)
        renderState.whileStopped.inbox = inbox
        renderState.whileStopped.inboxSlots = inboxSlots
        renderState.whileStopped.discard = PCMBuffer(channelCount: channelCount, capacity: spec.maximumFrames)
        workerState.whileStopped.allocate(
            spec, inbox: inbox, inboxSlots: inboxSlots, processor: made, libraryDelays: delays)
        let largest = max(max(delays.split, delays.echo), max(delays.noise, delays.both))
        renderState.whileStopped.largestLibraryDelay = largest
        latencyFrames.store(frameLength - 1 + largest + renderState.whileStopped.lead, ordering: .relaxed)
        // The worker starts here, so that a unit that cannot have one fails to prepare; reset() restarts it.
        try startWorker()
    }

    /// The library's delay for the modes given, with fixed digital gain control at 0 dB (no gain, no limiter) on as
    /// well, so the bands are split whatever the modes (gain control adds no delay of its own): a 100 ms
    /// Hann-windowed 300 Hz … 3 kHz chirp through a processor of its own; the delay is where the output correlates
    /// best with the chirp (within 60 ms), to the frame.
    private func measureLibraryDelay(_ rate: Double, echo: Bool, noise: Bool) throws(AudioError) -> Int {
        var message = [CChar](repeating: 0, count: 256)
        guard let p = la_voice_create(Int32(rate), 1, 1, &message, Int32(message.count)) else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw AudioError(.invalidState, "voiceProcessing: \(text)")
        }
        defer { la_voice_destroy(p) }
        var s = la_voice_settings(
            echo_cancellation: echo ? 1 : 0, suppression_level: 0, noise_suppression: noise ? 1 : -1, gain_control: 1,
            target_level_dbfs: 3, compression_gain_db: 0, limiter: 0, high_pass_filter: 0)
        _ = la_voice_apply(p, &s)
        let n = frameLength
        let chirpFrames = Int(rate / 10)
        let maximumLag = Int(rate * 0.06)
        var size = 1
        while size < chirpFrames + maximumLag + chirpFrames { size *= 2 }
        let fft = FFT(size: size)
        let re = UnsafeMutablePointer<Double>.allocate(capacity: size)
        let im = UnsafeMutablePointer<Double>.allocate(capacity: size)
        defer {
            re.deallocate()
            im.deallocate()
        }
        re.initialize(repeating: 0, count: size)
        im.initialize(repeating: 0, count: size)
        let mic = PCMBuffer(channelCount: 1, capacity: n)
        let reference = PCMBuffer(channelCount: 1, capacity: n)
        reference.view(frames: n).clear()
        var micPointer: UnsafeMutablePointer<Float>? = mic.view(frames: n)[0].baseAddress!
        var referencePointer: UnsafePointer<Float>? = UnsafePointer(reference.view(frames: n)[0].baseAddress!)
        // Half a second of silence first (the canceller sets itself up), then the chirp; the output from the chirp's
        // start into `re`, the chirp into `im`.
        let start = 50 * n
        let total = start + chirpFrames + maximumLag + n
        var f = 0
        while f * n < total {
            let x = mic.view(frames: n)[0]
            for i in 0..<n {
                let t = f * n + i - start
                var v = 0.0
                if t >= 0, t < chirpFrames {
                    let time = Double(t) / rate
                    let w = 0.5 - 0.5 * cos(2 * Double.pi * Double(t) / Double(chirpFrames))
                    v = 0.3 * w * sin(2 * Double.pi * (300 * time + 13_500 * time * time))
                    im[t] = v
                }
                x[i] = Float(v)
            }
            _ = la_voice_process_reverse(p, &referencePointer)
            _ = la_voice_process(p, &micPointer)
            for i in 0..<n {
                let t = f * n + i - start
                if t >= 0, t < size { re[t] = Double(x[i]) }
            }
            f += 1
        }
        // One transform carries both; output · conj(chirp), back to lags.
        fft.forward(re, im)
        let cross = (0..<size).map { fft.crossSpectrum(re, im, at: $0) }
        for k in 0..<size {
            re[k] = cross[k].re
            im[k] = cross[k].im
        }
        fft.inverse(re, im)
        var best = 0
        for k in 0...maximumLag where re[k] > re[best] { best = k }
        return best
    }

    /// The canceller is given the reference this much before its echo is expected: it cancels echoes from about
    /// 10 to 100 ms after the reference best (measured: 35–40 dB of ERLE there, 13 dB at 150 ms, 20 dB under
    /// 5 ms).
    static let delayMargin = 0.04

    /// A new processor with every component enabled once (what each makes when first enabled is made here, not on
    /// the render thread), then run on half a second of silence: the canceller sets itself up over its first
    /// frames, and far-end sound in that time leaves it 20 dB short.
    /// On failure the processor in place (if any) stays.
    private func createProcessor(_ rate: Double) throws(AudioError) -> OpaquePointer {
        var message = [CChar](repeating: 0, count: 256)
        guard
            let made = la_voice_create(
                Int32(rate), Int32(channelCount), 1, &message, Int32(message.count))
        else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw AudioError(.invalidState, "voiceProcessing: \(text)")
        }
        return made
    }

    /// Starts over: a new processor (the canceller forgets the room), the FIFOs and the delay estimate cleared.
    public func reset() {
        guard let spec else { return }
        // Stopped before the processor is looked at (the worker's state): a unit without a processor has no worker
        // (startWorker() needs one), so this stops nothing then.
        stopWorker()
        guard workerState.whileStopped.processor != nil else { return }
        // A new processor (the canceller forgets the room); if one cannot be made, the old one carries on.
        if let made = try? createProcessor(spec.sampleRate) { workerState.whileStopped.install(made) }
        renderState.whileStopped.filled = 0
        renderState.whileStopped.droppingFrame = false
        renderState.whileStopped.owed = 0
        slotsWritten.store(0, ordering: .relaxed)
        slotsTaken.store(0, ordering: .relaxed)
        slotsDone.store(0, ordering: .relaxed)
        // One frame less a sample of silence ahead of the first processed frame — enough that every cycle finds its
        // frames whatever the cycle sizes, once the worker has processed what the cycle completed — and in real
        // time the lead, so that it has processed them a cycle earlier.
        let prefill = frameLength - 1 + renderState.whileStopped.lead
        let outbox = FrameRingBuffer(
            channelCount: channelCount,
            capacity: prefill + renderState.whileStopped.inboxSlots * frameLength + spec.maximumFrames + frameLength)
        let silence = PCMBuffer(channelCount: channelCount, capacity: prefill)
        silence.view(frames: prefill).clear()
        outbox.write(silence.view(frames: prefill))
        // The same ring for both sides: the render thread reads it, the worker writes it.
        renderState.whileStopped.outbox = outbox
        workerState.whileStopped.reset(sampleRate: spec.sampleRate, outbox: outbox)
        readOuts.voice.store(false, ordering: .relaxed)
        readOuts.erleBits.store(Double.nan.bitPattern, ordering: .relaxed)
        // A thread that cannot be started now leaves the unit silent, its cycles counted in workerShortfalls.
        try? startWorker()
    }

    /// Without a deadline (and until told otherwise) the render thread waits for the worker and the latency is the
    /// library's alone; with real-time cycles it never waits, and the latency grows by the largest cycle and half a
    /// 10 ms frame. `IOUnit` and the live-stream session tell it what their devices run.
    public func willRender(_ mode: RenderingMode) {
        let cycleFrames = mode.maximumCycleFrames
        let waits = cycleFrames == nil
        if cycleFrames == renderState.whileStopped.announcedCycle, renderState.whileStopped.waits == waits { return }
        renderState.whileStopped.announcedCycle = cycleFrames
        renderState.whileStopped.waits = waits
        // A cycle's frames, and half a 10 ms frame of slack for the worker's scheduling.
        let lead = cycleFrames.map { $0 + frameLength / 2 } ?? 0
        renderState.whileStopped.lead = lead
        latencyFrames.store(
            frameLength - 1 + renderState.whileStopped.largestLibraryDelay + lead, ordering: .relaxed)
        reset()
    }

    /// Output frames given as silence because the worker had not processed them in time (real time only; 0 in
    /// normal operation), and input frames dropped because the worker had stopped taking them.
    public var workerShortfalls: Int { lateFrames.load(ordering: .relaxed) + droppedFrames.load(ordering: .relaxed) }

    /// - Throws: ``AudioError`` `.resourceUnavailable` when no thread can be started.
    private func startWorker() throws(AudioError) {
        guard renderState.whileStopped.worker == nil, workerState.whileStopped.processor != nil else { return }
        stopping.store(false, ordering: .releasing)
        // Unretained, and borrowed while it works: the thread must not keep the unit alive (deinit stops it).
        let unit = Unmanaged.passUnretained(self)
        let thread = try WorkerThread(name: "la-voice") { unit._withUnsafeGuaranteedRef { $0.work() } }
        renderState.whileStopped.worker = thread
        renderState.whileStopped.working = true
    }

    private func stopWorker() {
        guard let worker = renderState.whileStopped.worker else { return }
        stopping.store(true, ordering: .releasing)
        wake.signal()
        worker.join()
        renderState.whileStopped.worker = nil
        renderState.whileStopped.working = false
    }

    /// The worker: each frame the render thread handed over, through the library, onto the outbox.
    private func work() {
        while !stopping.load(ordering: .acquiring) {
            let taken = slotsTaken.load(ordering: .relaxed)
            guard taken < slotsWritten.load(ordering: .acquiring), let processor = workerState.onWorkerThread.processor
            else {
                wake.wait(timeout: 0.1)
                continue
            }
            workerState.onWorkerThread.take(slot: taken)
            slotsTaken.store(taken + 1, ordering: .releasing)
            let delay = workerDelayForTesting.load(ordering: .relaxed)
            if delay > 0 { usleep(UInt32(delay)) }
            workerState.onWorkerThread.processFrame(processor)
            slotsDone.store(taken + 1, ordering: .releasing)
        }
    }

    public func render(_ context: RenderContext) {
        let frames = context.frameCount
        let output = context.output(0)
        guard renderState.onRenderThread.working, frames > 0 else {
            output.clear()
            if frames > 0 { lateFrames.add(frames, ordering: .relaxed) }
            return
        }
        let mic = context.input(0)
        let reference = context.input(1)
        // The render thread's state in locals for the cycle, written back at its end.
        let inbox = renderState.onRenderThread.inbox
        let inboxSlots = renderState.onRenderThread.inboxSlots
        let outbox = renderState.onRenderThread.outbox
        let discard = renderState.onRenderThread.discard
        var filled = renderState.onRenderThread.filled
        var droppingFrame = renderState.onRenderThread.droppingFrame
        var owed = renderState.onRenderThread.owed
        defer {
            renderState.onRenderThread.filled = filled
            renderState.onRenderThread.droppingFrame = droppingFrame
            renderState.onRenderThread.owed = owed
        }
        let slots = inbox.view(frames: inbox.capacity)
        var done = 0
        while done < frames {
            if filled == 0 {
                // A new frame: drop it if the worker has stopped taking them (its slots are all in use).
                droppingFrame = slotsWritten.load(ordering: .relaxed) - slotsTaken.load(ordering: .acquiring) >= inboxSlots
            }
            let take = min(frames - done, frameLength - filled)
            if !droppingFrame {
                let slot = slots.slice(from: (slotsWritten.load(ordering: .relaxed) % inboxSlots) * frameLength + filled, frames: take)
                for c in 0..<channelCount { slot[c].baseAddress!.update(from: mic[c].baseAddress! + done, count: take) }
                for c in 0..<referenceChannelCount {
                    slot[channelCount + c].baseAddress!.update(from: reference[c].baseAddress! + done, count: take)
                }
            }
            filled += take
            done += take
            if filled == frameLength {
                filled = 0
                if droppingFrame {
                    droppedFrames.add(frameLength, ordering: .relaxed)
                    owed -= frameLength  // its output will never come: give silence for it instead of skipping
                } else {
                    slotsWritten.add(1, ordering: .releasing)
                    wake.signal()
                }
            }
        }
        if renderState.onRenderThread.waits {
            // No deadline: wait (sleeping, no lock) until the worker has processed every frame handed over, so the
            // output does not depend on how fast it was.
            // A second at most: a worker that has stopped does not hang the render (its frames come out late).
            let written = slotsWritten.load(ordering: .relaxed)
            let deadline = monotonicNanoseconds() + 1_000_000_000
            while slotsDone.load(ordering: .acquiring) < written, monotonicNanoseconds() < deadline { usleep(20) }
        }
        // Frames given as silence earlier, now come: skip them.
        while owed > 0 {
            let n = min(owed, discard.capacity, outbox.availableToRead)
            if n == 0 { break }
            owed -= outbox.read(into: discard.view(frames: n))
        }
        var got = 0
        if owed >= 0 {
            got = outbox.read(into: output)
        } else {
            // Dropped input frames: silence in their place first.
            let silent = min(-owed, frames)
            output.prefix(silent).clear()
            owed += silent
            got = silent + (silent < frames ? outbox.read(into: output.slice(from: silent, frames: frames - silent)) : 0)
        }
        if got < frames {
            output.slice(from: got, frames: frames - got).clear()
            owed += frames - got
            lateFrames.add(frames - got, ordering: .relaxed)
        }
    }

    /// Frames over which the reference's power is remembered (the echo's delay margin and a room's tail).
    static let recentFrames = 48
    /// Frames of the far end playing over which the output's power is compared with the microphone's (ERLE).
    static let erleFrames = 100
    /// How far above the mean the correlation's peak must stand for an estimate to count.
    static let clarity = 6.0
}

/// What the worker measures, for any thread to read.
private final class VoiceReadOuts: Sendable {
    let voice = Atomic<Bool>(false)
    let delayMilliseconds = Atomic<Int>(0)
    let erleBits = Atomic<UInt64>(Double.nan.bitPattern)
}

/// The render thread's side of a ``VoiceProcessingUnit`` (while it renders; the control side's otherwise), and the
/// control side's bookkeeping, which the render thread never touches.
private struct VoiceRenderState {
    /// `inboxSlots` frames of the microphone's channels then the reference's; slot i is frames i·F ..< (i+1)·F.
    /// The worker holds the same buffer: the slot counters order their use of it.
    var inbox = PCMBuffer(channelCount: 1, capacity: 0)
    var inboxSlots = 0
    /// Processed frames, from the worker (which holds the same ring and writes it).
    var outbox = FrameRingBuffer(channelCount: 1, capacity: 1)
    /// Frames of the slot being filled; whether the frame is being dropped (the inbox was full); output frames given
    /// as silence because the worker was late, still to be skipped when they come.
    var filled = 0
    var droppingFrame = false
    var owed = 0
    var discard = PCMBuffer(channelCount: 1, capacity: 0)
    /// What the host said of its cycles (``VoiceProcessingUnit/willRender(_:)``): no deadline (`waits`, also until
    /// told) — the render thread waits for the worker; real-time cycles of at most `announcedCycle` frames — it
    /// never waits, and the output is held back `lead` frames more (the largest cycle and half a 10 ms frame) so the
    /// worker has a cycle to process each frame.
    var waits = true
    /// `worker != nil`, for the render thread (no reference counting there).
    var working = false

    // The control side's alone.
    var announcedCycle: Int?
    var lead = 0
    var worker: WorkerThread?
    /// The worker state's `largestLibraryDelay`, for willRender while the worker runs.
    var largestLibraryDelay = 0
}

/// The worker's side of a ``VoiceProcessingUnit``: the library's processor (owned: destroyed when this state goes,
/// with the unit), the frames it works on, the delay estimate, the mode switch, the gain adaptation and the sums
/// behind the read-outs. The `la-voice` worker's while it runs; the control side's while no worker runs (see the
/// unit's `workerState`).
private struct VoiceWorkerState: ~Copyable {
    let channelCount: Int
    let referenceChannelCount: Int
    let frameLength: Int
    let echoCancellation: Parameter
    let suppressionLevel: Parameter
    let noiseSuppression: Parameter
    let gainControl: Parameter
    let targetLevel: Parameter
    let compressionGain: Parameter
    let limiter: Parameter
    let highPassFilter: Parameter
    let referenceDelay: Parameter
    let readOuts: VoiceReadOuts
    /// The rate of the spec the unit was prepared with (nil before), set while no worker runs.
    var sampleRate: Double?

    var processor: OpaquePointer?
    var micFrame = PCMBuffer(channelCount: 1, capacity: 0)
    var referenceFrame = PCMBuffer(channelCount: 1, capacity: 0)
    /// What the canceller is given: the reference in mono. A stereo reference is summed, not averaged: each speaker
    /// puts its own channel into the room, so a hard-panned accompaniment's echo is as loud as a centred one's, and
    /// the library, whose far-end detection goes by absolute level, would cancel an averaged (6 dB quieter) one
    /// about 10 dB less (measured: 24 against 35 dB).
    var cancellerReference = PCMBuffer(channelCount: 1, capacity: 0)
    let micPointers: UnsafeMutablePointer<UnsafeMutablePointer<Float>?>
    let referencePointers: UnsafeMutablePointer<UnsafePointer<Float>?>
    /// The render thread's inbox (the same buffer; the slot counters order its use) and its slot count.
    var inbox = PCMBuffer(channelCount: 1, capacity: 0)
    var inboxSlots = 0
    /// Where processed frames go (the same ring the render thread reads).
    var outbox = FrameRingBuffer(channelCount: 1, capacity: 1)
    /// The library's own delay (frames) with only gain control or the high-pass filter on (at 32 and 48 kHz the
    /// library then splits the signal into bands and joins them again), with the echo canceller on, the noise
    /// suppressor on, and both: measured at prepare. The output is held back by what the current modes lack of the
    /// largest, so switching them does not move it in time.
    var libraryDelays = (split: 0, echo: 0, noise: 0, both: 0)
    var largestLibraryDelay = 0
    var compensation = DelayLine(channelCount: 1, capacity: 0)
    var settings = la_voice_settings()
    /// A mode switch in progress: 0 none; 1 this frame fades out under the old modes; 2 the new modes are applied
    /// at the next frame; 3 muted for `mutedLeft` frames; 4 this frame fades in.
    var fade = 0
    var mutedLeft = 0
    var estimatesSeen = 0
    /// adaptiveDigital: the peak level of the voice at the microphone (dBFS; nil until a voiced frame), and the gain
    /// that brings it to `targetLevel`, which the library's fixed-digital stage applies.
    var voicePeak: Float?
    var adaptiveGain: Float = 0
    /// The reference's power over the last ``VoiceProcessingUnit/recentFrames`` frames (the echo's delay margin and
    /// a room's tail), and the echo's power against the loudest of them while the far end plays alone (1 until
    /// measured).
    let recentReference: UnsafeMutablePointer<Double>
    var recentNext = 0
    var echoReturn = 1.0
    /// The microphone's and the output's power in the last ``VoiceProcessingUnit/erleFrames`` frames during which
    /// the far end played.
    let erleInput: UnsafeMutablePointer<Double>
    let erleOutput: UnsafeMutablePointer<Double>
    var erleNext = 0
    var erleFilled = 0
    /// The reference as it arrives, one frame; it goes through `referenceLine` to `referenceFrame`.
    var incomingReference = PCMBuffer(channelCount: 1, capacity: 0)
    var referenceLine = DelayLine(channelCount: 1, capacity: 0)
    /// Frames the reference is held back before the canceller sees it (see ``VoiceProcessingUnit/estimatedDelay``).
    var preDelay = 0
    var estimator: EchoDelayEstimator?
    /// The echo delay in force (frames; 0 until known), the hint it was seeded from, and a candidate waiting to be
    /// confirmed by the next estimate.
    var delayFrames = 0
    var seededHint: Float = 0
    var candidate = -1

    init(
        channelCount: Int, referenceChannelCount: Int, frameLength: Int, echoCancellation: Parameter,
        suppressionLevel: Parameter, noiseSuppression: Parameter, gainControl: Parameter, targetLevel: Parameter,
        compressionGain: Parameter, limiter: Parameter, highPassFilter: Parameter, referenceDelay: Parameter,
        readOuts: VoiceReadOuts
    ) {
        self.channelCount = channelCount
        self.referenceChannelCount = referenceChannelCount
        self.frameLength = frameLength
        self.echoCancellation = echoCancellation
        self.suppressionLevel = suppressionLevel
        self.noiseSuppression = noiseSuppression
        self.gainControl = gainControl
        self.targetLevel = targetLevel
        self.compressionGain = compressionGain
        self.limiter = limiter
        self.highPassFilter = highPassFilter
        self.referenceDelay = referenceDelay
        self.readOuts = readOuts
        recentReference = .allocate(capacity: VoiceProcessingUnit.recentFrames)
        erleInput = .allocate(capacity: VoiceProcessingUnit.erleFrames)
        erleOutput = .allocate(capacity: VoiceProcessingUnit.erleFrames)
        micPointers = .allocate(capacity: channelCount)
        micPointers.initialize(repeating: nil, count: channelCount)
        referencePointers = .allocate(capacity: 1)
        referencePointers.initialize(to: nil)
    }

    deinit {
        if let processor { la_voice_destroy(processor) }
        micPointers.deallocate()
        referencePointers.deallocate()
        erleInput.deallocate()
        erleOutput.deallocate()
        recentReference.deallocate()
    }

    /// The unit's allocateRenderResources, the worker's part: buffers for `spec`, the render thread's inbox, and
    /// `made` in place of the processor.
    mutating func allocate(
        _ spec: RenderSpec, inbox: PCMBuffer, inboxSlots: Int, processor made: OpaquePointer,
        libraryDelays delays: (split: Int, echo: Int, noise: Int, both: Int)
    ) {
        sampleRate = spec.sampleRate
        micFrame = PCMBuffer(channelCount: channelCount, capacity: frameLength)
        referenceFrame = PCMBuffer(channelCount: referenceChannelCount, capacity: frameLength)
        cancellerReference = PCMBuffer(channelCount: 1, capacity: frameLength)
        incomingReference = PCMBuffer(channelCount: referenceChannelCount, capacity: frameLength)
        referenceLine = DelayLine(
            channelCount: referenceChannelCount, capacity: Self.maximumPreDelay(spec.sampleRate) + 2 * frameLength)
        self.inbox = inbox
        self.inboxSlots = inboxSlots
        estimator = EchoDelayEstimator(
            sampleRate: spec.sampleRate,
            maximumDelay: Double(VoiceProcessingUnit.referenceDelaySpec.range.upperBound) / 1000)
        install(made)
        libraryDelays = delays
        let largest = max(max(delays.split, delays.echo), max(delays.noise, delays.both))
        largestLibraryDelay = largest
        compensation = DelayLine(channelCount: channelCount, capacity: largest + frameLength)
    }

    /// The unit's reset, the worker's part (after a new processor, if one could be made): the mode switch, the
    /// delay lines, the estimate and the read-outs' sums cleared; `outbox` the new ring.
    mutating func reset(sampleRate: Double, outbox: FrameRingBuffer) {
        self.sampleRate = sampleRate
        self.outbox = outbox
        fade = 0
        mutedLeft = 0
        compensation.clear()
        referenceLine.clear()
        estimator?.reset()
        estimatesSeen = 0
        voicePeak = nil
        adaptiveGain = 0
        recentReference.update(repeating: 0, count: VoiceProcessingUnit.recentFrames)
        recentNext = 0
        echoReturn = 1
        candidate = -1
        seededHint = -1
        delayFrames = 0
        preDelay = 0
        seedDelay()
        erleNext = 0
        erleFilled = 0
    }

    /// The most the reference is held back: the largest delay less the margin.
    static func maximumPreDelay(_ rate: Double) -> Int {
        let longest = Double(VoiceProcessingUnit.referenceDelaySpec.range.upperBound) / 1000
        return Int((longest - VoiceProcessingUnit.delayMargin) * rate)
    }

    /// Puts `made` in place of the processor (destroyed) and sets it up. The worker must be stopped.
    mutating func install(_ made: OpaquePointer) {
        if let processor { la_voice_destroy(processor) }
        processor = made
        var all = desiredSettings()
        all.echo_cancellation = 1
        all.noise_suppression = 1
        all.gain_control = 0
        all.high_pass_filter = 1
        all.limiter = 1
        _ = la_voice_apply(made, &all)
        for _ in 0..<4 { silentFrame(made) }
        all.gain_control = 1
        _ = la_voice_apply(made, &all)
        for _ in 0..<4 { silentFrame(made) }
        settings = desiredSettings()
        _ = la_voice_apply(made, &settings)
        for _ in 0..<50 { silentFrame(made) }
    }

    private func silentFrame(_ made: OpaquePointer) {
        micFrame.view(frames: frameLength).clear()
        referenceFrame.view(frames: frameLength).clear()
        cancellerReference.view(frames: frameLength).clear()
        pointFrames()
        _ = la_voice_process_reverse(made, referencePointers)
        _ = la_voice_process(made, micPointers)
    }

    /// Copies inbox slot `taken` (modulo the slot count) into the frames the library works on.
    func take(slot taken: Int) {
        let slot = inbox.view(frames: inbox.capacity)
            .slice(from: (taken % inboxSlots) * frameLength, frames: frameLength)
        let m = micFrame.view(frames: frameLength)
        let r = incomingReference.view(frames: frameLength)
        for c in 0..<channelCount { m[c].baseAddress!.update(from: slot[c].baseAddress!, count: frameLength) }
        for c in 0..<referenceChannelCount {
            r[c].baseAddress!.update(from: slot[channelCount + c].baseAddress!, count: frameLength)
        }
    }

    /// Takes `referenceDelay`, when set and changed, as the echo delay until the estimate says otherwise.
    private mutating func seedDelay() {
        let hint = referenceDelay.value
        guard hint != seededHint, let sampleRate else { return }
        seededHint = hint
        if hint > 0 { setDelay(Int(Double(hint) / 1000 * sampleRate)) }
    }

    private mutating func setDelay(_ frames: Int) {
        guard let sampleRate else { return }
        delayFrames = frames
        preDelay = min(
            max(0, frames - Int(VoiceProcessingUnit.delayMargin * sampleRate)), Self.maximumPreDelay(sampleRate))
        readOuts.delayMilliseconds.store(Int((Double(frames) * 1000 / sampleRate).rounded()), ordering: .relaxed)
    }

    /// The settings the parameters ask for now.
    private func desiredSettings() -> la_voice_settings {
        var s = la_voice_settings()
        s.echo_cancellation = echoCancellation.value >= 0.5 ? 1 : 0
        s.suppression_level = Int32(suppressionLevel.value.rounded())
        s.noise_suppression = Int32(noiseSuppression.value.rounded()) - 1
        let gain = Int32(gainControl.value.rounded()) - 1
        // adaptiveDigital is the library's fixed-digital stage (its compressor and limiter at the target) with a
        // gain this unit adapts to the voice; the library's own adaptive mode took 6–9 s to lift a quiet voice.
        s.gain_control = gain < 0 ? -1 : 1
        s.target_level_dbfs = Int32(-targetLevel.value.rounded())
        s.compression_gain_db = Int32((gain == 0 ? adaptiveGain : compressionGain.value).rounded())
        s.limiter = limiter.value >= 0.5 ? 1 : 0
        s.high_pass_filter = highPassFilter.value >= 0.5 ? 1 : 0
        return s
    }

    private func pointFrames() {
        let m = micFrame.view(frames: frameLength)
        for c in 0..<channelCount { micPointers[c] = m[c].baseAddress! }
        referencePointers[0] = UnsafePointer(cancellerReference.view(frames: frameLength)[0].baseAddress!)
    }

    /// One 10 ms frame: settings, the delay estimate, the reference through its delay line, the microphone, the
    /// read-outs, onto the ring.
    mutating func processFrame(_ processor: OpaquePointer) {
        applySettings(processor)
        seedDelay()
        let m = micFrame.view(frames: frameLength)
        let incoming = incomingReference.view(frames: frameLength)
        // The delay estimate, from the reference as it arrives and the microphone before processing.
        if let estimator {
            estimator.process(reference: incoming, microphone: m, frames: frameLength)
            if estimator.estimates != estimatesSeen {
                estimatesSeen = estimator.estimates
                updateDelay(estimator)
            }
        }
        // The reference, held back `preDelay` frames.
        referenceLine.pass(incoming, into: referenceFrame.view(frames: frameLength), delay: preDelay)
        let r = referenceFrame.view(frames: frameLength)
        let mono = cancellerReference.view(frames: frameLength)[0]
        if referenceChannelCount == 1 {
            let x = r[0]
            for i in 0..<frameLength { mono[i] = x[i] }
        } else {
            let left = r[0]
            let right = r[1]
            for i in 0..<frameLength { mono[i] = left[i] + right[i] }
        }
        pointFrames()
        let referencePower = Self.power(r, frames: frameLength)
        let inPower = Self.power(m, frames: frameLength)
        let inPeak = Self.peak(m, frames: frameLength)
        _ = la_voice_process_reverse(processor, referencePointers)
        _ = la_voice_process(processor, micPointers)
        let hasVoice = la_voice_has_voice(processor) != 0
        readOuts.voice.store(hasVoice, ordering: .relaxed)
        let outPower = Self.power(m, frames: frameLength)
        // The voice as the gain control should hear it: voiced, not mostly removed by the canceller (what passed, the
        // gain taken off, within 10 dB of what came in), and louder than the echo could be — leftover echo, which
        // the voice detector takes for voice, is none of these. (The canceller's own echo flag is no gate: a
        // singer over the music, karaoke's normal case, carries it.)
        let hasEcho = la_voice_has_echo(processor) != 0
        recentReference[recentNext] = referencePower
        recentNext = (recentNext + 1) % VoiceProcessingUnit.recentFrames
        var loudestReference = 0.0
        for k in 0..<VoiceProcessingUnit.recentFrames { loudestReference = max(loudestReference, recentReference[k]) }
        if loudestReference > 1e-6, hasEcho, !hasVoice {
            // Far end alone: how loud its echo gets against the reference, followed up quickly, down slowly.
            let ratio = inPower / loudestReference
            echoReturn += (ratio > echoReturn ? 0.1 : 0.005) * (ratio - echoReturn)
        }
        let applied = pow(10, Double(settings.compression_gain_db) / 10)
        let passed = outPower / applied > 0.1 * inPower
        let overEcho = loudestReference <= 1e-6 || inPower > 2 * echoReturn * loudestReference
        adaptGain(voiced: hasVoice && passed, overEcho: overEcho, peak: inPeak)
        // ERLE: while the far end plays (above −60 dBFS), over the last second of it (100 frames). Not gated on the
        // voice detector: it runs on the output and takes leftover echo for voice, so gating on it hid the frames
        // that cancel worst (it read 20 dB high on music through a sound server).
        if referencePower > 1e-6 {
            erleInput[erleNext] = inPower
            erleOutput[erleNext] = outPower
            erleNext = (erleNext + 1) % VoiceProcessingUnit.erleFrames
            erleFilled = min(erleFilled + 1, VoiceProcessingUnit.erleFrames)
            var input = 0.0
            var output = 0.0
            for k in 0..<erleFilled {
                input += erleInput[k]
                output += erleOutput[k]
            }
            if input > 0 {
                let erle = 10 * log10(input / max(output, 1e-20))
                readOuts.erleBits.store(erle.bitPattern, ordering: .relaxed)
            }
        }
        // Held back by what the current modes' delay lacks of the largest.
        let echoOn = settings.echo_cancellation != 0
        let noiseOn = settings.noise_suppression >= 0
        let split = settings.gain_control >= 0 || settings.high_pass_filter != 0
        let current =
            echoOn && noiseOn
            ? libraryDelays.both : echoOn ? libraryDelays.echo : noiseOn ? libraryDelays.noise : split ? libraryDelays.split : 0
        compensation.pass(m, into: m, delay: largestLibraryDelay - current)
        // A mode switch: the last frame under the old modes fades out, silence covers the frames the library's and
        // the compensation's delays carry across the switch, then a frame fades in.
        switch fade {
        case 1, 4:
            let fadingIn = fade == 4
            for c in 0..<channelCount {
                let x = m[c]
                for i in 0..<frameLength {
                    let w = 0.5 - 0.5 * cos(Float.pi * Float(i) / Float(frameLength))
                    x[i] *= fadingIn ? w : 1 - w
                }
            }
            fade = fadingIn ? 0 : 2
        case 3:
            m.clear()
            mutedLeft -= 1
            if mutedLeft <= 0 { fade = 4 }
        default: break
        }
        // Onto the outbox (room for it is kept: see reset()).
        outbox.write(m)
    }

    /// Takes a clear estimate (its peak at least ``VoiceProcessingUnit/clarity`` times the mean) that differs from
    /// the delay in force by more than 20 ms once the next agrees with it (within 10 ms), so one odd window does not
    /// move the reference.
    private mutating func updateDelay(_ estimator: EchoDelayEstimator) {
        guard let sampleRate, let found = estimator.result, found.clarity >= VoiceProcessingUnit.clarity else {
            candidate = -1
            return
        }
        let tolerance = Int(0.02 * sampleRate)
        let known = readOuts.delayMilliseconds.load(ordering: .relaxed) > 0
        if !known || abs(found.frames - delayFrames) > tolerance {
            if candidate >= 0, abs(found.frames - candidate) <= tolerance / 2 {
                setDelay(found.frames)
                candidate = -1
            } else {
                candidate = found.frames
            }
        } else {
            candidate = -1
        }
    }

    /// Moves the library's settings toward the parameters: modes switch through a fade (out on this frame under the
    /// old ones, in on the next under the new), levels and the delay hint step 1 a frame.
    private mutating func applySettings(_ processor: OpaquePointer) {
        let want = desiredSettings()
        var next = settings
        func step(_ from: Int32, _ to: Int32) -> Int32 { from < to ? from + 1 : from > to ? from - 1 : from }
        next.target_level_dbfs = step(settings.target_level_dbfs, want.target_level_dbfs)
        next.compression_gain_db = step(settings.compression_gain_db, want.compression_gain_db)
        let modesDiffer =
            want.echo_cancellation != settings.echo_cancellation || want.suppression_level != settings.suppression_level
            || want.noise_suppression != settings.noise_suppression || want.gain_control != settings.gain_control
            || want.limiter != settings.limiter || want.high_pass_filter != settings.high_pass_filter
        if modesDiffer {
            if fade == 0 {
                // Fade out under the old modes first.
                fade = 1
            } else if fade >= 2 {
                // The output is silent (faded out, muted, or about to fade in): switch now and mute afresh.
                // Silence while the library's delay and the compensation's settle: the largest delay, and a frame.
                mutedLeft = (largestLibraryDelay + frameLength - 1) / frameLength + 1
                fade = 3
                next.echo_cancellation = want.echo_cancellation
                next.suppression_level = want.suppression_level
                next.noise_suppression = want.noise_suppression
                next.gain_control = want.gain_control
                next.limiter = want.limiter
                next.high_pass_filter = want.high_pass_filter
            }
        }
        if !modesDiffer, fade == 2 {
            // Switched back before the switch took place: fade in again.
            fade = 4
        }
        if next.echo_cancellation != settings.echo_cancellation || next.suppression_level != settings.suppression_level
            || next.noise_suppression != settings.noise_suppression || next.gain_control != settings.gain_control
            || next.target_level_dbfs != settings.target_level_dbfs
            || next.compression_gain_db != settings.compression_gain_db || next.limiter != settings.limiter
            || next.high_pass_filter != settings.high_pass_filter
        {
            settings = next
            _ = la_voice_apply(processor, &settings)
        }
    }

    /// adaptiveDigital: on each voiced frame, the voice's peak level follows the frame's peak at the microphone —
    /// quickly up (a tenth of the way a frame), slowly down (a fiftieth), so it settles near the upper peaks, where
    /// the library's target sits — and the gain becomes what brings it to `targetLevel` (0 … 90 dB; the library
    /// steps toward it 1 dB a frame). Frames without voice, and frames whose sound the canceller mostly removed,
    /// leave both alone, so pauses, noise and the far end's echo are not lifted; a voiced frame no louder than the
    /// echo could be only brings the level down, so that the loud frames that stand over the echo in double talk
    /// do not alone set it.
    private mutating func adaptGain(voiced: Bool, overEcho: Bool, peak: Float) {
        guard gainControl.value.rounded() == 1 else {
            // Not adapting: start from 0 dB when adaptation is switched on.
            adaptiveGain = 0
            voicePeak = nil
            return
        }
        guard voiced, peak > 1e-5 else { return }
        let level = 20 * log10f(peak)
        if let known = voicePeak {
            // A voice under the echo's level may be echo: it may only bring the level down (more gain), never up.
            guard overEcho || level < known else { return }
            voicePeak = known + (level > known ? 0.1 : 0.02) * (level - known)
        } else {
            guard overEcho else { return }
            voicePeak = level
        }
        adaptiveGain = min(max(targetLevel.value - voicePeak!, 0), 90)
    }

    private static func peak(_ v: BufferView, frames: Int) -> Float {
        var p: Float = 0
        for c in 0..<v.channelCount {
            let x = v[c]
            for i in 0..<frames { p = max(p, abs(x[i])) }
        }
        return p
    }

    private static func power(_ v: BufferView, frames: Int) -> Double {
        var sum = 0.0
        for c in 0..<v.channelCount {
            let x = v[c]
            for i in 0..<frames { sum += Double(x[i] * x[i]) }
        }
        return sum / Double(frames * v.channelCount)
    }
}
