#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import Synchronization

/// A measured round trip: output → (loopback, cable, or sound server) → input.
public struct LatencyMeasurement: Sendable, CustomStringConvertible {
    /// What the device granted for the measurement.
    public let grant: DeviceGrant
    /// The round trip of each click found, in frames, in the order played.
    public let roundTripFrames: [Int]
    /// Clicks played.
    public let clicksPlayed: Int
    /// How clearly each click stood out (normalized cross-correlation peak, 0…1).
    public let confidences: [Double]

    /// The rate the round trip was measured at (the client's): the frames below are its frames. A device that
    /// granted another rate (``grant``'s) was converted to and from it, and the conversion is part of the trip.
    public let sampleRate: Double
    /// The median round trip in frames.
    public var medianFrames: Int {
        let sorted = roundTripFrames.sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }
    /// The median round trip in milliseconds.
    public var milliseconds: Double { Double(medianFrames) * 1000 / sampleRate }
    /// The shortest round trip found, in milliseconds (0 when no click was found).
    public var minimumMilliseconds: Double { Double(roundTripFrames.min() ?? 0) * 1000 / sampleRate }
    /// The longest round trip found, in milliseconds (0 when no click was found).
    public var maximumMilliseconds: Double { Double(roundTripFrames.max() ?? 0) * 1000 / sampleRate }
    /// The round trip in periods of the granted size (the device's period, in time).
    public var periods: Double { milliseconds / grant.periodMilliseconds }

    /// A measurement from its parts.
    /// - Parameters:
    ///   - grant: what the device granted.
    ///   - sampleRate: the rate the round trip was measured at, in Hz.
    ///   - roundTripFrames: the round trip of each click found, in frames at `sampleRate`.
    ///   - clicksPlayed: how many clicks were played.
    ///   - confidences: how clearly each click found stood out (0…1), one per round trip.
    public init(grant: DeviceGrant, sampleRate: Double, roundTripFrames: [Int], clicksPlayed: Int, confidences: [Double]) {
        self.grant = grant
        self.sampleRate = sampleRate
        self.roundTripFrames = roundTripFrames
        self.clicksPlayed = clicksPlayed
        self.confidences = confidences
    }

    public var description: String {
        let converted = sampleRate != grant.sampleRate
            ? ", the device at \(formatHz(grant.sampleRate)) converted to and from \(formatHz(sampleRate))" : ""
        return "round trip \(String(format2: milliseconds)) ms (\(medianFrames) frames at \(formatHz(sampleRate)), "
            + "\(String(format2: periods)) periods of \(grant.periodFrames)\(converted)); \(roundTripFrames.count) of "
            + "\(clicksPlayed) clicks found, range \(String(format2: minimumMilliseconds))…"
            + "\(String(format2: maximumMilliseconds)) ms"
    }
}

