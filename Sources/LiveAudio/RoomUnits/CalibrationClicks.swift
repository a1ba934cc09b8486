import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Calibration on the running device: plays clicks into the headphones' mix and records the microphone meanwhile,
/// both on the graph's timeline, so the round trip is measured with the very streams the song will use (a sound
/// server gives each new stream a latency of its own: a measurement on streams opened for it alone can miss by tens
/// of milliseconds). Real-time safe: the recording is allocated before it is armed.
final class CalibrationClicks: RenderUnit, @unchecked Sendable {
    // Unchecked Sendable: recording/interval/total handed over by the `from` atomic (set before it is stored, read after `rendered`), not by a stop
    let core: UnitCore
    static let clicks = 3
    private let template: UnsafeMutableBufferPointer<Float>
    private let from = Atomic<Int64>(.max)
    /// The sample time after the last cycle this unit rendered, stored after its writes (releasing): the control
    /// thread reads the recording only once this has passed its end (the timeline tap ahead of this unit in the
    /// graph stores its time before this unit has written the cycle).
    private let rendered = Atomic<Int64>(.min)
    // Set by the control thread before `from` is published.
    private var interval = 0
    private var total = 0
    private var recording: UnsafeMutableBufferPointer<Float>?

    init(format: StreamFormat, micChannels: Int) throws(AudioError) {
        let samples = LatencyMeter.clickSamples(sampleRate: format.sampleRate)
        template = .allocate(capacity: samples.count)
        _ = template.initialize(from: samples)
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        let mic = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: micChannels)
        core = UnitCore(kind: "calibration", inputs: [f, mic], outputs: [f])
    }

    deinit {
        template.deallocate()
        recording?.deallocate()
    }

    /// Plays ``clicks`` clicks from sample time `start`, one every `interval` frames, and records the microphone
    /// until a further interval has passed. Control thread: before the device starts, or again with the same
    /// interval once ``isComplete`` (every later cycle lies past the last recording, so none writes to it).
    func arm(at start: Int64, interval: Int) {
        if let recording, interval == self.interval {
            recording.update(repeating: 0)
        } else {
            precondition(recording == nil, "a calibration is armed again with its interval")
            self.interval = interval
            total = (Self.clicks + 1) * interval
            let buffer = UnsafeMutableBufferPointer<Float>.allocate(capacity: total)
            buffer.initialize(repeating: 0)
            recording = buffer
        }
        from.store(start, ordering: .releasing)
    }

    /// Forgets a calibration, with the device stopped (a start that failed; the next arms again).
    func disarm() {
        from.store(.max, ordering: .releasing)
        recording?.deallocate()
        recording = nil
    }

    /// Whether the armed calibration's recording is complete: the cycle that wrote its last sample has returned.
    var isComplete: Bool {
        let start = from.load(ordering: .acquiring)
        return start != .max && rendered.load(ordering: .acquiring) >= start + Int64(total)
    }

    /// Each click's round trip in frames (those found), once ``isComplete``.
    func roundTrips() -> [Int] {
        guard let recording else { return [] }
        let emitted = (0..<Self.clicks).map { $0 * interval }
        return LatencyMeter.locateClicks(
            in: UnsafeBufferPointer(recording), emittedAt: emitted, within: interval, sampleRate: sampleRate
        ).frames
    }

    private var sampleRate: Double { outputFormats[0].sampleRate }

    func render(_ context: RenderContext) {
        defer { rendered.store(context.timeStamp.sampleTime + Int64(context.frameCount), ordering: .releasing) }
        let output = context.output(0)
        output.copy(from: context.input(0))
        let start = from.load(ordering: .acquiring)
        guard start != .max, let recording else { return }
        let t0 = context.timeStamp.sampleTime - start
        let frames = context.frameCount
        if t0 >= Int64(total) || t0 + Int64(frames) <= 0 { return }
        let mic = context.input(1)[0]
        let clickLength = template.count
        for i in 0..<frames {
            let t = Int(t0) + i
            guard t >= 0, t < total else { continue }
            recording[t] = mic[i]
            let k = t % interval
            if t < Self.clicks * interval, k < clickLength {
                for c in 0..<output.channelCount { output[c][i] += template[k] }
            }
        }
    }
}
