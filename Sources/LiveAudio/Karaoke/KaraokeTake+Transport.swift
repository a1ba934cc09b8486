import AudioCore
import AudioGraph
import AudioUnits
import SingAlong

/// Where the song is and how it moves: pause, resume, seek, a new region, the key. Each is made on the song's worker
/// between two blocks, so it is heard at once.
extension KaraokeTake {
    /// How far ahead of the device the song is rendered, in seconds: a key or tempo change is heard this much later
    /// (and the time-pitch's own look-ahead). Known once the take plays.
    public var songLookAhead: Double { song.lookAhead }

    /// The file frame the ears are at: the player's position less what is rendered ahead of them — the frames
    /// queued and the time-pitch's look-ahead, at the rate it plays — never before the region's start.
    func heardFrame() -> Int64 {
        // Held by a pause where it was heard.
        if player.state == .paused { return player.position }
        let rate = timePitch?.currentRate ?? 1
        let ahead = Double(song.queuedFrames) + (timePitch?.latency ?? 0) * sampleRate
        let start = state.withLock { $0.songRegionStart }
        return max(start, player.position - Int64((ahead * rate).rounded()))
    }

    /// Where the song is as heard, in seconds of the file.
    public var songPosition: Double { Double(heardFrame()) / sampleRate }

    /// True while the song is held by ``pauseSong()``.
    public var isSongPaused: Bool { player.state == .paused }

    /// Makes a change to the song's player on the song's worker, between two blocks, so that it is heard at once:
    /// what was rendered ahead is dropped (crossfaded over 5 ms), and the time-pitch starts again from the player.
    private func changeSong(_ body: @escaping @Sendable () throws(AudioError) -> Void) throws(AudioError) {
        let timePitch = timePitch
        try song.perform { () throws(AudioError) in
            try body()
            timePitch?.reset()
        }
    }

    /// Holds the song where it is heard (at once, faded); the recordings and the voice go on. Paused already: nothing.
    public func pauseSong() {
        let player = player
        try? changeSong { [self] () throws(AudioError) in
            guard player.state != .paused else { return }
            // The player is ahead of the ears: held where they are, it resumes where it was heard.
            let heard = heardFrame()
            player.pause()
            try? player.seek(toFrame: heard)
        }
        songMoved()
    }

    /// Goes on from where ``pauseSong()`` held the song (at once, faded in).
    public func resumeSong() {
        let player = player
        try? changeSong { player.resume() }
        songMoved()
    }

    /// Tells the score where the song is from now on (after a pause, resume, seek or new region).
    private func songMoved() {
        state.withLock { $0.moved = true }
        let (now, heard) = (room.timeline.sampleTime, heardFrame())
        let rate = player.state == .paused ? 0 : (timePitch?.currentRate ?? configuration.tempo)
        for f in followers { f.moved(graphFrame: now, songFrame: heard, rate: rate) }
    }

    /// The chart's lyrics where the song is, the voice's pitch and the note to sing, and the score so far; nil
    /// without ``Configuration/chart``. Any thread.
    public var singAlong: SingAlongReadout? { follower?.readout(at: songPosition) }

    /// ``singAlong`` for voice `voice` (1 … the room's voices): its part's lyrics, its pitch and its score.
    public func singAlong(voice: Int) -> SingAlongReadout? {
        followers.indices.contains(voice - 1) ? followers[voice - 1].readout(at: songPosition) : nil
    }

    /// Moves the song to `seconds` of the file, inside the region playing (at once, faded).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` outside the region, `.invalidState` before the take
    ///   plays.
    public func seekSong(toSeconds seconds: Double) throws(AudioError) {
        try checkSongStarted()
        let player = player
        let frame = Int64((seconds * sampleRate).rounded())
        try changeSong { () throws(AudioError) in try player.seek(toFrame: frame) }
        songMoved()
    }

    /// Plays `region` of the song from now on (at once, faded), replacing what plays: a loop, another part.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a region outside the file, `.invalidState` before
    ///   the take plays.
    public func playSong(_ region: KaraokeSession.RegionInSeconds) throws(AudioError) {
        try checkSongStarted()
        let player = player
        let frames = region.frames(at: sampleRate)
        try changeSong { () throws(AudioError) in try player.schedule(frames) }
        state.withLock {
            $0.songRegionStart = frames.startFrame
            $0.regionPlaying = frames
        }
        songMoved()
    }

    private func checkSongStarted() throws(AudioError) {
        guard state.withLock({ $0.scheduled }) else {
            throw AudioError(.invalidState, "the song starts with the take: seek or play a part once it has started")
        }
    }

    /// The key change in cents (−2400 … 2400), live with a time-pitch unit.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` without a time-pitch unit, `.invalidParameter` out of range.
    public func setKey(cents: Double) throws(AudioError) {
        guard let timePitch else {
            throw AudioError(.invalidState, "the key can change while singing only with keyAdjustable (or a key or tempo change) set")
        }
        try timePitch.pitch.set(Float(cents))
        // The singer hears the new key once what is rendered ahead has played: from then on it is scored in it.
        let heard = room.timeline.sampleTime + Int64(((song.lookAhead + timePitch.latency) * sampleRate).rounded())
        for f in followers { f.setKey(cents: cents, fromGraphFrame: heard) }
    }

    /// The key change in cents now: the time-pitch unit's pitch, 0 without one.
    public var keyCents: Double { timePitch.map { Double($0.pitch.value) } ?? 0 }
}
