import AudioCore

#if canImport(Glibc)
import Glibc
#endif

/// Finds how late a reference (what the speaker plays) comes back in a microphone, by generalised
/// cross-correlation with phase transform (GCC-PHAT) at a low analysis rate.
///
/// Both signals are low-passed at 800 Hz and taken down to 2 kHz; every quarter of a second their last 1.024 s
/// are transformed (one complex FFT of 4096 points carries both), their cross-spectrum joins a running average
/// (about a second), and the average, whitened — each frequency weighed alike, so a loud low note does not decide —
/// is transformed back: its peak over 0 … the maximum lag is the delay, to half a millisecond. ``result`` has the
/// lag and how clearly the peak stands above the rest (the peak over the mean magnitude), when both signals carried
/// sound. The work is spread over the frames after each quarter second: one transform per frame.
///
/// Render thread: ``process(reference:microphone:)`` neither allocates nor locks; made on the control side.
final class EchoDelayEstimator {
    static let analysisRate = 2_000.0
    static let window = 2_048
    static let fftSize = 4_096
    static let hop = 500
    /// Input frames per analysis sample.
    let decimation: Int
    /// The largest lag looked for, in analysis samples.
    let maximumLag: Int

    private let fft = FFT(size: EchoDelayEstimator.fftSize)
    private let microphoneRing: UnsafeMutablePointer<Double>
    private let referenceRing: UnsafeMutablePointer<Double>
    private var ringWrite = 0
    private var sinceEstimate = 0
    private var collected = 0
    private let re: UnsafeMutablePointer<Double>
    private let im: UnsafeMutablePointer<Double>
    private let crossRe: UnsafeMutablePointer<Double>
    private let crossIm: UnsafeMutablePointer<Double>
    private var averaged = 0
    /// 0 idle; 1 the forward transform is due; 2 the inverse.
    private var stage = 0
    // Low-pass (a biquad each) and decimation.
    private let lowPass: BiquadCoefficients
    private var microphoneFilter = (0.0, 0.0)
    private var referenceFilter = (0.0, 0.0)
    private var phase = 0
    private var microphoneSum = 0.0
    private var referenceSum = 0.0

    /// The last estimate: the delay in input frames and how clearly its peak stood out; nil when the last quarter
    /// second's windows lacked sound on either side.
    private(set) var result: (frames: Int, clarity: Double)?
    /// Counts estimates made, so a caller sees each once.
    private(set) var estimates = 0

    init(sampleRate: Double, maximumDelay: Double) {
        decimation = max(1, Int((sampleRate / Self.analysisRate).rounded()))
        maximumLag = min(Int((maximumDelay * Self.analysisRate).rounded(.up)), Self.window - 256)
        microphoneRing = .allocate(capacity: Self.window)
        referenceRing = .allocate(capacity: Self.window)
        re = .allocate(capacity: Self.fftSize)
        im = .allocate(capacity: Self.fftSize)
        crossRe = .allocate(capacity: Self.fftSize)
        crossIm = .allocate(capacity: Self.fftSize)
        lowPass = BiquadCoefficients.cookbook(
            .lowPass, frequency: 800, gain: 0, alpha: BiquadCoefficients.alpha(omega: 2 * .pi * 800 / sampleRate, q: 0.5.squareRoot()),
            sampleRate: sampleRate)
        reset()
    }

    deinit {
        microphoneRing.deallocate()
        referenceRing.deallocate()
        re.deallocate()
        im.deallocate()
        crossRe.deallocate()
        crossIm.deallocate()
    }

    func reset() {
        microphoneRing.update(repeating: 0, count: Self.window)
        referenceRing.update(repeating: 0, count: Self.window)
        crossRe.update(repeating: 0, count: Self.fftSize)
        crossIm.update(repeating: 0, count: Self.fftSize)
        ringWrite = 0
        sinceEstimate = 0
        collected = 0
        averaged = 0
        stage = 0
        microphoneFilter = (0, 0)
        referenceFilter = (0, 0)
        phase = 0
        microphoneSum = 0
        referenceSum = 0
        result = nil
        estimates = 0
    }

