import AudioCore

/// Reads ahead for file sources on a thread of its own, so that neither file I/O nor sample decoding happens on
/// the thread that renders.
///
/// The worker tops every unit's buffer up when asked and sleeps otherwise. The rendering side asks with
/// ``requestIfNeeded()`` once a buffer has room for half of itself, and an offline renderer that finds the next
/// cycle's frames missing waits for them in ``waitUntilReady(frames:)``. Both lock a mutex: offline rendering
/// only — a real-time render thread must not call them.
///
/// The units are fixed when the worker starts; a file source added to the graph later is not served by it. Stop the
/// worker before resetting or uninitializing the graph: a reset rewinds the files the worker is reading.
public final class ReadAheadWorker: @unchecked Sendable {
    /// What the thread and the rendering side share; owned by both, so the thread never outlives it.
    private final class Shared: @unchecked Sendable {
        let units: [RenderUnit]
        /// The same units, unretained, for the per-cycle checks: iterating a Swift array of references
        /// allocates in debug builds.
        let checked: UnsafeMutableBufferPointer<Unmanaged<RenderUnit>>
        let condition = BlockingCondition()
        // Guarded by `condition`.
        var requested = true
        var filling = false
        var stopping = false
        var failure: AudioError?

        init(units: [RenderUnit]) {
            self.units = units
            checked = .allocate(capacity: units.count)
            _ = checked.initialize(from: units.map { Unmanaged.passUnretained($0) })
        }

        deinit { checked.deallocate() }

        func run() {
            condition.lock()
            while !stopping {
                guard requested, failure == nil else {
                    condition.wait()
                    continue
                }
                requested = false
                filling = true
                condition.unlock()
                var error: AudioError?
                do throws(AudioError) {
                    var i = 0
                    while i < checked.count {
                        try checked[i].takeUnretainedValue().prefetch(frames: .max)
                        i += 1
                    }
                } catch let e {
                    error = e
                }
                condition.lock()
                filling = false
                if let error, failure == nil { failure = error }
                condition.broadcast()
            }
            condition.unlock()
        }

        // These run every cycle and must not allocate, in debug builds too.
        func ready(frames: Int) -> Bool {
            var i = 0
            while i < checked.count {
                if !checked[i].takeUnretainedValue().isReadyAhead(frames: frames) { return false }
                i += 1
            }
            return true
        }

        var wanted: Bool {
            var i = 0
            while i < checked.count {
                if checked[i].takeUnretainedValue().wantsReadAhead { return true }
                i += 1
            }
            return false
        }
    }

    private let shared: Shared
    private let thread: WorkerThread
    private var stopped = false

    /// Starts reading ahead for `units` (usually ``RenderGraph/readingAheadUnits``) at once.
    /// - Throws: ``AudioError`` `.resourceUnavailable` when no thread can be started.
    public init(units: [RenderUnit], name: String = "la-read-ahead") throws(AudioError) {
        let shared = Shared(units: units)
        self.shared = shared
        thread = try WorkerThread(name: name) { shared.run() }
    }

    deinit { stop() }

    public var units: [RenderUnit] { shared.units }

    /// Waits until every unit can give `frames` frames (or has ended), asking for a fill if needed.
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
            guard !shared.stopping else {
                throw AudioError(.invalidState, "the read-ahead worker was stopped")
            }
            if !shared.filling {
                shared.requested = true
                c.broadcast()
            }
            c.wait()
        }
    }

    /// Asks for a fill when a unit has room for half its buffer and no fill is under way.
    public func requestIfNeeded() {
        guard shared.wanted else { return }
        let c = shared.condition
        c.lock()
        if !shared.requested && !shared.filling {
            shared.requested = true
            c.broadcast()
        }
        c.unlock()
    }

    /// The first read error met, if any (reading stops after it).
    public var failure: AudioError? {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        return shared.failure
    }

    /// Stops the thread (after the fill under way, if any) and waits for it. Idempotent.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        shared.condition.lock()
        shared.stopping = true
        shared.condition.broadcast()
        shared.condition.unlock()
        thread.join()
    }
}
