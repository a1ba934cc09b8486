/// Logarithms and exponentials cheap enough to run per sample in dynamics kernels.
///
/// `log2` splits a float into exponent and mantissa and fits log2 on the mantissa [1, 2) as m·q(m) with a
/// degree-6 q (largest error 3e-6, i.e. 2e-5 dB in `decibels`); `exp2` splits nearest integer and fraction and
/// fits 2^f on [−0.5, 0.5] with a degree-5 polynomial (relative error below 3e-7, i.e. 3e-6 dB).
/// Both are branch-free apart from the clamps.
public enum FastMath {
    /// log2(x) for x > 0; x ≤ 0 or below the smallest normal float gives about −126.
    @inlinable @inline(__always)
    public static func log2(_ x: Float) -> Float {
        let bits = max(x, .leastNormalMagnitude).bitPattern
        let exponent = Float(Int32(bitPattern: (bits >> 23) & 0xff) &- 127)
        let m = Float(bitPattern: (bits & 0x007f_ffff) | 0x3f80_0000) - 1  // mantissa - 1 in [0, 1)
        // Least-squares fit of log2(1 + m) / m on (0, 1], Horner form; log2(1 + m) = m · q(m) is exact at m = 0.
        var q: Float = 0.02023624
        q = q * m - 0.09488528
        q = q * m + 0.213671449
        q = q * m - 0.337840154
        q = q * m + 0.477225688
        q = q * m - 0.721095674
        q = q * m + 1.44269079
        let p = m * q
        return exponent + p
    }

    /// 2^x, clamped to [2^-126, 2^126].
    @inlinable @inline(__always)
    public static func exp2(_ x: Float) -> Float {
        let c = min(max(x, -126), 126)
        // Round to the nearest integer by the 1.5·2^23 trick: no libm call, no trapping conversion, so loops over
        // arrays vectorize on any x86-64.
        let shifted = c + 12_582_912
        let i = shifted - 12_582_912  // round(c)
        let f = c - i  // [-0.5, 0.5]
        // Fit of 2^f on [-0.5, 0.5], Horner form.
        var p: Float = 0.00133952854
        p = p * f + 0.00967076788
        p = p * f + 0.0555034067
        p = p * f + 0.240222117
        p = p * f + 0.6931472
        p = p * f + 1.00000005
        let exponent = (shifted.bitPattern &- 0x4B40_0000 &+ 127) << 23
        return p * Float(bitPattern: exponent)
    }

    /// 20·log10(x): decibels of a linear amplitude.
    @inlinable @inline(__always)
    public static func decibels(_ x: Float) -> Float { log2(x) * 6.0205999 }

    /// 10^(dB/20): the linear amplitude of a level in decibels.
    @inlinable @inline(__always)
    public static func amplitude(decibels dB: Float) -> Float { exp2(dB * 0.16609640) }
}