    /// Takes a block of both signals (each the mean of its channels), and does one step of a pending estimate.
    func process(reference: BufferView, microphone: BufferView, frames: Int) {
        let c = lowPass
        let referenceScale = 1 / Double(reference.channelCount)
        let microphoneScale = 1 / Double(microphone.channelCount)
        for i in 0..<frames {
            var xm = 0.0
            for ch in 0..<microphone.channelCount { xm += Double(microphone[ch][i]) }
            xm *= microphoneScale
            var xr = 0.0
            for ch in 0..<reference.channelCount { xr += Double(reference[ch][i]) }
            xr *= referenceScale
            // Transposed direct form II.
            let ym = c.b0 * xm + microphoneFilter.0
            microphoneFilter = (c.b1 * xm - c.a1 * ym + microphoneFilter.1, c.b2 * xm - c.a2 * ym)
            let yr = c.b0 * xr + referenceFilter.0
            referenceFilter = (c.b1 * xr - c.a1 * yr + referenceFilter.1, c.b2 * xr - c.a2 * yr)
            microphoneSum += ym
            referenceSum += yr
            phase += 1
            if phase == decimation {
                microphoneRing[ringWrite] = microphoneSum / Double(decimation)
                referenceRing[ringWrite] = referenceSum / Double(decimation)
                ringWrite = ringWrite + 1 == Self.window ? 0 : ringWrite + 1
                phase = 0
                microphoneSum = 0
                referenceSum = 0
                collected += 1
                sinceEstimate += 1
                if sinceEstimate >= Self.hop, collected >= Self.window, stage == 0 {
                    sinceEstimate = 0
                    stage = 1
                }
            }
        }
        switch stage {
        case 1:
            stage = forward() ? 2 : 0
        case 2:
            inverse()
            stage = 0
        default: break
        }
    }

    /// The window's two signals through one FFT (microphone real, reference imaginary), their cross-spectrum into
    /// the running average — when both carried sound (true); otherwise nothing, and the last result is dropped.
    private func forward() -> Bool {
        var energyM = 0.0
        var energyR = 0.0
        var j = ringWrite
        for i in 0..<Self.window {
            re[i] = microphoneRing[j]
            im[i] = referenceRing[j]
            energyM += re[i] * re[i]
            energyR += im[i] * im[i]
            j = j + 1 == Self.window ? 0 : j + 1
        }
        for i in Self.window..<Self.fftSize {
            re[i] = 0
            im[i] = 0
        }
        // Below −70 dBFS (mean square) on either side, nothing to learn from.
        let floor = 1e-7 * Double(Self.window)
        guard energyM > floor, energyR > floor else {
            result = nil
            return false
        }
        fft.forward(re, im)
        let n = Self.fftSize
        let weight = averaged == 0 ? 1 : 0.3
        for k in 0..<n {
            let (cr, ci) = fft.crossSpectrum(re, im, at: k)
            crossRe[k] += weight * (cr - crossRe[k])
            crossIm[k] += weight * (ci - crossIm[k])
        }
        averaged += 1
        return true
    }

    /// The whitened average back to lags; the peak over 0 … the maximum lag.
    private func inverse() {
        let n = Self.fftSize
        for k in 0..<n {
            let magnitude = (crossRe[k] * crossRe[k] + crossIm[k] * crossIm[k]).squareRoot()
            let scale = magnitude > 1e-20 ? 1 / magnitude : 0
            re[k] = crossRe[k] * scale
            im[k] = crossIm[k] * scale
        }
        fft.inverse(re, im)
        var best = 0
        var bestValue = -Double.infinity
        var sum = 0.0
        for k in 0...maximumLag {
            sum += abs(re[k])
            if re[k] > bestValue {
                bestValue = re[k]
                best = k
            }
        }
        let mean = sum / Double(maximumLag + 1)
        result = (best * decimation, mean > 0 ? bestValue / mean : 0)
        estimates += 1
    }
}
