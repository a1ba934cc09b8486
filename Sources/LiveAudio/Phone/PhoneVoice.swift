import AudioCodecs
import AudioCore
import Synchronization

/// A phone singing into the room: one of the room's phone voices (``KaraokeRoom/Configuration/phoneVoices``), fed
/// over the network. What comes from the phone — its clock's readings and its audio packets, each stamped with the
/// capture time of its first frame on the phone's clock — is decoded, put on the room's timeline and handed to the
/// device thread's ``PhoneVoiceSource``, which the voice's chain, pitch tracker, stems and score read like a wired
/// microphone's.
///
/// Where a packet goes: the phone's stamp → the room's host clock (``/AudioCore/ClockFit`` through NTP-style readings: the room
/// sends its time, the phone answers with its own) → the room's sample time (the device's cycles against the host
/// clock) → less the phone's offset, what its stamps cannot see (its input path, the air, the room's output path:
/// ``calibrate()``) → plus the wired round trip (so that the voice is where a wired microphone's would be). The
/// sample time the phone's clock gives drifts with it; the placer's loop follows.
///
/// Thread safety: any thread; the calls of one phone are serialized by a lock (the stage calls from one queue per
/// phone).
public final class PhoneVoice: Sendable {
    /// How a packet's payload is coded.
    public enum Codec: Sendable {
        /// 16-bit little-endian PCM, channels interleaved.
        case pcm16
        /// One Opus packet (RFC 6716), 48 kHz.
        case opus
    }

    /// What the voice has seen: for the stage and the room's report.
    public struct Report: Sendable, Equatable {
        /// The room's voice number.
        public var voice: Int
        /// Whether a phone is connected to it now.
        public var connected: Bool
        /// The phone's offset (its input path, the air, the room's output path), seconds; nil before a calibration.
        public var offset: Double?
        /// The best round trip of the clock readings in the newest span, seconds; nil before the first.
        public var roundTrip: Double?
        /// How much faster the phone's clock runs than the room's, parts per million (0 until fitted).
        public var clockDriftPPM: Double
        /// Packets taken.
        public var packets: Int
        /// The packets' payload bytes.
        public var bytes: Int
        /// Packets dropped before placement: before the clock was read or the phone calibrated.
        public var unplaced: Int
        /// The device side's counts (late, holes, the jitter buffer's margin).
        public var counters: PhoneVoiceSource.Counters
        /// Runs the placer started (each reconnect or lost packet starts one).
        public var runs: Int
        /// Where the phone's first frame since it connected lies on the room's timeline, by its timestamps alone (no
        /// offset), in seconds from the room's first frame; nil before it came.
        public var captureStart: Double?
        /// Where the first sound the phone heard since it connected (a sample at −40 dBFS or more) lies on the room's
        /// timeline, by its timestamps alone, in seconds from the room's first frame; nil before one came.
        public var firstSound: Double?
    }

    /// The room's voice number (after the wired voices).
    public let voice: Int
    let source: PhoneVoiceSource
    private let room: PhoneVoiceHost
    private let state = Mutex<State>(State())

    struct State {
        var clock = ClockFit(bucketSpan: 2_000_000, bucketCount: 150)
        var placer: PhoneVoicePlacer?
        var opus: OpusPacketDecoder?
        var offsetFrames: Int?
        var lastSequence: UInt32?
        var connected = false
        var packets = 0, bytes = 0, unplaced = 0
        /// Seconds of audio taken since the phone connected, and when it connected (monotonic ns): a phone that sends
        /// faster than real time is refused.
        var audioSeconds = 0.0
        var connectedAt: UInt64 = 0
        var capture: CalibrationCapture?
        var calibrating = false
        var runsBefore = 0
        /// The capture time (the phone's clock, µs) of the first frame since the phone connected, and of its first
        /// sound.
        var firstStamp: Double?
        var firstSoundStamp: Double?
    }

    /// A calibration's recording: the phone's packets as they came (their stamps, on the phone's clock), placed by
    /// their timestamps alone when the recording ends — all through the clocks' fits as they are then, so that the
    /// fits' small moves while the chirps played (a reading better than the last, a device cycle less late) do not
    /// set the chirps apart, and each run as one stream (``PhoneCalibration/recording(_:start:length:sampleRate:)``)
    /// — from where the chirps were played, `length` frames.
    struct CalibrationCapture {
        let start: Int64
        let length: Int
        var packets: [(stamp: Double, samples: [Float], sampleRate: Int, newRun: Bool)] = []
    }

