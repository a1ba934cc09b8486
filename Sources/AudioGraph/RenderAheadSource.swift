import AudioCore
import CSystemCalls
import Synchronization

/// Plays a graph that needs no live input (a file player and what processes it: a time-pitch, effects) rendered
/// ahead of time on a worker thread of its own, so its work — bursts included — never lands on the thread that
/// plays it.
///
/// The worker (`la-song`) renders the inner graph in blocks into a ring, keeping about ``lookAheadFrames`` queued
/// (up to a block more); this unit, a source in the playing graph, copies the ring to its output from a sample time
/// on, and wakes the worker as the ring drains. What happens after this unit (volumes, mutes, mixing) is as
/// immediate as ever; a change inside the inner graph (a key or tempo, a seek) is heard once what is queued has
/// played — unless it is made through ``perform(_:)``, which runs it on the worker between two blocks, renders what
/// follows it, and drops what was queued before it (crossfaded over ``flushFadeFrames``), so a seek, a pause or a
/// new region is heard at once.
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
    /// The worker's SCHED_FIFO priority: 1, the lowest real-time priority — above every ordinary thread, below the
    /// device's thread and a sound server's. Without the permission to take it, the worker runs at normal priority.
    public static let workerPriority: Int32 = 1
    /// Frames over which a ``perform(_:)`` crossfades from what was queued to what follows the change: 5 ms.
    public let flushFadeFrames: Int

    private let shared: Shared
    private let worker = Mutex<WorkerThread?>(nil)
    /// One ``perform(_:)`` at a time.
    private let performing = Mutex(())

    /// What the worker, the playing side and the control side share. The worker holds it, not the unit: a source
    /// dropped without ``stop()`` stops its worker in its deinit.
    private final class Shared: Sendable {
        let ring: FrameRingBuffer
        let renderer: OfflineRenderer
        let blockFrames: Int
        let wake = WakeSignal()
        /// The ring's frame count before which everything is to be dropped (set by the worker after a change).
        let flushBefore = Atomic<Int>(0)
        let target = Atomic<Int>(0)
        /// The playing side's cycle, for what a change renders before it is published.
        let cycleFrames = Atomic<Int>(0)
        let stopping = Atomic<Bool>(false)
        let failed = Atomic<Bool>(false)
        /// The kernel's id of the worker thread (0 before it runs).
        let threadID = Atomic<Int>(0)
        /// A change waiting for the worker, whether the worker takes changes, the first error.
        struct Control {
            var pending: Pending?
            var running = false
            var failure: AudioError?
        }
        let control = Mutex(Control())

        init(ring: FrameRingBuffer, renderer: OfflineRenderer, blockFrames: Int) {
            self.ring = ring
            self.renderer = renderer
            self.blockFrames = blockFrames
        }

        /// Frames queued that will play: those after the last flush.
        var queued: Int {
            let written = ring.framesWritten
            return max(0, written - max(ring.framesRead, flushBefore.load(ordering: .acquiring)))
        }

        /// The worker: takes changes, tops the ring up to the look-ahead, sleeps until woken (or 50 ms).
        func run() {
            threadID.store(la_thread_id(), ordering: .relaxed)
            // Above every ordinary thread (a browser, a build, busy loops beside it) and below every real-time one (the
            // device's, JACK's): the lowest real-time priority, when the system grants it; else as it is.
            _ = RealtimeScheduling.promoteCurrentThread(priority: RenderAheadSource.workerPriority)
            while !stopping.load(ordering: .acquiring) {
                if let p = control.withLock({ c -> Pending? in defer { c.pending = nil }; return c.pending }) {
                    apply(p)
                }
                fill()
                if control.withLock({ $0.pending == nil }) { wake.wait(timeout: 0.05) }
            }
        }

        /// Renders blocks while fewer than the look-ahead are queued and the ring has room (frames a flush drops
        /// still take room until the playing side drops them).
        func fill() {
            let goal = target.load(ordering: .relaxed)
            while queued < goal, ring.availableToWrite >= blockFrames, !stopping.load(ordering: .acquiring),
                !failed.load(ordering: .acquiring), control.withLock({ $0.pending == nil })
            {
                renderBlock()
            }
        }

        private func renderBlock() {
            do throws(AudioError) {
                ring.write(try renderer.render(frames: blockFrames))
            } catch {
                control.withLock { if $0.failure == nil { $0.failure = error } }
                failed.store(true, ordering: .releasing)
            }
        }

        /// Makes a change between two blocks; unless it failed, renders what follows it (a cycle's worth, as room
        /// allows) and only then marks what was queued before it to be dropped, so the playing side has the new
        /// frames when it drops the old.
        func apply(_ p: Pending) {
            do throws(AudioError) {
                try p.body()
                let mark = ring.framesWritten
                let wanted = max(cycleFrames.load(ordering: .relaxed), 1)
                while ring.framesWritten - mark < wanted, ring.availableToWrite >= blockFrames, !failed.load(ordering: .acquiring) {
                    renderBlock()
                }
                flushBefore.store(mark, ordering: .releasing)
            } catch {
                p.error.withLock { $0 = error }
            }
            p.done.signal()
        }
    }

    private final class Pending: Sendable {
        let body: @Sendable () throws(AudioError) -> Void
        let done = WakeSignal()
        let error = Mutex<AudioError?>(nil)
        init(_ body: @escaping @Sendable () throws(AudioError) -> Void) { self.body = body }
    }

    private struct RenderState: ~Copyable {
        /// What a flush dropped, faded out under what follows (faded in) over `tailFrames`.
        let tail: PCMBuffer
        var tailFrames = 0
        var tailPlayed = 0
        /// Frames have been played: a flush has something to fade out.
        var played = false
        /// Frames have come since the start or the last flush: a short ring is an underrun now.
        var flowing = false

        init(channelCount: Int, frames: Int) {
            tail = PCMBuffer(channelCount: channelCount, capacity: max(1, frames))
        }
    }
    private let state: RenderThreadBound<RenderState>
    /// The playing side's sample time at which frame 0 of the ring plays (.max: not yet).
    private let startTime = Atomic<Int64>(.max)
    private let underrunCount = Atomic<Int>(0)

    /// Creates a source that plays `graph`, rendered ahead, and initializes `graph`; the worker starts with
    /// ``start(atSampleTime:cycleFrames:)``. Control thread.
    /// - Parameters:
    ///   - graph: the graph to render ahead (initialized here); nothing reads a live input in it.
    ///   - maximumCycleFrames: the most frames a cycle of the playing graph asks for.
    ///   - blockFrames: frames the worker renders at a time (at most the inner graph's maximum).
    /// - Throws: ``/AudioCore/AudioError`` from the graph's initialization, `.invalidParameter` for a block size
    ///   out of range.
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
        // Room for the longest look-ahead (two of the longest cycles, in blocks) and a block more, a cycle's worth
        // rendered after a change while what it drops is still there, and a block being written.
        let ring = FrameRingBuffer(
            channelCount: format.channelCount,
            capacity: 3 * maximumCycleFrames + 4 * blockFrames + Self.frames(Self.minimumLookAhead, format))
        state = RenderThreadBound(RenderState(channelCount: format.channelCount, frames: flushFadeFrames))
        try graph.initialize()
        shared = Shared(ring: ring, renderer: OfflineRenderer(graph: graph), blockFrames: blockFrames)
        shared.target.store(lookAhead(cycleFrames: 0), ordering: .relaxed)
    }

    deinit { stop() }

    private static func frames(_ seconds: Double, _ format: StreamFormat) -> Int { Int((seconds * format.sampleRate).rounded(.up)) }

    /// The look-ahead for cycles of `cycleFrames`: two of them or ``minimumLookAhead``, whichever is longer, in
    /// whole blocks.
    private func lookAhead(cycleFrames: Int) -> Int {
        let frames = max(2 * cycleFrames, Self.frames(Self.minimumLookAhead, graph.format))
        return min((frames + blockFrames - 1) / blockFrames * blockFrames, shared.ring.capacity - cycleFrames - 3 * blockFrames)
    }

    /// Frames kept queued ahead of the playing side (the worker tops up to this, in blocks: up to a block more):
    /// what a change to the inner graph made directly (not through ``perform(_:)``) waits before it is heard. Set by
    /// ``start(atSampleTime:cycleFrames:)``.
    public var lookAheadFrames: Int { shared.target.load(ordering: .relaxed) }
    /// ``lookAheadFrames`` in seconds.
    public var lookAhead: Double { Double(lookAheadFrames) / graph.format.sampleRate }

    /// Frames rendered and still to play (not those a change made through ``perform(_:)`` drops): a snapshot, any
    /// thread; exact on the worker between blocks but for what the playing side takes meanwhile.
    public var queuedFrames: Int { shared.queued }

    /// Cycles of the playing side that found the ring short while the worker ran (silence in place of what had not
    /// been rendered yet).
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    /// The first error the inner graph's render met (a file that could not be read); the worker renders no more.
    public var failure: AudioError? { shared.control.withLock { $0.failure } }

    /// Starts the worker, which fills the ring at once; frame 0 of the inner graph plays at `sampleTime` of the
    /// playing graph. Control thread, once (a stopped source does not start again).
    /// - Parameters:
    ///   - sampleTime: the playing graph's sample time at which frame 0 of the inner graph plays.
    ///   - cycleFrames: the playing side's cycle (its period): the look-ahead is at least two of them.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when started before, `.resourceUnavailable` without a
    ///   thread.
    public func start(atSampleTime sampleTime: Int64, cycleFrames: Int) throws(AudioError) {
        let shared = shared
        try worker.withLock { (w: inout WorkerThread?) throws(AudioError) in
            guard w == nil, !shared.stopping.load(ordering: .acquiring) else {
                throw AudioError(.invalidState, "a render-ahead source starts once")
            }
            let cycle = min(max(0, cycleFrames), shared.ring.capacity / 3)
            shared.cycleFrames.store(cycle, ordering: .relaxed)
            shared.target.store(lookAhead(cycleFrames: cycle), ordering: .relaxed)
            shared.control.withLock { $0.running = true }
            do throws(AudioError) {
                w = try WorkerThread(name: "la-song") { shared.run() }
            } catch {
                shared.control.withLock { $0.running = false }
                throw error
            }
            startTime.store(sampleTime, ordering: .releasing)
        }
    }

    /// Stops the worker and waits for it (not when called on it). The playing side plays what is queued, then
    /// silence. Idempotent.
    public func stop() {
        shared.stopping.store(true, ordering: .releasing)
        shared.wake.signal()
        if let thread = worker.withLock({ $0 }), shared.threadID.load(ordering: .relaxed) != la_thread_id() { thread.join() }
        // A change the worker did not take fails.
        let left = shared.control.withLock { c -> Pending? in
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
    /// worker between two blocks; unless `body` throws, the worker renders what follows (a cycle's worth) and then
    /// the frames queued before the change are dropped — crossfaded into what follows over ``flushFadeFrames``.
    /// Before the start and after the stop, on the calling thread, dropping nothing. On the worker itself (a
    /// player's `onEnd`, called while a block reads), at once: the block under way follows the change. Waits for
    /// the worker (its block under way, the change, a cycle's worth of blocks): control threads.
    /// - Throws: what `body` throws.
    public func perform(_ body: @escaping @Sendable () throws(AudioError) -> Void) throws(AudioError) {
        let shared = shared
        if shared.threadID.load(ordering: .relaxed) == la_thread_id() {
            // Inside a block's render (its reading): the block under way is the first after the change.
            try body()
            shared.flushBefore.store(shared.ring.framesWritten, ordering: .releasing)
            return
        }
        try performing.withLock { _ throws(AudioError) in
            let p = Pending(body)
            let queued = shared.control.withLock { c -> Bool in
                guard c.running else { return false }
                c.pending = p
                return true
            }
            guard queued else { return try body() }
            shared.wake.signal()
            while !p.done.wait(timeout: 1) {}
            if let error = p.error.withLock({ $0 }) { throw error }
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
        let ring = shared.ring
        let offset = start > t0 ? Int(start - t0) : 0
        if offset > 0 { output.prefix(offset).clear() }
        // A change made through perform(): keep the first of what it dropped to fade out (if any was heard before:
        // a change before the start drops frames nobody heard), drop the rest.
        let flush = shared.flushBefore.load(ordering: .acquiring)
        let read = ring.framesRead
        if flush > read {
            let keep = state.onRenderThread.played ? min(flush - read, flushFadeFrames) : 0
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
            let working = !shared.stopping.load(ordering: .relaxed) && !shared.failed.load(ordering: .relaxed)
            if state.onRenderThread.flowing, working { underrunCount.add(1, ordering: .relaxed) }
        }
        if got > 0 {
            state.onRenderThread.flowing = true
            state.onRenderThread.played = true
        }
        crossfade(body)
        if shared.queued + blockFrames <= shared.target.load(ordering: .relaxed) { shared.wake.signal() }
    }

    /// Over the first frames after a flush: what was dropped fades out while what follows fades in, linearly over
    /// the frames kept of it (at most ``flushFadeFrames``).
    private func crossfade(_ body: BufferView) {
        let played = state.onRenderThread.tailPlayed
        let total = state.onRenderThread.tailFrames
        guard played < total else { return }
        let n = min(total - played, body.frameCount)
        let tail = state.onRenderThread.tail.view(frames: total)
        let step = 1 / Float(total)
        for c in 0..<body.channelCount {
            let from = tail[min(c, tail.channelCount - 1)]
            let to = body[c]
            for i in 0..<n {
                let g = Float(played + i) * step
                to[i] = VectorOps.crossfade(from: from[played + i], to: to[i], weight: g)
            }
        }
        state.onRenderThread.tailPlayed = played + n
    }
}
