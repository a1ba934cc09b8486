import FoundationEssentials
import Synchronization

/// What a live stream and a karaoke session share from the encoder on: the AAC encoder on its worker thread, and the
/// fan-out of its packets to every output — RTMP servers (each with its own bounded queue, so a slow server never
/// holds up the files or the others) and FLV, M4A or ADTS files — with their statistics.
///
/// The audio thread hands it blocks with ``push(_:sampleTime:hostTime:)`` (no allocation, no lock, no wait; a full
/// ring drops and counts); the worker encodes and delivers. Sample time 0 is the first sample encoded: every
/// output's timestamps start there.
final class EncodedOutputs: Sendable {
    let outputs: [LiveStreamSession.Output]
    let sampleRate: Double
    let encoder: AACEncoder
    let worker: AACEncodingWorker
    let publishers: [(LiveStreamSession.Output, RTMPPublisher)]
    /// The latest (sample time, host time) of what was pushed: when a packet's audio was captured, for the RTMP
    /// outputs' latency figures.
    let hostTimes = HostTimeAnchor()
    private let files = Locked<[(LiveStreamSession.Output, AACFileWriter)]>([])
    private let pushed = Atomic<Int64>(0)

    /// Checks the outputs (none twice, file folders exist) and makes the encoder and the publishers; nothing opens yet.
    /// - Throws: ``AudioError`` `.invalidParameter` (an output given twice, bad encoder settings), `.fileIO` (a
    ///   folder that does not exist), `.unsupportedSampleRate`.
    /// - Parameter pool: where the encoder and the files' writing run (the shared `la-work` threads by default).
    init(
        outputs: [LiveStreamSession.Output], sampleRate: Double, channelCount: Int, bitRate: Int,
        rtmp: RTMPPublisher.Configuration, bufferedSeconds: Double, pool: WorkerPool = .shared
    ) throws(AudioError) {
        var seen = Set<LiveStreamSession.Output>()
        for o in outputs where !seen.insert(o).inserted {
            throw AudioError(.invalidParameter, "output \(o) is given twice")
        }
        self.outputs = outputs
        self.sampleRate = sampleRate
        let encoder = try AACEncoder(
            settings: AACEncoderSettings(sampleRate: sampleRate, channelCount: channelCount, bitRate: bitRate))
        self.encoder = encoder
        var publishers: [(LiveStreamSession.Output, RTMPPublisher)] = []
        for output in outputs {
            switch output {
            case .rtmp(let url):
                publishers.append(
                    (output,
                     try RTMPPublisher(
                        url: url,
                        stream: AACStreamDescription(
                            sampleRate: sampleRate, channelCount: channelCount, bitRate: bitRate,
                            audioSpecificConfig: encoder.audioSpecificConfig),
                        configuration: rtmp)))
            case .file(let path):
                try Preflight.checkFolder(forWriting: path)
            }
        }
        self.publishers = publishers
        let fanOut = FanOut()
        worker = AACEncodingWorker(encoder: encoder, bufferedSeconds: bufferedSeconds, pool: pool) { packets in
            try fanOut.deliver(packets)
        }
        fanOut.outputs = self
    }

    /// Opens the files, connects to every RTMP server (all must accept), then starts the encoder.
    /// - Throws: ``AudioError`` from the first output that fails; whatever had opened is closed and files already
    ///   created are deleted.
    func start() async throws(AudioError) {
        var opened: [(LiveStreamSession.Output, AACFileWriter)] = []
        do throws(AudioError) {
            for output in outputs {
                if case .file(let path) = output {
                    opened.append((output, try AACFileWriter(path: path, encoder: encoder)))
                }
            }
            files.withLock { $0 = opened }
            for (_, publisher) in publishers {
                try await publisher.start()
            }
            try worker.start()
        } catch {
            // Every publisher, the one that failed too (its reconnecting task would run on); stop is safe in any state.
            for (_, publisher) in publishers { await publisher.stop(drainTimeout: 0) }
            for (_, writer) in opened { writer.discard() }
            files.withLock { $0 = [] }
            throw error
        }
    }

    /// Breaks off a ``start()`` in progress from another task: every publisher stops at once, so a start waiting for a
    /// server gives up now (and undoes what it opened) instead of waiting out its timeout.
    func interrupt() async {
        for (_, publisher) in publishers { await publisher.stop(drainTimeout: 0) }
    }

    /// Undoes a ``start()`` that succeeded when what follows it failed: publishers stop at once, files are deleted.
    func abandon() async {
        try? worker.finish()
        for (_, publisher) in publishers { await publisher.stop(drainTimeout: 0) }
        for (_, writer) in files.withLock({ $0 }) { writer.discard() }
        files.withLock { $0 = [] }
    }

