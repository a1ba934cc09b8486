#if canImport(Glibc)
import Glibc
#endif

/// A non-owning view of Float32 non-interleaved audio: `channelCount` channels of `frameCount` frames each,
/// channel `c` starting at `base + c * channelStride`.
///
/// A `channelStride` of 0 makes every channel alias the first: that is how a mono output feeds a stereo input
/// without a copy. Views are plain values: creating, slicing and passing them never allocates, so they are what
/// the render thread passes around. The storage they point at must outlive them.
public struct BufferView {
    /// The first sample of channel 0.
    public let base: UnsafeMutablePointer<Float>
    /// Distance in samples between the starts of two channels; 0 when every channel aliases the first.
    public let channelStride: Int
    /// Number of channels the view presents.
    public let channelCount: Int
    /// Frames in each channel.
    public let frameCount: Int

    /// Creates a view of storage the caller keeps alive for as long as the view is used. Never allocates.
    /// - Parameters:
    ///   - base: the first sample of channel 0.
    ///   - channelStride: samples from the start of one channel to the start of the next; 0 makes every channel
    ///     alias the first.
    ///   - channelCount: the number of channels.
    ///   - frameCount: the number of frames in each channel.
    @inlinable
    public init(base: UnsafeMutablePointer<Float>, channelStride: Int, channelCount: Int, frameCount: Int) {
        self.base = base
        self.channelStride = channelStride
        self.channelCount = channelCount
        self.frameCount = frameCount
    }

    /// The samples of one channel.
    @inlinable
    public subscript(channel: Int) -> UnsafeMutableBufferPointer<Float> {
        UnsafeMutableBufferPointer(start: base + channel * channelStride, count: frameCount)
    }

    /// The first `frames` frames of this view.
    @inlinable
    public func prefix(_ frames: Int) -> BufferView {
        BufferView(base: base, channelStride: channelStride, channelCount: channelCount, frameCount: min(frames, frameCount))
    }

    /// Frames `offset ..< offset + frames` of this view.
    @inlinable
    public func slice(from offset: Int, frames: Int) -> BufferView {
        BufferView(base: base + offset, channelStride: channelStride, channelCount: channelCount, frameCount: frames)
    }

    /// This view seen with `channels` channels: a mono view is repeated into every channel (stride 0); otherwise
    /// the channel count must already match.
    @inlinable
    public func upmixed(to channels: Int) -> BufferView {
        if channels == channelCount { return self }
        precondition(channelCount == 1, "only mono views can be upmixed")
        return BufferView(base: base, channelStride: 0, channelCount: channels, frameCount: frameCount)
    }

    /// Writes zeros into every channel.
    @inlinable
    public func clear() {
        for c in 0..<channelCount { self[c].update(repeating: 0) }
    }

    /// Copies `source` into this view; the frame counts must match, and `source` must have this view's channel count
    /// or be mono (then it is copied into every channel).
    @inlinable
    public func copy(from source: BufferView) {
        precondition(source.frameCount >= frameCount)
        for c in 0..<channelCount {
            let from = source[source.channelCount == 1 ? 0 : c]
            let to = self[c]
            if from.baseAddress != to.baseAddress {
                to.baseAddress!.update(from: from.baseAddress!, count: frameCount)
            }
        }
    }

    /// Copies `source` into this view times a gain that follows `ramp` sample by sample, the same gain on every
    /// channel: the library's one gain ramp (a session's volume, the echo reference's gain, the route gate's fade).
    /// A steady gain of 1 copies, of 0 clears. `source` may be this view, or mono (then it feeds every channel).
    /// Never allocates.
    @inlinable
    public func copy(from source: BufferView, gain ramp: inout SmoothedValue) {
        precondition(source.frameCount >= frameCount)
        if !ramp.isRamping {
            let g = ramp.value
            if g == 1 { return copy(from: source) }
            if g == 0 { return clear() }
            for c in 0..<channelCount {
                let x = source[source.channelCount == 1 ? 0 : c].baseAddress!
                let y = self[c].baseAddress!
                for i in 0..<frameCount { y[i] = x[i] * g }
            }
            return
        }
        let start = ramp
        for c in 0..<channelCount {
            var r = start
            let x = source[source.channelCount == 1 ? 0 : c].baseAddress!
            let y = self[c].baseAddress!
            for i in 0..<frameCount { y[i] = x[i] * r.next() }
            ramp = r
        }
        if channelCount == 0 { for _ in 0..<frameCount { _ = ramp.next() } }
    }
}

