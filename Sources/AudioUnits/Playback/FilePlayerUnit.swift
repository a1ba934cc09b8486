import AudioCodecs
import AudioCore
import AudioGraph
import MediaContainers
import Synchronization

/// Plays a region of an audio file at a sample time of the graph's timeline — the AudioFilePlayer role: a backing
/// track that starts on a beat, loops a chorus, seeks, pauses and resumes while the graph runs.
///
/// ```swift
/// let player = try FilePlayerUnit(path: "song.m4a", sampleRate: 48_000)
/// try player.schedule(.init(startFrame: 48_000 * 30, frameCount: 48_000 * 20, loopCount: 1), at: 96_000)
/// player.onEnd = { print("done") }
/// ```
///
/// - **Formats**: anything the decoder reads (``/AudioCodecs/AudioFile/open(path:sampleRate:channelCount:)``),
///   resampled to the unit's rate while read. The output has the file's channel count.
/// - **Timeline**: a schedule starts at a sample time of the render (``/AudioCore/RenderTimeStamp/sampleTime``:
///   frames since the graph was reset offline, the device's frame counter in real time), to the sample, or as soon
///   as the reader has its first frames (`at: nil`). A start already past when the render sees it skips the frames
///   that should have played, so the region stays on the timeline; so does a reader that falls behind (counted in
///   ``underruns``). Regions start and end as they are in the file: nothing is faded there.
/// - **Changes while running**: ``schedule(_:at:)`` replaces what plays, ``seek(toFrame:)`` moves inside it,
///   ``pause()``/``resume()`` hold the position and ``stop()`` ends it; each fades over ``rampTime`` (5 ms), so
///   nothing clicks. Each may be called before the graph is initialized or started, too.
/// - **Read-out**: ``state``, ``position`` (the file frame playing), ``completedSchedules`` and ``onEnd``.
///
/// File reading never happens on the render thread: a ``/AudioGraph/ReadAheadWorker`` (or, offline, the renderer's
/// ``/AudioGraph/RenderUnit/prefetch(frames:)`` before each cycle) decodes into a fixed ring the render reads. The
/// render thread never allocates, locks or waits; control calls and the reader meet under a lock of their own.
/// The reader's state is the reader thread's, the render state the render thread's; the commands reach the render
/// thread through a sequence lock, and what each side reports through atomics.
///
/// A graph reset (``/AudioGraph/RenderGraph/reset()``) starts the current schedule over from its first frame.
public final class FilePlayerUnit: RenderUnit, FiniteSource {
    public let core: UnitCore
    /// A stretch of the file: `frameCount` frames from `startFrame` (nil: to the end of the file), played once
    /// and then `loopCount` more times (``endless``: until stopped or replaced). Frames count at the unit's rate.
    public struct Region: Hashable, Sendable {
        /// The file frame the region starts at (0 or more, inside the file); 0 by default.
        public var startFrame: Int64
        /// The region's length in frames (1 or more), or nil (the default) for up to the end of the file.
        public var frameCount: Int64?
        /// Passes played after the first (0 or more; ``endless`` for ever); 0 by default: the region plays once.
        public var loopCount: Int

        /// Describes a region; ``FilePlayerUnit/schedule(_:at:)`` checks it against the file.
        ///
        /// - Parameters:
        ///   - startFrame: The file frame the region starts at; 0 by default.
        ///   - frameCount: The region's length in frames, or nil (the default) for up to the end of the file.
        ///   - loopCount: Passes played after the first, or ``endless``; 0 by default.
        public init(startFrame: Int64 = 0, frameCount: Int64? = nil, loopCount: Int = 0) {
            self.startFrame = startFrame
            self.frameCount = frameCount
            self.loopCount = loopCount
        }

        /// The whole file, once.
        public static let wholeFile = Region()
        /// A `loopCount` that never runs out.
        public static let endless = Int.max
    }

    /// What the player is doing, as ``FilePlayerUnit/state`` reports it.
    public enum State: Int, Sendable, CustomStringConvertible {
        /// Nothing scheduled (never, or after ``stop()``).
        case stopped
        /// Scheduled, its start time not reached (or the reader not ready yet).
        case scheduled
        /// The schedule is sounding: its start time reached and its frames being rendered.
        case playing
        /// Playing, but held by ``FilePlayerUnit/pause()`` (faded out) until ``FilePlayerUnit/resume()``.
        case paused
        /// The schedule played to its end.
        case finished

