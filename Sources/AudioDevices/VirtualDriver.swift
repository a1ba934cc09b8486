import AudioCore
import CSystemCalls
import MediaContainers
import Synchronization

/// How a virtual device behaves: how fast it runs and how many frames each cycle moves.
public struct VirtualDeviceOptions: Hashable, Sendable {
    /// How fast a virtual device runs its cycles.
    public enum Pacing: String, Hashable, Sendable {
        /// One period per period of wall-clock time (CLOCK_MONOTONIC, absolute deadlines: no drift).
        case realTime
        /// As fast as the handler runs. Cycles wait for the graph's file sources to have their frames read
        /// ahead, so the output does not depend on how busy the machine is.
        case asFastAsPossible
    }

    /// Frames per cycle.
    public enum CallbackSizes: Hashable, Sendable {
        /// Every cycle is one period.
        case fixed
        /// Cycle n moves `sizes[n % sizes.count]` frames.
        case sequence([Int])
        /// Sizes drawn uniformly from `range` by a generator seeded with `seed` (the same seed, the same sizes).
        case random(range: ClosedRange<Int>, seed: UInt64)
    }

    /// How fast the device runs (default ``Pacing/realTime``).
    public var pacing: Pacing
    /// How many frames each cycle moves (default ``CallbackSizes/fixed``: one period).
    public var callbackSizes: CallbackSizes
    /// The playback file's sample type.
    public var outputSampleType: SampleType
    /// How fast the capture file's clock runs against the playback's (1.001: 0.1 % fast — a second device on a
    /// clock of its own). Other than 1, each cycle captures that many times the playback's frames (rounded, the
    /// remainder carried), and the grant says the clocks are independent. 0.9 … 1.1.
    public var inputClockRatio: Double = 1
    /// A playback stall, as an ALSA playback xrun and its restart make one: at `at` seconds of device time (and
    /// again every `every` seconds, if given) the device runs no cycles for `seconds` — silence goes to the
    /// playback file and the sample time jumps by the gap — while the capture, on its own clock, piles up and
    /// arrives with the next cycle. 0 … 1 s, `every` longer than the stall; nil: none.
    public var playbackStall: PlaybackStall?
    /// Frames the playback file takes at most, in whole cycles (the cycle that reaches the count is written whole);
    /// nil: everything until the stop. A player that knows its file's length gives it, so that a device run as fast
    /// as possible does not write the silence it renders between the file's end and the stop.
    public var playbackFrames: Int64?
    /// Whether the capture file waits (silence meanwhile) until the I/O unit says at which sample time its frame 0
    /// arrives (``IOUnit/startCapture(atSampleTime:)``): how a karaoke room puts a recorded singer's first frame on
    /// the song's first (default false: the file's frame 0 is the device's first cycle).
    public var capturesFromStartTime = false

    /// When a virtual device's playback stalls and for how long (see ``VirtualDeviceOptions/playbackStall``).
    public struct PlaybackStall: Sendable, Hashable {
        /// Seconds of device time (sample time over the rate) at which the first stall begins; 0 or more.
        public var at: Double
        /// Seconds each stall lasts: 0 … 1.
        public var seconds: Double
        /// Seconds from one stall's start to the next's, longer than ``seconds``; nil: the stall happens once.
        public var every: Double?
        /// A stall of `seconds` seconds at `at` seconds of device time, again every `every` seconds if given.
        /// Checked when the device opens.
        /// - Parameters:
        ///   - at: seconds of device time at which the first stall begins.
        ///   - seconds: seconds each stall lasts (0 … 1).
        ///   - every: seconds between stall starts, longer than `seconds`; nil (the default): once.
        public init(at: Double, seconds: Double, every: Double? = nil) {
            self.at = at
            self.seconds = seconds
            self.every = every
        }
    }

