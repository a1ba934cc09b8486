import AudioCore

/// Puts a phone's decoded audio on the room's timeline: converts it to the room's rate and pushes it to a
/// ``PhoneVoiceFeed`` in chunks, each with the room sample time of its first frame.
///
/// Each packet comes with the room time its first frame belongs at (its capture time through the clocks' fits, see
/// ``/AudioCore/ClockFit``). The packets of one run are one stream through a variable-rate converter: where the stream would
/// put a packet and where its time says drift apart as the phone's audio clock and the room's part (a phone's
/// crystal is off by tens of parts per million, the test's by 200), and the converter's ratio follows: a
/// second-order loop (proportional and integral, critically damped, 30 s to settle) whose integral learns the
/// drift — it outlives a new run — so that the distance goes to zero, not to a lag that grows with the drift; the
/// proportional part answers the clock fit's noise by a fraction of a cent. A packet more than ``rebaseFrames``
/// away from where the stream would put it, or
/// the first of a new run (a reconnect, a gap in the sequence), starts the stream again at its own time: what was
/// lost stays silent in the room.
///
/// Thread safety: one thread (the one decoding the phone's packets); it allocates only when made.
public final class PhoneVoicePlacer: @unchecked Sendable {
    // Unchecked Sendable: one thread at a time, as documented (the converter is the same).
    /// The rate packets come at.
    public let inputRate: Double
    /// The room's rate.
    public let roomRate: Double
    /// The feed the room's ``PhoneVoiceSource`` reads.
    public let feed: PhoneVoiceFeed
    /// How far a packet may land from its time before the stream starts again at it (10 ms of the room's frames).
    public let rebaseFrames: Double
    private let converter: SampleRateConverter
    private let input: PCMBuffer
    private let output: PCMBuffer
    private var runStart = 0.0
    private var produced: Int64 = 0
    /// The run's output frames for its input so far, at the ratios it went through.
    private var streamFrames = 0.0
    private var ratio = 1.0
    private var running = false

    /// Runs started (the first included).
    public private(set) var runs = 0
    /// Frames the feed refused (it was full: the device thread is not reading).
    public private(set) var refusedFrames = 0
    /// Where the newest packet landed against its time, in room frames (positive: the stream was early).
    public private(set) var lastError = 0.0
    /// The converter's correction now, in parts per million.
    public private(set) var correctionPPM = 0.0
    /// The loop's integral: the ratio correction that the drift alone needs.
    private var integral = 0.0
    /// How much faster than the room's the phone's audio clock runs, as the loop has learnt it, in parts per million.
    public var driftPPM: Double { integral == 0 ? 0 : (1 / (1 + integral) - 1) * 1e6 }
    /// The loop's gains: natural frequency 2π/30 s, critically damped (proportional 2ω, integral ω²), on the
    /// distance in seconds.
    static let loopFrequency = 2 * Double.pi / 30
    static let proportional = 2 * loopFrequency, integralGain = loopFrequency * loopFrequency
    /// The most the converter is corrected by (a phone off by more than 0.2 % is not drifting).
    static let maximumCorrection = 0.002

    /// The most frames ``place(_:at:newRun:)`` takes at once.
    public static let maximumPacketFrames = 8192

    /// A placer from `inputRate` to `roomRate` Hz into `feed`.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` for a rate out of range.
    public init(inputRate: Double, roomRate: Double, feed: PhoneVoiceFeed) throws(AudioError) {
        self.inputRate = inputRate
        self.roomRate = roomRate
        self.feed = feed
        rebaseFrames = 0.010 * roomRate
        converter = try SampleRateConverter(inputRate: inputRate, outputRate: roomRate, channelCount: 1, quality: .medium, variableRate: true)
        input = PCMBuffer(channelCount: 1, capacity: Self.maximumPacketFrames)
        output = PCMBuffer(channelCount: 1, capacity: Int(Double(Self.maximumPacketFrames) * roomRate / inputRate * 1.1) + 256)
    }

    /// Places one packet's samples (mono, at ``inputRate``), its first frame belonging at room sample time
    /// `position`; `newRun` when it does not follow the previous packet (the first after a reconnect or a lost one).
    /// - Precondition: at most ``maximumPacketFrames`` samples.
    public func place(_ samples: UnsafeBufferPointer<Float>, at position: Double, newRun: Bool) {
        precondition(samples.count <= Self.maximumPacketFrames, "a packet of \(samples.count) frames")
        guard !samples.isEmpty, position.isFinite else { return }
        // Where this packet's first frame lands in the stream: the run's output frames for the input so far, each
        // packet's frames times the ratio it went through (the converter's own count of what it holds back is not
        // exact right after a reset).
        let expected = runStart + streamFrames
        let error = position - expected
        if newRun || !running || abs(error) > rebaseFrames {
            if running { flush() }
            converter.reset()
            runStart = position
            produced = 0
            streamFrames = 0
            running = true
            runs += 1
            lastError = 0
            // The drift learnt so far holds for the new run.
            correctionPPM = integral * 1e6
            ratio = 1 + integral
            converter.setRatio(ratio)
        } else {
            lastError = error
            let seconds = error / roomRate, dt = Double(samples.count) / inputRate
            let limit = Self.maximumCorrection
            integral = min(max(integral + Self.integralGain * seconds * dt, -limit), limit)
            let correction = min(max(integral + Self.proportional * seconds, -limit), limit)
            correctionPPM = correction * 1e6
            ratio = 1 + correction
            converter.setRatio(ratio)
        }
        streamFrames += Double(samples.count) * ratio * roomRate / inputRate
        input.storage.update(from: samples.baseAddress!, count: samples.count)
        let all = input.view(frames: samples.count)
        var offset = 0
        while offset < samples.count {
            let (consumed, made) = converter.process(input: all.slice(from: offset, frames: samples.count - offset), output: output.view(frames: output.capacity))
            push(made)
            offset += consumed
            if consumed == 0 && made == 0 { break }
        }
    }

    /// What the converter still holds, into the feed (the end of a run): as far as the run's input reaches, not the
    /// filter's tail past it.
    public func flush() {
        guard running else { return }
        while true {
            let made = converter.flush(into: output.view(frames: output.capacity))
            guard made > 0 else { break }
            push(min(made, max(0, Int(streamFrames.rounded()) - Int(produced))))
        }
        running = false
    }

    private func push(_ frames: Int) {
        guard frames > 0 else { return }
        let at = Int64((runStart + Double(produced)).rounded())
        let taken = feed.push(position: at, samples: UnsafeBufferPointer(start: output.storage, count: frames))
        refusedFrames += frames - taken
        produced += Int64(frames)
    }
}