/// An owning Float32 non-interleaved buffer with preallocated storage, the graph's buffer type.
///
/// Storage for `channelCount × capacity` samples is allocated once, 64-byte aligned, each channel padded to a
/// multiple of 16 samples. Use ``view(frames:)`` to hand the storage to code that must not allocate.
///
/// Thread safety: a buffer has no internal synchronization; give it to one thread at a time.
public final class PCMBuffer: @unchecked Sendable {
    // Unchecked Sendable: raw storage, no lock: given to one thread at a time (a node's render, a ring's side); `frameLength` the holder's
    /// Number of channels, at least 1.
    public let channelCount: Int
    /// The most frames the buffer can hold.
    public let capacity: Int
    /// Frames currently valid, for callers that track it; views take the count they need explicitly.
    public var frameLength: Int
    /// Distance in samples between the starts of two channels.
    public let channelStride: Int
    /// The first sample of channel 0: ``capacity`` frames per channel, channels ``channelStride`` samples apart,
    /// 64-byte aligned, zeroed when allocated and freed with the buffer.
    public let storage: UnsafeMutablePointer<Float>

    /// Allocates zeroed storage for `channelCount` channels of `capacity` frames; ``frameLength`` starts at 0.
    ///
    /// This allocates: make buffers off the render thread, before rendering starts.
    /// - Parameters:
    ///   - channelCount: the number of channels, at least 1.
    ///   - capacity: the most frames the buffer can hold, 0 or more.
    public init(channelCount: Int, capacity: Int) {
        precondition(channelCount > 0 && capacity >= 0)
        self.channelCount = channelCount
        self.capacity = capacity
        self.frameLength = 0
        self.channelStride = (max(capacity, 1) + 15) & ~15
        let bytes = channelStride * channelCount * MemoryLayout<Float>.stride
        // A large buffer (a ring of seconds, a recorder's) gets pages of its own, zeroed by the kernel and given back
        // whole when it is freed: through the allocator they would stay with the process after it (its arenas keep
        // what they had), and a room that makes and frees a take's rings song after song would grow by them. The
        // pages are faulted in here (MAP_POPULATE), as writing the zeros did: a render thread must not take a page
        // fault the first time it writes into one.
        if bytes >= Self.mappedBytes, let pages = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0),
            pages != MAP_FAILED
        {
            mappedByteCount = bytes
            storage = pages.bindMemory(to: Float.self, capacity: channelStride * channelCount)
        } else {
            mappedByteCount = 0
            let raw = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 64)
            storage = raw.bindMemory(to: Float.self, capacity: channelStride * channelCount)
            storage.initialize(repeating: 0, count: channelStride * channelCount)
        }
    }

    /// Buffers of this many bytes or more are mapped pages of their own (256 KiB).
    static let mappedBytes = 256 << 10
    /// The bytes mapped for the storage; 0 when it came from the allocator.
    private let mappedByteCount: Int

    deinit {
        if mappedByteCount > 0 {
            munmap(storage, mappedByteCount)
        } else {
            UnsafeMutableRawPointer(storage).deallocate()
        }
    }

    /// A view of the first `frames` frames (at most ``capacity``).
    @inlinable
    public func view(frames: Int) -> BufferView {
        precondition(frames <= capacity, "view of \(frames) frames exceeds capacity \(capacity)")
        return BufferView(base: storage, channelStride: channelStride, channelCount: channelCount, frameCount: frames)
    }

    /// A view of the first ``frameLength`` frames.
    public var view: BufferView { view(frames: frameLength) }

    /// One channel's first ``frameLength`` samples as an array (for tests and tools; allocates).
    public func channelArray(_ channel: Int) -> [Float] { Array(view[channel]) }

    /// Creates a buffer holding the given channels (all the same length).
    public convenience init(channels: [[Float]]) {
        let frames = channels.first?.count ?? 0
        precondition(channels.allSatisfy { $0.count == frames }, "channels must have equal lengths")
        self.init(channelCount: max(channels.count, 1), capacity: frames)
        frameLength = frames
        for (c, samples) in channels.enumerated() {
            samples.withUnsafeBufferPointer { (storage + c * channelStride).update(from: $0.baseAddress!, count: frames) }
        }
    }
}