    /// The audio thread: one block at `sampleTime` (0 = the first sample encoded), captured at `hostTime`.
    /// - Returns: false when the ring was full and the block was dropped (counted in ``droppedFrames``).
    @discardableResult
    func push(_ block: BufferView, sampleTime: Int64, hostTime: UInt64) -> Bool {
        hostTimes.update(sample: sampleTime, host: hostTime)
        pushed.store(sampleTime + Int64(block.frameCount), ordering: .relaxed)
        return worker.push(block, sampleTime: sampleTime)
    }

    /// Encodes what is buffered, completes the files (their length: `inputFrames`, default all pushed) and
    /// unpublishes (each RTMP output drains its queue first).
    /// - Returns: the first error: the encoder's, or a file's.
    func finish(inputFrames: Int64? = nil) async -> AudioError? {
        var failure: AudioError?
        do throws(AudioError) { try worker.finish() } catch { failure = error }
        let frames = inputFrames ?? framesPushed
        for (_, writer) in files.withLock({ $0 }) {
            do throws(AudioError) { try writer.finish(inputFrames: frames) } catch { if failure == nil { failure = error } }
        }
        for (_, publisher) in publishers { await publisher.stop() }
        return failure
    }

    /// Sample time after the last block pushed.
    var framesPushed: Int64 { pushed.load(ordering: .relaxed) }
    var packetsEncoded: Int { worker.packetsEncoded }
    var droppedFrames: Int64 { worker.droppedFrames }
    /// The error that stopped encoding or a file output.
    var failure: AudioError? { worker.failure }

    /// Each output's figures now, in the order given.
    var statistics: [LiveStreamSession.OutputStatistics] {
        let opened = files.withLock { $0 }
        var result: [LiveStreamSession.OutputStatistics] = []
        for output in outputs {
            if let p = publishers.first(where: { $0.0 == output })?.1 {
                result.append(LiveStreamSession.OutputStatistics(output: output, rtmp: p.currentStatistics, packetsWritten: 0))
            } else if let w = opened.first(where: { $0.0 == output })?.1 {
                result.append(LiveStreamSession.OutputStatistics(output: output, rtmp: nil, packetsWritten: w.packetsWritten))
            }
        }
        return result
    }

    /// The worker thread: every output gets every packet.
    fileprivate func deliver(_ packets: [AACPacket]) throws(AudioError) {
        for (_, writer) in files.withLock({ $0 }) { try writer.write(packets) }
        guard !publishers.isEmpty else { return }
        for packet in packets {
            let captured = hostTimes.hostTime(ofSample: max(0, packet.sampleTime), sampleRate: sampleRate)
            for (_, publisher) in publishers {
                publisher.send(aacFrame: packet.data, timestamp: packet.streamMilliseconds, captureTime: captured)
            }
        }
    }
}

/// Hands the worker's packets to the outputs (set once, right after the worker is made).
private final class FanOut: Sendable {
    private let link = WeakReference<EncodedOutputs>()
    var outputs: EncodedOutputs? {
        get { link.value }
        set { link.value = newValue }
    }
    func deliver(_ packets: [AACPacket]) throws(AudioError) { try outputs?.deliver(packets) }
}

/// The latest (sample time, host time) pair of the input, written on the audio thread and read on the worker
/// thread without locks (a sequence counter guards the pair).
final class HostTimeAnchor: Sendable {
    private let sequence = Atomic<UInt64>(0)
    private let sample = Atomic<Int64>(0)
    private let host = Atomic<UInt64>(0)

    func update(sample s: Int64, host h: UInt64) {
        sequence.add(1, ordering: .acquiringAndReleasing)
        sample.store(s, ordering: .releasing)
        host.store(h, ordering: .releasing)
        sequence.add(1, ordering: .acquiringAndReleasing)
    }

    /// When sample `s` was (or will be) captured, by the latest anchor; nil before the first.
    func hostTime(ofSample s: Int64, sampleRate: Double) -> UInt64? {
        for _ in 0..<100 {
            let before = sequence.load(ordering: .acquiring)
            if before & 1 == 1 { continue }
            let anchorSample = sample.load(ordering: .acquiring)
            let anchorHost = host.load(ordering: .acquiring)
            guard sequence.load(ordering: .acquiring) == before else { continue }
            if before == 0 { return nil }
            let delta = Double(s - anchorSample) / sampleRate * 1e9
            return UInt64(max(0, Double(anchorHost) + delta))
        }
        return nil
    }
}
