import AudioCore
import Synchronization

/// A buffer of captured audio in the microphone's client format, with the time of its first frame.
public struct CapturedBuffer: Sendable {
    /// The client format the samples are in.
    public let format: StreamFormat
    /// The samples: interleaved frames, or for a non-interleaved format one plane per channel, back to back.
    public let bytes: [UInt8]
    /// Frames in the buffer.
    public let frameCount: Int
    /// Frames since the stream started, on the device clock (continues across restarts and reconnects).
    public let sampleTime: Int64
    /// CLOCK_MONOTONIC nanoseconds when the first frame reached the device.
    public let hostTime: UInt64

    /// The sample time in milliseconds (derived from sample time, never from the wall clock).
    public var milliseconds: Double { Double(sampleTime) * 1000 / format.sampleRate }

    /// Calls `body` with a view of the samples (for ``/AudioCore/PCMConversion`` and friends).
    public func withRawView<R>(_ body: (RawBufferView) throws -> R) rethrows -> R {
        var copy = bytes
        return try copy.withUnsafeMutableBytes { raw in
            try body(
                RawBufferView(
                    format: format, base: raw.baseAddress!, planeStride: frameCount * format.bytesPerFrame,
                    frameCount: frameCount))
        }
    }

    /// The samples as Float32, one array per channel.
    public func floatChannels() -> [[Float]] {
        let buffer = PCMBuffer(channelCount: format.channelCount, capacity: max(1, frameCount))
        buffer.frameLength = frameCount
        withRawView { PCMConversion.decode($0, into: buffer.view) }
        return (0..<format.channelCount).map { buffer.channelArray($0) }
    }
}

/// The microphone: capture from a device (ALSA, JACK or a virtual WAV file) in the client format of your choice —
/// 48 kHz mono Int16 as iOS capture code asks for, or Float32 — delivered to Swift code as an `AsyncStream` of
/// ``CapturedBuffer``s.
///
/// The device's real-time thread copies each period into a single-producer/single-consumer ring of slots and
/// never waits: when every slot is taken (the consumer is too slow) the period is dropped and ``overflowCount``
/// counts it. The stream reads straight from that ring — the ring is the only buffer, about ``bufferedSeconds`` of
/// audio — and a small waker thread resumes a waiting consumer when the real-time thread posts. While
/// ``isMuted``, buffers keep coming with their timestamps, full of zeros. ``start()``, ``stop()`` and
/// ``restart()`` may be called in any order; sample time continues. ``finish()`` stops and ends the stream.
///
/// Device faults, xruns and reconnects arrive on ``events``.
public final class MicrophoneSource: Sendable {
    /// The client format the buffers come in (the I/O unit's input format).
    public let format: StreamFormat
    /// The I/O unit the microphone captures through. Its capture handler is the microphone's: start and stop it
    /// through the microphone, not directly.
    public let io: IOUnit
    /// The captured buffers, in order, until ``finish()``. One consumer.
    public let buffers: AsyncStream<CapturedBuffer>
    /// Seconds of audio the ring holds for a slow consumer.
    public let bufferedSeconds: Double
    private let ring: SlotRingBuffer
    private let slotFrames: Int
    private let muted = Atomic<Bool>(false)
    private let overflows = Atomic<Int>(0)
    private let delivered = Atomic<Int>(0)
    private let wake = WakeSignal()
    private let wakerRunning = Atomic<Bool>(false)
    /// The waker thread, while running; its lock also serialises start and stop.
    private let lock = Locked<WorkerThread?>(nil)
    /// The consumer waiting for a buffer, and whether the stream has ended.
    private let waiting = Locked<(continuation: CheckedContinuation<Void, Never>?, finished: Bool)>((nil, false))

