import AudioCore
import AudioGraph
import Synchronization

/// Tracks the pitch of a voice: a ``PitchEstimator`` (YIN) over its input — mixed to mono — one estimate every
/// 10 ms (frequency, confidence, voiced or not), stamped in the graph's time. Passes its input through unchanged,
/// so it sits inline in a chain or, as a graph sink, beside one (a session puts it on the dry voice after voice
/// processing). Node type `pitchTracker` in graph files.
///
/// - **Real time** (``/AudioGraph/RenderUnit/willRender(_:)`` told
///   ``/AudioGraph/RenderingMode/realTime(maximumCycleFrames:)``): the render thread copies the voice into a ring (a
///   second, and at least the largest cycle) and wakes a job on a ``/AudioCore/WorkerPool`` (the shared `la-work`
///   threads), which runs the estimator — the render thread does no analysis, allocates nothing, locks nothing.
///   Frames that find the ring full are dropped and counted (``droppedFrames``): the estimator starts again where the
///   voice resumes, so estimates keep their times; so it does when the graph's time jumps (a device reopened).
/// - **Offline** (told so, or never told): the estimator runs on the rendering thread, so an offline render gets
///   every estimate before its next cycle.
/// - **Reading**: ``latest`` (any thread) for a display; ``readEstimates(_:)`` (one reader thread) drains every
///   estimate in order for a scorer — up to 4,096 (41 s at the default hop) are held for it, later ones counted in
///   ``droppedEstimates``.
/// - **Time**: an estimate's ``/AudioCore/PitchEstimate/time`` is seconds of the graph's sample time at the voice it
///   describes (the estimator's stamp plus the sample time of the first frame its clock counts from: the first
///   rendered since the reset, or the first after a break).
public final class PitchTrackerUnit: RenderUnit {
    public let core: UnitCore
    /// The estimator's range, hop and thresholds, as given at init.
    public let configuration: PitchEstimator.Configuration

    private let shared: Shared
    private let job: WorkerPool.Job

    /// What the render thread, the worker and the readers share. The job owns it too.
    private final class Shared: Sendable {
        let rate: Double
        let ring: FrameRingBuffer
        /// The voice mixed to mono: the render thread's while it renders, the control side's in prepare.
        let mono = RenderThreadBound(PCMBuffer(channelCount: 1, capacity: 4096))
        /// The estimator and what the worker reads the ring into: the worker's in real time, the rendering thread's
        /// offline, the control side's in reset — under a lock none of them holds for long, and which a real-time
        /// render thread never takes.
        let analysis: Mutex<Analysis>
        struct Analysis: ~Copyable {
            let estimator: PitchEstimator
            let scratch = PCMBuffer(channelCount: 1, capacity: 4096)
        }
        let estimates: EstimateRing
        let latestEstimate = Mutex<PitchEstimate?>(nil)
        let realTime = Atomic<Bool>(false)
        /// The sample time of the first frame the estimator's clock counts from (`Int64.min` before the first frame
        /// since the reset).
        let firstSampleTime = Atomic<Int64>(.min)
        let droppedFrames = Atomic<Int>(0)
        /// Breaks in what the ring holds — frames that found no room, or a jump of the graph's time — not yet
        /// handled: the ring position (frames written) of the first and of the last, and the sample time the voice
        /// resumes at after the last. The worker analyses what came before the first, drops what lies between the
        /// two (only repeated breaks leave anything there), and starts the estimator's clock again at the last.
        /// -1: none pending.
        let breakFirst = Atomic<Int>(-1)
        let breakLast = Atomic<Int>(-1)
        let breakSampleTime = Atomic<Int64>(0)
        /// The render thread's: the sample time the next cycle should start at (a jump is a break).
        let expectedSampleTime = RenderThreadBound<Int64>(.min)

        init(rate: Double, configuration: PitchEstimator.Configuration) throws(AudioError) {
            self.rate = rate
            // A second of voice, and at least the largest cycle a graph renders (65,536 frames).
            ring = FrameRingBuffer(channelCount: 1, capacity: max(Int(rate), 65_536))
            let estimator = try PitchEstimator(sampleRate: rate, configuration: configuration)
            analysis = Mutex(Analysis(estimator: estimator))
            estimates = EstimateRing(capacity: 4096)
        }