        public var description: String { ["stopped", "scheduled", "playing", "paused", "finished"][rawValue] }
    }

    /// Fades of pause, resume, seek, stop and replacement.
    public static let rampTime = 0.005

    /// The path of the file played, as the reader gives it.
    public let path: String
    /// The file's length at the unit's rate (an estimate when the reader says it is not exact).
    public let fileFrames: Int64
    /// The rate the unit plays at, in Hz: its output's, the file's unless the reader resamples.
    public let sampleRate: Double
    /// The reader's ``AudioFileReader/isFrameCountExact``, taken when the unit is made (as ``fileFrames`` is).
    private let fileFramesAreExact: Bool

    /// A schedule, as the control side made it and as both other sides read it.
    struct Command: Equatable {
        var generation = 0
        var active = false
        /// `Int64.min`: as soon as the reader has frames.
        var startTime = Int64.min
        var regionStart: Int64 = 0
        /// -1: to the end of the file.
        var regionLength: Int64 = -1
        /// Where the stream starts in the file: the region's start, or later after a seek.
        var firstFrame: Int64 = 0
        /// Passes after the one `firstFrame` is in.
        var loopsLeft = 0
    }

    // Control side (any thread but the render thread): the latest command, read by the reader under the lock.
    private let control = Locked(ControlState())
    private struct ControlState {
        var command = Command()
        var onEnd: (@Sendable () -> Void)?
    }
    /// The latest command for the render thread: a sequence lock (odd while being written) over plain atomics.
    private let published = PublishedCommand()
    private let latestGeneration = Atomic<Int>(0)
    private let latestActive = Atomic<Bool>(false)
    private let pauseRequested = Atomic<Bool>(false)

    /// The ring, reader → render: made in prepare and emptied by reset, while neither side runs; while they run,
    /// both only read the reference (the reader writes frames, the render thread reads them: the ring's counters
    /// hand them over).
    private let ring: RenderThreadBound<FrameRingBuffer>

    // Reader side.
    /// The reader thread's while it reads ahead, the control side's in prepare and reset.
    private let readerState: RenderThreadBound<ReaderState>
    private struct ReaderState {
        let reader: any AudioFileReader
        var scratch: PCMBuffer
        var serving = Command()
        var readerPosition: Int64 = 0
        var passLeft: Int64 = 0
        var passProduced: Int64 = 0
        var readerLoopsLeft = 0
        var startIndex = 0

        mutating func seekReader(to frame: Int64) throws(AudioError) {
            if readerPosition != frame {
                try reader.seek(toFrame: frame)
                readerPosition = frame
            }
        }
    }
    /// The generation the reader serves (-1: none yet); with the two below, read by ``wantsReadAhead`` on the
    /// render thread.
    private let servingGeneration = Atomic<Int>(-1)
    private let readerAtEnd = Atomic<Bool>(false)
    private let notifiedCompletions = Atomic<Int>(0)
    /// (generation, ring index) packed: where the generation's frames begin, and where they end.
    private let startMark = Atomic<UInt64>(FilePlayerUnit.noMark)
    private let endMark = Atomic<UInt64>(FilePlayerUnit.noMark)

    // Render side.
    private enum Phase { case idle, waiting, playing, done }
    /// The render thread's, the control side's in prepare and reset.
    private let renderState = RenderThreadBound(RenderState())
    private struct RenderState {
        var current = Command()
        var pending = Command()
        var hasPending = false
        /// The schedule taken replaces one that was heard: it fades in.
        var fadeInNext = false
        var phase = Phase.idle
        var played: Int64 = 0
        var skipOwed: Int64 = 0
        var gain: Float = 0
        var gainStep: Float = 1
    }
    // Published by the render thread.
    private let renderedGeneration = Atomic<Int>(0)
    private let renderedState = Atomic<Int>(State.stopped.rawValue)
    private let renderedPosition = Atomic<Int64>(0)
    private let renderedPlayed = Atomic<Int64>(0)
    private let finishedGeneration = Atomic<Int>(0)
    private let completions = Atomic<Int>(0)
    private let underrunCount = Atomic<Int>(0)
    private let renderedEnd = Atomic<Int64>(0)

