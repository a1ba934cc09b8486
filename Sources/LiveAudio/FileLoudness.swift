import AudioCodecs
import AudioCore
import AudioUnits
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The loudness of a whole file (ITU-R BS.1770-4, EBU R128): what `liveaudio loudness` prints, what
/// `--normalize` aims from.
public struct FileLoudness: Hashable, Sendable {
    /// The file measured, as given to ``measure(path:stopped:progress:)``.
    public let path: String
    /// Integrated loudness, loudness range, true peak and sample peak of the whole file (the momentary and
    /// short-term values are those of its end).
    public let reading: LoudnessReading
    /// The file's sample rate, Hz (measured at that rate, not resampled).
    public let sampleRate: Double
    /// The file's channel count, 1 … 8.
    public let channelCount: Int
    /// How the channels were weighted (more than stereo: the standard layout for the count is assumed).
    public let channelWeights: LoudnessChannelWeights

    /// True when no 400 ms block reached −70 LUFS: the file has no integrated loudness (−inf).
    public var isSilent: Bool { reading.integrated == -.infinity }

    /// Decodes `path` (anything ``/AudioCodecs/AudioFile/open(path:sampleRate:channelCount:)`` reads) and measures
    /// it.
    ///
    /// Blocks until the whole file is read; call it off the render thread (any thread; nothing is shared).
    /// - Parameters:
    ///   - path: the audio file to decode and measure.
    ///   - stopped: asked between chunks; true ends the measurement early with `.invalidState`.
    ///   - progress: seconds measured so far, after each chunk.
    /// - Returns: the file's loudness.
    /// - Throws: ``/AudioCore/AudioError``: the decoder's (`.fileIO`, `.unsupportedFile`, `.corruptFile`),
    ///   `.invalidFormat` for more than 8 channels, `.unsupportedSampleRate` for a rate outside 8 … 384 kHz,
    ///   `.invalidState` when stopped.
    public static func measure(
        path: String, stopped: () -> Bool = { false }, progress: (Double) -> Void = { _ in }
    ) throws(AudioError) -> FileLoudness {
        try measure(AudioFile.open(path: path), path: path, stopped: stopped, progress: progress)
    }

    /// Measures what `reader` delivers from where it is to its end (`path` names it in the result and errors).
    /// - Throws: as ``measure(path:stopped:progress:)``, the reader's errors.
    public static func measure(
        _ reader: any AudioFileReader, path: String, stopped: () -> Bool = { false }, progress: (Double) -> Void = { _ in }
    ) throws(AudioError) -> FileLoudness {
        guard (1...8).contains(reader.channelCount) else {
            throw AudioError(
                .invalidFormat, "'\(path)' has \(reader.channelCount) channels; loudness is measured on 1 … 8 channels")
        }
        guard reader.sampleRate >= 8000, reader.sampleRate <= 384_000 else {
            throw AudioError(.unsupportedSampleRate, "'\(path)' is at \(formatHz(reader.sampleRate)); loudness is measured at 8 … 384 kHz")
        }
        var kernel = LoudnessKernel(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        let chunk = PCMBuffer(channelCount: reader.channelCount, capacity: 8192)
        var frames: Int64 = 0
        while true {
            if stopped() { throw AudioError(.invalidState, "measuring the loudness of '\(path)' was stopped") }
            let got = try reader.read(into: chunk.view(frames: chunk.capacity))
            if got == 0 { break }
            kernel.process(chunk.view(frames: got))
            frames += Int64(got)
            progress(Double(frames) / reader.sampleRate)
        }
        return FileLoudness(
            path: path, reading: kernel.reading, sampleRate: reader.sampleRate, channelCount: reader.channelCount,
            channelWeights: kernel.channelWeights)
    }
}

/// Loudness measurements kept between runs, keyed by a file's path, size and modification time: a karaoke library's
/// songs are measured once (`liveaudio karaoke --normalize`). One text file in the user's cache folder
/// (`$XDG_CACHE_HOME/liveaudio/loudness.tsv`, or `~/.cache/liveaudio/loudness.tsv`), at most 10,000 songs, replaced
/// whole on each write (a crash leaves the old or the new one, never half).
public struct LoudnessCache: Sendable {
    /// The cache file's path: the one given to ``init(path:)``, or the user's.
    public let path: String
    static let capacity = 10_000
    static let header = "liveaudio loudness cache 1"

