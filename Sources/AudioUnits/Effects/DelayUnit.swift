import AudioCore
import AudioGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A feedback delay with a low-pass in the loop: the Delay role.
///
/// Per channel: wet[n] = LP(line[n − D]); line[n] = x[n] + feedback · wet[n]; out = (1 − mix)·x + mix·wet.
/// So an impulse returns after D, 2D, 3D … samples with amplitudes 1, feedback, feedback², … (times the low-pass,
/// which is a first-order bilinear low-pass at `lowpassCutoff`, switched off at its maximum, the Nyquist frequency).
/// D is `delayTime` × sample rate rounded to whole samples (at least 1); a change glides D there over 0.2 s, reading
/// between samples while it moves, like a tape delay — no clicks.
///
/// Parameters: `delayTime` 0 … 2 s (1), `feedback` −100 … 100 % (50), `lowpassCutoff` 10 Hz … Nyquist (15000 Hz),
/// `wetDryMix` 0 … 100 % (50).
public final class DelayUnit: RenderUnit {
    public let core: UnitCore
    /// The longest `delayTime`, in seconds (2): the top of the parameter's range and the length the line is made for.
    public static let maximumDelayTime = 2.0
    private let p: [Parameter]
    /// Delay line, glide, ramps and low-pass state: the render thread's.
    private let kernel: RenderThreadBound<DelayKernel>

    /// Makes a delay with every parameter at its default (1 s, 50 % feedback, 15 kHz low-pass, 50 % mix).
    ///
    /// - Parameter format: The input and output format; only its rate and channel count are used.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry.
    public init(format: StreamFormat) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let nyquist = Float(f.sampleRate / 2)
        let specs = [
            ParameterSpec("delayTime", name: "Delay time", range: 0...Float(Self.maximumDelayTime), unit: .seconds, default: 1, smoothingTime: 0.2),
            ParameterSpec("feedback", name: "Feedback", range: -100...100, unit: .percent, default: 50),
            ParameterSpec("lowpassCutoff", name: "Low-pass cutoff", range: 10...nyquist, unit: .hertz, default: min(15_000, nyquist)),
            ParameterSpec("wetDryMix", name: "Wet/dry mix", range: 0...100, unit: .percent, default: 50),
        ]
        p = specs.map { Parameter($0, owner: "delay") }
        kernel = RenderThreadBound(DelayKernel(channels: f.channelCount, parameters: p))
        core = UnitCore(kind: "delay", inputs: [f], outputs: [f], parameters: p)
    }

    public var tailTime: Double {
        let fb = Double(abs(p[1].value)) / 100
        guard fb > 0 else { return Double(p[0].value) }
        // Echoes fall by |feedback| each round trip; the tail lasts until they are 60 dB down (or 60 s).
        return fb >= 1 ? 60 : min(60, Double(p[0].value) * (1 + 3 / -log10(fb)))
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        let ramps = (
            glide: rampFrames(for: p[0]), feedback: rampFrames(for: p[1]), cutoff: rampFrames(for: p[2]),
            mix: rampFrames(for: p[3]))
        kernel.whileStopped.allocate(spec, rampFrames: ramps)
    }

    public func reset() {
        kernel.whileStopped.reset()
    }

    public func render(_ context: RenderContext) {
        kernel.onRenderThread.render(input: context.input(0), output: context.output(0), frames: context.frameCount)
    }
}

/// The render-side state of a ``DelayUnit``: the delay line and scratch (owned; freed with the kernel), the glide,
/// the parameter ramps and the low-pass state. Used by one thread at a time.
private struct DelayKernel: ~Copyable {
    let channels: Int
    let p: [Parameter]
    var line: UnsafeMutablePointer<Float>?  // channels × ringSize
    var ringSize = 0
    var written = 0
    var delayFrames = 1.0
    var delayStep = 0.0
    var delayTarget = 1.0
    var delayRemaining = 0
    var glideFrames = 1
    var feedback = SmoothedValue(0.5, rampFrames: 0)
    var mix = SmoothedValue(0.5, rampFrames: 0)
    var filterState: UnsafeMutablePointer<SIMD2<Float>>?  // per channel: last input, last output
    var cutoff = SmoothedValue(15_000, rampFrames: 0)
    var scratch: UnsafeMutablePointer<Float>?  // 2 × 32 frames of taps
    var sampleRate = 48_000.0

    init(channels: Int, parameters: [Parameter]) {
        self.channels = channels
        p = parameters
    }

