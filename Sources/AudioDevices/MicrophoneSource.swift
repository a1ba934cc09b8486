import AudioCore
import Synchronization

/// A buffer of captured audio in the microphone's client format, with the time of its first frame.
public struct CapturedBuffer: Sendable {
    /// The client format the samples are in.
    public let format: StreamFormat
    /// The samples: interleaved frames, or for a non-interleaved format one plane per channel, back to back.
    public let bytes: [UInt8]
    public let frameCount: Int
    /// Frames since the stream started, on the device clock (continues across restarts and reconnects).
    public let sampleTime: Int64
    /// CLOCK_MONOTONIC nanoseconds when the first frame reached the device.
    public let hostTime: UInt64

    /// The sample time in milliseconds (derived from sample time, never from the wall clock).
    public var milliseconds: Double { Double(sampleTime) * 1000 / format.sampleRate }

    /// Calls `body` with a view of the samples (for ``PCMConversion`` and friends).
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
/// the seeds' 48 kHz mono Int16, or Float32 — delivered to Swift code as an `AsyncStream` of ``CapturedBuffer``s.
///
/// The device's real-time thread copies each period into a single-producer/single-consumer ring of slots and
/// never waits: when the ring is full (the consumer is too slow) the period is dropped and ``overflowCount`` counts
/// it. A reader thread turns slots into ``CapturedBuffer``s. While ``isMuted``, buffers keep coming with their
/// timestamps, full of zeros. ``start()``, ``stop()`` and ``restart()`` may be called in any order; sample time
/// continues. ``finish()`` stops and ends the stream.
///
/// Device faults, xruns and reconnects arrive on ``events``.
public final class MicrophoneSource: @unchecked Sendable {
    public let format: StreamFormat
    public let io: IOUnit
    /// The captured buffers, in order, until ``finish()``.
    public let buffers: AsyncStream<CapturedBuffer>
    private let continuation: AsyncStream<CapturedBuffer>.Continuation
    private let ring: SlotRingBuffer
    private let slotFrames: Int
    private let muted = Atomic<Bool>(false)
    private let overflows = Atomic<Int>(0)
    private let delivered = Atomic<Int>(0)
    private let wake = WakeSignal()
    private let readerRunning = Atomic<Bool>(false)
    private var reader: WorkerThread?
    private let lock = Mutex<Void>(())

    /// - Parameters:
    ///   - device: the device name (ALSA PCM, JACK client, or the WAV file for `.virtual`); nil for the default.
    ///   - sampleType, interleaved: the client format's layout (the seeds: Int16 interleaved).
    ///   - periodFrames, periodCount: the device buffering asked for.
    ///   - bufferedSeconds: how much audio the ring holds for a slow consumer before counting overflows.
    /// - Throws: ``AudioError`` `.invalidFormat` for an impossible format.
    public init(
        device: String? = nil, backend: DeviceBackend = .alsa, sampleRate: Double = 48_000, channels: Int = 1,
        sampleType: SampleType = .int16, interleaved: Bool = true, periodFrames: Int = 1024, periodCount: Int = 3,
        reconnect: Bool = true, jackServer: String? = nil, virtual: VirtualDeviceOptions = VirtualDeviceOptions(),
        bufferedSeconds: Double = 2
    ) throws(AudioError) {
        format = try StreamFormat(
            sampleRate: sampleRate, channelCount: channels, sampleType: sampleType, interleaved: interleaved)
        io = try IOUnit(
            IOUnit.Configuration(
                backend: backend, inputFormat: format, inputDevice: device, periodFrames: periodFrames,
                periodCount: periodCount, reconnect: reconnect, jackServer: jackServer, virtual: virtual))
        slotFrames = max(periodFrames, virtual.maximumCycle(period: periodFrames))
        let bytesPerSlot = slotFrames * format.bytesPerFrame * format.bufferCount
        let slots = max(8, Int((bufferedSeconds * sampleRate / Double(slotFrames)).rounded(.up)))
        ring = SlotRingBuffer(slotCount: slots, slotBytes: bytesPerSlot)
        (buffers, continuation) = AsyncStream.makeStream(of: CapturedBuffer.self, bufferingPolicy: .unbounded)
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
        try lock.withLock { _ throws(AudioError) in
            if !readerRunning.exchange(true, ordering: .acquiringAndReleasing) {
                reader = try WorkerThread(name: "la-mic-reader") { [self] in drain() }
            }
            return try io.start()
        }
    }

    /// Stops capturing (the stream stays open for a later ``start()``). Buffers already captured are delivered.
    public func stop() {
        lock.withLock { _ in
            io.stop()
            stopReader()
        }
    }

    /// Stops and starts again (a new device connection; sample time continues).
    @discardableResult
    public func restart() throws(AudioError) -> DeviceGrant {
        stop()
        return try start()
    }

    /// Stops and ends ``buffers``.
    public func finish() {
        stop()
        continuation.finish()
    }

    private func stopReader() {
        guard readerRunning.exchange(false, ordering: .acquiringAndReleasing) else { return }
        wake.signal()
        reader?.join()
        reader = nil
        deliverPending()
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

    // MARK: Reader side

    private func drain() {
        while readerRunning.load(ordering: .acquiring) {
            wake.wait(timeout: 0.1)
            deliverPending()
        }
    }

    private func deliverPending() {
        while let slot = ring.peek() {
            let buffer = CapturedBuffer(
                format: format, bytes: Array(slot.bytes), frameCount: slot.frames, sampleTime: slot.timeStamp.sampleTime,
                hostTime: slot.timeStamp.hostTime)
            ring.release()
            delivered.add(1, ordering: .relaxed)
            continuation.yield(buffer)
        }
    }
}
