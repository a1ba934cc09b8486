/// Converts between a client ``StreamFormat`` (any sample type, interleaved or not) and the graph's Float32
/// non-interleaved layout, at the same sample rate and channel count.
///
/// Integer to float divides by full scale (2¹⁵, 2²³, 2³¹), so an Int16 → Float → Int16 round trip is exact.
/// Float to integer rounds to nearest and clips to the type's range: +1.0 becomes 32767, never wraps to −32768;
/// NaN becomes 0. Multi-byte samples are little-endian, as in WAV files and on every platform LiveAudio targets.
///
/// Conversion never allocates; create the converter off the render thread, then call it from anywhere.
public struct FormatConverter: Sendable {
    /// The client side's format: any sample type, interleaved or not.
    public let client: StreamFormat
    /// The graph side's format: Float32 non-interleaved (or mono Float32), at ``client``'s rate and channel count.
    public let graph: StreamFormat

    /// Creates a converter between a client format and the graph's layout.
    /// - Throws: ``AudioError`` `.formatMismatch` when the rates or channel counts differ, or `graph` is not
    ///   Float32 non-interleaved.
    public init(client: StreamFormat, graph: StreamFormat) throws(AudioError) {
        guard graph.isGraphLayout else {
            throw AudioError(.formatMismatch, "graph side must be Float32 non-interleaved, got \(graph)")
        }
        guard client.sampleRate == graph.sampleRate else {
            throw AudioError(
                .formatMismatch,
                "sample rates differ: client \(client) vs graph \(graph) (resampling is not done by this converter)")
        }
        guard client.channelCount == graph.channelCount else {
            throw AudioError(.formatMismatch, "channel counts differ: client \(client) vs graph \(graph)")
        }
        self.client = client
        self.graph = graph
    }

    /// Client bytes → graph floats, `min(source.frameCount, destination.frameCount)` frames.
    public func decode(_ source: RawBufferView, into destination: BufferView) {
        PCMConversion.decode(source, into: destination)
    }

    /// Graph floats → client bytes, `min(source.frameCount, destination.frameCount)` frames.
    public func encode(_ source: BufferView, into destination: RawBufferView) {
        PCMConversion.encode(source, into: destination)
    }
}

/// The conversion kernels behind ``FormatConverter``, usable directly when the formats are already known to match.
public enum PCMConversion {
    static let int16Scale: Float = 32768
    static let int24Scale: Float = 8_388_608
    static let int32Scale: Double = 2_147_483_648

    /// Where channel `c`'s samples start in `view`, and the distance in bytes between two of its samples.
    @inline(__always)
    static func layout(_ view: RawBufferView, channel c: Int) -> (UnsafeMutableRawPointer, Int) {
        let f = view.format
        let bps = f.sampleType.bytesPerSample
        return f.isInterleaved ? (view.base + c * bps, bps * f.channelCount) : (view.plane(c), bps)
    }

    /// Converts client bytes to graph floats: `min(source.frameCount, destination.frameCount)` frames of the
    /// channels both views have. Destination channels beyond the source's are left as they are (a mono source is
    /// not repeated into them).
    ///
    /// Integer samples are divided by full scale (2¹⁵, 2²³, 2³¹). Never allocates; call it from any thread.
    /// - Parameters:
    ///   - source: the client-format audio to read.
    ///   - destination: the Float32 non-interleaved audio to write.
    public static func decode(_ source: RawBufferView, into destination: BufferView) {
        let frames = min(source.frameCount, destination.frameCount)
        let channels = min(source.format.channelCount, destination.channelCount)
        if source.format.sampleType == .float32, source.format.isInterleaved, source.format.channelCount == 2,
            channels == 2
        {
            deinterleaveStereo(source.base, destination[0].baseAddress!, destination[1].baseAddress!, frames)
            return
        }
        for c in 0..<channels {
            let (src, step) = layout(source, channel: c)
            let out = destination[c].baseAddress!
            switch source.format.sampleType {
            case .int16:
                for i in 0..<frames {
                    out[i] = Float(src.loadUnaligned(fromByteOffset: i * step, as: Int16.self)) / int16Scale
                }
            case .int24:
                for i in 0..<frames {
                    let p = src + i * step
                    let b0 = Int32(p.load(fromByteOffset: 0, as: UInt8.self))
                    let b1 = Int32(p.load(fromByteOffset: 1, as: UInt8.self))
                    let b2 = Int32(Int8(bitPattern: p.load(fromByteOffset: 2, as: UInt8.self)))
                    out[i] = Float(b2 << 16 | b1 << 8 | b0) / int24Scale
                }
            case .int32:
                for i in 0..<frames {
                    out[i] = Float(Double(src.loadUnaligned(fromByteOffset: i * step, as: Int32.self)) / int32Scale)
                }
            case .float32:
                for i in 0..<frames {
                    out[i] = src.loadUnaligned(fromByteOffset: i * step, as: Float.self)
                }
            }
        }
    }