    /// Opens `path` and reads its header.
    /// - Parameters:
    ///   - path: the audio file to play.
    ///   - sampleRate: the rate to play at, resampling when the file's differs (nil: the file's rate).
    ///   - channelCount: the channels to play (nil: the file's; others are mixed as FFmpeg mixes them).
    /// - Throws: ``/AudioCore/AudioError`` from ``/AudioCodecs/AudioFile/open(path:sampleRate:channelCount:)``
    ///   (missing, unreadable, unsupported or corrupt file).
    public convenience init(path: String, sampleRate: Double? = nil, channelCount: Int? = nil) throws(AudioError) {
        try self.init(reader: AudioFile.open(path: path, sampleRate: sampleRate, channelCount: channelCount))
    }

    /// Plays what `reader` reads; the unit owns it from here.
    public init(reader: any AudioFileReader) throws(AudioError) {
        path = reader.path
        fileFrames = reader.frameCount
        fileFramesAreExact = reader.isFrameCountExact
        sampleRate = reader.sampleRate
        let f = try StreamFormat.graph(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        ring = RenderThreadBound(FrameRingBuffer(channelCount: f.channelCount, capacity: 1))
        readerState = RenderThreadBound(
            ReaderState(reader: reader, scratch: PCMBuffer(channelCount: f.channelCount, capacity: 1)))
        core = UnitCore(kind: "filePlayer", inputs: [], outputs: [f])
    }

    /// What reads the file: the reader thread's; use it elsewhere only while nothing reads ahead or renders.
    public var reader: any AudioFileReader { readerState.whileStopped.reader }

    // MARK: Control

    /// Plays `region` from the sample time `at` (nil: as soon as its first frames are read), replacing whatever
    /// was scheduled or playing (that fades out first). Any thread but the render thread; before or after the
    /// graph starts.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a region outside the file (when its length is
    ///   exact), an empty region, a negative start, loop count or sample time.
    public func schedule(_ region: Region = .wholeFile, at sampleTime: Int64? = nil) throws(AudioError) {
        let exact = fileFramesAreExact
        guard region.startFrame >= 0, !exact || region.startFrame < fileFrames else {
            throw AudioError(
                .invalidParameter,
                "region start \(region.startFrame) is outside the file (\(fileFrames) frames at \(Int(sampleRate)) Hz)")
        }
        if let count = region.frameCount {
            guard count > 0 else { throw AudioError(.invalidParameter, "a region needs at least one frame, got \(count)") }
            guard !exact || region.startFrame + count <= fileFrames else {
                throw AudioError(
                    .invalidParameter,
                    "region \(region.startFrame) + \(count) frames runs past the file's end (\(fileFrames) frames)")
            }
        }
        guard region.loopCount >= 0 else {
            throw AudioError(.invalidParameter, "loop count must be 0 or more (Region.endless for ever), got \(region.loopCount)")
        }
        guard sampleTime.map({ $0 >= 0 }) ?? true else {
            throw AudioError(.invalidParameter, "a start time is a sample time (0 or more), got \(sampleTime!)")
        }
        issue { c in
            c.active = true
            c.startTime = sampleTime ?? .min
            c.regionStart = region.startFrame
            c.regionLength = region.frameCount ?? -1
            c.firstFrame = region.startFrame
            c.loopsLeft = region.loopCount
        }
    }

    /// Moves playback to `frame` of the file, inside the scheduled region: at once if playing (faded), when
    /// resumed if paused, as the start point if the start time is still ahead. Loops left stay as they were.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` when nothing is scheduled or it has finished;
    ///   `.invalidParameter` for a frame outside the region.
    public func seek(toFrame frame: Int64) throws(AudioError) {
        try control.withLock { (c: inout ControlState) throws(AudioError) in
            // Read under the control lock: no command can come between.
            let status = state
            guard status != .stopped, status != .finished else {
                throw AudioError(.invalidState, "nothing is playing to seek in (\(status)): schedule a region first")
            }
            var command = c.command
            let end = command.regionLength >= 0 ? command.regionStart + command.regionLength : fileFrames
            guard frame >= command.regionStart, frame < end else {
                throw AudioError(.invalidParameter, "frame \(frame) is outside the scheduled region (\(command.regionStart) ..< \(end))")
            }
            if status == .playing || status == .paused || command.startTime == .min {
                // Under way (or to start at once anyway): from the frame playing now, at once, with the loops it
                // has left.
                let playedNow = renderedPlayed.load(ordering: .relaxed)
                command.loopsLeft = loopsLeft(after: playedNow, of: command)
                command.startTime = .min
            }
            command.firstFrame = frame
            publish(&c, command)
        }
    }

    /// Holds playback where it is (faded out); the start time of a schedule not yet started passes meanwhile.
    public func pause() { pauseRequested.store(true, ordering: .releasing) }

    /// Goes on from where ``pause()`` held it (faded in).
    public func resume() { pauseRequested.store(false, ordering: .releasing) }

    /// Ends what is scheduled or playing (faded out). Not a finish: ``onEnd`` is not called.
    public func stop() {
        issue { c in c.active = false }
    }

    /// Called on the reader's thread (the read-ahead worker, or the offline renderer's before its next cycle) after
    /// a schedule has played to its end, once per schedule.
    public var onEnd: (@Sendable () -> Void)? {
        get { control.withLock { $0.onEnd } }
        set { control.withLock { $0.onEnd = newValue } }
    }

    /// What the player is doing now: the latest command as the render thread last carried it out (``State/scheduled``
    /// until the render has taken a new schedule). Any thread.
    public var state: State {
        let generation = latestGeneration.load(ordering: .acquiring)
        guard latestActive.load(ordering: .acquiring) else { return .stopped }
        if renderedGeneration.load(ordering: .acquiring) != generation { return .scheduled }
        let s = State(rawValue: renderedState.load(ordering: .acquiring))!
        return s == .playing && pauseRequested.load(ordering: .relaxed) ? .paused : s
    }

    /// The file frame playing now (the next the render plays; at a schedule's first frame before it starts).
    public var position: Int64 {
        let command = control.withLock { $0.command }
        guard renderedGeneration.load(ordering: .acquiring) == command.generation else { return command.firstFrame }
        return renderedPosition.load(ordering: .acquiring)
    }

    /// ``position`` in seconds.
    public var currentTime: Double { Double(position) / sampleRate }

    /// Schedules played to their end since the unit was made.
    public var completedSchedules: Int { completions.load(ordering: .acquiring) }

    /// The sample time after the last cycle rendered: the player's own timeline, which is the graph's unless a
    /// pulling unit (a time-pitch, a converter) reads it at its own pace — then schedule on this.
    public var renderedSampleTime: Int64 { renderedEnd.load(ordering: .acquiring) }

    /// Render cycles that found the reader behind (their missing frames were skipped to stay on the timeline).
    public var underruns: Int { underrunCount.load(ordering: .relaxed) }

    /// Frames to the end of the latest schedule, counted on the timeline from sample time 0: nil when nothing is
    /// scheduled or it loops without end.
    public var totalFrames: Int64? {
        let c = control.withLock { $0.command }
        guard c.active, c.loopsLeft != Region.endless else { return nil }
        let length = c.regionLength >= 0 ? c.regionLength : fileFrames - c.regionStart
        let first = c.regionStart + length - c.firstFrame
        let (frames, overflow) = (length * Int64(c.loopsLeft) + first).addingReportingOverflow(c.startTime == .min ? 0 : c.startTime)
        return overflow ? nil : frames
    }

    /// True when nothing is left to play: the latest schedule reached its end, or nothing is scheduled.
    public var hasFinished: Bool {
        let generation = latestGeneration.load(ordering: .acquiring)
        return !latestActive.load(ordering: .acquiring) || finishedGeneration.load(ordering: .acquiring) == generation
    }

    public var propertyNames: [String] {
        commonPropertyNames + ["path", "frameCount", "duration", "state", "position", "hasFinished", "underruns"]
    }

    public func property(_ name: String) throws(AudioError) -> PropertyValue {
        switch name {
        case "path": .string(path)
        case "frameCount": .int(Int(fileFrames))
        case "duration": .double(Double(fileFrames) / sampleRate)
        case "state": .string(state.description)
        case "position": .int(Int(position))
        case "hasFinished": .bool(hasFinished)
        case "underruns": .int(underruns)
        default: try commonProperty(name)
        }
    }

    private func issue(_ change: (inout Command) -> Void) {
        control.withLock { c in
            var command = c.command
            change(&command)
            publish(&c, command)
        }
    }

    /// Under the control lock: a new generation, for the reader (the lock) and the render thread (the sequence lock).
    private func publish(_ c: inout ControlState, _ command: Command) {
        var command = command
        command.generation = c.command.generation + 1
        c.command = command
        published.store(command)
        latestActive.store(command.active, ordering: .releasing)
        latestGeneration.store(command.generation, ordering: .releasing)
    }

    /// Passes left after `played` frames of `c`'s stream.
    private func loopsLeft(after played: Int64, of c: Command) -> Int {
        let end = c.regionLength >= 0 ? c.regionStart + c.regionLength : fileFrames
        let first = end - c.firstFrame
        if played < first || c.loopsLeft == Region.endless { return c.loopsLeft }
        let passes = 1 + (played - first) / max(end - c.regionStart, 1)
        return max(0, c.loopsLeft - Int(passes))
    }

    // MARK: Reading

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        // Room for many cycles ahead, at least ~1.4 s at 48 kHz: a loop's seek back decodes meanwhile.
        let channels = readerState.whileStopped.reader.channelCount
        ring.whileStopped = FrameRingBuffer(channelCount: channels, capacity: max(16 * spec.maximumFrames, 65536))
        readerState.whileStopped.scratch = PCMBuffer(channelCount: channels, capacity: 16384)
        renderState.whileStopped.gainStep = 1 / Float(max(1, Int((Self.rampTime * spec.sampleRate).rounded())))
    }

