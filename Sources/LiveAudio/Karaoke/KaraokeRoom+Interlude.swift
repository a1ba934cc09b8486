import AudioCore
import AudioGraph
import AudioUnits
import FoundationEssentials

/// The room between takes: an interlude file (``KaraokeRoom/Configuration/interlude``) looped at its level from the
/// room's first frame (or a take's end) until the next take's first frame, fading in over a second and out over the
/// second before the take. Its player renders ahead on a worker of its own, as a song does; its envelope, in the
/// room's graph on the device's timeline, takes it to the accompaniment mixer's third bus: into the headphones, the song mix and the stream, under the accompaniment's volume, never into
/// a take's stems. Each gap has an interlude of its own, which leaves the graph (and its worker ends) once the take
/// after it has begun; when that take is dropped before it begins (skipped in its countdown), the interlude plays on.
final class Interlude: Sendable {
    let player: FilePlayerUnit
    let envelope: InterludeEnvelope
    let source: RenderAheadSource
    /// Its nodes in the room's graph, the player's and the envelope's (once placed).
    let placed = Locked<[NodeID]>([])

    /// The interlude of `path` at the room's format, `level` linear.
    /// - Throws: ``/AudioCore/AudioError`` naming the file when it cannot be played.
    init(path: String, format: StreamFormat, level: Float) throws(AudioError) {
        do throws(AudioError) {
            player = try FilePlayerUnit(path: path, sampleRate: format.sampleRate, channelCount: format.channelCount)
            envelope = InterludeEnvelope(format: format, level: level)
            let graph = try RenderGraph(format: format, maximumFrames: 1024)
            try graph.connect(try graph.addNode(player, name: "interlude"), to: graph.output)
            source = try RenderAheadSource(graph: graph, maximumCycleFrames: KaraokeRoom.maximumFrames)
            try player.schedule(.init(loopCount: FilePlayerUnit.Region.endless), at: 0)
        } catch {
            throw AudioError(error.code, "the interlude '\(path)' cannot be played: \(error.message)")
        }
    }
}

extension KaraokeRoom {
    /// The accompaniment mixer's bus the interlude plays on (the takes' are 0 and 1).
    static let interludeBus = 2

    /// Starts an interlude at `startTime` on the room's timeline (no interlude configured, or the room closing:
    /// nothing). One that cannot be made now (its file gone since the room was made) leaves the gap silent.
    func startInterlude(at startTime: Int64) {
        guard let path = configuration.interlude else { return }
        let level = VolumeRange.gain(configuration.interludeVolume)
        guard
            let (interlude, number, retiring) = state.withLock({ s -> (Interlude?, Int, Interlude?)? in
                guard !s.closed, s.interlude == nil else { return nil }
                s.interludes += 1
                defer {
                    s.preparedInterlude = nil
                    s.retiring = nil
                }
                return (s.preparedInterlude, s.interludes, s.retiring?.interlude)
            })
        else { return }
        // The last gap's, silent since the take that followed it began, may not have left yet: it leaves now.
        if let retiring { retire(retiring) }
        guard let interlude = interlude ?? (try? Interlude(path: path, format: graph.format, level: level)) else { return }
        let cycle = cycleFrames
        interlude.envelope.begin(at: startTime)
        do throws(AudioError) {
            let played = try graph.addNode(interlude.source, name: "interlude-\(number)")
            interlude.placed.withLock { $0 = [played] }
            let shaped = try graph.addNode(interlude.envelope, name: "interlude-\(number)-level")
            interlude.placed.withLock { $0.append(shaped) }
            try graph.connect(played, to: shaped)
            try graph.connect(shaped, to: parts["accompaniment"]!, inputBus: Self.interludeBus)
            try interlude.source.start(atSampleTime: startTime, cycleFrames: cycle)
            let kept = state.withLock { s -> Bool in
                guard !s.closed else { return false }
                s.interlude = interlude
                return true
            }
            if !kept { retire(interlude) }
        } catch {
            retire(interlude)
        }
    }

    /// Fades the interlude out by `takeStart` (the next take's first frame) and takes it out of the graph once the
    /// take has begun.
    func endInterlude(before takeStart: Int64) {
        guard let interlude = state.withLock({ s -> Interlude? in
            defer { s.interlude = nil }
            if let playing = s.interlude { s.retiring = (playing, takeStart) }
            return s.interlude
        }) else { return }
        interlude.envelope.silence(from: takeStart)
        let cycle = Int64(max(1, cycleFrames))
        Task { [weak self] in
            // Silent from the take's start: gone two cycles later (or at once when the device stops meanwhile) —
            // unless the take was dropped before it began, and the interlude plays on (to fade out for another take,
            // which has its own wait).
            @Sendable func mine(_ s: RoomState) -> Bool {
                s.retiring.map { $0.interlude === interlude && $0.until == takeStart } ?? false
            }
            while let room = self, room.io.isStarted, room.timeline.sampleTime < takeStart + 2 * cycle,
                room.state.withLock({ mine($0) })
            {
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
            guard let room = self, room.state.withLock({ s -> Bool in
                guard mine(s) else { return false }
                s.retiring = nil
                return true
            }) else { return }
            room.retire(interlude)
        }
    }

    /// The take the interlude made way for was dropped before it began: the interlude, fading out for it, plays on.
    /// - Returns: false when there is none to play on (then a new gap begins with a new interlude).
    func playInterludeOn() -> Bool {
        guard let interlude = state.withLock({ s -> Interlude? in
            guard !s.closed, s.interlude == nil, let retiring = s.retiring?.interlude else { return nil }
            s.retiring = nil
            s.interlude = retiring
            return retiring
        }) else { return false }
        interlude.envelope.playOn()
        return true
    }

    /// Takes `interlude` out of the graph and ends its worker.
    func retire(_ interlude: Interlude) {
        let nodes = interlude.placed.withLock { p -> [NodeID] in
            defer { p = [] }
            return p
        }
        for node in nodes { try? graph.removeNode(node) }
        interlude.source.stop()
    }

    /// At the room's stop: the interlude playing, if any, ends (the device has stopped).
    func stopInterlude() {
        let (playing, retiring) = state.withLock { s -> (Interlude?, Interlude?) in
            defer {
                s.interlude = nil
                s.retiring = nil
                s.preparedInterlude = nil
            }
            return (s.interlude, s.retiring?.interlude)
        }
        for interlude in [playing, retiring].compactMap({ $0 }) { retire(interlude) }
    }
}