/// Measures a device's round-trip latency: plays a click (a short windowed chirp) every half second or so on bus 0,
/// captures bus 1 in the same cycles, and finds each click in the capture by normalized cross-correlation. Capture
/// and playback share one sample clock, so the distance in sample time is the round trip: device buffering, the
/// sound server's own, and whatever connects output to input (a loopback in JACK, a monitor source in
/// PulseAudio, a cable on hardware).
public enum LatencyMeter {
    /// The click: 256 samples of a chirp from 1 kHz to 8 kHz (or 0.4 × the rate, if lower) under a Hann window.
    static func click(sampleRate: Double) -> [Float] {
        let n = 256
        let f0 = 1000.0
        let f1 = min(8000, sampleRate * 0.4)
        return (0..<n).map { i in
            let t = Double(i) / sampleRate
            let duration = Double(n) / sampleRate
            let phase = 2 * Double.pi * (f0 * t + (f1 - f0) * t * t / (2 * duration))
            let window = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(n - 1))
            return Float(0.5 * window * sin(phase))
        }
    }

    /// Plays `clicks` clicks and measures each one's round trip.
    /// - Parameters:
    ///   - configuration: the device; its input and output formats are replaced by mono Float32 at `sampleRate`,
    ///     and reconnecting is turned off.
    ///   - sampleRate: the rate to measure at, in Hz (default 48 kHz).
    ///   - clicks: how many clicks to play (default 5), about half a second apart or more.
    ///   - timeout: seconds to wait for the device to play everything (default 30).
    /// - Returns: the round trips of the clicks found.
    /// - Throws: ``/AudioCore/AudioError`` from opening the device; `.deviceUnavailable` when no click is heard
    ///   (output and input are not connected), or when the device stops delivering audio.
    public static func measure(
        _ configuration: IOUnit.Configuration, sampleRate: Double = 48_000, clicks: Int = 5, timeout: Double = 30
    ) throws(AudioError) -> LatencyMeasurement {
        var configuration = configuration
        let mono = try StreamFormat.graph(sampleRate: sampleRate, channelCount: 1)
        configuration.inputFormat = mono
        configuration.outputFormat = mono
        configuration.reconnect = false
        let io = try IOUnit(configuration)
        let template = click(sampleRate: sampleRate)
        // Clicks start after half a second of silence (servers settle), then one every `interval` frames: at least
        // half a second and four device buffers, so a click's echo cannot be mistaken for the next.
        let request = try configuration.request()
        let interval = max(Int(sampleRate / 2), 4 * request.periodFrames * request.periodCount, 2 * template.count)
        let first = Int(sampleRate / 2)
        let total = first + clicks * interval + interval
        let recording = Recording(frames: total)
        let clickLength = template.count
        let clickTemplate = Recording(frames: clickLength)
        template.withUnsafeBufferPointer { clickTemplate.store($0.baseAddress!, frames: clickLength, at: 0) }
        try io.setOutputCallback { raw, stamp in
            let out = raw.base.assumingMemoryBound(to: Float.self)
            var i = 0
            while i < raw.frameCount {
                let t = Int(stamp.sampleTime) + i - first
                var v: Float = 0
                if t >= 0, t < clicks * interval {
                    let k = t % interval
                    if k < clickLength { v = clickTemplate[k] }
                }
                out[i] = v
                i += 1
            }
        }
        try io.setCaptureHandler { raw, stamp in
            recording.store(raw.base.assumingMemoryBound(to: Float.self), frames: raw.frameCount, at: stamp.sampleTime)
        }
        let grant = try io.start()
        let started = monotonicNanoseconds()
        var failure: AudioError?
        while io.sampleTime < Int64(total) {
            if Double(monotonicNanoseconds() - started) / 1e9 > timeout {
                failure = AudioError(
                    .deviceUnavailable,
                    "the device ran only \(io.sampleTime) of \(total) frames in \(Int(timeout)) s; it is stalled or too slow")
                break
            }
            if io.grant == nil {
                failure = AudioError(.deviceUnavailable, "the device stopped while measuring")
                break
            }
            usleep(20_000)
        }
        io.stop()
        if let failure { throw failure }

        let (found, confidences) = recording.samples.withUnsafeBufferPointer { x in
            locateClicks(in: x, emittedAt: (0..<clicks).map { first + $0 * interval }, within: interval, sampleRate: sampleRate)
        }
        guard !found.isEmpty else {
            throw AudioError(
                .deviceUnavailable,
                "none of the \(clicks) clicks came back within \(interval) frames: the output does not reach the "
                    + "input (connect them: a JACK loopback with --device self, a PulseAudio monitor source, or a cable)")
        }
        return LatencyMeasurement(
            grant: grant, sampleRate: sampleRate, roundTripFrames: found, clicksPlayed: clicks, confidences: confidences)
    }

    /// Finds each click played at the sample times `emittedAt` in `captured` (indexed by the same sample times):
    /// the lag within `within` frames after it where the normalized cross-correlation with the click peaks, if that
    /// peak is 0.5 or more. How ``measure(_:sampleRate:clicks:timeout:)`` and a running session's calibration read
    /// what came back.
    /// - Returns: the round trip of each click found, in frames, and how clearly it stood out (0…1).
    public static func locateClicks(
        in captured: UnsafeBufferPointer<Float>, emittedAt: [Int], within: Int, sampleRate: Double
    ) -> (frames: [Int], confidences: [Double]) {
        let template = click(sampleRate: sampleRate)
        let clickLength = template.count
        let energy = template.reduce(0) { $0 + Double($1) * Double($1) }
        var found: [Int] = []
        var confidences: [Double] = []
        for emitted in emittedAt {
            var best = 0.0
            var bestLag = -1
            var lag = 0
            while lag + clickLength < within, emitted + lag + clickLength <= captured.count {
                var dot = 0.0
                var power = 0.0
                let base = emitted + lag
                for j in 0..<clickLength {
                    let s = Double(captured[base + j])
                    dot += s * Double(template[j])
                    power += s * s
                }
                let score = power > 0 ? dot / (energy * power).squareRoot() : 0
                if score > best {
                    best = score
                    bestLag = lag
                }
                lag += 1
            }
            if best >= 0.5 {
                found.append(bestLag)
                confidences.append(best)
            }
        }
        return (found, confidences)
    }

    /// The click played: 256 samples of a windowed chirp.
    public static func clickSamples(sampleRate: Double) -> [Float] { click(sampleRate: sampleRate) }

    /// Captured mono samples indexed by sample time, written by the real-time thread, read after it stops.
    private final class Recording: @unchecked Sendable {
        // Unchecked Sendable: raw sample buffer written by the device thread (`store`), copied (`samples`) only after it stops
        private let base: UnsafeMutablePointer<Float>
        private let count: Int

        init(frames: Int) {
            count = frames
            base = .allocate(capacity: frames)
            base.initialize(repeating: 0, count: frames)
        }

        deinit { base.deallocate() }

        @inline(__always)
        subscript(index: Int) -> Float { base[index] }

        /// A copy of everything recorded; call once the device has stopped.
        var samples: [Float] { Array(UnsafeBufferPointer(start: base, count: count)) }

        func store(_ source: UnsafePointer<Float>, frames: Int, at sampleTime: Int64) {
            var i = 0
            while i < frames {
                let t = Int(sampleTime) + i
                if t >= 0, t < count { base[t] = source[i] }
                i += 1
            }
        }
    }
}
