import AudioCore

#if canImport(Glibc)
import Glibc
#endif

/// The fundamental frequency of a singing voice, every hop (10 ms by default), by YIN (de Cheveigné and Kawahara,
/// 2002): the squared difference of the signal with itself delayed by each candidate period, normalised by its
/// running mean; the first dip under a threshold is the period (the shortest that fits, which keeps it from the
/// octave below), refined between samples by a parabola.
///
/// - Input: mono samples at 16 … 384 kHz. At 32 kHz and more the voice is low-passed (4th-order Butterworth at
///   5 kHz) and taken at 22–24 kHz (every second sample at 44.1 and 48 kHz, every fourth at 96 kHz, …): the
///   fundamental and the harmonics that carry it are below that, and the work stays that of 24 kHz.
/// - Range: 65 Hz (C2) … 1,100 Hz (C♯6) by default; the analysis frame holds the longest period plus a window as
///   long as it: 31 ms at the defaults. Each estimate is stamped at its frame's centre (the input's time, from its
///   first sample).
/// - Frames are analysed every half hop, and each estimate is handed out when the frame after it has been analysed
///   (``Configuration/lookAhead``): half a hop of look-ahead, for the start of the voice. An estimate comes out at
///   most half a frame and half a hop after the moment it describes: 21 ms at the defaults (``emissionDelay``); a
///   change of the voice shows in the estimate stamped nearest it, so at most half a hop more (26 ms).
/// - Voiced when the dip is under ``Configuration/voicingThreshold`` and the frame is louder than
///   ``Configuration/silenceLevel``; confidence is 1 minus the dip's depth. The frequency is the best guess either
///   way. An unvoiced estimate whose next frame is voiced carries that frame's pitch (the voice is starting: its
///   frame holds too little of it to be found in); else, within half a second of a voiced one, the last voiced
///   pitch (a consonant, a breath between syllables); else the deepest dip's.
/// - An octave jump against the estimate before (a dip at twice or half the period almost as deep as the chosen one)
///   is not taken unless the other is clearly worse: singers rarely leap an octave within 5 ms, estimators often do.
///
/// Thread safety: one thread at a time. ``process(_:count:emit:)`` neither allocates nor locks (buffers are made at
/// init), so it may run on a render thread; the ``PitchTrackerUnit`` runs it on a worker.
public final class PitchEstimator {
    /// What the estimator looks for and how: the frequency range, the hop, and the thresholds of YIN and voicing.
    ///
    /// The initializer checks it: the range within 40 Hz … 2 kHz and at least an octave wide, the hop 1 … 50 ms.
    public struct Configuration: Sendable, Equatable {
        /// The lowest fundamental looked for, in Hz: 65 (C2) by default. It sets the longest period, and so the
        /// analysis frame's length.
        public var minimumFrequency: Double = 65
        /// The highest fundamental looked for, in Hz: 1,100 (C♯6) by default.
        public var maximumFrequency: Double = 1_100
        /// Seconds between estimates.
        public var hop: Double = 0.01
        /// The normalised difference under which a dip counts as a period (YIN's threshold).
        public var threshold: Double = 0.15
        /// Dips deeper than this (smaller) are voiced.
        public var voicingThreshold: Double = 0.35
        /// Frames quieter than this (dBFS, RMS) are unvoiced.
        public var silenceLevel: Double = -55
        /// Each estimate waits for the analysis half a hop after it, and an unvoiced one whose next frame is voiced
        /// (the voice starting) carries that frame's pitch. Off: estimates are handed out half a hop sooner, and the
        /// start of a voice has no pitch until its frame holds enough of it.
        public var lookAhead = true

        /// The defaults: 65 … 1,100 Hz, a 10 ms hop, threshold 0.15, voicing 0.35, silence −55 dBFS, look-ahead on.
        public init() {}
    }

