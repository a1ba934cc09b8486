import AudioCore
import Synchronization

/// Reads ahead for file sources on a thread of its own, so that neither file I/O nor sample decoding happens on
/// the thread that renders.
///
/// The worker tops every unit's buffer up when woken and sleeps otherwise (it also looks every 50 ms). The
/// rendering side wakes it with ``requestIfNeeded()`` once a buffer has room for half of itself: that is an atomic
/// check and a semaphore post — no lock, no allocation — so a real-time render thread may call it every cycle. An
/// offline renderer that finds the next cycle's frames missing waits for them in ``waitUntilReady(frames:)``,
/// which locks a mutex: never call that on a real-time thread.
///
/// The units are fixed when the worker starts; a file source added to the graph later is not served by it. Stop the
/// worker before resetting or uninitializing the graph: a reset rewinds the files the worker is reading.
public final class ReadAheadWorker: Sendable {
    /// What the thread and the rendering side share; owned by both, so the thread never outlives it.
    private final class Shared: @unchecked Sendable {
        // Unchecked Sendable: `filling`, `failure` under `condition`; `checked` written in init only; `forced`, `stopping` atomic
        let units: [RenderUnit]
        /// The same units, each in a holder kept by `holders`, unretained, for the per-cycle checks: iterating a
        /// Swift array of references allocates in debug builds (a holder, as `Unmanaged` cannot hold a protocol
        /// existential).
        let checked: UnsafeMutableBufferPointer<Unmanaged<Holder>>
        private let holders: [Holder]
        final class Holder: Sendable {
            let unit: RenderUnit
            init(_ unit: RenderUnit) { self.unit = unit }
        }
        /// Wakes the worker; posted by the rendering side.
        let wake = WakeSignal()
        /// Set by a waiting offline renderer: fill even if no unit is half empty.
        let forced = Atomic<Bool>(false)
        let stopping = Atomic<Bool>(false)
        /// Signals waiters after each fill.
        let condition = BlockingCondition()
        // Guarded by `condition`.
        var filling = false
        var failure: AudioError?

        init(units: [RenderUnit]) {
            self.units = units
            holders = units.map(Holder.init)
            checked = .allocate(capacity: units.count)
            _ = checked.initialize(from: holders.map { Unmanaged.passUnretained($0) })
        }

        deinit { checked.deallocate() }

        func run() {
            var first = true
            while !stopping.load(ordering: .acquiring) {
                if !first { wake.wait(timeout: 0.05) }
                first = false
                if stopping.load(ordering: .acquiring) { break }
                let asked = forced.exchange(false, ordering: .acquiringAndReleasing)
                condition.lock()
                let failed = failure != nil
                if failed || !(asked || wanted) {
                    // Nothing to do; a waiter that forced a fill still needs to hear back.
                    if asked { condition.broadcast() }
                    condition.unlock()
                    continue
                }
                filling = true
                condition.unlock()
                var error: AudioError?
                do throws(AudioError) {
                    var i = 0
                    while i < checked.count {
                        try checked[i].takeUnretainedValue().unit.prefetch(frames: .max)
                        i += 1
                    }
                } catch let e {
                    error = e
                }
                condition.lock()
                filling = false
                if let error, failure == nil { failure = error }
                condition.broadcast()
                condition.unlock()
            }
            condition.lock()
            condition.broadcast()
            condition.unlock()
        }

        // These run every cycle and must not allocate, in debug builds too.
        func ready(frames: Int) -> Bool {
            var i = 0
            while i < checked.count {
                // A unit read by a pulling unit must be full (or at its end): a cycle may take many times its frames.
                let ready = checked[i]._withUnsafeGuaranteedRef {
                    $0.unit.isReadyAhead(frames: $0.unit.isReadInPulledChain ? Int.max : frames)
                }
                if !ready { return false }
                i += 1
            }
            return true
        }