        /// Runs the estimator over `count` samples and hands out what it finds.
        func analyse(_ samples: UnsafePointer<Float>, count: Int, estimator: PitchEstimator) {
            handOut(estimator) { estimator, emit in estimator.process(samples, count: count, emit: emit) }
        }

        /// What the estimator hands out — by `body`, given it and the hand-out — stamped in the graph's time,
        /// queued for readers and kept as the latest.
        func handOut(_ estimator: PitchEstimator, _ body: (PitchEstimator, (PitchEstimate) -> Void) -> Void) {
            let base = Double(max(0, firstSampleTime.load(ordering: .acquiring))) / rate
            var newest: PitchEstimate?
            body(estimator) { e in
                var e = e
                e.time += base
                estimates.push(e)
                newest = e
            }
            if let newest { latestEstimate.withLock { $0 = newest } }
        }

        /// The worker's turn: everything in the ring through the estimator, up to a break and on from it.
        func pass(last: Bool) -> WorkerPool.Turn {
            if last { return .idle }
            analysis.withLock { a in
                while true {
                    let lastBreak = breakLast.load(ordering: .acquiring)
                    if lastBreak >= 0 {
                        var firstBreak = breakFirst.load(ordering: .relaxed)
                        if firstBreak < 0 || firstBreak > lastBreak { firstBreak = lastBreak }
                        let resume = breakSampleTime.load(ordering: .relaxed)
                        // Up to the first break the voice is whole: analysed as it came.
                        while ring.framesRead < firstBreak {
                            let want = min(a.scratch.capacity, firstBreak - ring.framesRead)
                            let n = ring.read(into: a.scratch.view(frames: want))
                            if n == 0 { break }
                            analyse(a.scratch.view(frames: n)[0].baseAddress!, count: n, estimator: a.estimator)
                        }
                        ring.discard(lastBreak - ring.framesRead)
                        // The estimate waiting for its look-ahead is the voice's last before the break.
                        handOut(a.estimator) { estimator, emit in estimator.flush(emit: emit) }
                        a.estimator.reset()
                        firstSampleTime.store(resume, ordering: .releasing)
                        // A newer break meanwhile stays pending: the next round takes it.
                        if breakLast.compareExchange(expected: lastBreak, desired: -1, ordering: .acquiringAndReleasing).exchanged {
                            breakFirst.store(-1, ordering: .releasing)
                        }
                        continue
                    }
                    let n = ring.read(into: a.scratch.view(frames: min(a.scratch.capacity, ring.availableToRead)))
                    if n == 0 { return }
                    analyse(a.scratch.view(frames: n)[0].baseAddress!, count: n, estimator: a.estimator)
                }
            }
            return .idle
        }

        /// Marks a break at the ring's write position: the voice resumes there at `sampleTime`. Render thread.
        func markBreak(resumingAt sampleTime: Int64) {
            let position = ring.framesWritten
            if breakFirst.load(ordering: .acquiring) < 0 { breakFirst.store(position, ordering: .relaxed) }
            breakSampleTime.store(sampleTime, ordering: .relaxed)
            breakLast.store(position, ordering: .releasing)
        }
    }

    /// - Parameters:
    ///   - format: the input's format (any channel count: the channels are averaged).
    ///   - configuration: the estimator's range, hop and thresholds.
    ///   - pool: where the real-time analysis runs.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format the graph cannot carry, what
    ///   ``PitchEstimator`` throws for the rate or configuration, `.resourceUnavailable` when the pool's thread cannot
    ///   start.
    public init(
        format: StreamFormat, configuration: PitchEstimator.Configuration = .init(), pool: WorkerPool = .shared
    ) throws(AudioError) {
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        self.configuration = configuration
        let shared = try Shared(rate: f.sampleRate, configuration: configuration)
        self.shared = shared
        job = try pool.add("pitch tracker") { last in shared.pass(last: last) }
        core = UnitCore(kind: "pitchTracker", inputs: [f], outputs: [f])
    }

    deinit { job.finish() }

    /// Seconds between estimates.
    public var estimateInterval: Double { configuration.hop }

    /// The newest estimate, or nil before the first. Any thread.
    public var latest: PitchEstimate? { shared.latestEstimate.withLock { $0 } }