    public func reset() {
        // Neither side runs: the current schedule starts over (both sides take it again as new).
        ring.whileStopped.reset()
        readerState.whileStopped.serving = Command()
        servingGeneration.store(-1, ordering: .releasing)
        readerAtEnd.store(false, ordering: .releasing)
        startMark.store(Self.noMark, ordering: .releasing)
        endMark.store(Self.noMark, ordering: .releasing)
        renderState.whileStopped.current = Command()
        renderState.whileStopped.hasPending = false
        renderState.whileStopped.fadeInNext = false
        renderState.whileStopped.phase = .idle
        renderState.whileStopped.played = 0
        renderState.whileStopped.skipOwed = 0
        renderState.whileStopped.gain = 0
        renderedGeneration.store(0, ordering: .releasing)
        renderedState.store(State.stopped.rawValue, ordering: .releasing)
        finishedGeneration.store(0, ordering: .releasing)
    }

    public var prefetchesAhead: Bool { true }

    /// Reads the latest schedule's frames until `frames` of them are ready (or its end). Reader thread.
    public func prefetch(frames: Int) throws(AudioError) {
        notifyCompletions()
        try read(frames: frames, &readerState.onWorkerThread)
    }

    private func read(frames: Int, _ r: inout ReaderState) throws(AudioError) {
        let ring = self.ring.onWorkerThread
        if latestGeneration.load(ordering: .acquiring) != servingGeneration.load(ordering: .relaxed) {
            try takeCommand(&r, ring)
        }
        guard r.serving.active else { return }
        var first = true
        while !readerAtEnd.load(ordering: .relaxed), latestGeneration.load(ordering: .relaxed) == r.serving.generation {
            // A pass read to its end is over at once — the next, or the end marked — so the cycle that plays the
            // last frame knows it is the last, whoever reads and however little is asked for.
            if r.passLeft == 0 {
                if r.readerLoopsLeft > 0, r.passProduced > 0 {
                    if r.readerLoopsLeft != Region.endless { r.readerLoopsLeft -= 1 }
                    try r.seekReader(to: r.serving.regionStart)
                    r.passLeft = passLength(from: r.serving.regionStart, of: r.serving)
                    r.passProduced = 0
                    continue
                }
                readerAtEnd.store(true, ordering: .relaxed)
                endMark.store(Self.mark(r.serving.generation, ring.framesWritten), ordering: .releasing)
                break
            }
            if ring.framesWritten - max(ring.framesRead, r.startIndex) >= frames { break }
            // Asked to fill (a reader a time-pitch pulls from, offline; a worker's top-up): in large pieces — once a
            // quarter of the ring is free, then to the full — not the few frames the last cycle took. Not while the
            // ring still holds an earlier schedule's frames (the render drops them): then it fills to the full.
            if first, frames >= ring.capacity, ring.framesRead >= r.startIndex, ring.availableToWrite < FileSourceUnit.topUpFrames(ring) {
                break
            }
            first = false
            var want = min(ring.availableToWrite, r.scratch.capacity)
            if r.passLeft > 0 { want = Int(min(Int64(want), r.passLeft)) }
            if want == 0 { break }
            let got = try r.reader.read(into: r.scratch.view(frames: want))
            if got == 0 {
                r.passLeft = 0  // the end of the file ends the pass
                continue
            }
            ring.write(r.scratch.view(frames: got))
            r.readerPosition += Int64(got)
            r.passProduced += Int64(got)
            if r.passLeft > 0 { r.passLeft -= Int64(got) }
        }
    }

