import AudioCore
import AudioGraph
import CSystemCalls

/// Takes come and go while the room runs: each joins the running graph at a sample time and leaves it at its end.
extension KaraokeRoom {
    /// Plays `take` `gap` seconds after the last take's song ended (its last frame; with no take before, from now),
    /// or a quarter of a second from now when that is later (the song's worker fills its ring meanwhile) — at the
    /// room's first frame when that is later still (a take given right after the start begins with the room). Its
    /// loudness is measured first when it asks for normalisation. The take playing before must have been finished
    /// (``finish(_:)``).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` before the start, after the stop, while another take plays
    ///   or for a take played before; from the loudness measurement or the graph.
    public func play(_ take: KaraokeTake, after gap: Double = 0) async throws(AudioError) {
        guard gap.isFinite, gap >= 0, gap <= 3600 else {
            throw AudioError(.invalidParameter, "the gap before a take is 0 … 3600 s, got \(gap)")
        }
        try checkRunning()
        // What the takes before made and freed (a stretcher, a decoder, a pitch tracker) goes back to the system: the
        // allocator would keep it, and an evening of takes would grow by what each left in its arenas.
        _ = la_release_free_memory()
        try await take.measureLoudness(stopped: { [lifecycle] in lifecycle.state != .running })
        try checkRunning()
        let s = state.withLock { $0 }
        // The song's worker needs a moment to fill its ring: a quarter of a second at least.
        let now = timeline.sampleTime
        let afterLast = (s.takes == 0 ? now : s.lastSongEnd) + Int64((gap * sampleRate).rounded())
        let startTime = max(s.startTime, now + Int64(sampleRate / 4), afterLast)
        do throws(AudioError) {
            try schedule(take, at: startTime)
        } catch {
            unschedule(take)
            throw error
        }
        endInterlude(before: startTime)
    }

    func checkRunning() throws(AudioError) {
        switch lifecycle.state {
        case .running: return
        case .idle, .starting: throw AudioError(.invalidState, "a take plays in a room that has started")
        case .stopping, .stopped: throw AudioError(.invalidState, "the karaoke room was stopped")
        }
    }

    /// Adds the take's parts to the running graph and starts them at `startTime`.
    func schedule(_ take: KaraokeTake, at startTime: Int64) throws(AudioError) {
        guard take.room === self else { throw AudioError(.invalidParameter, "the take was made for another room") }
        let number = try state.withLock { s throws(AudioError) -> Int in
            guard !s.closed else { throw AudioError(.invalidState, "the karaoke room was stopped") }
            guard s.current == nil else {
                throw AudioError(.invalidState, "take \(s.takes) is still playing: finish it before the next")
            }
            s.takes += 1
            s.current = take
            return s.takes
        }
        let s = state.withLock { $0 }
        try take.attach(to: self, number: number, startTime: startTime, alignment: s.alignment, cycleFrames: cycleFrames)
    }

    /// Takes a take that failed to start out of the graph; its song's worker is left as it is, so that a start that
    /// failed before the take was scheduled (a device, a server) may be tried again with the same take.
    func unschedule(_ take: KaraokeTake) {
        take.removeParts()
        state.withLock { if $0.current === take { $0.current = nil } }
    }

    /// The take playing (from ``play(_:after:)`` to ``finish(_:)``), if any.
    public var currentTake: KaraokeTake? { state.withLock { $0.current } }

    /// Takes played so far, the one playing included.
    public var takeCount: Int { state.withLock { $0.takes } }

    /// Ends `take` where it is: its song stops (what is queued plays out), its parts leave the graph, its stems
    /// and score are completed. The room, its voice and its outputs go on. Safe to call more than once.
    public func finish(_ take: KaraokeTake) async -> KaraokeTake.Summary {
        await finish(take, deviceStopped: false)
    }

    func finish(_ take: KaraokeTake, deviceStopped: Bool) async -> KaraokeTake.Summary {
        if let done = take.finalSummary { return done }
        // One finish does the work (the owner's and a stop's may come at once); another waits for its summary.
        guard take.claimFinish() else {
            while take.finalSummary == nil { try? await Task.sleep(nanoseconds: 2_000_000) }
            return take.finalSummary!
        }
        let running = !deviceStopped && io.isStarted
        let begun = take.startTime.map { $0 < timeline.sampleTime } == true
        if running, begun {
            // A song ended before its end (a skip, a stop) is faded out over the accompaniment bus's 20 ms, not cut.
            take.fadeOut()
            let until = monotonicNanoseconds() + 40_000_000
            while monotonicNanoseconds() < until, io.isStarted { try? await Task.sleep(nanoseconds: 2_000_000) }
        }
        let removedAt = timeline.sampleTime
        take.detach()
        // The render thread takes the new schedule at its next cycle: once two cycles have passed, nothing renders
        // the take's units (a stopped device renders nothing).
        if running, io.isStarted {
            let cycle = Int64(max(1, cycleFrames))
            let deadline = monotonicNanoseconds() + 500_000_000
            while timeline.sampleTime < removedAt + 2 * cycle, monotonicNanoseconds() < deadline, io.isStarted {
                try? await Task.sleep(nanoseconds: 2_000_000)
            }
        }
        // The schedules that held the take's units, freed now rather than at the next change of the graph.
        graph.collectGarbage()
        let now = timeline.sampleTime
        let summary = take.complete(at: now)
        let ended = take.nominalSongEnd ?? take.seenSongEnd ?? now
        state.withLock {
            if $0.current === take { $0.current = nil }
            $0.lastSongEnd = min(ended, now)
        }
        // The gap begins: the interlude, when there is one, a quarter of a second on (its worker fills its ring) — or,
        // for a take dropped in its countdown, the interlude that was making way for it plays on.
        if running, io.isStarted, !(!begun && playInterludeOn()) {
            startInterlude(at: timeline.sampleTime + Int64(sampleRate / 4))
        }
        return summary
    }
}