    /// The cache at `path`, or the user's (nil when neither XDG_CACHE_HOME nor HOME is set).
    public init?(path: String? = nil) {
        if let path {
            self.path = path
        } else if let xdg = getenv("XDG_CACHE_HOME").map({ String(cString: $0) }), xdg.hasPrefix("/") {
            self.path = xdg + "/liveaudio/loudness.tsv"
        } else if let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty {
            self.path = home + "/.cache/liveaudio/loudness.tsv"
        } else {
            return nil
        }
    }

    /// What identifies a file's contents here: its absolute path, size and modification time (ns).
    struct Key: Hashable {
        var path: String, size: Int64, modified: Int64
    }

    static func key(_ file: String) throws(AudioError) -> Key {
        var st = stat()
        guard stat(file, &st) == 0 else {
            throw AudioError(.fileIO, "cannot read '\(file)': \(String(cString: strerror(errno)))")
        }
        let absolute = file.hasPrefix("/") ? file : FileManager.default.currentDirectoryPath + "/" + file
        return Key(path: absolute, size: Int64(st.st_size), modified: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }

    /// The stored measurement of `file`, if its size and modification time are those it was measured at.
    public func lookUp(_ file: String) -> (integrated: Double, truePeak: Double)? {
        guard let key = try? Self.key(file) else { return nil }
        return entries().last { $0.key == key }?.value
    }

    /// Keeps a measurement. Errors writing the cache are returned, not thrown: a cache that cannot be written costs
    /// a measurement next time, nothing else.
    @discardableResult
    public func store(_ file: String, integrated: Double, truePeak: Double) -> AudioError? {
        let key: Key
        do throws(AudioError) { key = try Self.key(file) } catch { return error }
        // The file's order is the order written: other versions of the same path are stale, and past the capacity
        // the oldest go.
        var lines = [Self.header]
        for (k, v) in entries().filter({ $0.key.path != key.path }).suffix(Self.capacity - 1) {
            lines.append("\(k.size)\t\(k.modified)\t\(v.integrated)\t\(v.truePeak)\t\(k.path)")
        }
        lines.append("\(key.size)\t\(key.modified)\t\(integrated)\t\(truePeak)\t\(key.path)")
        let folder = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        do {
            if !folder.isEmpty { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
            try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            return AudioError(.fileIO, "cannot write the loudness cache '\(path)': \(error)")
        }
        return nil
    }

    /// The entries in the order written.
    private func entries() -> [(key: Key, value: (integrated: Double, truePeak: Double))] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        var out: [(key: Key, value: (integrated: Double, truePeak: Double))] = []
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true)
        guard lines.first == Substring(Self.header) else { return [] }
        for line in lines.dropFirst() {
            let f = line.split(separator: "\t", maxSplits: 4, omittingEmptySubsequences: false)
            guard f.count == 5, let size = Int64(f[0]), let modified = Int64(f[1]), let i = Double(f[2]),
                let tp = Double(f[3]), i.isFinite || i == -.infinity
            else { continue }
            out.append((Key(path: String(f[4]), size: size, modified: modified), (i, tp)))
        }
        return out
    }
}

/// What a linear gain for a loudness target does: the gain and whether the true peak then needs a limiter.
public struct LoudnessNormalization: Hashable, Sendable {
    /// The target, LUFS.
    public let target: Double
    /// The true-peak ceiling, dBTP.
    public let ceiling: Double
    /// The gain to apply, dB (0 for silence: nothing to aim from): the target less the measured loudness, plus what
    /// a limiter takes off (``limiterLoss``).
    public internal(set) var gain: Double
    /// Where the limiter holds the true peak, dBTP: the ceiling, or under it when a lossy encoder's own overshoot
    /// must be left room (``lowerLimiter(by:)``).
    public internal(set) var limiterCeiling: Double
    /// The loudness the limiter took off, LU, given back by the gain (``compensatingLimiter(open:stopped:)``).
    public internal(set) var limiterLoss = 0.0
    /// The loudness a lossy encoder took off, LU (its band limit takes the highest frequencies, which K-weighting
    /// counts +4 dB): the gain aims this much over the target before the encoder (``compensatingCodec(loss:)``).
    public internal(set) var codecLoss = 0.0
    /// The measurement it was worked out from.
    public let measured: LoudnessReading

