/// Vectorized loops for render kernels: eight lanes at a time with independent accumulators, then a scalar tail.
/// They never allocate. Results of element-wise operations are identical to the scalar loops; peaks and sums are
/// accumulated in another order (fine for metering).
public enum VectorOps {
    /// The vector the loops work in: eight Float32 lanes.
    public typealias Lanes = SIMD8<Float>

    /// The library's one linear crossfade, a sample at a time: `from` fading out under `to` fading in, `to` weighted
    /// by `weight` (0: `from` alone, 1: `to` alone — both exact). A unit's bypass switch, a render-ahead source's
    /// flush and a limiter's change of lookahead fade with it.
    @inlinable @inline(__always)
    public static func crossfade(from: Float, to: Float, weight: Float) -> Float {
        weight >= 1 ? to : from + (to - from) * weight
    }

    /// Lane-wise `max(accumulator, |v|)`, written with selects that compile to vector blends.
    @inlinable @inline(__always)
    static func maxMagnitude(_ accumulator: Lanes, _ v: Lanes) -> Lanes {
        let magnitude = v.replacing(with: -v, where: v .< 0)
        return accumulator.replacing(with: magnitude, where: magnitude .> accumulator)
    }

    /// `y[i] += x[i] · g` for `count` samples; returns the peak and the sum of squares of the added `x[i] · g`.
    @inlinable
    public static func multiplyAdd(
        _ x: UnsafePointer<Float>, gain g: Float, into y: UnsafeMutablePointer<Float>, count: Int
    ) -> (peak: Float, sumOfSquares: Float) {
        var peak = Lanes(repeating: 0)
        var squares = Lanes(repeating: 0)
        let gv = Lanes(repeating: g)
        var i = 0
        while i + 8 <= count {
            let v = UnsafeRawPointer(x + i).loadUnaligned(as: Lanes.self) * gv
            let sum = UnsafeRawPointer(y + i).loadUnaligned(as: Lanes.self) + v
            UnsafeMutableRawPointer(y + i).storeBytes(of: sum, as: Lanes.self)
            peak = maxMagnitude(peak, v)
            squares += v * v
            i += 8
        }
        var p = peak.max()
        var s = squares.sum()
        while i < count {
            let v = x[i] * g
            y[i] += v
            p = max(p, abs(v))
            s += v * v
            i += 1
        }
        return (p, s)
    }

    /// `y[i] *= g` in place; returns the peak and the sum of squares of the result.
    @inlinable
    public static func scale(_ y: UnsafeMutablePointer<Float>, by g: Float, count: Int) -> (peak: Float, sumOfSquares: Float) {
        var peak = Lanes(repeating: 0)
        var squares = Lanes(repeating: 0)
        let gv = Lanes(repeating: g)
        var i = 0
        while i + 8 <= count {
            let v = UnsafeRawPointer(y + i).loadUnaligned(as: Lanes.self) * gv
            UnsafeMutableRawPointer(y + i).storeBytes(of: v, as: Lanes.self)
            peak = maxMagnitude(peak, v)
            squares += v * v
            i += 8
        }
        var p = peak.max()
        var s = squares.sum()
        while i < count {
            let v = y[i] * g
            y[i] = v
            p = max(p, abs(v))
            s += v * v
            i += 1
        }
        return (p, s)
    }

    /// The largest absolute value among `count` samples.
    @inlinable
    public static func peak(_ x: UnsafePointer<Float>, count: Int) -> Float {
        var peak = Lanes(repeating: 0)
        var i = 0
        while i + 8 <= count {
            let v = UnsafeRawPointer(x + i).loadUnaligned(as: Lanes.self)
            peak = maxMagnitude(peak, v)
            i += 8
        }
        var p = peak.max()
        while i < count {
            p = max(p, abs(x[i]))
            i += 1
        }
        return p
    }
}