    init(room: PhoneVoiceHost, voice: Int, source: PhoneVoiceSource) {
        self.room = room
        self.voice = voice
        self.source = source
    }

    /// A phone took the voice: its clock readings start anew; `offset` (seconds), when the phone knows its own from
    /// an earlier calibration (a page that reconnected), else none until a calibration or ``setOffset(_:)``.
    ///
    /// `resuming`: the same page again on a new connection (its clock and its capture went on while it was away):
    /// its clock readings, the drift its audio was found to have and its offset (unless `offset` gives one) are kept;
    /// its audio starts a new run, and the time away adds nothing to what it may send.
    public func connect(offset: Double? = nil, resuming: Bool = false) {
        state.withLock {
            if resuming {
                $0.connected = true
                if let offset { $0.offsetFrames = Int((offset * room.sampleRate).rounded()) }
                // The time away gives no audio to catch up with: what the phone may send from now on is real time
                // again, plus the usual allowance.
                $0.audioSeconds = max($0.audioSeconds, Double(monotonicNanoseconds() - $0.connectedAt) / 1e9)
                return
            }
            let runs = $0.runsBefore + ($0.placer?.runs ?? 0)
            $0 = State()
            $0.runsBefore = runs
            $0.connected = true
            $0.connectedAt = monotonicNanoseconds()
            $0.offsetFrames = offset.map { Int(($0 * room.sampleRate).rounded()) }
        }
        source.newRun()
    }

    /// The phone went: what it sent is placed, what is still to come is silence.
    public func disconnect() {
        state.withLock {
            $0.placer?.flush()
            $0.connected = false
        }
    }

    /// Whether a phone is connected to the voice.
    public var isConnected: Bool { state.withLock { $0.connected } }

    /// One reading of the phone's clock: the room sent its time at `sentMicros` (CLOCK_MONOTONIC µs), the phone
    /// answered with `phoneMicros` on its clock, the answer came at `receivedMicros`.
    public func clockReading(sentMicros: Double, phoneMicros: Double, receivedMicros: Double) {
        guard receivedMicros >= sentMicros, receivedMicros - sentMicros < 5_000_000 else { return }
        state.withLock {
            $0.clock.add(ClockFit.Reading(x: phoneMicros, y: (sentMicros + receivedMicros) / 2, error: (receivedMicros - sentMicros) / 2))
        }
    }

    /// Sets the phone's offset without a calibration (seconds: what its timestamps cannot see).
    public func setOffset(_ seconds: Double) {
        state.withLock { $0.offsetFrames = Int((seconds * room.sampleRate).rounded()) }
    }

    /// One packet of the phone's audio.
    /// - Parameters:
    ///   - codec: how `payload` is coded.
    ///   - payload: 16-bit PCM (interleaved) or one Opus packet.
    ///   - sampleRate: the payload's rate.
    ///   - channelCount: its channels (averaged into one voice).
    ///   - captureMicroseconds: the capture time of its first frame on the phone's clock (for Opus, of the first
    ///     input frame the packet's audio stands for: the decoder's pre-skip is taken off).
    ///   - sequence: its number; a gap is a loss.
    ///   - isFirst: the first after the phone's capture (re)started.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a payload that does not decode, `.invalidParameter`
    ///   for a phone that sends faster than real time (the stage drops it).
    public func audio(
        codec: Codec, payload: [UInt8], sampleRate: Int, channelCount: Int, captureMicroseconds: Int64, sequence: UInt32, isFirst: Bool
    ) throws(AudioError) {
        try state.withLock { (s: inout State) throws(AudioError) in
            var samples: [Float]
            var stamp = Double(captureMicroseconds)
            switch codec {
            case .pcm16:
                let count = payload.count / 2 / max(1, channelCount)
                samples = [Float](repeating: 0, count: count)
                for i in 0..<count {
                    var sum: Float = 0
                    for c in 0..<channelCount {
                        let at = 2 * (i * channelCount + c)
                        sum += Float(Int16(bitPattern: UInt16(payload[at]) | UInt16(payload[at + 1]) << 8)) / 32_768
                    }
                    samples[i] = sum / Float(channelCount)
                }
            case .opus:
                if s.opus?.channelCount != channelCount { s.opus = try OpusPacketDecoder(channelCount: channelCount) }
                samples = try s.opus!.decode(payload)
                // The packet's audio stands for input from its stamp on; the decoder puts the encoder's look-ahead first.
                stamp -= Double(s.opus!.preSkip) * 1e6 / Double(OpusPacketDecoder.sampleRate)
            }
            s.packets += 1
            s.bytes += payload.count
            s.audioSeconds += Double(samples.count) / Double(sampleRate)
            let elapsed = Double(monotonicNanoseconds() - s.connectedAt) / 1e9
            guard s.audioSeconds <= elapsed + 3 else {
                throw AudioError(
                    .invalidParameter,
                    "phone voice \(voice) sent \(Int(s.audioSeconds)) s of audio in \(Int(elapsed)) s: faster than real time")
            }
            let gap = s.lastSequence.map { sequence != $0 &+ 1 } ?? true
            s.lastSequence = sequence
            if s.firstStamp == nil { s.firstStamp = stamp }
            if s.firstSoundStamp == nil, let i = samples.firstIndex(where: { abs($0) >= 0.01 }) {
                s.firstSoundStamp = stamp + Double(i) * 1e6 / Double(sampleRate)
            }
            // A calibration under way keeps the packet (a few seconds of them), placed when it ends.
            s.capture?.packets.append((stamp, samples, sampleRate, gap || isFirst))
            guard let roomMicros = s.clock.y(at: stamp), let position = room.timelinePosition(hostMicros: roomMicros) else {
                s.unplaced += 1
                return
            }
            guard let offset = s.offsetFrames else {
                s.unplaced += 1
                return
            }
            if s.placer?.inputRate != Double(sampleRate) {
                s.placer?.flush()
                s.runsBefore += s.placer?.runs ?? 0
                s.placer = try PhoneVoicePlacer(inputRate: Double(sampleRate), roomRate: room.sampleRate, feed: source.feed)
            }
            let at = position - Double(offset) + Double(room.roundTripFrames)
            samples.withUnsafeBufferPointer { s.placer!.place($0, at: at, newRun: gap || isFirst) }
        }
    }

