import AudioCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loudness reading (ITU-R BS.1770-4, EBU R128): one value for all channels together.
///
/// Loudness is in LUFS (loudness units relative to full scale); a level with nothing in it (silence, or a
/// measurement too short to have a block) is `-infinity`, never a number that looks real.
public struct LoudnessReading: Hashable, Sendable {
    /// The last 400 ms, ungated (EBU R128 "M").
    public var momentary: Double
    /// The last 3 s, ungated ("S").
    public var shortTerm: Double
    /// Everything since the start, gated: 400 ms blocks overlapping by 75 %, those under −70 LUFS dropped, then those
    /// more than 10 LU under the loudness of the rest ("I").
    public var integrated: Double
    /// The loudness range in LU (EBU Tech 3342, "LRA"): the spread between the 10th and 95th percentiles of the
    /// short-term loudness, those under −70 LUFS and those more than 20 LU under the rest dropped. 0 until there are
    /// short-term values.
    public var loudnessRange: Double
    /// The highest true peak since the start, in dBTP (oversampled: ``TruePeakFilter``).
    public var truePeak: Double
    /// The highest sample since the start, in dBFS.
    public var samplePeak: Double
    /// Seconds of audio measured.
    public var duration: Double

    /// Creates a reading from values already measured; ``silent`` is the reading of nothing.
    ///
    /// - Parameters:
    ///   - momentary: The momentary loudness in LUFS, `-infinity` for none.
    ///   - shortTerm: The short-term loudness in LUFS, `-infinity` for none.
    ///   - integrated: The gated integrated loudness in LUFS, `-infinity` for none.
    ///   - loudnessRange: The loudness range in LU, 0 for none.
    ///   - truePeak: The highest true peak in dBTP, `-infinity` for none.
    ///   - samplePeak: The highest sample in dBFS, `-infinity` for none.
    ///   - duration: Seconds of audio measured.
    public init(
        momentary: Double, shortTerm: Double, integrated: Double, loudnessRange: Double, truePeak: Double,
        samplePeak: Double, duration: Double
    ) {
        self.momentary = momentary
        self.shortTerm = shortTerm
        self.integrated = integrated
        self.loudnessRange = loudnessRange
        self.truePeak = truePeak
        self.samplePeak = samplePeak
        self.duration = duration
    }

    /// "M -18.2 S -19.0 I -19.3 LUFS", for a status line (-inf where there is no loudness yet).
    public var statusText: String {
        "M \(formatLevel(momentary)) S \(formatLevel(shortTerm)) I \(formatLevel(integrated, "LUFS"))"
    }

    /// "integrated -19.3 LUFS, range 4.2 LU, true peak -1.1 dBTP", for a summary.
    public var summaryText: String {
        "integrated \(formatLevel(integrated, "LUFS")), range \(formatLevel(loudnessRange, "LU")), "
            + "true peak \(formatLevel(truePeak, "dBTP"))"
    }

    /// Nothing measured yet.
    public static let silent = LoudnessReading(
        momentary: -.infinity, shortTerm: -.infinity, integrated: -.infinity, loudnessRange: 0, truePeak: -.infinity,
        samplePeak: -.infinity, duration: 0)
}

/// How BS.1770 weights each channel of a file or stream, and what it calls them.
public struct LoudnessChannelWeights: Hashable, Sendable {
    /// One weight a channel: 1 for front channels, 1.41 (+1.5 dB) for surround channels, 0 for the LFE.
    public let weights: [Double]
    /// The layout assumed, "mono", "stereo", "5.1 (L R C LFE Ls Rs)", … as a person reads it.
    public let layout: String

    /// The weights for `channelCount` channels in the standard (WAV, FFmpeg) order for that count. Mono and
    /// stereo: 1 each. Counts with a surround layout: its back and side channels 1.41, its LFE 0.
    public init(channelCount: Int) {
        let s = 1.41
        switch channelCount {
        case 1: (weights, layout) = ([1], "mono")
        case 2: (weights, layout) = ([1, 1], "stereo")
        case 3: (weights, layout) = ([1, 1, 1], "3.0 (L R C)")
        case 4: (weights, layout) = ([1, 1, s, s], "quad (L R Ls Rs)")
        case 5: (weights, layout) = ([1, 1, 1, s, s], "5.0 (L R C Ls Rs)")
        case 6: (weights, layout) = ([1, 1, 1, 0, s, s], "5.1 (L R C LFE Ls Rs)")
        case 7: (weights, layout) = ([1, 1, 1, 0, s, s, s], "6.1 (L R C LFE Cs Ls Rs)")
        case 8: (weights, layout) = ([1, 1, 1, 0, s, s, s, s], "7.1 (L R C LFE Lb Rb Ls Rs)")
        default: (weights, layout) = (Array(repeating: 1, count: max(0, channelCount)), "\(channelCount) channels")
        }
    }