    /// The input's sample rate, in Hz (16 kHz … 384 kHz).
    public let sampleRate: Double
    /// The configuration the estimator was made with.
    public let configuration: Configuration
    /// The input samples per analysed sample: 1 below 32 kHz, else the rate over 22,050 (at least 2).
    let decimation: Int
    /// The analysis rate (the input's over ``decimation``).
    let rate: Double
    let minimumLag: Int
    let maximumLag: Int
    /// The window the differences are summed over: as long as the longest period.
    let window: Int
    /// Samples an analysis takes: window + longest lag + 1.
    let frameLength: Int
    /// Samples between estimates, and between analyses (half of it: each estimate looks one analysis ahead).
    let hopSamples: Int
    let analysisHop: Int
    /// Decimated samples kept: `history[0..<filled]`, newest last.
    private let history: UnsafeMutablePointer<Float>
    private let historyCapacity: Int
    private var filled = 0
    /// Decimated samples since the last analysis, and in all.
    private var sinceAnalysis = 0
    /// Every `analysesPerHop`-th analysis is an estimate; it waits for the `lookAhead` analyses after it (1, or 0
    /// without ``Configuration/lookAhead``), kept in `recent` (a ring of `ringSize`, made at init) with `analyses`
    /// counting them all.
    static let analysesPerHop = 2
    static let ringSize = 2
    let lookAhead: Int
    private let recent: UnsafeMutablePointer<Analysis>
    private var analyses = 0
    /// The newest analysis handed out as an estimate.
    private var handedOut = -1
    private var analysed: Int64 = 0
    private var inputCount: Int64 = 0
    private let difference: UnsafeMutablePointer<Double>
    /// Low-pass before decimation: two biquads (direct form I state).
    private var lowPass: [(b0: Double, b1: Double, b2: Double, a1: Double, a2: Double)] = []
    private var lowPassState = [Double](repeating: 0, count: 8)
    private var phase = 0
    private var previousLag: Double? = nil
    /// Analyses in a row kept at the octave before; after `octaveHold` (80 ms) the jump is taken.
    private var heldOctaves = 0
    let octaveHold: Int
    /// The last voiced frequency, and the analyses since it: the best guess of unvoiced estimates for up to
    /// `bridgedAnalyses` (half a second).
    private var lastVoicedFrequency: Double?
    private var sinceVoiced = 0
    let bridgedAnalyses: Int
    static let bridge = 0.5

    /// Makes an estimator for mono input at `sampleRate`; its buffers are all allocated here.
    ///
    /// - Parameters:
    ///   - sampleRate: The input's rate in Hz, 16 kHz … 384 kHz.
    ///   - configuration: The range, hop and thresholds; the defaults by default.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` below 16 kHz or above 384 kHz;
    ///   `.invalidParameter` for a range outside 40 Hz … 2 kHz or narrower than an octave, a hop outside 1 … 50 ms.
    public init(sampleRate: Double, configuration: Configuration = .init()) throws(AudioError) {
        guard sampleRate >= 16_000, sampleRate <= 384_000 else {
            throw AudioError(.unsupportedSampleRate, "pitch tracking: rates must be 16000 … 384000 Hz, got \(sampleRate)")
        }
        let c = configuration
        guard c.minimumFrequency >= 40, c.maximumFrequency <= 2_000, c.minimumFrequency * 2 <= c.maximumFrequency else {
            throw AudioError(.invalidParameter, "pitch tracking: the range must lie within 40 … 2000 Hz and span an octave, got \(c.minimumFrequency) … \(c.maximumFrequency) Hz")
        }
        guard c.hop >= 0.001, c.hop <= 0.05 else {
            throw AudioError(.invalidParameter, "pitch tracking: the hop must be 1 … 50 ms, got \(c.hop * 1000) ms")
        }
        self.sampleRate = sampleRate
        self.configuration = c
        // About 22–24 kHz whatever the input: 2 at 32–48 kHz, 4 at 88.2–96 kHz, 8 at 176.4–192 kHz.
        decimation = sampleRate >= 32_000 ? max(2, Int(sampleRate / 22_050)) : 1
        rate = sampleRate / Double(decimation)
        minimumLag = max(2, Int((rate / c.maximumFrequency).rounded(.down)))
        maximumLag = Int((rate / c.minimumFrequency).rounded(.up)) + 1
        window = maximumLag
        frameLength = window + maximumLag + 1
        analysisHop = max(1, Int((c.hop * rate / Double(Self.analysesPerHop)).rounded()))
        hopSamples = Self.analysesPerHop * analysisHop
        lookAhead = c.lookAhead ? 1 : 0
        recent = .allocate(capacity: Self.ringSize)
        recent.initialize(repeating: Analysis(time: 0, frequency: 0, depth: 1, voiced: false), count: Self.ringSize)
        bridgedAnalyses = Int((Self.bridge * rate / Double(analysisHop)).rounded())
        octaveHold = max(1, Int((0.08 * rate / Double(analysisHop)).rounded()))
        historyCapacity = frameLength * 4
        history = .allocate(capacity: historyCapacity)
        history.initialize(repeating: 0, count: historyCapacity)
        difference = .allocate(capacity: maximumLag + 2)
        difference.initialize(repeating: 0, count: maximumLag + 2)
        if decimation > 1 {
            // Butterworth, 4th order: two sections with Q 0.5412 and 1.3066, at 5 kHz (RBJ cookbook low-pass).
            for q in [0.541_196_1, 1.306_563] {
                let w = 2 * Double.pi * 5_000 / sampleRate
                let alpha = sin(w) / (2 * q)
                let a0 = 1 + alpha
                lowPass.append((
                    b0: (1 - cos(w)) / 2 / a0, b1: (1 - cos(w)) / a0, b2: (1 - cos(w)) / 2 / a0,
                    a1: -2 * cos(w) / a0, a2: (1 - alpha) / a0))
            }
        }
    }

