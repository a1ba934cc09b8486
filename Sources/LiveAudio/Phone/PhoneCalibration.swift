import AudioCore
import AudioUnits

#if canImport(Glibc)
import Glibc
#endif

/// What a phone's timestamps cannot see — the room's output path, the air, the phone's own input path before its
/// audio is stamped — measured the way UltraStar Play's companion app's tone calibration does, but without a
/// person: the room plays a few chirps through its output, the phone hears them, and where they land on the room's
/// timeline (the phone's audio placed by its timestamps alone) against where they were played is the phone's offset.
///
/// The signal is three chirps of 150 ms, 800 Hz to 4 kHz (inside any phone's microphone and any room speaker's
/// range), at irregular spacing so that no chirp is taken for another; they are found together by the
/// cross-correlation of the recording with the whole signal (FFT), then each on its own around that lag, and the
/// measurement stands only when the three agree within 2 ms and the match is clear.
public enum PhoneCalibration {
    /// Where each chirp starts, in seconds from the signal's start.
    public static let chirpStarts = [0.0, 0.55, 1.25]
    /// A chirp's length in seconds.
    public static let chirpSeconds = 0.15
    /// The chirps' lowest and highest frequency.
    public static let frequencies = (low: 800.0, high: 4000.0)
    /// The chirps must agree within this (seconds).
    public static let agreement = 0.002

    /// The signal the room plays, at `sampleRate`, peak `amplitude`.
    public static func signal(sampleRate: Double, amplitude: Float = 0.5) -> [Float] {
        let chirp = Int(chirpSeconds * sampleRate)
        let total = Int(((chirpStarts.last ?? 0) + chirpSeconds) * sampleRate) + 1
        var out = [Float](repeating: 0, count: total)
        let taper = Int(0.005 * sampleRate)
        let sweep = (frequencies.high - frequencies.low) / chirpSeconds
        for start in chirpStarts {
            let first = Int(start * sampleRate)
            for n in 0..<chirp {
                let t = Double(n) / sampleRate
                let phase = 2 * Double.pi * (frequencies.low * t + 0.5 * sweep * t * t)
                var g = 1.0
                if n < taper { g = 0.5 - 0.5 * cos(Double.pi * Double(n) / Double(taper)) }
                if n >= chirp - taper { g = 0.5 - 0.5 * cos(Double.pi * Double(chirp - 1 - n) / Double(taper)) }
                out[first + n] = amplitude * Float(g * sin(phase))
            }
        }
        return out
    }

    /// A calibration's result.
    public struct Measurement: Sendable, Equatable {
        /// Where the signal lies in the recording, in frames (the phone's offset when the recording starts where the
        /// signal was played).
        public var lagFrames: Int
        /// The normalized correlation at that lag, 0 … 1.
        public var correlation: Double
        /// Each chirp's own lag, in frames.
        public var chirpLags: [Int]
    }

    /// Finds `signal` in `recording`, `0 … maximumLag` frames into it.
    /// - Parameters:
    ///   - recording: what the phone heard, placed on the room's timeline by its timestamps, from where the signal
    ///     was played (its frame 0 at the signal's frame 0).
    ///   - signal: what was played (``signal(sampleRate:amplitude:)``).
    ///   - sampleRate: both's rate.
    ///   - maximumLag: the largest offset looked for, in frames.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` when the recording is too short for the lags, or when
    ///   the chirps were not heard clearly (too faint, drowned, or heard at lags that disagree).
    public static func measure(recording: [Float], signal: [Float], sampleRate: Double, maximumLag: Int) throws(AudioError) -> Measurement {
        let m = signal.count
        guard maximumLag >= 0, recording.count >= m + maximumLag else {
            throw AudioError(
                .invalidParameter,
                "a calibration needs \(Double(m + maximumLag) / sampleRate) s of the phone's audio, got \(Double(recording.count) / sampleRate) s")
        }
        let used = m + maximumLag
        var size = 2
        while size < used + m { size <<= 1 }
        let fft = FFT(size: size)
        let re = UnsafeMutablePointer<Double>.allocate(capacity: size), im = UnsafeMutablePointer<Double>.allocate(capacity: size)
        let xr = UnsafeMutablePointer<Double>.allocate(capacity: size), xi = UnsafeMutablePointer<Double>.allocate(capacity: size)
        defer {
            re.deallocate()
            im.deallocate()
            xr.deallocate()
            xi.deallocate()
        }
        for i in 0..<size {
            re[i] = i < used ? Double(recording[i]) : 0
            im[i] = i < m ? Double(signal[i]) : 0
        }
        fft.forward(re, im)
        for k in 0..<size {
            let (a, b) = fft.crossSpectrum(re, im, at: k)
            xr[k] = a
            xi[k] = b
        }
        fft.inverse(xr, xi)
        // c[lag] = Σ recording[n + lag] · signal[n], normalized by both energies over the window.
        let signalEnergy = signal.reduce(0.0) { $0 + Double($1) * Double($1) }
        guard signalEnergy > 0 else { throw AudioError(.invalidParameter, "a calibration signal of silence") }
        var prefix = [Double](repeating: 0, count: used + 1)
        for i in 0..<used { prefix[i + 1] = prefix[i] + Double(recording[i]) * Double(recording[i]) }
        func normalized(_ lag: Int, _ c: Double) -> Double {
            let e = prefix[lag + m] - prefix[lag]
            return e > 0 ? c / (signalEnergy * e).squareRoot() : 0
        }
        var best = 0, bestValue = -Double.infinity
        for lag in 0...maximumLag {
            let v = normalized(lag, xr[lag])
            if v > bestValue {
                bestValue = v
                best = lag
            }
        }
        guard bestValue >= 0.2 else {
            throw AudioError(
                .invalidParameter,
                "the phone did not hear the room's calibration tones (best match \(Int(max(0, bestValue) * 100)) %): turn the room's speakers up or bring the phone nearer, and calibrate again")
        }
        // Each chirp on its own, within 10 ms of the lag found.
        let chirp = Int(chirpSeconds * sampleRate)
        let around = Int(0.010 * sampleRate)
        var lags: [Int] = []
        for start in chirpStarts {
            let first = Int(start * sampleRate)
            var own = best, ownValue = -Double.infinity
            for lag in max(0, best - around)...min(maximumLag, best + around) {
                var c = 0.0, e = 0.0
                for n in 0..<chirp {
                    let x = Double(recording[first + lag + n])
                    c += x * Double(signal[first + n])
                    e += x * x
                }
                let v = e > 0 ? c / e.squareRoot() : 0
                if v > ownValue {
                    ownValue = v
                    own = lag
                }
            }
            lags.append(own)
        }
        let spread = (lags.max() ?? 0) - (lags.min() ?? 0)
        guard Double(spread) <= agreement * sampleRate else {
            throw AudioError(
                .invalidParameter,
                "the phone heard the room's calibration tones at times \(String(cFormat: "%.1f", Double(spread) * 1000 / sampleRate)) ms apart (echoes or noise): calibrate again in a quieter moment")
        }
        return Measurement(lagFrames: best, correlation: bestValue, chirpLags: lags)
    }
}