    /// A microphone on a device of its own: an I/O unit with capture only, in the client format the arguments
    /// describe (by default 48 kHz mono Int16 interleaved, as iOS capture code asks for). Nothing is opened until
    /// ``start()``.
    /// - Parameters:
    ///   - device: the device name (ALSA PCM, JACK client, or the WAV file for `.virtual`); nil for the default.
    ///   - backend: the sound system (default ALSA).
    ///   - sampleRate: the client format's sample rate in Hz (default 48 kHz).
    ///   - channels: the client format's channel count (default 1).
    ///   - sampleType: the client format's sample type (default Int16).
    ///   - interleaved: whether the client format's channels are interleaved (default true).
    ///   - periodFrames: frames per period asked of the device (default 1024).
    ///   - periodCount: periods in the device buffer asked for (default 3).
    ///   - reconnect: whether to reopen the device after a fault (default true).
    ///   - jackServer: the JACK server's name (nil: `JACK_DEFAULT_SERVER` or the default).
    ///   - virtual: how a virtual device behaves.
    ///   - bufferedSeconds: how much audio the ring holds for a slow consumer before counting overflows (default 2).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for an impossible format, `.invalidParameter` for bad
    ///   buffering.
    public convenience init(
        device: String? = nil, backend: DeviceBackend = .alsa, sampleRate: Double = 48_000, channels: Int = 1,
        sampleType: SampleType = .int16, interleaved: Bool = true, periodFrames: Int = 1024, periodCount: Int = 3,
        reconnect: Bool = true, jackServer: String? = nil, virtual: VirtualDeviceOptions = VirtualDeviceOptions(),
        bufferedSeconds: Double = 2
    ) throws(AudioError) {
        let format = try StreamFormat(
            sampleRate: sampleRate, channelCount: channels, sampleType: sampleType, interleaved: interleaved)
        try self.init(
            io: IOUnit(
                IOUnit.Configuration(
                    backend: backend, inputFormat: format, inputDevice: device, periodFrames: periodFrames,
                    periodCount: periodCount, reconnect: reconnect, jackServer: jackServer, virtual: virtual)),
            bufferedSeconds: bufferedSeconds)
    }

    /// A microphone over an I/O unit of your own: capture (bus 1) in `io`'s input format reaches ``buffers`` while
    /// the same unit plays (bus 0) — the karaoke case, where the voice is monitored and recorded at once. Takes
    /// the unit's capture handler; start and stop the unit through this source.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` when `io` has no input bus, `.invalidParameter` for
    ///   buffering that is not a positive number of seconds, `.invalidState` when `io` is running.
    public init(io: IOUnit, bufferedSeconds: Double = 2) throws(AudioError) {
        guard let format = io.configuration.inputFormat else {
            throw AudioError(.invalidFormat, "a microphone needs an I/O unit with capture enabled (an input format for bus 1)")
        }
        guard bufferedSeconds > 0, bufferedSeconds.isFinite else {
            throw AudioError(.invalidParameter, "the microphone's buffering must be a positive number of seconds, got \(bufferedSeconds)")
        }
        self.format = format
        self.io = io
        self.bufferedSeconds = bufferedSeconds
        let configuration = io.configuration
        slotFrames = max(configuration.periodFrames, configuration.virtual.maximumCycle(period: configuration.periodFrames))
        let bytesPerSlot = slotFrames * format.bytesPerFrame * format.bufferCount
        let slots = max(4, Int((bufferedSeconds * format.sampleRate / Double(slotFrames)).rounded(.up)))
        ring = SlotRingBuffer(slotCount: slots, slotBytes: bytesPerSlot)
        // The stream reaches its source without keeping it alive.
        let link = WeakReference<MicrophoneSource>()
        buffers = AsyncStream(unfolding: { await link.value?.next() })
        link.value = self
        let handler: CaptureHandler = { [unowned self] raw, stamp in capture(raw, stamp) }
        try io.setCaptureHandler(handler)
    }

    deinit { finish() }

    /// Device events: start, xruns, faults, reconnects, warnings.
    public var events: AsyncStream<DeviceEvent> { io.events }

    /// While true, buffers are zeros (timestamps go on). Any thread.
    public var isMuted: Bool {
        get { muted.load(ordering: .relaxed) }
        set { muted.store(newValue, ordering: .relaxed) }
    }

    /// Periods dropped because the consumer fell behind (the ring was full).
    public var overflowCount: Int { overflows.load(ordering: .relaxed) }
    /// Buffers delivered to the stream.
    public var deliveredCount: Int { delivered.load(ordering: .relaxed) }

