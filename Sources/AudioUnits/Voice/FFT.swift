#if canImport(Glibc)
import Glibc
#endif

/// An in-place radix-2 complex FFT of a fixed power-of-two size, on split real and imaginary arrays of Double, for
/// the package's modules (the echo canceller's delay estimator, a phone's calibration). Tables are made at init;
/// ``forward(_:_:)`` and ``inverse(_:_:)`` neither allocate nor lock.
package final class FFT {
    package let size: Int
    private let cosines: UnsafeMutablePointer<Double>
    private let sines: UnsafeMutablePointer<Double>
    private let reversed: UnsafeMutablePointer<Int>

    package init(size: Int) {
        precondition(size >= 2 && size & (size - 1) == 0, "FFT size must be a power of two")
        self.size = size
        cosines = .allocate(capacity: size / 2)
        sines = .allocate(capacity: size / 2)
        for k in 0..<size / 2 {
            let angle = -2 * Double.pi * Double(k) / Double(size)
            (cosines + k).initialize(to: cos(angle))
            (sines + k).initialize(to: sin(angle))
        }
        reversed = .allocate(capacity: size)
        var bits = 0
        while 1 << bits < size { bits += 1 }
        for i in 0..<size {
            var r = 0
            for b in 0..<bits where i & (1 << b) != 0 { r |= 1 << (bits - 1 - b) }
            (reversed + i).initialize(to: r)
        }
    }

    deinit {
        cosines.deallocate()
        sines.deallocate()
        reversed.deallocate()
    }

    /// X[k] = Σ x[n] e^(−2πikn/N).
    package func forward(_ re: UnsafeMutablePointer<Double>, _ im: UnsafeMutablePointer<Double>) { transform(re, im, sign: 1) }

    /// x[n] = (1/N) Σ X[k] e^(2πikn/N).
    package func inverse(_ re: UnsafeMutablePointer<Double>, _ im: UnsafeMutablePointer<Double>) {
        transform(re, im, sign: -1)
        let scale = 1 / Double(size)
        for i in 0..<size {
            re[i] *= scale
            im[i] *= scale
        }
    }

    /// After ``forward(_:_:)`` of a + i·b (two real signals, `a` in `re`, `b` in `im`): A[k]·conj(B[k]), their
    /// cross-spectrum at bin k, from A[k] = (Z[k] + conj Z[N−k]) / 2 and B[k] = (Z[k] − conj Z[N−k]) / 2i.
    package func crossSpectrum(_ re: UnsafeMutablePointer<Double>, _ im: UnsafeMutablePointer<Double>, at k: Int) -> (re: Double, im: Double) {
        let nk = k == 0 ? 0 : size - k
        let ar = 0.5 * (re[k] + re[nk])
        let ai = 0.5 * (im[k] - im[nk])
        let br = 0.5 * (im[k] + im[nk])
        let bi = -0.5 * (re[k] - re[nk])
        return (ar * br + ai * bi, ai * br - ar * bi)
    }

    private func transform(_ re: UnsafeMutablePointer<Double>, _ im: UnsafeMutablePointer<Double>, sign: Double) {
        for i in 0..<size {
            let j = reversed[i]
            if j > i {
                swap(&re[i], &re[j])
                swap(&im[i], &im[j])
            }
        }
        var half = 1
        while half < size {
            let stride = size / (2 * half)
            var start = 0
            while start < size {
                for k in 0..<half {
                    let wr = cosines[k * stride]
                    let wi = sign * sines[k * stride]
                    let a = start + k
                    let b = a + half
                    let tr = re[b] * wr - im[b] * wi
                    let ti = re[b] * wi + im[b] * wr
                    re[b] = re[a] - tr
                    im[b] = im[a] - ti
                    re[a] += tr
                    im[a] += ti
                }
                start += 2 * half
            }
            half *= 2
        }
    }
}