    /// Frames from `frame` to the end of the command's region: its length, or the file's end when the file's
    /// length is exact; -1 when only reading finds the end.
    private func passLength(from frame: Int64, of command: Command) -> Int64 {
        if command.regionLength >= 0 { return command.regionStart + command.regionLength - frame }
        return fileFramesAreExact ? max(0, fileFrames - frame) : -1
    }

    private func takeCommand(_ r: inout ReaderState, _ ring: FrameRingBuffer) throws(AudioError) {
        let command = control.withLock { $0.command }
        // What can fail first: a seek that throws leaves the command untaken, to be tried again.
        if command.active { try r.seekReader(to: command.firstFrame) }
        r.serving = command
        servingGeneration.store(command.generation, ordering: .relaxed)
        readerAtEnd.store(false, ordering: .relaxed)
        guard command.active else { return }
        r.passLeft = passLength(from: command.firstFrame, of: command)
        r.passProduced = 0
        r.readerLoopsLeft = command.loopsLeft
        // Everything written before this index belongs to earlier schedules; the render drops it.
        r.startIndex = ring.framesWritten
        startMark.store(Self.mark(command.generation, r.startIndex), ordering: .releasing)
    }

    private func notifyCompletions() {
        let done = completions.load(ordering: .acquiring)
        let notified = notifiedCompletions.load(ordering: .relaxed)
        guard done != notified else { return }
        notifiedCompletions.store(done, ordering: .relaxed)
        if let handler = control.withLock({ $0.onEnd }) {
            for _ in notified..<done { handler() }
        }
    }