    /// Options for a virtual device; ``inputClockRatio`` starts at 1, ``playbackStall`` and ``playbackFrames`` at nil.
    /// - Parameters:
    ///   - pacing: how fast the device runs (default real time).
    ///   - callbackSizes: how many frames each cycle moves (default one period).
    ///   - outputSampleType: the playback file's sample type (default Float32).
    public init(pacing: Pacing = .realTime, callbackSizes: CallbackSizes = .fixed, outputSampleType: SampleType = .float32) {
        self.pacing = pacing
        self.callbackSizes = callbackSizes
        self.outputSampleType = outputSampleType
    }

    /// The largest cycle these options produce for `period`.
    func maximumCycle(period: Int) -> Int {
        switch callbackSizes {
        case .fixed: period
        case .sequence(let sizes): sizes.max() ?? period
        case .random(let range, _): range.upperBound
        }
    }
}

/// Where a held virtual capture starts (``VirtualDeviceOptions/capturesFromStartTime``): set by the control thread,
/// read by the device's thread each cycle; it outlives the driver (a reconnect opens another).
final class CaptureStart: Sendable {
    private let value = Atomic<Int64>(.max)
    /// The device sample time at which the file's frame 0 arrives; `.max` until set.
    var sampleTime: Int64 { value.load(ordering: .acquiring) }
    func set(_ sampleTime: Int64) { value.store(sampleTime, ordering: .releasing) }
}

/// The virtual backend: a WAV file as the microphone, a WAV file as the speaker.
///
/// Its own thread plays the device: it reads the capture file (silence once it has ended), runs the handler, and
/// appends the output to the playback file — the file reads and writes are this device's I/O, as `readi`/`writei`
/// are an ALSA device's. Paced in real time or as fast as possible, with fixed, listed or random cycle sizes, so
/// tests can give a graph jittery, odd-sized callbacks deterministically.
final class VirtualDriver: AudioDriver, @unchecked Sendable {
    // Unchecked Sendable: reader, writer, buffers: its la-virtual-io thread's from start to stop's join; `thread`/`finished` control's
    let grant: DeviceGrant
    private let options: VirtualDeviceOptions
    private let reader: WAVFileReader?
    private let writer: WAVFileWriter?
    private let inputFloat: PCMBuffer?
    private let fileFloat: PCMBuffer?
    private let outputFloat: PCMBuffer?
    private let counters = DriverCounters()
    private let running = Atomic<Bool>(false)
    private let ended = Atomic<Bool>(false)
    private var thread: WorkerThread?
    private var finished = false
    /// The device sample time at which the capture file's frame 0 arrives (`.max`: not yet; silence meanwhile).
    private let captureStart: CaptureStart

    var xrunCount: Int { 0 }
    /// True once the capture file has been read to its end.
    var inputHasEnded: Bool { ended.load(ordering: .acquiring) }
    /// Frames written to the playback file so far.
    var framesWritten: Int64 { writer?.framesWritten ?? 0 }

