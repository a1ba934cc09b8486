import Foundation
import AudioCore
import Testing

@Suite struct VectorOpsTests {
    /// Every length from 0 to 40 exercises the 8-lane body and each tail length; references are the scalar loops.
    @Test func matchScalarLoops() {
        for count in 0...40 {
            let x = (0..<count).map { Float(($0 * 37) % 23) / 11 - 1 }
            let y0 = (0..<count).map { Float($0) / 40 }
            var y = y0
            let (peak, squares) = y.withUnsafeMutableBufferPointer { yb in
                x.withUnsafeBufferPointer { VectorOps.multiplyAdd($0.baseAddress!, gain: -0.5, into: yb.baseAddress!, count: count) }
            }
            let added = x.map { $0 * -0.5 }
            #expect(y == zip(y0, added).map { $0 + $1 }, "element-wise results are exact")
            #expect(peak == (added.map(abs).max() ?? 0))
            #expect(abs(squares - added.reduce(0) { $0 + $1 * $1 }) < 1e-5)

            var z = x
            let (p2, s2) = z.withUnsafeMutableBufferPointer { VectorOps.scale($0.baseAddress!, by: 2, count: count) }
            #expect(z == x.map { $0 * 2 })
            #expect(p2 == (z.map(abs).max() ?? 0))
            #expect(abs(s2 - z.reduce(0) { $0 + $1 * $1 }) < 1e-4)
            #expect(x.withUnsafeBufferPointer { VectorOps.peak($0.baseAddress!, count: count) } == (x.map(abs).max() ?? 0))
        }
    }
}

@Suite struct FastMathTests {
    /// Against libm over the ranges dynamics use: log2 within 6e-6 absolute (4e-5 dB: the fit's 3e-6 plus Float rounding), exp2 within 4e-7 relative.
    @Test func matchesLibm() {
        var worstLog = 0.0, worstExp = 0.0
        for i in 0..<200_000 {
            let x = Float(pow(10, -7 + 8 * Double(i) / 200_000))  // 1e-7 … 10
            worstLog = max(worstLog, abs(Double(FastMath.log2(x)) - Foundation.log2(Double(x))))
            let e = Float(-40 + 48 * Double(i) / 200_000)
            let exact = Foundation.exp2(Double(e))
            worstExp = max(worstExp, abs(Double(FastMath.exp2(e)) - exact) / exact)
        }
        #expect(worstLog < 6e-6, "log2 error \(worstLog)")
        #expect(worstExp < 4e-7, "exp2 relative error \(worstExp)")
        #expect(FastMath.log2(1) == 0)
        #expect(FastMath.exp2(0) == 1.0000001 || FastMath.exp2(0) == 1)
        #expect(FastMath.exp2(-1000) > 0 && FastMath.exp2(-1000) < 1e-37, "clamped, never 0 or denormal")
        #expect(abs(FastMath.decibels(0.5) + 6.0206) < 1e-4)
        #expect(abs(FastMath.amplitude(decibels: -20) - 0.1) < 1e-7)
    }

    /// The one crossfade: exact at both ends (a bypassed unit passes its input bit for bit), linear between — the
    /// constant-gain fade whose two weights sum to 1, so a fade between equal signals leaves them as they are.
    @Test func crossfadeIsLinearAndExactAtItsEnds() {
        for (a, b) in [(Float(0.3), Float(-0.7)), (1e-20, 1), (-1, 1), (0.123456789, 0.987654321)] {
            #expect(VectorOps.crossfade(from: a, to: b, weight: 0) == a)
            #expect(VectorOps.crossfade(from: a, to: b, weight: 1) == b)
            #expect(VectorOps.crossfade(from: a, to: b, weight: 1.5) == b, "a weight past the end holds the end")
            for k in 1..<10 {
                let w = Float(k) / 10
                let expected = Double(a) * (1 - Double(w)) + Double(b) * Double(w)
                #expect(abs(Double(VectorOps.crossfade(from: a, to: b, weight: w)) - expected) < 1e-6)
            }
            #expect(VectorOps.crossfade(from: a, to: a, weight: 0.37) == a)
        }
    }
}