    public func isReadyAhead(frames: Int) -> Bool {
        if !latestActive.load(ordering: .acquiring) { return true }
        let generation = latestGeneration.load(ordering: .acquiring)
        if Self.generation(endMark.load(ordering: .acquiring)) == Self.generation(of: generation) { return true }
        let start = startMark.load(ordering: .acquiring)
        guard Self.generation(start) == Self.generation(of: generation) else { return false }
        let ring = self.ring.onRenderThread
        // Asked for a full ring: as full as a fill makes it (a fill waits for a quarter of it to be free, unless an
        // earlier schedule's frames are still there).
        let fillWaits = frames >= ring.capacity && ring.framesRead >= Self.index(start)
        return ring.framesWritten - max(ring.framesRead, Self.index(start)) >= frames
            || ring.availableToWrite < (fillWaits ? FileSourceUnit.topUpFrames(ring) : 1)
    }

    public var wantsReadAhead: Bool {
        if completions.load(ordering: .relaxed) != notifiedCompletions.load(ordering: .relaxed) { return true }
        if latestGeneration.load(ordering: .relaxed) != servingGeneration.load(ordering: .relaxed) { return true }
        return latestActive.load(ordering: .relaxed) && !readerAtEnd.load(ordering: .relaxed)
            && ring.onRenderThread.availableToWrite >= ring.onRenderThread.capacity / 2
    }

    // MARK: Rendering

    public func render(_ context: RenderContext) {
        render(context, &renderState.onRenderThread)
    }

