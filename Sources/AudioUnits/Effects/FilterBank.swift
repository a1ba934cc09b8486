import AudioCore
import AudioGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a band's width parameter is read.
enum BandWidthKind: Sendable {
    /// Quality factor Q; smoothed as log2 Q.
    case q
    /// Octaves (the cookbook's BW); smoothed linearly.
    case bandwidth
    /// Decibels of resonance at the cutoff over Butterworth: Q = 1/√2 · 10^(dB/20); smoothed in dB.
    case resonance
}

/// One band of a ``FilterBank``: its parameters and the render thread's smoothed copies of them.
final class FilterBand {
    let type: BiquadType
    let widthKind: BandWidthKind
    let frequency: Parameter
    let gain: Parameter?
    let width: Parameter
    let bypass: Parameter?
    // Render thread state.
    var logFrequency = SmoothedValue(0, rampFrames: 0)
    var gainDB = SmoothedValue(0, rampFrames: 0)
    var widthValue = SmoothedValue(0, rampFrames: 0)
    /// 1 when the band filters, 0 when bypassed; ramps over the bypass fade.
    var mix = SmoothedValue(1, rampFrames: 0)
    var coefficients = BiquadCoefficients.identity

    init(type: BiquadType, widthKind: BandWidthKind, frequency: Parameter, gain: Parameter?, width: Parameter, bypass: Parameter?) {
        self.type = type
        self.widthKind = widthKind
        self.frequency = frequency
        self.gain = gain
        self.width = width
        self.bypass = bypass
    }

    func widthTarget() -> Float {
        switch widthKind {
        case .q: log2f(width.value)
        case .bandwidth, .resonance: width.value
        }
    }

    var mixTarget: Float { (bypass?.value ?? 0) >= 0.5 ? 0 : 1 }

    func setTargets() {
        logFrequency.setTarget(log2f(frequency.value))
        gainDB.setTarget(gain?.value ?? 0)
        widthValue.setTarget(widthTarget())
    }

    func jumpToTargets() {
        logFrequency.reset(to: log2f(frequency.value))
        gainDB.reset(to: gain?.value ?? 0)
        widthValue.reset(to: widthTarget())
        mix.reset(to: mixTarget)
    }

    var isRamping: Bool { logFrequency.isRamping || gainDB.isRamping || widthValue.isRamping }

    func updateCoefficients(sampleRate: Double) {
        let f = min(Double(exp2f(logFrequency.value)), sampleRate * 0.4999)
        let w0 = 2 * Double.pi * f / sampleRate
        let alpha: Double =
            switch widthKind {
            case .q: BiquadCoefficients.alpha(omega: w0, q: Double(exp2f(widthValue.value)))
            case .resonance: BiquadCoefficients.alpha(omega: w0, q: 0.5.squareRoot() * pow(10, Double(widthValue.value) / 20))
            case .bandwidth: BiquadCoefficients.alpha(omega: w0, bandwidth: Double(widthValue.value))
            }
        coefficients = .cookbook(type, frequency: f, gain: Double(gainDB.value), alpha: alpha, sampleRate: sampleRate)
    }
}

/// A cascade of cookbook biquads over every channel: the kernel behind `eq`, `lowpass`, `highpass` and
/// `bandpass`. Parameters are smoothed over 20 ms; while any band's parameters move, coefficients are recomputed
/// every ``controlFrames`` frames. A band's own bypass fades it in or out over the unit bypass time.
final class FilterBank {
    static let controlFrames = 32
    let bands: ContiguousArray<FilterBand>
    let channelCount: Int
    let pairCount: Int
    /// bands × pairs states.
    let states: UnsafeMutablePointer<BiquadPairState>
    /// Scratch state for the unused third slot of a two-band pass.
    private let spare = UnsafeMutablePointer<BiquadPairState>.allocate(capacity: 1)
    private var sampleRate = 48_000.0

    init(bands: [FilterBand], channelCount: Int) {
        self.bands = ContiguousArray(bands)
        self.channelCount = channelCount
        pairCount = (channelCount + 1) / 2
        states = .allocate(capacity: max(1, bands.count * pairCount))
        states.initialize(repeating: BiquadPairState(), count: max(1, bands.count * pairCount))
        spare.initialize(to: BiquadPairState())
    }