    /// Converts graph floats to client bytes: `min(source.frameCount, destination.frameCount)` frames of the
    /// channels both views have. Destination channels beyond the source's are left as they are.
    ///
    /// Integer samples are rounded to nearest and clipped to the type's range; NaN becomes 0. Never allocates;
    /// call it from any thread.
    /// - Parameters:
    ///   - source: the Float32 non-interleaved audio to read.
    ///   - destination: the client-format audio to write.
    public static func encode(_ source: BufferView, into destination: RawBufferView) {
        let frames = min(source.frameCount, destination.frameCount)
        let channels = min(source.channelCount, destination.format.channelCount)
        if destination.format.sampleType == .float32, destination.format.isInterleaved,
            destination.format.channelCount == 2, channels == 2
        {
            interleaveStereo(source[0].baseAddress!, source[1].baseAddress!, destination.base, frames)
            return
        }
        for c in 0..<channels {
            let (dst, step) = layout(destination, channel: c)
            let input = source[c].baseAddress!
            switch destination.format.sampleType {
            case .int16:
                for i in 0..<frames {
                    dst.storeBytes(of: Int16(clipped(input[i], scale: int16Scale, max: 32767)), toByteOffset: i * step, as: Int16.self)
                }
            case .int24:
                for i in 0..<frames {
                    let v = Int32(clipped(input[i], scale: int24Scale, max: 8_388_607))
                    let p = dst + i * step
                    p.storeBytes(of: UInt8(truncatingIfNeeded: v), toByteOffset: 0, as: UInt8.self)
                    p.storeBytes(of: UInt8(truncatingIfNeeded: v >> 8), toByteOffset: 1, as: UInt8.self)
                    p.storeBytes(of: UInt8(truncatingIfNeeded: v >> 16), toByteOffset: 2, as: UInt8.self)
                }
            case .int32:
                for i in 0..<frames {
                    let x = Double(input[i])
                    let v: Int32 =
                        x.isNaN ? 0 : x >= 1 ? .max : x <= -1 ? .min : Int32((x * int32Scale).rounded())
                    dst.storeBytes(of: v, toByteOffset: i * step, as: Int32.self)
                }
            case .float32:
                for i in 0..<frames {
                    dst.storeBytes(of: input[i], toByteOffset: i * step, as: Float.self)
                }
            }
        }
    }

    /// Interleaved stereo floats → two planes, four frames per step (the common file layout, done in vectors).
    @inline(__always)
    static func deinterleaveStereo(
        _ source: UnsafeRawPointer, _ left: UnsafeMutablePointer<Float>, _ right: UnsafeMutablePointer<Float>,
        _ frames: Int
    ) {
        var i = 0
        while i + 4 <= frames {
            let v = source.loadUnaligned(fromByteOffset: i * 8, as: SIMD8<Float>.self)
            UnsafeMutableRawPointer(left + i).storeBytes(of: v.evenHalf, as: SIMD4<Float>.self)
            UnsafeMutableRawPointer(right + i).storeBytes(of: v.oddHalf, as: SIMD4<Float>.self)
            i += 4
        }
        while i < frames {
            left[i] = source.loadUnaligned(fromByteOffset: i * 8, as: Float.self)
            right[i] = source.loadUnaligned(fromByteOffset: i * 8 + 4, as: Float.self)
            i += 1
        }
    }

    /// Two planes → interleaved stereo floats, four frames per step.
    @inline(__always)
    static func interleaveStereo(
        _ left: UnsafePointer<Float>, _ right: UnsafePointer<Float>, _ destination: UnsafeMutableRawPointer,
        _ frames: Int
    ) {
        var i = 0
        while i + 4 <= frames {
            let l = UnsafeRawPointer(left + i).loadUnaligned(as: SIMD4<Float>.self)
            let r = UnsafeRawPointer(right + i).loadUnaligned(as: SIMD4<Float>.self)
            let v = SIMD8<Float>(l[0], r[0], l[1], r[1], l[2], r[2], l[3], r[3])
            destination.storeBytes(of: v, toByteOffset: i * 8, as: SIMD8<Float>.self)
            i += 4
        }
        while i < frames {
            destination.storeBytes(of: left[i], toByteOffset: i * 8, as: Float.self)
            destination.storeBytes(of: right[i], toByteOffset: i * 8 + 4, as: Float.self)
            i += 1
        }
    }

    /// `x · scale`, rounded to nearest and clipped to `-scale … max`; NaN gives 0.
    @inline(__always)
    static func clipped(_ x: Float, scale: Float, max: Float) -> Int32 {
        guard !x.isNaN else { return 0 }
        let v = (x * scale).rounded()
        return Int32(v >= max ? max : v <= -scale ? -scale : v)
    }
}