    /// The plan for bringing `measured` to `target`: the gain is the target less the integrated loudness (0 for
    /// silence), the limiter (if needed) aimed at `ceiling`; no limiter or codec loss yet.
    /// - Parameters:
    ///   - target: the loudness to reach, LUFS.
    ///   - ceiling: the true-peak ceiling, dBTP.
    ///   - measured: the signal's measurement before any gain.
    public init(target: Double, ceiling: Double, measured: LoudnessReading) {
        self.target = target
        self.ceiling = ceiling
        self.measured = measured
        limiterCeiling = ceiling
        gain = measured.integrated.isFinite ? target - measured.integrated : 0
    }

    /// No integrated loudness: nothing changes.
    public var isSilent: Bool { !measured.integrated.isFinite }
    /// The true peak after the gain alone, dBTP.
    public var truePeakAfterGain: Double { measured.truePeak + gain }
    /// Whether a true-peak limiter must hold the peaks under the ceiling.
    public var needsLimiter: Bool { !isSilent && (truePeakAfterGain > limiterCeiling) }

    /// The same plan with the limiter aimed `decibels` lower (room for a lossy encoder's overshoot).
    public func lowerLimiter(by decibels: Double) -> LoudnessNormalization {
        var p = self
        p.limiterCeiling -= decibels
        return p
    }

    /// The same plan aiming `loss` LU higher before a lossy encoder, which took that much off the last time.
    public func compensatingCodec(loss: Double) -> LoudnessNormalization {
        var p = self
        p.codecLoss += loss
        p.gain += loss
        return p
    }

    /// A limiter lowers the loudness by what it takes off the peaks. Measures the normalised signal (`open` gives
    /// the input from its start, each call) and raises the gain by what is missing, twice at most, until within
    /// 0.05 LU of the target. Without a limiter: unchanged.
    /// - Throws: ``/AudioCore/AudioError`` from reading, `.invalidState` when `stopped` says so.
    public func compensatingLimiter(
        open: () throws(AudioError) -> any AudioFileReader, stopped: () -> Bool = { false }
    ) throws(AudioError) -> LoudnessNormalization {
        var plan = self
        for _ in 0..<2 where plan.needsLimiter {
            let reached = try plan.measureResult(open(), stopped: stopped).integrated
            let aim = target + codecLoss
            guard reached.isFinite, abs(aim - reached) > 0.05 else { break }
            plan.gain += aim - reached
            plan.limiterLoss += aim - reached
        }
        return plan
    }