    /// What a person needs to know when it is more than stereo: each channel's weight.
    public var description: String {
        let names: [String]
        switch weights.count {
        case 1: names = ["mono"]
        case 2: names = ["L", "R"]
        case 3: names = ["L", "R", "C"]
        case 4: names = ["L", "R", "Ls", "Rs"]
        case 5: names = ["L", "R", "C", "Ls", "Rs"]
        case 6: names = ["L", "R", "C", "LFE", "Ls", "Rs"]
        case 7: names = ["L", "R", "C", "LFE", "Cs", "Ls", "Rs"]
        case 8: names = ["L", "R", "C", "LFE", "Lb", "Rb", "Ls", "Rs"]
        default: names = weights.indices.map { "ch\($0 + 1)" }
        }
        let each = zip(names, weights).map { name, w in
            w == 0 ? "\(name) not counted" : "\(name) " + String(cFormat: "%.2f", w)
        }
        return "\(layout), weighted as BS.1770 asks: " + each.joined(separator: ", ")
    }
}

/// The BS.1770 loudness computation: K-weighting, 100 ms sub-blocks, momentary and short-term windows, gated
/// integrated loudness and loudness range from histograms, and the true peak.
///
/// The history is bounded: a 1000-bin histogram (0.1 LU steps from −70 to +30 LUFS) holds every gating block's
/// count and energy, another every short-term value's; a ring holds the last 3 s of sub-blocks. A run of any
/// length — a 24-hour stream — uses the memory of the first second. The integrated loudness is exact but for the
/// blocks in the one bin that the relative gate falls in (within 0.05 LU of the gate); the range's percentiles are
/// read to the bin's centre (±0.05 LU).
///
/// Thread safety: one thread at a time; ``process(_:)`` neither allocates nor locks (the render thread may call it).
public struct LoudnessKernel: ~Copyable {
    /// The sample rate of the audio measured, in Hz (8 kHz … 384 kHz).
    public let sampleRate: Double
    /// The number of channels measured (1 or more); each block given to ``process(_:)`` must have this many.
    public let channelCount: Int
    /// The BS.1770 weight of each channel, from ``LoudnessChannelWeights/init(channelCount:)``.
    public let channelWeights: LoudnessChannelWeights
    static let bins = 1000
    static let lowest = -70.0
    static let binsPerLU = 10.0

    // K-weighting: a high shelf then a high pass, each a biquad in Double.
    private let shelf: (b0: Double, b1: Double, b2: Double, a1: Double, a2: Double)
    private let highPass: (a1: Double, a2: Double)
    private let weights: UnsafeMutablePointer<Double>
    /// Per channel: the two stages' states (4) and the sum of squares of the sub-block so far.
    private let state: UnsafeMutablePointer<Double>
    private let subBlockFrames: Int
    private var subBlockDone = 0
    /// The last 30 sub-blocks' channel-weighted mean squares (a ring).
    private let ring: UnsafeMutablePointer<Double>
    private var subBlocks = 0
    private let gatingCount: UnsafeMutablePointer<Int>
    private let gatingEnergy: UnsafeMutablePointer<Double>
    private let shortCount: UnsafeMutablePointer<Int>
    private let shortEnergy: UnsafeMutablePointer<Double>
    private var truePeakMeter: TruePeakMeter
    private var frames: Int64 = 0
    private var truePeak: Float = 0
    private var samplePeak: Float = 0

