import AudioCore
import AudioGraph
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A lookahead peak limiter: the PeakLimiter role. No output sample exceeds `ceiling`.
///
/// The signal (after `preGain`) is delayed by the lookahead L = `attackTime` × sample rate, which is the unit's
/// ``latency``. For each frame the limiter needs the gain g = min(1, ceiling / peak) (linked across channels);
/// it takes the minimum of g over the next L + 1 frames, lets it recover toward 1 with time constant `decayTime`
/// (never above that minimum), and averages the result over L + 1 frames. Every frame in that average's window has
/// the frame's own g in its minimum, so the applied gain never exceeds g: the gain ramps down smoothly over the
/// lookahead and the peak arrives exactly at the ceiling, with no clipping. A final clamp at the ceiling would
/// catch rounding; ``safetyClips`` counts how often it acted (0 in normal operation; an `attackTime` change while
/// running crossfades the delay taps over 5 ms and may use it).
///
/// With `truePeak`, the peaks it holds under the ceiling are true peaks (ITU-R BS.1770-4, ``TruePeakFilter``): each
/// frame's peak is the largest of the samples and the points between them oversampled 4× (2× at 96 kHz and above),
/// so the signal a converter or a decoder reconstructs stays under the ceiling too, not only its samples (a
/// loudness normaliser's `-1 dBTP`). The filter's delay (12 frames) adds to the latency.
///
/// Parameters: `attackTime` 0.001 … 0.03 s (0.005), `decayTime` 0.001 … 1 s (0.05), `preGain` −40 … 40 dB (0),
/// `ceiling` −40 … 0 dB (−1).
public final class LimiterUnit: RenderUnit {
    public let core: UnitCore
    static let specs: [ParameterSpec] = [
        ParameterSpec("attackTime", name: "Attack (lookahead)", range: 0.001...0.03, unit: .seconds, default: 0.005),
        ParameterSpec("decayTime", name: "Decay time", range: 0.001...1, unit: .seconds, default: 0.05),
        ParameterSpec("preGain", name: "Pre-gain", range: -40...40, unit: .decibels, default: 0),
        ParameterSpec("ceiling", name: "Ceiling", range: -40...0, unit: .decibels, default: -1),
    ]
    private static let crossfadeTime = 0.005
    /// The gain computer aims a hair under the ceiling so rounding in the average never lands above it.
    fileprivate static let headroom: Float = 1 - 1e-6

    private let p: [Parameter]
    /// Delay ring, min deque, gain history and ramps: the render thread's; buffers are allocated in
    /// allocateRenderResources.
    private let kernel: RenderThreadBound<LimiterKernel>
    /// The lookahead in frames, written by the render thread when it changes; any thread reads it.
    private let lookaheadFrames = Atomic<Int>(0)
    private let clipCount = Atomic<Int>(0)

    /// Whether the peaks held under the ceiling are true (oversampled) peaks.
    public let truePeak: Bool