    deinit {
        line?.deallocate()
        filterState?.deallocate()
        scratch?.deallocate()
    }

    /// Allocates the line for `spec` and sets the ramp lengths (frames). Control thread.
    mutating func allocate(_ spec: RenderSpec, rampFrames: (glide: Int, feedback: Int, cutoff: Int, mix: Int)) {
        line?.deallocate()
        filterState?.deallocate()
        sampleRate = spec.sampleRate
        let longest = Int((DelayUnit.maximumDelayTime * spec.sampleRate).rounded()) + 2
        ringSize = 1
        while ringSize < longest { ringSize <<= 1 }
        line = .allocate(capacity: ringSize * channels)
        filterState = .allocate(capacity: channels)
        scratch?.deallocate()
        scratch = .allocate(capacity: 64)
        glideFrames = rampFrames.glide
        feedback.rampFrames = rampFrames.feedback
        cutoff.rampFrames = rampFrames.cutoff
        mix.rampFrames = rampFrames.mix
    }

    private func targetFrames() -> Double { max(1, (Double(p[0].value) * sampleRate).rounded()) }

    mutating func reset() {
        delayFrames = targetFrames()
        delayTarget = delayFrames
        delayRemaining = 0
        feedback.reset(to: p[1].value / 100)
        cutoff.reset(to: p[2].value)
        mix.reset(to: p[3].value / 100)
        clearState()
    }

    private mutating func clearState() {
        line?.update(repeating: 0, count: ringSize * channels)
        filterState?.update(repeating: SIMD2(), count: channels)
        written = 0
    }

    /// The first-order bilinear low-pass at `hz`: y = b·(x + x₁) − a·y₁; (1, 0) when wide open.
    private func lowpass(_ hz: Float) -> (b: Float, a: Float, open: Bool) {
        if Double(hz) >= sampleRate / 2 { return (1, 0, true) }
        let k = tan(Double.pi * Double(hz) / sampleRate)
        return (Float(k / (1 + k)), Float((k - 1) / (k + 1)), false)
    }

    /// One control block (≤ 32 frames) of a channel pair with a steady delay of at least `count` frames.
    @inline(__always)
    private func steadyBlock(
        ringL: UnsafeMutablePointer<Float>, ringR: UnsafeMutablePointer<Float>, from: Int, write: Int, count: Int,
        xl: UnsafePointer<Float>, xr: UnsafePointer<Float>, outL: UnsafeMutablePointer<Float>, outR: UnsafeMutablePointer<Float>,
        filter: (b: Float, a: Float, open: Bool), lastIn: inout SIMD2<Float>, lastOut: inout SIMD2<Float>, feedback: Float, mix: Float
    ) {
        let tl = scratch.unsafelyUnwrapped, tr = tl + 32
        let mask = ringSize - 1
        copyOut(ringL, from: from & mask, mask: mask, to: tl, count: count)
        copyOut(ringR, from: from & mask, mask: mask, to: tr, count: count)
        if !filter.open {
            var inL = lastIn.x, inR = lastIn.y, yl = lastOut.x, yr = lastOut.y
            let b = filter.b, a = filter.a
            for j in 0..<count {
                let l = tl[j], r = tr[j]
                yl = b * (l + inL) - a * yl
                yr = b * (r + inR) - a * yr
                inL = l
                inR = r
                tl[j] = yl
                tr[j] = yr
            }
            lastIn = SIMD2(inL, inR)
            lastOut = SIMD2(yl, yr)
        }
        let dryGain = 1 - mix
        for j in 0..<count {
            outL[j] = xl[j] * dryGain + tl[j] * mix
            outR[j] = xr[j] * dryGain + tr[j] * mix
            tl[j] = xl[j] + feedback * tl[j]
            tr[j] = xr[j] + feedback * tr[j]
        }
        copyIn(ringL, at: write & mask, mask: mask, from: tl, count: count)
        copyIn(ringR, at: write & mask, mask: mask, from: tr, count: count)
    }

    @inline(__always)
    private func copyOut(_ ring: UnsafeMutablePointer<Float>, from start: Int, mask: Int, to out: UnsafeMutablePointer<Float>, count: Int) {
        let first = min(count, mask + 1 - start)
        out.update(from: ring + start, count: first)
        if first < count { (out + first).update(from: ring, count: count - first) }
    }

