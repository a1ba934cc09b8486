import AudioCore
import Synchronization

/// Plays a graph that needs no live input (a file player and what processes it: a time-pitch, effects) rendered
/// ahead of time on a worker thread of its own, so its work — bursts included — never lands on the thread that
/// plays it.
///
/// The worker (`la-song`) renders the inner graph in blocks into a ring, keeping ``lookAheadFrames`` queued; this
/// unit, a source in the playing graph, copies the ring to its output from a sample time on, and wakes the worker
/// as the ring drains. What happens after this unit (volumes, mutes, mixing) is as immediate as ever; a change
/// inside the inner graph (a key or tempo, a seek) is heard once what is queued has played — unless it is made
/// through ``perform(_:)``, which runs it on the worker between two blocks and drops what was queued before it
/// (crossfaded over ``flushFadeFrames``), so a seek, a pause or a new region is heard at once.
///
/// Frame k after the start time is frame k of the inner graph's output: the sample time the inner graph renders
/// at is its own, from 0. A ring that runs dry (the worker late) plays silence for the missing frames and counts
/// an underrun; the frames come later (the song is late by them, and what is recorded after this unit stays
/// consistent with what was heard).
///
/// Real-time safe on the playing side: copies, atomics and a semaphore post; no lock, no allocation.
public final class RenderAheadSource: RenderUnit {
    public let core: UnitCore
    /// The graph rendered ahead: its output is this unit's.
    public let graph: RenderGraph
    /// Frames the worker renders at a time.
    public let blockFrames: Int
    /// The look-ahead when the playing cycles are short: 20 ms.
    public static let minimumLookAhead = 0.02
    /// Frames over which what is dropped by ``perform(_:)`` fades out: 5 ms.
    public let flushFadeFrames: Int

    private let ring: FrameRingBuffer
    private let renderer: OfflineRenderer
    private let wake = WakeSignal()
    /// The playing side's sample time at which frame 0 of the ring plays (.max: not yet).
    private let startTime = Atomic<Int64>(.max)
    /// The ring's frame count before which everything is to be dropped (set by the worker after a change).
    private let flushBefore = Atomic<Int>(0)
    private let target = Atomic<Int>(0)
    private let underrunCount = Atomic<Int>(0)
    private let worker = Mutex<WorkerThread?>(nil)
    private let stopping = Atomic<Bool>(false)
    /// A change waiting for the worker, whether the worker takes changes, the first error.
    private struct Control {
        var pending: Pending?
        var running = false
        var failure: AudioError?
    }
    private let control = Mutex(Control())
    /// One ``perform(_:)`` at a time.
    private let performing = Mutex(())
    private final class Pending: Sendable {
        let body: @Sendable () throws(AudioError) -> Void
        let done = WakeSignal()
        let error = Mutex<AudioError?>(nil)
        init(_ body: @escaping @Sendable () throws(AudioError) -> Void) { self.body = body }
    }

    private struct RenderState: ~Copyable {
        /// What a flush dropped, faded out over the next cycles.
        let tail: PCMBuffer
        var tailFrames = 0
        var tailPlayed = 0
        /// Frames have come since the start or the last flush: a short ring is an underrun now.
        var flowing = false

        init(channelCount: Int, frames: Int) {
            tail = PCMBuffer(channelCount: channelCount, capacity: max(1, frames))
        }
    }
    private let state: RenderThreadBound<RenderState>