    /// - Parameters:
    ///   - sampleRate: 8 kHz … 384 kHz.
    ///   - channelCount: 1 … 8, weighted by ``LoudnessChannelWeights/init(channelCount:)``.
    public init(sampleRate: Double, channelCount: Int) {
        precondition(sampleRate >= 8000 && sampleRate <= 384_000 && channelCount >= 1)
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        channelWeights = LoudnessChannelWeights(channelCount: channelCount)
        // BS.1770's pre-filter and RLB filter, re-derived for any rate from their analogue prototypes.
        do {
            let f0 = 1681.974450955533, gain = 3.999843853973347, q = 0.7071752369554196
            let k = tan(Double.pi * f0 / sampleRate)
            let vh = pow(10, gain / 20), vb = pow(vh, 0.4996667741545416)
            let a0 = 1 + k / q + k * k
            shelf = (
                (vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0,
                2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0
            )
        }
        do {
            let f0 = 38.13547087602444, q = 0.5003270373238773
            let k = tan(Double.pi * f0 / sampleRate)
            let a0 = 1 + k / q + k * k
            highPass = (2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0)
        }
        weights = .allocate(capacity: channelCount)
        for c in 0..<channelCount { weights[c] = channelWeights.weights[c] }
        state = .allocate(capacity: 5 * channelCount)
        subBlockFrames = max(1, Int((sampleRate / 10).rounded()))
        ring = .allocate(capacity: 32)
        gatingCount = .allocate(capacity: Self.bins)
        gatingEnergy = .allocate(capacity: Self.bins)
        shortCount = .allocate(capacity: Self.bins)
        shortEnergy = .allocate(capacity: Self.bins)
        truePeakMeter = TruePeakMeter(sampleRate: sampleRate, channelCount: channelCount)
        reset()
    }

    deinit {
        weights.deallocate()
        state.deallocate()
        ring.deallocate()
        gatingCount.deallocate()
        gatingEnergy.deallocate()
        shortCount.deallocate()
        shortEnergy.deallocate()
    }

    /// Starts a new measurement: everything before is forgotten. Does not allocate.
    public mutating func reset() {
        state.update(repeating: 0, count: 5 * channelCount)
        ring.update(repeating: 0, count: 32)
        gatingCount.update(repeating: 0, count: Self.bins)
        gatingEnergy.update(repeating: 0, count: Self.bins)
        shortCount.update(repeating: 0, count: Self.bins)
        shortEnergy.update(repeating: 0, count: Self.bins)
        truePeakMeter.reset()
        subBlockDone = 0
        subBlocks = 0
        frames = 0
        truePeak = 0
        samplePeak = 0
    }

    /// Measures `block` (``channelCount`` channels). Returns true when a 100 ms step completed in it (the
    /// readings moved). Neither allocates nor locks.
    @discardableResult
    public mutating func process(_ block: BufferView) -> Bool {
        precondition(block.channelCount == channelCount)
        let peak = truePeakMeter.process(block)
        truePeak = max(truePeak, peak)
        var stepped = false
        var done = 0
        while done < block.frameCount {
            let n = min(block.frameCount - done, subBlockFrames - subBlockDone)
            for c in 0..<channelCount {
                let x = block[c].baseAddress! + done
                samplePeak = max(samplePeak, VectorOps.peak(x, count: n))
                filter(x, count: n, state: state + 5 * c)
            }
            done += n
            subBlockDone += n
            if subBlockDone == subBlockFrames {
                finishSubBlock()
                stepped = true
            }
        }
        frames += Int64(block.frameCount)
        return stepped
    }

    @inline(__always)
    private func filter(_ x: UnsafePointer<Float>, count: Int, state s: UnsafeMutablePointer<Double>) {
        let (b0, b1, b2, a1, a2) = shelf
        let (h1, h2) = highPass
        var s1 = s[0], s2 = s[1], t1 = s[2], t2 = s[3], sum = s[4]
        for i in 0..<count {
            // Transposed direct form II, twice.
            let v = Double(x[i])
            let y = b0 * v + s1
            s1 = b1 * v - a1 * y + s2
            s2 = b2 * v - a2 * y
            let z = y + t1
            t1 = -2 * y - h1 * z + t2
            t2 = y - h2 * z
            sum += z * z
        }
        // Denormals in a long silence: flushed to zero.
        if abs(s1) < 1e-30 { s1 = 0 }
        if abs(s2) < 1e-30 { s2 = 0 }
        if abs(t1) < 1e-30 { t1 = 0 }
        if abs(t2) < 1e-30 { t2 = 0 }
        s[0] = s1
        s[1] = s2
        s[2] = t1
        s[3] = t2
        s[4] = sum
    }

    private mutating func finishSubBlock() {
        var energy = 0.0
        for c in 0..<channelCount {
            energy += weights[c] * state[5 * c + 4]
            state[5 * c + 4] = 0
        }
        ring[subBlocks & 31] = energy / Double(subBlockFrames)
        subBlocks += 1
        subBlockDone = 0
        if subBlocks >= 4 { Self.add(window(4), count: gatingCount, energy: gatingEnergy) }
        if subBlocks >= 30 { Self.add(window(30), count: shortCount, energy: shortEnergy) }
    }

    /// The mean energy of the last `n` sub-blocks (those not yet measured count as silence).
    private func window(_ n: Int) -> Double {
        var sum = 0.0
        var k = 0
        while k < min(n, subBlocks) {
            sum += ring[(subBlocks - 1 - k) & 31]
            k += 1
        }
        return sum / Double(n)
    }

    static func loudness(_ energy: Double) -> Double { energy > 0 ? -0.691 + 10 * log10(energy) : -.infinity }
    static func energy(_ loudness: Double) -> Double { pow(10, (loudness + 0.691) / 10) }

    private static func add(_ energy: Double, count: UnsafeMutablePointer<Int>, energy sums: UnsafeMutablePointer<Double>) {
        let l = loudness(energy)
        guard l >= lowest else { return }
        let bin = min(bins - 1, Int((l - lowest) * binsPerLU))
        count[bin] += 1
        sums[bin] += energy
    }

    /// The bin a loudness falls in, for gates: the first bin whose centre is above `gate`.
    private static func firstBin(above gate: Double) -> Int {
        max(0, min(bins, Int(((gate - lowest) * binsPerLU - 0.5).rounded(.up))))
    }

    /// The loudness of the last 400 ms.
    public var momentary: Double { Self.loudness(window(4)) }
    /// The loudness of the last 3 s.
    public var shortTerm: Double { Self.loudness(window(30)) }

    /// The gated loudness of everything measured (−inf when no block reached −70 LUFS).
    public var integrated: Double {
        guard let all = Self.meanEnergy(count: gatingCount, energy: gatingEnergy, from: 0) else { return -.infinity }
        let gate = Self.loudness(all) - 10
        guard let gated = Self.meanEnergy(count: gatingCount, energy: gatingEnergy, from: Self.firstBin(above: gate))
        else { return -.infinity }
        return Self.loudness(gated)
    }

    /// The mean energy of the values in bins `first` and above of a histogram, or nil when they hold none.
    private static func meanEnergy(
        count: UnsafeMutablePointer<Int>, energy: UnsafeMutablePointer<Double>, from first: Int
    ) -> Double? {
        var n = 0
        var sum = 0.0
        for b in first..<bins {
            n += count[b]
            sum += energy[b]
        }
        return n > 0 ? sum / Double(n) : nil
    }

    /// The loudness range in LU (0 until a short-term value reached −70 LUFS).
    public var loudnessRange: Double {
        guard let all = Self.meanEnergy(count: shortCount, energy: shortEnergy, from: 0) else { return 0 }
        let first = Self.firstBin(above: Self.loudness(all) - 20)
        var gated = 0
        for b in first..<Self.bins { gated += shortCount[b] }
        guard gated > 0 else { return 0 }
        // Nearest rank: the value at 10 % and at 95 % of the gated values, in ascending order.
        func percentile(_ p: Double) -> Double {
            let rank = max(1, Int((p * Double(gated)).rounded(.up)))
            var seen = 0
            for b in first..<Self.bins {
                seen += shortCount[b]
                if seen >= rank { return Self.lowest + (Double(b) + 0.5) / Self.binsPerLU }
            }
            return Self.lowest + Double(Self.bins) / Self.binsPerLU
        }
        return percentile(0.95) - percentile(0.10)
    }

    /// Everything at once.
    public var reading: LoudnessReading {
        LoudnessReading(
            momentary: momentary, shortTerm: shortTerm, integrated: integrated, loudnessRange: loudnessRange,
            truePeak: truePeak > 0 ? 20 * log10(Double(truePeak)) : -.infinity,
            samplePeak: samplePeak > 0 ? 20 * log10(Double(samplePeak)) : -.infinity,
            duration: Double(frames) / sampleRate)
    }
}