    /// - Parameters:
    ///   - format: the signal's format (a graph format).
    ///   - truePeak: hold the true peak, not only the samples, under the ceiling.
    public init(format: StreamFormat, truePeak: Bool = false) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        p = Self.specs.map { Parameter($0, owner: "limiter") }
        self.truePeak = truePeak
        kernel = RenderThreadBound(LimiterKernel(channels: f.channelCount, parameters: p, truePeak: truePeak ? TruePeakMeter(sampleRate: f.sampleRate, channelCount: f.channelCount) : nil))
        core = UnitCore(kind: "limiter", inputs: [f], outputs: [f], parameters: p)
    }

    /// The lookahead in seconds: how far the output lags the input.
    public var latency: Double {
        let lookahead = spec == nil ? Int((Double(p[0].value) * (inputFormats[0].sampleRate)).rounded()) : lookaheadFrames.load(ordering: .relaxed)
        return Double(lookahead + (truePeak ? TruePeakFilter.delay : 0)) / inputFormats[0].sampleRate
    }

    /// Samples the final clamp changed since the unit was prepared. Any thread.
    public var safetyClips: Int { clipCount.load(ordering: .relaxed) }

    public var propertyNames: [String] { commonPropertyNames + ["safetyClips", "latencyFrames"] }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "safetyClips": .int(safetyClips)
        case "latencyFrames": .int(Int((latency * inputFormats[0].sampleRate).rounded()))
        default: try commonProperty(name)
        }
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        kernel.whileStopped.allocate(
            spec, rampFrames: (preGain: rampFrames(for: p[2]), ceiling: rampFrames(for: p[3])),
            crossfadeFrames: max(1, Int((Self.crossfadeTime * spec.sampleRate).rounded())))
        clipCount.store(0, ordering: .relaxed)
    }

    public func reset() {
        kernel.whileStopped.reset()
        lookaheadFrames.store(kernel.whileStopped.lookahead, ordering: .relaxed)
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(
            input: context.input(0), output: context.output(0), frames: context.frameCount,
            lookaheadFrames: lookaheadFrames, clipCount: clipCount)
    }
}

/// The render-side state of a ``LimiterUnit``: the delay ring, the monotonic min deque, the gain history and peaks
/// (owned; freed with the kernel), the ramps and the recovery. Used by one thread at a time.
private struct LimiterKernel: ~Copyable {
    let channels: Int
    let p: [Parameter]
    var preGain = SmoothedValue(1, rampFrames: 0)
    var ceiling = SmoothedValue(1, rampFrames: 0)
    var sampleRate = 48_000.0
    var delay: UnsafeMutablePointer<Float>?  // channels × ringSize
    var ringSize = 0
    var minIndex: UnsafeMutablePointer<Int>?  // monotonic deque of (frame, gain), ascending gains
    var minValue: UnsafeMutablePointer<Float>?
    var dequeHead = 0, dequeTail = 0  // positions, masked by ringSize - 1
    var history: UnsafeMutablePointer<Float>?  // recovered gains, for the moving average
    var sum = 0.0
    var recovered: Float = 1
    /// Frames in a row whose recovered gain was exactly 1 (the fast path needs a whole window of them).
    var unityRun = 0
    var frame = 0  // frames processed since reset
    var lookahead = 0
    var previousLookahead = 0
    var crossfadeRemaining = 0
    var crossfadeFrames = 1
    var peaks: UnsafeMutablePointer<Float>?
    /// With true-peak detection: the oversampling filter, and the frames its output lags the input (the audio is
    /// delayed by as much more, so peaks and samples line up).
    var truePeak: TruePeakMeter?
    let detectionDelay: Int

    init(channels: Int, parameters: [Parameter], truePeak: consuming TruePeakMeter?) {
        self.channels = channels
        p = parameters
        detectionDelay = truePeak == nil ? 0 : TruePeakFilter.delay
        self.truePeak = truePeak
    }

    deinit { release() }

    private func release() {
        delay?.deallocate()
        minIndex?.deallocate()
        minValue?.deallocate()
        history?.deallocate()
        peaks?.deallocate()
    }

    /// Allocates the buffers for `spec` and sets the ramp and crossfade lengths (frames). Control thread.
    mutating func allocate(_ spec: RenderSpec, rampFrames: (preGain: Int, ceiling: Int), crossfadeFrames: Int) {
        release()
        sampleRate = spec.sampleRate
        let longest = Int((0.03 * spec.sampleRate).rounded()) + 2 + detectionDelay
        // A whole render call enters the delay line before any of it is read back `lookahead` frames later.
        ringSize = 1
        while ringSize < longest + spec.maximumFrames + 1 { ringSize <<= 1 }
        delay = .allocate(capacity: ringSize * channels)
        minIndex = .allocate(capacity: ringSize)
        minValue = .allocate(capacity: ringSize)
        history = .allocate(capacity: ringSize)
        peaks = .allocate(capacity: spec.maximumFrames)
        preGain.rampFrames = rampFrames.preGain
        ceiling.rampFrames = rampFrames.ceiling
        self.crossfadeFrames = crossfadeFrames
    }