    /// Measures the phone's offset: the room plays ``PhoneCalibration``'s chirps through its output while the phone
    /// sends what it hears, and the lag at which they are found in the phone's audio (placed by its timestamps) is
    /// kept as its offset, up to 1.5 s.
    /// - Returns: the offset in seconds.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when the room has not started or no phone is connected,
    ///   `.invalidParameter` when the chirps were not heard (from ``PhoneCalibration/measure(recording:signal:sampleRate:maximumLag:)``).
    public func calibrate() async throws(AudioError) -> Double {
        guard isConnected else { throw AudioError(.invalidState, "phone voice \(voice): no phone is connected") }
        let rate = room.sampleRate
        let maximumLag = Int(1.5 * rate)
        // One calibration of a voice at a time.
        let already = state.withLock { s -> Bool in
            defer { s.calibrating = true }
            return s.calibrating
        }
        guard !already else { throw AudioError(.busy, "phone voice \(voice): a calibration is under way") }
        defer { state.withLock { $0.calibrating = false } }
        // The chirps are the room's, one playback for every voice calibrating now (another's, when one is pending).
        guard let played = room.playPhoneCalibration(lead: 0.3) else {
            throw AudioError(.invalidState, "phone voice \(voice): the room has not started")
        }
        let (start, signal) = played
        state.withLock { $0.capture = CalibrationCapture(start: start, length: signal.count + maximumLag) }
        // Until the recording's end has been played, and half a second more for the network.
        let end = start + Int64(signal.count + maximumLag) + Int64(0.5 * rate)
        let deadline = monotonicNanoseconds() + 30_000_000_000
        while room.timelineSampleTime < end {
            guard monotonicNanoseconds() < deadline else { throw AudioError(.invalidState, "phone voice \(voice): the room stalled during the calibration") }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        // The packets placed under the lock (the clock's fit is the voice's state); the recording laid outside it.
        let (packets, capture) = state.withLock { s -> ([PhoneCalibration.Packet], CalibrationCapture?) in
            defer { s.capture = nil }
            guard let capture = s.capture else { return ([], nil) }
            var packets: [PhoneCalibration.Packet] = []
            var placed = true
            for p in capture.packets {
                guard let roomMicros = s.clock.y(at: p.stamp), let position = room.timelinePosition(hostMicros: roomMicros) else {
                    placed = false
                    continue
                }
                packets.append(
                    PhoneCalibration.Packet(
                        position: position, samples: p.samples, framesPerSample: room.sampleRate / Double(p.sampleRate), newRun: p.newRun || !placed))
                placed = true
            }
            return (packets, CalibrationCapture(start: capture.start, length: capture.length))
        }
        let recording = capture.map {
            PhoneCalibration.recording(packets, start: Double($0.start), length: $0.length, sampleRate: room.sampleRate)
        } ?? []
        let m = try PhoneCalibration.measure(recording: recording, signal: signal, sampleRate: rate, maximumLag: maximumLag)
        state.withLock { $0.offsetFrames = m.lagFrames }
        return Double(m.lagFrames) / rate
    }

    /// What the voice has seen.
    public var report: Report {
        let counters = source.counters
        return state.withLock { s in
            func onTimeline(_ stamp: Double?) -> Double? {
                stamp.flatMap { s.clock.y(at: $0) }.flatMap { room.timelinePosition(hostMicros: $0) }
                    .map { ($0 - Double(room.startTime)) / room.sampleRate }
            }
            return Report(
                voice: voice, connected: s.connected, offset: s.offsetFrames.map { Double($0) / room.sampleRate },
                roundTrip: s.clock.newestError.map { 2 * $0 / 1e6 }, clockDriftPPM: (1 / s.clock.rate - 1) * 1e6, packets: s.packets, bytes: s.bytes,
                unplaced: s.unplaced, counters: counters, runs: s.runsBefore + (s.placer?.runs ?? 0),
                captureStart: onTimeline(s.firstStamp), firstSound: onTimeline(s.firstSoundStamp))
        }
    }
}

/// What the room's phone voices need of it, apart from the room (which holds them): its rate, its timeline against
/// the host's clock, the wired round trip and the calibration's chirps.
final class PhoneVoiceHost: Sendable {
    let sampleRate: Double
    let timeline: TimelineTap
    let chirps: SignalInjector
    let signal: [Float]
    /// The readings' errors only rank them (the least late cycle is the best): no prior on the drift, which would
    /// weigh against them as if they were bounds.
    private let fit = Mutex<(fit: ClockFit, last: Int64)>(
        (ClockFit(bucketSpan: 2_000_000, bucketCount: 150, expectedDrift: .infinity), .min))
    private let roundTrip = Atomic<Int>(0)
    private let started = Atomic<Bool>(false)
    /// The chirps' pending playback (its start), shared by the voices that calibrate before it begins.
    private let pendingChirps = Mutex<Int64?>(nil)

