#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The filter shapes of the Audio EQ Cookbook (R. Bristow-Johnson), each a second-order section.
public enum BiquadType: String, CaseIterable, Sendable {
    /// The shapes (one declaration, so each case carries this whole list): `peak`, a bell boosting or cutting `gain`
    /// dB around the frequency; `lowShelf` and `highShelf`, `gain` dB below or above it; `lowPass` and `highPass`,
    /// 12 dB per octave past it; `bandPass`, 0 dB peak gain at it; `notch`, a null at it; `allPass`, unity gain with
    /// the phase turning through it.
    case peak, lowShelf, highShelf, lowPass, highPass, bandPass, notch, allPass

    /// True for the shapes whose response depends on a gain (peak and shelves).
    public var usesGain: Bool { self == .peak || self == .lowShelf || self == .highShelf }
    /// True for the shapes the cookbook also specifies by bandwidth in octaves.
    public var acceptsBandwidth: Bool { self == .peak || self == .bandPass || self == .notch }
}

/// Normalized biquad coefficients (a0 = 1): y[n] = b0·x[n] + b1·x[n−1] + b2·x[n−2] − a1·y[n−1] − a2·y[n−2].
/// Double precision, so low corner frequencies at high sample rates keep their exact response.
public struct BiquadCoefficients: Sendable, Equatable {
    /// The coefficients of the difference equation above (one declaration, so each carries this line): feed-forward
    /// `b0`, `b1`, `b2`; feedback `a1`, `a2`.
    public var b0: Double, b1: Double, b2: Double, a1: Double, a2: Double

    /// Makes a section from coefficients already divided by a0.
    ///
    /// - Parameters:
    ///   - b0: The gain of the input sample x[n].
    ///   - b1: The gain of x[n−1].
    ///   - b2: The gain of x[n−2].
    ///   - a1: The gain of y[n−1], subtracted.
    ///   - a2: The gain of y[n−2], subtracted.
    public init(b0: Double, b1: Double, b2: Double, a1: Double, a2: Double) {
        self.b0 = b0
        self.b1 = b1
        self.b2 = b2
        self.a1 = a1
        self.a2 = a2
    }

    /// Passes the signal unchanged.
    public static let identity = BiquadCoefficients(b0: 1, b1: 0, b2: 0, a1: 0, a2: 0)

    /// The cookbook's α for a quality factor: sin(ω0) / 2Q.
    @inlinable
    public static func alpha(omega: Double, q: Double) -> Double { sin(omega) / (2 * q) }

    /// The cookbook's α for a bandwidth in octaves (measured between the −3 dB points for band-pass and notch,
    /// between the half-gain points for peak): sin(ω0)·sinh(ln 2 / 2 · BW · ω0 / sin ω0).
    @inlinable
    public static func alpha(omega: Double, bandwidth: Double) -> Double {
        sin(omega) * sinh(M_LN2 / 2 * bandwidth * omega / sin(omega))
    }