    /// The loudness of `reader`'s signal normalised by this plan.
    public func measureResult(_ reader: any AudioFileReader, stopped: () -> Bool = { false }) throws(AudioError) -> LoudnessReading {
        let normalizer = try LoudnessNormalizer(self, sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        var kernel = LoudnessKernel(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        let chunk = PCMBuffer(channelCount: reader.channelCount, capacity: 8192)
        while true {
            if stopped() { throw AudioError(.invalidState, "stopped while measuring the loudness; nothing was written") }
            let got = try reader.read(into: chunk.view(frames: chunk.capacity))
            if got == 0 { break }
            kernel.process(try normalizer.process(chunk.view(frames: got)))
        }
        kernel.process(try normalizer.finish())
        return kernel.reading
    }

    /// Checks a target and ceiling given on a command line or in a configuration.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a target outside −70 … 0 LUFS or a ceiling
    ///   outside −20 … 0 dBTP.
    public static func check(target: Double, ceiling: Double) throws(AudioError) {
        guard target.isFinite, (-70...0).contains(target) else {
            throw AudioError(.invalidParameter, "a loudness target is −70 … 0 LUFS, got \(target)")
        }
        guard ceiling.isFinite, (-20...0).contains(ceiling) else {
            throw AudioError(.invalidParameter, "a true-peak ceiling is −20 … 0 dBTP, got \(ceiling)")
        }
    }
}

/// Applies a ``LoudnessNormalization`` to a signal block by block: the linear gain, and where the gain would take the
/// true peak over the ceiling, a ``/AudioUnits/LimiterUnit`` with true-peak detection (lookahead 5 ms, release
/// 50 ms) that holds it there. The limiter's delay is taken out: what comes out lines up with what went in, frame for
/// frame, once ``finish()`` has given the tail.
///
/// Thread safety: one thread at a time (offline: an encoder, a renderer).
public final class LoudnessNormalizer {
    /// The plan it applies: its gain and, when ``LoudnessNormalization/needsLimiter``, its limiter ceiling.
    public let normalization: LoudnessNormalization
    private let linearGain: Float
    private let limiter: (graph: RenderGraph, renderer: OfflineRenderer, pending: PendingBlock, latency: Int)?
    private var toSkip: Int
    private let zeros: PCMBuffer
    private let maximumFrames: Int

    /// A normalizer for a signal of the given format, with its limiter set up when the plan needs one.
    /// - Parameters:
    ///   - normalization: the plan.
    ///   - sampleRate: the signal's sample rate, Hz.
    ///   - channelCount: the signal's channel count.
    ///   - maximumFrames: the most frames one ``process(_:)`` gets (default 8192).
    /// - Throws: ``/AudioCore/AudioError`` when the limiter's graph cannot be built for the format.
    public init(_ normalization: LoudnessNormalization, sampleRate: Double, channelCount: Int, maximumFrames: Int = 8192)
        throws(AudioError)
    {
        self.normalization = normalization
        self.maximumFrames = maximumFrames
        linearGain = Float(pow(10, normalization.gain / 20))
        zeros = PCMBuffer(channelCount: channelCount, capacity: maximumFrames)
        if normalization.needsLimiter {
            let format = try StreamFormat.graph(sampleRate: sampleRate, channelCount: channelCount)
            let graph = try RenderGraph(format: format, maximumFrames: maximumFrames)
            let unit = try LimiterUnit(format: format, truePeak: true)
            try unit.setParameter("ceiling", Float(normalization.limiterCeiling))
            let node = try graph.addNode(unit)
            // The limiter's input is the block handed to process(_:), through the graph's render callback.
            let pending = PendingBlock()
            try graph.setInputCallback(node) { out, _ in
                guard let block = pending.block, block.frameCount >= out.frameCount else { return out.clear() }
                out.copy(from: block.prefix(out.frameCount))
            }
            try graph.connect(node, to: graph.output)
            try graph.initialize()
            let latency = Int((unit.latency * sampleRate).rounded())
            limiter = (graph, OfflineRenderer(graph: graph), pending, latency)
            toSkip = latency
        } else {
            limiter = nil
            toSkip = 0
        }
    }

    /// Whether a limiter holds the true peak.
    public var isLimiting: Bool { limiter != nil }

    /// The normalised frames for `block` (at most the `maximumFrames` given to the initializer), valid until the next
    /// call: `block` itself scaled in place without a limiter; with one, the limiter's output, fewer frames at the
    /// start (its delay).
    public func process(_ block: BufferView) throws(AudioError) -> BufferView {
        for c in 0..<block.channelCount { _ = VectorOps.scale(block[c].baseAddress!, by: linearGain, count: block.frameCount) }
        guard let limiter else { return block }
        limiter.pending.block = block
        let out = try limiter.renderer.render(frames: block.frameCount)
        let skip = min(toSkip, out.frameCount)
        toSkip -= skip
        return out.slice(from: skip, frames: out.frameCount - skip)
    }

    /// The limiter's tail (its delay's worth of frames), or nothing.
    public func finish() throws(AudioError) -> BufferView {
        guard let limiter, limiter.latency > 0 else { return zeros.view(frames: 0) }
        return try process(zeros.view(frames: min(limiter.latency, maximumFrames)))
    }
}

/// The block a ``LoudnessNormalizer`` hands its limiter for the next cycle.
private final class PendingBlock: @unchecked Sendable {
    // Unchecked Sendable: set and read on the one thread that renders offline
    var block: BufferView?
}