    init(sampleRate: Double, timeline: TimelineTap, chirps: SignalInjector, signal: [Float]) {
        self.sampleRate = sampleRate
        self.timeline = timeline
        self.chirps = chirps
        self.signal = signal
    }

    private let start = Atomic<Int64>(0)

    /// The room started: the wired round trip (frames) the voices are placed by, and its first frame.
    func started(roundTrip frames: Int, startTime: Int64) {
        roundTrip.store(frames, ordering: .relaxed)
        start.store(startTime, ordering: .relaxed)
        started.store(true, ordering: .releasing)
    }

    /// The room's first frame (its timeline's, where the recording and the outputs begin).
    var startTime: Int64 { start.load(ordering: .relaxed) }

    var roundTripFrames: Int { roundTrip.load(ordering: .relaxed) }
    var timelineSampleTime: Int64 { timeline.sampleTime }

    /// The room's sample time at host time `hostMicros` (CLOCK_MONOTONIC µs), from the device's cycles; nil before
    /// the first.
    func timelinePosition(hostMicros: Double) -> Double? {
        let reading = timeline.clockReading
        return fit.withLock { f -> Double? in
            if let reading, reading.sample != f.last {
                f.last = reading.sample
                // Host time against sample time, both in µs (the samples at the nominal rate): what the device's clock
                // drifts from the host's is the line's slope. Of a span's readings (each the least late cycle of its
                // half second) the least late again is kept.
                let sampleMicros = Double(reading.sample) * 1e6 / sampleRate, host = Double(reading.host) / 1000
                f.fit.add(ClockFit.Reading(x: host, y: sampleMicros, error: max(0, host - sampleMicros + 1e12)))
            }
            return f.fit.y(at: hostMicros).map { $0 * sampleRate / 1e6 }
        }
    }

    /// Plays the chirps `lead` seconds from now; returns where (sample time) and what, or nil before the room started.
    func playPhoneCalibration(lead: Double) -> (Int64, [Float])? {
        guard started.load(ordering: .acquiring) else { return nil }
        let now = timeline.sampleTime
        let at = pendingChirps.withLock { pending -> Int64 in
            // A playback not begun yet is shared (one that has begun cannot be: its start is in the past).
            if let p = pending, p > now { return p }
            let at = now + Int64(lead * sampleRate)
            pending = at
            return at
        }
        chirps.arm(at: at)
        return (at, signal)
    }
}