    init(request: DeviceRequest, options: VirtualDeviceOptions, captureStart: CaptureStart = CaptureStart()) throws(AudioError) {
        try request.validate()
        self.options = options
        self.captureStart = captureStart
        let cycle = options.maximumCycle(period: request.periodFrames)
        switch options.callbackSizes {
        case .fixed: break
        case .sequence(let sizes):
            guard !sizes.isEmpty, sizes.allSatisfy({ $0 >= 1 && $0 <= DeviceRequest.maximumPeriodFrames }) else {
                throw AudioError(.invalidFormat, "virtual callback sizes must be 1…\(DeviceRequest.maximumPeriodFrames) frames, got \(sizes)")
            }
        case .random(let range, _):
            guard range.lowerBound >= 1, range.upperBound <= DeviceRequest.maximumPeriodFrames else {
                throw AudioError(.invalidFormat, "virtual callback sizes must be 1…\(DeviceRequest.maximumPeriodFrames) frames, got \(range)")
            }
        }
        guard (0.9...1.1).contains(options.inputClockRatio) else {
            throw AudioError(.invalidParameter, "a virtual input clock ratio must be 0.9 … 1.1, got \(options.inputClockRatio)")
        }
        if let stall = options.playbackStall {
            guard stall.at >= 0, (0...1).contains(stall.seconds), (stall.every ?? .infinity) > stall.seconds else {
                throw AudioError(
                    .invalidParameter, "a virtual playback stall must start at 0 s or later, last 0 … 1 s and recur (every) after longer than it lasts, got \(stall)")
            }
        }
        if request.inputChannels > 0 {
            guard let path = request.inputDevice else {
                throw AudioError(.unknownDevice, "the virtual device needs a WAV file to capture from (--device FILE.wav)")
            }
            let r = try WAVFileReader(path: path)
            guard r.format.sampleRate == request.sampleRate else {
                throw AudioError(
                    .unsupportedSampleRate,
                    "'\(path)' is at \(formatHz(r.format.sampleRate)) but the device runs at \(formatHz(request.sampleRate)); "
                        + "ask for --rate \(Int(r.format.sampleRate))")
            }
            guard r.format.channelCount == request.inputChannels || r.format.channelCount == 1 else {
                throw AudioError(
                    .formatMismatch,
                    "'\(path)' has \(r.format.channelCount) channels; capture asks for \(request.inputChannels) "
                        + "(a mono file feeds any channel count)")
            }
            reader = r
            let stallFrames = (options.playbackStall?.seconds ?? 0) * request.sampleRate
            let inputCycle = Int(((Double(cycle) + stallFrames) * max(options.inputClockRatio, 1)).rounded(.up)) + 2
            fileFloat = PCMBuffer(channelCount: r.format.channelCount, capacity: inputCycle)
            inputFloat = PCMBuffer(channelCount: request.inputChannels, capacity: inputCycle)
        } else {
            reader = nil
            fileFloat = nil
            inputFloat = nil
        }
        if request.outputChannels > 0 {
            guard let path = request.outputDevice else {
                throw AudioError(.unknownDevice, "the virtual device needs a WAV file to play into (--device FILE.wav)")
            }
            writer = try WAVFileWriter(
                path: path,
                format: StreamFormat(
                    sampleRate: request.sampleRate, channelCount: request.outputChannels,
                    sampleType: options.outputSampleType, interleaved: true))
            outputFloat = PCMBuffer(channelCount: request.outputChannels, capacity: cycle)
        } else {
            writer = nil
            outputFloat = nil
        }
        grant = DeviceGrant(
            backend: .virtual, inputDevice: reader?.path, outputDevice: writer?.path,
            inputChannels: request.inputChannels, outputChannels: request.outputChannels,
            sampleRate: request.sampleRate, periodFrames: cycle, periodCount: 1,
            deviceSampleType: reader?.format.sampleType ?? options.outputSampleType, inputLatencyFrames: 0,
            outputLatencyFrames: 0,
            independentClocks: (options.inputClockRatio != 1 || request.clocks == .two) && request.inputChannels > 0 && request.outputChannels > 0)
        nominalPeriod = request.periodFrames
    }

    private let nominalPeriod: Int
    /// The real-time probe's hook (nil unless a test preloads it).
    private let deviceCallHook = la_find_device_call_hook()

    deinit { stop() }

    func start(handler: DeviceCycleHandler, onFault: @escaping @Sendable (AudioError) -> Void) throws(AudioError) -> [String] {
        precondition(thread == nil, "a virtual driver starts once")
        running.store(true, ordering: .releasing)
        thread = try WorkerThread(name: "la-virtual-io") { [self] in
            if let failure = runLoop(handler) { onFault(failure) }
        }
        return []
    }

    func stop() {
        running.store(false, ordering: .releasing)
        thread?.join()
        guard !finished else { return }
        finished = true
        try? writer?.finish()
    }