    /// The cookbook section of `type` at `frequency` Hz, with `gain` dB (peak and shelves) and α from
    /// ``alpha(omega:q:)`` or ``alpha(omega:bandwidth:)`` at ω0 = 2π·frequency/sampleRate.
    public static func cookbook(_ type: BiquadType, frequency: Double, gain: Double, alpha: Double, sampleRate: Double)
        -> BiquadCoefficients
    {
        let w0 = 2 * Double.pi * frequency / sampleRate
        let cw = cos(w0)
        let A = pow(10, gain / 40)
        var b0 = 1.0, b1 = 0.0, b2 = 0.0, a0 = 1.0, a1 = 0.0, a2 = 0.0
        switch type {
        case .lowPass:
            b0 = (1 - cw) / 2; b1 = 1 - cw; b2 = b0
            a0 = 1 + alpha; a1 = -2 * cw; a2 = 1 - alpha
        case .highPass:
            b0 = (1 + cw) / 2; b1 = -(1 + cw); b2 = b0
            a0 = 1 + alpha; a1 = -2 * cw; a2 = 1 - alpha
        case .bandPass:
            b0 = alpha; b1 = 0; b2 = -alpha
            a0 = 1 + alpha; a1 = -2 * cw; a2 = 1 - alpha
        case .notch:
            b0 = 1; b1 = -2 * cw; b2 = 1
            a0 = 1 + alpha; a1 = -2 * cw; a2 = 1 - alpha
        case .allPass:
            b0 = 1 - alpha; b1 = -2 * cw; b2 = 1 + alpha
            a0 = 1 + alpha; a1 = -2 * cw; a2 = 1 - alpha
        case .peak:
            b0 = 1 + alpha * A; b1 = -2 * cw; b2 = 1 - alpha * A
            a0 = 1 + alpha / A; a1 = -2 * cw; a2 = 1 - alpha / A
        case .lowShelf:
            let s = 2 * A.squareRoot() * alpha
            b0 = A * ((A + 1) - (A - 1) * cw + s)
            b1 = 2 * A * ((A - 1) - (A + 1) * cw)
            b2 = A * ((A + 1) - (A - 1) * cw - s)
            a0 = (A + 1) + (A - 1) * cw + s
            a1 = -2 * ((A - 1) + (A + 1) * cw)
            a2 = (A + 1) + (A - 1) * cw - s
        case .highShelf:
            let s = 2 * A.squareRoot() * alpha
            b0 = A * ((A + 1) + (A - 1) * cw + s)
            b1 = -2 * A * ((A - 1) + (A + 1) * cw)
            b2 = A * ((A + 1) + (A - 1) * cw - s)
            a0 = (A + 1) - (A - 1) * cw + s
            a1 = 2 * ((A - 1) - (A + 1) * cw)
            a2 = (A + 1) - (A - 1) * cw - s
        }
        return BiquadCoefficients(b0: b0 / a0, b1: b1 / a0, b2: b2 / a0, a1: a1 / a0, a2: a2 / a0)
    }
}

/// The state of one biquad over a pair of channels (direct form I, both channels in the two lanes).
public struct BiquadPairState: Sendable {
    @usableFromInline var x1 = SIMD2<Double>(), x2 = SIMD2<Double>(), y1 = SIMD2<Double>(), y2 = SIMD2<Double>()
    /// A cleared state: both channels' past inputs and outputs zero (silence before).
    public init() {}
}

/// The biquad kernel. Direct form I in double precision: robust when coefficients change between blocks (the
/// state holds signal values only), and with two channels in the lanes of one SIMD2 the two recursions overlap, so
/// a stereo band costs about one multiply-add chain per channel-sample.
public enum BiquadKernel {
    /// Filters `frames` frames of a channel pair from `inL`/`inR` into `outL`/`outR` (which may alias the inputs;
    /// for one channel pass the same pointers twice). Render thread.
    @inlinable
    public static func process(
        _ k: BiquadCoefficients, _ state: inout BiquadPairState,
        inL: UnsafePointer<Float>, inR: UnsafePointer<Float>,
        outL: UnsafeMutablePointer<Float>, outR: UnsafeMutablePointer<Float>, frames: Int
    ) {
        let b0 = SIMD2(repeating: k.b0), b1 = SIMD2(repeating: k.b1), b2 = SIMD2(repeating: k.b2)
        let a1 = SIMD2(repeating: k.a1), a2 = SIMD2(repeating: k.a2)
        var x1 = state.x1, x2 = state.x2, y1 = state.y1, y2 = state.y2
        for i in 0..<frames {
            let x = SIMD2(Double(inL[i]), Double(inR[i]))
            // Everything but a1·y1 is known a sample early, so the recursion's chain is one multiply and one add.
            let t = b0 * x + b1 * x1 + b2 * x2 - a2 * y2
            let y = t - a1 * y1
            x2 = x1; x1 = x
            y2 = y1; y1 = y
            outL[i] = Float(y.x)
            outR[i] = Float(y.y)
        }
        state.x1 = x1; state.x2 = x2; state.y1 = y1; state.y2 = y2
    }