    /// Jumps the ramps to their targets, takes the lookahead and clears the state. Control thread.
    mutating func reset() {
        preGain.reset(to: decibelsToGain(p[2].value))
        ceiling.reset(to: decibelsToGain(p[3].value))
        lookahead = Int((Double(p[0].value) * sampleRate).rounded())
        clearState()
    }

    private mutating func clearState() {
        guard let delay, let history else { return }
        delay.update(repeating: 0, count: ringSize * channels)
        truePeak?.reset()
        history.update(repeating: 1, count: ringSize)
        dequeHead = 0
        dequeTail = 0
        sum = Double(lookahead + 1)
        recovered = 1
        unityRun = Int.max / 2
        frame = 0
        previousLookahead = lookahead
        crossfadeRemaining = 0
    }

    mutating func render(
        input: BufferView, output: BufferView, frames: Int, lookaheadFrames: borrowing Atomic<Int>,
        clipCount: borrowing Atomic<Int>
    ) {
        guard let delay, let minIndex, let minValue, let history, let peaks else { return }
        preGain.setTarget(decibelsToGain(p[2].value))
        ceiling.setTarget(decibelsToGain(p[3].value))
        let wanted = Int((Double(p[0].value) * sampleRate).rounded())
        if wanted != lookahead { changeLookahead(to: wanted, history: history, lookaheadFrames: lookaheadFrames) }
        let decay = Float(exp(-1 / (Double(p[1].value) * sampleRate)))
        let mask = ringSize - 1
        let window = lookahead + 1
        let inverseWindow = 1 / Double(window)

        // Pass 1: apply the pre-gain into the delay line and take each frame's linked peak.
        let startFrame = frame
        for i in 0..<frames { peaks[i] = 0 }
        var gainRamp = preGain
        for c in 0..<channels {
            gainRamp = preGain
            let x = input[c].baseAddress!
            let line = delay + c * ringSize
            if gainRamp.isRamping {
                for i in 0..<frames {
                    let v = x[i] * gainRamp.next()
                    line[(startFrame + i) & mask] = v
                    peaks[i] = max(peaks[i], abs(v))
                }
            } else {
                // A steady gain: contiguous runs (at most two around the ring's end), in vectors.
                let g = gainRamp.value
                var i = 0
                while i < frames {
                    let start = (startFrame + i) & mask
                    let run = min(frames - i, ringSize - start)
                    let to = line + start, from = x + i, peak = peaks + i
                    for j in 0..<run {
                        let v = from[j] * g
                        to[j] = v
                        peak[j] = max(peak[j], abs(v))
                    }
                    i += run
                }
            }
        }
        if truePeak != nil {
            // Each frame's true peak, from the input; it stands for the frame `detectionDelay` back, where the audio
            // is read from. A gain ramping in this block scales it by its larger end.
            truePeak!.framePeaks(input.prefix(frames), into: peaks)
            let scale = max(preGain.value, gainRamp.value)
            for i in 0..<frames { peaks[i] *= scale }
        }
        preGain = gainRamp
        let tap = lookahead + detectionDelay

        // Fast path, the common case: nothing to limit in this block and nothing still recovering, so every gain
        // is exactly 1 and the output is the delayed signal. The state is left as the general path would leave it.
        if !ceiling.isRamping, crossfadeRemaining == 0, recovered == 1, unityRun >= window {
            let limit = ceiling.value * LimiterUnit.headroom
            if VectorOps.peak(peaks, count: frames) <= limit {
                if frames > 0 {
                    // All gains in the window are 1; the monotonic deque keeps just the newest frame.
                    dequeHead = dequeTail - 1
                    minIndex[dequeHead & mask] = startFrame + frames - 1
                    minValue[dequeHead & mask] = 1
                }
                for i in 0..<frames { history[(startFrame + i) & mask] = 1 }
                sum = Double(window)
                unityRun += frames
                for c in 0..<channels {
                    let out = output[c].baseAddress!
                    let line = delay + c * ringSize
                    var i = 0
                    while i < frames {  // at most two contiguous runs around the ring's end
                        let from = (startFrame + i - tap) & mask
                        let run = min(frames - i, ringSize - from)
                        (out + i).update(from: line + from, count: run)
                        i += run
                    }
                }
                frame = startFrame + frames
                return
            }
        }

        // Pass 2: the gain each frame needs, its running minimum, recovery and moving average.
        var head = dequeHead, tail = dequeTail, r = recovered, total = sum, ones = unityRun
        var ceilingRamp = ceiling
        for i in 0..<frames {
            let n = startFrame + i
            let limit = ceilingRamp.next() * LimiterUnit.headroom
            let peak = peaks[i]
            let needed: Float = peak > limit ? limit / peak : 1
            while tail != head && minValue[(tail - 1) & mask] >= needed { tail -= 1 }
            minIndex[tail & mask] = n
            minValue[tail & mask] = needed
            tail += 1
            while minIndex[head & mask] <= n - window { head += 1 }
            let m = minValue[head & mask]
            r = min(m, 1 - (1 - r) * decay)
            ones = r == 1 ? ones + 1 : 0
            total += Double(r) - Double(history[(n - window) & mask])
            history[n & mask] = r
            peaks[i] = Float(total * inverseWindow)
        }
        dequeHead = head
        dequeTail = tail
        recovered = r
        unityRun = ones
        sum = total
        ceiling = ceilingRamp

        // Pass 3: the delayed signal times the gain, with the safety clamp.
        let top = ceiling.value
        var clips = 0
        let fading = crossfadeRemaining
        for c in 0..<channels {
            let out = output[c].baseAddress!
            let line = delay + c * ringSize
            var i = 0
            if fading == 0 {
                // No tap crossfade: contiguous runs of the delayed signal, in vectors.
                while i < frames {
                    let start = (startFrame + i - tap) & mask
                    let run = min(frames - i, ringSize - start)
                    let from = line + start, to = out + i, gain = peaks + i
                    var over = 0
                    for j in 0..<run {
                        let v = from[j] * gain[j]
                        over &+= abs(v) > top ? 1 : 0
                        to[j] = min(max(v, -top), top)
                    }
                    clips += over
                    i += run
                }
            }
            while i < frames {
                let n = startFrame + i
                var v = line[(n - tap) & mask]
                if fading > i {
                    let a = Float(fading - i) / Float(crossfadeFrames)
                    v = VectorOps.crossfade(from: v, to: line[(n - previousLookahead - detectionDelay) & mask], weight: a)
                }
                v *= peaks[i]
                if abs(v) > top {
                    clips += 1
                    v = v > 0 ? top : -top
                }
                out[i] = v
                i += 1
            }
        }
        crossfadeRemaining = max(0, fading - frames)
        if clips > 0 { clipCount.add(clips, ordering: .relaxed) }
        frame = startFrame + frames
    }

    /// A new lookahead: the moving average restarts over the new window from the recovered gains kept, and the
    /// delayed signal crossfades from the old tap to the new one.
    private mutating func changeLookahead(
        to wanted: Int, history: UnsafeMutablePointer<Float>, lookaheadFrames: borrowing Atomic<Int>
    ) {
        previousLookahead = lookahead
        lookahead = wanted
        lookaheadFrames.store(wanted, ordering: .relaxed)
        crossfadeRemaining = crossfadeFrames
        let mask = ringSize - 1
        var total = 0.0
        for k in 0...wanted { total += Double(history[(frame - 1 - k) & mask]) }
        sum = total
    }
}