    private func render(_ context: RenderContext, _ r: inout RenderState) {
        let ring = self.ring.onRenderThread
        let out = context.output(0)
        let n = context.frameCount
        out.clear()
        if let c = published.load(), c.generation != r.current.generation {
            r.pending = c
            r.hasPending = true
        }
        let paused = pauseRequested.load(ordering: .acquiring)
        let t0 = context.timeStamp.sampleTime
        var i = 0
        while i < n {
            if r.hasPending {
                // What plays fades out first; then the new schedule is taken.
                if r.phase == .playing, r.gain > 0 {
                    r.fadeInNext = true
                    let (got, wanted) = play(&r, out, from: i, frames: n - i, target: 0)
                    i += got
                    if got == wanted, r.gain > 0 { continue }
                }
                adopt(&r)
                continue
            }
            switch r.phase {
            case .idle, .done:
                dropStale(r.current.generation)
                i = n
            case .waiting:
                guard readerHasStarted(r.current.generation) else {
                    i = n
                    break
                }
                let now = t0 + Int64(i)
                if r.current.startTime == .min {
                    // As soon as the reader has frames (or has found there are none).
                    guard readable(r.current.generation) > 0 || streamEnded(r.current.generation) else {
                        i = n
                        break
                    }
                    r.current.startTime = now
                }
                if r.current.startTime > now {
                    i += Int(min(Int64(n - i), r.current.startTime - now))
                    continue
                }
                r.skipOwed = now - r.current.startTime
                r.phase = .playing
                // A region's own start, from silence, plays as it is; anywhere else, or in place of sound, it fades in.
                let asItIs = r.current.firstFrame == r.current.regionStart && r.skipOwed == 0 && !r.fadeInNext
                r.gain = asItIs && !paused ? 1 : 0
                r.fadeInNext = false
            case .playing:
                if r.skipOwed > 0 {
                    let skipped = ring.discard(Int(min(r.skipOwed, Int64(readable(r.current.generation)))))
                    r.skipOwed -= Int64(skipped)
                    r.played += Int64(skipped)
                }
                if paused, r.gain == 0 {
                    i = n
                    break
                }
                let (got, wanted) = play(&r, out, from: i, frames: n - i, target: paused ? 0 : 1)
                i += got
                if streamEnded(r.current.generation) {
                    r.phase = .done
                    finishedGeneration.store(r.current.generation, ordering: .releasing)
                    completions.add(1, ordering: .releasing)
                } else if got < wanted {
                    // The reader is behind (or a newer schedule's frames follow, taken next cycle): the missing
                    // frames are skipped when they come, so what plays stays on the timeline — unless pausing.
                    if !paused {
                        underrunCount.add(1, ordering: .relaxed)
                        r.skipOwed += Int64(n - i)
                    }
                    i = n
                }
            }
        }
        publishRenderState(r)
        renderedEnd.store(t0 + Int64(n), ordering: .releasing)
    }

    /// Reads up to `frames` frames into `out` at `i`, the gain moving toward `target` by one step a frame: a fade-in
    /// steps before each frame (1/n … 1), a fade-out after (1 … 1/n), so every frame taken is heard, and a fade-out
    /// takes no more frames than it needs. Returns the frames read and the frames asked for.
    @inline(__always)
    private func play(
        _ r: inout RenderState, _ out: BufferView, from i: Int, frames: Int, target: Float
    ) -> (Int, Int) {
        var m = frames
        if target == 0 { m = min(m, max(1, Int((r.gain / r.gainStep).rounded()))) }
        if m == 0 { return (0, 0) }
        let limit = readable(r.current.generation)
        let got = ring.onRenderThread.read(into: out.slice(from: i, frames: min(m, limit)))
        r.played += Int64(got)
        if r.gain == target && r.gain == 1 { return (got, m) }
        let start = r.gain
        var end = start
        let rising = target > start
        let gainStep = r.gainStep
        for c in 0..<out.channelCount {
            let p = out[c].baseAddress! + i
            var g = start
            for j in 0..<got {
                if rising { g = Self.step(g, toward: target, by: gainStep) }
                p[j] *= g
                if !rising { g = Self.step(g, toward: target, by: gainStep) }
            }
            end = g
        }
        r.gain = end
        return (got, m)
    }

    @inline(__always)
    private static func step(_ g: Float, toward target: Float, by step: Float) -> Float {
        let next = target > g ? min(target, g + step) : max(target, g - step)
        return abs(next - target) < step / 2 ? target : next
    }

    private func adopt(_ r: inout RenderState) {
        r.hasPending = false
        r.current = r.pending
        r.played = 0
        r.skipOwed = 0
        r.gain = 0
        r.phase = r.current.active ? .waiting : .idle
        if !r.current.active { r.fadeInNext = false }
        dropStale(r.current.generation)
    }

    /// Whether the reader has begun the schedule of `generation` (the current one); drops what it read for earlier
    /// ones.
    private func readerHasStarted(_ generation: Int) -> Bool {
        dropStale(generation)
        return Self.generation(startMark.load(ordering: .acquiring)) == Self.generation(of: generation)
    }

    /// Drops the frames in the ring that belong to schedules before `generation` (the current one).
    private func dropStale(_ generation: Int) {
        let ring = self.ring.onRenderThread
        // The ring's count first: any frame of the current schedule in it was written after the reader marked
        // the schedule's start, so a mark that is not the current schedule's means every frame counted is stale.
        let written = ring.framesWritten
        let start = startMark.load(ordering: .acquiring)
        let limit = Self.generation(start) == Self.generation(of: generation) ? Self.index(start) : written
        ring.discard(limit - ring.framesRead)
    }