    /// Two or three sections in series in one pass: each section's recursion on sample n overlaps the one
    /// before it on sample n + 1, and the samples are loaded, converted and stored once for all of them.
    /// With `k3` nil, two sections.
    @inlinable
    public static func processSeries(
        _ k: BiquadCoefficients, _ state: inout BiquadPairState, _ k2: BiquadCoefficients, _ state2: inout BiquadPairState,
        _ k3: BiquadCoefficients?, _ state3: inout BiquadPairState,
        inL: UnsafePointer<Float>, inR: UnsafePointer<Float>,
        outL: UnsafeMutablePointer<Float>, outR: UnsafeMutablePointer<Float>, frames: Int
    ) {
        let b0 = SIMD2(repeating: k.b0), b1 = SIMD2(repeating: k.b1), b2 = SIMD2(repeating: k.b2)
        let a1 = SIMD2(repeating: k.a1), a2 = SIMD2(repeating: k.a2)
        let c0 = SIMD2(repeating: k2.b0), c1 = SIMD2(repeating: k2.b1), c2 = SIMD2(repeating: k2.b2)
        let d1 = SIMD2(repeating: k2.a1), d2 = SIMD2(repeating: k2.a2)
        // Each section's input history is the previous section's output history.
        var x1 = state.x1, x2 = state.x2, y1 = state.y1, y2 = state.y2
        var z1 = state2.y1, z2 = state2.y2
        if let k3 {
            let e0 = SIMD2(repeating: k3.b0), e1 = SIMD2(repeating: k3.b1), e2 = SIMD2(repeating: k3.b2)
            let f1 = SIMD2(repeating: k3.a1), f2 = SIMD2(repeating: k3.a2)
            var u1 = state3.y1, u2 = state3.y2
            for i in 0..<frames {
                let x = SIMD2(Double(inL[i]), Double(inR[i]))
                let y = b0 * x + b1 * x1 + b2 * x2 - a2 * y2 - a1 * y1
                let z = c0 * y + c1 * y1 + c2 * y2 - d2 * z2 - d1 * z1
                let u = e0 * z + e1 * z1 + e2 * z2 - f2 * u2 - f1 * u1
                x2 = x1; x1 = x
                y2 = y1; y1 = y
                z2 = z1; z1 = z
                u2 = u1; u1 = u
                outL[i] = Float(u.x)
                outR[i] = Float(u.y)
            }
            state3.x1 = z1; state3.x2 = z2; state3.y1 = u1; state3.y2 = u2
        } else {
            for i in 0..<frames {
                let x = SIMD2(Double(inL[i]), Double(inR[i]))
                let y = b0 * x + b1 * x1 + b2 * x2 - a2 * y2 - a1 * y1
                let z = c0 * y + c1 * y1 + c2 * y2 - d2 * z2 - d1 * z1
                x2 = x1; x1 = x
                y2 = y1; y1 = y
                z2 = z1; z1 = z
                outL[i] = Float(z.x)
                outR[i] = Float(z.y)
            }
        }
        state.x1 = x1; state.x2 = x2; state.y1 = y1; state.y2 = y2
        state2.x1 = y1; state2.x2 = y2; state2.y1 = z1; state2.y2 = z2
    }

    /// Like ``process(_:_:inL:inR:outL:outR:frames:)``, blending the filtered signal with the input:
    /// out = in + (filtered − in)·w, with w moving from `mix` by `mixStep` per frame (a band fading in or out).
    @inlinable
    public static func processBlended(
        _ k: BiquadCoefficients, _ state: inout BiquadPairState,
        inL: UnsafePointer<Float>, inR: UnsafePointer<Float>,
        outL: UnsafeMutablePointer<Float>, outR: UnsafeMutablePointer<Float>, frames: Int, mix: Float, mixStep: Float
    ) {
        let b0 = SIMD2(repeating: k.b0), b1 = SIMD2(repeating: k.b1), b2 = SIMD2(repeating: k.b2)
        let a1 = SIMD2(repeating: k.a1), a2 = SIMD2(repeating: k.a2)
        var x1 = state.x1, x2 = state.x2, y1 = state.y1, y2 = state.y2
        var w = mix
        for i in 0..<frames {
            let x = SIMD2(Double(inL[i]), Double(inR[i]))
            let y = b0 * x + b1 * x1 + b2 * x2 - a2 * y2 - a1 * y1
            x2 = x1; x1 = x
            y2 = y1; y1 = y
            w += mixStep
            let c = Double(min(max(w, 0), 1))
            let blended = x + (y - x) * c
            outL[i] = Float(blended.x)
            outR[i] = Float(blended.y)
        }
        state.x1 = x1; state.x2 = x2; state.y1 = y1; state.y2 = y2
    }
}