    /// Opens the device and starts capturing. Returns what the device granted.
    @discardableResult
    public func start() throws(AudioError) -> DeviceGrant {
        try lock.withLock { (waker: inout WorkerThread?) throws(AudioError) in
            if waiting.withLock({ $0.finished }) {
                throw AudioError(.invalidState, "the microphone has finished; make a new one")
            }
            if !wakerRunning.exchange(true, ordering: .acquiringAndReleasing) {
                waker = try WorkerThread(name: "la-mic-waker") { [self] in wakeConsumer() }
            }
            return try io.start()
        }
    }

    /// Stops capturing (the stream stays open for a later ``start()``). Buffers already captured stay readable.
    public func stop() {
        lock.withLock { waker in
            io.stop()
            guard wakerRunning.exchange(false, ordering: .acquiringAndReleasing) else { return }
            wake.signal()
            waker?.join()
            waker = nil
        }
    }

    /// Stops and starts again (a new device connection; sample time continues).
    @discardableResult
    public func restart() throws(AudioError) -> DeviceGrant {
        stop()
        return try start()
    }

    /// Stops and ends ``buffers`` once the buffers already captured have been read.
    public func finish() {
        stop()
        let waiter = waiting.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.continuation = nil }
            return state.continuation
        }
        waiter?.resume()
    }

    // MARK: Real-time side

    /// Copies one captured buffer into ring slots (split when longer than a slot), or counts an overflow.
    private func capture(_ raw: RawBufferView, _ stamp: RenderTimeStamp) {
        let isMuted = muted.load(ordering: .relaxed)
        let planes = raw.format.bufferCount
        let bytesPerFrame = raw.format.bytesPerFrame
        var done = 0
        while done < raw.frameCount {
            let frames = raw.frameCount - done < slotFrames ? raw.frameCount - done : slotFrames
            guard let slot = ring.beginWrite() else {
                overflows.add(1, ordering: .relaxed)
                break
            }
            let planeBytes = frames * bytesPerFrame
            var p = 0
            while p < planes {
                let destination = slot + p * planeBytes
                if isMuted {
                    destination.initializeMemory(as: UInt8.self, repeating: 0, count: planeBytes)
                } else {
                    destination.copyMemory(from: raw.plane(p) + done * bytesPerFrame, byteCount: planeBytes)
                }
                p += 1
            }
            ring.commitWrite(
                byteCount: planeBytes * planes, frames: frames,
                timeStamp: RenderTimeStamp(sampleTime: stamp.sampleTime + Int64(done), hostTime: stamp.hostTime))
            done += frames
        }
        wake.signal()
    }

    // MARK: Consumer side

    /// The waker thread: resumes a waiting consumer whenever the real-time thread posts.
    private func wakeConsumer() {
        while wakerRunning.load(ordering: .acquiring) {
            wake.wait(timeout: 0.1)
            resumeWaiter(onlyIfReady: true)
        }
    }

    private func resumeWaiter(onlyIfReady: Bool) {
        let waiter = waiting.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let c = state.continuation, !onlyIfReady || ring.committedCount > 0 else { return nil }
            state.continuation = nil
            return c
        }
        waiter?.resume()
    }

    /// The stream's next element: the oldest captured slot, waiting for one if the ring is empty; nil once finished
    /// and drained.
    private func next() async -> CapturedBuffer? {
        while true {
            if let slot = ring.peek() {
                let buffer = CapturedBuffer(
                    format: format, bytes: Array(slot.bytes), frameCount: slot.frames,
                    sampleTime: slot.timeStamp.sampleTime, hostTime: slot.timeStamp.hostTime)
                ring.release()
                delivered.add(1, ordering: .relaxed)
                return buffer
            }
            if waiting.withLock({ $0.finished }) { return nil }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let resumeNow = waiting.withLock { state -> Bool in
                    if state.finished || ring.committedCount > 0 { return true }
                    state.continuation = c
                    return false
                }
                if resumeNow { c.resume() }
            }
        }
    }
}