/// A non-owning view of audio in any ``StreamFormat``: one byte plane when interleaved, one per channel otherwise,
/// planes `planeStride` bytes apart.
public struct RawBufferView {
    /// The layout of the bytes: sample rate, channel count, sample type and interleaving.
    public let format: StreamFormat
    /// The first byte of plane 0.
    public let base: UnsafeMutableRawPointer
    /// Distance in bytes between the starts of two planes (an interleaved view has just one plane).
    public let planeStride: Int
    /// Frames in each plane.
    public let frameCount: Int

    /// Creates a view of bytes the caller keeps alive for as long as the view is used. Never allocates.
    /// - Parameters:
    ///   - format: the layout of the bytes.
    ///   - base: the first byte of plane 0.
    ///   - planeStride: bytes from the start of one plane to the start of the next.
    ///   - frameCount: the number of frames in each plane.
    public init(format: StreamFormat, base: UnsafeMutableRawPointer, planeStride: Int, frameCount: Int) {
        self.format = format
        self.base = base
        self.planeStride = planeStride
        self.frameCount = frameCount
    }

    /// Start of plane `index` (0 ..< format.bufferCount).
    @inlinable
    public func plane(_ index: Int) -> UnsafeMutableRawPointer { base + index * planeStride }

    /// Bytes valid in each plane.
    public var byteCountPerPlane: Int { frameCount * format.bytesPerFrame }
}

/// An owning buffer in any ``StreamFormat`` (Int16 interleaved from a device, 24-bit from a file, …).
public final class RawPCMBuffer: @unchecked Sendable {
    // Unchecked Sendable: immutable header over raw storage; the bytes are given to one thread at a time
    /// The layout of the buffer's bytes.
    public let format: StreamFormat
    /// The most frames the buffer can hold.
    public let capacity: Int
    /// Distance in bytes between the starts of two planes: ``capacity`` frames' bytes, rounded up to a multiple
    /// of 64.
    public let planeStride: Int
    /// The first byte of plane 0: ``StreamFormat/bufferCount`` planes ``planeStride`` bytes apart, 64-byte
    /// aligned, zeroed when allocated and freed with the buffer.
    public let storage: UnsafeMutableRawPointer

    /// Allocates zeroed storage for `capacity` frames in `format`: one plane when interleaved, one per channel
    /// otherwise.
    ///
    /// This allocates: make buffers off the render thread, before rendering starts.
    /// - Parameters:
    ///   - format: the layout of the buffer's bytes.
    ///   - capacity: the most frames the buffer can hold.
    public init(format: StreamFormat, capacity: Int) {
        self.format = format
        self.capacity = capacity
        self.planeStride = (max(capacity, 1) * format.bytesPerFrame + 63) & ~63
        storage = UnsafeMutableRawPointer.allocate(byteCount: planeStride * format.bufferCount, alignment: 64)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: planeStride * format.bufferCount)
    }

    deinit { storage.deallocate() }

    /// A view of the first `frames` frames (at most ``capacity``). Never allocates.
    @inlinable
    public func view(frames: Int) -> RawBufferView {
        precondition(frames <= capacity, "view of \(frames) frames exceeds capacity \(capacity)")
        return RawBufferView(format: format, base: storage, planeStride: planeStride, frameCount: frames)
    }
}