    private func runLoop(_ handler: DeviceCycleHandler) -> AudioError? {
        var generator = SplitMix64(seed: 0)
        if case .random(_, let seed) = options.callbackSizes { generator = SplitMix64(seed: seed) }
        var cycleIndex = 0
        var sampleTime: Int64 = 0
        // The capture clock: frames due (fractional) and frames delivered.
        var captureDue = 0.0
        var captured: Int64 = 0
        let rate = grant.sampleRate
        let start = monotonicNanoseconds()
        var nextStall = options.playbackStall.map { $0.at * rate } ?? .infinity
        while running.load(ordering: .acquiring) {
            if let stall = options.playbackStall, Double(sampleTime) >= nextStall {
                nextStall = stall.every.map { nextStall + $0 * rate } ?? .infinity
                let gap = Int64((stall.seconds * rate).rounded())
                if let writer, let outputFloat {
                    var left = Int(gap)
                    while left > 0 {
                        let n = min(left, outputFloat.capacity)
                        let silence = outputFloat.view(frames: n)
                        silence.clear()
                        do throws(AudioError) {
                            try writer.write(silence)
                        } catch {
                            return error
                        }
                        left -= n
                    }
                }
                captureDue += Double(gap) * options.inputClockRatio
                sampleTime += gap
            }
            let frames: Int =
                switch options.callbackSizes {
                case .fixed: nominalPeriod
                case .sequence(let sizes): sizes[cycleIndex % sizes.count]
                case .random(let range, _):
                    range.lowerBound + Int(generator.next() % UInt64(range.upperBound - range.lowerBound + 1))
                }
            cycleIndex += 1
            let endTime = start + UInt64(Double(sampleTime + Int64(frames)) * 1e9 / rate)
            if options.pacing == .realTime {
                sleepUntil(monotonicNanoseconds: endTime)
            } else {
                // No clock to keep: the device waits for files read ahead instead of playing silence for them (its
                // pacing: the device's own waiting, which the real-time probe leaves to it).
                deviceCallHook?(1)
                handler.prepareCycle(frames: frames)
                deviceCallHook?(-1)
            }
            let host = options.pacing == .realTime ? endTime : monotonicNanoseconds()

            var input: BufferView?
            if let reader, let fileFloat, let inputFloat {
                captureDue += Double(frames) * options.inputClockRatio
                let inputFrames = Int(Int64(captureDue.rounded(.down)) - captured)
                captured += Int64(inputFrames)
                let fileView = fileFloat.view(frames: inputFrames)
                // Held: silence until the capture's start time, the file's frame 0 on it.
                let from = options.capturesFromStartTime ? captureStart.sampleTime : 0
                let held = from > sampleTime ? Int(min(Int64(inputFrames), from - sampleTime)) : 0
                if held > 0 { fileView.prefix(held).clear() }
                var got = held
                do throws(AudioError) {
                    if held < inputFrames { got += try reader.read(into: fileView.slice(from: held, frames: inputFrames - held)) }
                } catch {
                    return error
                }
                if got < inputFrames {
                    fileView.slice(from: got, frames: inputFrames - got).clear()
                    ended.store(true, ordering: .releasing)
                }
                let view = inputFloat.view(frames: inputFrames)
                view.copy(from: fileView.upmixed(to: view.channelCount))
                input = view
            }
            let output = outputFloat?.view(frames: frames)
            output?.clear()
            let period = UInt64(Double(frames) * 1e9 / rate)
            handler.deviceCycle(
                input: input, output: output,
                time: DeviceCycleTime(
                    sampleTime: sampleTime, inputHostTime: host > period ? host - period : 0, outputHostTime: host))
            counters.cycles.add(1, ordering: .relaxed)
            let writtenBefore = sampleTime
            sampleTime += Int64(frames)
            if let writer, let output, writtenBefore < options.playbackFrames ?? .max {
                do throws(AudioError) {
                    try writer.write(output)
                } catch {
                    return error
                }
            }
        }
        return nil
    }
}