    deinit {
        states.deallocate()
        spare.deallocate()
    }

    func prepare(sampleRate: Double, rampFrames: Int) {
        self.sampleRate = sampleRate
        let fade = max(1, Int((UnitCore.bypassFadeTime * sampleRate).rounded()))
        for b in bands {
            b.logFrequency.rampFrames = rampFrames
            b.gainDB.rampFrames = rampFrames
            b.widthValue.rampFrames = rampFrames
            b.mix.rampFrames = fade
        }
    }

    func reset() {
        clearState()
        for b in bands {  // control thread
            b.jumpToTargets()
            b.updateCoefficients(sampleRate: sampleRate)
        }
    }

    func clearState() { states.update(repeating: BiquadPairState(), count: max(1, bands.count * pairCount)) }

    /// Filters `input` into `output` (same channel count; `input` may be a mono view repeated). Render thread.
    func render(input: BufferView, output: BufferView, frames: Int) {
        var ramping = false
        for index in 0..<bands.count {
            let b = bands[index]
            b.setTargets()
            let target = b.mixTarget
            if target != b.mix.targetValue {
                if b.mix.value == 0 { clearState(band: index) }  // coming back from bypass: start fresh
                b.mix.setTarget(target)
            }
            if b.isRamping { ramping = true }
        }
        if !ramping {
            process(input: input, output: output, offset: 0, frames: frames)
            return
        }
        var start = 0
        while start < frames {
            let n = min(Self.controlFrames, frames - start)
            for index in 0..<bands.count where bands[index].isRamping {
                let b = bands[index]
                _ = b.logFrequency.advance(by: n)
                _ = b.gainDB.advance(by: n)
                _ = b.widthValue.advance(by: n)
                b.updateCoefficients(sampleRate: sampleRate)
            }
            process(input: input, output: output, offset: start, frames: n)
            start += n
        }
    }

    private func clearState(band: Int) {
        (states + band * pairCount).update(repeating: BiquadPairState(), count: pairCount)
    }

    /// True when band `index` filters fully and steadily (not bypassed, not fading).
    private func isSteady(_ index: Int) -> Bool { !bands[index].mix.isRamping && bands[index].mix.value == 1 }

    private func process(input: BufferView, output: BufferView, offset: Int, frames: Int) {
        var source = input
        var filtered = false
        var index = 0
        while index < bands.count {
            let b = bands[index]
            let fading = b.mix.isRamping
            if !fading && b.mix.value == 0 {
                index += 1
                continue
            }
            // Up to three steady bands in a row run in one pass.
            var series = 1
            if !fading {
                while series < 3, index + series < bands.count, isSteady(index + series) { series += 1 }
            }
            let mixStart = b.mix.value
            let mixEnd = fading ? b.mix.advance(by: frames) : mixStart
            for p in 0..<pairCount {
                let l = 2 * p, r = min(2 * p + 1, channelCount - 1)
                let inL = UnsafePointer(source[l].baseAddress! + offset), inR = UnsafePointer(source[r].baseAddress! + offset)
                let outL = output[l].baseAddress! + offset, outR = output[r].baseAddress! + offset
                let s0 = states + index * pairCount + p
                if series > 1 {
                    let s2 = states + (index + 1) * pairCount + p
                    let s3 = series == 3 ? states + (index + 2) * pairCount + p : nil
                    BiquadKernel.processSeries(
                        b.coefficients, &s0.pointee, bands[index + 1].coefficients, &s2.pointee,
                        series == 3 ? bands[index + 2].coefficients : nil, &(s3 ?? spare).pointee,
                        inL: inL, inR: inR, outL: outL, outR: outR, frames: frames)
                } else if fading {
                    BiquadKernel.processBlended(
                        b.coefficients, &s0.pointee, inL: inL, inR: inR, outL: outL, outR: outR,
                        frames: frames, mix: mixStart, mixStep: (mixEnd - mixStart) / Float(frames))
                } else {
                    BiquadKernel.process(b.coefficients, &s0.pointee, inL: inL, inR: inR, outL: outL, outR: outR, frames: frames)
                }
            }
            source = output
            filtered = true
            index += series
        }
        if !filtered { output.slice(from: offset, frames: frames).copy(from: input.slice(from: offset, frames: frames)) }
    }
}