    deinit {
        history.deallocate()
        difference.deallocate()
        recent.deallocate()
    }

    /// Seconds from the moment an estimate describes (its stamp) to when ``process(_:count:emit:)`` hands it out, at
    /// most: half the window and the longest period (the newest half of the frame), and the look-ahead (half a hop,
    /// or none). The estimate stamped nearest a change of the voice is at most half a hop after it.
    public var emissionDelay: Double {
        ((Double(window) + Double(maximumLag)) / 2 + Double(lookAhead * analysisHop)) / rate
    }

    /// Starts again from silence (the stream's time from 0).
    public func reset() {
        filled = 0
        sinceAnalysis = 0
        analyses = 0
        handedOut = -1
        analysed = 0
        inputCount = 0
        phase = 0
        previousLag = nil
        heldOctaves = 0
        lastVoicedFrequency = nil
        sinceVoiced = 0
        for i in lowPassState.indices { lowPassState[i] = 0 }
    }

    /// Feeds `count` samples; `emit` gets each estimate whose frame they complete, in order. No allocation.
    public func process(_ samples: UnsafePointer<Float>, count: Int, emit: (PitchEstimate) -> Void) {
        for i in 0..<count {
            var x = Double(samples[i])
            if decimation > 1 {
                for s in 0..<lowPass.count {
                    let f = lowPass[s]
                    let y = f.b0 * x + f.b1 * lowPassState[4 * s] + f.b2 * lowPassState[4 * s + 1]
                        - f.a1 * lowPassState[4 * s + 2] - f.a2 * lowPassState[4 * s + 3]
                    lowPassState[4 * s + 1] = lowPassState[4 * s]
                    lowPassState[4 * s] = x
                    lowPassState[4 * s + 3] = lowPassState[4 * s + 2]
                    lowPassState[4 * s + 2] = y
                    x = y
                }
                phase += 1
                if phase < decimation { continue }
                phase = 0
            }
            append(Float(x))
            if filled >= frameLength, sinceAnalysis >= analysisHop {
                sinceAnalysis = 0
                recent[analyses % Self.ringSize] = analyse()
                analyses += 1
                let due = analyses - 1 - lookAhead
                if due > handedOut, due % Self.analysesPerHop == 0 {
                    handedOut = due
                    emit(finish(due))
                }
            }
        }
        inputCount += Int64(count)
    }

    /// Hands out the estimate still waiting for its look-ahead, without it: at the end of a stream, or before
    /// ``reset()`` at a break in it. Nothing when none waits. No allocation.
    public func flush(emit: (PitchEstimate) -> Void) {
        let last = analyses - 1
        guard last > handedOut, last % Self.analysesPerHop == 0 else { return }
        handedOut = last
        emit(finish(last, lookingAhead: false))
    }

    private func append(_ x: Float) {
        if filled == historyCapacity {
            // Keep the newest frame.
            let keep = frameLength
            (history).update(from: history + (filled - keep), count: keep)
            filled = keep
        }
        history[filled] = x
        filled += 1
        sinceAnalysis += 1
        analysed += 1
    }

    /// One frame's reading: its pitch, and whether a voice was found in it.
    private struct Analysis {
        var time: Double
        /// The frame's own dip (for a voiced frame), or the best guess from the voice before it.
        var frequency: Double
        var depth: Double
        var voiced: Bool
    }

    /// An estimate from its frame's reading and the next frame's: an unvoiced frame before a voiced one is the
    /// voice's start, and carries its pitch (rather than the voice before, or its own deepest dip).
    private func finish(_ index: Int, lookingAhead: Bool = true) -> PitchEstimate {
        let a = recent[index % Self.ringSize]
        var frequency = a.frequency
        if !a.voiced, lookingAhead, lookAhead > 0 {
            let next = recent[(index + 1) % Self.ringSize]
            if next.voiced { frequency = next.frequency }
        }
        return PitchEstimate(time: a.time, frequency: frequency, confidence: max(0, min(1, 1 - a.depth)), voiced: a.voiced)
    }