    /// - Parameters:
    ///   - graph: the graph to render ahead (initialized here); nothing reads a live input in it.
    ///   - maximumCycleFrames: the most frames a cycle of the playing graph asks for.
    ///   - blockFrames: frames the worker renders at a time (at most the inner graph's maximum).
    /// - Throws: ``AudioError`` from the graph's initialization, `.invalidParameter` for a block size out of range.
    public init(graph: RenderGraph, maximumCycleFrames: Int, blockFrames: Int = 256) throws(AudioError) {
        guard blockFrames > 0, blockFrames <= graph.maximumFrames else {
            throw AudioError(.invalidParameter, "a render-ahead block is 1 … \(graph.maximumFrames) frames, got \(blockFrames)")
        }
        self.graph = graph
        self.blockFrames = blockFrames
        let format = graph.format
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "renderAhead", inputs: [], outputs: [f])
        flushFadeFrames = Int((0.005 * format.sampleRate).rounded())
        // Room for the longest look-ahead (two of the longest cycles, in blocks), a cycle being read, the block that
        // tops it up and the one rendered after a change.
        ring = FrameRingBuffer(
            channelCount: format.channelCount, capacity: 3 * maximumCycleFrames + 4 * blockFrames + Self.frames(Self.minimumLookAhead, format))
        state = RenderThreadBound(RenderState(channelCount: format.channelCount, frames: flushFadeFrames))
        try graph.initialize()
        renderer = OfflineRenderer(graph: graph)
        target.store(lookAhead(cycleFrames: 0), ordering: .relaxed)
    }

    deinit { stop() }

    private static func frames(_ seconds: Double, _ format: StreamFormat) -> Int { Int((seconds * format.sampleRate).rounded(.up)) }

    /// The look-ahead for cycles of `cycleFrames`: two of them or ``minimumLookAhead``, whichever is longer, in
    /// whole blocks.
    private func lookAhead(cycleFrames: Int) -> Int {
        let frames = max(2 * cycleFrames, Self.frames(Self.minimumLookAhead, graph.format))
        return min((frames + blockFrames - 1) / blockFrames * blockFrames, ring.capacity - cycleFrames - 3 * blockFrames)
    }

    /// Frames kept queued ahead of the playing side: what a change to the inner graph made directly (not through
    /// ``perform(_:)``) waits before it is heard. Set by ``start(atSampleTime:cycleFrames:)``.
    public var lookAheadFrames: Int { target.load(ordering: .relaxed) }
    /// ``lookAheadFrames`` in seconds.
    public var lookAhead: Double { Double(lookAheadFrames) / graph.format.sampleRate }

    /// Frames rendered and not yet played (read on any thread: a snapshot).
    public var queuedFrames: Int { max(0, ring.framesWritten - ring.framesRead) }

    /// Cycles of the playing side that found the ring short (silence in place of what had not been rendered yet).
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    /// The first error the inner graph's render met (a file that could not be read); the worker renders no more.
    public var failure: AudioError? { control.withLock { $0.failure } }

    /// Starts the worker, which fills the ring at once; frame 0 of the inner graph plays at `sampleTime` of the
    /// playing graph. Control thread, once (a stopped source does not start again).
    /// - Parameter cycleFrames: the playing side's cycle (its period): the look-ahead is at least two of them.
    /// - Throws: ``AudioError`` `.invalidState` when started before, `.resourceUnavailable` without a thread.
    public func start(atSampleTime sampleTime: Int64, cycleFrames: Int) throws(AudioError) {
        try worker.withLock { (w: inout WorkerThread?) throws(AudioError) in
            guard w == nil, !stopping.load(ordering: .acquiring) else {
                throw AudioError(.invalidState, "a render-ahead source starts once")
            }
            target.store(lookAhead(cycleFrames: min(max(0, cycleFrames), ring.capacity / 3)), ordering: .relaxed)
            control.withLock { $0.running = true }
            do throws(AudioError) {
                w = try WorkerThread(name: "la-song") { [self] in run() }
            } catch {
                control.withLock { $0.running = false }
                throw error
            }
            startTime.store(sampleTime, ordering: .releasing)
        }
    }

    /// Stops the worker and waits for it. What is queued stays unplayed. Idempotent.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        wake.signal()
        worker.withLock { $0 }?.join()
        // A change the worker did not take fails.
        let left = control.withLock { c -> Pending? in
            c.running = false
            defer { c.pending = nil }
            return c.pending
        }
        if let left {
            left.error.withLock { $0 = AudioError(.invalidState, "the render-ahead worker stopped before the change was made") }
            left.done.signal()
        }
    }

    /// Makes a change to the inner graph (a seek, a pause, a new region, a key) so that it is heard at once: on the
    /// worker between two blocks, after which the queued frames rendered before it are dropped (faded out over
    /// ``flushFadeFrames``). Before the start and after the stop, on the calling thread. Waits for the worker
    /// (a block at most): control threads only.
    /// - Throws: what `body` throws.
    public func perform(_ body: @escaping @Sendable () throws(AudioError) -> Void) throws(AudioError) {
        try performing.withLock { _ throws(AudioError) in
            let p = Pending(body)
            let queued = control.withLock { c -> Bool in
                guard c.running else { return false }
                c.pending = p
                return true
            }
            guard queued else { return try body() }
            wake.signal()
            while !p.done.wait(timeout: 1) {}
            if let error = p.error.withLock({ $0 }) { throw error }
        }
    }

    /// The worker: takes changes, tops the ring up to the look-ahead, sleeps until woken (or 50 ms).
    private func run() {
        while !stopping.load(ordering: .acquiring) {
            if let p = control.withLock({ c -> Pending? in defer { c.pending = nil }; return c.pending }) {
                do throws(AudioError) { try p.body() } catch { p.error.withLock { $0 = error } }
                // Everything written so far was rendered before the change: dropped once a block rendered after it
                // is there to play in its place (no gap).
                let mark = ring.framesWritten
                if control.withLock({ $0.failure == nil }) {
                    do throws(AudioError) { ring.write(try renderer.render(frames: blockFrames)) } catch {
                        control.withLock { $0.failure = error }
                    }
                }
                flushBefore.store(mark, ordering: .releasing)
                p.done.signal()
            }
            let goal = target.load(ordering: .relaxed)
            while control.withLock({ $0.failure == nil && $0.pending == nil }), ring.availableToRead < goal,
                !stopping.load(ordering: .acquiring)
            {
                do throws(AudioError) {
                    ring.write(try renderer.render(frames: blockFrames))
                } catch {
                    control.withLock { $0.failure = error }
                }
            }
            if control.withLock({ $0.pending == nil }) { wake.wait(timeout: 0.05) }
        }
    }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        let frames = context.frameCount
        let t0 = context.timeStamp.sampleTime
        let start = startTime.load(ordering: .acquiring)
        guard t0 + Int64(frames) > start else {
            output.clear()
            return
        }
        let offset = start > t0 ? Int(start - t0) : 0
        if offset > 0 { output.prefix(offset).clear() }
        // A change made through perform(): keep the first of what it dropped to fade out, drop the rest.
        let flush = flushBefore.load(ordering: .acquiring)
        let read = ring.framesRead
        if flush > read {
            let keep = min(flush - read, flushFadeFrames)
            state.onRenderThread.tailFrames = ring.read(into: state.onRenderThread.tail.view(frames: keep))
            state.onRenderThread.tailPlayed = 0
            ring.discard(flush - ring.framesRead)
            state.onRenderThread.flowing = false
        }
        let wanted = frames - offset
        let body = output.slice(from: offset, frames: wanted)
        let got = ring.read(into: body)
        if got < wanted {
            body.slice(from: got, frames: wanted - got).clear()
            if state.onRenderThread.flowing { underrunCount.add(1, ordering: .relaxed) }
        }
        if got > 0 { state.onRenderThread.flowing = true }
        fadeOutTail(into: body)
        if ring.availableToRead + blockFrames <= target.load(ordering: .relaxed) { wake.signal() }
    }

    /// Adds what a flush dropped, fading out linearly over ``flushFadeFrames``, to the start of `body`.
    private func fadeOutTail(into body: BufferView) {
        let played = state.onRenderThread.tailPlayed
        let total = state.onRenderThread.tailFrames
        guard played < total else { return }
        let n = min(total - played, body.frameCount)
        let tail = state.onRenderThread.tail.view(frames: total)
        let step = 1 / Float(max(1, flushFadeFrames))
        for c in 0..<body.channelCount {
            let from = tail[min(c, tail.channelCount - 1)]
            let to = body[c]
            for i in 0..<n { to[i] += from[played + i] * (1 - Float(played + i) * step) }
        }
        state.onRenderThread.tailPlayed = played + n
    }
}