    /// Hands every estimate made since the last call to `body`, in order. One reader thread at a time.
    public func readEstimates(_ body: (PitchEstimate) -> Void) { shared.estimates.drain(body) }

    /// Input frames dropped because the worker fell a second behind.
    public var droppedFrames: Int { shared.droppedFrames.load(ordering: .relaxed) }
    /// Estimates no reader took before 4,096 more were made.
    public var droppedEstimates: Int { shared.estimates.dropped }

    public func willRender(_ mode: RenderingMode) {
        shared.realTime.store(mode != .offline, ordering: .releasing)
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        shared.mono.whileStopped = PCMBuffer(channelCount: 1, capacity: spec.maximumFrames)
    }

    /// Starts the time again from the next frame rendered and clears the estimator (not the estimates unread).
    public func reset() {
        shared.analysis.withLock { a in
            shared.ring.reset()
            shared.handOut(a.estimator) { estimator, emit in estimator.flush(emit: emit) }
            a.estimator.reset()
        }
        shared.breakLast.store(-1, ordering: .releasing)
        shared.breakFirst.store(-1, ordering: .releasing)
        shared.expectedSampleTime.whileStopped = .min
        shared.firstSampleTime.store(.min, ordering: .releasing)
        shared.latestEstimate.withLock { $0 = nil }
    }

    public func render(_ context: RenderContext) {
        let input = context.input(0)
        context.output(0).copy(from: input)
        let s = shared
        let n = context.frameCount
        guard n > 0 else { return }
        let t0 = context.timeStamp.sampleTime
        if s.firstSampleTime.load(ordering: .relaxed) == .min, s.breakLast.load(ordering: .relaxed) < 0 {
            s.firstSampleTime.store(t0, ordering: .releasing)
        } else if s.expectedSampleTime.onRenderThread != .min, t0 != s.expectedSampleTime.onRenderThread {
            // The graph's time jumped (a device reopened): the estimator's clock starts again here.
            s.markBreak(resumingAt: t0)
        }
        s.expectedSampleTime.onRenderThread = t0 + Int64(n)
        // Mono: the channels' mean.
        let mono = s.mono.onRenderThread.view(frames: n)
        let m = mono[0].baseAddress!
        let gain = 1 / Float(input.channelCount)
        m.update(repeating: 0, count: n)
        for c in 0..<input.channelCount { _ = VectorOps.multiplyAdd(input[c].baseAddress!, gain: gain, into: m, count: n) }
        let put = s.ring.write(mono)
        if put < n {
            // The worker is a second behind: what did not fit is lost, and the voice resumes with the next cycle.
            s.droppedFrames.add(n - put, ordering: .relaxed)
            s.markBreak(resumingAt: t0 + Int64(n))
        }
        if s.realTime.load(ordering: .relaxed) {
            job.wake()
        } else {
            // Offline: no deadline; the worker's pass, here, before the next cycle.
            _ = s.pass(last: false)
        }
    }
}

/// A single-producer single-consumer ring of estimates: the analysis pushes (never blocking: a full ring drops and
/// counts), one reader drains.
final class EstimateRing: @unchecked Sendable {
    // Unchecked Sendable: slots below `written` and at or above `read` are the producer's, the others the reader's;
    // the two counters are atomics that order the hand-over.
    private let slots: UnsafeMutablePointer<PitchEstimate>
    private let capacity: Int
    private let written = Atomic<Int>(0)
    private let read = Atomic<Int>(0)
    private let droppedCount = Atomic<Int>(0)

    init(capacity: Int) {
        self.capacity = capacity
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: PitchEstimate(time: 0, frequency: 0, confidence: 0, voiced: false), count: capacity)
    }

    deinit { slots.deallocate() }

    var dropped: Int { droppedCount.load(ordering: .relaxed) }

    func push(_ e: PitchEstimate) {
        let w = written.load(ordering: .relaxed)
        guard w - read.load(ordering: .acquiring) < capacity else {
            droppedCount.add(1, ordering: .relaxed)
            return
        }
        slots[w % capacity] = e
        written.store(w + 1, ordering: .releasing)
    }

    func drain(_ body: (PitchEstimate) -> Void) {
        var r = read.load(ordering: .relaxed)
        let w = written.load(ordering: .acquiring)
        while r < w {
            body(slots[r % capacity])
            r += 1
            read.store(r, ordering: .releasing)
        }
    }
}