    /// YIN on the newest frame.
    private func analyse() -> Analysis {
        let x = history + (filled - frameLength)
        // Loudness of the frame.
        var energy = 0.0
        for j in 0..<frameLength { energy += Double(x[j]) * Double(x[j]) }
        let level = 10 * log10(max(energy / Double(frameLength), 1e-20))
        // The difference function, and its cumulative mean normalised form.
        var running = 0.0
        difference[0] = 1
        // The newest window against the signal `lag` earlier: the estimate describes the newest audio it can.
        let newest = x + (frameLength - window)
        for lag in 1...maximumLag {
            let sum = Self.squaredDifference(newest, newest - lag, count: window)
            running += Double(sum)
            difference[lag] = running > 0 ? Double(sum) * Double(lag) / running : 1
        }
        // The first dip under the threshold, followed to its bottom; else the deepest.
        var lag = -1
        var t = minimumLag
        while t <= maximumLag {
            if difference[t] < configuration.threshold {
                while t + 1 <= maximumLag, difference[t + 1] < difference[t] { t += 1 }
                lag = t
                break
            }
            t += 1
        }
        if lag < 0 {
            lag = minimumLag
            for t in minimumLag...maximumLag where difference[t] < difference[lag] { lag = t }
        }
        // Against an octave jump: the dip at twice or half the period of the estimate before, if nearly as deep —
        // for at most `octaveHold` analyses in a row, so a real leap is followed after that.
        var held = false
        if let previous = previousLag, heldOctaves < octaveHold {
            let ratio = Double(lag) / previous
            for k in 0..<2 {
                // Twice or half the period (no array: this runs on the tracker's real-time path).
                let factor = k == 0 ? 2.0 : 0.5
                guard abs(ratio * factor - 1) < 0.06 else { continue }
                let other = Int((Double(lag) * factor).rounded())
                guard other >= minimumLag, other < maximumLag else { continue }
                let bottom = localMinimum(near: other)
                if difference[bottom] < difference[lag] + 0.05 {
                    lag = bottom
                    held = true
                }
            }
        }
        heldOctaves = held ? heldOctaves + 1 : 0
        let depth = difference[lag]
        let refined = interpolate(lag)
        // Stamped at the centre of what the period was found in: the newest window and one period before it.
        let span = Double(window) + refined
        let centre = (Double(analysed) - span / 2) * Double(decimation) / sampleRate
        let voiced = depth < configuration.voicingThreshold && level > configuration.silenceLevel
        previousLag = voiced ? refined : nil
        // The frequency is the best guess whatever the voicing: for a frame without a voice found, within
        // `bridgedAnalyses` of one with a voice, the voice's last pitch (a consonant, a breath, the edge of a note:
        // the deepest dip of such a frame is mostly a harmonic's or noise's).
        var frequency = rate / refined
        if voiced {
            lastVoicedFrequency = frequency
            sinceVoiced = 0
        } else {
            sinceVoiced += 1
            if let held = lastVoicedFrequency, sinceVoiced <= bridgedAnalyses { frequency = held } else { lastVoicedFrequency = nil }
        }
        return Analysis(time: centre, frequency: frequency, depth: depth, voiced: voiced)
    }

    /// Σ (a[j] − b[j])², eight lanes at a time.
    @inline(__always)
    private static func squaredDifference(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, count: Int) -> Float {
        var lanes = SIMD8<Float>.zero
        var j = 0
        while j + 8 <= count {
            let d = UnsafeRawPointer(a + j).loadUnaligned(as: SIMD8<Float>.self)
                - UnsafeRawPointer(b + j).loadUnaligned(as: SIMD8<Float>.self)
            lanes += d * d
            j += 8
        }
        var sum = lanes.sum()
        while j < count {
            let d = a[j] - b[j]
            sum += d * d
            j += 1
        }
        return sum
    }

    /// The bottom of the dip around `lag` (within two samples).
    private func localMinimum(near lag: Int) -> Int {
        var best = lag
        for t in max(minimumLag, lag - 2)...min(maximumLag - 1, lag + 2) where difference[t] < difference[best] { best = t }
        return best
    }

    /// The period between samples: the vertex of the parabola through the dip and its neighbours.
    private func interpolate(_ lag: Int) -> Double {
        guard lag > 1, lag < maximumLag else { return Double(lag) }
        let a = difference[lag - 1]
        let b = difference[lag]
        let c = difference[lag + 1]
        let curvature = a - 2 * b + c
        guard curvature > 0 else { return Double(lag) }
        return Double(lag) + max(-0.5, min(0.5, (a - c) / (2 * curvature)))
    }
}
