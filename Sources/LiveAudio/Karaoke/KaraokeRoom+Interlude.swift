import AudioCore
import AudioGraph
import AudioUnits
import FoundationEssentials

/// The room between takes: an interlude file (``KaraokeRoom/Configuration/interlude``) looped at its level from the
/// room's first frame (or a take's end) until the next take's first frame, fading in over a second and out over the
/// second before the take. Its player renders ahead on a worker of its own, as a song does, on the accompaniment
/// mixer's third bus: into the headphones, the song mix and the stream, under the accompaniment's volume, never into
/// a take's stems. Each gap has an interlude of its own, which leaves the graph (and its worker ends) once the take
/// after it has begun.
final class Interlude: Sendable {
    let player: FilePlayerUnit
    let envelope: InterludeEnvelope
    let source: RenderAheadSource
    /// The room's sample time of the interlude's frame 0, and its node (once in the graph).
    let placed = Locked<(startTime: Int64, node: NodeID?)>((0, nil))

    /// The interlude of `path` at the room's format, `level` linear.
    /// - Throws: ``/AudioCore/AudioError`` naming the file when it cannot be played.
    init(path: String, format: StreamFormat, level: Float) throws(AudioError) {
        do throws(AudioError) {
            player = try FilePlayerUnit(path: path, sampleRate: format.sampleRate, channelCount: format.channelCount)
            envelope = InterludeEnvelope(format: format, level: level)
            let graph = try RenderGraph(format: format, maximumFrames: 1024)
            let played = try graph.addNode(player, name: "interlude")
            let shaped = try graph.addNode(envelope, name: "envelope")
            try graph.connect(played, to: shaped)
            try graph.connect(shaped, to: graph.output)
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
            let (interlude, number) = state.withLock({ s -> (Interlude?, Int)? in
                guard !s.closed, s.interlude == nil else { return nil }
                s.interludes += 1
                defer { s.preparedInterlude = nil }
                return (s.preparedInterlude, s.interludes)
            }),
            let interlude = interlude ?? (try? Interlude(path: path, format: graph.format, level: level))
        else { return }
        let cycle = state.withLock { $0.cycleFrames }
        var node: NodeID?
        do throws(AudioError) {
            node = try graph.addNode(interlude.source, name: "interlude-\(number)")
            try graph.connect(node!, to: parts["accompaniment"]!, inputBus: Self.interludeBus)
            interlude.placed.withLock { $0 = (startTime, node) }
            try interlude.source.start(atSampleTime: startTime, cycleFrames: cycle)
            let kept = state.withLock { s -> Bool in
                guard !s.closed else { return false }
                s.interlude = interlude
                return true
            }
            if !kept { retire(interlude) }
        } catch {
            if let node { try? graph.removeNode(node) }
            interlude.source.stop()
        }
    }

    /// Fades the interlude out by `takeStart` (the next take's first frame) and takes it out of the graph once the
    /// take has begun.
    func endInterlude(before takeStart: Int64) {
        guard let interlude = state.withLock({ s -> Interlude? in
            defer { s.interlude = nil }
            return s.interlude
        }) else { return }
        interlude.envelope.silence(from: takeStart - interlude.placed.withLock { $0.startTime })
        let cycle = Int64(max(1, state.withLock { $0.cycleFrames }))
        Task { [weak self] in
            // Silent from the take's start: gone two cycles later (or at once when the device stops meanwhile).
            while let room = self, room.io.isStarted, room.timeline.sampleTime < takeStart + 2 * cycle {
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
            self?.retire(interlude)
        }
    }

    /// Takes `interlude` out of the graph and ends its worker.
    func retire(_ interlude: Interlude) {
        let node = interlude.placed.withLock { p -> NodeID? in
            defer { p.node = nil }
            return p.node
        }
        if let node { try? graph.removeNode(node) }
        interlude.source.stop()
    }

    /// At the room's stop: the interlude playing, if any, ends (the device has stopped).
    func stopInterlude() {
        let playing = state.withLock { s -> Interlude? in
            defer {
                s.interlude = nil
                s.preparedInterlude = nil
            }
            return s.interlude
        }
        if let playing { retire(playing) }
    }
}
