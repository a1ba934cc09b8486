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