        var wanted: Bool {
            var i = 0
            while i < checked.count {
                if checked[i]._withUnsafeGuaranteedRef({ $0.unit.wantsReadAhead }) { return true }
                i += 1
            }
            return false
        }
    }

    private let shared: Shared
    private let thread: WorkerThread
    private let stopped = Atomic<Bool>(false)

    /// Starts reading ahead for `units` (usually ``RenderGraph/readingAheadUnits``) at once.
    /// - Parameters:
    ///   - units: the units to serve; fixed for the worker's lifetime.
    ///   - name: the worker thread's name (the system shows at most 15 bytes of it).
    /// - Throws: ``/AudioCore/AudioError`` `.resourceUnavailable` when no thread can be started.
    public init(units: [RenderUnit], name: String = "la-read-ahead") throws(AudioError) {
        let shared = Shared(units: units)
        self.shared = shared
        thread = try WorkerThread(name: name) { shared.run() }
    }

    deinit { stop() }

    /// The units the worker reads ahead for, as given when it started. Any thread.
    public var units: [RenderUnit] { shared.units }

    /// Waits until every unit can give `frames` frames (or has ended), asking for a fill if needed. Locks: not for
    /// a real-time thread.
    /// - Throws: the first read error the worker met (it stops reading after one), or `.invalidState` once
    ///   stopped.
    public func waitUntilReady(frames: Int) throws(AudioError) {
        if shared.ready(frames: frames) { return }
        let c = shared.condition
        c.lock()
        defer { c.unlock() }
        while true {
            if let failure = shared.failure { throw failure }
            if shared.ready(frames: frames) { return }
            guard !shared.stopping.load(ordering: .acquiring) else {
                throw AudioError(.invalidState, "the read-ahead worker was stopped")
            }
            shared.forced.store(true, ordering: .releasing)
            shared.wake.signal()
            c.wait()
        }
    }

    /// Wakes the worker when a unit has room for half its buffer. Lock-free and allocation-free: real-time safe.
    @inline(__always)
    public func requestIfNeeded() {
        if shared.wanted { shared.wake.signal() }
    }

    /// The first read error met, if any (reading stops after it).
    public var failure: AudioError? {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        return shared.failure
    }

    /// Stops the thread (after the fill under way, if any) and waits for it. Idempotent.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shared.stopping.store(true, ordering: .releasing)
        shared.wake.signal()
        thread.join()
    }
}

extension RenderGraph {
    /// Readies the graph to render and its file sources to keep ahead of it — the one way every host does it (the
    /// I/O unit, a live stream's file pacer, the file renderer): initializes and starts the graph unless it runs, and
    /// starts a read-ahead worker named `readAhead` for its units that read ahead, waiting until each can give
    /// `readyFrames`. Tell the graph how it will be rendered (``willRender(_:)``) first when that must come before
    /// its units are prepared.
    /// - Parameters:
    ///   - readAhead: the worker thread's name; nil: no worker (the units read on the rendering thread).
    ///   - readyFrames: frames every unit has read before this returns (0: none waited for).
    /// - Returns: the worker, for the rendering thread's ``ReadAheadWorker/requestIfNeeded()`` and the host's
    ///   ``ReadAheadWorker/stop()``; nil when no unit reads ahead or `readAhead` is nil.
    /// - Throws: ``/AudioCore/AudioError`` from the graph's initialization or start, the worker's thread, or a read.
    package func prepareToRender(readAhead name: String?, readyFrames: Int = 0) throws(AudioError) -> ReadAheadWorker? {
        if state == .uninitialized { try initialize() }
        if state != .running { try start() }
        let reading = readingAheadUnits
        guard let name, !reading.isEmpty else { return nil }
        let worker = try ReadAheadWorker(units: reading, name: name)
        if readyFrames > 0 {
            do throws(AudioError) { try worker.waitUntilReady(frames: readyFrames) } catch {
                worker.stop()
                throw error
            }
        }
        return worker
    }
}
