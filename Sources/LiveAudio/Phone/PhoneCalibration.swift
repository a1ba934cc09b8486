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
/// range), at irregular spacing so that no chirp is taken for another. The recording is matched against one chirp
/// (its cross-correlation by FFT), and the match's envelope (the magnitude of its analytic signal) is what is
/// searched: the lag where the three chirps' envelopes, each taken at its best within a millisecond, sum highest,
/// then each chirp's peak on its own around that lag. The measurement stands only when the three agree within 2 ms
/// and the match is clear; it is their mean.
///
/// The envelope, not the correlation itself: a chirp's correlation swings with its carrier (2.4 kHz in the middle,
/// a period of 0.4 ms), so that chirps heard a tenth of a millisecond apart from where the signal has them — a
/// phone's clock against the room's over a second, its stamps' wander — cancel in a match of the whole signal,
/// where their envelopes still add. A browser's recording so matched was found at the lag of one chirp against
/// another.
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

    /// One packet of the phone's audio as a calibration keeps it.
    public struct Packet: Sendable {
        /// Where its first frame lands on the room's timeline by its stamp (room sample time).
        public var position: Double
        /// Its samples, mono.
        public var samples: [Float]
        /// The room's frames one of its frames spans (the room's rate over its own).
        public var framesPerSample: Double
        /// It does not follow the packet before it (the first, a lost one before it, a capture started again).
        public var newRun: Bool

        /// A packet as the calibration keeps it (each field as documented above).
        public init(position: Double, samples: [Float], framesPerSample: Double, newRun: Bool) {
            self.position = position
            self.samples = samples
            self.framesPerSample = framesPerSample
            self.newRun = newRun
        }
    }

    /// A run whose packets' positions step by more than this from where the one before ends is split there
    /// (seconds: the room's placer starts a stream again at the same distance).
    public static let runStep = 0.010

    /// The phone's audio laid on the room's timeline from `start`, `length` frames: each run of packets (in
    /// sequence, no step over ``runStep``) one stream, as the room's ``PhoneVoicePlacer`` makes of a run, placed by
    /// the least-squares line through its packets' positions (split where they step by more than ``lineStep``), its
    /// frames interpolated onto the room's. (The placer starts a run at its first packet and follows the stamps by a
    /// loop that takes the mean distance to zero within seconds; the line is that mean from the start.) Packets whose
    /// position or rate is not a finite number are left out.
    ///
    /// Not packet by packet at each one's own position: a page's stamps wander by a fraction of a millisecond from
    /// packet to packet (its clock against the audio context's, a median of readings of a tenth of a millisecond),
    /// and a chirp torn at every 20 ms by such steps matched the signal at a third of what it should — a chirp
    /// sweeping to 4 kHz is matched within a tenth of a millisecond — so that one chirp alone, at the wrong lag, could
    /// match better than the three together.
    public static func recording(_ packets: [Packet], start: Double, length: Int, sampleRate: Double) -> [Float] {
        var out = [Float](repeating: 0, count: max(0, length))
        guard start.isFinite, sampleRate.isFinite, sampleRate > 0 else { return out }
        // What cannot be placed (a position or a rate that is not a finite number) is left out, and breaks its run.
        var usable: [Packet] = []
        var broken = false
        for p in packets {
            guard p.position.isFinite, p.framesPerSample.isFinite, p.framesPerSample > 0, p.framesPerSample < 1e6, abs(p.position) < 1e15 else {
                broken = true
                continue
            }
            var q = p
            q.newRun = p.newRun || broken
            usable.append(q)
            broken = false
        }
        let step = runStep * sampleRate
        var first = 0
        while first < usable.count {
            let ratio = usable[first].framesPerSample
            var end = first + 1
            while end < usable.count, !usable[end].newRun, usable[end].framesPerSample == ratio {
                let before = usable[end - 1]
                guard abs(usable[end].position - (before.position + Double(before.samples.count) * ratio)) <= step else { break }
                end += 1
            }
            lay(usable[first..<end], ratio: ratio, start: start, sampleRate: sampleRate, into: &out)
            first = end
        }
        return out
    }

    /// A step of more than this inside a run (seconds; under ``runStep``, so not a run's break) splits its line:
    /// a browser's capture moves by a few milliseconds now and then, and one line through both sides would put
    /// each side half the step off.
    public static let lineStep = 0.001

    /// One run into `out` (its frame 0 at room sample time `start`): on the least-squares line through its packets'
    /// positions, or on two or more where the positions step by more than ``lineStep`` (between sides of ten packets
    /// or more: less is a packet's stamp gone astray, which the line outweighs).
    private static func lay(_ run: ArraySlice<Packet>, ratio: Double, start: Double, sampleRate: Double, into out: inout [Float], depth: Int = 0) {
        // Each packet's first frame, counted in the run's phone frames.
        var xs: [Double] = []
        var count = 0
        for p in run {
            xs.append(Double(count))
            count += p.samples.count
        }
        guard count >= 2 else { return }
        let ps = run.map(\.position)
        // Where the positions step: of the splits into two lines of one slope, the one whose lines lie furthest
        // apart (each side's sums from prefix sums: the jump is the difference of the sides' intercepts).
        let sides = 10
        if depth < 8, ps.count >= 2 * sides {
            var sx = [0.0], sp = [0.0], sxx = [0.0], sxp = [0.0]
            for (x, p) in zip(xs, ps) {
                // Positions from the first's (the sums stay small).
                let q = p - ps[0]
                sx.append(sx[sx.count - 1] + x)
                sp.append(sp[sp.count - 1] + q)
                sxx.append(sxx[sxx.count - 1] + x * x)
                sxp.append(sxp[sxp.count - 1] + x * q)
            }
            func side(_ a: Int, _ b: Int) -> (n: Double, mx: Double, mp: Double, cxx: Double, cxp: Double) {
                let n = Double(b - a), x = sx[b] - sx[a], p = sp[b] - sp[a]
                return (n, x / n, p / n, (sxx[b] - sxx[a]) - x * x / n, (sxp[b] - sxp[a]) - x * p / n)
            }
            var split = 0, largest = 0.0
            for k in sides...(ps.count - sides) {
                let a = side(0, k), b = side(k, ps.count)
                let slope = a.cxx + b.cxx > 0 ? (a.cxp + b.cxp) / (a.cxx + b.cxx) : ratio
                let jump = (b.mp - slope * b.mx) - (a.mp - slope * a.mx)
                if abs(jump) > largest {
                    largest = abs(jump)
                    split = k
                }
            }
            if largest > lineStep * sampleRate {
                let at = run.startIndex + split
                lay(run[..<at], ratio: ratio, start: start, sampleRate: sampleRate, into: &out, depth: depth + 1)
                lay(run[at...], ratio: ratio, start: start, sampleRate: sampleRate, into: &out, depth: depth + 1)
                return
            }
        }
        var samples: [Float] = []
        samples.reserveCapacity(count)
        for p in run { samples += p.samples }
        let n = Double(xs.count)
        let mx = xs.reduce(0, +) / n, mp = ps.reduce(0, +) / n
        var sxx = 0.0, sxp = 0.0
        for (x, p) in zip(xs, ps) {
            sxx += (x - mx) * (x - mx)
            sxp += (x - mx) * (p - mp)
        }
        // The slope is the room's frames per phone frame: the nominal ratio, off by the clocks' drift (at most the
        // room placer's 0.2 %); a run of one packet, or a line that says more, keeps the nominal one.
        var slope = sxx > 0 ? sxp / sxx : ratio
        if !(abs(slope / ratio - 1) <= 0.002) { slope = ratio }
        let intercept = mp - slope * mx
        let last = Double(samples.count - 1)
        // The room's frames the run covers, within `out` (worked out in Double: a run far outside it is skipped).
        let low = max(0, (intercept - start).rounded(.up)), high = min(Double(out.count - 1), (intercept + slope * last - start).rounded(.down))
        guard low.isFinite, high.isFinite, low <= high else { return }
        for k in Int(low)...Int(high) {
            let u = (start + Double(k) - intercept) / slope
            let i = min(max(0, Int(max(0, min(u, last)).rounded(.down))), samples.count - 2)
            let f = Float(min(max(u - Double(i), 0), 1))
            out[k] = samples[i] + f * (samples[i + 1] - samples[i])
        }
    }

    /// A calibration's result.
    public struct Measurement: Sendable, Equatable {
        /// Where the signal lies in the recording, in frames (the phone's offset when the recording starts where the
        /// signal was played): the mean of ``chirpLags``.
        public var lagFrames: Int
        /// How clearly the chirps were heard: their matches' envelopes, normalized, the mean of the three, 0 … 1.
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
        guard sampleRate.isFinite, sampleRate >= 8_000, sampleRate <= 768_000 else {
            throw AudioError(.unsupportedSampleRate, "a calibration at \(sampleRate) Hz: 8,000 … 768,000 Hz")
        }
        let needed = Int(((chirpStarts.last ?? 0) + chirpSeconds) * sampleRate)
        guard m >= needed else {
            throw AudioError(.invalidParameter, "a calibration signal of \(m) frames: PhoneCalibration.signal's \(needed) or more")
        }
        guard maximumLag >= 0, maximumLag <= 60 * Int(sampleRate), recording.count - m >= maximumLag else {
            throw AudioError(
                .invalidParameter,
                "a calibration needs \(Double(m + max(0, min(maximumLag, 60 * Int(sampleRate)))) / sampleRate) s of the phone's audio (a lag of 0 … 60 s), got \(Double(recording.count) / sampleRate) s")
        }
        let used = m + maximumLag
        // The template: the first chirp (the three are the same chirp).
        let first0 = Int((chirpStarts.first ?? 0) * sampleRate)
        let chirp = min(Int(chirpSeconds * sampleRate), m - first0)
        let template = signal[first0..<(first0 + chirp)]
        let templateEnergy = template.reduce(0.0) { $0 + Double($1) * Double($1) }
        guard templateEnergy > 0 else { throw AudioError(.invalidParameter, "a calibration signal of silence") }
        var size = 2
        while size < used + chirp { size <<= 1 }
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
            im[i] = i < chirp ? Double(template[first0 + i]) : 0
        }
        fft.forward(re, im)
        // The cross-spectrum's analytic half: its inverse is the match (real part) and its quadrature.
        for k in 0..<size {
            let (a, b) = fft.crossSpectrum(re, im, at: k)
            let w: Double = k == 0 || k == size / 2 ? 1 : (k < size / 2 ? 2 : 0)
            xr[k] = w * a
            xi[k] = w * b
        }
        fft.inverse(xr, xi)
        // The envelope at each start t of a chirp in the recording, normalized by both energies: 0 … 1.
        var prefix = [Double](repeating: 0, count: used + 1)
        for i in 0..<used { prefix[i + 1] = prefix[i] + Double(recording[i]) * Double(recording[i]) }
        let starts = used - chirp + 1
        var envelope = [Double](repeating: 0, count: starts)
        for t in 0..<starts {
            let e = prefix[t + chirp] - prefix[t]
            envelope[t] = e > 0 ? (xr[t] * xr[t] + xi[t] * xi[t]).squareRoot() / (templateEnergy * e).squareRoot() : 0
        }
        // Each start's best within half the agreement either side.
        let reach = max(0, Int(agreement / 2 * sampleRate))
        var nearby = [Double](repeating: 0, count: starts)
        for t in 0..<starts {
            var v = 0.0
            for u in max(0, t - reach)...min(starts - 1, t + reach) where envelope[u] > v { v = envelope[u] }
            nearby[t] = v
        }
        let offsets = chirpStarts.map { Int($0 * sampleRate) }
        var best = 0, bestValue = -Double.infinity
        for lag in 0...maximumLag {
            var v = 0.0
            for o in offsets where lag + o < starts { v += nearby[lag + o] }
            v /= Double(offsets.count)
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
        // Each chirp's own peak, within 10 ms of the lag found.
        let around = Int(0.010 * sampleRate)
        var lags: [Int] = []
        for o in offsets {
            var own = best, ownValue = -Double.infinity
            for lag in max(0, best - around)...min(maximumLag, best + around) where lag + o < starts && envelope[lag + o] > ownValue {
                ownValue = envelope[lag + o]
                own = lag
            }
            lags.append(own)
        }
        let spread = (lags.max() ?? 0) - (lags.min() ?? 0)
        guard Double(spread) <= agreement * sampleRate else {
            throw AudioError(
                .invalidParameter,
                "the phone heard the room's calibration tones at times \(String(cFormat: "%.1f", Double(spread) * 1000 / sampleRate)) ms apart (echoes or noise): calibrate again in a quieter moment")
        }
        best = Int((Double(lags.reduce(0, +)) / Double(lags.count)).rounded())
        return Measurement(lagFrames: best, correlation: bestValue, chirpLags: lags)
    }
}
