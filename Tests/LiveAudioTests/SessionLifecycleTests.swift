import AudioCore
@testable import LiveAudio
import Testing

/// The lifecycle both sessions share, driven alone: every transition, and every stop arriving during a start.
@Suite struct SessionLifecycleTests {
    @Test func aStartRunsAndAStopStops() throws {
        var l = SessionLifecycle(name: "the session")
        try l.startRequested()
        #expect(l.state == .starting(stopRequested: false))
        try l.checkStarting()
        #expect(l.startEnded(succeeded: true).isEmpty)
        #expect(l.state == .running)
        #expect(throws: AudioError.self) { try l.startRequested() }
        #expect(l.stopRequested() == .stop)
        #expect(l.state == .stopping)
        #expect(l.stopRequested() == .waitForStop, "a second stop waits for the first")
        _ = l.stopEnded()
        #expect(l.state == .stopped)
        #expect(l.stopRequested() == .nothing)
        do {
            try l.startRequested()
            Issue.record("a stopped session started")
        } catch {
            #expect(error.code == .invalidState && error.message == "the session was stopped")
        }
    }

    @Test func aFailedStartLeavesItIdleToStartAgain() throws {
        var l = SessionLifecycle(name: "the session")
        try l.startRequested()
        do {
            try l.startRequested()
            Issue.record("a start during a start was taken")
        } catch {
            #expect(error.message == "the session was already started")
        }
        _ = l.startEnded(succeeded: false)
        #expect(l.state == .idle)
        try l.startRequested()
        _ = l.startEnded(succeeded: true)
        #expect(l.state == .running)
    }

    @Test func aStopBeforeAnyStartLeavesItStopped() {
        var l = SessionLifecycle(name: "the session")
        #expect(l.stopRequested() == .nothing)
        #expect(l.state == .stopped)
        #expect(throws: AudioError.self) { try l.startRequested() }
    }

    @Test func aStopDuringAStartThatThenFailsEndsStopped() throws {
        var l = SessionLifecycle(name: "the session")
        try l.startRequested()
        #expect(l.stopRequested() == .interruptStart)
        #expect(l.stopRequested() == .waitForStop, "a second stop leaves the interrupting to the first")
        do {
            try l.checkStarting()
            Issue.record("the start went on after the stop")
        } catch {
            #expect(error.message == "the session was stopped while it started")
        }
        _ = l.startEnded(succeeded: false)
        #expect(l.state == .stopped && !l.mustStopAfterStart)
    }

    @Test func aStopDuringAStartThatGotThroughStopsWhatItStarted() throws {
        var l = SessionLifecycle(name: "the session")
        try l.startRequested()
        #expect(l.stopRequested() == .interruptStart)
        _ = l.startEnded(succeeded: true)
        #expect(l.state == .stopping && l.mustStopAfterStart)
        #expect(l.stopRequested() == .waitForStop)
        _ = l.stopEnded()
        #expect(l.state == .stopped)
    }

    /// The waiting, with the lock: stops that wait for a start, and for another stop, are resumed when it ends.
    @Test func waitingStopsAreResumed() async throws {
        let l = LockedLifecycle(name: "the session")
        try l.startRequested()
        #expect(l.stopRequested() == .interruptStart)
        #expect(l.stopRequested() == .waitForStop)
        async let interrupting = l.waitForStart()
        async let waiting: Void = l.waitForStop()
        try await Task.sleep(nanoseconds: 50_000_000)
        l.startEnded(succeeded: true)  // got through: the interrupting stop stops it
        #expect(await interrupting)
        l.stopEnded()
        await waiting
        #expect(l.state == .stopped)
        // Nothing to wait for any more: both return at once.
        #expect(await l.waitForStart() == false)
        await l.waitForStop()
    }
}

/// The song's region given in seconds: converted at the session's rate, once it is known.
@Suite struct KaraokeRegionTests {
    @Test func secondsBecomeFramesAtTheSessionsRate() {
        let region = KaraokeSession.RegionInSeconds(start: 1.5, end: 20, loopCount: 2)
        #expect(region.frames(at: 48_000) == FilePlayerUnit.Region(startFrame: 72_000, frameCount: 888_000, loopCount: 2))
        #expect(region.frames(at: 44_100) == FilePlayerUnit.Region(startFrame: 66_150, frameCount: 815_850, loopCount: 2))
        #expect(KaraokeSession.RegionInSeconds().frames(at: 48_000) == .wholeFile)
    }
}

/// A session's graph as named stages.
@Suite struct GraphPartsTests {
    @Test func stagesConnectByNameAndAFailingStageNamesItself() throws {
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let graph = try RenderGraph(format: format)
        var g = GraphParts(graph)
        try g.add("tone", ToneUnit(format: format))
        try g.add("trim", GainUnit(format: format, gain: -6), from: ["tone"])
        try g.add("meter", MeterUnit(format: format), from: ["trim"], sink: true)
        try g.output(from: "trim")
        #expect(graph.renderOrder == ["tone", "trim", "meter"])
        #expect(graph.sinks == [g["meter"]!])
        do {
            try g.add("mix", MixerUnit(format: format, inputs: 2), from: ["tone", "nothing"])
            Issue.record("a stage fed by no stage was added")
        } catch {
            #expect(error.message.hasPrefix("part 'mix' (mixer): ") && error.message.contains("'nothing'"), "\(error)")
        }
        let mono = try StreamFormat.graph(sampleRate: 44_100, channelCount: 1)
        do {
            try g.add("other", GainUnit(format: mono), from: ["tone"])
            Issue.record("a stage at another rate was connected")
        } catch {
            #expect(error.message.hasPrefix("part 'other' (gain): "), "\(error)")
        }
    }
}