    @inline(__always)
    private func copyIn(_ ring: UnsafeMutablePointer<Float>, at start: Int, mask: Int, from source: UnsafeMutablePointer<Float>, count: Int) {
        let first = min(count, mask + 1 - start)
        (ring + start).update(from: source, count: first)
        if first < count { ring.update(from: source + first, count: count - first) }
    }

    mutating func render(input: BufferView, output: BufferView, frames: Int) {
        guard let line, let filterState else { return }
        let wanted = targetFrames()
        if wanted != delayTarget {
            delayTarget = wanted
            delayRemaining = max(1, glideFrames)
            delayStep = (wanted - delayFrames) / Double(delayRemaining)
        }
        feedback.setTarget(p[1].value / 100)
        cutoff.setTarget(p[2].value)
        mix.setTarget(p[3].value / 100)
        let mask = ringSize - 1
        let startDelay = delayFrames, startRemaining = delayRemaining
        let startFeedback = feedback, startMix = mix, startCutoff = cutoff
        // Channels in pairs, one per SIMD2 lane: the two low-pass recursions overlap, and the glide and the
        // parameter ramps are computed once per frame for both.
        for pair in 0..<((channels + 1) / 2) {
            let l = 2 * pair, r = min(2 * pair + 1, channels - 1)
            let xl = input[l].baseAddress!, xr = input[r].baseAddress!
            let outL = output[l].baseAddress!, outR = output[r].baseAddress!
            let ringL = line + l * ringSize, ringR = line + r * ringSize
            var d = startDelay, remaining = startRemaining
            var fb = startFeedback, wet = startMix, fc = startCutoff
            var filter = lowpass(fc.value)
            var lastIn = SIMD2(filterState[l].x, filterState[r].x), lastOut = SIMD2(filterState[l].y, filterState[r].y)
            var w = written
            var i = 0
            while i < frames {
                // Control blocks of 32 frames: the low-pass follows a moving cutoff at that rate.
                let n = min(32, frames - i)
                if fc.isRamping { _ = fc.advance(by: n); filter = lowpass(fc.value) }
                let b = SIMD2(repeating: filter.b), a = SIMD2(repeating: filter.a)
                let steady = remaining == 0 && !fb.isRamping && !wet.isRamping
                let whole = Int(d)
                let g = SIMD2(repeating: fb.value), m = SIMD2(repeating: wet.value)
                if steady && whole >= n {
                    // The common case, in passes: the taps of the whole control block were written before it, so
                    // only the low-pass recursion is serial; the rest is straight-line array work.
                    steadyBlock(
                        ringL: ringL, ringR: ringR, from: w - whole, write: w, count: n, xl: xl + i, xr: xr + i,
                        outL: outL + i, outR: outR + i, filter: filter, lastIn: &lastIn, lastOut: &lastOut,
                        feedback: g.x, mix: m.x)
                    w += n
                    i += n
                    continue
                }
                for j in i..<(i + n) {
                    var tap: SIMD2<Float>
                    var gain = g, mixing = m
                    if steady {
                        tap = SIMD2(ringL[(w - whole) & mask], ringR[(w - whole) & mask])
                    } else {
                        if remaining > 0 {
                            remaining -= 1
                            d = remaining == 0 ? delayTarget : d + delayStep
                        }
                        let k = Int(d), frac = SIMD2(repeating: Float(d - Double(k)))
                        let near = SIMD2(ringL[(w - k) & mask], ringR[(w - k) & mask])
                        let far = SIMD2(ringL[(w - k - 1) & mask], ringR[(w - k - 1) & mask])
                        tap = near + (far - near) * frac
                        gain = SIMD2(repeating: fb.next())
                        mixing = SIMD2(repeating: wet.next())
                    }
                    if !filter.open {
                        let y = b * (tap + lastIn) - a * lastOut
                        lastIn = tap
                        lastOut = y
                        tap = y
                    }
                    let dry = SIMD2(xl[j], xr[j])
                    let fed = dry + gain * tap
                    ringL[w & mask] = fed.x
                    ringR[w & mask] = fed.y
                    w += 1
                    let out = dry * (1 - mixing) + tap * mixing  // exact at 0 and 100 %
                    outL[j] = out.x
                    outR[j] = out.y
                }
                i += n
            }
            filterState[l] = SIMD2(lastIn.x, lastOut.x)
            filterState[r] = SIMD2(lastIn.y, lastOut.y)
            if pair == (channels + 1) / 2 - 1 {
                delayFrames = d
                delayRemaining = remaining
                feedback = fb
                mix = wet
                cutoff = fc
                written = w
            }
        }
    }
}