    /// Frames in the ring that belong to the schedule of `generation` (the current one): up to where a newer
    /// schedule's begin, if the reader has begun one. (The ring's count is loaded before the mark, as in
    /// ``dropStale(_:)``.)
    private func readable(_ generation: Int) -> Int {
        let ring = self.ring.onRenderThread
        let written = ring.framesWritten
        let start = startMark.load(ordering: .acquiring)
        let limit =
            Self.generation(start) == Self.generation(of: generation) ? written : min(written, Self.index(start))
        return max(0, limit - ring.framesRead)
    }

    private func streamEnded(_ generation: Int) -> Bool {
        let end = endMark.load(ordering: .acquiring)
        return Self.generation(end) == Self.generation(of: generation)
            && ring.onRenderThread.framesRead >= Self.index(end)
    }

    private func publishRenderState(_ r: RenderState) {
        let s: State =
            switch r.phase {
            case .idle: .stopped
            case .waiting: .scheduled
            case .playing: .playing
            case .done: .finished
            }
        renderedPlayed.store(r.played, ordering: .relaxed)
        renderedPosition.store(fileFrame(afterPlaying: r.played, of: r), ordering: .relaxed)
        renderedState.store(s.rawValue, ordering: .relaxed)
        renderedGeneration.store(r.current.generation, ordering: .releasing)
    }

    /// The file frame `k` frames into the current schedule's stream.
    private func fileFrame(afterPlaying k: Int64, of r: RenderState) -> Int64 {
        let c = r.current
        let end = c.regionLength >= 0 ? c.regionStart + c.regionLength : fileFrames
        let first = end - c.firstFrame
        if k < first { return c.firstFrame + k }
        let length = max(end - c.regionStart, 1)
        if r.phase == .done { return end }
        return c.regionStart + (k - first) % length
    }

    // MARK: Marks

    // Computed, not stored: a stored static is initialised lazily (a once-lock) by whichever thread reads it first.
    private static var noMark: UInt64 { .max }
    private static var generationBits: UInt64 { 24 }
    private static var indexMask: UInt64 { 0xFF_FFFF_FFFF }

    private static func generation(of g: Int) -> UInt64 { UInt64(truncatingIfNeeded: g) & ((1 << generationBits) - 1) }
    private static func mark(_ g: Int, _ index: Int) -> UInt64 {
        generation(of: g) << (64 - generationBits) | (UInt64(index) & indexMask)
    }
    private static func generation(_ mark: UInt64) -> UInt64 { mark == noMark ? .max : mark >> (64 - generationBits) }
    private static func index(_ mark: UInt64) -> Int { Int(mark & indexMask) }
}

/// A ``FilePlayerUnit/Command`` behind a sequence lock: one writer (under the control lock), one reader (the render
/// thread), which never waits: a read that meets a write in progress returns nil and is tried again next cycle.
private final class PublishedCommand: Sendable {
    private let sequence = Atomic<Int>(0)
    private let generation = Atomic<Int>(0)
    private let active = Atomic<Bool>(false)
    private let startTime = Atomic<Int64>(.min)
    private let regionStart = Atomic<Int64>(0)
    private let regionLength = Atomic<Int64>(-1)
    private let firstFrame = Atomic<Int64>(0)
    private let loopsLeft = Atomic<Int>(0)

    func store(_ c: FilePlayerUnit.Command) {
        let s = sequence.load(ordering: .relaxed)
        sequence.store(s + 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        generation.store(c.generation, ordering: .relaxed)
        active.store(c.active, ordering: .relaxed)
        startTime.store(c.startTime, ordering: .relaxed)
        regionStart.store(c.regionStart, ordering: .relaxed)
        regionLength.store(c.regionLength, ordering: .relaxed)
        firstFrame.store(c.firstFrame, ordering: .relaxed)
        loopsLeft.store(c.loopsLeft, ordering: .relaxed)
        sequence.store(s + 2, ordering: .releasing)
    }

    func load() -> FilePlayerUnit.Command? {
        let s = sequence.load(ordering: .acquiring)
        if s & 1 != 0 { return nil }
        let c = FilePlayerUnit.Command(
            generation: generation.load(ordering: .relaxed), active: active.load(ordering: .relaxed),
            startTime: startTime.load(ordering: .relaxed), regionStart: regionStart.load(ordering: .relaxed),
            regionLength: regionLength.load(ordering: .relaxed), firstFrame: firstFrame.load(ordering: .relaxed),
            loopsLeft: loopsLeft.load(ordering: .relaxed))
        atomicMemoryFence(ordering: .acquiring)
        return sequence.load(ordering: .relaxed) == s ? c : nil
    }
}
